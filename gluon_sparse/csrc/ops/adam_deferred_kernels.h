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

#include <cmath>
#include <cstdint>

#include "adam_kernels.h"

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

/*! \brief Whether x is +0 (not -0), the only zero a fixed point may hold. */
template <typename T>
GS_HOST_DEVICE bool is_positive_zero(T x) {
#if defined(__CUDA_ARCH__)
  return x == T(0) && !signbit(x);
#else
  return x == T(0) && !std::signbit(x);
#endif
}

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
 * \brief Bring one row (cols contiguous elements) from step `from` to step `to`
 *        by replaying steps from + 1 .. to without gradient (host loop; the
 *        CUDA kernel spreads the columns over threads instead).
 */
template <typename T>
inline void replay_row(int64_t cols, T* __restrict__ weight, T* __restrict__ mean,
                       T* __restrict__ var, const StepRecord* history, const FixedScalars& fixed,
                       int64_t from, int64_t to) {
  // The fixed point divides +0 by sqrt(0) + epsilon, which must be positive.
  bool zero = fixed.epsilon > 0.0f && state_is_zero(cols, mean, var) &&
              weights_finite(cols, weight);
  for (int64_t s = from + 1; s <= to; ++s) {
    const StepRecord& record = history[s];
    if (zero && record.wd == 0.0f) continue;  // a fixed point: the step changes nothing
    const AdamScalars<T> scalars = step_scalars<T>(record, fixed);
    if (record.clip_gradient >= 0.0f) {
      update_row_without_grad<true>(cols, weight, mean, var, scalars);
    } else {
      update_row_without_grad<false>(cols, weight, mean, var, scalars);
    }
    zero = false;
  }
}

}  // namespace deferred
}  // namespace adam
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_ADAM_DEFERRED_KERNELS_H_
