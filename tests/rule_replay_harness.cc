// Host harness for the rules' replay_row hooks (tests/test_optimizer_{adagrad,ftrl,rmsprop}.py,
// tests/test_frozen_replay.py): a row replayed step by step with Rule::apply<false>, as the
// framework's default replay does, or the same row through Rule::replay_row, for float and
// double. Built once per test session (tests/conftest.py) with the system C++ compiler
// against gluon_sparse/csrc/ops, as optimizer_rule_runs.compile_driver says.
#include <cstdint>

#include "optim_rules.h"

namespace {

using gluon_sparse::optim::kMaxStates;

// states: kNumStates arrays of `cols` values, one after the other. Returns whether the
// hook took the row (1; the step-by-step replay always does).
template <class Rule, typename T>
int replay(int64_t cols, T* w, T* states, const float* history, const float* fixed,
           int64_t from, int64_t to, int use_hook) {
  if (use_hook) {
    T* rows[kMaxStates];
    for (int k = 0; k < Rule::kNumStates; ++k) rows[k] = states + k * cols;
    return Rule::template replay_row<T>(cols, w, rows, history, fixed, from, to) ? 1 : 0;
  }
  for (int64_t t = from + 1; t <= to; ++t) {
    const auto sc = Rule::template scalars<T>(history + t * Rule::kNumStep, fixed, 1.0f);
    for (int64_t j = 0; j < cols; ++j) {
      T s[kMaxStates];
      for (int k = 0; k < Rule::kNumStates; ++k) s[k] = states[k * cols + j];
      Rule::template apply<false, T>(T(0), w + j, s, sc);
      for (int k = 0; k < Rule::kNumStates; ++k) states[k * cols + j] = s[k];
    }
  }
  return 1;
}

}  // namespace

#define GS_HARNESS(NAME, RULE)                                                             \
  extern "C" int NAME##_replay_f32(int64_t c, float* w, float* s, const float* h,           \
                                   const float* f, int64_t a, int64_t b, int hook) {        \
    return replay<RULE, float>(c, w, s, h, f, a, b, hook);                                  \
  }                                                                                         \
  extern "C" int NAME##_replay_f64(int64_t c, double* w, double* s, const float* h,         \
                                   const float* f, int64_t a, int64_t b, int hook) {        \
    return replay<RULE, double>(c, w, s, h, f, a, b, hook);                                 \
  }

// Every rule with a replay_row hook.
GS_HARNESS(adagrad, gluon_sparse::optim::AdaGradRule)
GS_HARNESS(adamax, gluon_sparse::optim::AdamaxRule)
GS_HARNESS(ftrl, gluon_sparse::optim::FtrlRule)
GS_HARNESS(nadam, gluon_sparse::optim::NadamRule)
GS_HARNESS(rmsprop, gluon_sparse::optim::RmspropRule)
GS_HARNESS(rmsprop_centered, gluon_sparse::optim::RmspropCenteredRule)
