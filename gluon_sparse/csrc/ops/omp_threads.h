/*!
 * Number of OpenMP threads for the operators of this library.
 *
 * MXNet runs operators on its engine's worker threads, whose OpenMP team size
 * it sets itself: without OMP_NUM_THREADS in the environment, MXNet 1.9.1 on
 * x86 recommends half the logical CPUs (it assumes hyper-threading) and
 * leaves the workers' default team at that count, which is 1 thread on a
 * 2-core machine. A bare `#pragma omp parallel` in an operator then runs on a
 * single thread. Every parallel region here names its team size explicitly:
 *
 *   MXNET_OMP_MAX_THREADS, if set (MXNet's own cap, so users keep one knob);
 *   else OMP_NUM_THREADS, if set (its first value, as OpenMP reads it);
 *   else the CPUs this process may run on (omp_get_num_procs honours the
 *   affinity mask, e.g. taskset or a container's cpuset).
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OMP_THREADS_H_
#define GLUON_SPARSE_CSRC_OPS_OMP_THREADS_H_

namespace gluon_sparse {

/*! \brief Team size for this library's parallel regions (>= 1, computed once). */
int omp_threads();

}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_OMP_THREADS_H_
