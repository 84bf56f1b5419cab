/*!
 * Deferred Adam's full replay steps, built for baseline x86-64 and for AVX2
 * (see replay_full_steps in adam_deferred_kernels.h).
 *
 * A row that comes back a few dozen steps after its last gradient still has
 * moving weights, so each missed step is a full Adam step: a square root and
 * a division an element, which bound the replay (the divider takes 8 lanes at
 * a time with AVX, 4 with SSE2). One source, adam_kernels.h's row loop over
 * 16-byte vectors for the baseline and 32-byte ones for the AVX2 copy: every
 * lane goes through the same `apply`, the same IEEE operations in the same
 * order and never an FMA (AVX2 has none), so both builds are bitwise equal to
 * the scalar step (tests/test_grain.py forces each).
 */
// 32-byte vectors passed between the inlined helpers (adam_kernels.h's row
// loop instantiated for them): GCC's note about their ABI concerns calls
// across objects, which never happen here.
#pragma GCC diagnostic ignored "-Wpsabi"

#include <cstdint>

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
template <typename T>
__attribute__((target("avx2"), flatten)) void full_steps_avx2(
    int64_t cols, T* weight, T* mean, T* var, const StepRecord* history,
    const FixedScalars& fixed, int64_t first, int64_t last) {
  full_steps_in_lanes<T, typename Avx2<T>::type>(cols, weight, mean, var, history, fixed, first,
                                                 last);
}
#endif

}  // namespace

template <typename T>
void replay_full_steps(int64_t cols, T* weight, T* mean, T* var, const StepRecord* history,
                       const FixedScalars& fixed, int64_t first, int64_t last) {
#if GS_HOST_AVX2
  if (ops::host_simd_path() == 1) {
    full_steps_avx2<T>(cols, weight, mean, var, history, fixed, first, last);
    return;
  }
#endif
  full_steps_in_lanes<T, BaselineLanes<T>>(cols, weight, mean, var, history, fixed, first, last);
}

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
