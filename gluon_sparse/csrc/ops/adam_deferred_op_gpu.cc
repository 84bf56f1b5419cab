/*!
 * GPU compute of the deferred standard-Adam operators (see adam_deferred_op.cc):
 * device-side checks, then the CUDA kernels of adam_deferred_kernels.cu.
 */
#if GLUON_SPARSE_WITH_CUDA
#include <cstdint>
#include <vector>

#include "adam_deferred_kernels_cuda.h"
#include "adam_deferred_op.h"
#include "deferred_registry.h"
#include "adam_kernels_cuda.h"
#include "row_index_errors.h"

using namespace mxnet::ext;

namespace gluon_sparse {
namespace deferred {
namespace {

namespace ga = gluon_sparse::adam;

template <typename T>
gd::cuda::DeviceState<T> device_state(const Args& a) {
  return {static_cast<T*>(a.weight), static_cast<T*>(a.mean), static_cast<T*>(a.var),
          a.last_step, a.history, a.num_rows, a.cols};
}

template <typename T>
bool update_gpu_typed(const Params& p, const Args& a, const OpResource& res, void* stream) {
  const auto state = device_state<T>(a);
  if (a.nnz > 0) {
    void* workspace = res.alloc_gpu(sizeof(unsigned long long));
    int64_t bad = a.nnz, value = 0, previous = 0;
    auto status = ga::cuda::find_invalid_index(a.indices, a.nnz, a.num_rows, workspace, stream,
                                               &bad, &value, &previous);
    if (status.ok() && bad < a.nnz) {
      GS_ERROR_MSG << kUpdateName << ": "
                 << gluon_sparse::invalid_row_index_message(bad, value, previous, a.num_rows);
      return false;
    }
    int64_t row = -1, row_step = 0;
    if (status.ok() && p.catch_up) {
      status = gd::cuda::launch_catch_up<T>(state, {p.beta1, p.beta2, p.epsilon}, a.indices,
                                            a.nnz, p.step - 1, stream);
    } else if (status.ok()) {
      status = gd::cuda::find_stale_row<T>(state, a.indices, a.nnz, p.step, workspace, stream,
                                           &bad, &row, &row_step);
    }
    if (!status.ok()) {
      GS_ERROR_MSG << kUpdateName << ": CUDA error while checking the gradient rows: "
                   << status.error;
      return false;
    }
    if (bad < a.nnz) return report_stale_row(row, row_step, p.step);
  }
  const auto s = ga::make_scalars<T>(p.lr, p.beta1, p.beta2, p.epsilon, p.wd, p.rescale_grad,
                                     p.clip_gradient);
  const auto status = gd::cuda::launch_update<T>(state, s, {p.lr, p.wd, p.clip_gradient},
                                                 static_cast<const T*>(a.grad), a.indices, a.nnz,
                                                 p.step, stream);
  if (!status.ok()) {
    GS_ERROR_MSG << kUpdateName << ": CUDA error: " << status.error;
    return false;
  }
  return true;
}

template <typename T>
bool flush_gpu_typed(const Params& p, const Args& a, const OpResource& res, void* stream) {
  // The same check as the CPU flush, before anything is written.
  int64_t row = a.num_rows, row_step = 0;
  auto status = gd::cuda::find_invalid_last_step(a.last_step, a.num_rows, p.step,
                                                 res.alloc_gpu(sizeof(unsigned long long)),
                                                 stream, &row, &row_step);
  if (status.ok() && row < a.num_rows) {
    report_invalid_last_step(row, row_step, p.step);
    return false;
  }
  if (status.ok()) {
    status = gd::cuda::launch_catch_up<T>(device_state<T>(a), {p.beta1, p.beta2, p.epsilon},
                                          nullptr, a.num_rows, p.step, stream);
  }
  if (!status.ok()) {
    GS_ERROR_MSG << kFlushName << ": CUDA error: " << status.error;
    return false;
  }
  return true;
}

}  // namespace

MXReturnValue compute_gpu(const ops::Attrs& attrs, std::vector<MXTensor>* inputs,
                         std::vector<MXTensor>* outputs, const OpResource& res) {
  Params p;
  Args a;
  if (!parse_params(attrs, true, &p) ||
      !collect_args(kUpdateName, kUpdateLayout, *inputs, *outputs, p.step, &a)) {
    return MX_FAIL;
  }
  p.catch_up = catches_up(a.weight, p.catch_up, p.catch_up_if_read);
  void* stream = res.get_cuda_stream();
  const bool ok = ops::with_float_type(a.dtype, [&](auto zero) {
    return update_gpu_typed<decltype(zero)>(p, a, res, stream);
  });
  if (!ok) return MX_FAIL;
  set_step(a.weight, p.step);
  return MX_SUCCESS;
}


MXReturnValue flush_gpu(const ops::Attrs& attrs, std::vector<MXTensor>* inputs,
                        std::vector<MXTensor>* outputs, const OpResource& res) {
  Params p;
  Args a;
  if (!parse_params(attrs, false, &p) ||
      !collect_args(kFlushName, kFlushLayout, *inputs, *outputs, p.step, &a)) {
    return MX_FAIL;
  }
  void* stream = res.get_cuda_stream();
  const bool ok = ops::with_float_type(a.dtype, [&](auto zero) {
    return flush_gpu_typed<decltype(zero)>(p, a, res, stream);
  });
  return ok ? MX_SUCCESS : MX_FAIL;
}

}  // namespace deferred
}  // namespace gluon_sparse
#endif  // GLUON_SPARSE_WITH_CUDA
