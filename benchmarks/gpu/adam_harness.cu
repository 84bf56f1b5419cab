/*!
 * C entry points of the standalone GPU harness for gluon-sparse's standard Adam.
 *
 * Linked with the operator library's own kernel source
 * (gluon_sparse/csrc/ops/adam_kernels.cu, see build.sh), so the harness times
 * and checks exactly the kernels `gluon_sparse_adam_update` launches inside MXNet,
 * without MXNet: run_harness.py drives them on PyTorch tensors through ctypes.
 * Every function returns 0 on success, or 1 with a message in `error`.
 */
#include <cstdint>

#include "adam_kernels.h"
#include "adam_kernels_cuda.h"
#include "harness_checks.h"

namespace ga = gluon_sparse::adam;

namespace {

template <typename T>
int update(T* weight, T* mean, T* var, const T* grad, const int64_t* indices, int64_t nnz,
           int64_t num_rows, int64_t cols, float lr, float beta1, float beta2, float epsilon,
           float wd, float rescale_grad, float clip_gradient, int validate, void* workspace,
           void* stream, char* error, int error_len) {
  if (validate && !harness::indices_valid(indices, nnz, num_rows, workspace, stream, error,
                                          error_len)) {
    return 1;
  }
  const auto s = ga::make_scalars<T>(lr, beta1, beta2, epsilon, wd, rescale_grad, clip_gradient);
  const auto status = ga::cuda::launch_update<T>(s, clip_gradient >= 0.0f, weight, mean, var,
                                                 grad, indices, nnz, num_rows, cols, stream);
  return harness::failed(status, nullptr, error, error_len) ? 1 : 0;
}

}  // namespace

extern "C" {

/*! \brief Standard Adam step on float32 device arrays (see adam_kernels_cuda.h). */
int gluon_sparse_harness_adam_update_f32(float* weight, float* mean, float* var, const float* grad,
                               const int64_t* indices, int64_t nnz, int64_t num_rows,
                               int64_t cols, float lr, float beta1, float beta2, float epsilon,
                               float wd, float rescale_grad, float clip_gradient, int validate,
                               void* workspace, void* stream, char* error, int error_len) {
  return update<float>(weight, mean, var, grad, indices, nnz, num_rows, cols, lr, beta1, beta2,
                       epsilon, wd, rescale_grad, clip_gradient, validate, workspace, stream,
                       error, error_len);
}

/*! \brief Standard Adam step on float64 device arrays. */
int gluon_sparse_harness_adam_update_f64(double* weight, double* mean, double* var,
                                         const double* grad, const int64_t* indices, int64_t nnz,
                                         int64_t num_rows, int64_t cols, float lr, float beta1,
                                         float beta2, float epsilon, float wd, float rescale_grad,
                                         float clip_gradient, int validate, void* workspace,
                                         void* stream, char* error, int error_len) {
  return update<double>(weight, mean, var, grad, indices, nnz, num_rows, cols, lr, beta1, beta2,
                        epsilon, wd, rescale_grad, clip_gradient, validate, workspace, stream,
                        error, error_len);
}

}  // extern "C"
