/*!
 * FTRL-Proximal: MXNet 1.9.1's dense-gradient `mx.optimizer.Ftrl` update
 * (ftrl_update, FtrlUpdateKernel), operation for operation:
 *
 *   g = clip(grad * rescale_grad, clip_gradient)    (clip only when clip_gradient >= 0)
 *   z = z + (g - ((sqrt(n + g * g) - sqrt(n)) * w) / lr)
 *   n = n + g * g
 *   w = ((sign(z) * lamda1 - z) / ((beta + sqrt(n)) / lr + wd)) * (|z| > lamda1)
 *
 * Bitwise equal to MXNet on CPU in float32 and float64 (its FtrlParam holds C
 * floats, parsed by dmlc as the framework parses ours, that the kernel casts to
 * the weight's type, as scalars() does).
 *
 * A row absent from the gradient steps with g = 0: z and n do not move, but w
 * is recomputed from (z, n) with this step's lr and wd. So the first standard
 * step sets a never-touched row (z = n = 0) to 0, losing its initial value
 * (lazy FTRL keeps it), and under an lr schedule w follows lr alone. The
 * replay of any number of such steps is therefore O(1) per element: the first
 * missed step (which may still move z and n, e.g. a weight set by hand), then
 * the last one (replay_row below).
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_FTRL_H_
#define GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_FTRL_H_

#include <cmath>
#include <cstdint>

#include "optim_rule.h"

namespace gluon_sparse {
namespace optim {

struct FtrlRule {
  static constexpr const char* kName = "ftrl";
  static constexpr int kNumStates = 2;
  static constexpr const char* kStateNames[] = {"z", "n"};
  static constexpr int kNumFixed = 2;
  static constexpr const char* kFixedNames[] = {"lamda1", "beta"};
  static constexpr float kFixedDefaults[] = {0.01f, 1.0f};
  // lr, wd, clip_gradient: FtrlParam's float fields (parsed as MXNet parses them).
  // max_lr and last_odd_step are running marks for replay_row (optimizer/_replay_marks.py):
  // a bound on every lr so far and the last step with lr <= 0, lr or wd not finite, or
  // wd < 0 (rounded up to float). Defaults (NAN) make replay_row fall back on the
  // step-by-step replay.
  static constexpr int kNumStep = 5;
  static constexpr const char* kStepNames[] = {"lr", "wd", "clip_gradient", "max_lr",
                                               "last_odd_step"};
  static constexpr float kStepDefaults[] = {NAN, 0.0f, -1.0f, NAN, NAN};
  static constexpr int kMaxLr = 3, kLastOddStep = 4;
  static constexpr bool kHasReplayRow = true;

  template <typename T>
  struct Scalars {
    T lr, wd, lamda1, beta, rescale_grad, clip;
  };

  template <typename T>
  GS_HOST_DEVICE static Scalars<T> scalars(const float* step, const float* fixed,
                                           float rescale_grad) {
    return {static_cast<T>(step[0]), static_cast<T>(step[1]), static_cast<T>(fixed[0]),
            static_cast<T>(fixed[1]), static_cast<T>(rescale_grad), static_cast<T>(step[2])};
  }

  /*! \brief mshadow_op::sign: -1, +1, or 0 (for +-0 and NaN). */
  template <typename T>
  GS_HOST_DEVICE static T sign(T x) {
    return x < T(0) ? T(-1) : (x > T(0) ? T(1) : T(0));
  }

  /*! \brief The weight FTRL derives from (z, n): MXNet's KERNEL_ASSIGN expression. */
  template <typename T>
  GS_HOST_DEVICE static T weight_of(T z, T n, const Scalars<T>& sc) {
    using namespace ops;
    const T keep = (z > sc.lamda1 || -z > sc.lamda1) ? T(1) : T(0);  // gt(abs(z), lamda1)
    return mul(div(sub(mul(sign(z), sc.lamda1), z),
                   add(div(add(sc.beta, sqrt_rn(n)), sc.lr), sc.wd)),
               keep);
  }

  template <bool kHasGrad, typename T>
  GS_HOST_DEVICE static void apply(T grad, T* w, T* s, const Scalars<T>& sc) {
    using namespace ops;
    // A row absent from the gradient is a row of zeros in MXNet's dense gradient.
    T g = mul(kHasGrad ? grad : T(0), sc.rescale_grad);
    if (sc.clip >= T(0)) g = clip(g, sc.clip);
    const T gg = mul(g, g);
    const T n = s[1];
    const T z = add(s[0], sub(g, div(mul(sub(sqrt_rn(add(n, gg)), sqrt_rn(n)), *w), sc.lr)));
    s[0] = z;
    s[1] = add(n, gg);
    *w = weight_of(z, s[1], sc);
  }

  /*! \brief Never: a zero-state element's weight is set to 0 by the step (unless already +0). */
  GS_HOST_DEVICE static bool zero_state_is_fixed_point(const float*, const float*) {
    return false;
  }

  /*!
   * \brief Steps from+1..to without gradient as two: from+1, then `to`.
   *
   * After the first step z is not -0 and n not -0 (x + (+0) never is); if they
   * are finite, a later step k computes g - ((sqrt(n) - sqrt(n)) * w) / lr_k =
   * +0 - (+-0) = +0 whenever the weight w_{k-1} is finite and lr_k is neither
   * 0 nor NaN, so z and n stay put and w_k depends on (z, n, lr_k, wd_k) alone:
   * only the last step's w survives. Taken only when that provably holds:
   * every lr in the range finite and > 0, every wd finite and >= 0, and, per
   * element, |sign(z) * lamda1 - z| / ((beta + sqrt(n)) / max_lr) finite, which
   * bounds every intermediate |w_k| (the denominator only grows with wd >= 0 and
   * smaller lr, and rounding is monotonic). Otherwise the step-by-step replay.
   * The range conditions are read from the marks of record `to` in O(1).
   */
  template <typename T>
  GS_HOST_DEVICE static bool replay_row(int64_t cols, T* w, T* const* s, const float* history,
                                        const float* fixed, int64_t from, int64_t to) {
    using namespace ops;
    if (to - from < 2) return false;
    const float* last_record = history + to * kNumStep;
    // No odd step in from+1..to (a NaN mark compares false), and a bound on their lr.
    if (!(static_cast<double>(last_record[kLastOddStep]) <= static_cast<double>(from))) {
      return false;
    }
    const float max_lr = last_record[kMaxLr];
    if (!(max_lr > 0.0f && is_finite(max_lr))) return false;
    const Scalars<T> first = scalars<T>(history + (from + 1) * kNumStep, fixed, 1.0f);
    const Scalars<T> last = scalars<T>(history + to * kNumStep, fixed, 1.0f);
    const T lr_bound = static_cast<T>(max_lr);
    for (int64_t j = 0; j < cols; ++j) {  // check every element before writing any
      T w1 = w[j], st[2] = {s[0][j], s[1][j]};
      apply<false>(T(0), &w1, st, first);
      const T num = sub(mul(sign(st[0]), first.lamda1), st[0]);
      const T denominator_min = div(add(first.beta, sqrt_rn(st[1])), lr_bound);
      const T bound = div(num < T(0) ? -num : num, denominator_min);
      if (!(st[0] - st[0] == T(0)) || !(st[1] - st[1] == T(0)) || !(denominator_min > T(0)) ||
          !(bound - bound == T(0))) {
        return false;
      }
    }
    for (int64_t j = 0; j < cols; ++j) {
      T st[2] = {s[0][j], s[1][j]};
      apply<false>(T(0), w + j, st, first);
      apply<false>(T(0), w + j, st, last);
      s[0][j] = st[0];
      s[1][j] = st[1];
    }
    return true;
  }
};

}  // namespace optim
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_FTRL_H_
