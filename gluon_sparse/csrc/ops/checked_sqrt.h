/*!
 * A float32 square root for AVX-512 that leaves the divider free: a candidate
 * from vrsqrt14ps and Newton steps on the fused multiply-add ports, accepted
 * only where an exact test proves it the correctly rounded root, else the
 * hardware square root (so the result is always bitwise sqrtps's).
 *
 * Why. Deferred Adam's replay does a square root and a division an element
 * and step, and on x86 both go through one divider, which bounds it
 * (benchmarks/bench_replay_bound.py). Taking the square root of half the
 * vectors off the divider balances the divider against the FMA ports: on the
 * Intel Xeon with AVX-512 of RESULTS.md the replayed step went from 0.455 to
 * 0.404 ns an element-step on one core (bench_replay_bound.py). Every root of
 * every vector still comes out bitwise equal to the hardware's; the test hook
 * in checked_sqrt.cc checks the test over all 2^32 inputs
 * (tests/test_grain.py, test_checked_square_root_is_the_hardware_one_for_every_float).
 *
 * The test. Let s > 0 be a normal float in [2^E, 2^(E+1)) and h = 2^(E-24) its
 * half ulp (h/2 when s is a power of two: the gap below it is half the gap
 * above; taking the smaller half-gap on both sides only rejects more). s is
 * RN(sqrt(v)) iff (s - h)^2 < v < (s + h)^2 (no float v is a midpoint's
 * square), i.e. -2sh + h^2 < v - s^2 < 2sh + h^2. v and s^2 are multiples of
 * g = 2^(2E-46) (v >= s^2 / 4 wherever the test can pass), and so is T = 2sh,
 * while 0 < h^2 < g: the condition is -T < v - s^2 <= T, and |v - s^2| < T
 * is a sufficient one (exact except at r = T, which it rejects). r = v - s^2
 * from one FMA is exact whenever |r| <= T (a multiple of g below 2^24 g), and
 * rounds to at least T otherwise (rounding is monotonic and T is a float), so
 * the computed |r| < T holds exactly when the true one does. T = s * 2^E *
 * 2^-23 is exact (scaling by powers of two) for v in [2^-100, 2^124], which
 * the lanes must be in, or be +-0 (their own roots): others (denormal,
 * negative, inf, NaN, huge) fail the range test and take the hardware root.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_CHECKED_SQRT_H_
#define GLUON_SPARSE_CSRC_OPS_CHECKED_SQRT_H_

#include "host_simd.h"  // GS_HOST_AVX2: GCC builds for x86-64 that compile target() functions

#if GS_HOST_AVX2
// immintrin.h also declares GCC's AVX-512 builtins, which it defines only once
// some code asks for that target.
#include <immintrin.h>

#include <cstdint>

namespace gluon_sparse {
namespace ops {

// 64-byte vectors, through GCC's AVX-512 builtins rather than the _mm512
// intrinsics: those are target("avx512f") functions, which GCC refuses to
// inline into the generic `apply` that calls this (through its Root) even
// though every caller is itself AVX-512 code (adam_replay_steps.cc's
// `target("avx512f"), flatten` entry point, where all of this is inlined).
// The same reason as the AVX2 square root in adam_kernels.h.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float f32x16 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));

/*! \brief The hardware square root of 16 lanes (vsqrtps: the divider). */
__attribute__((always_inline)) inline f32x16 sqrt_rn(f32x16 a) {
  return __builtin_ia32_sqrtps512_mask(a, a, 0xffff, 4 /* _MM_FROUND_CUR_DIRECTION */);
}

/*! \brief a * b + c and -(a * b) + c, each rounded once (vfmadd, vfnmadd). */
__attribute__((always_inline)) inline f32x16 fma16(f32x16 a, f32x16 b, f32x16 c) {
  return __builtin_ia32_vfmaddps512_mask(a, b, c, 0xffff, 4);
}
__attribute__((always_inline)) inline f32x16 fnma16(f32x16 a, f32x16 b, f32x16 c) {
  return __builtin_ia32_vfnmaddps512_mask(a, b, c, 0xffff, 4);
}

/*!
 * \brief The candidate root of each lane (`*root`) and the lanes where the exact
 *        test proves it sqrt_rn(v) (the returned mask; see the file comment).
 */
__attribute__((always_inline)) inline uint16_t fma_sqrt16(f32x16 v, f32x16* root) {
  const f32x16 half = f32x16{} + 0.5f;
  // Candidate: y ~ 1/sqrt(v) to 2^-14, one Newton step for s1 (~2^-28), then one
  // correction with the residual (~2^-42): wrong in about one lane in 2^18.
  const f32x16 y = __builtin_ia32_rsqrt14ps512_mask(v, v, 0xffff);
  const f32x16 s0 = v * y, h0 = half * y;
  const f32x16 s1 = fma16(s0, fnma16(s0, h0, half), s0);
  const f32x16 s = fma16(fnma16(s1, s1, v), h0, s1);
  // The exact test: |v - s^2| < s * 2^E' * 2^-23, with 2^E' the leading bit of
  // s's predecessor (that of s, or half of it at a power of two).
  const i32x16 bits = (i32x16)s;  // GCC: a cast between vectors copies the bits
  const f32x16 lead = (f32x16)((bits - 1) & 0x7f800000);
  const f32x16 bound = (s * lead) * 0x1p-23f;
  const f32x16 residual = (f32x16)((i32x16)fnma16(s, s, v) & 0x7fffffff);
  // v in [2^-100, 2^124] as unsigned bits (which also rejects -0, negatives and NaNs).
  const u32x16 offset = (u32x16)v - 0x0d800000u;
  const u32x16 span = u32x16{} + (0x7d800000u - 0x0d800000u);
  const uint16_t in_range = __builtin_ia32_ucmpd512_mask((i32x16)offset, (i32x16)span,
                                                         2 /* _MM_CMPINT_LE */, 0xffff);
  const uint16_t exact = __builtin_ia32_cmpps512_mask(residual, bound, 0x11 /* _CMP_LT_OQ */,
                                                      in_range, 4);
  // Zeros are their own roots, and common: a ReLU unit that no sample of a
  // feature's batches activated leaves var 0 in that (row, unit). Falling back
  // for them sent two vectors in three of the forum network's first layer to
  // the divider.
  const uint16_t zero = __builtin_ia32_cmpps512_mask(v, f32x16{}, 0x00 /* _CMP_EQ_OQ */, 0xffff, 4);
  *root = __builtin_ia32_blendmps_512_mask(s, v, zero);
  return exact | zero;
}

/*! \brief sqrt_rn(v), bitwise: fma_sqrt16's roots, or the divider's if a lane fails. */
__attribute__((always_inline)) inline f32x16 checked_sqrt16(f32x16 v) {
  f32x16 root;
  if (__builtin_expect(fma_sqrt16(v, &root) != 0xffff, 0)) return sqrt_rn(v);
  return root;
}
#pragma GCC diagnostic pop

}  // namespace ops
}  // namespace gluon_sparse

#endif  // GS_HOST_AVX2
#endif  // GLUON_SPARSE_CSRC_OPS_CHECKED_SQRT_H_
