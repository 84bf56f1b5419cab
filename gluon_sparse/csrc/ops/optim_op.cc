/*!
 * Parameters, argument checks and attributes of the family's operators
 * (optim_op.h), written once for every rule from its RuleInfo.
 */
#include "optim_op.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "row_index_errors.h"

using namespace mxnet::ext;

namespace gluon_sparse {
namespace optim {

std::string op_name(const RuleInfo& info, OpKind kind) {
  const char* suffix = kind == OpKind::kEager            ? "_update"
                       : kind == OpKind::kDeferredUpdate ? "_deferred_update"
                                                         : "_deferred_flush";
  return std::string("gluon_sparse_") + info.name + suffix;
}

namespace {

std::string parameter_list(const RuleInfo& info, OpKind kind) {
  std::string names;
  auto add = [&](const char* name) { names += (names.empty() ? "" : ", ") + std::string(name); };
  if (kind != OpKind::kEager) add("step");
  if (kind != OpKind::kFlush) {
    for (int i = 0; i < info.num_step; ++i) add(info.step_names[i]);
  }
  for (int i = 0; i < info.num_fixed; ++i) add(info.fixed_names[i]);
  if (kind != OpKind::kFlush) add("rescale_grad");
  if (kind == OpKind::kDeferredUpdate) {
    add("catch_up");
    add("catch_up_if_read");
  }
  return names;
}

}  // namespace

int index_of(const char* const* names, int n, const std::string& key) {
  for (int i = 0; i < n; ++i) {
    if (key == names[i]) return i;
  }
  return -1;
}

bool parse_step_scalar(const RuleInfo& info, const char* op, int s, const std::string& text,
                       float* out) {
  if (info.step_parse != nullptr && info.step_parse[s] == Parse::kTupleElement) {
    return ops::parse_float_rounded(op, info.step_names[s], text, out);
  }
  return ops::parse_float(op, info.step_names[s], text, out);
}

bool parse_params(const RuleInfo& info, OpKind kind, const ops::Attrs& attrs, Params* p) {
  const std::string name = op_name(info, kind);
  const char* op = name.c_str();
  for (int i = 0; i < info.num_step; ++i) p->step_scalars[i] = info.step_defaults[i];
  for (int i = 0; i < info.num_fixed; ++i) p->fixed[i] = info.fixed_defaults[i];
  for (const auto& kv : attrs) {
    // MXNet adds its own attributes (__ext_dtype__, __profiler_scope__, ...).
    if (ops::is_framework_attr(kv.first)) continue;
    const int s = kind == OpKind::kFlush ? -1 : index_of(info.step_names, info.num_step, kv.first);
    const int f = index_of(info.fixed_names, info.num_fixed, kv.first);
    bool ok = true;
    if (s >= 0) {
      ok = parse_step_scalar(info, op, s, kv.second, &p->step_scalars[s]);
    } else if (f >= 0) {
      ok = ops::parse_float(op, kv.first, kv.second, &p->fixed[f]);
    } else if (kind != OpKind::kFlush && kv.first == "rescale_grad") {
      ok = ops::parse_float(op, kv.first, kv.second, &p->rescale_grad);
    } else if (kind != OpKind::kEager && kv.first == "step") {
      ok = ops::parse_positive_int(op, "step", kv.second, &p->step);
    } else if (kind == OpKind::kDeferredUpdate && kv.first == "catch_up") {
      ok = ops::parse_bool(op, kv.first, kv.second, &p->catch_up);
    } else if (kind == OpKind::kDeferredUpdate && kv.first == "catch_up_if_read") {
      ok = ops::parse_bool(op, kv.first, kv.second, &p->catch_up_if_read);
    } else {
      GS_ERROR_MSG << op << ": unknown parameter '" << kv.first << "'; the parameters are "
                   << parameter_list(info, kind);
      return false;
    }
    if (!ok) return false;
  }
  if (kind != OpKind::kFlush) {
    for (int i = 0; i < info.num_step; ++i) {
      if (std::isnan(info.step_defaults[i]) && std::isnan(p->step_scalars[i])) {
        GS_ERROR_MSG << op << ": parameter " << info.step_names[i]
                     << " is required (not given, or NaN)";
        return false;
      }
    }
  }
  for (int i = 0; i < info.num_fixed; ++i) {
    if (std::isnan(info.fixed_defaults[i]) && std::isnan(p->fixed[i])) {
      GS_ERROR_MSG << op << ": parameter " << info.fixed_names[i]
                   << " is required (not given, or NaN)";
      return false;
    }
  }
  if (kind != OpKind::kEager && p->step < 1) {
    GS_ERROR_MSG << op << ": parameter step (the 1-based update count) is required";
    return false;
  }
  return true;
}

Layout layout(const RuleInfo& info, OpKind kind) {
  const int n = info.num_states;
  switch (kind) {
    case OpKind::kEager:
      return {0, 1, 2, -1, -1, 2 + n};
    case OpKind::kDeferredUpdate:
      return {0, 1, 2, 2 + n, 3 + n, 4 + n};
    default:
      return {0, -1, 1, 1 + n, 2 + n, 3 + n};
  }
}

namespace {

/*! \brief The name of input i of the operator, for messages. */
std::string input_name(const RuleInfo& info, const Layout& l, int i) {
  if (i == l.weight) return "weight";
  if (i == l.grad) return "grad";
  if (i == l.last_step) return "last_step";
  if (i == l.history) return "history";
  return info.state_names[i - l.first_state];
}

}  // namespace

bool collect_args(const RuleInfo& info, OpKind kind, const Params& p,
                  const std::vector<MXTensor>& inputs, const std::vector<MXTensor>& outputs,
                  Args* a) {
  const std::string name = op_name(info, kind);
  const Layout l = layout(info, kind);
  if (static_cast<int>(inputs.size()) != l.count || outputs.size() != 1) {
    GS_ERROR_MSG << name << ": expects " << l.count << " inputs and 1 output, got "
                 << inputs.size() << " and " << outputs.size();
    return false;
  }
  const MXTensor& weight = inputs[l.weight];
  for (int i = 0; i < l.count; ++i) {
    if (inputs[i].ctx.dev_type != weight.ctx.dev_type ||
        inputs[i].ctx.dev_id != weight.ctx.dev_id) {
      GS_ERROR_MSG << name << ": " << input_name(info, l, i) << " is on " << inputs[i].ctx.dev_type
                   << "(" << inputs[i].ctx.dev_id << ") but weight is on " << weight.ctx.dev_type
                   << "(" << weight.ctx.dev_id << ")";
      return false;
    }
  }
  if (outputs[0].data_ptr != weight.data_ptr) {
    GS_ERROR_MSG << name << " updates the weight in place: call it with out=weight";
    return false;
  }
  a->gpu = weight.ctx.dev_type == "gpu";
  a->dtype = weight.dtype;
  a->weight = weight.data_ptr;
  a->num_rows = weight.shape[0];
  a->cols = 1;
  for (size_t d = 1; d < weight.shape.size(); ++d) a->cols *= weight.shape[d];
  for (int k = 0; k < kMaxStates; ++k) {
    a->states[k] = k < info.num_states ? inputs[l.first_state + k].data_ptr : nullptr;
  }
  a->last_step = nullptr;
  a->history = nullptr;
  a->capacity = 0;
  if (kind != OpKind::kEager) {
    a->last_step = static_cast<int64_t*>(inputs[l.last_step].data_ptr);
    a->history = static_cast<float*>(inputs[l.history].data_ptr);
    a->capacity = inputs[l.history].shape[0];
    if (p.step >= a->capacity) {
      GS_ERROR_MSG << name << ": step " << p.step << " does not fit a history of " << a->capacity
                   << " records (records 0.." << a->capacity - 1 << "); grow the history first";
      return false;
    }
  }
  a->grad = nullptr;
  a->indices = nullptr;
  a->nnz = 0;
  if (l.grad >= 0) {
    const MXSparse* grad = reinterpret_cast<const MXSparse*>(inputs[l.grad].data_ptr);
    if (grad->indices_len < 0 || grad->indices_len > a->num_rows ||
        grad->data_len != grad->indices_len * a->cols) {
      GS_ERROR_MSG << name << ": grad stores " << grad->indices_len << " row indices and "
                   << grad->data_len << " values, inconsistent with a weight of " << a->num_rows
                   << " rows of " << a->cols << " values";
      return false;
    }
    a->grad = grad->data;
    a->indices = grad->indices;
    a->nnz = grad->indices_len;
    if (!a->gpu) {  // the GPU kernels validate on the device
      const int64_t bad = ops::first_invalid_index(a->indices, a->nnz, a->num_rows);
      if (bad < a->nnz) {
        GS_ERROR_MSG << name << ": "
                     << invalid_row_index_message(bad, a->indices[bad],
                                                  bad > 0 ? a->indices[bad - 1] : 0, a->num_rows);
        return false;
      }
    }
  }
  return true;
}

bool report_stale_row(const RuleInfo& info, int64_t row, int64_t row_step, int64_t step) {
  const std::string name = op_name(info, OpKind::kDeferredUpdate);
  if (row_step >= step || row_step < 0) {
    GS_ERROR_MSG << name << ": row " << row << " is at step " << row_step
                 << ", which is not before this update's step " << step
                 << " (was an update applied twice, or the state replaced?)";
  } else {
    GS_ERROR_MSG << name << ": row " << row << " of the weight is at step " << row_step
                 << " but update " << step << " has a gradient for it: a forward pass read the "
                 << "row without bringing it up to date (only gluon_sparse's sparse blocks do "
                 << "that), or before the previous update (a forward pass recorded before the "
                 << "trainer.step of the batch before it), so its gradient comes from weights "
                 << "the update does not expect. Call trainer.step before the next forward "
                 << "pass, or train with " << "deferred=False when other operators read this weight";
  }
  return false;
}

bool report_invalid_last_step(const RuleInfo& info, int64_t row, int64_t row_step, int64_t step) {
  GS_ERROR_MSG << op_name(info, OpKind::kFlush) << ": row " << row << " is at step " << row_step
               << ", outside [0, " << step << "] (the state does not belong to these weights?)";
  return false;
}

// ------------------------------------------------------------------ attributes

MXReturnValue parse_attrs(const RuleInfo& info, OpKind kind, const ops::Attrs& attrs,
                          int* num_inputs, int* num_outputs) {
  Params p;
  if (!parse_params(info, kind, attrs, &p)) return MX_FAIL;
  *num_inputs = layout(info, kind).count;
  *num_outputs = 1;
  return MX_SUCCESS;
}

MXReturnValue infer_type(const RuleInfo& info, OpKind kind, std::vector<int>* in_types,
                         std::vector<int>* out_types) {
  const std::string name = op_name(info, kind);
  const Layout l = layout(info, kind);
  const int dtype = (*in_types)[l.weight];
  if (dtype != kFloat32 && dtype != kFloat64) {
    GS_ERROR_MSG << name << ": weight must be float32 or float64 (dtype " << dtype_name(dtype)
                 << "); train float16 weights with multi_precision=True";
    return MX_FAIL;
  }
  for (int i = 0; i < l.count; ++i) {
    if (i == l.weight || i == l.last_step || i == l.history) continue;
    if ((*in_types)[i] != dtype) {
      GS_ERROR_MSG << name << ": " << input_name(info, l, i) << " has dtype "
                   << dtype_name((*in_types)[i]) << " but weight has " << dtype_name(dtype)
                   << "; they must share one dtype";
      return MX_FAIL;
    }
  }
  if (l.last_step >= 0 && (*in_types)[l.last_step] != kInt64) {
    GS_ERROR_MSG << name << ": last_step must be int64 (dtype "
                 << dtype_name((*in_types)[l.last_step])
                 << ")";
    return MX_FAIL;
  }
  if (l.history >= 0 && (*in_types)[l.history] != kFloat32) {
    GS_ERROR_MSG << name << ": history must be float32 (dtype "
                 << dtype_name((*in_types)[l.history])
                 << ")";
    return MX_FAIL;
  }
  (*out_types)[0] = dtype;
  return MX_SUCCESS;
}

MXReturnValue infer_shape(const RuleInfo& info, OpKind kind,
                          std::vector<std::vector<unsigned int>>* in_shapes,
                          std::vector<std::vector<unsigned int>>* out_shapes) {
  const std::string name = op_name(info, kind);
  const Layout l = layout(info, kind);
  const auto& weight = (*in_shapes)[l.weight];
  if (weight.empty()) {
    GS_ERROR_MSG << name << ": weight must have at least one dimension (its rows)";
    return MX_FAIL;
  }
  for (int i = 0; i < l.count; ++i) {
    if (i == l.weight || i == l.last_step || i == l.history) continue;
    if ((*in_shapes)[i] != weight) {
      GS_ERROR_MSG << name << ": " << input_name(info, l, i) << " has shape "
                   << ops::shape_str((*in_shapes)[i]) << " but weight has shape "
                   << ops::shape_str(weight);
      return MX_FAIL;
    }
  }
  if (l.last_step >= 0) {
    const auto& last_step = (*in_shapes)[l.last_step];
    if (last_step.size() != 1 || last_step[0] != weight[0]) {
      GS_ERROR_MSG << name << ": last_step must have shape (" << weight[0] << ",), one step per "
                   << "weight row, but has shape " << ops::shape_str(last_step);
      return MX_FAIL;
    }
    const auto& history = (*in_shapes)[l.history];
    if (history.size() != 2 || history[1] != static_cast<unsigned>(info.num_step) ||
        history[0] < 2) {
      GS_ERROR_MSG << name << ": history must have shape (capacity, " << info.num_step
                   << ") with capacity >= 2, but has shape " << ops::shape_str(history);
      return MX_FAIL;
    }
  }
  (*out_shapes)[0] = weight;
  return MX_SUCCESS;
}

MXReturnValue infer_storage(const RuleInfo& info, OpKind kind, std::vector<int>* in_stypes,
                            std::vector<int>* out_stypes) {
  const std::string name = op_name(info, kind);
  const Layout l = layout(info, kind);
  for (int i = 0; i < l.count; ++i) {
    if (i == l.grad) continue;
    if ((*in_stypes)[i] != kDefaultStorage) {
      GS_ERROR_MSG << name << ": " << input_name(info, l, i) << " must be dense (default storage)";
      return MX_FAIL;
    }
  }
  if (l.grad >= 0 && (*in_stypes)[l.grad] != kRowSparseStorage) {
    GS_ERROR_MSG << name << ": grad must be row_sparse (a dense gradient touches every row: use "
                 << "MXNet's own update for it)";
    return MX_FAIL;
  }
  (*out_stypes)[0] = kDefaultStorage;
  return MX_SUCCESS;
}

void mutated_inputs(const RuleInfo& info, OpKind kind, std::vector<int>* input_indices) {
  const Layout l = layout(info, kind);
  for (int k = 0; k < info.num_states; ++k) input_indices->push_back(l.first_state + k);
  if (l.last_step >= 0) input_indices->push_back(l.last_step);
  // The flush reads the history only; the update writes its record.
  if (kind == OpKind::kDeferredUpdate) input_indices->push_back(l.history);
}

}  // namespace optim
}  // namespace gluon_sparse
