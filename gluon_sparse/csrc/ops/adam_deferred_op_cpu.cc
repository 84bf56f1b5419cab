/*!
 * CPU compute of the deferred standard-Adam operators (see adam_deferred_op.cc):
 * the update of the gradient's rows and the flush of every row.
 */
#include <cstdint>
#include <vector>

#include "adam_deferred_op.h"
#include "deferred_registry.h"
#include "omp_threads.h"
#include "row_prefetch.h"
#include "row_index_errors.h"

using namespace mxnet::ext;

namespace gluon_sparse {
namespace deferred {
namespace {

namespace ga = gluon_sparse::adam;

template <typename T>
bool update_cpu_typed(const Params& p, const Args& a) {
  T* weight = static_cast<T*>(a.weight);
  T* mean = static_cast<T*>(a.mean);
  T* var = static_cast<T*>(a.var);
  // Every check runs before any memory is written. `work` counts element
  // operations: the step of every gradient row, plus the replay of catch_up rows.
  int64_t work = a.nnz * a.cols;
  bool any_behind = false;
  for (int64_t k = 0; k < a.nnz; ++k) {
    const int64_t row = a.indices[k];
    const int64_t row_step = a.last_step[row];
    if (row_step == p.step - 1) continue;
    if (row_step >= p.step || row_step < 0) return report_stale_row(row, row_step, p.step);
    const int64_t offset = row * a.cols;
    any_behind = true;
    if (p.catch_up) work += (p.step - 1 - row_step) * a.cols;
    if (!p.catch_up && !gd::is_fixed_point(a.cols, mean + offset, var + offset, a.history,
                                           row_step, p.step - 1)) {
      return report_stale_row(row, row_step, p.step);
    }
  }
  a.history[p.step] = {p.lr, p.wd, p.clip_gradient};
  const auto s = ga::make_scalars<T>(p.lr, p.beta1, p.beta2, p.epsilon, p.wd, p.rescale_grad,
                                     p.clip_gradient);
  const T* grad = static_cast<const T*>(a.grad);
  const bool clip = p.clip_gradient >= 0.0f;
  const gd::FixedScalars fixed{p.beta1, p.beta2, p.epsilon};
  // Rows behind: catch_up rows, or fixed points (checked above), skipped at once.
  const gd::ReplayHints hints = gd::scan_history(a.history, any_behind ? p.step - 1 : 0);
  gluon_sparse::parallel_dynamic(a.nnz, 16, gluon_sparse::team_size(work, a.nnz), [&](int64_t k) {
    if (k + kRowsAhead < a.nnz) {
      const int64_t ahead = a.indices[k + kRowsAhead];
      prefetch_rows(ahead * a.cols, a.cols, weight, mean, var);
      prefetch_row(a.last_step + ahead, 1);
    }
    const int64_t row = a.indices[k];
    const int64_t offset = row * a.cols;
    if (a.last_step[row] < p.step - 1) {
      // catch_up (rows read by another device), or a fixed point (replay skips it).
      gd::replay_row<T>(a.cols, weight + offset, mean + offset, var + offset, a.history, fixed,
                        a.last_step[row], p.step - 1, hints);
    }
    if (clip) {
      gd::update_row_with_grad_simd<true>(a.cols, weight + offset, mean + offset, var + offset,
                                          grad + k * a.cols, s);
    } else {
      gd::update_row_with_grad_simd<false>(a.cols, weight + offset, mean + offset, var + offset,
                                           grad + k * a.cols, s);
    }
    a.last_step[row] = p.step;
  });
  return true;
}

template <typename T>
bool flush_cpu_typed(const Params& p, const Args& a, const gd::FixedScalars& fixed) {
  T* weight = static_cast<T*>(a.weight);
  T* mean = static_cast<T*>(a.mean);
  T* var = static_cast<T*>(a.var);
  for (int64_t row = 0; row < a.num_rows; ++row) {
    if (a.last_step[row] > p.step || a.last_step[row] < 0) {
      report_invalid_last_step(row, a.last_step[row], p.step);
      return false;
    }
  }
  // Dynamic scheduling: most rows are up to date (free), a few replay many steps.
  const gd::ReplayHints hints = gd::scan_history(a.history, p.step);
  int64_t work = 0;
  for (int64_t row = 0; row < a.num_rows; ++row) work += (p.step - a.last_step[row]) * a.cols;
  gluon_sparse::parallel_dynamic(a.num_rows, 256, gluon_sparse::team_size(work, a.num_rows),
                                 [&](int64_t row) {
    const int64_t row_step = a.last_step[row];
    if (row_step == p.step) return;
    const int64_t offset = row * a.cols;
    gd::replay_row<T>(a.cols, weight + offset, mean + offset, var + offset, a.history, fixed,
                      row_step, p.step, hints);
    a.last_step[row] = p.step;
  });
  return true;
}

}  // namespace

MXReturnValue compute_cpu(const ops::Attrs& attrs, std::vector<MXTensor>* inputs,
                         std::vector<MXTensor>* outputs, const OpResource& res) {
  Params p;
  Args a;
  if (!parse_params(attrs, true, &p) ||
      !collect_args(kUpdateName, kUpdateLayout, *inputs, *outputs, p.step, &a)) {
    return MX_FAIL;
  }
  p.catch_up = catches_up(a.weight, p.catch_up, p.catch_up_if_read);
  const int64_t bad = adam::first_invalid_index(a.indices, a.nnz, a.num_rows);
  if (bad < a.nnz) {
    GS_ERROR_MSG << kUpdateName << ": "
                 << gluon_sparse::invalid_row_index_message(bad, a.indices[bad],
                                                            bad > 0 ? a.indices[bad - 1] : 0,
                                                            a.num_rows);
    return MX_FAIL;
  }
  const bool ok =
      ops::with_float_type(a.dtype, [&](auto zero) { return update_cpu_typed<decltype(zero)>(p, a); });
  if (!ok) return MX_FAIL;
  set_step(a.weight, p.step);
  return MX_SUCCESS;
}

MXReturnValue flush_cpu(const ops::Attrs& attrs, std::vector<MXTensor>* inputs,
                        std::vector<MXTensor>* outputs, const OpResource& res) {
  Params p;
  Args a;
  if (!parse_params(attrs, false, &p) ||
      !collect_args(kFlushName, kFlushLayout, *inputs, *outputs, p.step, &a)) {
    return MX_FAIL;
  }
  const gd::FixedScalars fixed{p.beta1, p.beta2, p.epsilon};
  const bool ok = ops::with_float_type(
      a.dtype, [&](auto zero) { return flush_cpu_typed<decltype(zero)>(p, a, fixed); });
  return ok ? MX_SUCCESS : MX_FAIL;
}

}  // namespace deferred
}  // namespace gluon_sparse
