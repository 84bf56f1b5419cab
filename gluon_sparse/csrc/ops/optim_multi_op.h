/*!
 * The fourth operator every rule of the family gets (optim_rule.h): the
 * dense update of N weights in one call.
 *
 *   gluon_sparse_<name>_multi_update(w_0, g_0, <states of 0>, ..., w_N-1, g_N-1,
 *       <states of N-1>, out=[w_0, ..., w_N-1], num_weights=N,
 *       <step scalar>="v_0,...,v_N-1" for each step scalar, <fixed scalars>,
 *       rescale_grad=1)
 *
 * Weights, gradients and states are dense; each (w_i, g_i, states_i) gets
 * exactly what the eager gluon_sparse_<name>_update would give it with a
 * gradient holding every row (every element through Rule::apply<true>), which
 * is MXNet's own dense-gradient update of that optimizer: each list element is
 * parsed as the eager operator parses the scalar (the rule's kStepParse).
 *
 * Why: a model's small dense parameters (biases, the layers after a sparse
 * first layer) each cost a Python call and one or more engine operations per
 * step, far more than their arithmetic. MXNet's AdaGrad, AdaMax and Nadam
 * compose their dense update from ~6-15 NDArray operators per weight, so five
 * dense parameters cost the seed-shaped step dozens of operators. The family's
 * optimizers send their dense CPU float32 weights here together (MXNet's
 * optimizer aggregation, `aggregate_num`; gluon_sparse/optimizer/_family.py).
 *
 * CPU only. Every tensor of a call shares one dtype (float32 or float64);
 * states are mutated inputs and `out` must be the weights themselves.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OPTIM_MULTI_OP_H_
#define GLUON_SPARSE_CSRC_OPS_OPTIM_MULTI_OP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "mxnet/lib_api.h"
#include "op_attrs.h"
#include "optim_op.h"

namespace gluon_sparse {
namespace optim {

/*! \brief The most weights one call takes (inputs are counted in ints by lib_api). */
constexpr int64_t kMaxMultiWeights = 1024;

/*! \brief "gluon_sparse_<name>_multi_update". */
std::string multi_op_name(const RuleInfo& info);

/*! \brief The parsed attributes of one multi-update call. */
struct MultiParams {
  int64_t num_weights = 0;
  std::vector<float> steps;  //!< num_weights records of num_step scalars, weight by weight
  float fixed[kMaxFixed];
  float rescale_grad = 1.0f;
};

bool parse_multi_params(const RuleInfo& info, const ops::Attrs& attrs, MultiParams* p);

/*! \brief Check the inputs' and outputs' count and that every output is its weight. */
bool check_multi_args(const RuleInfo& info, const MultiParams& p,
                      const std::vector<mxnet::ext::MXTensor>& inputs,
                      const std::vector<mxnet::ext::MXTensor>& outputs);

// Attribute callbacks (the registration binds `info`).
mxnet::ext::MXReturnValue parse_multi_attrs(const RuleInfo& info, const ops::Attrs& attrs,
                                            int* num_inputs, int* num_outputs);
mxnet::ext::MXReturnValue infer_multi_type(const RuleInfo& info, std::vector<int>* in_types,
                                           std::vector<int>* out_types);
mxnet::ext::MXReturnValue infer_multi_shape(
    const RuleInfo& info, std::vector<std::vector<unsigned int>>* in_shapes,
    std::vector<std::vector<unsigned int>>* out_shapes);
mxnet::ext::MXReturnValue infer_multi_storage(const RuleInfo& info, std::vector<int>* in_stypes,
                                              std::vector<int>* out_stypes);
mxnet::ext::MXReturnValue multi_mutated_inputs(const RuleInfo& info, const ops::Attrs& attrs,
                                               std::vector<int>* input_indices);

}  // namespace optim
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_OPTIM_MULTI_OP_H_
