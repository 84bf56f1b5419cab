/*!
 * AdaMax's faster exact replay of the steps a row missed (the rule's optional
 * `replay_row` hook, optim_rule.h): host code, float32 rows, run by
 * frozen_replay.h with the policy below.
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
 * Bitwise equal to the step-by-step replay (tests/test_frozen_replay.py
 * compares them over random rows, histories and constants, both SIMD builds).
 * Rows of a long absence: 100 rows of 128 back after 1,000 / 3,000 / 10,000
 * steps replay in 1.6 / 2.2 / 4.5 ms instead of 2.9 / 6.0 / 27 ms.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_ADAMAX_REPLAY_H_
#define GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_ADAMAX_REPLAY_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "frozen_weight.h"

namespace gluon_sparse {
namespace optim {
namespace adamax_replay {

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

/*! \brief frozen_replay.h's policy for AdaMax (see above). */
template <class AdamaxRule>
struct Policy {
  using Rule = AdamaxRule;

  static bool takes(const float* fixed) {
    const float beta1 = fixed[0], one_minus_beta1 = fixed[1], beta2 = fixed[2], eps = fixed[3];
    return beta1 > 0.5f && beta1 < 1.0f && beta2 > 0.5f && beta2 < 1.0f &&
           one_minus_beta1 > 0.0f && ops::is_finite(one_minus_beta1) && eps >= 0.0f &&
           ops::is_finite(eps);
  }

  /*! \brief Whether a step without gradient with this record is a decay step (see above). */
  static bool is_decay_step(const float* record) {
    return record[1] == 0.0f && ops::is_finite(record[0]);
  }

  struct Range {
    float max_lr = 0.0f;  //!< the largest |lr|
    void add(const float* record) { max_lr = std::max(max_lr, std::fabs(record[0])); }
  };

  static int64_t steps_until_frozen(int64_t cols, const float* w, float* const* s,
                                    const float* fixed, const Range& range, int64_t n) {
    return adamax_replay::steps_until_frozen(cols, w, s[0], s[1], fixed[0], fixed[2], fixed[3],
                                             range.max_lr, n);
  }
};

}  // namespace adamax_replay
}  // namespace optim
}  // namespace gluon_sparse
#endif  // GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_ADAMAX_REPLAY_H_
