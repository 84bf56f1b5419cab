/*!
 * Per-element math of standard (non-lazy) Adam, shared by every kernel that
 * applies it: the CPU operator (adam_op.cc), the CUDA kernels
 * (adam_kernels.cu, also compiled into the standalone GPU harness in
 * benchmarks/gpu/) and any code that replays skipped steps of a row from the
 * per-step scalars.
 *
 * The arithmetic reproduces MXNet 1.9.1's `adam_update(lazy_update=False)` on a
 * row_sparse gradient (AdamStdDnsRspDnsKernel) operation for operation, so that
 * results are bitwise equal to MXNet's on CPU:
 *
 *   g = row in gradient ? grad * rescale_grad + weight * wd : weight * wd
 *   g = clip(g, clip_gradient)                  (only when clip_gradient >= 0)
 *   mean = beta1 * mean + (1 - beta1) * g
 *   var  = beta2 * var  + (1 - beta2) * (g * g)
 *   weight = weight - (lr * mean) / (sqrt(var) + epsilon)
 *
 * where lr already carries Adam's bias correction sqrt(1 - beta2^t) / (1 - beta1^t)
 * (mx.optimizer.Adam folds it in before calling the operator).
 *
 * On the device every operation goes through the round-to-nearest intrinsics
 * (__fmul_rn, ...), which nvcc never contracts into fused multiply-adds: the GPU
 * then computes exactly what the CPU computes, bit for bit, and a replay of
 * skipped steps can be compared bitwise with the eager update.
 * The host build must not contract either: setup.py compiles it with
 * -ffp-contract=off, which keeps every build (the AVX-512 one, -march=native)
 * bitwise MXNet's.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_ADAM_KERNELS_H_
#define GLUON_SPARSE_CSRC_OPS_ADAM_KERNELS_H_

#include <cstdint>
#include <cstring>

// Host SIMD through GCC/Clang vector extensions (see "Host rows" below).
#if !defined(__CUDACC__) && defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__))
#include <emmintrin.h>
#define GS_HOST_SIMD 1
#endif

#include "host_simd.h"  // GS_HOST_AVX2: the AVX2 build of the replay (adam_replay_steps.cc)
#if GS_HOST_AVX2
#include <immintrin.h>

#include "checked_sqrt.h"  // the AVX-512 build's 16-lane square roots
#endif

#include "optim_rule.h"  // GS_HOST_DEVICE and the exact arithmetic, shared with every rule

namespace gluon_sparse {
namespace adam {

// The family's never-fused arithmetic (optim_rule.h), so Adam and every rule round alike.
using ops::add;
using ops::clip;
using ops::div;
using ops::first_invalid_index;
using ops::lower_bound;
using ops::mul;
using ops::sqrt_rn;
using ops::sub;

/*! \brief The scalars of one Adam step, in the weight's precision. */
template <typename T>
struct AdamScalars {
  T lr;             //!< learning rate with the bias correction folded in
  T beta1;
  T beta2;
  T one_minus_beta1;  //!< 1 - beta1, rounded once as MXNet does
  T one_minus_beta2;  //!< 1 - beta2
  T epsilon;
  T wd;
  T rescale_grad;
  T clip_gradient;  //!< negative: no clipping
};

/*!
 * \brief Build the scalars of a step from the operator's float parameters.
 *
 * MXNet's AdamParam stores every scalar as a C float and casts it to the weight
 * type inside the kernel; doing the same keeps float64 results bitwise equal.
 */
template <typename T>
GS_HOST_DEVICE AdamScalars<T> make_scalars(float lr, float beta1, float beta2, float epsilon,
                                           float wd, float rescale_grad, float clip_gradient) {
  AdamScalars<T> s;
  s.lr = static_cast<T>(lr);
  s.beta1 = static_cast<T>(beta1);
  s.beta2 = static_cast<T>(beta2);
  // MXNet writes (1.f - beta1) with beta1 already of type T.
  s.one_minus_beta1 = static_cast<T>(1) - s.beta1;
  s.one_minus_beta2 = static_cast<T>(1) - s.beta2;
  s.epsilon = static_cast<T>(epsilon);
  s.wd = static_cast<T>(wd);
  s.rescale_grad = static_cast<T>(rescale_grad);
  s.clip_gradient = static_cast<T>(clip_gradient);
  return s;
}

