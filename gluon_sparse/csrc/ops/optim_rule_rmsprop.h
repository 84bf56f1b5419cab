/*!
 * RMSProp, plain (Tieleman & Hinton) and centered (Graves), as MXNet 1.9.1's
 * `rmsprop_update` (RMSPropUpdateKernel) and `rmspropalex_update`
 * (RMSPropAlexUpdateKernel) compute it, operation for operation, so that the
 * results are bitwise equal to MXNet's on CPU (one C++ kernel there, no mshadow
 * expression templates, no FMA contraction in the x86-64 wheel):
 *
 *   g = rescale_grad * grad + wd * w;  g = clip(g, clip_gradient)  (if >= 0)
 * plain:
 *   n = (1 - gamma1) * (g * g) + gamma1 * n
 *   w = w - lr * (g / sqrt(n + epsilon))
 * centered:
 *   n     = (1 - gamma1) * g * g + gamma1 * n          ((1 - gamma1) * g first)
 *   gm    = (1 - gamma1) * g + gamma1 * gm
 *   delta = gamma2 * delta - lr * g / sqrt(n - gm * gm + epsilon)   ((lr * g) first)
 *   w     = w + delta
 * then w = clip(w, clip_weights) (if >= 0).
 *
 * Every scalar is a C float of the op's parameters cast to the weight's type,
 * and 1 - gamma1 is rounded in that type (MXNet writes `1.f - gamma1` with
 * gamma1 already a DType). A step without gradient is the same step with
 * grad = 0: g = rescale_grad * 0 + wd * w keeps MXNet's signs of zero.
 *
 * Unlike Adam's, a step without gradient moves the state even at wd == 0: n
 * (and gm) decay by gamma1, delta by gamma2, and the centered weight moves by
 * delta. Lazy and standard RMSProp therefore differ without weight decay too.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_RMSPROP_H_
#define GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_RMSPROP_H_

#include "optim_rule.h"
#include "optim_rule_rmsprop_detail.h"

namespace gluon_sparse {
namespace optim {

/*! \brief Plain RMSProp (MXNet's rmsprop_update). State: n. */
struct RmspropRule {
  static constexpr const char* kName = "rmsprop";
  static constexpr int kNumStates = 1;
  static constexpr const char* kStateNames[] = {"n"};
  // The op's own defaults (mx.optimizer.RMSProp always passes gamma1 and epsilon).
  static constexpr int kNumFixed = 3;
  static constexpr const char* kFixedNames[] = {"gamma1", "epsilon", "clip_weights"};
  static constexpr float kFixedDefaults[] = {0.95f, 1e-8f, -1.0f};
  static constexpr int kNumStep = 3;
  static constexpr const char* kStepNames[] = {"lr", "wd", "clip_gradient"};
  static constexpr float kStepDefaults[] = {NAN, 0.0f, -1.0f};

  template <typename T> using Scalars = rmsprop_detail::Scalars<T>;

  template <typename T>
  GS_HOST_DEVICE static Scalars<T> scalars(const float* step, const float* fixed,
                                           float rescale_grad) {
    Scalars<T> s;
    s.lr = static_cast<T>(step[0]);
    s.wd = static_cast<T>(step[1]);
    s.clip_gradient = static_cast<T>(step[2]);
    s.rescale_grad = static_cast<T>(rescale_grad);
    s.gamma1 = static_cast<T>(fixed[0]);
    s.one_minus_gamma1 = ops::sub(T(1), s.gamma1);
    s.gamma2 = T(0);
    s.epsilon = static_cast<T>(fixed[1]);
    s.clip_weights = static_cast<T>(fixed[2]);
    return s;
  }

  template <bool kHasGrad, typename T>
  GS_HOST_DEVICE static void apply(T grad, T* w, T* state, const Scalars<T>& s) {
    using namespace ops;
    const T g = rmsprop_detail::rescaled_grad<kHasGrad>(grad, *w, s);
    const T n = add(mul(s.one_minus_gamma1, mul(g, g)), mul(s.gamma1, state[0]));
    state[0] = n;
    *w = rmsprop_detail::clip_weight(sub(*w, mul(s.lr, div(g, sqrt_rn(add(n, s.epsilon))))), s);
  }

