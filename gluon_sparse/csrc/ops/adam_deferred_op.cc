/*!
 * Deferred standard Adam: the results of standard (non-lazy) Adam at the cost
 * of lazy Adam.
 *
 *   gs_adam_deferred_update(weight, grad, mean, var, last_step, history,
 *                           out=weight, lr=..., step=t, beta1=0.9, beta2=0.999,
 *                           epsilon=1e-8, wd=0, rescale_grad=1, clip_gradient=-1)
 *   gs_adam_deferred_flush(weight, mean, var, last_step, history, out=weight,
 *                          step=t, beta1=0.9, beta2=0.999, epsilon=1e-8)
 *
 * Standard Adam moves every row every step, but a row absent from the gradient
 * moves by a function of its own (weight, mean, var) and the step's scalars
 * only. The update therefore records the step's scalars in `history[t]`
 * (float32 lr, wd, clip_gradient: a (capacity, 3) array) and applies the step
 * to the gradient's rows alone, setting their `last_step` (int64, one per row)
 * to t. Rows left behind are brought up to date by replaying the steps they
 * missed (adam_deferred_kernels.h), with the eager operator's arithmetic, so
 * results are bitwise equal to gs_adam_update's:
 *   - by the product operators, for exactly the rows a batch reads (the
 *     registry, adam_deferred_registry.h),
 *   - by gs_adam_deferred_flush, for every row, before the weights are saved
 *     or handed out.
 *
 * A gradient row must be at step t - 1 (the forward pass that produced the
 * gradient brought it there), unless the missed steps are no-ops for it. A
 * row further behind was read stale by something that does not refresh rows;
 * the update then fails, before touching memory, instead of silently
 * diverging from standard Adam. With `catch_up=1` such rows are brought up to
 * date first instead: with several devices the gradient is summed over all of
 * them, and a row that only another device's batch read (and refreshed there)
 * is legitimately behind on this one.
 *
 * weight, mean and var are dense, of one dtype (float32 or float64); mean,
 * var, last_step and history are mutated inputs, the weight is written through
 * `out`, which must be the weight itself.
 *
 * Layout: compute functions, then attribute functions, then REGISTER_OP.
 */
#include <omp.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

#include "adam_deferred_kernels.h"
#include "adam_deferred_registry.h"
#include "mxnet/lib_api.h"
#include "row_index_errors.h"
#include "omp_threads.h"
#if GLUON_SPARSE_WITH_CUDA
#include "adam_deferred_kernels_cuda.h"
#endif

using namespace mxnet::ext;

namespace {

namespace ga = gluon_sparse::adam;
namespace gd = gluon_sparse::adam::deferred;

constexpr const char* kUpdateName = "gs_adam_deferred_update";
constexpr const char* kFlushName = "gs_adam_deferred_flush";

using Attrs = std::unordered_map<std::string, std::string>;

/*! \brief The parameters of both operators, parsed as the eager operator parses them. */
struct Params {
  float lr = NAN;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float wd = 0.0f;
  float rescale_grad = 1.0f;
  float clip_gradient = -1.0f;
  int64_t step = -1;
  bool catch_up = false;
};

bool parse_float(const char* op, const std::string& key, const std::string& text, float* out) {
  errno = 0;
  char* end = nullptr;
  const float value = std::strtof(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE) {
    MX_ERROR_MSG << op << ": parameter " << key << "='" << text << "' is not a float32 number";
    return false;
  }
  *out = value;
  return true;
}

bool parse_flag(const char* op, const std::string& key, const std::string& text, bool* out) {
  if (text == "0" || text == "False" || text == "false") {
    *out = false;
  } else if (text == "1" || text == "True" || text == "true") {
    *out = true;
  } else {
    MX_ERROR_MSG << op << ": parameter " << key << " must be 0/1 or True/False, got '" << text
                 << "'";
    return false;
  }
  return true;
}

bool parse_step(const char* op, const std::string& text, int64_t* out) {
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || value < 1) {
    MX_ERROR_MSG << op << ": parameter step='" << text << "' is not a positive integer";
    return false;
  }
  *out = value;
  return true;
}

