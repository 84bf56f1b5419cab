/*!
 * Parallelism by the amount of work, for every CPU kernel of the operator library.
 *
 * Team size. MXNet runs operators on its engine's worker threads and gives
 * them an OpenMP team of its own choosing (MXNet 1.9.1 on x86, without
 * OMP_NUM_THREADS, gives half the logical CPUs: 1 thread on a 2-core
 * machine). The largest team here is named explicitly (omp_threads()):
 *   MXNET_OMP_MAX_THREADS, if set (MXNet's own cap, so users keep one knob);
 *   else OMP_NUM_THREADS, if set (its first value, as OpenMP reads it);
 *   else the CPUs this process may run on (omp_get_num_procs honours the
 *   affinity mask, e.g. taskset or a container's cpuset).
 * Teams run on the library's own threads (worker_pool.h: why not OpenMP's).
 *
 * Grain. Sharing work is not free: waking a worker costs microseconds, and
 * a worker that spins for the next task takes a core that MXNet's engine
 * threads, the Python thread and the next operator need. A small step (a
 * batch of 10 rows: ~100 rows x 128 columns) paid for that on every kernel.
 * So a kernel runs serially, on the calling thread alone, below two grains
 * of work, and above that with a team of no more than work / grain threads
 * (capped by omp_threads()). The grain is in "element operations" (one float
 * of one row through one kernel step). benchmarks/bench_grain.py measures it:
 * each kernel forced serial and forced onto 2 threads (test knob below) at
 * growing work, inside MXNet's engine. kGrain = 2^15 keeps the thresholds the
 * kernels had before (2-thread regions from 2^16 element operations), with
 * which eager Adam reached 89-92% of copy bandwidth on the 2-core x86
 * machine. Its re-measurement on 2026-11-23 ran at load average 8 (other
 * jobs on both cores): two threads then lost at every size up to 2^21, so it
 * could not place the crossover lower or higher; see RESULTS.md, "Grain".
 * Re-run bench_grain.py on a quiet machine to refine it. The defaults are the
 * fast path: no environment variable is needed.
 *
 * Results never depend on the team: every kernel gives each output element
 * to exactly one thread and computes it with the same operations in the same
 * order, so serial and parallel runs are bitwise equal (tests/test_grain.py
 * compares them through the test knob).
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OMP_THREADS_H_
#define GLUON_SPARSE_CSRC_OPS_OMP_THREADS_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "worker_pool.h"

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
 * \brief The work from which team_size() gives its largest team (grain() x
 *        omp_threads()): a count of work done only to size a team may stop there.
 */
inline int64_t work_for_largest_team() { return grain() * omp_threads(); }

/*!
 * \brief Call body(begin, end) on contiguous blocks of [0, n), one per thread
 *        of a team of `team` (serially, with no other thread, when team <= 1
 *        or when the worker pool is taken: worker_pool.h).
 */
template <typename Body>
void parallel_blocks(int64_t n, int team, Body&& body) {
  if (team > 1 && n > 1) {
    struct Job {
      std::remove_reference_t<Body>* body;
      int64_t n;
    } job{&body, n};
    const PoolTask task = [](void* ctx, int index, int size) {
      const Job& j = *static_cast<Job*>(ctx);
      (*j.body)(j.n * index / size, j.n * (index + 1) / size);
    };
    if (pool_run(static_cast<int>(std::min<int64_t>(team, n)), task, &job)) return;
  }
  body(int64_t(0), n);
}

/*!
 * \brief Call body(i) for every i in [0, n), handed out `chunk` at a time to a
 *        team of `team` (for items of very different cost; serial when team <= 1
 *        or when the worker pool is taken).
 */
template <typename Body>
void parallel_dynamic(int64_t n, int64_t chunk, int team, Body&& body) {
  if (team > 1 && n > 1) {
    struct Job {
      std::remove_reference_t<Body>* body;
      int64_t n, chunk;
      std::atomic<int64_t> next;
    } job{&body, n, std::max<int64_t>(chunk, 1), {0}};
    const PoolTask task = [](void* ctx, int, int) {
      Job& j = *static_cast<Job*>(ctx);
      for (;;) {
        const int64_t begin = j.next.fetch_add(j.chunk, std::memory_order_relaxed);
        if (begin >= j.n) return;
        const int64_t end = std::min(begin + j.chunk, j.n);
        for (int64_t i = begin; i < end; ++i) (*j.body)(i);
      }
    };
    if (pool_run(static_cast<int>(std::min<int64_t>(team, n)), task, &job)) return;
  }
  for (int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_OMP_THREADS_H_
