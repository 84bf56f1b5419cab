/*!
 * C entry points of the standalone GPU harness for the optimizer family's CUDA
 * kernels (gluon_sparse/csrc/ops/optim_kernels.cu, launchers in
 * optim_kernels_cuda.h), for every rule of GLUON_SPARSE_OPTIM_RULES.
 *
 * Linked with the operator library's own kernel sources (see build.sh,
 * TARGET=family) and calling the launchers in the order the GPU operators call
 * them (optim_op_gpu.h), with the operators' checks, so harness/family.py
 * checks and times exactly the kernels `gluon_sparse_<rule>_update`,
 * `..._deferred_update` and `..._deferred_flush` launch, without MXNet.
 *
 * A rule is named by its kName ("sgd_mom", ...) and the element type by its
 * size (4: float32, 8: float64). `states` is a host array of the rule's
 * kNumStates device pointers; `step_scalars` (kNumStep) and `fixed`
 * (kNumFixed) are host float arrays, as the operator parsed them. Every
 * function returns 0 on success, or 1 with a message in `error`.
 */
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "adam_deferred_kernels_cuda.h"  // find_invalid_last_step
#include "harness_checks.h"
#include "optim_kernels_cuda.h"
#include "optim_rules.h"

namespace go = gluon_sparse::optim;

namespace {

/*!
 * \brief Call `f(Rule{}, T{})` for the rule named `name` and the element type
 *        of `dtype_bytes` bytes; 1 with a message when either is unknown.
 */
template <class F>
int with_rule(const char* name, int dtype_bytes, char* error, int error_len, F&& f) {
  if (dtype_bytes != 4 && dtype_bytes != 8) {
    std::snprintf(error, error_len, "elements of %d bytes: only float32 (4) and float64 (8)",
                  dtype_bytes);
    return 1;
  }
#define GS_HARNESS_DISPATCH(Rule)                                           \
  if (name != nullptr && std::strcmp(name, Rule::kName) == 0) {             \
    return dtype_bytes == 4 ? f(Rule{}, float{}) : f(Rule{}, double{});     \
  }
  GLUON_SPARSE_OPTIM_RULES(GS_HARNESS_DISPATCH)
#undef GS_HARNESS_DISPATCH
  std::snprintf(error, error_len, "no rule named %s", name ? name : "(null)");
  return 1;
}

template <class Rule, typename T>
go::cuda::DeviceRows<T> device_rows(void* weight, void* const* states, int64_t* last_step,
                                    float* history, int64_t num_rows, int64_t cols) {
  go::cuda::DeviceRows<T> r{static_cast<T*>(weight), {}, last_step, history, num_rows, cols};
  for (int k = 0; k < Rule::kNumStates; ++k) r.states[k] = static_cast<T*>(states[k]);
  return r;
}

go::cuda::Floats floats(const float* v, int n) {
  go::cuda::Floats f{};
  for (int i = 0; i < n; ++i) f.v[i] = v[i];
  return f;
}

}  // namespace

