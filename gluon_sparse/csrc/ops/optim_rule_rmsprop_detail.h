/*!
 * What RMSProp's two rules (optim_rule_rmsprop.h) share: their scalars, the
 * gradient and weight clipping as MXNet's kernels write them, and
 * RMSProp's cheaper exact replay of the steps a row missed (the rules'
 * optional `replay_row` hook, optim_rule.h), bitwise equal to replaying them
 * one by one with apply<false>.
 *
 * A step without gradient whose record has wd == 0 and a finite lr of positive
 * sign ("a decay step") gives every finite weight g = 1 * 0 + (+-0) * w = +0.
 * Then lr * (+0 / sqrt(x)) is +0 whenever x > 0, and the weight update is
 * w - (+0) = w (plain) or w + delta with delta = gamma2 * delta - (+0)
 * (centered): the replay keeps every operation of the step except the square
 * root and the division, which it does only where x <= 0 or NaN gives them a
 * result other than +0. Elements with a non-finite weight take the full step.
 *
 * Steps that are not decay steps (wd != 0) go, a run at a time, to the
 * framework's blocked replay (optim_rows.h), which vectorises them.
 *
 * The real saving: a decay step is a function of the row alone, the same for
 * every lr that qualifies. Once one decay step leaves the row bitwise
 * unchanged (n and g at the fixed points of x -> gamma1 * x, which float
 * rounding reaches: at gamma1 = 0.9 in float32 a few denormal units after
 * ~900 steps; delta at its own and too small to move w), every following
 * decay step does too and is skipped. A row's replay costs
 * O(min(steps missed, steps to settle)) element-steps instead of O(steps).
 * Host only: in CUDA the hook declines and the generic replay runs.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_RMSPROP_DETAIL_H_
#define GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_RMSPROP_DETAIL_H_

#include <cstdint>

#include "optim_rows.h"  // replay_steps: the blocked replay of full steps
#include "optim_rule.h"
#if !defined(__CUDACC__)
#include <type_traits>

#include "geometric_decay.h"
#endif

namespace gluon_sparse {
namespace optim {
namespace rmsprop_detail {

/*! \brief The scalars shared by both forms, in the weight's type. */
template <typename T>
struct Scalars {
  T lr, wd, rescale_grad, clip_gradient, gamma1, one_minus_gamma1, gamma2, epsilon, clip_weights;
};

/*! \brief The step's gradient as MXNet's kernels form it (grad is 0 for a row absent). */
template <bool kHasGrad, typename T>
GS_HOST_DEVICE T rescaled_grad(T grad, T w, const Scalars<T>& s) {
  const T g = kHasGrad ? grad : T(0);
  T r = ops::add(ops::mul(s.rescale_grad, g), ops::mul(s.wd, w));
  if (s.clip_gradient >= T(0)) r = ops::clip(r, s.clip_gradient);
  return r;
}

/*! \brief w clipped to [-clip_weights, clip_weights] when clip_weights >= 0. */
template <typename T>
GS_HOST_DEVICE T clip_weight(T w, const Scalars<T>& s) {
  return s.clip_weights >= T(0) ? ops::clip(w, s.clip_weights) : w;
}


/*! \brief Whether x is finite and not of negative sign (+0 included, -0 not). */
GS_HOST_DEVICE bool finite_non_negative(float x) {
  return x == 0.0f ? ops::is_positive_zero(x) : (x > 0.0f && ops::is_finite(x));
}

/*! \brief Whether a and b have the same bits (NaN never: a NaN row does not settle). */
template <typename T>
GS_HOST_DEVICE bool same(T a, T b) {
  return a == b && (a != T(0) || ops::is_positive_zero(a) == ops::is_positive_zero(b));
}

/*! \brief Whether a step without gradient with this record is a decay step (see above). */
GS_HOST_DEVICE bool is_decay_step(const float* record) {
  return record[1] == 0.0f && finite_non_negative(record[0]);
}

/*! \brief One element's full step without gradient (the generic replay's arithmetic). */
template <class Rule, typename T>
GS_HOST_DEVICE void full_step(T* w, T* const* s, int64_t j, const typename Rule::template
                              Scalars<T>& sc) {
  T state[Rule::kNumStates];
  for (int k = 0; k < Rule::kNumStates; ++k) state[k] = s[k][j];
  Rule::template apply<false>(T(0), w + j, state, sc);
  for (int k = 0; k < Rule::kNumStates; ++k) s[k][j] = state[k];
}

/*!
 * \brief Plain RMSProp's decay step of one element with a finite weight;
 *        returns whether it changed a bit.
 */
template <class Rule, typename T>
GS_HOST_DEVICE bool decay_plain(T* w, T* n, const typename Rule::template Scalars<T>& sc) {
  using namespace ops;
  const T zero_term = mul(sc.one_minus_gamma1, mul(T(0), T(0)));  // (1 - gamma1) * (g * g)
  const T next = add(zero_term, mul(sc.gamma1, *n));
  const T x = add(next, sc.epsilon);
  T weight = *w;
  if (!(x > T(0))) weight = sub(weight, mul(sc.lr, div(T(0), sqrt_rn(x))));
  weight = clip_weight(weight, sc);
  const bool changed = !same(next, *n) || !same(weight, *w);
  *n = next;
  *w = weight;
  return changed;
}

