/*!
 * The optimizer family's one design: an optimizer is described once, as a
 * *Rule* (its per-element step and what a step without gradient does), and the
 * framework builds every path from that description:
 *
 *   eager update        gluon_sparse_<kName>_update           (optim_op_*.{h,cc})
 *   deferred update     gluon_sparse_<kName>_deferred_update  (optim_rows.h replay)
 *   flush               gluon_sparse_<kName>_deferred_flush
 *   row refresh         deferred_registry.cc (gluon_sparse_dot catches rows up)
 * on the CPU and in CUDA (optim_kernels.cu), for float32 and float64, and
 *   dense multi-update  gluon_sparse_<kName>_multi_update     (optim_multi_op.{h,cc})
 * on the CPU.
 *
 * Adding an optimizer: its rule header optim_rule_<name>.h, one line in
 * optim_rules.h (GLUON_SPARSE_OPTIM_RULES), its Python file (a Rule and a
 * Sparse<Class> with SparseRuleMixin, gluon_sparse/optimizer/_family.py) and
 * its tests.
 *
 * ---------------------------------------------------------------- the Rule
 * A rule is a struct with only static members (see optim_rule_sgd_mom.h):
 *
 *   static constexpr const char* kName = "sgd_mom";      // op names, Python Rule.name
 *   static constexpr int kNumStates = 1;                 // arrays shaped like the weight
 *   static constexpr const char* kStateNames[] = {"mom"};  // op inputs after weight(, grad)
 *   static constexpr int kNumFixed = 1;                  // constant over training
 *   static constexpr const char* kFixedNames[] = {"momentum"};
 *   static constexpr float kFixedDefaults[] = {0.0f};    // NAN: required attribute
 *   static constexpr int kNumStep = 3;                   // may change every step: one
 *   static constexpr const char* kStepNames[] = {"lr", "wd", "clip_gradient"};  // history
 *   static constexpr float kStepDefaults[] = {NAN, 0.0f, -1.0f};               // record
 *
 *   template <typename T> struct Scalars { T lr, wd, momentum, rescale_grad, clip; };
 *   template <typename T>
 *   GS_HOST_DEVICE static Scalars<T> scalars(const float* step, const float* fixed,
 *                                            float rescale_grad);
 *   template <bool kHasGrad, typename T>
 *   GS_HOST_DEVICE static void apply(T grad, T* w, T* s, const Scalars<T>& sc);
 *   GS_HOST_DEVICE static bool zero_state_is_fixed_point(const float* step,
 *                                                         const float* fixed);
 *
 * - `Scalars<T>` may be a member template struct or an alias template
 *   (`template <typename T> using Scalars = SgdScalars<T>;`) shared by rules.
 * - C++ forbids empty arrays: a rule without states (kNumStates 0) or fixed
 *   scalars writes `kStateNames[] = {nullptr}` (the framework reads only the
 *   first kNum* entries). kNumStates <= kMaxStates, kNumFixed <= kMaxFixed,
 *   1 <= kNumStep <= kMaxStep (below).
 * - `step` holds the kNumStep floats of this step's record (in kStepNames
 *   order), `fixed` the kNumFixed floats. `scalars` converts them to T exactly
 *   as MXNet's parameter struct and kernel do (a C float cast to T, and any
 *   derived constant such as 1 - beta1 rounded where MXNet rounds it).
 * - `apply<true>`: one element of a row present in the gradient (`grad` is the
 *   raw gradient value; rescale and clip are the rule's business).
 *   `apply<false>`: one element of a row absent from the gradient: the dense
 *   reference update with gradient 0 (`grad` is passed as 0 and may be
 *   ignored; replays call scalars() with rescale_grad 1). `s[k]` is the value
 *   of state k (in/out), `*w` the weight (in/out).
 * - `zero_state_is_fixed_point`: whether a step without gradient with this
 *   record leaves an element whose states are all +0 and whose weight is
 *   finite and not -0 bitwise unchanged (states and weight). The replay then
 *   skips such steps for free (e.g. every step with wd == 0 for momentum SGD).
 *   Return false when unsure: the shortcut is only an optimisation.
 * - Optional: `static constexpr bool kHasReplayRow = true;` and
 *     template <typename T>
 *     GS_HOST_DEVICE static bool replay_row(int64_t cols, T* w, T* const* s,
 *         const float* history, const float* fixed, int64_t from, int64_t to);
 *   a cheaper exact form of steps from+1..to without gradient for one row:
 *   `history` is the (capacity, kNumStep) record array (record t at
 *   history + t * kNumStep), `s[k]` the row's state k (cols values).
 *   Return true when the row was replayed, false to fall back on the
 *   step-by-step replay (nothing written). Must equal the step-by-step replay
 *   bitwise (test it so). Called on the host and in CUDA (one thread a row).
 *   A rule whose momentum decays without reaching zero (AdaMax, Nadam) gets
 *   both by deriving from frozen_replay::Hook with a policy (frozen_replay.h).
 *
 * - Optional: `static constexpr Parse kStepParse[] = {...};` (kNumStep
 *   entries): how MXNet's reference operator parses each step scalar from its
 *   text. Parse::kField (the default for every scalar when the member is
 *   absent): a `float` parameter field, dmlc::stof, which is not always
 *   correctly rounded; Parse::kTupleElement: an element of a `Tuple<float>`
 *   field (std::istream, correctly rounded), e.g. multi_sgd_update's lrs and
 *   wds. Fixed scalars and rescale_grad are always parsed as fields.
 *
 * Exactness: write the arithmetic only with the helpers below (ops::mul, add,
 * sub, div, sqrt_rn, clip), in the order MXNet's kernel writes it: nvcc never
 * contracts them into fused multiply-adds, so CUDA equals CPU bit for bit, and
 * the host build (no -march=native by default) does not contract either.
 * Comparisons and selects (x >= 0 ? a : b) are exact anyway.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_H_
#define GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_H_

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define GS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define GS_HOST_DEVICE inline
#endif

namespace gluon_sparse {
namespace optim {

// Bounds of a rule's arrays (the registry and kernels keep fixed-size copies).
constexpr int kMaxStates = 4;
constexpr int kMaxFixed = 8;
constexpr int kMaxStep = 8;

/*! \brief How MXNet parses a scalar's text (a rule's optional kStepParse, see above). */
enum class Parse { kField, kTupleElement };

}  // namespace optim

