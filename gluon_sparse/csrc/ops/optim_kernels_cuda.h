/*!
 * Host-side launchers of the family's CUDA kernels (optim_kernels.cu), generic
 * over a Rule (optim_rule.h) and instantiated for every rule of
 * GLUON_SPARSE_OPTIM_RULES, float and double.
 *
 * Plain C++ over raw device pointers, so the operators (optim_op_gpu.h) and
 * the registry (deferred_registry.cc), compiled by the host compiler, call
 * them without any CUDA header. Streams are `void*` (a cudaStream_t). Every
 * launcher is asynchronous unless it says otherwise.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OPTIM_KERNELS_CUDA_H_
#define GLUON_SPARSE_CSRC_OPS_OPTIM_KERNELS_CUDA_H_

#include <cstdint>

#include "adam_kernels_cuda.h"  // LaunchStatus, find_invalid_index
#include "optim_rule.h"

namespace gluon_sparse {
namespace optim {
namespace cuda {

using LaunchStatus = ::gluon_sparse::adam::cuda::LaunchStatus;

/*! \brief Device pointers and sizes of one weight and its rule's state. */
template <typename T>
struct DeviceRows {
  T* weight;
  T* states[kMaxStates];
  int64_t* last_step;  //!< deferred only
  float* history;      //!< deferred only: (capacity, kNumStep) records
  int64_t num_rows;
  int64_t cols;
};

/*! \brief Scalars passed by value to the kernels. */
struct Floats {
  float v[kMaxStep > kMaxFixed ? kMaxStep : kMaxFixed];
};

/*!
 * \brief Eager update: every row steps, the gradient's rows (grad: nnz x cols
 *        at the sorted, validated `indices`) with their gradient.
 */
template <class Rule, typename T>
LaunchStatus launch_eager(const DeviceRows<T>& rows, const Floats& step, const Floats& fixed,
                          float rescale_grad, const T* grad, const int64_t* indices, int64_t nnz,
                          void* stream);

/*!
 * \brief Deferred update `step`: write its record into the history, step the
 *        gradient rows and set their last_step to `step`.
 */
template <class Rule, typename T>
LaunchStatus launch_deferred_update(const DeviceRows<T>& rows, const Floats& step_scalars,
                                    const Floats& fixed, float rescale_grad, const T* grad,
                                    const int64_t* indices, int64_t nnz, int64_t step,
                                    void* stream);

/*!
 * \brief Bring rows `list[0, n)` (device array, repeats allowed; nullptr means
 *        every row, n = num_rows) up to `step`, replaying the missed steps.
 *
 * One block per listed row claims it by compare-and-swap on its last_step (a
 * repeated row is replayed once); its threads split the columns.
 */
template <class Rule, typename T>
LaunchStatus launch_catch_up(const DeviceRows<T>& rows, const Floats& fixed, const int64_t* list,
                             int64_t n, int64_t step, void* stream);

/*!
 * \brief Check the gradient rows of update `step` against the state, waiting
 *        for the answer: a row must be at step - 1, or at zero state with only
 *        fixed-point steps missed. `workspace`: 8 bytes of device memory;
 *        `*position` receives the first offending position (nnz when none),
 *        `*row` and `*row_step` that row and its last_step.
 */
template <class Rule, typename T>
LaunchStatus find_stale_row(const DeviceRows<T>& rows, const Floats& fixed,
                            const int64_t* indices, int64_t nnz, int64_t step, void* workspace,
                            void* stream, int64_t* position, int64_t* row, int64_t* row_step);

}  // namespace cuda
}  // namespace optim
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_OPTIM_KERNELS_CUDA_H_