/*! \brief Parse `attrs`; `is_update` selects the update's parameters, else the flush's. */
bool parse_params(const Attrs& attrs, bool is_update, Params* p) {
  const char* op = is_update ? kUpdateName : kFlushName;
  std::unordered_map<std::string, float*> fields = {
      {"beta1", &p->beta1}, {"beta2", &p->beta2}, {"epsilon", &p->epsilon}};
  if (is_update) {
    fields.insert({{"lr", &p->lr}, {"wd", &p->wd}, {"rescale_grad", &p->rescale_grad},
                   {"clip_gradient", &p->clip_gradient}});
  }
  for (const auto& kv : attrs) {
    // MXNet adds its own attributes (__ext_dtype__, __profiler_scope__, ...).
    if (kv.first.rfind("__", 0) == 0) continue;
    if (kv.first == "step") {
      if (!parse_step(op, kv.second, &p->step)) return false;
      continue;
    }
    if (is_update && kv.first == "catch_up") {
      if (!parse_flag(op, kv.first, kv.second, &p->catch_up)) return false;
      continue;
    }
    const auto field = fields.find(kv.first);
    if (field == fields.end()) {
      MX_ERROR_MSG << op << ": unknown parameter '" << kv.first << "'; the parameters are "
                   << (is_update ? "lr, step, beta1, beta2, epsilon, wd, rescale_grad, "
                                   "clip_gradient, catch_up"
                                 : "step, beta1, beta2, epsilon");
      return false;
    }
    if (!parse_float(op, kv.first, kv.second, field->second)) return false;
  }
  if (is_update && std::isnan(p->lr)) {
    MX_ERROR_MSG << op << ": parameter lr is required";
    return false;
  }
  if (p->step < 1) {
    MX_ERROR_MSG << op << ": parameter step (the 1-based update count) is required";
    return false;
  }
  return true;
}

/*! \brief Input positions of each operator. */
struct Layout {
  int weight, grad, mean, var, last_step, history, count;
  const char* const* names;
};
const char* const kUpdateInputs[] = {"weight", "grad", "mean", "var", "last_step", "history"};
const char* const kFlushInputs[] = {"weight", "mean", "var", "last_step", "history"};
constexpr Layout kUpdateLayout = {0, 1, 2, 3, 4, 5, 6, kUpdateInputs};
constexpr Layout kFlushLayout = {0, -1, 1, 2, 3, 4, 5, kFlushInputs};

/*! \brief Raw pointers and sizes of one call, after every check has passed. */
struct Args {
  void* weight;
  void* mean;
  void* var;
  int64_t* last_step;
  gd::StepRecord* history;
  int64_t capacity;
  const void* grad;
  const int64_t* indices;
  int64_t nnz;
  int64_t num_rows;
  int64_t cols;
  MXDType dtype;
  bool gpu;
};

bool collect_args(const char* op, const Layout& layout, const std::vector<MXTensor>& inputs,
                  const std::vector<MXTensor>& outputs, int64_t step, Args* a) {
  if (static_cast<int>(inputs.size()) != layout.count || outputs.size() != 1) {
    MX_ERROR_MSG << op << ": expects " << layout.count << " inputs and 1 output, got "
                 << inputs.size() << " and " << outputs.size();
    return false;
  }
  const MXTensor& weight = inputs[layout.weight];
  for (int i = 0; i < layout.count; ++i) {
    if (inputs[i].ctx.dev_type != weight.ctx.dev_type || inputs[i].ctx.dev_id != weight.ctx.dev_id) {
      MX_ERROR_MSG << op << ": " << layout.names[i] << " is on " << inputs[i].ctx.dev_type << "("
                   << inputs[i].ctx.dev_id << ") but weight is on " << weight.ctx.dev_type << "("
                   << weight.ctx.dev_id << ")";
      return false;
    }
  }
  if (outputs[0].data_ptr != weight.data_ptr) {
    MX_ERROR_MSG << op << " updates the weight in place: call it with out=weight";
    return false;
  }
  a->gpu = weight.ctx.dev_type == "gpu";
  a->dtype = weight.dtype;
  a->weight = weight.data_ptr;
  a->num_rows = weight.shape[0];
  a->cols = 1;
  for (size_t d = 1; d < weight.shape.size(); ++d) a->cols *= weight.shape[d];
  a->mean = inputs[layout.mean].data_ptr;
  a->var = inputs[layout.var].data_ptr;
  a->last_step = static_cast<int64_t*>(inputs[layout.last_step].data_ptr);
  a->history = static_cast<gd::StepRecord*>(inputs[layout.history].data_ptr);
  a->capacity = inputs[layout.history].shape[0];
  if (step >= a->capacity) {
    MX_ERROR_MSG << op << ": step " << step << " does not fit a history of " << a->capacity
                 << " records (records 0.." << a->capacity - 1 << "); grow the history first";
    return false;
  }
  a->grad = nullptr;
  a->indices = nullptr;
  a->nnz = 0;
  if (layout.grad >= 0) {
    const MXSparse* grad = reinterpret_cast<const MXSparse*>(inputs[layout.grad].data_ptr);
    if (grad->indices_len < 0 || grad->indices_len > a->num_rows ||
        grad->data_len != grad->indices_len * a->cols) {
      MX_ERROR_MSG << op << ": grad stores " << grad->indices_len << " row indices and "
                   << grad->data_len << " values, inconsistent with a weight of " << a->num_rows
                   << " rows of " << a->cols << " values";
      return false;
    }
    a->grad = grad->data;
    a->indices = grad->indices;
    a->nnz = grad->indices_len;
  }
  return true;
}

