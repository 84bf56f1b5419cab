/*!
 * Deferred Adam's full replay steps, built for baseline x86-64, for AVX2 and,
 * float32 only, for AVX-512, and its update of the gradient's rows, built for
 * baseline x86-64 and AVX2 (see replay_full_steps and update_row_with_grad_simd
 * in adam_deferred_kernels.h).
 *
 * A row that comes back a few dozen steps after its last gradient still has
 * moving weights, so each missed step is a full Adam step: a square root and
 * a division an element, which bound the replay (x86 runs both on one
 * divider, which takes the same lanes a cycle at every vector width). One
 * source, adam_kernels.h's row loop over 16-byte vectors for the baseline and
 * 32-byte ones for the AVX2 copy: every lane goes through the same `apply`, the
 * same IEEE operations in the same order and never a fused multiply-add (the
 * library is built with -ffp-contract=off), so every build is bitwise equal to
 * the scalar step (tests/test_grain.py forces each).
 *
 * The AVX-512 build gives the divider less to do instead of more lanes: in
 * each pair of 16-lane vectors, one takes its square root from the FMA ports
 * (checked_sqrt.h: exactly the hardware's root, proven per lane).
 */
// 32- and 64-byte vectors passed between the inlined helpers (adam_kernels.h's
// row loop instantiated for them): GCC's note about their ABI concerns calls
// across objects, which never happen here.
#pragma GCC diagnostic ignored "-Wpsabi"

#include <cstdint>
#include <type_traits>

#include "adam_deferred_kernels.h"
#include "host_simd.h"

