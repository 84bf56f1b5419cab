/*!
 * `gluon_sparse_adam_multi_update`: MXNet's dense Adam update of N weights in
 * one operator call.
 *
 *   gluon_sparse_adam_multi_update(w_0, g_0, m_0, v_0, ..., w_N-1, g_N-1, m_N-1, v_N-1,
 *                                  out=[w_0, ..., w_N-1], num_weights=N,
 *                                  lrs="lr_0,...", wds="wd_0,...", beta1=0.9,
 *                                  beta2=0.999, epsilon=1e-8, rescale_grad=1,
 *                                  clip_gradient=-1)
 *
 * Each (w_i, g_i, m_i, v_i) gets exactly what `adam_update(w_i, g_i, m_i, v_i,
 * lr=lr_i, wd=wd_i, ...)` gives it (dense weight and gradient): the element
 * math is MXNet's dense kernel's (dense_step), with adam_kernels.h's
 * never-fused arithmetic, and each lr_i and wd_i is parsed as MXNet parses
 * adam_update's lr and wd (op_attrs.h, parse_float), so results are bitwise
 * MXNet's.
 *
 * Why: a model's small dense parameters (biases, the layers after a sparse
 * first layer) each cost a Python call and an engine operation per step, far
 * more than their arithmetic: on the seed shape (6 parameters, batch 10) the
 * five dense adam_update calls took ~0.9 ms of a ~4 ms step.
 * SparseAdam.update_multi_precision sends them here as one call (MXNet's
 * optimizer aggregation, `aggregate_num`).
 *
 * CPU only (the optimizer keeps MXNet's update on GPUs). Every tensor of a call
 * shares one dtype, float32 or float64; m_i and v_i are mutated inputs and
 * `out` must be the weights themselves.
 */
#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "adam_kernels.h"
#include "mxnet/lib_api.h"
#include "omp_threads.h"
#include "op_attrs.h"

using namespace mxnet::ext;

