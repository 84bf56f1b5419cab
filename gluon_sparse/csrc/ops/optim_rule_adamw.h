/*!
 * Adam with decoupled weight decay (Loshchilov & Hutter's AdamW), as MXNet
 * 1.9.1's `adamw_update` (contrib/adamw-inl.h, AdamWUpdate) computes it on a
 * dense gradient, operation for operation:
 *
 *   g = rescale_grad * grad
 *   g = clip(g, clip_gradient)                    (only when clip_gradient >= 0)
 *   mean = beta1 * mean + (1 - beta1) * g         (1.f - beta1 rounded in float)
 *   var  = beta2 * var  + (1 - beta2) * (g * g)
 *   weight = weight - eta * ((lr * mean) / (sqrt(var) + epsilon) + wd * weight)
 *
 * Every scalar is a C float cast to the weight's type, as AdamWParam's are
 * (parsed by dmlc::stof, the framework's default), so float32 and float64
 * results are bitwise MXNet's. The weight decay is not
 * part of the gradient: a row absent from the batch keeps mean and var
 * decaying towards 0 and its weight shrinking by eta * wd * weight.
 *
 * MXNet skips the whole update (weight, mean and var untouched) when
 * rescale_grad is 0, NaN or infinite. The step record's `skip` (1) says so, so
 * that rows absent from such a step skip it too when they are replayed (the
 * replay passes rescale_grad 1).
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_ADAMW_H_
#define GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_ADAMW_H_

#include <cmath>

#include "optim_rule.h"

namespace gluon_sparse {
namespace optim {

struct AdamwRule {
  static constexpr const char* kName = "adamw";
  static constexpr int kNumStates = 2;
  static constexpr const char* kStateNames[] = {"mean", "var"};
  static constexpr int kNumFixed = 3;
  static constexpr const char* kFixedNames[] = {"beta1", "beta2", "epsilon"};
  static constexpr float kFixedDefaults[] = {0.9f, 0.999f, 1e-8f};
  static constexpr int kNumStep = 5;
  static constexpr const char* kStepNames[] = {"lr", "eta", "wd", "clip_gradient", "skip"};
  static constexpr float kStepDefaults[] = {NAN, NAN, 0.0f, -1.0f, 0.0f};

  template <typename T>
  struct Scalars {
    T lr, eta, wd, clip, rescale_grad, beta1, one_minus_beta1, beta2, one_minus_beta2, epsilon;
    bool skip;
  };

  template <typename T>
  GS_HOST_DEVICE static Scalars<T> scalars(const float* step, const float* fixed,
                                           float rescale_grad) {
    Scalars<T> sc;
    sc.lr = static_cast<T>(step[0]);
    sc.eta = static_cast<T>(step[1]);
    sc.wd = static_cast<T>(step[2]);
    sc.clip = static_cast<T>(step[3]);
    // PrepareInputBlobs: no update at all for rescale_grad 0, NaN or inf.
    sc.skip = step[4] != 0.0f || !ops::is_finite(rescale_grad) || rescale_grad == 0.0f;
    sc.rescale_grad = static_cast<T>(rescale_grad);
    sc.beta1 = static_cast<T>(fixed[0]);
    sc.beta2 = static_cast<T>(fixed[1]);
    // scalar<DType>(1.f - param.beta1): the difference is taken in float.
    sc.one_minus_beta1 = static_cast<T>(ops::sub(1.0f, fixed[0]));
    sc.one_minus_beta2 = static_cast<T>(ops::sub(1.0f, fixed[1]));
    sc.epsilon = static_cast<T>(fixed[2]);
    return sc;
  }

  template <bool kHasGrad, typename T>
  GS_HOST_DEVICE static void apply(T grad, T* w, T* s, const Scalars<T>& sc) {
    using namespace ops;
    if (sc.skip) return;
    // A row absent from the gradient has grad 0 in MXNet's dense update.
    T g = mul(sc.rescale_grad, kHasGrad ? grad : T(0));
    if (sc.clip >= T(0)) g = ops::clip(g, sc.clip);
    const T mean = add(mul(sc.beta1, s[0]), mul(sc.one_minus_beta1, g));
    const T var = add(mul(sc.beta2, s[1]), mul(sc.one_minus_beta2, mul(g, g)));
    s[0] = mean;
    s[1] = var;
    const T adam = div(mul(sc.lr, mean), add(sqrt_rn(var), sc.epsilon));
    *w = sub(*w, mul(sc.eta, add(adam, mul(sc.wd, *w))));
  }

  /*!
   * A skipped step changes nothing. Otherwise, with wd == 0, a zero-state
   * element keeps mean = var = +0 (g = +0) and its weight moves by
   * eta * ((lr * +0) / epsilon + 0 * w) = 0 when epsilon > 0 and lr, eta are finite.
   */
  GS_HOST_DEVICE static bool zero_state_is_fixed_point(const float* step, const float* fixed) {
    using ops::is_finite;
    if (step[4] != 0.0f) return true;
    return step[2] == 0.0f && is_finite(step[0]) && is_finite(step[1]) && fixed[0] >= 0.0f &&
           fixed[0] <= 1.0f && fixed[1] >= 0.0f && fixed[1] <= 1.0f && fixed[2] > 0.0f &&
           is_finite(fixed[2]);
  }
};

}  // namespace optim
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_ADAMW_H_