bool report_stale_row(int64_t row, int64_t row_step, int64_t step) {
  if (row_step >= step || row_step < 0) {
    MX_ERROR_MSG << kUpdateName << ": row " << row << " is at step " << row_step
                 << ", which is not before this update's step " << step
                 << " (was an update applied twice, or the state replaced?)";
  } else {
    MX_ERROR_MSG << kUpdateName << ": row " << row << " of the weight is at step " << row_step
                 << " but update " << step << " has a gradient for it: a forward pass read the "
                 << "row without bringing it up to date (only gluon_sparse's sparse blocks do "
                 << "that), so its gradient comes from stale weights. Train with "
                 << "SparseAdam(deferred=False) when other operators read this weight";
  }
  return false;
}

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
    const int64_t row = a.indices[k];
    const int64_t offset = row * a.cols;
    if (a.last_step[row] < p.step - 1) {
      // catch_up (rows read by another device), or a fixed point (replay skips it).
      gd::replay_row<T>(a.cols, weight + offset, mean + offset, var + offset, a.history, fixed,
                        a.last_step[row], p.step - 1, hints);
    }
    if (clip) {
      ga::update_row_with_grad<true>(a.cols, weight + offset, mean + offset, var + offset,
                                     grad + k * a.cols, s);
    } else {
      ga::update_row_with_grad<false>(a.cols, weight + offset, mean + offset, var + offset,
                                      grad + k * a.cols, s);
    }
    a.last_step[row] = p.step;
  });
  return true;
}

/*! \brief The flush's error for a row whose last_step lies outside [0, step]. */
void report_invalid_last_step(int64_t row, int64_t row_step, int64_t step) {
  MX_ERROR_MSG << kFlushName << ": row " << row << " is at step " << row_step << ", outside [0, "
               << step << "] (the state does not belong to these weights?)";
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

MXReturnValue update_cpu(const Attrs& attrs, std::vector<MXTensor>* inputs,
                         std::vector<MXTensor>* outputs, const OpResource& res) {
  Params p;
  Args a;
  if (!parse_params(attrs, true, &p) ||
      !collect_args(kUpdateName, kUpdateLayout, *inputs, *outputs, p.step, &a)) {
    return MX_FAIL;
  }
  const int64_t bad = ga::first_invalid_index(a.indices, a.nnz, a.num_rows);
  if (bad < a.nnz) {
    MX_ERROR_MSG << kUpdateName << ": "
                 << gluon_sparse::invalid_row_index_message(bad, a.indices[bad],
                                                            bad > 0 ? a.indices[bad - 1] : 0,
                                                            a.num_rows);
    return MX_FAIL;
  }
  const bool ok = a.dtype == kFloat64 ? update_cpu_typed<double>(p, a)
                                      : update_cpu_typed<float>(p, a);
  if (!ok) return MX_FAIL;
  gluon_sparse::deferred::set_step(a.weight, p.step);
  return MX_SUCCESS;
}

MXReturnValue flush_cpu(const Attrs& attrs, std::vector<MXTensor>* inputs,
                        std::vector<MXTensor>* outputs, const OpResource& res) {
  Params p;
  Args a;
  if (!parse_params(attrs, false, &p) ||
      !collect_args(kFlushName, kFlushLayout, *inputs, *outputs, p.step, &a)) {
    return MX_FAIL;
  }
  const gd::FixedScalars fixed{p.beta1, p.beta2, p.epsilon};
  const bool ok = a.dtype == kFloat64 ? flush_cpu_typed<double>(p, a, fixed)
                                      : flush_cpu_typed<float>(p, a, fixed);
  return ok ? MX_SUCCESS : MX_FAIL;
}

#if GLUON_SPARSE_WITH_CUDA
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
      MX_ERROR_MSG << kUpdateName << ": "
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
      MX_ERROR_MSG << kUpdateName << ": CUDA error while checking the gradient rows: "
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
    MX_ERROR_MSG << kUpdateName << ": CUDA error: " << status.error;
    return false;
  }
  return true;
}

