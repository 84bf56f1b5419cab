/*!
 * Nadam: MXNet 1.9.1's `mx.optimizer.Nadam.update` on a dense gradient, a
 * Python composition of NDArray operators, reproduced operator by operator:
 *
 *   g  = clip(grad * rescale_grad + weight * wd)      (as AdaMax, optim_rule_adamax.h)
 *   m  = m * beta1 + g * (1 - beta1)
 *   v  = v * beta2 + (g * (1 - beta2)) * g
 *   g' = g / (1 - m_schedule)
 *   m' = m / (1 - m_schedule_next)
 *   v' = v / (1 - beta2^t)
 *   m_bar = g' * (1 - momentum_t) + m' * momentum_t_1
 *   weight = weight - (m_bar * lr) / (sqrt(v') + epsilon)
 *
 * The warming momentum schedule (momentum_t, momentum_t_1, m_schedule) is
 * computed by the Python optimizer in double, as MXNet's is: m_schedule lives
 * on the optimizer object and is multiplied by momentum_t at *every* update
 * call, whatever the parameter, so it depends on how many updates the
 * optimizer made before. Each step's record therefore carries the five
 * schedule scalars as rounded to float (what _mul_scalar / _div_scalar use for
 * float32 weights), and every row replays with its step's own values.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_NADAM_H_
#define GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_NADAM_H_

#include <cmath>

#include "frozen_replay.h"
#include "optim_rule.h"
#include "optim_rule_adamax.h"
#include "optim_rule_nadam_replay.h"

namespace gluon_sparse {
namespace optim {

/*!
 * The replay hook comes from frozen_replay::Hook (frozen_replay.h,
 * optim_rule_nadam_replay.h): float32 rows on the host stop full steps once no step
 * to come can move a weight; elsewhere the generic replay runs.
 */
struct NadamRule : frozen_replay::Hook<nadam_replay::Policy, NadamRule> {
  static constexpr const char* kName = "nadam";
  static constexpr int kNumStates = 2;
  static constexpr const char* kStateNames[] = {"mean", "var"};
  static constexpr int kNumFixed = 5;
  static constexpr const char* kFixedNames[] = {"beta1", "one_minus_beta1", "beta2",
                                                "one_minus_beta2", "epsilon"};
  static constexpr float kFixedDefaults[] = {0.9f, NAN, 0.999f, NAN, 1e-8f};
  static constexpr int kNumStep = 8;
  static constexpr const char* kStepNames[] = {
      "lr", "wd", "clip_gradient",
      "one_minus_m_schedule",       // 1 - m_schedule (divides g)
      "one_minus_m_schedule_next",  // 1 - m_schedule * momentum_t_1 (divides m)
      "one_minus_beta2_power",      // 1 - beta2^t (divides v)
      "one_minus_momentum",         // 1 - momentum_t
      "momentum_next"};             // momentum_t_1
  static constexpr float kStepDefaults[] = {NAN, 0.0f, -1.0f, NAN, NAN, NAN, NAN, NAN};
  // _mul_scalar / _div_scalar's double parameters cast to float: correctly rounded.
  static constexpr Parse kStepParse[] = {
      Parse::kTupleElement, Parse::kTupleElement, Parse::kTupleElement, Parse::kTupleElement,
      Parse::kTupleElement, Parse::kTupleElement, Parse::kTupleElement, Parse::kTupleElement};

  template <typename T>
  struct Scalars {
    T lr, wd, clip, rescale_grad, beta1, one_minus_beta1, beta2, one_minus_beta2, epsilon;
    T g_div, m_div, v_div, one_minus_momentum, momentum_next;
  };

  template <typename T>
  GS_HOST_DEVICE static Scalars<T> scalars(const float* step, const float* fixed,
                                           float rescale_grad) {
    Scalars<T> sc;
    sc.lr = static_cast<T>(step[0]);
    sc.wd = static_cast<T>(step[1]);
    sc.clip = static_cast<T>(step[2]);
    sc.g_div = static_cast<T>(step[3]);
    sc.m_div = static_cast<T>(step[4]);
    sc.v_div = static_cast<T>(step[5]);
    sc.one_minus_momentum = static_cast<T>(step[6]);
    sc.momentum_next = static_cast<T>(step[7]);
    sc.rescale_grad = static_cast<T>(rescale_grad);
    sc.beta1 = static_cast<T>(fixed[0]);
    sc.one_minus_beta1 = static_cast<T>(fixed[1]);
    sc.beta2 = static_cast<T>(fixed[2]);
    sc.one_minus_beta2 = static_cast<T>(fixed[3]);
    sc.epsilon = static_cast<T>(fixed[4]);
    return sc;
  }

  template <bool kHasGrad, typename T>
  GS_HOST_DEVICE static void apply(T grad, T* w, T* s, const Scalars<T>& sc) {
    using namespace ops;
    const T g = adamax_composed_grad<kHasGrad>(grad, *w, sc.rescale_grad, sc.wd, sc.clip);
    const T m = add(mul(s[0], sc.beta1), mul(g, sc.one_minus_beta1));
    const T v = add(mul(s[1], sc.beta2), mul(mul(g, sc.one_minus_beta2), g));
    s[0] = m;
    s[1] = v;
    const T m_bar = add(mul(div_unless_one(g, sc.g_div), sc.one_minus_momentum),
                        mul(div_unless_one(m, sc.m_div), sc.momentum_next));
    *w = sub(*w, div(mul(m_bar, sc.lr), add(sqrt_rn(div_unless_one(v, sc.v_div)), sc.epsilon)));
  }

  /*!
   * \brief fl(x / d), skipping the division when d is 1 (x / 1 is x, bit for
   *        bit). The three divisors are 1 - (a product of momenta, or of beta2)
   *        and round to exactly 1 once that product is below 2^-25: after a few
   *        dozen updates for m_schedule, after ~17,000 for beta2^t (0.999), so
   *        in steady state a step costs two divisions an element, not four.
   *        The test is on a step scalar, the same for every element, and costs
   *        nothing measurable when d is not 1. The replay's full steps (AVX2,
   *        128 columns): 0.62 ns an element-step, 0.41 with m_schedule's
   *        divisors at 1, 0.31 with beta2^t's too.
   */
  template <typename T>
  GS_HOST_DEVICE static T div_unless_one(T x, T d) {
    return d == T(1) ? x : ops::div(x, d);
  }

  /*!
   * With wd == 0 a zero-state element sees g = +0: m, v, g', m', v' and m_bar
   * stay +0 when every factor is non-negative and every divisor positive, and
   * the weight moves by (+0 * lr) / (0 + epsilon) = 0 when epsilon > 0.
   */
  GS_HOST_DEVICE static bool zero_state_is_fixed_point(const float* step, const float* fixed) {
    using ops::is_finite;
    for (int i = 0; i < 4; ++i) {
      if (!(fixed[i] >= 0.0f && is_finite(fixed[i]))) return false;
    }
    for (int i = 3; i < 6; ++i) {
      if (!(step[i] > 0.0f && is_finite(step[i]))) return false;
    }
    return step[1] == 0.0f && is_finite(step[0]) && fixed[4] > 0.0f && is_finite(fixed[4]) &&
           step[6] >= 0.0f && is_finite(step[6]) && step[7] >= 0.0f && is_finite(step[7]);
  }
};

}  // namespace optim
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_NADAM_H_
