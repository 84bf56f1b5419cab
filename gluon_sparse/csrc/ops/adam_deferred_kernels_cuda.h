/*!
 * Host-side launchers of the CUDA kernels of deferred standard Adam
 * (adam_deferred_kernels.cu).
 *
 * Plain C++ over raw device pointers, so the operator and the registry
 * (compiled by the host compiler) call them without any CUDA header. Streams
 * are `void*` (a cudaStream_t). Every launcher is instantiated for float and
 * double and is asynchronous unless it says otherwise.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_ADAM_DEFERRED_KERNELS_CUDA_H_
#define GLUON_SPARSE_CSRC_OPS_ADAM_DEFERRED_KERNELS_CUDA_H_

#include <cstdint>

#include "adam_deferred_kernels.h"
#include "adam_kernels_cuda.h"

namespace gluon_sparse {
namespace adam {
namespace deferred {
namespace cuda {

using LaunchStatus = ::gluon_sparse::adam::cuda::LaunchStatus;

/*! \brief Device pointers and sizes of one weight's deferred state. */
template <typename T>
struct DeviceState {
  T* weight;
  T* mean;
  T* var;
  int64_t* last_step;
  StepRecord* history;  //!< capacity records; record s holds step s's scalars
  int64_t num_rows;
  int64_t cols;
};

/*!
 * \brief Bring rows `rows[0, n)` (device array, repeats allowed; nullptr means
 *        every row, n = num_rows) up to `step`.
 *
 * One block per listed row claims it by compare-and-swap on its last_step, so
 * a repeated row is replayed once; the block's threads split the columns.
 */
template <typename T>
LaunchStatus launch_catch_up(const DeviceState<T>& state, const FixedScalars& fixed,
                             const int64_t* rows, int64_t n, int64_t step, void* stream);

/*!
 * \brief Check the gradient rows of update `step` against the state, waiting
 *        for the answer (it decides whether the update may run).
 *
 * A row must be at step - 1, or be a fixed point of the steps it missed.
 * `workspace`: 8 bytes of device memory. `*position` receives the first
 * offending position (nnz when none), `*row` and `*row_step` that row and its
 * last_step.
 */
template <typename T>
LaunchStatus find_stale_row(const DeviceState<T>& state, const int64_t* indices, int64_t nnz,
                            int64_t step, void* workspace, void* stream, int64_t* position,
                            int64_t* row, int64_t* row_step);

/*!
 * \brief Find the first row whose last_step lies outside [0, step] (a state
 *        that does not belong to these weights), waiting for the answer.
 *
 * `workspace`: 8 bytes of device memory. `*row` receives that row (num_rows
 * when none) and `*row_step` its last_step.
 */
LaunchStatus find_invalid_last_step(const int64_t* last_step, int64_t num_rows, int64_t step,
                                    void* workspace, void* stream, int64_t* row,
                                    int64_t* row_step);

/*!
 * \brief Update `step`: write the step's record into the history, apply the
 *        gradient rows (grad: nnz x cols at sorted, checked `indices`) and set
 *        their last_step to `step`.
 */
template <typename T>
LaunchStatus launch_update(const DeviceState<T>& state, const AdamScalars<T>& scalars,
                           const StepRecord& record, const T* grad, const int64_t* indices,
                           int64_t nnz, int64_t step, void* stream);

}  // namespace cuda
}  // namespace deferred
}  // namespace adam
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_ADAM_DEFERRED_KERNELS_CUDA_H_
