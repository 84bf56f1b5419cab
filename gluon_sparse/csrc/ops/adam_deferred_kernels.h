/*!
 * Replay of the steps a row skipped under deferred standard Adam.
 *
 * Deferred Adam applies the standard (non-lazy) Adam step only to the rows of
 * each gradient. Every other row remembers the step it is up to date with
 * (`last_step`); the scalars of every step are kept in a history, one record a
 * step. Before anything reads a row, the steps it missed are replayed here,
 * element by element, with exactly the arithmetic of the eager operator
 * (adam_kernels.h's `decay_grad` and `apply`): the result is bitwise equal to
 * what the eager update would have left in memory.
 *
 * Shortcut: a row whose mean and var are all +0 is a fixed point of a step
 * with wd == 0 when its weights are finite and epsilon > 0: g = w * 0 = +-0,
 * m = b1 * (+0) + (1 - b1) * (+-0) = +0, v = +0 and w - (lr * +0) / eps = w.
 * Such steps are skipped without changing a bit (signs of zeros included).
 *
 * There is no shortcut for rows whose mean "underflowed": at beta1 = 0.9 it
 * never reaches zero. A mean of k <= 4 denormal units rounds 0.9 * k back to k,
 * so it settles at +-5.6e-45 (float32) and every replayed step stays a full one.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_ADAM_DEFERRED_KERNELS_H_
#define GLUON_SPARSE_CSRC_OPS_ADAM_DEFERRED_KERNELS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "adam_kernels.h"
#include "frozen_weight.h"
#include "geometric_decay.h"

namespace gluon_sparse {
namespace adam {
namespace deferred {

/*!
 * \brief The per-step scalars kept in the history, as the C floats the eager
 *        operator parses (so that casting them to T gives the same values).
 */
struct StepRecord {
  float lr;             //!< learning rate with Adam's bias correction folded in
  float wd;
  float clip_gradient;  //!< negative: no clipping
};
static_assert(sizeof(StepRecord) == 3 * sizeof(float), "the history is a (capacity, 3) float32 array");

/*! \brief The scalars that do not change from step to step. */
struct FixedScalars {
  float beta1;
  float beta2;
  float epsilon;
};

/*! \brief The eager operator's scalars of one replayed step (no gradient, so rescale_grad is moot). */
template <typename T>
GS_HOST_DEVICE AdamScalars<T> step_scalars(const StepRecord& r, const FixedScalars& f) {
  return make_scalars<T>(r.lr, f.beta1, f.beta2, f.epsilon, r.wd, 1.0f, r.clip_gradient);
}

using ops::is_positive_zero;

/*! \brief Whether the row's mean and var are all +0 (the fixed point of steps with wd == 0). */
template <typename T>
GS_HOST_DEVICE bool state_is_zero(int64_t cols, const T* mean, const T* var) {
  for (int64_t j = 0; j < cols; ++j) {
    if (!is_positive_zero(mean[j]) || !is_positive_zero(var[j])) return false;
  }
  return true;
}

/*! \brief Whether every weight of the row is finite (w - w is 0 exactly for finite w). */
template <typename T>
inline bool weights_finite(int64_t cols, const T* weight) {
  for (int64_t j = 0; j < cols; ++j) {
    if (!(weight[j] - weight[j] == T(0))) return false;
  }
  return true;
}

/*!
 * \brief Whether replaying steps (from, to] would leave the row unchanged: its
 *        state is zero and no step in the range has weight decay.
 */
template <typename T>
GS_HOST_DEVICE bool is_fixed_point(int64_t cols, const T* mean, const T* var,
                                   const StepRecord* history, int64_t from, int64_t to) {
  for (int64_t s = from + 1; s <= to; ++s) {
    if (history[s].wd != 0.0f) return false;
  }
  return state_is_zero(cols, mean, var);
}

/*!
 * \brief What a replay needs to know about the history up to its last step,
 *        gathered once per call (or kept up to date by the registry).
 */
struct ReplayHints {
  int64_t scanned = 0;       //!< records 1..scanned were looked at
  int64_t last_wd = 0;       //!< last scanned step with wd != 0 (0: none)
  int64_t last_unsafe = 0;   //!< last scanned step with wd != 0 or a non-finite lr
  float max_lr = 0.0f;       //!< largest |lr| of the scanned steps
};

