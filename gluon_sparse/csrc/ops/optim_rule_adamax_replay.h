/*!
 * AdaMax's faster exact replay of the steps a row missed (the rule's optional
 * `replay_row` hook, optim_rule.h): host code, float32 rows.
 *
 * A step without gradient whose record has wd == 0 and a finite lr (a "decay
 * step") has g = 0 * 1 + w * 0 = +0 (clipping keeps +0), so with beta1, beta2
 * in (0.5, 1), 1 - beta1 > 0 and u >= 0 it is
 *     m = fl(beta1 m) (+0 for a zero m),   u = fl(beta2 u) (+0 for a zero u),
 *     w = w - fl(fl(m lr) / fl(u + epsilon)).
 * A nonzero m never reaches zero (fl(beta1 x) of one denormal unit is one unit
 * for beta1 > 0.5), so the weight keeps moving, ever more slowly. As for Adam
 * (adam_deferred_kernels.h, steps_until_frozen), once no step to come can move
 * w by a bit, the rest of the replay is m and u alone: two geometric decays
 * (geometric_decay.h), a vector multiply per 8 elements a step, instead of
 * full steps with a division each, for the whole of a long absence.
 *
 * When no step can move w. With unit = 2^-24, a = beta1 (1 + unit) and
 * c = beta2 (1 - unit), j steps ahead
 *     |m_j| <= a^j |m| + E,  E = 2^-150 / (1 - a),  |m_j| <= |m|,
 *     u_j >= c^j u while u_j is normal,  u_j >= c^j u - j 2^-149 always,
 * and the update is at most (1 + 4 unit) |lr| |m_j| / (u_j + epsilon) plus the
 * roundings into the denormal range. a^j / (c^j u + epsilon) does not grow
 * with j when a < c (beta1 < beta2, a little), so the next step bounds every
 * later one when u stays normal over the range; otherwise the step with the
 * least u does. w stays while the bound is below half its ulp (a quarter for
 * a power of two). The largest |lr| of the range stands for every step's.
 *
 * Bitwise equal to the step-by-step replay (tests/test_adamax_replay_hook.py
 * compares them over random rows, histories and constants, both SIMD builds).
 * Rows of a long absence: 100 rows of 128 back after 1,000 / 3,000 / 10,000
 * steps replay in 1.6 / 2.2 / 4.5 ms instead of 2.9 / 6.0 / 27 ms.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_ADAMAX_REPLAY_H_
#define GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_ADAMAX_REPLAY_H_

#if !defined(__CUDACC__)
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "frozen_weight.h"
#include "geometric_decay.h"
#include "optim_rows.h"

namespace gluon_sparse {
namespace optim {
namespace adamax_replay {

/*! \brief Whether a step without gradient with this record is a decay step (see above). */
inline bool is_decay_step(const float* record) {
  return record[1] == 0.0f && ops::is_finite(record[0]);
}

/*!
 * \brief 0 if no decay step of the n to come, each with |lr| <= max_lr, can
 *        change w (see above); otherwise how many full steps to run before
 *        asking again (>= 1; n + 1: never in this range).
 */
