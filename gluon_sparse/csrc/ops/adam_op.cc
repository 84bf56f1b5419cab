/*!
 * `gluon_sparse_adam_update`: standard (non-lazy) Adam on a row_sparse gradient, in place.
 *
 *   gluon_sparse_adam_update(weight, grad, mean, var, out=weight, lr=..., beta1=0.9,
 *                  beta2=0.999, epsilon=1e-8, wd=0, rescale_grad=1, clip_gradient=-1,
 *                  flush_denormals=False)
 *
 * Same parameters and results as MXNet's adam_update(lazy_update=False) with a
 * row_sparse grad: every row of weight, mean and var moves; rows absent from the
 * gradient get grad 0 (plus wd * weight). weight is dense, or row_sparse holding
 * every row; mean and var are dense; all share one dtype (float32 or float64).
 * mean and var are mutated inputs, weight is updated through `out`, which must
 * be weight itself. flush_denormals=True (CPU only) flushes denormal values to
 * zero, trading bitwise equality with MXNet for speed (see FlushDenormals).
 *
 * Where MXNet 1.9.1 builds a num_rows-long prefix sum (sequentially on CPU)
 * and then runs a generic kernel, this op makes one pass over the data: OpenMP
 * threads take contiguous blocks of rows and walk the sorted gradient indices
 * alongside, so there is no temporary at all. The element math lives in
 * adam_kernels.h, shared with the CUDA kernels (adam_kernels.cu).
 *
 * Errors: shapes, dtypes, storage types and parameters are checked during
 * MXNet's inference, so they raise at the call; index checks run in the
 * forward function, before any write, and raise when the result is waited for.
 * (lib_api.h keeps every message a library has produced: the last line of the
 * "Extension Traceback" is the current one.)
 *
 * Files: this one (parameters, argument checks, attributes, registration),
 * adam_op_cpu.cc and adam_op_gpu.cc (compute), adam_kernels.h / .cu (math).
 */
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "adam_op.h"

using namespace mxnet::ext;

