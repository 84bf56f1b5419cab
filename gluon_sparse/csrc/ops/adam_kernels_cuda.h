/*!
 * Host-side launchers of the CUDA kernels of standard Adam (adam_kernels.cu).
 *
 * Plain C++ over raw device pointers: no CUDA or MXNet header is needed to call
 * them, so the operator (adam_op.cc, compiled by the host compiler) and the
 * standalone GPU harness (benchmarks/gpu/) share one kernel source. Streams are
 * passed as `void*` (a cudaStream_t).
 */
#ifndef GLUON_SPARSE_CSRC_OPS_ADAM_KERNELS_CUDA_H_
#define GLUON_SPARSE_CSRC_OPS_ADAM_KERNELS_CUDA_H_

#include <cstdint>

#include "adam_kernels.h"

namespace gluon_sparse {
namespace adam {
namespace cuda {

/*! \brief Result of a launch: `error` is null on success, else CUDA's message. */
struct LaunchStatus {
  const char* error;
  bool ok() const { return error == nullptr; }
};

/*!
 * \brief Find the first gradient index that is out of [0, num_rows) or not
 *        strictly greater than its predecessor.
 *
 * Waits for the stream (the answer decides whether the update may run), but
 * only reads back 8 bytes, or 24 when an index is bad.
 *
 * \param indices     nnz row indices on the device
 * \param workspace   8 bytes of device memory the call may overwrite
 * \param position    out: position of the first bad index, or nnz when all are valid
 * \param value       out: the bad index (when position < nnz)
 * \param previous    out: the index before it (when 0 < position < nnz)
 */
LaunchStatus find_invalid_index(const int64_t* indices, int64_t nnz, int64_t num_rows,
                                void* workspace, void* stream, int64_t* position,
                                int64_t* value, int64_t* previous);

/*!
 * \brief Standard Adam step of a dense (num_rows x cols) weight, mean and var in
 *        place, given a row_sparse gradient (grad_rows x cols values at the sorted,
 *        validated row `indices`). Rows absent from the gradient are decayed.
 *
 * Asynchronous on `stream`. Instantiated for float and double.
 */
template <typename T>
LaunchStatus launch_update(const AdamScalars<T>& scalars, bool clip, T* weight, T* mean, T* var,
                           const T* grad, const int64_t* indices, int64_t nnz, int64_t num_rows,
                           int64_t cols, void* stream);

}  // namespace cuda
}  // namespace adam
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_ADAM_KERNELS_CUDA_H_
