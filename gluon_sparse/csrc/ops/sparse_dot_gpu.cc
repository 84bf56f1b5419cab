/*!
 * GPU compute of `gluon_sparse_dot` (see sparse_dot.cc for the operator): the
 * host side, which checks the operands and calls the CUDA launchers of
 * sparse_dot.cu (declared in sparse_dot.h).
 */
#if GLUON_SPARSE_WITH_CUDA
#include <string>
#include <vector>

#include "deferred_registry.h"
#include "sparse_dot.h"
#include "sparse_dot_op.h"

using namespace mxnet::ext;

namespace gluon_sparse {
namespace dot {
namespace {

MXReturnValue FailCuda(const std::string& message) {
  GS_ERROR_MSG << "gluon_sparse_dot (GPU): " << message;
  return MX_FAIL;
}

template <typename T>
MXReturnValue ForwardGpuTyped(const Options& options, std::vector<MXTensor>* inputs,
                              std::vector<MXTensor>* outputs, const OpResource& res) {
  namespace cu = gluon_sparse::sparse_dot_cuda;
  MXTensor& data = (*inputs)[0];
  MXTensor& weight = (*inputs)[1];
  if (data.stype != kCSRStorage) {
    return FailCuda("the data must be CSR on GPU (convert it with x.tostype('csr'))");
  }
  MXSparse* csr = data.data<MXSparse>();
  const int64_t batch = data.shape[0];
  if (csr->indptr_len != batch + 1 && !(csr->indptr_len == 0 && csr->indices_len == 0)) {
    return FailCuda("the CSR data has " + std::to_string(batch) + " rows but its indptr holds " +
                    std::to_string(csr->indptr_len) + " entries");
  }
  auto stream = static_cast<cudaStream_t>(res.get_cuda_stream());
  void* workspace = res.alloc_gpu(static_cast<int>(cu::ForwardWorkspaceBytes(batch, csr->indices_len)));
  // Rows left behind by deferred Adam are brought up to date before they are read.
  std::string deferred_error;
  if (!gluon_sparse::deferred::refresh_rows_gpu(weight.data_ptr, weight.dtype, csr->indices,
                                                csr->indices_len, stream, &deferred_error)) {
    return FailCuda(deferred_error);
  }
  std::string err = cu::Forward<T>(csr->indptr_len ? csr->indptr : nullptr, csr->indices,
                                   static_cast<const T*>(csr->data), batch, csr->indices_len,
                                   weight.data<T>(), weight.shape[0], weight.shape[1],
                                   options.squared,
                                   options.with_bias ? (*inputs)[2].data<T>() : nullptr,
                                   (*outputs)[0].data<T>(), workspace, stream);
  return err.empty() ? MX_SUCCESS : FailCuda(err);
}

template <typename T>
MXReturnValue BackwardGpuTyped(const Options& options, std::vector<MXTensor>* inputs,
                               std::vector<MXTensor>* outputs, const OpResource& res) {
  namespace cu = gluon_sparse::sparse_dot_cuda;
  MXTensor& data = (*inputs)[kData];
  MXTensor& weight = (*inputs)[kWeight];
  if (data.stype != kCSRStorage) {
    return FailCuda("the data must be CSR on GPU (convert it with x.tostype('csr'))");
  }
  MXSparse* csr = data.data<MXSparse>();
  const int64_t batch = data.shape[0], nnz = csr->indices_len;
  auto stream = static_cast<cudaStream_t>(res.get_cuda_stream());
  if (options.with_bias) {
    std::string err = cu::BiasGrad<T>((*inputs)[kOgrad].data<T>(), batch, weight.shape[1],
                                      (*outputs)[kBiasGrad].data<T>(), stream);
    if (!err.empty()) return FailCuda(err);
  }
  MXSparse* grad = (*outputs)[kWeightGrad].data<MXSparse>();
  if (nnz == 0) {
    res.alloc_sparse(grad, 1, 0);
    return MX_SUCCESS;
  }
  void* workspace = res.alloc_gpu(static_cast<int>(cu::WeightGradWorkspaceBytes(batch, nnz)));
  int64_t num_rows = 0;
  std::string err = cu::WeightGradRows(csr->indptr, csr->indices, batch, nnz, weight.shape[0],
                                       workspace, &num_rows, stream);
  if (!err.empty()) return FailCuda(err);
  res.alloc_sparse(grad, 1, static_cast<int>(num_rows));
  err = cu::WeightGradValues<T>(static_cast<const T*>(csr->data), nnz,
                                (*inputs)[kOgrad].data<T>(), weight.data<T>(), weight.shape[1],
                                options.squared, workspace, num_rows, grad->indices,
                                static_cast<T*>(grad->data), stream);
  return err.empty() ? MX_SUCCESS : FailCuda(err);
}
}  // namespace

MXReturnValue compute_gpu(const ops::Attrs& attrs, std::vector<MXTensor>* inputs,
                          std::vector<MXTensor>* outputs, const OpResource& res) {
  Options options;
  if (!parse_options(attrs, &options) || !check_float_type((*inputs)[1], "weight")) {
    return MX_FAIL;
  }
  return ops::with_float_type((*inputs)[1].dtype, [&](auto zero) {
    return ForwardGpuTyped<decltype(zero)>(options, inputs, outputs, res);
  });
}

MXReturnValue gradient_gpu(const ops::Attrs& attrs, std::vector<MXTensor>* inputs,
                           std::vector<MXTensor>* outputs, const OpResource& res) {
  Options options;
  if (!parse_options(attrs, &options) || !check_float_type((*inputs)[kWeight], "weight")) {
    return MX_FAIL;
  }
  return ops::with_float_type((*inputs)[kWeight].dtype, [&](auto zero) {
    return BackwardGpuTyped<decltype(zero)>(options, inputs, outputs, res);
  });
}

}  // namespace dot
}  // namespace gluon_sparse
#endif  // GLUON_SPARSE_WITH_CUDA
