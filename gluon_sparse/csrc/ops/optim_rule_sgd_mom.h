/*!
 * SGD with momentum: MXNet 1.9.1's dense-gradient `mx.optimizer.SGD` update
 * (multi_sgd_mom_update, MultiSGDKernel; sgd_mom_update's SGDMomKernel writes
 * the same expression), operation for operation:
 *
 *   mom = momentum * mom - (lr * wd) * w - (lr * rescale_grad) * grad
 *         (with clipping: ... - lr * clip(rescale_grad * grad, clip_gradient))
 *   w   = w + mom
 *
 * A row absent from the gradient steps with grad = 0: its momentum decays and
 * weight decay still moves it, which lazy SGD skips.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_SGD_MOM_H_
#define GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_SGD_MOM_H_

#include <cmath>

#include "optim_rule.h"

namespace gluon_sparse {
namespace optim {

/*! \brief Scalars shared by the SGD rules (sgd, sgd_mom), cast as MultiSGDKernelParam does. */
template <typename T>
struct SgdScalars {
  T lr, wd, momentum, rescale_grad, clip;
};

/*!
 * \brief MXNet's momentum expression with `mom` the state (SgdMomRule) or the
 *        kernel's MPDType(0) (SgdRule); returns the new momentum.
 */
template <bool kHasGrad, typename T>
GS_HOST_DEVICE T sgd_momentum(T grad, T w, T mom, const SgdScalars<T>& sc) {
  using namespace ops;
  const T g = kHasGrad ? grad : T(0);
  const T decayed = sub(mul(sc.momentum, mom), mul(mul(sc.lr, sc.wd), w));
  if (sc.clip >= T(0)) return sub(decayed, mul(sc.lr, clip(mul(sc.rescale_grad, g), sc.clip)));
  return sub(decayed, mul(mul(sc.lr, sc.rescale_grad), g));
}

/*! \brief Whether a step without gradient keeps +0 momentum and a finite weight (see rule docs). */
GS_HOST_DEVICE bool sgd_zero_is_fixed_point(float lr, float wd, float momentum) {
  // (lr * wd) * w and lr * (+-0) are then +-0, momentum * +0 is +0: mom stays +0, w + +0 = w.
  return wd == 0.0f && ops::is_finite(lr) && momentum >= 0.0f && ops::is_finite(momentum);
}

struct SgdMomRule {
  static constexpr const char* kName = "sgd_mom";
  static constexpr int kNumStates = 1;
  static constexpr const char* kStateNames[] = {"mom"};
  static constexpr int kNumFixed = 1;
  static constexpr const char* kFixedNames[] = {"momentum"};
  static constexpr float kFixedDefaults[] = {0.0f};
  static constexpr int kNumStep = 3;
  static constexpr const char* kStepNames[] = {"lr", "wd", "clip_gradient"};
  static constexpr float kStepDefaults[] = {NAN, 0.0f, -1.0f};
  // mx.optimizer.SGD passes lr and wd in multi_sgd(_mom)_update's lrs/wds tuples.
  static constexpr Parse kStepParse[] = {Parse::kTupleElement, Parse::kTupleElement,
                                         Parse::kField};

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
    const T mom = sgd_momentum<kHasGrad>(grad, *w, s[0], sc);
    s[0] = mom;
    *w = ops::add(*w, mom);
  }

  GS_HOST_DEVICE static bool zero_state_is_fixed_point(const float* step, const float* fixed) {
    return sgd_zero_is_fixed_point(step[0], step[1], fixed[0]);
  }
};

}  // namespace optim
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_SGD_MOM_H_
