/*!
 * GPU compute of the family's three operators (optim_op.h), generic over a
 * Rule: device-side checks (row indices, stale rows, last_step), then the
 * CUDA kernels of optim_kernels.cu. Included once, by optim_op_register.cc.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OPTIM_OP_GPU_H_
#define GLUON_SPARSE_CSRC_OPS_OPTIM_OP_GPU_H_
#if GLUON_SPARSE_WITH_CUDA

#include <cstdint>
#include <vector>

#include "adam_deferred_kernels_cuda.h"  // find_invalid_last_step
#include "deferred_registry.h"
#include "optim_kernels_cuda.h"
#include "optim_op.h"
#include "row_index_errors.h"

namespace gluon_sparse {
namespace optim {

template <typename T>
cuda::DeviceRows<T> device_rows(const Args& a) {
  cuda::DeviceRows<T> r{static_cast<T*>(a.weight), {}, a.last_step, a.history, a.num_rows, a.cols};
  for (int k = 0; k < kMaxStates; ++k) r.states[k] = static_cast<T*>(a.states[k]);
  return r;
}

inline cuda::Floats floats(const float* v, int n) {
  cuda::Floats f{};
  for (int i = 0; i < n; ++i) f.v[i] = v[i];
  return f;
}

/*! \brief The gradient's indices valid (sorted, in range)? Reports and returns false if not. */
inline bool check_indices_gpu(const std::string& op, const Args& a,
                              const mxnet::ext::OpResource& res, void* stream) {
  if (a.nnz == 0) return true;
  int64_t bad = a.nnz, value = 0, previous = 0;
  const auto status = adam::cuda::find_invalid_index(
      a.indices, a.nnz, a.num_rows, res.alloc_gpu(sizeof(unsigned long long)), stream, &bad,
      &value, &previous);
  if (!status.ok()) {
    GS_ERROR_MSG << op << ": CUDA error while checking the gradient rows: " << status.error;
    return false;
  }
  if (bad < a.nnz) {
    GS_ERROR_MSG << op << ": " << invalid_row_index_message(bad, value, previous, a.num_rows);
    return false;
  }
  return true;
}

template <class Rule, typename T>
bool deferred_update_gpu(const RuleInfo& info, const Params& p, const Args& a,
                         const mxnet::ext::OpResource& res, void* stream) {
  const std::string op = op_name(info, OpKind::kDeferredUpdate);
  const auto rows = device_rows<T>(a);
  const cuda::Floats fixed = floats(p.fixed, Rule::kNumFixed);
  if (!check_indices_gpu(op, a, res, stream)) return false;
  if (a.nnz > 0) {
    int64_t bad = a.nnz, row = -1, row_step = 0;
    const auto status =
        p.catch_up ? cuda::launch_catch_up<Rule, T>(rows, fixed, a.indices, a.nnz, p.step - 1,
                                                    stream)
                   : cuda::find_stale_row<Rule, T>(rows, fixed, a.indices, a.nnz, p.step,
                                                   res.alloc_gpu(sizeof(unsigned long long)),
                                                   stream, &bad, &row, &row_step);
    if (!status.ok()) {
      GS_ERROR_MSG << op << ": CUDA error while checking the gradient rows: " << status.error;
      return false;
    }
    if (bad < a.nnz) return report_stale_row(info, row, row_step, p.step);
  }
  const auto status = cuda::launch_deferred_update<Rule, T>(
      rows, floats(p.step_scalars, Rule::kNumStep), fixed, p.rescale_grad,
      static_cast<const T*>(a.grad), a.indices, a.nnz, p.step, stream);
  if (!status.ok()) {
    GS_ERROR_MSG << op << ": CUDA error: " << status.error;
    return false;
  }
  return true;
}

