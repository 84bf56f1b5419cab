/*!
 * The framework's row loops, generic over a Rule (optim_rule.h): one row's
 * eager step with or without gradient, and the replay of the steps a row
 * skipped under a deferred update. Host code; the CUDA kernels
 * (optim_kernels.cu) run the same Rule::apply one element per thread.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OPTIM_ROWS_H_
#define GLUON_SPARSE_CSRC_OPS_OPTIM_ROWS_H_

#include <cstdint>
#include <type_traits>

#include "host_simd.h"
#include "optim_rule.h"

namespace gluon_sparse {
namespace optim {

/*! \brief Pointers to the kNumStates state arrays (whole arrays or one row of each). */
template <typename T>
struct StatePtrs {
  T* p[kMaxStates];
  /*! \brief The same arrays advanced by `offset` elements. */
  StatePtrs at(int64_t offset, int n) const {
    StatePtrs r;
    for (int k = 0; k < n; ++k) r.p[k] = p[k] + offset;
    return r;
  }
};

/*! \brief A rule's record width, number of states and the rest, checked at compile time. */
template <class Rule>
struct RuleTraits {
  static_assert(Rule::kNumStates >= 0 && Rule::kNumStates <= kMaxStates, "too many states");
  static_assert(Rule::kNumFixed >= 0 && Rule::kNumFixed <= kMaxFixed, "too many fixed scalars");
  static_assert(Rule::kNumStep >= 1 && Rule::kNumStep <= kMaxStep, "1 to kMaxStep step scalars");
  // Room for one state even when a rule has none (C++ has no empty arrays).
  static constexpr int kStateSlots = Rule::kNumStates > 0 ? Rule::kNumStates : 1;
};

// Detects the optional `kHasReplayRow` hook.
template <class Rule, class = void>
struct HasReplayRow : std::false_type {};
template <class Rule>
struct HasReplayRow<Rule, std::enable_if_t<Rule::kHasReplayRow>> : std::true_type {};

/*! \brief One step of one row: with gradient (grad = the row's gradient) or without (grad unused). */
template <class Rule, bool kHasGrad, typename T>
inline void step_row(int64_t cols, T* __restrict__ w, const StatePtrs<T>& states,
                     const T* __restrict__ grad, const typename Rule::template Scalars<T>& sc) {
  constexpr int n = Rule::kNumStates;
  // Local copies: the compiler then knows no store to a row aliases a scalar or a
  // state pointer, so it hoists the rules' loop-invariant branches (clip or not)
  // out of the loop and vectorises it.
  const typename Rule::template Scalars<T> local = sc;
  T* p[RuleTraits<Rule>::kStateSlots];
  for (int k = 0; k < n; ++k) p[k] = states.p[k];
  for (int64_t j = 0; j < cols; ++j) {
    T s[RuleTraits<Rule>::kStateSlots];
    for (int k = 0; k < n; ++k) s[k] = p[k][j];
    Rule::template apply<kHasGrad, T>(kHasGrad ? grad[j] : T(0), w + j, s, local);
    for (int k = 0; k < n; ++k) p[k][j] = s[k];
  }
}

/*! \brief A history record: the kNumStep floats of step t. */
template <class Rule>
GS_HOST_DEVICE const float* record(const float* history, int64_t t) {
  return history + t * Rule::kNumStep;
}

/*!
 * \brief Whether every state of the row is +0 and every weight finite and not
 *        -0: the elements Rule::zero_state_is_fixed_point speaks of.
 */
template <class Rule, typename T>
inline bool row_is_zero_state(int64_t cols, const T* w, const StatePtrs<T>& states) {
  for (int k = 0; k < Rule::kNumStates; ++k) {
    for (int64_t j = 0; j < cols; ++j) {
      if (!ops::is_positive_zero(states.p[k][j])) return false;
    }
  }
  for (int64_t j = 0; j < cols; ++j) {
    // finite: w - w is exactly 0; -0 would turn into +0 under w + (+0) for some rules.
    if (!(w[j] - w[j] == T(0)) || (w[j] == T(0) && !ops::is_positive_zero(w[j]))) return false;
  }
  return true;
}

/*! \brief The last step in from+1..to whose record is not a zero-state fixed point (0: none). */
template <class Rule>
inline int64_t last_moving_step(const float* history, const float* fixed, int64_t from,
                                int64_t to) {
  for (int64_t t = to; t > from; --t) {
    if (!Rule::zero_state_is_fixed_point(record<Rule>(history, t), fixed)) return t;
  }
  return 0;
}

/*!
 * \brief What a replay knows about the history up to `scanned`: the last step
 *        whose record moves a zero-state row. Kept up to date per registry
 *        entry (amortised O(1) a step) or computed per call.
 */
struct ReplayHint {
  int64_t scanned = 0;
  int64_t last_moving = 0;
};

template <class Rule>
inline void extend_hint(const float* history, const float* fixed, int64_t to, ReplayHint* hint) {
  if (to <= hint->scanned) return;
  const int64_t last = last_moving_step<Rule>(history, fixed, hint->scanned, to);
  if (last > 0) hint->last_moving = last;
  hint->scanned = to;
}

/*!
 * \brief Steps first..to without gradient of columns j0..j0+width-1 of one
 *        row (width <= kBlock), every one applied.
 *
 * The block's columns are held in local arrays (registers and L1) through all
 * the steps, so each element is loaded and stored once however many steps it
 * replays, and the column loop, of a compile-time trip count, vectorises. Each
 * element still goes through the same steps in the same order: bitwise the
 * step-by-step result.
 */