namespace gluon_sparse {
namespace adam {
namespace deferred {
namespace {

// The baseline's lanes: 16-byte vectors, or scalars without vector extensions.
#if GS_HOST_SIMD
template <typename T> using BaselineLanes = typename Simd<T>::type;
#else
template <typename T> using BaselineLanes = T;
#endif

#if GS_HOST_AVX2
template <typename T> struct Avx2;
template <> struct Avx2<float> { typedef f32x8 type; };
template <> struct Avx2<double> { typedef f64x4 type; };

// `flatten` inlines everything the loop calls (apply, the AVX square root)
// into this AVX2 function (GS_HOST_AVX2: optimising GCC builds).
template <bool kClip, typename T>
__attribute__((target("avx2"), flatten)) void update_with_grad_avx2(
    int64_t cols, T* weight, T* mean, T* var, const T* grad, const AdamScalars<T>& s) {
  update_row_with_grad<kClip, T, typename Avx2<T>::type>(cols, weight, mean, var, grad, s);
}

template <typename T>
__attribute__((target("avx2"), flatten)) void full_steps_avx2(
    int64_t cols, T* weight, T* mean, T* var, const StepRecord* history,
    const FixedScalars& fixed, int64_t first, int64_t last) {
  full_steps_in_lanes<T, typename Avx2<T>::type>(cols, weight, mean, var, history, fixed, first,
                                                 last);
}

/*! \brief checked_sqrt.h's square root as `apply`'s Root: bitwise sqrt_rn's. */
struct CheckedSqrt16 {
  GS_INLINE f32x16 operator()(f32x16 v) const { return ops::checked_sqrt16(v); }
};

/*! \brief One step without gradient or clipping of 16 elements, with `root`. */
template <typename Root>
GS_INLINE void step_16_lanes(float* weight, float* mean, float* var,
                             const AdamScalars<f32x16>& sv, Root root) {
  f32x16 w = load<f32x16>(weight), m = load<f32x16>(mean), v = load<f32x16>(var);
  apply<false>(decay_grad(w, sv), &w, &m, &v, sv, root);
  store(weight, w); store(mean, m); store(var, v);
}

/*!
 * \brief full_steps_in_lanes for float32 on AVX-512: 16 lanes a vector, and in
 *        each pair of vectors the first takes its square root from the FMA ports
 *        (checked_sqrt.h), the second from the divider, which then has the
 *        division and half the roots to do instead of all of both. The same
 *        `apply` as every other build, so bitwise equal to them.
 */
__attribute__((target("avx512f"), flatten)) void full_steps_avx512(
    int64_t cols, float* weight, float* mean, float* var, const StepRecord* history,
    const FixedScalars& fixed, int64_t first, int64_t last) {
  for (int64_t s = first; s <= last; ++s) {
    const AdamScalars<float> scalars = step_scalars<float>(history[s], fixed);
    if (history[s].clip_gradient >= 0.0f) {
      update_row_without_grad<true, float, f32x16>(cols, weight, mean, var, scalars);
      continue;
    }
    const AdamScalars<f32x16> sv = broadcast<f32x16>(scalars);
    int64_t j = 0;
    for (; j + 32 <= cols; j += 32) {
      step_16_lanes(weight + j, mean + j, var + j, sv, CheckedSqrt16());
      step_16_lanes(weight + j + 16, mean + j + 16, var + j + 16, sv, RoundedSqrt());
    }
    // The rest (one 16-lane vector at most, then scalars) on the divider alone.
    update_row_without_grad<false, float, f32x16>(cols - j, weight + j, mean + j, var + j,
                                                  scalars);
  }
}
#endif

}  // namespace

template <typename T>
void replay_full_steps(int64_t cols, T* weight, T* mean, T* var, const StepRecord* history,
                       const FixedScalars& fixed, int64_t first, int64_t last) {
#if GS_HOST_AVX2
  if constexpr (std::is_same<T, float>::value) {
    if (ops::host_replay_avx512()) {
      full_steps_avx512(cols, weight, mean, var, history, fixed, first, last);
      return;
    }
  }
  if (ops::host_simd_path() == 1) {
    full_steps_avx2<T>(cols, weight, mean, var, history, fixed, first, last);
    return;
  }
#endif
  full_steps_in_lanes<T, BaselineLanes<T>>(cols, weight, mean, var, history, fixed, first, last);
}

template <bool kClip, typename T>
void update_row_with_grad_simd(int64_t cols, T* weight, T* mean, T* var, const T* grad,
                               const AdamScalars<T>& s) {
#if GS_HOST_AVX2
  if (ops::host_simd_path() == 1) {
    update_with_grad_avx2<kClip, T>(cols, weight, mean, var, grad, s);
    return;
  }
#endif
  update_row_with_grad<kClip, T, BaselineLanes<T>>(cols, weight, mean, var, grad, s);
}

#define GS_UPDATE_WITH_GRAD(kClip, T)                                                       \
  template void update_row_with_grad_simd<kClip, T>(int64_t, T*, T*, T*, const T*,          \
                                                    const AdamScalars<T>&);
GS_UPDATE_WITH_GRAD(false, float)
GS_UPDATE_WITH_GRAD(true, float)
GS_UPDATE_WITH_GRAD(false, double)
GS_UPDATE_WITH_GRAD(true, double)
#undef GS_UPDATE_WITH_GRAD

template void replay_full_steps<float>(int64_t, float*, float*, float*, const StepRecord*,
                                       const FixedScalars&, int64_t, int64_t);
template void replay_full_steps<double>(int64_t, double*, double*, double*, const StepRecord*,
                                        const FixedScalars&, int64_t, int64_t);

}  // namespace deferred
}  // namespace adam
}  // namespace gluon_sparse

/*!
 * \brief For tests: deferred Adam's steps_until_frozen for one row (0: no step
 *        of the n to come, each with a learning rate of at most max_lr and
 *        no weight decay, can change a bit of w).
 */
extern "C" int64_t gluon_sparse_adam_steps_until_frozen(int64_t cols, const float* w,
                                                        const float* m, const float* v,
                                                        float beta1, float beta2, float epsilon,
                                                        float max_lr, int64_t n) {
  namespace gd = gluon_sparse::adam::deferred;
  return gd::steps_until_frozen(cols, w, m, v, gd::FixedScalars{beta1, beta2, epsilon}, max_lr,
                                n);
}