extern "C" {

/*!
 * \brief kNumStates, kNumFixed and kNumStep of the rule named `rule`; 1 with
 *        a message when there is none.
 */
int gluon_sparse_harness_optim_rule_sizes(const char* rule, int* num_states, int* num_fixed,
                                          int* num_step, char* error, int error_len) {
  return with_rule(rule, 4, error, error_len, [&](auto r, auto) {
    using Rule = decltype(r);
    *num_states = Rule::kNumStates;
    *num_fixed = Rule::kNumFixed;
    *num_step = Rule::kNumStep;
    return 0;
  });
}

/*!
 * \brief `gluon_sparse_<rule>_update` on the GPU: the index check (`validate`,
 *        the operator always does it), then the eager kernel over every row.
 */
int gluon_sparse_harness_optim_eager(const char* rule, int dtype_bytes, void* weight,
                                     void* const* states, const void* grad,
                                     const int64_t* indices, int64_t nnz, int64_t num_rows,
                                     int64_t cols, const float* step_scalars, const float* fixed,
                                     float rescale_grad, int validate, void* workspace,
                                     void* stream, char* error, int error_len) {
  return with_rule(rule, dtype_bytes, error, error_len, [&](auto r, auto zero) {
    using Rule = decltype(r);
    using T = decltype(zero);
    if (validate && nnz > 0 &&
        !harness::indices_valid(indices, nnz, num_rows, workspace, stream, error, error_len)) {
      return 1;
    }
    const auto status = go::cuda::launch_eager<Rule, T>(
        device_rows<Rule, T>(weight, states, nullptr, nullptr, num_rows, cols),
        floats(step_scalars, Rule::kNumStep), floats(fixed, Rule::kNumFixed), rescale_grad,
        static_cast<const T*>(grad), indices, nnz, stream);
    return harness::failed(status, nullptr, error, error_len) ? 1 : 0;
  });
}

/*!
 * \brief `gluon_sparse_<rule>_deferred_update` on the GPU (deferred_update_gpu
 *        of optim_op_gpu.h): the index check (`validate`), the catch-up of the
 *        gradient rows to step - 1 (`catch_up_rows`) or else the stale-row
 *        check (`validate`), then the update of those rows. `history` is a
 *        (capacity, kNumStep) float32 device array, `workspace` 8 bytes.
 */
int gluon_sparse_harness_optim_deferred_update(
    const char* rule, int dtype_bytes, void* weight, void* const* states, int64_t* last_step,
    float* history, int64_t capacity, const void* grad, const int64_t* indices, int64_t nnz,
    int64_t num_rows, int64_t cols, int64_t step, const float* step_scalars, const float* fixed,
    float rescale_grad, int catch_up_rows, int validate, void* workspace, void* stream,
    char* error, int error_len) {
  return with_rule(rule, dtype_bytes, error, error_len, [&](auto r, auto zero) {
    using Rule = decltype(r);
    using T = decltype(zero);
    if (step < 1) {
      std::snprintf(error, error_len, "step %lld is not a positive integer",
                    static_cast<long long>(step));
      return 1;
    }
    if (!harness::check_capacity(step, capacity, error, error_len)) return 1;
    const auto rows = device_rows<Rule, T>(weight, states, last_step, history, num_rows, cols);
    const auto fixed_floats = floats(fixed, Rule::kNumFixed);
    if (nnz > 0) {
      if (validate &&
          !harness::indices_valid(indices, nnz, num_rows, workspace, stream, error, error_len)) {
        return 1;
      }
      int64_t bad = nnz, row = -1, row_step = 0;
      auto status = go::cuda::LaunchStatus{nullptr};
      if (catch_up_rows) {
        status = go::cuda::launch_catch_up<Rule, T>(rows, fixed_floats, indices, nnz, step - 1,
                                                    stream);
      } else if (validate) {
        status = go::cuda::find_stale_row<Rule, T>(rows, fixed_floats, indices, nnz, step,
                                                   workspace, stream, &bad, &row, &row_step);
      }
      if (harness::failed(status, "checking the gradient rows", error, error_len)) return 1;
      if (bad < nnz) {
        // report_stale_row's two cases (optim_op.cc), shortened.
        if (row_step >= step || row_step < 0) {
          std::snprintf(error, error_len, "row %lld is at step %lld, which is not before this "
                        "update's step %lld", static_cast<long long>(row),
                        static_cast<long long>(row_step), static_cast<long long>(step));
        } else {
          std::snprintf(error, error_len, "row %lld is at step %lld but update %lld has a "
                        "gradient for it: it was read stale (not brought up to date first)",
                        static_cast<long long>(row), static_cast<long long>(row_step),
                        static_cast<long long>(step));
        }
        return 1;
      }
    }
    const auto status = go::cuda::launch_deferred_update<Rule, T>(
        rows, floats(step_scalars, Rule::kNumStep), fixed_floats, rescale_grad,
        static_cast<const T*>(grad), indices, nnz, step, stream);
    return harness::failed(status, nullptr, error, error_len) ? 1 : 0;
  });
}

/*!
 * \brief Bring `rows[0, n)` (device array, repeats allowed) up to `step`, as the
 *        registry's row refresh does before a product operator reads them;
 *        rows == nullptr is `gluon_sparse_<rule>_deferred_flush` (flush_gpu of
 *        optim_op_gpu.h): every row, after checking each last_step is in
 *        [0, step].
 */
int gluon_sparse_harness_optim_catch_up(const char* rule, int dtype_bytes, void* weight,
                                        void* const* states, int64_t* last_step, float* history,
                                        int64_t capacity, int64_t num_rows, int64_t cols,
                                        const int64_t* rows, int64_t n, int64_t step,
                                        const float* fixed, void* workspace, void* stream,
                                        char* error, int error_len) {
  return with_rule(rule, dtype_bytes, error, error_len, [&](auto r, auto zero) {
    using Rule = decltype(r);
    using T = decltype(zero);
    if (!harness::check_capacity(step, capacity, error, error_len)) return 1;
    if (rows == nullptr) {
      int64_t row = num_rows, row_step = 0;
      const auto status = gluon_sparse::adam::deferred::cuda::find_invalid_last_step(
          last_step, num_rows, step, workspace, stream, &row, &row_step);
      if (harness::failed(status, "checking last_step", error, error_len)) return 1;
      if (row < num_rows) {
        std::snprintf(error, error_len, "row %lld is at step %lld, outside [0, %lld]",
                      static_cast<long long>(row), static_cast<long long>(row_step),
                      static_cast<long long>(step));
        return 1;
      }
    }
    const auto status = go::cuda::launch_catch_up<Rule, T>(
        device_rows<Rule, T>(weight, states, last_step, history, num_rows, cols),
        floats(fixed, Rule::kNumFixed), rows, rows ? n : num_rows, step, stream);
    return harness::failed(status, nullptr, error, error_len) ? 1 : 0;
  });
}

}  // extern "C"