#if GS_HOST_SIMD
// Vectors for the host rows (see "Host rows" below); declared before `apply`
// so that its unqualified sqrt_rn finds them. 16-byte vectors are baseline
// x86-64 (SSE2). The 32-byte ones are AVX: only code compiled for AVX2 may
// use them (adam_replay_steps.cc's `target("avx2"), flatten` entry points,
// into which these always-inline square roots are inlined).
typedef float f32x4 __attribute__((vector_size(16)));
typedef double f64x2 __attribute__((vector_size(16)));
inline f32x4 sqrt_rn(f32x4 a) { return (f32x4)_mm_sqrt_ps((__m128)a); }
inline f64x2 sqrt_rn(f64x2 a) { return (f64x2)_mm_sqrt_pd((__m128d)a); }
#if GS_HOST_AVX2
// (GCC notes that 32-byte vector arguments change the ABI without AVX: these
// functions are always inlined into AVX2 code, never called across objects.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float f32x8 __attribute__((vector_size(32)));
typedef double f64x4 __attribute__((vector_size(32)));
__attribute__((always_inline)) inline f32x8 sqrt_rn(f32x8 a) {
  return (f32x8)__builtin_ia32_sqrtps256((__v8sf)a);
}
__attribute__((always_inline)) inline f64x4 sqrt_rn(f64x4 a) {
  return (f64x4)__builtin_ia32_sqrtpd256((__v4df)a);
}
// 64-byte vectors (checked_sqrt.h, with their sqrt_rn): only the AVX-512 build of the
// replay uses them (adam_replay_steps.cc).
using ops::f32x16;
#pragma GCC diagnostic pop
#endif
#endif

/*! \brief Gradient of a row present in the gradient: grad * rescale_grad + weight * wd. */
template <typename T>
GS_HOST_DEVICE T rescaled_grad(T grad, T weight, const AdamScalars<T>& s) {
  return add(mul(grad, s.rescale_grad), mul(weight, s.wd));
}

/*! \brief Gradient of a row absent from the gradient: weight * wd (its grad is 0). */
template <typename T>
GS_HOST_DEVICE T decay_grad(T weight, const AdamScalars<T>& s) {
  return mul(weight, s.wd);
}

/*! \brief The correctly rounded square root: sqrt_rn of the lanes' type. */
struct RoundedSqrt {
  template <typename T>
  GS_HOST_DEVICE T operator()(T x) const { return sqrt_rn(x); }
};

/*!
 * \brief One Adam step of one element, given its (rescaled, not yet clipped) gradient.
 *
 * \tparam kClip whether clip_gradient >= 0; a template parameter so the column
 *         loops that call this stay branch-free and vectorise.
 * \tparam Root  how the square root is computed; any Root must return the
 *         correctly rounded root (the AVX-512 replay passes checked_sqrt.h's,
 *         which takes it off the divider for some vectors).
 */
template <bool kClip, typename T, typename Root = RoundedSqrt>
GS_HOST_DEVICE void apply(T g, T* weight, T* mean, T* var, const AdamScalars<T>& s,
                          Root root = Root()) {
  if (kClip) g = clip(g, s.clip_gradient);
  const T m = add(mul(s.beta1, *mean), mul(s.one_minus_beta1, g));
  const T v = add(mul(s.beta2, *var), mul(s.one_minus_beta2, mul(g, g)));
  *mean = m;
  *var = v;
  *weight = sub(*weight, div(mul(s.lr, m), add(root(v), s.epsilon)));
}

#if GS_HOST_SIMD
// ------------------------------------------------------------------ Host rows
// Written with explicit vector types rather than left to the auto-vectoriser:
// it does not vectorise sqrt under GCC's default -fmath-errno (setup.py passes
// -fno-math-errno, for the rules' loops, but a build with other flags may not),
// and the AVX2 build of the replay needs the width chosen here. The lanes go
// through the same `apply` as scalars:
// +, -, *, / and sqrtps/sqrtpd are IEEE correctly rounded per lane, so the
// results stay bitwise equal to the scalar (and CUDA) path, whatever the
// vector's width (the default: 16 bytes, baseline x86-64; V = f32x8 / f64x4
// only from AVX2 code, f32x16 only from AVX-512 code, see above). Nothing is
// contracted into fused multiply-adds (-ffp-contract=off, setup.py).
template <typename T> struct Simd;
template <> struct Simd<float> { typedef f32x4 type; };
template <> struct Simd<double> { typedef f64x2 type; };

