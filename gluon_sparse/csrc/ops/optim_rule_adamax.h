/*!
 * AdaMax: MXNet 1.9.1's `mx.optimizer.Adamax.update` on a dense gradient, a
 * Python composition of NDArray operators, reproduced operator by operator:
 *
 *   g = grad * rescale_grad + weight * wd      (_mul_scalar, _mul_scalar, add)
 *   g = clip(g, -clip_gradient, clip_gradient) (only when clip_gradient is set)
 *   m = m * beta1 + g * (1 - beta1)            (m_t[:] *= beta1; m_t[:] += ...)
 *   u = maximum(u * beta2, abs(g))             (NaN-propagating as MXNet's maximum)
 *   weight = weight - (m * lr) / (u + epsilon)
 *
 * where lr already carries AdaMax's bias correction lr / (1 - beta1^t) and
 * every scalar is a C float: _mul_scalar casts its double scalar to the
 * weight's type, which for float32 weights is the float the op receives here
 * (for float64 weights MXNet keeps the double: results then agree within
 * float32 rounding of the scalars, not bitwise). `1 - beta1` is rounded as
 * Python computes it (in double, then to float), so it is a fixed scalar of
 * its own rather than derived from beta1 here. The step scalars are parsed
 * correctly rounded (kStepParse), as that double-to-float cast gives; fixed
 * scalars and rescale_grad as the framework parses every float field
 * (dmlc::stof, which agrees for values in [1e-4, 1) and short decimals).
 *
 * epsilon is gluon-sparse's addition (default 0): MXNet divides by u alone,
 * so an element whose gradient has always been 0 (a row never in any batch
 * with wd == 0, or a zero weight) gets 0 / 0 = NaN, in MXNet as here. With
 * epsilon 0, u + 0 == u bitwise (u is never -0), so MXNet's results are kept
 * bit for bit; epsilon > 0 is Keras's form m / (u + epsilon).
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_ADAMAX_H_
#define GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_ADAMAX_H_

#include <cmath>

#include "frozen_replay.h"
#include "optim_rule.h"
#include "optim_rule_adamax_replay.h"

namespace gluon_sparse {
namespace optim {

/*! \brief |x| as mshadow_op::abs (fabs: clears the sign bit, -0 -> +0). */
template <typename T>
GS_HOST_DEVICE T adamax_abs(T x) {
#if defined(__CUDA_ARCH__)
  return fabs(x);
#else
  return std::fabs(x);
#endif
}

/*! \brief MXNet's `maximum` (mshadow_op::maximum): a NaN first operand wins, else a > b ? a : b. */
template <typename T>
GS_HOST_DEVICE T adamax_maximum(T a, T b) {
  return a != a ? a : (a > b ? a : b);
}

/*!
 * \brief The gradient MXNet's Python optimizers compose: grad * rescale_grad +
 *        weight * wd, then clip (shared by the adamax and nadam rules).
 *
 * clip >= 0 clips (MXNet clips whenever clip_gradient is not None; the
 * Python side passes -1 for None); the `clip` operator's float bounds cast to T.
 */
template <bool kHasGrad, typename T>
GS_HOST_DEVICE T adamax_composed_grad(T grad, T w, T rescale_grad, T wd, T clip) {
  using namespace ops;
  // A row absent from the gradient has grad 0 in MXNet's dense update.
  T g = add(mul(kHasGrad ? grad : T(0), rescale_grad), mul(w, wd));
  if (clip >= T(0)) g = ops::clip(g, clip);
  return g;
}

/*!
 * The replay hook comes from frozen_replay::Hook (frozen_replay.h,
 * optim_rule_adamax_replay.h): float32 rows on the host stop full steps once no step
 * to come can move a weight; elsewhere the generic replay runs.
 */
struct AdamaxRule : frozen_replay::Hook<adamax_replay::Policy, AdamaxRule> {
  static constexpr const char* kName = "adamax";
  static constexpr int kNumStates = 2;
  static constexpr const char* kStateNames[] = {"mean", "max_norm"};
  static constexpr int kNumFixed = 4;
  static constexpr const char* kFixedNames[] = {"beta1", "one_minus_beta1", "beta2", "epsilon"};
  static constexpr float kFixedDefaults[] = {0.9f, NAN, 0.999f, 0.0f};
  static constexpr int kNumStep = 3;
  static constexpr const char* kStepNames[] = {"lr", "wd", "clip_gradient"};
  static constexpr float kStepDefaults[] = {NAN, 0.0f, -1.0f};
  // _mul_scalar's double parameter cast to float: correctly rounded, not dmlc::stof.
  static constexpr Parse kStepParse[] = {Parse::kTupleElement, Parse::kTupleElement,
                                         Parse::kTupleElement};

  template <typename T>
  struct Scalars {
    T lr, wd, clip, rescale_grad, beta1, one_minus_beta1, beta2, epsilon;
  };

  template <typename T>
  GS_HOST_DEVICE static Scalars<T> scalars(const float* step, const float* fixed,
                                           float rescale_grad) {
    return {static_cast<T>(step[0]),  static_cast<T>(step[1]),  static_cast<T>(step[2]),
            static_cast<T>(rescale_grad), static_cast<T>(fixed[0]), static_cast<T>(fixed[1]),
            static_cast<T>(fixed[2]), static_cast<T>(fixed[3])};
  }

  template <bool kHasGrad, typename T>
  GS_HOST_DEVICE static void apply(T grad, T* w, T* s, const Scalars<T>& sc) {
    using namespace ops;
    const T g = adamax_composed_grad<kHasGrad>(grad, *w, sc.rescale_grad, sc.wd, sc.clip);
    const T m = add(mul(s[0], sc.beta1), mul(g, sc.one_minus_beta1));
    const T u = adamax_maximum(mul(s[1], sc.beta2), adamax_abs(g));
    s[0] = m;
    s[1] = u;
    *w = sub(*w, div(mul(m, sc.lr), add(u, sc.epsilon)));
  }

  /*!
   * With wd == 0 a zero-state element sees g = +0, so m and u stay +0 and the
   * weight moves by (+0 * lr) / epsilon = 0; with epsilon == 0 that is 0 / 0
   * (NaN, as in MXNet), so no step is a fixed point then.
   */
  GS_HOST_DEVICE static bool zero_state_is_fixed_point(const float* step, const float* fixed) {
    const float lr = step[0], wd = step[1];
    const float beta1 = fixed[0], one_minus_beta1 = fixed[1], beta2 = fixed[2], eps = fixed[3];
    return wd == 0.0f && ops::is_finite(lr) && eps > 0.0f && ops::is_finite(eps) &&
           beta1 >= 0.0f && ops::is_finite(beta1) && one_minus_beta1 >= 0.0f &&
           ops::is_finite(one_minus_beta1) && beta2 >= 0.0f && ops::is_finite(beta2);
  }
};

}  // namespace optim
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_ADAMAX_H_
