/*!
 * The three operators every rule of the family gets (optim_rule.h):
 *
 *   gluon_sparse_<name>_update(weight, grad, <states>, out=weight,
 *       <step scalars>, <fixed scalars>, rescale_grad=1)
 *     The eager update: every row steps, the gradient's rows with their
 *     gradient, the others without (MXNet's dense-gradient update, one pass).
 *   gluon_sparse_<name>_deferred_update(weight, grad, <states>, last_step, history,
 *       out=weight, step=t, <step scalars>, <fixed scalars>, rescale_grad=1, catch_up=0,
 *       catch_up_if_read=0)
 *     Records step t's scalars in history[t] (a (capacity, kNumStep) float32
 *     array) and steps only the gradient's rows, which must be at step t - 1
 *     (a forward pass brought them there) unless catch_up=1 (with
 *     catch_up_if_read=1: and a product operator has read the weight, see
 *     deferred_registry.h) or their missed steps are no-ops; sets their
 *     last_step (int64, one per row) to t.
 *   gluon_sparse_<name>_deferred_flush(weight, <states>, last_step, history, out=weight,
 *       step=t, <fixed scalars>)
 *     Replays every row's missed steps up to t.
 *
 * The weight, grad (row_sparse, int64 indices) and states share one dtype,
 * float32 or float64; states, last_step and history are mutated inputs, the
 * weight is written through `out`, which must be the weight itself.
 * A fourth, the dense update of several weights in one call, is declared in
 * optim_multi_op.h.
 * Files: this one (shared declarations), optim_op.cc (parameters, checks,
 * registration for every rule of optim_rules.h), optim_op_cpu.h (CPU compute),
 * optim_op_gpu.cc (CUDA), the registry's row refresh in deferred_registry.cc.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OPTIM_OP_H_
#define GLUON_SPARSE_CSRC_OPS_OPTIM_OP_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "mxnet/lib_api.h"
#include "op_attrs.h"
#include "optim_rule.h"

namespace gluon_sparse {
namespace optim {

/*! \brief Which of a rule's three operators. */
enum class OpKind { kEager, kDeferredUpdate, kFlush };

/*! \brief A rule's description as plain data, for the code that is not a template. */
struct RuleInfo {
  const char* name;
  int num_states;
  const char* const* state_names;
  int num_fixed;
  const char* const* fixed_names;
  const float* fixed_defaults;
  int num_step;
  const char* const* step_names;
  const float* step_defaults;
  const Parse* step_parse;  //!< null: every step scalar is a field (Parse::kField)
};

// Detects the optional `kStepParse`.
template <class Rule, class = void>
struct StepParse {
  static constexpr const Parse* value = nullptr;
};
template <class Rule>
struct StepParse<Rule, std::void_t<decltype(Rule::kStepParse)>> {
  static_assert(sizeof(Rule::kStepParse) / sizeof(Parse) == Rule::kNumStep,
                "kStepParse needs one entry per step scalar");
  static constexpr const Parse* value = Rule::kStepParse;
};

template <class Rule>
constexpr RuleInfo rule_info() {
  return {Rule::kName,      Rule::kNumStates,    Rule::kStateNames, Rule::kNumFixed,
          Rule::kFixedNames, Rule::kFixedDefaults, Rule::kNumStep,    Rule::kStepNames,
          Rule::kStepDefaults, StepParse<Rule>::value};
}

/*! \brief "gluon_sparse_<name>_update" and its siblings. */
std::string op_name(const RuleInfo& info, OpKind kind);

/*! \brief The parsed attributes of one call. */
struct Params {
  float step_scalars[kMaxStep];
  float fixed[kMaxFixed];
  float rescale_grad = 1.0f;
  int64_t step = -1;  //!< the deferred ops' 1-based update count
  bool catch_up = false;
  bool catch_up_if_read = false;  //!< catch up only a weight a product operator read
};

/*! \brief The position of `key` among the first `n` of `names`, -1 if absent. */
int index_of(const char* const* names, int n, const std::string& key);

/*!
 * \brief Step scalar `s` of the rule from `text`, parsed as MXNet's reference
 *        operator parses it (the rule's kStepParse: a field or a tuple element).
 */
bool parse_step_scalar(const RuleInfo& info, const char* op, int s, const std::string& text,
                       float* out);

/*! \brief Parse `attrs` as the operator `kind` of the rule described by `info`. */
bool parse_params(const RuleInfo& info, OpKind kind, const ops::Attrs& attrs, Params* p);

/*! \brief Input positions of an operator (-1: absent). */
struct Layout {
  int weight, grad, first_state, last_step, history, count;
};
Layout layout(const RuleInfo& info, OpKind kind);

/*! \brief Raw pointers and sizes of one call, after every check has passed. */
struct Args {
  void* weight;
  void* states[kMaxStates];
  int64_t* last_step;
  float* history;
  int64_t capacity;
  const void* grad;
  const int64_t* indices;
  int64_t nnz;
  int64_t num_rows;
  int64_t cols;
  int dtype;
  bool gpu;
};

/*!
 * \brief Check the call (input count, devices, in-place output, history
 *        capacity, grad's stored sizes, row indices on the CPU) and collect pointers.
 */
bool collect_args(const RuleInfo& info, OpKind kind, const Params& p,
                  const std::vector<mxnet::ext::MXTensor>& inputs,
                  const std::vector<mxnet::ext::MXTensor>& outputs, Args* a);

/*! \brief The deferred update's error for a gradient row that is not at step - 1 (returns false). */
bool report_stale_row(const RuleInfo& info, int64_t row, int64_t row_step, int64_t step);

/*! \brief The flush's error for a row whose last_step lies outside [0, step] (returns false). */
bool report_invalid_last_step(const RuleInfo& info, int64_t row, int64_t row_step, int64_t step);

// Attribute callbacks shared by every rule (the registration binds `info`).
mxnet::ext::MXReturnValue parse_attrs(const RuleInfo& info, OpKind kind, const ops::Attrs& attrs,
                                      int* num_inputs, int* num_outputs);
mxnet::ext::MXReturnValue infer_type(const RuleInfo& info, OpKind kind,
                                     std::vector<int>* in_types, std::vector<int>* out_types);
mxnet::ext::MXReturnValue infer_shape(const RuleInfo& info, OpKind kind,
                                      std::vector<std::vector<unsigned int>>* in_shapes,
                                      std::vector<std::vector<unsigned int>>* out_shapes);
mxnet::ext::MXReturnValue infer_storage(const RuleInfo& info, OpKind kind,
                                        std::vector<int>* in_stypes, std::vector<int>* out_stypes);
void mutated_inputs(const RuleInfo& info, OpKind kind, std::vector<int>* input_indices);

}  // namespace optim
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_OPTIM_OP_H_
