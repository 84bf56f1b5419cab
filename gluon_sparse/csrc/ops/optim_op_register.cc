/*!
 * Registration of the four operators of every rule listed in
 * GLUON_SPARSE_OPTIM_RULES (optim_rules.h) with MXNet's lib_api, the
 * callbacks bound to the rule's description (optim_op.h, optim_op.cc).
 */
#include <string>
#include <vector>

#include "mxnet/lib_api.h"
#include "optim_multi_op.h"
#include "optim_op.h"
#include "optim_op_cpu.h"
#include "optim_rules.h"
#if GLUON_SPARSE_WITH_CUDA
#include "optim_op_gpu.h"
#endif

using namespace mxnet::ext;

namespace gluon_sparse {
namespace optim {
namespace {

/*! \brief lib_api's callbacks of operator `kKind` of `Rule` (plain function pointers). */
template <class Rule, OpKind kKind>
struct Callbacks {
  static MXReturnValue parse(const ops::Attrs& attrs, int* num_inputs, int* num_outputs) {
    return parse_attrs(rule_info<Rule>(), kKind, attrs, num_inputs, num_outputs);
  }
  static MXReturnValue type(const ops::Attrs& attrs, std::vector<int>* in_types,
                            std::vector<int>* out_types) {
    return infer_type(rule_info<Rule>(), kKind, in_types, out_types);
  }
  static MXReturnValue shape(const ops::Attrs& attrs,
                             std::vector<std::vector<unsigned int>>* in_shapes,
                             std::vector<std::vector<unsigned int>>* out_shapes) {
    return infer_shape(rule_info<Rule>(), kKind, in_shapes, out_shapes);
  }
  static MXReturnValue storage(const ops::Attrs& attrs, std::vector<int>* in_stypes,
                               std::vector<int>* out_stypes) {
    return infer_storage(rule_info<Rule>(), kKind, in_stypes, out_stypes);
  }
  static MXReturnValue mutate(const ops::Attrs& attrs, std::vector<int>* input_indices) {
    mutated_inputs(rule_info<Rule>(), kKind, input_indices);
    return MX_SUCCESS;
  }
};

/*! \brief lib_api's callbacks of the rule's multi-update (optim_multi_op.h). */
template <class Rule>
struct MultiCallbacks {
  static MXReturnValue parse(const ops::Attrs& attrs, int* num_inputs, int* num_outputs) {
    return parse_multi_attrs(rule_info<Rule>(), attrs, num_inputs, num_outputs);
  }
  static MXReturnValue type(const ops::Attrs& attrs, std::vector<int>* in_types,
                            std::vector<int>* out_types) {
    return infer_multi_type(rule_info<Rule>(), in_types, out_types);
  }
  static MXReturnValue shape(const ops::Attrs& attrs,
                             std::vector<std::vector<unsigned int>>* in_shapes,
                             std::vector<std::vector<unsigned int>>* out_shapes) {
    return infer_multi_shape(rule_info<Rule>(), in_shapes, out_shapes);
  }
  static MXReturnValue storage(const ops::Attrs& attrs, std::vector<int>* in_stypes,
                               std::vector<int>* out_stypes) {
    return infer_multi_storage(rule_info<Rule>(), in_stypes, out_stypes);
  }
  static MXReturnValue mutate(const ops::Attrs& attrs, std::vector<int>* input_indices) {
    return multi_mutated_inputs(rule_info<Rule>(), attrs, input_indices);
  }
};

/*! \brief Register one operator; lib_api keeps the name's pointer, so it lives forever. */
template <class Rule, OpKind kKind>
CustomOp& add_op() {
  const std::string* name = new std::string(op_name(rule_info<Rule>(), kKind));
  using C = Callbacks<Rule, kKind>;
  return Registry<CustomOp>::get()
      ->add(name->c_str())
      .setParseAttrs(C::parse)
      .setInferType(C::type)
      .setInferShape(C::shape)
      .setInferSType(C::storage)
      .setMutateInputs(C::mutate);
}

/*! \brief Register the rule's multi-update (CPU only: optimizers keep MXNet's update on GPUs). */
template <class Rule>
void add_multi_op() {
  const std::string* name = new std::string(multi_op_name(rule_info<Rule>()));
  using C = MultiCallbacks<Rule>;
  Registry<CustomOp>::get()
      ->add(name->c_str())
      .setParseAttrs(C::parse)
      .setInferType(C::type)
      .setInferShape(C::shape)
      .setInferSType(C::storage)
      .setMutateInputs(C::mutate)
      .setForward(CpuOps<Rule>::multi_update_cpu, "cpu");
}

template <class Rule>
bool register_rule() {
  using Cpu = CpuOps<Rule>;
  CustomOp& eager = add_op<Rule, OpKind::kEager>();
  CustomOp& update = add_op<Rule, OpKind::kDeferredUpdate>();
  CustomOp& flush = add_op<Rule, OpKind::kFlush>();
#if GLUON_SPARSE_WITH_CUDA
  using Gpu = GpuOps<Rule>;
  eager.setForward(Gpu::compute_gpu, "gpu");
  update.setForward(Gpu::deferred_update_gpu, "gpu");
  flush.setForward(Gpu::flush_gpu, "gpu");
#endif
  eager.setForward(Cpu::compute_cpu, "cpu");
  update.setForward(Cpu::deferred_update_cpu, "cpu");
  flush.setForward(Cpu::flush_cpu, "cpu");
  add_multi_op<Rule>();
  return true;
}

#define GS_REGISTER_RULE(Rule) register_rule<Rule>();
const bool kRegistered = [] {
  GLUON_SPARSE_OPTIM_RULES(GS_REGISTER_RULE)
  return true;
}();
#undef GS_REGISTER_RULE

}  // namespace
}  // namespace optim
}  // namespace gluon_sparse