inline int64_t steps_until_frozen(int64_t cols, const float* w, const float* m, const float* u,
                                  float beta1, float beta2, float epsilon, float max_lr,
                                  int64_t n) {
  constexpr int64_t kRetry = 8;  // full steps before asking again when the bound cannot say
  constexpr double unit = 0x1p-24;
  const double b1 = beta1, b2 = beta2, eps = epsilon, lr = max_lr;
  const double a = b1 * (1.0 + unit), c = b2 * (1.0 - unit);
  const bool next_bounds_all = a < c;
  const double decay_n = std::pow(c, static_cast<double>(n));
  const double u_normal = 0x1p-126 / decay_n;  // from here u stays normal for n steps
  const double u_slack = static_cast<double>(n) * 0x1p-149;
  const double m_slack = next_bounds_all ? 0x1p-150 / (1.0 - a) : 0.0;  // E
  for (int64_t j = 0; j < cols; ++j) {
    const double half_ulp = ops::unmoved_bound(w[j]);
    if (half_ulp != half_ulp) return n + 1;  // inf or NaN: never frozen
    if (half_ulp == 0.0) return kRetry;      // zero or denormal weight: may still move away
    const double mj = std::fabs(static_cast<double>(m[j])), uj = u[j];
    if (!(mj <= 3.5e38) || !(uj >= 0.0 && uj <= 3.5e38)) return n + 1;
    const double u_least = std::max(0.0, uj * decay_n * (1.0 - 1e-9) - u_slack);
    if (!(u_least + eps > 0.0)) return n + 1;  // 0 / 0 may come: full steps, as MXNet
    const double den = (next_bounds_all && uj >= u_normal ? uj : u_least) + eps;
    // Roundings into the denormal range: lr m, the quotient, and E.
    const double slack = (lr * m_slack + 2.0 * 0x1p-149) / (u_least + eps) + 0x1p-149;
    const double bound = lr * mj * (1.0 + 1e-5) / den + slack;
    if (bound < half_ulp) continue;
    if (!next_bounds_all || !(half_ulp > slack)) return kRetry;
    // The bound shrinks by beta1 / beta2 a step while u outweighs epsilon.
    const double steps = std::log((bound - slack) / (half_ulp - slack)) / std::log(b2 / b1);
    return steps < static_cast<double>(n) ? static_cast<int64_t>(steps) + 1 : n + 1;
  }
  return 0;
}

/*!
 * \brief Steps from+1..to of one float32 row; false (nothing done) when the
 *        constants or the history leave nothing to gain, for the generic replay.
 */
template <class Rule>
inline bool replay_row(int64_t cols, float* w, float* const* s, const float* history,
                       const float* fixed, int64_t from, int64_t to) {
  constexpr int64_t kMinFrozenSteps = 16;  // below this a check costs what it saves
  const float beta1 = fixed[0], one_minus_beta1 = fixed[1], beta2 = fixed[2], eps = fixed[3];
  if (!(beta1 > 0.5f && beta1 < 1.0f && beta2 > 0.5f && beta2 < 1.0f &&
        one_minus_beta1 > 0.0f && ops::is_finite(one_minus_beta1) && eps >= 0.0f &&
        ops::is_finite(eps))) {
    return false;
  }
  // The decay steps after the last other one, and their largest |lr|.
  int64_t last_full = from;
  float max_lr = 0.0f;
  for (int64_t t = from + 1; t <= to; ++t) {
    const float* record = history + t * Rule::kNumStep;
    if (!is_decay_step(record)) {
      last_full = t;
      max_lr = 0.0f;
    } else {
      max_lr = std::max(max_lr, std::fabs(record[0]));
    }
  }
  if (to - last_full < kMinFrozenSteps) return false;
  StatePtrs<float> states;
  for (int k = 0; k < Rule::kNumStates; ++k) states.p[k] = s[k];
  int64_t t = from + 1;
  if (last_full >= t) replay_steps<Rule, float>(cols, w, states, history, fixed, t, last_full);
  t = last_full + 1;
  float* m = s[0];
  float* u = s[1];
  while (t <= to) {
    int64_t last = to;
    if (to - t + 1 >= kMinFrozenSteps) {
      const int64_t wait =
          steps_until_frozen(cols, w, m, u, beta1, beta2, eps, max_lr, to - t + 1);
      if (wait == 0) {
        for (int64_t j = 0; j < cols; ++j) {  // the first decay step takes -0 to +0
          if (m[j] == 0.0f) m[j] = 0.0f;
          if (u[j] == 0.0f) u[j] = 0.0f;
        }
        ops::decay_geometric(cols, m, beta1, to - t + 1);
        ops::decay_geometric(cols, u, beta2, to - t + 1);
        return true;
      }
      last = std::min(to, t + wait - 1);
    }
    replay_steps<Rule, float>(cols, w, states, history, fixed, t, last);
    t = last + 1;
  }
  return true;
}

}  // namespace adamax_replay
}  // namespace optim
}  // namespace gluon_sparse
#endif  // !__CUDACC__

#endif  // GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_ADAMAX_REPLAY_H_