template <class Rule, typename T>
bool flush_gpu(const RuleInfo& info, const Params& p, const Args& a,
               const mxnet::ext::OpResource& res, void* stream) {
  int64_t row = a.num_rows, row_step = 0;
  auto status = adam::deferred::cuda::find_invalid_last_step(
      a.last_step, a.num_rows, p.step, res.alloc_gpu(sizeof(unsigned long long)), stream, &row,
      &row_step);
  if (status.ok() && row < a.num_rows) return report_invalid_last_step(info, row, row_step, p.step);
  if (status.ok()) {
    status = cuda::launch_catch_up<Rule, T>(device_rows<T>(a), floats(p.fixed, Rule::kNumFixed),
                                            nullptr, a.num_rows, p.step, stream);
  }
  if (!status.ok()) {
    GS_ERROR_MSG << op_name(info, OpKind::kFlush) << ": CUDA error: " << status.error;
    return false;
  }
  return true;
}

/*! \brief The registered compute functions of one rule on the GPU. */
template <class Rule>
struct GpuOps {
  static constexpr RuleInfo kInfo = rule_info<Rule>();
  using Tensors = std::vector<mxnet::ext::MXTensor>;

  static mxnet::ext::MXReturnValue compute_gpu(const ops::Attrs& attrs, Tensors* inputs,
                                               Tensors* outputs,
                                               const mxnet::ext::OpResource& res) {
    Params p;
    Args a;
    if (!parse_params(kInfo, OpKind::kEager, attrs, &p) ||
        !collect_args(kInfo, OpKind::kEager, p, *inputs, *outputs, &a)) {
      return mxnet::ext::MX_FAIL;
    }
    void* stream = res.get_cuda_stream();
    const std::string op = op_name(kInfo, OpKind::kEager);
    if (!check_indices_gpu(op, a, res, stream)) return mxnet::ext::MX_FAIL;
    const auto status = ops::with_float_type(a.dtype, [&](auto zero) {
      using T = decltype(zero);
      return cuda::launch_eager<Rule, T>(device_rows<T>(a), floats(p.step_scalars, Rule::kNumStep),
                                         floats(p.fixed, Rule::kNumFixed), p.rescale_grad,
                                         static_cast<const T*>(a.grad), a.indices, a.nnz, stream);
    });
    if (!status.ok()) {
      GS_ERROR_MSG << op << ": CUDA error: " << status.error;
      return mxnet::ext::MX_FAIL;
    }
    return mxnet::ext::MX_SUCCESS;
  }

  static mxnet::ext::MXReturnValue deferred_update_gpu(const ops::Attrs& attrs, Tensors* inputs,
                                                       Tensors* outputs,
                                                       const mxnet::ext::OpResource& res) {
    Params p;
    Args a;
    if (!parse_params(kInfo, OpKind::kDeferredUpdate, attrs, &p) ||
        !collect_args(kInfo, OpKind::kDeferredUpdate, p, *inputs, *outputs, &a)) {
      return mxnet::ext::MX_FAIL;
    }
    p.catch_up = deferred::catches_up(a.weight, p.catch_up, p.catch_up_if_read);
    void* stream = res.get_cuda_stream();
    const bool ok = ops::with_float_type(a.dtype, [&](auto zero) {
      return optim::deferred_update_gpu<Rule, decltype(zero)>(kInfo, p, a, res, stream);
    });
    if (!ok) return mxnet::ext::MX_FAIL;
    deferred::set_step(a.weight, p.step);
    return mxnet::ext::MX_SUCCESS;
  }

  static mxnet::ext::MXReturnValue flush_gpu(const ops::Attrs& attrs, Tensors* inputs,
                                             Tensors* outputs, const mxnet::ext::OpResource& res) {
    Params p;
    Args a;
    if (!parse_params(kInfo, OpKind::kFlush, attrs, &p) ||
        !collect_args(kInfo, OpKind::kFlush, p, *inputs, *outputs, &a)) {
      return mxnet::ext::MX_FAIL;
    }
    void* stream = res.get_cuda_stream();
    const bool ok = ops::with_float_type(a.dtype, [&](auto zero) {
      return optim::flush_gpu<Rule, decltype(zero)>(kInfo, p, a, res, stream);
    });
    return ok ? mxnet::ext::MX_SUCCESS : mxnet::ext::MX_FAIL;
  }
};

}  // namespace optim
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_WITH_CUDA
#endif  // GLUON_SPARSE_CSRC_OPS_OPTIM_OP_GPU_H_
