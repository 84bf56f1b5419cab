/*!
 * C entry points of the standalone GPU harness for deferred standard Adam.
 *
 * Linked with the operator library's own kernel source
 * (gluon_sparse/csrc/ops/adam_deferred_kernels.cu, see build.sh) and calling
 * its launchers in the order `gluon_sparse_adam_deferred_update` / `_flush` call them on
 * a GPU (adam_deferred_op.cc), so run_harness.py checks and times exactly the
 * kernels the operator launches, on PyTorch tensors, without MXNet.
 * Every function returns 0 on success, or 1 with a message in `error`.
 */
#include <cstdint>
#include <cstdio>

#include "adam_deferred_kernels.h"
#include "adam_deferred_kernels_cuda.h"
#include "adam_kernels_cuda.h"
#include "harness_checks.h"

namespace ga = gluon_sparse::adam;
namespace gd = gluon_sparse::adam::deferred;

namespace {

template <typename T>
gd::cuda::DeviceState<T> device_state(T* weight, T* mean, T* var, int64_t* last_step,
                                      float* history, int64_t num_rows, int64_t cols) {
  return {weight, mean, var, last_step, reinterpret_cast<gd::StepRecord*>(history), num_rows,
          cols};
}

template <typename T>
int catch_up(T* weight, T* mean, T* var, int64_t* last_step, float* history, int64_t capacity,
             int64_t num_rows, int64_t cols, const int64_t* rows, int64_t n, int64_t step,
             float beta1, float beta2, float epsilon, void* stream, char* error, int error_len) {
  if (!harness::check_capacity(step, capacity, error, error_len)) return 1;
  const auto state = device_state<T>(weight, mean, var, last_step, history, num_rows, cols);
  // rows == nullptr is the flush: every row, n = num_rows.
  const auto status = gd::cuda::launch_catch_up<T>(state, {beta1, beta2, epsilon}, rows,
                                                   rows ? n : num_rows, step, stream);
  return harness::failed(status, nullptr, error, error_len) ? 1 : 0;
}

/*! \brief update_gpu_typed of adam_deferred_op.cc, with its messages as text. */
template <typename T>
int update(T* weight, T* mean, T* var, int64_t* last_step, float* history, int64_t capacity,
           const T* grad, const int64_t* indices, int64_t nnz, int64_t num_rows, int64_t cols,
           int64_t step, float lr, float beta1, float beta2, float epsilon, float wd,
           float rescale_grad, float clip_gradient, int catch_up_rows, int validate,
           void* workspace, void* stream, char* error, int error_len) {
  if (step < 1) {
    std::snprintf(error, error_len, "step %lld is not a positive integer",
                  static_cast<long long>(step));
    return 1;
  }
  if (!harness::check_capacity(step, capacity, error, error_len)) return 1;
  const auto state = device_state<T>(weight, mean, var, last_step, history, num_rows, cols);
  if (nnz > 0) {
    if (validate && !harness::indices_valid(indices, nnz, num_rows, workspace, stream, error,
                                            error_len)) {
      return 1;
    }
    int64_t bad = nnz, row = -1, row_step = 0;
    auto status = ga::cuda::LaunchStatus{nullptr};
    if (catch_up_rows) {
      status = gd::cuda::launch_catch_up<T>(state, {beta1, beta2, epsilon}, indices, nnz,
                                            step - 1, stream);
    } else if (validate) {
      status = gd::cuda::find_stale_row<T>(state, indices, nnz, step, workspace, stream, &bad,
                                           &row, &row_step);
    }
    if (harness::failed(status, "checking the gradient rows", error, error_len)) return 1;
    if (bad < nnz) {
      std::snprintf(error, error_len, "row %lld is at step %lld but update %lld has a gradient "
                    "for it: it was read stale (not brought up to date first)",
                    static_cast<long long>(row), static_cast<long long>(row_step),
                    static_cast<long long>(step));
      return 1;
    }
  }
  const auto s = ga::make_scalars<T>(lr, beta1, beta2, epsilon, wd, rescale_grad, clip_gradient);
  const auto status = gd::cuda::launch_update<T>(state, s, {lr, wd, clip_gradient}, grad, indices,
                                                 nnz, step, stream);
  return harness::failed(status, nullptr, error, error_len) ? 1 : 0;
}

}  // namespace

extern "C" {

/*!
 * \brief Deferred Adam update `step` on float32 device arrays: the operator's
 *        index check and stale-row check (`validate`), or the catch-up of the
 *        gradient rows to step - 1 (`catch_up_rows`), then the update of those
 *        rows. `history` is a (capacity, 3) float32 array, `workspace` 8 bytes.
 */
int gluon_sparse_harness_adam_deferred_update_f32(
    float* weight, float* mean, float* var, int64_t* last_step, float* history, int64_t capacity,
    const float* grad, const int64_t* indices, int64_t nnz, int64_t num_rows, int64_t cols,
    int64_t step, float lr, float beta1, float beta2, float epsilon, float wd, float rescale_grad,
    float clip_gradient, int catch_up_rows, int validate, void* workspace, void* stream,
    char* error, int error_len) {
  return update<float>(weight, mean, var, last_step, history, capacity, grad, indices, nnz,
                       num_rows, cols, step, lr, beta1, beta2, epsilon, wd, rescale_grad,
                       clip_gradient, catch_up_rows, validate, workspace, stream, error,
                       error_len);
}

/*! \brief Deferred Adam update on float64 device arrays (see the float32 version). */
int gluon_sparse_harness_adam_deferred_update_f64(
    double* weight, double* mean, double* var, int64_t* last_step, float* history,
    int64_t capacity, const double* grad, const int64_t* indices, int64_t nnz, int64_t num_rows,
    int64_t cols, int64_t step, float lr, float beta1, float beta2, float epsilon, float wd,
    float rescale_grad, float clip_gradient, int catch_up_rows, int validate, void* workspace,
    void* stream, char* error, int error_len) {
  return update<double>(weight, mean, var, last_step, history, capacity, grad, indices, nnz,
                        num_rows, cols, step, lr, beta1, beta2, epsilon, wd, rescale_grad,
                        clip_gradient, catch_up_rows, validate, workspace, stream, error,
                        error_len);
}

/*!
 * \brief Bring `rows[0, n)` (device array, repeats allowed) of a float32 weight
 *        up to `step`, as a product operator does before it reads them;
 *        rows == nullptr brings every row (the flush).
 */
int gluon_sparse_harness_adam_deferred_catch_up_f32(float* weight, float* mean, float* var,
                                          int64_t* last_step, float* history, int64_t capacity,
                                          int64_t num_rows, int64_t cols, const int64_t* rows,
                                          int64_t n, int64_t step, float beta1, float beta2,
                                          float epsilon, void* stream, char* error,
                                          int error_len) {
  return catch_up<float>(weight, mean, var, last_step, history, capacity, num_rows, cols, rows, n,
                         step, beta1, beta2, epsilon, stream, error, error_len);
}

/*! \brief Catch-up of a float64 weight (see the float32 version). */
int gluon_sparse_harness_adam_deferred_catch_up_f64(double* weight, double* mean, double* var,
                                          int64_t* last_step, float* history, int64_t capacity,
                                          int64_t num_rows, int64_t cols, const int64_t* rows,
                                          int64_t n, int64_t step, float beta1, float beta2,
                                          float epsilon, void* stream, char* error,
                                          int error_len) {
  return catch_up<double>(weight, mean, var, last_step, history, capacity, num_rows, cols, rows,
                          n, step, beta1, beta2, epsilon, stream, error, error_len);
}

}  // extern "C"
