/*!
 * Deferred standard Adam: the results of standard (non-lazy) Adam at the cost
 * of lazy Adam.
 *
 *   gluon_sparse_adam_deferred_update(weight, grad, mean, var, last_step, history,
 *                           out=weight, lr=..., step=t, beta1=0.9, beta2=0.999,
 *                           epsilon=1e-8, wd=0, rescale_grad=1, clip_gradient=-1)
 *   gluon_sparse_adam_deferred_flush(weight, mean, var, last_step, history, out=weight,
 *                          step=t, beta1=0.9, beta2=0.999, epsilon=1e-8)
 *
 * Standard Adam moves every row every step, but a row absent from the gradient
 * moves by a function of its own (weight, mean, var) and the step's scalars
 * only. The update therefore records the step's scalars in `history[t]`
 * (float32 lr, wd, clip_gradient: a (capacity, 3) array) and applies the step
 * to the gradient's rows alone, setting their `last_step` (int64, one per row)
 * to t. Rows left behind are brought up to date by replaying the steps they
 * missed (adam_deferred_kernels.h), with the eager operator's arithmetic, so
 * results are bitwise equal to gluon_sparse_adam_update's:
 *   - by the product operators, for exactly the rows a batch reads (the
 *     registry, deferred_registry.h),
 *   - by gluon_sparse_adam_deferred_flush, for every row, before the weights are saved
 *     or handed out.
 *
 * A gradient row must be at step t - 1 (the forward pass that produced the
 * gradient brought it there), unless the missed steps are no-ops for it. A
 * row further behind was read stale by something that does not refresh rows;
 * the update then fails, before touching memory, instead of silently
 * diverging from standard Adam. With `catch_up=1` such rows are brought up to
 * date first instead: with several devices the gradient is summed over all of
 * them, and a row that only another device's batch read (and refreshed there)
 * is legitimately behind on this one. With `catch_up_if_read=1` too, only
 * where a product operator has read the weight (deferred_registry.h,
 * read_by_product): a weight that only other operators read was read stale.
 *
 * weight, mean and var are dense, of one dtype (float32 or float64); mean,
 * var, last_step and history are mutated inputs, the weight is written through
 * `out`, which must be the weight itself.
 *
 * Files: this one (parameters, argument checks, attributes, registration),
 * adam_deferred_op_cpu.cc and adam_deferred_op_gpu.cc (compute), the replay in
 * adam_deferred_kernels.h / .cu, the row refresh in deferred_registry.cc.
 */
#include <cmath>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "adam_deferred_op.h"

using namespace mxnet::ext;

