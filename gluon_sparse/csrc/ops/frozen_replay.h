/*!
 * The frozen replay of a float32 row, for rules whose momentum decays without
 * ever reaching zero (AdaMax, Nadam): a rule's `replay_row` hook (optim_rule.h)
 * on the host.
 *
 * A step without gradient and without weight decay (a "decay step") takes the
 * two states to fl(beta1 m) and fl(beta2 v) and moves the weight by an update
 * that shrinks from step to step. Every such step would otherwise be replayed
 * in full, with its divisions, for the whole of a long absence. Once no step to
 * come can move a weight by a bit (the rule's bound, frozen_weight.h), the
 * rest of the replay is m and v alone: two geometric decays (geometric_decay.h),
 * a vector multiply per 8 elements a step.
 *
 * A Policy describes the rule:
 *   using Rule = ...;                          the rule (its apply, kNumStep)
 *   static bool takes(const float* fixed);     constants the replay holds for
 *   static bool is_decay_step(const float* record);
 *   struct Range { void add(const float* record); };
 *                                              what the bound needs of a run of
 *                                              decay steps (e.g. their largest lr)
 *   static int64_t steps_until_frozen(int64_t cols, const float* w, float* const* s,
 *                                     const float* fixed, const Range& range, int64_t n);
 *                                              0 if none of the n decay steps to
 *                                              come can move w; else how many
 *                                              full steps before asking again
 * and replay_row below runs the steps: full steps up to the last step that is
 * not a decay step, then full steps until the bound says frozen, then the two
 * decays. Bitwise equal to the step-by-step replay (tests/test_frozen_replay.py).
 * `takes` must admit only beta1 and beta2 (fixed[0], fixed[2]) in (0.5, 1)
 * with 1 - beta1 > 0, for which the decays are exact: a decay step is
 * m = fl(beta1 m) + (+0), and only there does a nonzero m never reach zero
 * (fl(beta1 x) of one denormal unit is one unit), so that the + (+0) never
 * turns a -0 into +0 after the first step. With beta1 = 0.5, m halves to -0
 * and the step makes it +0, which the plain decay would not
 * (test_long_gaps_bitwise in tests/test_optimizer_nadam.py and
 * test_optimizer_adamax.py fails if this is relaxed).
 */
#ifndef GLUON_SPARSE_CSRC_OPS_FROZEN_REPLAY_H_
#define GLUON_SPARSE_CSRC_OPS_FROZEN_REPLAY_H_

#include <cstdint>
#include <type_traits>

#include "optim_rule.h"

#if !defined(__CUDACC__)
#include <algorithm>

#include "geometric_decay.h"
#include "optim_rows.h"

namespace gluon_sparse {
namespace optim {
namespace frozen_replay {

/*!
 * \brief Steps from+1..to of one float32 row; false (nothing done) when the
 *        constants or the history leave nothing to gain, for the generic replay.
 */
template <class Policy>
inline bool replay_row(int64_t cols, float* w, float* const* s, const float* history,
                       const float* fixed, int64_t from, int64_t to) {
  using Rule = typename Policy::Rule;
  constexpr int64_t kMinFrozenSteps = 16;  // below this a check costs what it saves
  if (!Policy::takes(fixed)) return false;
  // The decay steps after the last other one.
  int64_t last_full = from;
  typename Policy::Range range;
  for (int64_t t = from + 1; t <= to; ++t) {
    const float* record = history + t * Rule::kNumStep;
    if (Policy::is_decay_step(record)) {
      range.add(record);
    } else {
      last_full = t;
      range = typename Policy::Range();
    }
  }
  if (to - last_full < kMinFrozenSteps) return false;
  StatePtrs<float> states;
  for (int k = 0; k < Rule::kNumStates; ++k) states.p[k] = s[k];
  int64_t t = from + 1;
  if (last_full >= t) replay_steps<Rule, float>(cols, w, states, history, fixed, t, last_full);
  t = last_full + 1;
  while (t <= to) {
    int64_t last = to;
    if (to - t + 1 >= kMinFrozenSteps) {
      const int64_t wait = Policy::steps_until_frozen(cols, w, s, fixed, range, to - t + 1);
      if (wait == 0) {
        ops::decay_geometric_adding_zero(cols, s[0], fixed[0], to - t + 1);
        ops::decay_geometric_adding_zero(cols, s[1], fixed[2], to - t + 1);
        return true;
      }
      last = std::min(to, t + wait - 1);
    }
    replay_steps<Rule, float>(cols, w, states, history, fixed, t, last);
    t = last + 1;
  }
  return true;
}

}  // namespace frozen_replay
}  // namespace optim
}  // namespace gluon_sparse
#endif  // !__CUDACC__

namespace gluon_sparse {
namespace optim {
namespace frozen_replay {

/*!
 * \brief The replay_row hook (optim_rule.h) of a rule that takes the frozen
 *        replay: the rule derives from it,
 *            struct NadamRule : frozen_replay::Hook<nadam_replay::Policy, NadamRule>.
 *        replay_row<Policy<Rule>> for float32 rows on the host; false (the
 *        generic replay) for other types and in CUDA.
 */
template <template <class> class Policy, class Rule>
struct Hook {
  static constexpr bool kHasReplayRow = true;
  template <typename T>
  GS_HOST_DEVICE static bool replay_row(int64_t cols, T* w, T* const* s, const float* history,
                                        const float* fixed, int64_t from, int64_t to) {
#if defined(__CUDACC__)
    return false;
#else
    if constexpr (std::is_same<T, float>::value) {
      return frozen_replay::replay_row<Policy<Rule>>(cols, w, s, history, fixed, from, to);
    } else {
      return false;
    }
#endif
  }
};

}  // namespace frozen_replay
}  // namespace optim
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_FROZEN_REPLAY_H_
