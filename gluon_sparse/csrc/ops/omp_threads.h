/*!
 * Parallelism by the amount of work, for every CPU kernel of the operator library.
 *
 * Team size. MXNet runs operators on its engine's worker threads, whose
 * OpenMP team size it sets itself (MXNet 1.9.1 on x86, without
 * OMP_NUM_THREADS, gives half the logical CPUs: 1 thread on a 2-core
 * machine), so a bare `#pragma omp parallel` may run on a single thread.
 * The largest team here is therefore named explicitly (omp_threads()):
 *   MXNET_OMP_MAX_THREADS, if set (MXNet's own cap, so users keep one knob);
 *   else OMP_NUM_THREADS, if set (its first value, as OpenMP reads it);
 *   else the CPUs this process may run on (omp_get_num_procs honours the
 *   affinity mask, e.g. taskset or a container's cpuset).
 *
 * Grain. A parallel region is not free: waking the team costs microseconds,
 * and after the region libgomp's workers spin (GOMP_SPINCOUNT, ~0.1-1 ms)
 * on the cores that MXNet's engine threads, the Python thread and the next
 * operator need. A small step (a batch of 10 rows: ~100 rows x 128 columns)
 * paid for that on every kernel. So a kernel runs serially, with no parallel
 * region at all, below two grains of work, and above that with a team of no
 * more than work / grain threads (capped by omp_threads()). The grain is in
 * "element operations" (one float of one row through one kernel step).
 * benchmarks/bench_grain.py measures it: each kernel forced serial and forced
 * onto 2 threads (test knob below) at growing work, inside MXNet's engine.
 * kGrain = 2^15 keeps the thresholds the kernels had before (2-thread regions
 * from 2^16 element operations), with which eager Adam reached 89-92% of copy
 * bandwidth on the 2-core x86 machine. Its re-measurement on 2026-11-23 ran
 * at load average 8 (other jobs on both cores): two threads then lost at every
 * size up to 2^21, so it could not place the crossover lower or higher; see
 * RESULTS.md, "Grain". Re-run bench_grain.py on a quiet machine to refine it.
 * The defaults are the fast path: no environment variable is needed.
 *
 * Results never depend on the team: every kernel gives each output element
 * to exactly one thread and computes it with the same operations in the same
 * order, so serial and parallel runs are bitwise equal (tests/test_grain.py
 * compares them through the test knob).
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OMP_THREADS_H_
#define GLUON_SPARSE_CSRC_OPS_OMP_THREADS_H_

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace gluon_sparse {

/*!
 * \brief Element operations below which one more thread does not pay: a kernel
 *        needs 2 x kGrain of work for a team of two (see the file comment).
 */
constexpr int64_t kGrain = int64_t(1) << 15;

/*! \brief Largest team for this library's parallel regions (>= 1, computed once). */
int omp_threads();

/*! \brief The grain in force: kGrain, unless the test knob overrides it. */
int64_t grain();

/*!
 * \brief Threads for `work` element operations over `items` independent items:
 *        1 below two grains, else min(work / grain, items, omp_threads()).
 */
int team_size(int64_t work, int64_t items);

/*!
 * \brief Call body(begin, end) on contiguous blocks of [0, n), one per thread
 *        of a team of `team` (serially, with no parallel region, when team <= 1).
 */
template <typename Body>
void parallel_blocks(int64_t n, int team, Body&& body) {
  if (team <= 1 || n <= 1) {
    body(int64_t(0), n);
    return;
  }
#pragma omp parallel num_threads(team)
  {
    const int64_t threads = omp_get_num_threads();
    const int64_t tid = omp_get_thread_num();
    body(n * tid / threads, n * (tid + 1) / threads);
  }
}

/*!
 * \brief Call body(i) for every i in [0, n), handed out `chunk` at a time to a
 *        team of `team` (for items of very different cost; serial when team <= 1).
 */
template <typename Body>
void parallel_dynamic(int64_t n, int64_t chunk, int team, Body&& body) {
  if (team <= 1 || n <= 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
#pragma omp parallel for num_threads(team) schedule(dynamic, chunk)
  for (int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_OMP_THREADS_H_