/*! \brief Extend `hints` over records scanned + 1 .. to (amortised O(1) a step). */
inline void extend_hints(const StepRecord* history, int64_t to, ReplayHints* hints) {
  for (int64_t s = hints->scanned + 1; s <= to; ++s) {
    const StepRecord& r = history[s];
    if (r.wd != 0.0f) hints->last_wd = s;
    const float lr = r.lr < 0.0f ? -r.lr : r.lr;
    if (r.wd != 0.0f || !(lr <= 3.0e38f)) {
      hints->last_unsafe = s;
    } else if (lr > hints->max_lr) {
      hints->max_lr = lr;
    }
  }
  if (to > hints->scanned) hints->scanned = to;
}

/*! \brief The hints of steps 1..to, from scratch (O(to)). */
inline ReplayHints scan_history(const StepRecord* history, int64_t to) {
  ReplayHints hints;
  extend_hints(history, to, &hints);
  return hints;
}

#if !defined(__CUDACC__)
// ------------------------------------------------------------- fast replay
// Steps without gradient and with wd == 0 have g = w * 0 = +-0, so for a row
// they are:  m = fl(b1 * m),  v = fl(b2 * v),  w -= fl(lr * m) / fl(sqrt(v) + eps)
// (adding a +-0 to a non-zero value changes nothing). Once no step to come can
// move w by a single bit, the rest of the replay is m and v alone, two
// multiplications an element-step, instead of a full Adam step with a sqrt and
// a division (geometric_decay.h: vector multiplies held in registers, and m's
// decay through the denormal range, 30-45x slower on x86, on the integer grid
// of denormal units). Bitwise equal to the full replay (tests/test_grain.py
// and tests/test_deferred_adam.py compare them); float32 only (float64 keeps
// the full replay).
//
// When no step can move w: the step's update fl(fl(lr m) / fl(fl(sqrt v) + eps))
// is at most (1 + 4u) |lr| |m| / (sqrt(v) + eps), u = 2^-24, plus the rounding
// of lr m into the denormal range (at most 2^-150, taken as 2^-148 here) over
// the denominator: frozen_weight.h's bound for this form (steps_until_frozen_sqrt)
// with coef = the largest |lr| of the steps to replay.

/*!
 * \brief 0 if no step of the n to come can change w (see above); otherwise
 *        the number of full steps to run before asking again (>= 1).
 */
inline int64_t steps_until_frozen(int64_t cols, const float* w, const float* m, const float* v,
                                  const FixedScalars& f, float max_lr, int64_t n) {
  return ops::steps_until_frozen_sqrt(cols, w, m, v, f.beta1, f.beta2, f.epsilon, max_lr,
                                      2.0 * 0x1p-149, n);
}

/*! \brief Steps s .. to of a frozen row: m and v decay, w stays (see above). */
inline void replay_frozen(int64_t cols, const float* w, float* m, float* v,
                          const StepRecord* history, const FixedScalars& f, int64_t s,
                          int64_t to) {
  const float b1 = f.beta1, b2 = f.beta2;
  const float omb1 = 1.0f - b1;
  // Zeros follow the exact step (their sign depends on w's and wd's): +0 is a
  // fixed point, reached at once unless w < 0 (then -0 stays while wd is +0).
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t t = s; t <= to && m[j] == 0.0f; ++t) {
      m[j] = b1 * m[j] + omb1 * (w[j] * history[t].wd);
      if (!std::signbit(m[j])) break;  // +0: b1 * +0 + (+-0) = +0 at every later step
    }
  }
  ops::decay_geometric(cols, m, b1, to - s + 1);
  ops::decay_geometric_adding_zero(cols, v, b2, to - s + 1);  // v's gradient term is +0
}
#endif  // !__CUDACC__

/*!
 * \brief Steps first .. last of one row, each a full step without gradient
 *        (update_row_without_grad with that step's scalars), over lanes of
 *        type V (a host vector type, or T itself without vector extensions).
 */
