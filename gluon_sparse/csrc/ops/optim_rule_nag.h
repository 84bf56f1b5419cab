/*!
 * Nesterov momentum: MXNet 1.9.1's dense-gradient `mx.optimizer.NAG` update.
 *
 * momentum > 0: nag_mom_update (NAGMomKernel), operation for operation:
 *   mom = momentum * mom
 *   w'  = w - mom + (momentum + 1) * (mom - lr * (rescale_grad * grad + wd * w))
 *   mom = mom - lr * (rescale_grad * grad + wd * w')
 * (with clipping, rescale_grad * grad is clip(rescale_grad * grad, clip_gradient)).
 * The last line reads w' and not w: MXNet's kernel writes the weight in place
 * (out=weight) before it reads weight_data[i] again for the momentum, and the
 * rule reproduces that.
 *
 * momentum == 0: sgd_update (SGDKernel), MXNet NAG's update without state:
 *   w' = (1 - lr * wd) * w - (lr * rescale_grad) * grad
 *        (with clipping: ... - lr * clip(rescale_grad * grad, clip_gradient))
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_NAG_H_
#define GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_NAG_H_

#include <cmath>

#include "optim_rule.h"
#include "optim_rule_sgd_mom.h"

namespace gluon_sparse {
namespace optim {

/*! \brief rescale_grad * grad, clipped when clip >= 0 (MXNet's two kernel branches). */
template <bool kHasGrad, typename T>
GS_HOST_DEVICE T nag_grad(T grad, const SgdScalars<T>& sc) {
  const T g = ops::mul(sc.rescale_grad, kHasGrad ? grad : T(0));
  return sc.clip >= T(0) ? ops::clip(g, sc.clip) : g;
}

struct NagRule {
  static constexpr const char* kName = "nag";
  static constexpr int kNumStates = 1;
  static constexpr const char* kStateNames[] = {"mom"};
  static constexpr int kNumFixed = 1;
  static constexpr const char* kFixedNames[] = {"momentum"};
  static constexpr float kFixedDefaults[] = {0.0f};
  static constexpr int kNumStep = 3;
  static constexpr const char* kStepNames[] = {"lr", "wd", "clip_gradient"};
  static constexpr float kStepDefaults[] = {NAN, 0.0f, -1.0f};

  template <typename T>
  using Scalars = SgdScalars<T>;

  template <typename T>
  GS_HOST_DEVICE static Scalars<T> scalars(const float* step, const float* fixed,
                                           float rescale_grad) {
    return {static_cast<T>(step[0]), static_cast<T>(step[1]), static_cast<T>(fixed[0]),
            static_cast<T>(rescale_grad), static_cast<T>(step[2])};
  }

  template <bool kHasGrad, typename T>
  GS_HOST_DEVICE static void apply(T grad, T* w, T* s, const Scalars<T>& sc) {
    using namespace ops;
    const T g = nag_grad<kHasGrad>(grad, sc);
    const T mom = mul(sc.momentum, s[0]);
    const T w_new = add(sub(*w, mom), mul(add(sc.momentum, T(1)),
                                          sub(mom, mul(sc.lr, add(g, mul(sc.wd, *w))))));
    s[0] = sub(mom, mul(sc.lr, add(g, mul(sc.wd, w_new))));
    *w = w_new;
  }

  GS_HOST_DEVICE static bool zero_state_is_fixed_point(const float* step, const float* fixed) {
    // mom = momentum * +0 = +0, the bracket lr * (+0 + 0 * w) = +-0, so w' = w and mom stays +0.
    return sgd_zero_is_fixed_point(step[0], step[1], fixed[0]);
  }
};

struct NagPlainRule {
  static constexpr const char* kName = "nag_plain";
  static constexpr int kNumStates = 0;
  static constexpr const char* kStateNames[] = {nullptr};
  static constexpr int kNumFixed = 0;
  static constexpr const char* kFixedNames[] = {nullptr};
  static constexpr float kFixedDefaults[] = {0.0f};
  static constexpr int kNumStep = 3;
  static constexpr const char* kStepNames[] = {"lr", "wd", "clip_gradient"};
  static constexpr float kStepDefaults[] = {NAN, 0.0f, -1.0f};

  template <typename T>
  using Scalars = SgdScalars<T>;

  template <typename T>
  GS_HOST_DEVICE static Scalars<T> scalars(const float* step, const float* fixed,
                                           float rescale_grad) {
    return {static_cast<T>(step[0]), static_cast<T>(step[1]), T(0), static_cast<T>(rescale_grad),
            static_cast<T>(step[2])};
  }

  template <bool kHasGrad, typename T>
  GS_HOST_DEVICE static void apply(T grad, T* w, T* s, const Scalars<T>& sc) {
    using namespace ops;
    const T g = kHasGrad ? grad : T(0);
    const T decayed = mul(sub(T(1), mul(sc.lr, sc.wd)), *w);
    if (sc.clip >= T(0)) {
      *w = sub(decayed, mul(sc.lr, clip(mul(sc.rescale_grad, g), sc.clip)));
    } else {
      *w = sub(decayed, mul(mul(sc.lr, sc.rescale_grad), g));
    }
  }

  GS_HOST_DEVICE static bool zero_state_is_fixed_point(const float* step, const float* fixed) {
    // (1 - lr * 0) * w = w and lr * (+-0) = +-0.
    return sgd_zero_is_fixed_point(step[0], step[1], 0.0f);
  }
};

}  // namespace optim
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_NAG_H_
