/*!
 * Nadam's faster exact replay of the steps a row missed (the rule's optional
 * `replay_row` hook, optim_rule.h): host code, float32 rows, run by
 * frozen_replay.h with the policy below.
 *
 * A step without gradient whose record has wd == 0, a finite lr and usable
 * schedule scalars (a "decay step", is_decay_step) has g = 0 * 1 + w * 0 = +0
 * (clipping keeps +0), so with beta1, beta2 in (0.5, 1) and 1 - beta1,
 * 1 - beta2 finite and >= 0 it is
 *     m = fl(beta1 m),  v = fl(beta2 v)          (+0 for a zero m or v),
 *     m_bar = +-0 + fl(fl(m / m_div) momentum_next),
 *     w = w - fl(fl(m_bar lr) / fl(sqrt(fl(v / v_div)) + epsilon)),
 * g's term of m_bar being fl(fl(+0 / g_div) (1 - momentum)) = +-0. As Adam's
 * and AdaMax's, m never reaches zero, so the weight keeps moving, ever more
 * slowly, and each full step costs a square root and up to four divisions an
 * element (two once the schedule's divisors round to 1, optim_rule_nadam.h).
 *
 * The update is Adam's form, coef |m| / (sqrt(v) + epsilon), with coef =
 * |lr momentum_next / m_div| (v_div <= 1 and rounding is monotonic, so
 * fl(v / v_div) >= v): frozen_weight.h's bound (steps_until_frozen_sqrt),
 * with the largest coef of the range standing for every step's, within
 * (1 + u)^4 / (1 - u)^2 of relative roundings (u = 2^-24), and the three
 * roundings of the numerator into the denormal range:
 *     |fl(fl(fl(m / m_div) mn) lr)| <= coef |m| (1 + u)^3
 *                                      + 2^-150 (|lr mn| (1 + u)^2 + |lr| (1 + u) + 1).
 *
 * Bitwise equal to the step-by-step replay (tests/test_frozen_replay.py
 * compares them over random rows, histories and constants, both SIMD builds).
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_NADAM_REPLAY_H_
#define GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_NADAM_REPLAY_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "frozen_weight.h"

namespace gluon_sparse {
namespace optim {
namespace nadam_replay {

/*! \brief frozen_replay.h's policy for Nadam (see above). */
template <class NadamRule>
struct Policy {
  using Rule = NadamRule;

  static bool takes(const float* fixed) {
    const float beta1 = fixed[0], one_minus_beta1 = fixed[1], beta2 = fixed[2],
                one_minus_beta2 = fixed[3], eps = fixed[4];
    return beta1 > 0.5f && beta1 < 1.0f && beta2 > 0.5f && beta2 < 1.0f &&
           one_minus_beta1 > 0.0f && ops::is_finite(one_minus_beta1) &&
           one_minus_beta2 >= 0.0f && ops::is_finite(one_minus_beta2) && eps >= 0.0f &&
           ops::is_finite(eps);
  }

  /*!
   * \brief Whether a step without gradient with this record is a decay step:
   *        wd == 0; lr, 1 - momentum and momentum_next finite; g_div and
   *        m_div finite and nonzero (+0 / g_div is +-0, m / m_div finite);
   *        0 < v_div <= 1 (fl(v / v_div) >= v).
   */
  static bool is_decay_step(const float* record) {
    using ops::is_finite;
    const float lr = record[0], wd = record[1], g_div = record[3], m_div = record[4],
                v_div = record[5], one_minus_momentum = record[6], momentum_next = record[7];
    return wd == 0.0f && is_finite(lr) && is_finite(g_div) && g_div != 0.0f &&
           is_finite(m_div) && m_div != 0.0f && v_div > 0.0f && v_div <= 1.0f &&
           is_finite(one_minus_momentum) && is_finite(momentum_next);
  }

  struct Range {
    double max_coef = 0.0;      //!< the largest |lr momentum_next / m_div|
    double max_lr_mn = 0.0;     //!< the largest |lr momentum_next|
    double max_lr = 0.0;        //!< the largest |lr|
    void add(const float* record) {
      const double lr = std::fabs(static_cast<double>(record[0]));
      const double lr_mn = lr * std::fabs(static_cast<double>(record[7]));
      max_coef = std::max(max_coef, lr_mn / std::fabs(static_cast<double>(record[4])));
      max_lr_mn = std::max(max_lr_mn, lr_mn);
      max_lr = std::max(max_lr, lr);
    }
  };

  static int64_t steps_until_frozen(int64_t cols, const float* w, float* const* s,
                                    const float* fixed, const Range& range, int64_t n) {
    // The numerator's denormal roundings (see above), with room for (1 + u)^2.
    const double num_slack = 0x1p-150 * (range.max_lr_mn + range.max_lr + 1.0) * (1.0 + 1e-6);
    return ops::steps_until_frozen_sqrt(cols, w, s[0], s[1], fixed[0], fixed[2], fixed[4],
                                        range.max_coef, num_slack, n);
  }
};

}  // namespace nadam_replay
}  // namespace optim
}  // namespace gluon_sparse
#endif  // GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_NADAM_REPLAY_H_
