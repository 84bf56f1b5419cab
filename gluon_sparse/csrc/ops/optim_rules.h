/*!
 * Every rule of the optimizer family, listed once (see optim_rule.h).
 *
 * GLUON_SPARSE_OPTIM_RULES(X) calls X(Rule) for each rule: the framework
 * registers the rule's three operators (optim_op.cc), its registry entry kind
 * (deferred_registry.cc) and its CUDA kernels (optim_kernels.cu) from it.
 * Adding a rule: its #include and its X line, both kept sorted by file name so
 * that branches adding rules merge without conflicts.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OPTIM_RULES_H_
#define GLUON_SPARSE_CSRC_OPS_OPTIM_RULES_H_

#include "optim_rule_adagrad.h"
#include "optim_rule_adamax.h"
#include "optim_rule_adamw.h"
#include "optim_rule_ftrl.h"
#include "optim_rule_nadam.h"
#include "optim_rule_nag.h"
#include "optim_rule_rmsprop.h"
#include "optim_rule_sgd.h"
#include "optim_rule_sgd_mom.h"

// clang-format off
#define GLUON_SPARSE_OPTIM_RULES(X) \
  X(gluon_sparse::optim::AdaGradRule) \
  X(gluon_sparse::optim::AdamaxRule) \
  X(gluon_sparse::optim::AdamwRule) \
  X(gluon_sparse::optim::FtrlRule) \
  X(gluon_sparse::optim::NadamRule) \
  X(gluon_sparse::optim::NagPlainRule) \
  X(gluon_sparse::optim::NagRule) \
  X(gluon_sparse::optim::RmspropCenteredRule) \
  X(gluon_sparse::optim::RmspropRule) \
  X(gluon_sparse::optim::SgdMomRule) \
  X(gluon_sparse::optim::SgdRule) \
  /* end of the list: every rule line above ends with a backslash */
// clang-format on

#endif  // GLUON_SPARSE_CSRC_OPS_OPTIM_RULES_H_