MXReturnValue update_gpu(const Attrs& attrs, std::vector<MXTensor>* inputs,
                         std::vector<MXTensor>* outputs, const OpResource& res) {
  Params p;
  Args a;
  if (!parse_params(attrs, true, &p) ||
      !collect_args(kUpdateName, kUpdateLayout, *inputs, *outputs, p.step, &a)) {
    return MX_FAIL;
  }
  void* stream = res.get_cuda_stream();
  const bool ok = a.dtype == kFloat64 ? update_gpu_typed<double>(p, a, res, stream)
                                      : update_gpu_typed<float>(p, a, res, stream);
  if (!ok) return MX_FAIL;
  gluon_sparse::deferred::set_step(a.weight, p.step);
  return MX_SUCCESS;
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
    MX_ERROR_MSG << kFlushName << ": CUDA error: " << status.error;
    return false;
  }
  return true;
}

MXReturnValue flush_gpu(const Attrs& attrs, std::vector<MXTensor>* inputs,
                        std::vector<MXTensor>* outputs, const OpResource& res) {
  Params p;
  Args a;
  if (!parse_params(attrs, false, &p) ||
      !collect_args(kFlushName, kFlushLayout, *inputs, *outputs, p.step, &a)) {
    return MX_FAIL;
  }
  void* stream = res.get_cuda_stream();
  const bool ok = a.dtype == kFloat64 ? flush_gpu_typed<double>(p, a, res, stream)
                                      : flush_gpu_typed<float>(p, a, res, stream);
  return ok ? MX_SUCCESS : MX_FAIL;
}
#endif  // GLUON_SPARSE_WITH_CUDA

// ---------------------------------------------------------------- attributes

MXReturnValue parse_update_attrs(const Attrs& attrs, int* num_inputs, int* num_outputs) {
  Params p;
  if (!parse_params(attrs, true, &p)) return MX_FAIL;
  *num_inputs = kUpdateLayout.count;
  *num_outputs = 1;
  return MX_SUCCESS;
}

MXReturnValue parse_flush_attrs(const Attrs& attrs, int* num_inputs, int* num_outputs) {
  Params p;
  if (!parse_params(attrs, false, &p)) return MX_FAIL;
  *num_inputs = kFlushLayout.count;
  *num_outputs = 1;
  return MX_SUCCESS;
}

bool check_types(const char* op, const Layout& layout, std::vector<int>* in_types,
                 std::vector<int>* out_types) {
  const int dtype = (*in_types)[layout.weight];
  if (dtype != kFloat32 && dtype != kFloat64) {
    MX_ERROR_MSG << op << ": weight must be float32 or float64 (dtype code " << dtype
                 << "); train float16 weights with multi_precision=True";
    return false;
  }
  for (int i : {layout.grad, layout.mean, layout.var}) {
    if (i >= 0 && (*in_types)[i] != dtype) {
      MX_ERROR_MSG << op << ": " << layout.names[i] << " has dtype code " << (*in_types)[i]
                   << " but weight has " << dtype << "; they must share one dtype";
      return false;
    }
  }
  if ((*in_types)[layout.last_step] != kInt64) {
    MX_ERROR_MSG << op << ": last_step must be int64 (dtype code " << (*in_types)[layout.last_step]
                 << ")";
    return false;
  }
  if ((*in_types)[layout.history] != kFloat32) {
    MX_ERROR_MSG << op << ": history must be float32 (dtype code " << (*in_types)[layout.history]
                 << ")";
    return false;
  }
  (*out_types)[0] = dtype;
  return true;
}

MXReturnValue infer_update_type(const Attrs& attrs, std::vector<int>* in_types,
                                std::vector<int>* out_types) {
  return check_types(kUpdateName, kUpdateLayout, in_types, out_types) ? MX_SUCCESS : MX_FAIL;
}

MXReturnValue infer_flush_type(const Attrs& attrs, std::vector<int>* in_types,
                               std::vector<int>* out_types) {
  return check_types(kFlushName, kFlushLayout, in_types, out_types) ? MX_SUCCESS : MX_FAIL;
}