  /*!
   * With wd == 0, n = +0 and a finite w: g = +0 (rescale_grad * 0 + 0 * w, for
   * rescale_grad >= 0), n = (1 - gamma1) * +0 + gamma1 * +0 = +0 for a finite
   * gamma1, w - lr * (+0 / sqrt(epsilon)) = w for epsilon > 0 and a finite lr of
   * positive sign. clip_weights >= 0 would clip a weight outside its bound: no
   * shortcut then.
   */
  GS_HOST_DEVICE static bool zero_state_is_fixed_point(const float* step, const float* fixed) {
    return step[1] == 0.0f && rmsprop_detail::finite_non_negative(step[0]) &&
           ops::is_finite(fixed[0]) && fixed[1] > 0.0f && !(fixed[2] >= 0.0f);
  }

  // A cheaper exact replay of the steps a row missed (optim_rule_rmsprop_detail.h).
  static constexpr bool kHasReplayRow = true;
  template <typename T>
  GS_HOST_DEVICE static bool replay_row(int64_t cols, T* w, T* const* s, const float* history,
                                        const float* fixed, int64_t from, int64_t to) {
    return rmsprop_detail::replay_row<RmspropRule>(cols, w, s, history, fixed, from, to);
  }
};

/*! \brief Centered RMSProp (MXNet's rmspropalex_update). States: n, g, delta. */
struct RmspropCenteredRule {
  static constexpr const char* kName = "rmsprop_centered";
  static constexpr int kNumStates = 3;
  static constexpr const char* kStateNames[] = {"n", "g", "delta"};
  static constexpr int kNumFixed = 4;
  static constexpr const char* kFixedNames[] = {"gamma1", "gamma2", "epsilon", "clip_weights"};
  static constexpr float kFixedDefaults[] = {0.95f, 0.9f, 1e-8f, -1.0f};
  static constexpr int kNumStep = 3;
  static constexpr const char* kStepNames[] = {"lr", "wd", "clip_gradient"};
  static constexpr float kStepDefaults[] = {NAN, 0.0f, -1.0f};

  template <typename T> using Scalars = rmsprop_detail::Scalars<T>;

  template <typename T>
  GS_HOST_DEVICE static Scalars<T> scalars(const float* step, const float* fixed,
                                           float rescale_grad) {
    Scalars<T> s;
    s.lr = static_cast<T>(step[0]);
    s.wd = static_cast<T>(step[1]);
    s.clip_gradient = static_cast<T>(step[2]);
    s.rescale_grad = static_cast<T>(rescale_grad);
    s.gamma1 = static_cast<T>(fixed[0]);
    s.one_minus_gamma1 = ops::sub(T(1), s.gamma1);
    s.gamma2 = static_cast<T>(fixed[1]);
    s.epsilon = static_cast<T>(fixed[2]);
    s.clip_weights = static_cast<T>(fixed[3]);
    return s;
  }

  template <bool kHasGrad, typename T>
  GS_HOST_DEVICE static void apply(T grad, T* w, T* state, const Scalars<T>& s) {
    using namespace ops;
    const T g = rmsprop_detail::rescaled_grad<kHasGrad>(grad, *w, s);
    const T n = add(mul(mul(s.one_minus_gamma1, g), g), mul(s.gamma1, state[0]));
    const T gm = add(mul(s.one_minus_gamma1, g), mul(s.gamma1, state[1]));
    const T delta = sub(mul(s.gamma2, state[2]),
                        div(mul(s.lr, g), sqrt_rn(add(sub(n, mul(gm, gm)), s.epsilon))));
    state[0] = n;
    state[1] = gm;
    state[2] = delta;
    *w = rmsprop_detail::clip_weight(add(*w, delta), s);
  }

  /*!
   * As plain RMSProp's, with delta = gamma2 * +0 - (lr * +0) / sqrt(epsilon) = +0
   * for a finite gamma2 of positive sign, and w + (+0) = w (w = -0 would become
   * +0: the contract excludes it).
   */
  GS_HOST_DEVICE static bool zero_state_is_fixed_point(const float* step, const float* fixed) {
    return step[1] == 0.0f && rmsprop_detail::finite_non_negative(step[0]) &&
           ops::is_finite(fixed[0]) && rmsprop_detail::finite_non_negative(fixed[1]) &&
           fixed[2] > 0.0f && !(fixed[3] >= 0.0f);
  }

  // A cheaper exact replay of the steps a row missed (optim_rule_rmsprop_detail.h).
  static constexpr bool kHasReplayRow = true;
  template <typename T>
  GS_HOST_DEVICE static bool replay_row(int64_t cols, T* w, T* const* s, const float* history,
                                        const float* fixed, int64_t from, int64_t to) {
    return rmsprop_detail::replay_row<RmspropCenteredRule>(cols, w, s, history, fixed, from, to);
  }
};

}  // namespace optim
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_RMSPROP_H_