namespace ops {

// Correctly rounded, never-fused arithmetic (see the file comment).
#if defined(__CUDA_ARCH__)
GS_HOST_DEVICE float mul(float a, float b) { return __fmul_rn(a, b); }
GS_HOST_DEVICE float add(float a, float b) { return __fadd_rn(a, b); }
GS_HOST_DEVICE float sub(float a, float b) { return __fsub_rn(a, b); }
GS_HOST_DEVICE float div(float a, float b) { return __fdiv_rn(a, b); }
GS_HOST_DEVICE float sqrt_rn(float a) { return __fsqrt_rn(a); }
GS_HOST_DEVICE double mul(double a, double b) { return __dmul_rn(a, b); }
GS_HOST_DEVICE double add(double a, double b) { return __dadd_rn(a, b); }
GS_HOST_DEVICE double sub(double a, double b) { return __dsub_rn(a, b); }
GS_HOST_DEVICE double div(double a, double b) { return __ddiv_rn(a, b); }
GS_HOST_DEVICE double sqrt_rn(double a) { return __dsqrt_rn(a); }
#else
template <typename T> GS_HOST_DEVICE T mul(T a, T b) { return a * b; }
template <typename T> GS_HOST_DEVICE T add(T a, T b) { return a + b; }
template <typename T> GS_HOST_DEVICE T sub(T a, T b) { return a - b; }
template <typename T> GS_HOST_DEVICE T div(T a, T b) { return a / b; }
GS_HOST_DEVICE float sqrt_rn(float a) { return __builtin_sqrtf(a); }
GS_HOST_DEVICE double sqrt_rn(double a) { return __builtin_sqrt(a); }
#endif

/*! \brief clip(x, bound) as mshadow_op::clip: NaN passes through. */
template <typename T>
GS_HOST_DEVICE T clip(T x, T bound) {
  return x > bound ? bound : (x < -bound ? -bound : x);
}

/*! \brief Whether x is +0 (not -0). */
template <typename T>
GS_HOST_DEVICE bool is_positive_zero(T x) {
#if defined(__CUDA_ARCH__)
  return x == T(0) && !signbit(x);
#else
  return x == T(0) && !std::signbit(x);
#endif
}

/*! \brief Whether a float is finite (neither inf nor NaN). */
GS_HOST_DEVICE bool is_finite(float x) { return x - x == 0.0f; }

/*!
 * \brief First position in sorted `indices[0, n)` whose value is >= row
 *        (a CPU thread's first gradient row, a CUDA thread's row look-up).
 */
GS_HOST_DEVICE int64_t lower_bound(const int64_t* indices, int64_t n, int64_t row) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (indices[mid] < row) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

/*!
 * \brief Position of the first index that breaks "0 <= idx < num_rows, strictly
 *        increasing", or n when all are valid.
 */
inline int64_t first_invalid_index(const int64_t* indices, int64_t n, int64_t num_rows) {
  for (int64_t k = 0; k < n; ++k) {
    const int64_t row = indices[k];
    if (row < 0 || row >= num_rows || (k > 0 && row <= indices[k - 1])) return k;
  }
  return n;
}

}  // namespace ops
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_H_
