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
// When no step can move w. With u = 2^-24, a = b1 (1 + u) and c^2 = b2 (1 - u),
// j steps ahead each product has rounded by at most u (or 2^-150 absolutely
// in the denormal range), so
//     |m_j| <= a^j |m| + E,  E = 2^-150 / (1 - a),  |m_j| <= |m|,
//     v_j >= c^2j v while v_j is normal,  v_j >= c^2j v - j 2^-149 always,
// and the step's update fl(fl(lr m_j) / fl(fl(sqrt v_j) + eps)) is at most
//     (1 + 4u) lr |m_j| / (sqrt(v_j) + eps) + slack (the denormal roundings).
// a^j / (c^j sqrt(v) + eps) does not grow with j when a < c (b1^2 < b2, a
// little), so then the next step bounds every later one:
//     D = max_lr (|m| (1 + 4u) / (sqrt(v) + eps) + E / eps) + slack,
// or, when v may become denormal within the n steps or a >= c, the step with
// the least v does:  D = max_lr |m| (1 + 4u) / (sqrt(v_min) + eps) + slack,
// v_min = max(0, c^2n v - n 2^-149). w stays while D is below half its ulp (a
// quarter if w is a power of two, whose lower neighbour is half an ulp away).
// The test needs no square root or division by an element:
//     (max_lr |m| (1 + 1e-5))^2 < T^2 (v + eps^2),  T = threshold - the rest of D,
// since (sqrt(v) + eps)^2 >= v + eps^2. The first element that fails it stops
// the test, and its quotient of the two sides, r^2, says how many full steps
// to run before asking again: r^2 shrinks by b1^2 / b2 a step while sqrt(v)
// outweighs eps (faster when not).

/*!
 * \brief 0 if no step of the n to come can change w (see above); otherwise
 *        the number of full steps to run before asking again (>= 1).
 */
inline int64_t steps_until_frozen(int64_t cols, const float* w, const float* m, const float* v,
                                  const FixedScalars& f, float max_lr, int64_t n) {
  constexpr int64_t kRetry = 8;  // full steps before asking again when r^2 cannot say
  constexpr double u = 0x1p-24;
  const double b1 = f.beta1, b2 = f.beta2, eps = f.epsilon, lr = max_lr;
  const double a = b1 * (1.0 + u), c2 = b2 * (1.0 - u);
  const bool next_bounds_all = a * a < c2;
  const double decay_n = std::pow(c2, static_cast<double>(n));
  const double v_normal = 0x1p-126 / decay_n;  // from here v stays normal for n steps
  const double v_slack = static_cast<double>(n) * 0x1p-149;
  // E / eps, and the rounding of lr * m and of the quotient into the denormal range.
  const double d_slack = next_bounds_all ? lr * 0x1p-150 / ((1.0 - a) * eps) : 0.0;
  const double slack = d_slack + 2.0 * 0x1p-149 / (eps * (1.0 - 1e-6)) + 0x1p-149;
  const double eps2 = eps * eps;
  for (int64_t j = 0; j < cols; ++j) {
    const double half_ulp = ops::unmoved_bound(w[j]);
    if (half_ulp != half_ulp) return n + 1;  // inf or NaN: never frozen
    if (half_ulp == 0.0) return kRetry;      // zero or denormal weight: may still move away
    const double mj = std::fabs(static_cast<double>(m[j])), vj = v[j];
    if (!(mj <= 3.5e38) || !(vj >= 0.0 && vj <= 3.5e38)) return n + 1;
    const double t = half_ulp - slack;
    if (!(t > 0.0)) return kRetry;
    const double num = lr * mj * (1.0 + 1e-5);
    const double v_least = next_bounds_all && vj >= v_normal
                               ? vj : std::max(0.0, vj * decay_n - v_slack);
    const double lhs = num * num, rhs = t * t * (v_least + eps2);
    if (lhs < rhs) continue;
    if (!next_bounds_all) return kRetry;
    const double steps = std::log(lhs / rhs) / std::log(b2 / (b1 * b1));
    return steps < static_cast<double>(n) ? static_cast<int64_t>(steps) + 1 : n + 1;
  }
  return 0;
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
    if (v[j] == 0.0f) v[j] = 0.0f;  // -0 * b2 + +0 = +0; +0 is a fixed point
  }
  ops::decay_geometric(cols, m, b1, to - s + 1);
  ops::decay_geometric(cols, v, b2, to - s + 1);
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