template <typename T, typename V = T>
inline void full_steps_in_lanes(int64_t cols, T* weight, T* mean, T* var,
                                const StepRecord* history, const FixedScalars& fixed,
                                int64_t first, int64_t last) {
  for (int64_t s = first; s <= last; ++s) {
    const AdamScalars<T> scalars = step_scalars<T>(history[s], fixed);
    if (history[s].clip_gradient >= 0.0f) {
      update_row_without_grad<true, T, V>(cols, weight, mean, var, scalars);
    } else {
      update_row_without_grad<false, T, V>(cols, weight, mean, var, scalars);
    }
  }
}

#if !defined(__CUDACC__)
/*!
 * \brief full_steps_in_lanes, the replay's hot loop (sqrt and division bound),
 *        compiled for baseline x86-64 and for AVX2 (twice the lanes a division)
 *        in adam_replay_steps.cc and picked at run time (host_simd.h); both
 *        bitwise equal to the scalar step.
 */
template <typename T>
void replay_full_steps(int64_t cols, T* weight, T* mean, T* var, const StepRecord* history,
                       const FixedScalars& fixed, int64_t first, int64_t last);

/*!
 * \brief update_row_with_grad (the step of a row in the gradient) on the SIMD
 *        build host_simd_path() picks: the deferred update's rows, 10-15% faster
 *        with AVX2 than with the baseline's 4 lanes (adam_replay_steps.cc).
 */
template <bool kClip, typename T>
void update_row_with_grad_simd(int64_t cols, T* weight, T* mean, T* var, const T* grad,
                               const AdamScalars<T>& s);
#endif

/*!
 * \brief Bring one row (cols contiguous elements) from step `from` to step `to`
 *        by replaying steps from + 1 .. to without gradient (host loop; the
 *        CUDA kernel spreads the columns over threads instead).
 *
 * `hints` must cover at least steps 1..to (scan_history / extend_hints); they
 * let a zero row skip a range without weight decay at once, and a float32 row
 * switch to the frozen-weight replay above.
 */
template <typename T>
inline void replay_row(int64_t cols, T* __restrict__ weight, T* __restrict__ mean,
                       T* __restrict__ var, const StepRecord* history, const FixedScalars& fixed,
                       int64_t from, int64_t to, const ReplayHints& hints) {
  int64_t s = from + 1;
  // The fixed point divides +0 by sqrt(0) + epsilon, which must be positive.
  if (fixed.epsilon > 0.0f && state_is_zero(cols, mean, var) && weights_finite(cols, weight)) {
    if (hints.last_wd <= from) return;  // every step of the range is a no-op
    while (s <= to && history[s].wd == 0.0f) ++s;  // fixed points until the first decay
  }
#if !defined(__CUDACC__)
  constexpr int64_t kMinFrozenSteps = 16;  // below this a check costs what it saves
  const bool may_freeze = sizeof(T) == sizeof(float) && fixed.beta1 > 0.5f &&
                          fixed.beta1 < 1.0f && fixed.beta2 > 0.5f && fixed.beta2 < 1.0f &&
                          fixed.epsilon > 0.0f;
  while (s <= to) {
    int64_t last = to;
    if (may_freeze && s <= hints.last_unsafe) {
      last = std::min(to, hints.last_unsafe);  // no freezing before the last unsafe step
    } else if (may_freeze && to - s + 1 >= kMinFrozenSteps) {
      float* w = reinterpret_cast<float*>(weight);
      float* m = reinterpret_cast<float*>(mean);
      float* v = reinterpret_cast<float*>(var);
      const int64_t wait = steps_until_frozen(cols, w, m, v, fixed, hints.max_lr, to - s + 1);
      if (wait == 0) {
        replay_frozen(cols, w, m, v, history, fixed, s, to);
        return;
      }
      last = std::min(to, s + wait - 1);  // full steps until it may be frozen
    }
    replay_full_steps<T>(cols, weight, mean, var, history, fixed, s, last);
    s = last + 1;
  }
#else
  full_steps_in_lanes<T>(cols, weight, mean, var, history, fixed, s, to);
#endif
}

}  // namespace deferred
}  // namespace adam
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_ADAM_DEFERRED_KERNELS_H_