template <class Rule, typename T, int64_t kBlock>
inline void replay_block(int64_t j0, int64_t width, T* w, const StatePtrs<T>& states,
                         const float* history, const float* fixed, int64_t first, int64_t to) {
  constexpr int n = Rule::kNumStates;
  constexpr int slots = RuleTraits<Rule>::kStateSlots;
  T lw[kBlock] = {};
  T ls[slots][kBlock] = {};
  for (int64_t j = 0; j < width; ++j) lw[j] = w[j0 + j];
  for (int k = 0; k < n; ++k) {
    for (int64_t j = 0; j < width; ++j) ls[k][j] = states.p[k][j0 + j];
  }
  for (int64_t t = first; t <= to; ++t) {
    const auto sc = Rule::template scalars<T>(record<Rule>(history, t), fixed, 1.0f);
    for (int64_t j = 0; j < kBlock; ++j) {
      T s[slots];
      for (int k = 0; k < n; ++k) s[k] = ls[k][j];
      Rule::template apply<false, T>(T(0), lw + j, s, sc);
      for (int k = 0; k < n; ++k) ls[k][j] = s[k];
    }
  }
  for (int64_t j = 0; j < width; ++j) w[j0 + j] = lw[j];
  for (int k = 0; k < n; ++k) {
    for (int64_t j = 0; j < width; ++j) states.p[k][j0 + j] = ls[k][j];
  }
}

/*!
 * \brief Steps first..to without gradient of one row, every one applied, in
 *        blocks of columns (replay_block).
 *
 * Blocks of 128 columns while a row has that many left, then of 32: a wide
 * block computes the step's scalars once for more columns and gives the CPU
 * more independent vectors in flight (1.15-1.35x faster than blocks of 32 on
 * the CTR shape of bench_optimizers, 128 columns), while a narrow row (an FM's
 * 8 or 16 factors) pads no more than one block of 32.
 */
template <class Rule, typename T>
inline void replay_steps_blocked(int64_t cols, T* w, const StatePtrs<T>& states,
                                 const float* history, const float* fixed, int64_t first,
                                 int64_t to) {
  constexpr int64_t kWide = 128, kNarrow = 32;
  int64_t j0 = 0;
  for (; j0 + kWide <= cols; j0 += kWide) {
    replay_block<Rule, T, kWide>(j0, kWide, w, states, history, fixed, first, to);
  }
  for (; j0 < cols; j0 += kNarrow) {
    const int64_t width = cols - j0 < kNarrow ? cols - j0 : kNarrow;
    replay_block<Rule, T, kNarrow>(j0, width, w, states, history, fixed, first, to);
  }
}

#if GS_HOST_AVX2
/*!
 * \brief replay_steps_blocked built for AVX2: 8 float lanes a division and a
 *        square root instead of SSE2's 4. `flatten` inlines the rule's apply
 *        into this function, so its loop is compiled for AVX2; AVX2 without FMA,
 *        so nothing is contracted and each lane does the same IEEE operations:
 *        bitwise the baseline (tests/test_deferred_paths.py forces both).
 */
template <class Rule, typename T>
__attribute__((target("avx2"), flatten)) void replay_steps_avx2(
    int64_t cols, T* w, const StatePtrs<T>& states, const float* history, const float* fixed,
    int64_t first, int64_t to) {
  replay_steps_blocked<Rule, T>(cols, w, states, history, fixed, first, to);
}
#endif

/*!
 * \brief Steps first..to without gradient of one row: the replay's full steps,
 *        on the SIMD build host_simd_path() picks.
 */
template <class Rule, typename T>
inline void replay_steps(int64_t cols, T* w, const StatePtrs<T>& states, const float* history,
                         const float* fixed, int64_t first, int64_t to) {
#if GS_HOST_AVX2
  if (ops::host_simd_path() == 1) {
    replay_steps_avx2<Rule, T>(cols, w, states, history, fixed, first, to);
    return;
  }
#endif
  replay_steps_blocked<Rule, T>(cols, w, states, history, fixed, first, to);
}

/*!
 * \brief Bring one row from step `from` to step `to` by replaying steps
 *        from+1..to without gradient, bitwise as the eager op would have.
 *
 * `hint` must cover steps up to `to`: a zero-state row with no moving step
 * after `from` is done at once; otherwise fixed-point steps are skipped while
 * the row stays at zero state. A rule's replay_row hook, if any, comes first.
 */
template <class Rule, typename T>
inline void replay_row(int64_t cols, T* w, const StatePtrs<T>& states, const float* history,
                       const float* fixed, int64_t from, int64_t to, const ReplayHint& hint) {
  if (to <= from) return;
  bool zero = row_is_zero_state<Rule>(cols, w, states);
  if (zero && hint.last_moving <= from) return;
  if constexpr (HasReplayRow<Rule>::value) {
    if (Rule::template replay_row<T>(cols, w, states.p, history, fixed, from, to)) return;
  }
  int64_t first = from + 1;
  if (zero) {
    // Steps that leave a zero-state row unchanged are skipped until one moves it.
    while (first <= to && Rule::zero_state_is_fixed_point(record<Rule>(history, first), fixed)) {
      if (first > hint.last_moving) return;
      ++first;
    }
  }
  if (first <= to) replay_steps<Rule, T>(cols, w, states, history, fixed, first, to);
}

/*!
 * \brief Whether replaying from+1..to would leave the row unchanged (zero
 *        state and only fixed-point steps): such a gradient row may be behind.
 */
template <class Rule, typename T>
inline bool replay_is_noop(int64_t cols, const T* w, const StatePtrs<T>& states,
                           const ReplayHint& hint, int64_t from) {
  return hint.last_moving <= from && row_is_zero_state<Rule>(cols, w, states);
}

}  // namespace optim
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_OPTIM_ROWS_H_
