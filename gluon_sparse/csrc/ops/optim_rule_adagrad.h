/*!
 * AdaGrad: MXNet 1.9.1's dense-gradient `mx.optimizer.AdaGrad` update, which
 * Python composes from NDArray ops (grad * rescale_grad, clip, square, +=,
 * + eps, sqrt, /, * wd, + and * -lr), each rounding its result to the weight's
 * type with its scalar cast to that type first. Operation for operation:
 *
 *   g       = clip(grad * rescale_grad, clip_gradient)  (clip: clip_gradient is not None)
 *   history = history + g * g
 *   div     = g / sqrt(history + eps)
 *   w       = w + (div + w * wd) * (-lr)
 *
 * Bitwise equal to MXNet's float32 results: each scalar is the float32 that
 * MXNet's op uses (Python rounds it as MXNet parses it, see kStepNames). In
 * float64 MXNet keeps the (parsed) doubles, this rule the float32 ones: equal
 * within float rounding of the scalars (MXNet's own AdaGrad cannot run
 * float64 anyway: its create_state makes a float32 history).
 *
 * A row absent from the gradient steps with g = 0: the history does not move
 * and, with wd == 0, neither does the weight (lazy and standard AdaGrad agree);
 * with wd > 0 the weight shrinks by w * wd * lr every step, which MXNet's
 * row_sparse adagrad_update refuses to do ("does not support wd").
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_ADAGRAD_H_
#define GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_ADAGRAD_H_

#include <cmath>
#include <cstdint>

#include "optim_rule.h"

namespace gluon_sparse {
namespace optim {

struct AdaGradRule {
  static constexpr const char* kName = "adagrad";
  static constexpr int kNumStates = 1;
  static constexpr const char* kStateNames[] = {"history"};
  static constexpr int kNumFixed = 0;  // eps is a step scalar: it needs a correctly rounded parse
  static constexpr const char* kFixedNames[] = {nullptr};
  static constexpr float kFixedDefaults[] = {0.0f};
  // lr, wd, epsilon: operands of MXNet's scalar ops (a double cast to float32), which
  // optimizer/sparse_adagrad.py rounds and passes as exact float32 text; clip_gradient:
  // clip's float field. last_moving_step: a running mark for replay_row
  // (optimizer/_replay_marks.py), the last step whose record is not step_is_identity
  // (rounded up to float); NAN: unknown.
  static constexpr int kNumStep = 5;
  static constexpr const char* kStepNames[] = {"lr", "wd", "clip_gradient", "epsilon",
                                               "last_moving_step"};
  static constexpr float kStepDefaults[] = {NAN, 0.0f, -1.0f, 1e-7f, NAN};
  static constexpr Parse kStepParse[] = {Parse::kTupleElement, Parse::kTupleElement,
                                         Parse::kField, Parse::kTupleElement, Parse::kField};
  static constexpr int kLastMovingStep = 4;
  static constexpr bool kHasReplayRow = true;

  template <typename T>
  struct Scalars {
    T neg_lr;  //!< MXNet multiplies by the Python float -lr (negation is exact)
    T wd, epsilon, rescale_grad, clip;
  };

  template <typename T>
  GS_HOST_DEVICE static Scalars<T> scalars(const float* step, const float*, float rescale_grad) {
    return {static_cast<T>(-step[0]), static_cast<T>(step[1]), static_cast<T>(step[3]),
            static_cast<T>(rescale_grad), static_cast<T>(step[2])};
  }

  template <bool kHasGrad, typename T>
  GS_HOST_DEVICE static void apply(T grad, T* w, T* s, const Scalars<T>& sc) {
    using namespace ops;
    // A row absent from the gradient is a row of zeros in MXNet's dense gradient:
    // compute with it rather than short-cut, so that signs of zeros match.
    T g = mul(kHasGrad ? grad : T(0), sc.rescale_grad);
    if (sc.clip >= T(0)) g = clip(g, sc.clip);
    const T history = add(s[0], mul(g, g));
    s[0] = history;
    const T div_ = div(g, sqrt_rn(add(history, sc.epsilon)));
    *w = add(*w, mul(add(div_, mul(*w, sc.wd)), sc.neg_lr));
  }

  /*!
   * \brief A step without gradient and with wd == 0 leaves every element with
   *        history >= 0 and a finite weight unchanged (eps > 0): g = +0, history + 0 =
   *        history, div = +0 (eps > 0), div + w * 0 = +0, +0 * -lr = -+0 and
   *        w + -0 = w (w == -0 included: -0 * 0 = -0, +0 + -0 = +0, +0 * -lr = -0).
   *        lr must be finite (+0 * inf is NaN); lr <= 0 is left to the step
   *        by step replay (lr = -0 gives -lr = +0, which turns a -0 weight into +0).
   */
  GS_HOST_DEVICE static bool step_is_identity(const float* step) {
    return step[1] == 0.0f && step[0] > 0.0f && ops::is_finite(step[0]) && step[3] > 0.0f;
  }

  GS_HOST_DEVICE static bool zero_state_is_fixed_point(const float* step, const float*) {
    return step_is_identity(step);
  }

  /*!
   * \brief A cheaper exact replay of from+1..to, two cases:
   *
   * - every step of the range is an identity (wd == 0 throughout): nothing
   *   moves, whatever the history holds, so a row touched long ago costs one
   *   look at the mark of record `to` and one pass over its elements instead of
   *   a pass per step;
   * - otherwise (weight decay): a step without gradient adds g * g = +0 to the
   *   history, which leaves a history that is > 0 or +0 unchanged, and with
   *   eps > 0 its div = +0 / sqrt(history + eps) is +0. Such a step is
   *   w = w + (+0 + w * wd) * -lr, the step's own operations minus the square
   *   root and the division (kept: the +0 +, which turns a -0 product into +0).
   *   Steps whose eps is not > 0 take the full step.
   *
   * Rows with a history element that is -0 or NaN (or < 0), and rows whose
   * weight is not finite over an identity range, are left to the step-by-step
   * replay.
   */
  template <typename T>
  GS_HOST_DEVICE static bool replay_row(int64_t cols, T* w, T* const* s, const float* history,
                                        const float*, int64_t from, int64_t to) {
    for (int64_t j = 0; j < cols; ++j) {
      // history + eps > 0 needs history >= 0 (false for NaN), and -0 + +0 would
      // turn a -0 history into +0.
      const T h = s[0][j];
      if (!(h > T(0) || ops::is_positive_zero(h))) return false;
    }
    // Every step of from+1..to is an identity when the last one that is not came at or
    // before `from` (a NaN mark compares false).
    const double last_moving = history[to * kNumStep + kLastMovingStep];
    if (last_moving <= static_cast<double>(from)) {
      for (int64_t j = 0; j < cols; ++j) {
        if (!(w[j] - w[j] == T(0))) return false;  // 0 * w needs w finite
      }
      return true;
    }
#if defined(__CUDA_ARCH__)
    // One thread a row would replay cols x steps alone; the generic replay spreads
    // the row's columns over a block. Same bits.
    return false;
#else
    for (int64_t t = from + 1; t <= to; ++t) {
      const float* record = history + t * kNumStep;
      const Scalars<T> sc = scalars<T>(record, nullptr, 1.0f);
      if (record[3] > 0.0f) {  // eps > 0 (false for NaN): div is +0
        for (int64_t j = 0; j < cols; ++j) {
          w[j] = ops::add(w[j], ops::mul(ops::add(T(0), ops::mul(w[j], sc.wd)), sc.neg_lr));
        }
      } else {
        for (int64_t j = 0; j < cols; ++j) apply<false>(T(0), w + j, s[0] + j, sc);
      }
    }
    return true;
#endif
  }
};

}  // namespace optim
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_ADAGRAD_H_