std::string shape_str(const std::vector<unsigned int>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

bool check_shapes(const char* op, const Layout& layout,
                  std::vector<std::vector<unsigned int>>* in_shapes,
                  std::vector<std::vector<unsigned int>>* out_shapes) {
  const auto& weight = (*in_shapes)[layout.weight];
  if (weight.empty()) {
    MX_ERROR_MSG << op << ": weight must have at least one dimension (its rows)";
    return false;
  }
  for (int i : {layout.grad, layout.mean, layout.var}) {
    if (i >= 0 && (*in_shapes)[i] != weight) {
      MX_ERROR_MSG << op << ": " << layout.names[i] << " has shape "
                   << shape_str((*in_shapes)[i]) << " but weight has shape "
                   << shape_str(weight);
      return false;
    }
  }
  const auto& last_step = (*in_shapes)[layout.last_step];
  if (last_step.size() != 1 || last_step[0] != weight[0]) {
    MX_ERROR_MSG << op << ": last_step must have shape (" << weight[0] << ",), one step per "
                 << "weight row, but has shape " << shape_str(last_step);
    return false;
  }
  const auto& history = (*in_shapes)[layout.history];
  if (history.size() != 2 || history[1] != 3 || history[0] < 2) {
    MX_ERROR_MSG << op << ": history must have shape (capacity, 3) with capacity >= 2, but has "
                 << "shape " << shape_str(history);
    return false;
  }
  (*out_shapes)[0] = weight;
  return true;
}

MXReturnValue infer_update_shape(const Attrs& attrs,
                                 std::vector<std::vector<unsigned int>>* in_shapes,
                                 std::vector<std::vector<unsigned int>>* out_shapes) {
  return check_shapes(kUpdateName, kUpdateLayout, in_shapes, out_shapes) ? MX_SUCCESS : MX_FAIL;
}

MXReturnValue infer_flush_shape(const Attrs& attrs,
                                std::vector<std::vector<unsigned int>>* in_shapes,
                                std::vector<std::vector<unsigned int>>* out_shapes) {
  return check_shapes(kFlushName, kFlushLayout, in_shapes, out_shapes) ? MX_SUCCESS : MX_FAIL;
}

bool check_storage(const char* op, const Layout& layout, std::vector<int>* in_stypes,
                   std::vector<int>* out_stypes) {
  for (int i = 0; i < layout.count; ++i) {
    if (i == layout.grad) continue;
    if ((*in_stypes)[i] != kDefaultStorage) {
      MX_ERROR_MSG << op << ": " << layout.names[i] << " must be dense (default storage)";
      return false;
    }
  }
  if (layout.grad >= 0 && (*in_stypes)[layout.grad] != kRowSparseStorage) {
    MX_ERROR_MSG << op << ": grad must be row_sparse; a dense gradient touches every row, so "
                 << "deferring buys nothing: use gs_adam_update or adam_update";
    return false;
  }
  (*out_stypes)[0] = kDefaultStorage;
  return true;
}

MXReturnValue infer_update_storage(const Attrs& attrs, std::vector<int>* in_stypes,
                                   std::vector<int>* out_stypes) {
  return check_storage(kUpdateName, kUpdateLayout, in_stypes, out_stypes) ? MX_SUCCESS : MX_FAIL;
}

MXReturnValue infer_flush_storage(const Attrs& attrs, std::vector<int>* in_stypes,
                                  std::vector<int>* out_stypes) {
  return check_storage(kFlushName, kFlushLayout, in_stypes, out_stypes) ? MX_SUCCESS : MX_FAIL;
}

MXReturnValue mutate_update_inputs(const Attrs& attrs, std::vector<int>* input_indices) {
  for (int i : {kUpdateLayout.mean, kUpdateLayout.var, kUpdateLayout.last_step,
                kUpdateLayout.history}) {
    input_indices->push_back(i);
  }
  return MX_SUCCESS;
}

MXReturnValue mutate_flush_inputs(const Attrs& attrs, std::vector<int>* input_indices) {
  for (int i : {kFlushLayout.mean, kFlushLayout.var, kFlushLayout.last_step}) {
    input_indices->push_back(i);
  }
  return MX_SUCCESS;
}

}  // namespace

REGISTER_OP(gs_adam_deferred_update)
    .setParseAttrs(parse_update_attrs)
    .setInferType(infer_update_type)
    .setInferShape(infer_update_shape)
    .setInferSType(infer_update_storage)
    .setMutateInputs(mutate_update_inputs)
#if GLUON_SPARSE_WITH_CUDA
    .setForward(update_gpu, "gpu")
#endif
    .setForward(update_cpu, "cpu");

REGISTER_OP(gs_adam_deferred_flush)
    .setParseAttrs(parse_flush_attrs)
    .setInferType(infer_flush_type)
    .setInferShape(infer_flush_shape)
    .setInferSType(infer_flush_storage)
    .setMutateInputs(mutate_flush_inputs)
#if GLUON_SPARSE_WITH_CUDA
    .setForward(flush_gpu, "gpu")
#endif
    .setForward(flush_cpu, "cpu");