namespace gluon_sparse {
namespace adam {

const char* const kInputNames[kNumInputs] = {"weight", "grad", "mean", "var"};

bool parse_params(const ops::Attrs& attrs, AdamParams* p) {
  const std::unordered_map<std::string, float*> fields = {
      {"lr", &p->lr},           {"beta1", &p->beta1},
      {"beta2", &p->beta2},     {"epsilon", &p->epsilon},
      {"wd", &p->wd},           {"rescale_grad", &p->rescale_grad},
      {"clip_gradient", &p->clip_gradient}};
  for (const auto& kv : attrs) {
    // MXNet adds its own attributes (__ext_dtype__, __profiler_scope__, ...).
    if (ops::is_framework_attr(kv.first)) continue;
    if (kv.first == "flush_denormals") {
      if (!ops::parse_bool(kOpName, kv.first, kv.second, &p->flush_denormals)) return false;
      continue;
    }
    const auto field = fields.find(kv.first);
    if (field == fields.end()) {
      GS_ERROR_MSG << kOpName << ": unknown parameter '" << kv.first
                   << "'; the parameters are lr, beta1, beta2, epsilon, wd, rescale_grad, "
                   << "clip_gradient, flush_denormals";
      return false;
    }
    if (!ops::parse_float(kOpName, kv.first, kv.second, field->second)) return false;
    p->has_lr = p->has_lr || kv.first == "lr";
  }
  if (!p->has_lr) {
    GS_ERROR_MSG << kOpName << ": parameter lr is required";
    return false;
  }
  return true;
}

/*!
 * \brief Check devices and sparse layouts (shapes and dtypes were inferred) and collect pointers.
 */
bool collect_args(const std::vector<MXTensor>& inputs, const std::vector<MXTensor>& outputs,
                  UpdateArgs* args) {
  if (inputs.size() != kNumInputs || outputs.size() != 1) {
    GS_ERROR_MSG << kOpName << ": expects 4 inputs (weight, grad, mean, var) and 1 output, got "
                 << inputs.size() << " and " << outputs.size();
    return false;
  }
  const MXTensor& weight = inputs[kWeight];
  for (int i = 0; i < kNumInputs; ++i) {
    if (inputs[i].ctx.dev_type != weight.ctx.dev_type ||
        inputs[i].ctx.dev_id != weight.ctx.dev_id) {
      GS_ERROR_MSG << kOpName << ": " << kInputNames[i] << " is on " << inputs[i].ctx.dev_type
                   << "(" << inputs[i].ctx.dev_id << ") but weight is on " << weight.ctx.dev_type
                   << "(" << weight.ctx.dev_id << ")";
      return false;
    }
  }
  args->dtype = weight.dtype;
  args->num_rows = weight.shape.empty() ? 0 : weight.shape[0];
  args->cols = 1;
  for (size_t d = 1; d < weight.shape.size(); ++d) args->cols *= weight.shape[d];

  const void* out_data = nullptr;
  if (weight.stype == kRowSparseStorage) {
    // As in MXNet's AdamStdUpdateRspImpl: a standard update moves every row, so
    // a row_sparse weight must already store all of them.
    const MXSparse* w = reinterpret_cast<const MXSparse*>(weight.data_ptr);
    if (w->indices_len != args->num_rows) {
      GS_ERROR_MSG << kOpName << ": a row_sparse weight must store all its " << args->num_rows
                   << " rows for a standard (non-lazy) update, but it stores "
                   << w->indices_len;
      return false;
    }
    args->weight = w->data;
    if (outputs[0].stype == kRowSparseStorage) {
      out_data = reinterpret_cast<const MXSparse*>(outputs[0].data_ptr)->data;
    }
  } else {
    args->weight = weight.data_ptr;
    if (outputs[0].stype == kDefaultStorage) out_data = outputs[0].data_ptr;
  }
  if (out_data != args->weight) {
    GS_ERROR_MSG << kOpName << " updates the weight in place: call it with out=weight";
    return false;
  }

  const MXSparse* grad = reinterpret_cast<const MXSparse*>(inputs[kGrad].data_ptr);
  if (grad->indices_len < 0 || grad->indices_len > args->num_rows ||
      grad->data_len != grad->indices_len * args->cols) {
    GS_ERROR_MSG << kOpName << ": grad stores " << grad->indices_len << " row indices and "
                 << grad->data_len << " values, inconsistent with its shape "
                 << ops::shape_str(inputs[kGrad].shape);
    return false;
  }
  args->grad = grad->data;
  args->indices = grad->indices;
  args->nnz = grad->indices_len;
  args->mean = inputs[kMean].data_ptr;
  args->var = inputs[kVar].data_ptr;
  return true;
}

namespace {

// ---------------------------------------------------------------- attributes

MXReturnValue parse_attrs(const std::unordered_map<std::string, std::string>& attrs,
                          int* num_inputs, int* num_outputs) {
  AdamParams p;
  if (!parse_params(attrs, &p)) return MX_FAIL;
  *num_inputs = kNumInputs;
  *num_outputs = 1;
  return MX_SUCCESS;
}

MXReturnValue infer_type(const std::unordered_map<std::string, std::string>& attrs,
                         std::vector<int>* in_types, std::vector<int>* out_types) {
  const int dtype = (*in_types)[kWeight];
  if (dtype != kFloat32 && dtype != kFloat64) {
    GS_ERROR_MSG << kOpName << ": weight must be float32 or float64 (dtype " << dtype_name(dtype)
                 << "); train float16 weights with multi_precision=True, which updates a "
                 << "float32 master copy";
    return MX_FAIL;
  }
  for (int i = 1; i < kNumInputs; ++i) {
    if ((*in_types)[i] != dtype) {
      GS_ERROR_MSG << kOpName << ": " << kInputNames[i] << " has dtype "
                   << dtype_name((*in_types)[i])
                   << " but weight has " << dtype_name(dtype) << "; all four must share one dtype";
      return MX_FAIL;
    }
  }
  (*out_types)[0] = dtype;
  return MX_SUCCESS;
}

MXReturnValue infer_shape(const std::unordered_map<std::string, std::string>& attrs,
                          std::vector<std::vector<unsigned int>>* in_shapes,
                          std::vector<std::vector<unsigned int>>* out_shapes) {
  const auto& weight = (*in_shapes)[kWeight];
  if (weight.empty()) {
    GS_ERROR_MSG << kOpName << ": weight must have at least one dimension (its rows)";
    return MX_FAIL;
  }
  for (int i = 1; i < kNumInputs; ++i) {
    if ((*in_shapes)[i] != weight) {
      std::vector<int64_t> got((*in_shapes)[i].begin(), (*in_shapes)[i].end());
      std::vector<int64_t> want(weight.begin(), weight.end());
      GS_ERROR_MSG << kOpName << ": " << kInputNames[i] << " has shape " << ops::shape_str(got)
                   << " but weight has shape " << ops::shape_str(want);
      return MX_FAIL;
    }
  }
  (*out_shapes)[0] = weight;
  return MX_SUCCESS;
}

MXReturnValue infer_storage_type(const std::unordered_map<std::string, std::string>& attrs,
                                 std::vector<int>* in_stypes, std::vector<int>* out_stypes) {
  const int weight = (*in_stypes)[kWeight];
  if (weight != kDefaultStorage && weight != kRowSparseStorage) {
    GS_ERROR_MSG << kOpName << ": weight must be dense (default) or row_sparse storage";
    return MX_FAIL;
  }
  if ((*in_stypes)[kGrad] != kRowSparseStorage) {
    GS_ERROR_MSG << kOpName << ": grad must be row_sparse; use mx.nd.adam_update for a dense "
                 << "gradient";
    return MX_FAIL;
  }
  for (int i : {kMean, kVar}) {
    if ((*in_stypes)[i] != kDefaultStorage) {
      GS_ERROR_MSG << kOpName << ": " << kInputNames[i]
                   << " must be dense (default storage) for a standard update";
      return MX_FAIL;
    }
  }
  (*out_stypes)[0] = weight;
  return MX_SUCCESS;
}

MXReturnValue mutate_inputs(const std::unordered_map<std::string, std::string>& attrs,
                            std::vector<int>* input_indices) {
  input_indices->push_back(kMean);
  input_indices->push_back(kVar);
  return MX_SUCCESS;
}

}  // namespace
}  // namespace adam
}  // namespace gluon_sparse

namespace gadam = gluon_sparse::adam;

REGISTER_OP(gluon_sparse_adam_update)
    .setParseAttrs(gadam::parse_attrs)
    .setInferType(gadam::infer_type)
    .setInferShape(gadam::infer_shape)
    .setInferSType(gadam::infer_storage_type)
    .setMutateInputs(gadam::mutate_inputs)
#if GLUON_SPARSE_WITH_CUDA
    .setForward(gadam::compute_gpu, "gpu")
#endif
    .setForward(gadam::compute_cpu, "cpu");