namespace gluon_sparse {
namespace deferred {

/*! \brief Parse `attrs`; `is_update` selects the update's parameters, else the flush's. */
bool parse_params(const ops::Attrs& attrs, bool is_update, Params* p) {
  const char* op = is_update ? kUpdateName : kFlushName;
  std::unordered_map<std::string, float*> fields = {
      {"beta1", &p->beta1}, {"beta2", &p->beta2}, {"epsilon", &p->epsilon}};
  if (is_update) {
    fields.insert({{"lr", &p->lr}, {"wd", &p->wd}, {"rescale_grad", &p->rescale_grad},
                   {"clip_gradient", &p->clip_gradient}});
  }
  for (const auto& kv : attrs) {
    // MXNet adds its own attributes (__ext_dtype__, __profiler_scope__, ...).
    if (ops::is_framework_attr(kv.first)) continue;
    if (kv.first == "step") {
      if (!ops::parse_positive_int(op, "step", kv.second, &p->step)) return false;
      continue;
    }
    if (is_update && kv.first == "catch_up") {
      if (!ops::parse_bool(op, kv.first, kv.second, &p->catch_up)) return false;
      continue;
    }
    if (is_update && kv.first == "catch_up_if_read") {
      if (!ops::parse_bool(op, kv.first, kv.second, &p->catch_up_if_read)) return false;
      continue;
    }
    const auto field = fields.find(kv.first);
    if (field == fields.end()) {
      GS_ERROR_MSG << op << ": unknown parameter '" << kv.first << "'; the parameters are "
                   << (is_update ? "lr, step, beta1, beta2, epsilon, wd, rescale_grad, "
                                   "clip_gradient, catch_up, catch_up_if_read"
                                 : "step, beta1, beta2, epsilon");
      return false;
    }
    if (!ops::parse_float(op, kv.first, kv.second, field->second)) return false;
  }
  if (is_update && std::isnan(p->lr)) {
    GS_ERROR_MSG << op << ": parameter lr is required (not given, or NaN)";
    return false;
  }
  if (p->step < 1) {
    GS_ERROR_MSG << op << ": parameter step (the 1-based update count) is required";
    return false;
  }
  return true;
}

bool collect_args(const char* op, const Layout& layout, const std::vector<MXTensor>& inputs,
                  const std::vector<MXTensor>& outputs, int64_t step, Args* a) {
  if (static_cast<int>(inputs.size()) != layout.count || outputs.size() != 1) {
    GS_ERROR_MSG << op << ": expects " << layout.count << " inputs and 1 output, got "
                 << inputs.size() << " and " << outputs.size();
    return false;
  }
  const MXTensor& weight = inputs[layout.weight];
  for (int i = 0; i < layout.count; ++i) {
    if (inputs[i].ctx.dev_type != weight.ctx.dev_type ||
        inputs[i].ctx.dev_id != weight.ctx.dev_id) {
      GS_ERROR_MSG << op << ": " << layout.names[i] << " is on " << inputs[i].ctx.dev_type << "("
                   << inputs[i].ctx.dev_id << ") but weight is on " << weight.ctx.dev_type << "("
                   << weight.ctx.dev_id << ")";
      return false;
    }
  }
  if (outputs[0].data_ptr != weight.data_ptr) {
    GS_ERROR_MSG << op << " updates the weight in place: call it with out=weight";
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
    GS_ERROR_MSG << op << ": step " << step << " does not fit a history of " << a->capacity
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
      GS_ERROR_MSG << op << ": grad stores " << grad->indices_len << " row indices and "
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
    GS_ERROR_MSG << kUpdateName << ": row " << row << " is at step " << row_step
                 << ", which is not before this update's step " << step
                 << " (was an update applied twice, or the state replaced?)";
  } else {
    GS_ERROR_MSG << kUpdateName << ": row " << row << " of the weight is at step " << row_step
                 << " but update " << step << " has a gradient for it: a forward pass read the "
                 << "row without bringing it up to date (only gluon_sparse's sparse blocks do "
                 << "that), or before the previous update (a forward pass recorded before the "
                 << "trainer.step of the batch before it), so its gradient comes from weights "
                 << "the update does not expect. Call trainer.step before the next forward "
                 << "pass, or train with " << "SparseAdam(deferred=False) when other operators read this weight";
  }
  return false;
}

/*! \brief The flush's error for a row whose last_step lies outside [0, step]. */
void report_invalid_last_step(int64_t row, int64_t row_step, int64_t step) {
  GS_ERROR_MSG << kFlushName << ": row " << row << " is at step " << row_step << ", outside [0, "
               << step << "] (the state does not belong to these weights?)";
}

namespace {

// ---------------------------------------------------------------- attributes

MXReturnValue parse_update_attrs(const ops::Attrs& attrs, int* num_inputs, int* num_outputs) {
  Params p;
  if (!parse_params(attrs, true, &p)) return MX_FAIL;
  *num_inputs = kUpdateLayout.count;
  *num_outputs = 1;
  return MX_SUCCESS;
}

MXReturnValue parse_flush_attrs(const ops::Attrs& attrs, int* num_inputs, int* num_outputs) {
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
    GS_ERROR_MSG << op << ": weight must be float32 or float64 (dtype " << dtype_name(dtype)
                 << "); train float16 weights with multi_precision=True";
    return false;
  }
  for (int i : {layout.grad, layout.mean, layout.var}) {
    if (i >= 0 && (*in_types)[i] != dtype) {
      GS_ERROR_MSG << op << ": " << layout.names[i] << " has dtype " << dtype_name((*in_types)[i])
                   << " but weight has " << dtype_name(dtype) << "; they must share one dtype";
      return false;
    }
  }
  if ((*in_types)[layout.last_step] != kInt64) {
    GS_ERROR_MSG << op << ": last_step must be int64 (dtype "
                 << dtype_name((*in_types)[layout.last_step])
                 << ")";
    return false;
  }
  if ((*in_types)[layout.history] != kFloat32) {
    GS_ERROR_MSG << op << ": history must be float32 (dtype "
                 << dtype_name((*in_types)[layout.history])
                 << ")";
    return false;
  }
  (*out_types)[0] = dtype;
  return true;
}

MXReturnValue infer_update_type(const ops::Attrs& attrs, std::vector<int>* in_types,
                                std::vector<int>* out_types) {
  return check_types(kUpdateName, kUpdateLayout, in_types, out_types) ? MX_SUCCESS : MX_FAIL;
}

MXReturnValue infer_flush_type(const ops::Attrs& attrs, std::vector<int>* in_types,
                               std::vector<int>* out_types) {
  return check_types(kFlushName, kFlushLayout, in_types, out_types) ? MX_SUCCESS : MX_FAIL;
}

bool check_shapes(const char* op, const Layout& layout,
                  std::vector<std::vector<unsigned int>>* in_shapes,
                  std::vector<std::vector<unsigned int>>* out_shapes) {
  const auto& weight = (*in_shapes)[layout.weight];
  if (weight.empty()) {
    GS_ERROR_MSG << op << ": weight must have at least one dimension (its rows)";
    return false;
  }
  for (int i : {layout.grad, layout.mean, layout.var}) {
    if (i >= 0 && (*in_shapes)[i] != weight) {
      GS_ERROR_MSG << op << ": " << layout.names[i] << " has shape "
                   << ops::shape_str((*in_shapes)[i]) << " but weight has shape "
                   << ops::shape_str(weight);
      return false;
    }
  }
  const auto& last_step = (*in_shapes)[layout.last_step];
  if (last_step.size() != 1 || last_step[0] != weight[0]) {
    GS_ERROR_MSG << op << ": last_step must have shape (" << weight[0] << ",), one step per "
                 << "weight row, but has shape " << ops::shape_str(last_step);
    return false;
  }
  const auto& history = (*in_shapes)[layout.history];
  if (history.size() != 2 || history[1] != 3 || history[0] < 2) {
    GS_ERROR_MSG << op << ": history must have shape (capacity, 3) with capacity >= 2, but has "
                 << "shape " << ops::shape_str(history);
    return false;
  }
  (*out_shapes)[0] = weight;
  return true;
}

MXReturnValue infer_update_shape(const ops::Attrs& attrs,
                                 std::vector<std::vector<unsigned int>>* in_shapes,
                                 std::vector<std::vector<unsigned int>>* out_shapes) {
  return check_shapes(kUpdateName, kUpdateLayout, in_shapes, out_shapes) ? MX_SUCCESS : MX_FAIL;
}

MXReturnValue infer_flush_shape(const ops::Attrs& attrs,
                                std::vector<std::vector<unsigned int>>* in_shapes,
                                std::vector<std::vector<unsigned int>>* out_shapes) {
  return check_shapes(kFlushName, kFlushLayout, in_shapes, out_shapes) ? MX_SUCCESS : MX_FAIL;
}

bool check_storage(const char* op, const Layout& layout, std::vector<int>* in_stypes,
                   std::vector<int>* out_stypes) {
  for (int i = 0; i < layout.count; ++i) {
    if (i == layout.grad) continue;
    if ((*in_stypes)[i] != kDefaultStorage) {
      GS_ERROR_MSG << op << ": " << layout.names[i] << " must be dense (default storage)";
      return false;
    }
  }
  if (layout.grad >= 0 && (*in_stypes)[layout.grad] != kRowSparseStorage) {
    GS_ERROR_MSG << op << ": grad must be row_sparse; a dense gradient touches every row, so "
                 << "deferring buys nothing: use gluon_sparse_adam_update or adam_update";
    return false;
  }
  (*out_stypes)[0] = kDefaultStorage;
  return true;
}

MXReturnValue infer_update_storage(const ops::Attrs& attrs, std::vector<int>* in_stypes,
                                   std::vector<int>* out_stypes) {
  return check_storage(kUpdateName, kUpdateLayout, in_stypes, out_stypes) ? MX_SUCCESS : MX_FAIL;
}

MXReturnValue infer_flush_storage(const ops::Attrs& attrs, std::vector<int>* in_stypes,
                                  std::vector<int>* out_stypes) {
  return check_storage(kFlushName, kFlushLayout, in_stypes, out_stypes) ? MX_SUCCESS : MX_FAIL;
}

MXReturnValue mutate_update_inputs(const ops::Attrs& attrs, std::vector<int>* input_indices) {
  for (int i : {kUpdateLayout.mean, kUpdateLayout.var, kUpdateLayout.last_step,
                kUpdateLayout.history}) {
    input_indices->push_back(i);
  }
  return MX_SUCCESS;
}

MXReturnValue mutate_flush_inputs(const ops::Attrs& attrs, std::vector<int>* input_indices) {
  for (int i : {kFlushLayout.mean, kFlushLayout.var, kFlushLayout.last_step}) {
    input_indices->push_back(i);
  }
  return MX_SUCCESS;
}

}  // namespace
}  // namespace deferred
}  // namespace gluon_sparse

namespace gdef = gluon_sparse::deferred;

REGISTER_OP(gluon_sparse_adam_deferred_update)
    .setParseAttrs(gdef::parse_update_attrs)
    .setInferType(gdef::infer_update_type)
    .setInferShape(gdef::infer_update_shape)
    .setInferSType(gdef::infer_update_storage)
    .setMutateInputs(gdef::mutate_update_inputs)
#if GLUON_SPARSE_WITH_CUDA
    .setForward(gdef::compute_gpu, "gpu")
#endif
    .setForward(gdef::compute_cpu, "cpu");

REGISTER_OP(gluon_sparse_adam_deferred_flush)
    .setParseAttrs(gdef::parse_flush_attrs)
    .setInferType(gdef::infer_flush_type)
    .setInferShape(gdef::infer_flush_shape)
    .setInferSType(gdef::infer_flush_storage)
    .setMutateInputs(gdef::mutate_flush_inputs)
#if GLUON_SPARSE_WITH_CUDA
    .setForward(gdef::flush_gpu, "gpu")
#endif
    .setForward(gdef::flush_cpu, "cpu");

