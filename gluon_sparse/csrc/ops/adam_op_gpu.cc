/*!
 * GPU compute of `gluon_sparse_adam_update` (see adam_op.cc): checks the gradient's
 * indices on the device, then launches the CUDA kernel (adam_kernels.cu).
 */
#if GLUON_SPARSE_WITH_CUDA
#include <cstdint>
#include <vector>

#include "adam_kernels.h"
#include "adam_kernels_cuda.h"
#include "adam_op.h"
#include "row_index_errors.h"

using namespace mxnet::ext;

namespace gluon_sparse {
namespace adam {
namespace {

template <typename T>
cuda::LaunchStatus launch_gpu(const AdamParams& p, const UpdateArgs& a, void* stream) {
  const auto s = make_scalars<T>(p.lr, p.beta1, p.beta2, p.epsilon, p.wd, p.rescale_grad,
                                     p.clip_gradient);
  return cuda::launch_update<T>(s, p.clip_gradient >= 0.0f, static_cast<T*>(a.weight),
                                    static_cast<T*>(a.mean), static_cast<T*>(a.var),
                                    static_cast<const T*>(a.grad), a.indices, a.nnz, a.num_rows,
                                    a.cols, stream);
}

}  // namespace

MXReturnValue compute_gpu(const ops::Attrs& attrs,
                          std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                          const OpResource& res) {
  AdamParams p;
  UpdateArgs a;
  if (!parse_params(attrs, &p) || !collect_args(*inputs, *outputs, &a)) return MX_FAIL;
  void* stream = res.get_cuda_stream();
  int64_t bad = a.nnz, value = 0, previous = 0;
  if (a.nnz > 0) {
    void* workspace = res.alloc_gpu(sizeof(unsigned long long));
    const auto status = cuda::find_invalid_index(a.indices, a.nnz, a.num_rows, workspace,
                                                     stream, &bad, &value, &previous);
    if (!status.ok()) {
      GS_ERROR_MSG << kOpName << ": CUDA error while checking grad indices: " << status.error;
      return MX_FAIL;
    }
  }
  if (bad < a.nnz) {
    GS_ERROR_MSG << kOpName << ": "
                 << gluon_sparse::invalid_row_index_message(bad, value, previous, a.num_rows);
    return MX_FAIL;
  }
  const auto status = ops::with_float_type(
      a.dtype, [&](auto zero) { return launch_gpu<decltype(zero)>(p, a, stream); });
  if (!status.ok()) {
    GS_ERROR_MSG << kOpName << ": CUDA error: " << status.error;
    return MX_FAIL;
  }
  return MX_SUCCESS;
}

}  // namespace adam
}  // namespace gluon_sparse
#endif  // GLUON_SPARSE_WITH_CUDA