namespace gluon_sparse {
namespace adam_multi {
namespace {

constexpr const char* kOpName = "gluon_sparse_adam_multi_update";
constexpr int kPerWeight = 4;  // weight, grad, mean, var
const char* const kInputNames[kPerWeight] = {"weight", "grad", "mean", "var"};

struct Params {
  int64_t num_weights = 0;
  std::vector<float> lrs, wds;
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f, rescale_grad = 1.0f,
        clip_gradient = -1.0f;
};

/*! \brief A comma-separated list of floats, each parsed as adam_update parses its lr. */
bool parse_list(const std::string& key, const std::string& text, std::vector<float>* out) {
  return ops::parse_float_list(kOpName, key, text, ops::parse_float, out);
}

bool parse_params(const ops::Attrs& attrs, Params* p) {
  const std::unordered_map<std::string, float*> scalars = {
      {"beta1", &p->beta1}, {"beta2", &p->beta2}, {"epsilon", &p->epsilon},
      {"rescale_grad", &p->rescale_grad}, {"clip_gradient", &p->clip_gradient}};
  bool has_lrs = false, has_wds = false;
  for (const auto& kv : attrs) {
    if (ops::is_framework_attr(kv.first)) continue;
    if (kv.first == "num_weights") {
      if (!ops::parse_positive_int(kOpName, kv.first, kv.second, &p->num_weights)) return false;
    } else if (kv.first == "lrs") {
      if (!parse_list(kv.first, kv.second, &p->lrs)) return false;
      has_lrs = true;
    } else if (kv.first == "wds") {
      if (!parse_list(kv.first, kv.second, &p->wds)) return false;
      has_wds = true;
    } else {
      const auto field = scalars.find(kv.first);
      if (field == scalars.end()) {
        GS_ERROR_MSG << kOpName << ": unknown parameter '" << kv.first
                     << "'; the parameters are num_weights, lrs, wds, beta1, beta2, epsilon, "
                     << "rescale_grad, clip_gradient";
        return false;
      }
      if (!ops::parse_float(kOpName, kv.first, kv.second, field->second)) return false;
    }
  }
  if (p->num_weights <= 0 || !has_lrs || !has_wds) {
    GS_ERROR_MSG << kOpName << ": parameters num_weights, lrs and wds are required";
    return false;
  }
  if (static_cast<int64_t>(p->lrs.size()) != p->num_weights ||
      static_cast<int64_t>(p->wds.size()) != p->num_weights) {
    GS_ERROR_MSG << kOpName << ": num_weights=" << p->num_weights << " but lrs holds "
                 << p->lrs.size() << " values and wds " << p->wds.size();
    return false;
  }
  return true;
}

MXReturnValue parse_attrs(const std::unordered_map<std::string, std::string>& attrs,
                          int* num_inputs, int* num_outputs) {
  Params p;
  if (!parse_params(attrs, &p)) return MX_FAIL;
  if (p.num_weights > 1024) {
    GS_ERROR_MSG << kOpName << ": num_weights=" << p.num_weights << " is more than 1024";
    return MX_FAIL;
  }
  *num_inputs = static_cast<int>(kPerWeight * p.num_weights);
  *num_outputs = static_cast<int>(p.num_weights);
  return MX_SUCCESS;
}

MXReturnValue infer_type(const std::unordered_map<std::string, std::string>& attrs,
                         std::vector<int>* in_types, std::vector<int>* out_types) {
  const int dtype = (*in_types)[0];
  if (dtype != kFloat32 && dtype != kFloat64) {
    GS_ERROR_MSG << kOpName << ": weights must be float32 or float64 (dtype " << dtype_name(dtype)
                 << ")";
    return MX_FAIL;
  }
  for (size_t i = 1; i < in_types->size(); ++i) {
    if ((*in_types)[i] != dtype) {
      GS_ERROR_MSG << kOpName << ": " << kInputNames[i % kPerWeight] << " of weight "
                   << i / kPerWeight << " has dtype " << dtype_name((*in_types)[i])
                   << " but weight 0 has " << dtype_name(dtype)
                   << "; every tensor must share one dtype";
      return MX_FAIL;
    }
  }
  for (auto& t : *out_types) t = dtype;
  return MX_SUCCESS;
}

MXReturnValue infer_shape(const std::unordered_map<std::string, std::string>& attrs,
                          std::vector<std::vector<unsigned int>>* in_shapes,
                          std::vector<std::vector<unsigned int>>* out_shapes) {
  for (size_t w = 0; w < out_shapes->size(); ++w) {
    const auto& weight = (*in_shapes)[kPerWeight * w];
    for (int i = 1; i < kPerWeight; ++i) {
      const auto& other = (*in_shapes)[kPerWeight * w + i];
      if (other != weight) {
        std::vector<int64_t> got(other.begin(), other.end());
        std::vector<int64_t> want(weight.begin(), weight.end());
        GS_ERROR_MSG << kOpName << ": " << kInputNames[i] << " of weight " << w << " has shape "
                     << ops::shape_str(got) << " but the weight has shape "
                     << ops::shape_str(want);
        return MX_FAIL;
      }
    }
    (*out_shapes)[w] = weight;
  }
  return MX_SUCCESS;
}

MXReturnValue infer_storage_type(const std::unordered_map<std::string, std::string>& attrs,
                                 std::vector<int>* in_stypes, std::vector<int>* out_stypes) {
  for (size_t i = 0; i < in_stypes->size(); ++i) {
    if ((*in_stypes)[i] != kDefaultStorage) {
      GS_ERROR_MSG << kOpName << ": " << kInputNames[i % kPerWeight] << " of weight "
                   << i / kPerWeight << " must be dense (default storage); a row_sparse "
                   << "gradient goes to gluon_sparse_adam_update";
      return MX_FAIL;
    }
  }
  for (auto& t : *out_stypes) t = kDefaultStorage;
  return MX_SUCCESS;
}

MXReturnValue mutate_inputs(const std::unordered_map<std::string, std::string>& attrs,
                            std::vector<int>* input_indices) {
  Params p;
  if (!parse_params(attrs, &p)) return MX_FAIL;
  for (int w = 0; w < static_cast<int>(p.num_weights); ++w) {
    input_indices->push_back(kPerWeight * w + 2);  // mean
    input_indices->push_back(kPerWeight * w + 3);  // var
  }
  return MX_SUCCESS;
}

/*!
 * \brief One element of MXNet's dense Adam kernel (AdamUpdateKernel). It is
 *        not the row_sparse kernels' `adam::apply`: MXNet's dense kernel
 *        computes the variance term as ((1 - beta2) * g) * g where the
 *        row_sparse one has (1 - beta2) * (g * g), which rounds differently.
 */
template <bool kClip, typename T>
inline void dense_step(T grad, T* weight, T* mean, T* var, const adam::AdamScalars<T>& s) {
  using namespace ops;
  T g = adam::rescaled_grad(grad, *weight, s);
  if (kClip) g = clip(g, s.clip_gradient);
  const T m = add(mul(s.beta1, *mean), mul(s.one_minus_beta1, g));
  const T v = add(mul(s.beta2, *var), mul(mul(s.one_minus_beta2, g), g));
  *mean = m;
  *var = v;
  *weight = sub(*weight, div(mul(s.lr, m), add(sqrt_rn(v), s.epsilon)));
}

/*! \brief One weight, in contiguous blocks across the team. */
template <bool kClip, typename T>
void update_weight(MXTensor* t, const adam::AdamScalars<T>& s) {
  T* weight = t[0].data<T>();
  const T* grad = t[1].data<T>();
  T* mean = t[2].data<T>();
  T* var = t[3].data<T>();
  const int64_t size = t[0].size();
  constexpr int64_t kBlock = 4096;
  const int64_t blocks = (size + kBlock - 1) / kBlock;
  parallel_blocks(blocks, team_size(size, blocks), [&](int64_t begin, int64_t end) {
    const int64_t last = std::min(end * kBlock, size);
    for (int64_t i = begin * kBlock; i < last; ++i) {
      dense_step<kClip>(grad[i], weight + i, mean + i, var + i, s);
    }
  });
}

MXReturnValue compute_cpu(const ops::Attrs& attrs, std::vector<MXTensor>* inputs,
                          std::vector<MXTensor>* outputs, const OpResource& res) {
  Params p;
  if (!parse_params(attrs, &p)) return MX_FAIL;
  if (inputs->size() != static_cast<size_t>(kPerWeight * p.num_weights) ||
      outputs->size() != static_cast<size_t>(p.num_weights)) {
    GS_ERROR_MSG << kOpName << ": num_weights=" << p.num_weights << " needs "
                 << kPerWeight * p.num_weights << " inputs and " << p.num_weights
                 << " outputs, got " << inputs->size() << " and " << outputs->size();
    return MX_FAIL;
  }
  for (int64_t w = 0; w < p.num_weights; ++w) {
    if ((*outputs)[w].data_ptr != (*inputs)[kPerWeight * w].data_ptr) {
      GS_ERROR_MSG << kOpName << " updates the weights in place: call it with out=[the weights]"
                   << " (output " << w << " is not weight " << w << ")";
      return MX_FAIL;
    }
  }
  ops::with_float_type((*inputs)[0].dtype, [&](auto zero) {
    using T = decltype(zero);
    for (int64_t w = 0; w < p.num_weights; ++w) {
      const auto s = adam::make_scalars<T>(p.lrs[w], p.beta1, p.beta2, p.epsilon, p.wds[w],
                                           p.rescale_grad, p.clip_gradient);
      // MXNet clips when clip_gradient >= 0 (its default, -1, disables clipping).
      if (p.clip_gradient >= 0.0f) {
        update_weight<true, T>(&(*inputs)[kPerWeight * w], s);
      } else {
        update_weight<false, T>(&(*inputs)[kPerWeight * w], s);
      }
    }
  });
  return MX_SUCCESS;
}

}  // namespace
}  // namespace adam_multi
}  // namespace gluon_sparse

namespace gmulti = gluon_sparse::adam_multi;

REGISTER_OP(gluon_sparse_adam_multi_update)
    .setParseAttrs(gmulti::parse_attrs)
    .setInferType(gmulti::infer_type)
    .setInferShape(gmulti::infer_shape)
    .setInferSType(gmulti::infer_storage_type)
    .setMutateInputs(gmulti::mutate_inputs)
    .setForward(gmulti::compute_cpu, "cpu");
