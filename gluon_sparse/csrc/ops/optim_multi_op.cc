/*!
 * Parameters, argument checks and attributes of the family's multi-weight
 * dense update (optim_multi_op.h), written once for every rule from its
 * RuleInfo. The compute is CpuOps<Rule>::multi_update_cpu (optim_op_cpu.h).
 */
#include "optim_multi_op.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

using namespace mxnet::ext;

namespace gluon_sparse {
namespace optim {

std::string multi_op_name(const RuleInfo& info) {
  return std::string("gluon_sparse_") + info.name + "_multi_update";
}

namespace {

std::string parameter_list(const RuleInfo& info) {
  std::string names = "num_weights";
  for (int i = 0; i < info.num_step; ++i) names += std::string(", ") + info.step_names[i];
  for (int i = 0; i < info.num_fixed; ++i) names += std::string(", ") + info.fixed_names[i];
  return names + ", rescale_grad";
}

/*! \brief Step scalar `s` as a comma-separated list, each element parsed as the eager op would. */
bool parse_list(const RuleInfo& info, const char* op, int s, const std::string& text,
                std::vector<float>* out) {
  auto parse_one = [&info, s](const char* name, const std::string&, const std::string& item,
                              float* value) {
    return parse_step_scalar(info, name, s, item, value);
  };
  return ops::parse_float_list(op, info.step_names[s], text, parse_one, out);
}

/*! \brief The name of input i (weight, grad or a state) and its weight, for messages. */
std::string input_name(const RuleInfo& info, size_t i) {
  const size_t per_weight = 2 + info.num_states;
  const size_t k = i % per_weight;
  const std::string what = k == 0 ? "weight" : k == 1 ? "grad" : info.state_names[k - 2];
  return what + " of weight " + std::to_string(i / per_weight);
}

}  // namespace

bool parse_multi_params(const RuleInfo& info, const ops::Attrs& attrs, MultiParams* p) {
  const std::string name = multi_op_name(info);
  const char* op = name.c_str();
  for (int i = 0; i < info.num_fixed; ++i) p->fixed[i] = info.fixed_defaults[i];
  std::vector<std::vector<float>> lists(info.num_step);
  std::vector<bool> given(info.num_step, false);
  for (const auto& kv : attrs) {
    if (ops::is_framework_attr(kv.first)) continue;
    const int s = index_of(info.step_names, info.num_step, kv.first);
    const int f = index_of(info.fixed_names, info.num_fixed, kv.first);
    bool ok = true;
    if (kv.first == "num_weights") {
      ok = ops::parse_positive_int(op, kv.first, kv.second, &p->num_weights);
    } else if (s >= 0) {
      ok = parse_list(info, op, s, kv.second, &lists[s]);
      given[s] = true;
    } else if (f >= 0) {
      ok = ops::parse_float(op, kv.first, kv.second, &p->fixed[f]);
    } else if (kv.first == "rescale_grad") {
      ok = ops::parse_float(op, kv.first, kv.second, &p->rescale_grad);
    } else {
      GS_ERROR_MSG << op << ": unknown parameter '" << kv.first << "'; the parameters are "
                   << parameter_list(info);
      return false;
    }
    if (!ok) return false;
  }
  if (p->num_weights <= 0 || p->num_weights > kMaxMultiWeights) {
    GS_ERROR_MSG << op << ": parameter num_weights (1 to " << kMaxMultiWeights
                 << ") is required, got " << p->num_weights;
    return false;
  }
  p->steps.assign(p->num_weights * info.num_step, 0.0f);
  for (int s = 0; s < info.num_step; ++s) {
    if (!given[s]) {
      if (std::isnan(info.step_defaults[s])) {
        GS_ERROR_MSG << op << ": parameter " << info.step_names[s] << " (one value per weight) "
                     << "is required";
        return false;
      }
      lists[s].assign(p->num_weights, info.step_defaults[s]);
    }
    if (static_cast<int64_t>(lists[s].size()) != p->num_weights) {
      GS_ERROR_MSG << op << ": num_weights=" << p->num_weights << " but "
                   << info.step_names[s] << " holds " << lists[s].size() << " values";
      return false;
    }
    for (int64_t w = 0; w < p->num_weights; ++w) p->steps[w * info.num_step + s] = lists[s][w];
  }
  for (int i = 0; i < info.num_fixed; ++i) {
    if (std::isnan(info.fixed_defaults[i]) && std::isnan(p->fixed[i])) {
      GS_ERROR_MSG << op << ": parameter " << info.fixed_names[i]
                   << " is required (not given, or NaN)";
      return false;
    }
  }
  return true;
}

bool check_multi_args(const RuleInfo& info, const MultiParams& p,
                      const std::vector<MXTensor>& inputs, const std::vector<MXTensor>& outputs) {
  const std::string name = multi_op_name(info);
  const int64_t per_weight = 2 + info.num_states;
  if (static_cast<int64_t>(inputs.size()) != per_weight * p.num_weights ||
      static_cast<int64_t>(outputs.size()) != p.num_weights) {
    GS_ERROR_MSG << name << ": num_weights=" << p.num_weights << " needs "
                 << per_weight * p.num_weights << " inputs and " << p.num_weights
                 << " outputs, got " << inputs.size() << " and " << outputs.size();
    return false;
  }
  for (int64_t w = 0; w < p.num_weights; ++w) {
    if (outputs[w].data_ptr != inputs[per_weight * w].data_ptr) {
      GS_ERROR_MSG << name << " updates the weights in place: call it with out=[the weights]"
                   << " (output " << w << " is not weight " << w << ")";
      return false;
    }
  }
  return true;
}

MXReturnValue parse_multi_attrs(const RuleInfo& info, const ops::Attrs& attrs, int* num_inputs,
                                int* num_outputs) {
  MultiParams p;
  if (!parse_multi_params(info, attrs, &p)) return MX_FAIL;
  *num_inputs = static_cast<int>((2 + info.num_states) * p.num_weights);
  *num_outputs = static_cast<int>(p.num_weights);
  return MX_SUCCESS;
}

MXReturnValue infer_multi_type(const RuleInfo& info, std::vector<int>* in_types,
                               std::vector<int>* out_types) {
  const std::string name = multi_op_name(info);
  const int dtype = (*in_types)[0];
  if (dtype != kFloat32 && dtype != kFloat64) {
    GS_ERROR_MSG << name << ": weights must be float32 or float64 (dtype " << dtype_name(dtype)
                 << "); train float16 weights with multi_precision=True";
    return MX_FAIL;
  }
  for (size_t i = 1; i < in_types->size(); ++i) {
    if ((*in_types)[i] != dtype) {
      GS_ERROR_MSG << name << ": " << input_name(info, i) << " has dtype "
                   << dtype_name((*in_types)[i])
                   << " but weight 0 has " << dtype_name(dtype)
                   << "; every tensor must share one dtype";
      return MX_FAIL;
    }
  }
  for (auto& t : *out_types) t = dtype;
  return MX_SUCCESS;
}

MXReturnValue infer_multi_shape(const RuleInfo& info,
                                std::vector<std::vector<unsigned int>>* in_shapes,
                                std::vector<std::vector<unsigned int>>* out_shapes) {
  const std::string name = multi_op_name(info);
  const size_t per_weight = 2 + info.num_states;
  for (size_t w = 0; w < out_shapes->size(); ++w) {
    const auto& weight = (*in_shapes)[per_weight * w];
    for (size_t i = per_weight * w + 1; i < per_weight * (w + 1); ++i) {
      if ((*in_shapes)[i] != weight) {
        GS_ERROR_MSG << name << ": " << input_name(info, i) << " has shape "
                     << ops::shape_str((*in_shapes)[i]) << " but the weight has shape "
                     << ops::shape_str(weight);
        return MX_FAIL;
      }
    }
    (*out_shapes)[w] = weight;
  }
  return MX_SUCCESS;
}

MXReturnValue infer_multi_storage(const RuleInfo& info, std::vector<int>* in_stypes,
                                  std::vector<int>* out_stypes) {
  for (size_t i = 0; i < in_stypes->size(); ++i) {
    if ((*in_stypes)[i] != kDefaultStorage) {
      GS_ERROR_MSG << multi_op_name(info) << ": " << input_name(info, i)
                   << " must be dense (default storage); a row_sparse gradient goes to "
                   << op_name(info, OpKind::kEager);
      return MX_FAIL;
    }
  }
  for (auto& t : *out_stypes) t = kDefaultStorage;
  return MX_SUCCESS;
}

MXReturnValue multi_mutated_inputs(const RuleInfo& info, const ops::Attrs& attrs,
                                   std::vector<int>* input_indices) {
  MultiParams p;
  if (!parse_multi_params(info, attrs, &p)) return MX_FAIL;
  const int per_weight = 2 + info.num_states;
  for (int w = 0; w < static_cast<int>(p.num_weights); ++w) {
    for (int k = 0; k < info.num_states; ++k) input_indices->push_back(per_weight * w + 2 + k);
  }
  return MX_SUCCESS;
}

}  // namespace optim
}  // namespace gluon_sparse