/*! \brief A step's scalars broadcast to every lane of vector type V. */
template <typename V, typename T>
inline AdamScalars<V> broadcast(const AdamScalars<T>& s) {
  auto all = [](T x) { V v; for (size_t i = 0; i < sizeof(V) / sizeof(T); ++i) v[i] = x; return v; };
  return AdamScalars<V>{all(s.lr), all(s.beta1), all(s.beta2), all(s.one_minus_beta1),
                        all(s.one_minus_beta2), all(s.epsilon), all(s.wd), all(s.rescale_grad),
                        all(s.clip_gradient)};
}

template <typename V> inline V load(const void* p) { V v; std::memcpy(&v, p, sizeof(V)); return v; }
template <typename V> inline void store(void* p, const V& v) { std::memcpy(p, &v, sizeof(V)); }

/*! \brief Update one row present in the gradient (cols contiguous elements). */
template <bool kClip, typename T, typename V = typename Simd<T>::type>
inline void update_row_with_grad(int64_t cols, T* __restrict__ weight, T* __restrict__ mean,
                                 T* __restrict__ var, const T* __restrict__ grad,
                                 const AdamScalars<T>& s) {
  constexpr int64_t kLanes = sizeof(V) / sizeof(T);
  const AdamScalars<V> sv = broadcast<V>(s);
  int64_t j = 0;
  for (; j + kLanes <= cols; j += kLanes) {
    V w = load<V>(weight + j), m = load<V>(mean + j), v = load<V>(var + j);
    apply<kClip>(rescaled_grad(load<V>(grad + j), w, sv), &w, &m, &v, sv);
    store(weight + j, w); store(mean + j, m); store(var + j, v);
  }
  for (; j < cols; ++j) {
    apply<kClip>(rescaled_grad(grad[j], weight[j], s), weight + j, mean + j, var + j, s);
  }
}

/*! \brief Update one row absent from the gradient (decay only). */
template <bool kClip, typename T, typename V = typename Simd<T>::type>
inline void update_row_without_grad(int64_t cols, T* __restrict__ weight, T* __restrict__ mean,
                                    T* __restrict__ var, const AdamScalars<T>& s) {
  constexpr int64_t kLanes = sizeof(V) / sizeof(T);
  const AdamScalars<V> sv = broadcast<V>(s);
  int64_t j = 0;
  for (; j + kLanes <= cols; j += kLanes) {
    V w = load<V>(weight + j), m = load<V>(mean + j), v = load<V>(var + j);
    apply<kClip>(decay_grad(w, sv), &w, &m, &v, sv);
    store(weight + j, w); store(mean + j, m); store(var + j, v);
  }
  for (; j < cols; ++j) {
    apply<kClip>(decay_grad(weight[j], s), weight + j, mean + j, var + j, s);
  }
}
#else
/*! \brief Update one row present in the gradient (cols contiguous elements). */
template <bool kClip, typename T, typename V = T>  // V: the lane type (scalar here)
GS_HOST_DEVICE void update_row_with_grad(int64_t cols, T* __restrict__ weight,
                                         T* __restrict__ mean, T* __restrict__ var,
                                         const T* __restrict__ grad, const AdamScalars<T>& s) {
  for (int64_t j = 0; j < cols; ++j) {
    apply<kClip>(rescaled_grad(grad[j], weight[j], s), weight + j, mean + j, var + j, s);
  }
}

/*! \brief Update one row absent from the gradient (decay only). */
template <bool kClip, typename T, typename V = T>
GS_HOST_DEVICE void update_row_without_grad(int64_t cols, T* __restrict__ weight,
                                            T* __restrict__ mean, T* __restrict__ var,
                                            const AdamScalars<T>& s) {
  for (int64_t j = 0; j < cols; ++j) {
    apply<kClip>(decay_grad(weight[j], s), weight + j, mean + j, var + j, s);
  }
}
#endif  // GS_HOST_SIMD

}  // namespace adam
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_ADAM_KERNELS_H_