/*! \brief Centered RMSProp's decay step of one element with a finite weight. */
template <class Rule, typename T>
GS_HOST_DEVICE bool decay_centered(T* w, T* n, T* gm, T* delta,
                                   const typename Rule::template Scalars<T>& sc) {
  using namespace ops;
  const T g_term = mul(sc.one_minus_gamma1, T(0));  // (1 - gamma1) * g
  const T next_n = add(mul(g_term, T(0)), mul(sc.gamma1, *n));
  const T next_gm = add(g_term, mul(sc.gamma1, *gm));
  const T x = add(sub(next_n, mul(next_gm, next_gm)), sc.epsilon);
  const T step = x > T(0) ? T(0) : div(mul(sc.lr, T(0)), sqrt_rn(x));
  const T next_delta = sub(mul(sc.gamma2, *delta), step);
  const T weight = clip_weight(add(*w, next_delta), sc);
  const bool changed = !same(next_n, *n) || !same(next_gm, *gm) || !same(next_delta, *delta) ||
                       !same(weight, *w);
  *n = next_n;
  *gm = next_gm;
  *delta = next_delta;
  *w = weight;
  return changed;
}

#if !defined(__CUDACC__)
/*!
 * \brief Whether plain RMSProp's decay steps leave this float32 row's weights
 *        alone and only take n to fl(gamma1 * n), step after step.
 *
 * A decay step makes next = (1 - gamma1) * (+0 * +0) + gamma1 * n = fl(gamma1 * n)
 * (+0 for n = -0, with 0 < gamma1 < 1) and x = next + epsilon; with epsilon > 0
 * and n >= 0 (not NaN) x > 0, so the weight is untouched, and with
 * clip_weights < 0 nothing clips it.
 * Then a run of k decay steps is n = fl(gamma1 * n) k times (after -0 becomes
 * +0), which geometric_decay.cc does a vector at a time, setting aside the
 * lanes at their fixed point: bitwise decay_plain k times, without its
 * per-element branches.
 */
template <typename T, class Sc>
inline bool plain_decay_is_geometric(int64_t cols, const T* w, const T* n, const Sc& sc) {
  if (!std::is_same<T, float>::value || !(sc.epsilon > T(0)) || sc.clip_weights >= T(0) ||
      !(sc.gamma1 > T(0) && sc.gamma1 < T(1))) {  // 0 < gamma1 < 1: +0 stays +0
    return false;
  }
  for (int64_t j = 0; j < cols; ++j) {
    if (!(w[j] - w[j] == T(0)) || !(n[j] >= T(0))) return false;  // non-finite w; n < 0 or NaN
  }
  return true;
}
#endif  // !__CUDACC__

/*!
 * \brief The hook: steps from+1..to of one row (cols elements), decay steps
 *        through decay_plain / decay_centered and skipped once the row settles
 *        (plain float32 rows: a run of decay steps at once,
 *        decay_geometric_adding_zero).
 */
template <class Rule, typename T>
GS_HOST_DEVICE bool replay_row(int64_t cols, T* w, T* const* s, const float* history,
                               const float* fixed, int64_t from, int64_t to) {
#if defined(__CUDA_ARCH__)
  // CUDA runs the hook on one thread per row; the generic replay spreads the
  // row's columns over a block, which is faster unless a gap is hundreds of
  // times longer than the ~1000 steps a row takes to settle. Same bits.
  return false;
#else
  bool settled = false;
  int64_t t = from + 1;
  while (t <= to) {
    if (!is_decay_step(history + t * Rule::kNumStep)) {
      // A run of full steps (wd != 0 or an unusual lr): the framework's blocked,
      // vectorised replay, the same apply<false> per element as full_step.
      int64_t last = t;
      while (last < to && !is_decay_step(history + (last + 1) * Rule::kNumStep)) ++last;
      StatePtrs<T> states;
      for (int k = 0; k < Rule::kNumStates; ++k) states.p[k] = s[k];
      replay_steps<Rule, T>(cols, w, states, history, fixed, t, last);
      settled = false;
      t = last + 1;
      continue;
    }
    if (settled) {
      ++t;
      continue;
    }
    const auto sc = Rule::template scalars<T>(history + t * Rule::kNumStep, fixed, 1.0f);
#if !defined(__CUDACC__)
    if constexpr (Rule::kNumStates == 1 && std::is_same<T, float>::value) {
      if (plain_decay_is_geometric(cols, w, s[0], sc)) {
        int64_t last = t;
        while (last < to && is_decay_step(history + (last + 1) * Rule::kNumStep)) ++last;
        ops::decay_geometric_adding_zero(cols, s[0], sc.gamma1, last - t + 1);
        t = last + 1;
        continue;
      }
    }
#endif
    bool changed = false;
    for (int64_t j = 0; j < cols; ++j) {
      if (!(w[j] - w[j] == T(0))) {  // a non-finite weight: not +0 gradient, the full step
        full_step<Rule>(w, s, j, sc);
        changed = true;
      } else {
        if constexpr (Rule::kNumStates == 1) {
          changed = decay_plain<Rule>(w + j, s[0] + j, sc) || changed;
        } else {
          changed = decay_centered<Rule>(w + j, s[0] + j, s[1] + j, s[2] + j, sc) || changed;
        }
      }
    }
    settled = !changed;
    ++t;
  }
  return true;
#endif
}

}  // namespace rmsprop_detail
}  // namespace optim
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_RMSPROP_DETAIL_H_
