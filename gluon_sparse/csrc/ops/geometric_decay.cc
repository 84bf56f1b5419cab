/*!
 * x -> fl(b * x), n times, exactly and fast (see geometric_decay.h).
 *
 * Written with GCC/Clang vector extensions so that one source compiles to the
 * baseline (SSE2) and to AVX2: the AVX2 copy is a `target("avx2")` function
 * (no FMA: nothing here may be contracted) chosen once at run time.
 */
#include "geometric_decay.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "host_simd.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>  // declares the FMA builtin of step_bits<true>
#endif

// 32-byte vectors passed between always-inlined helpers: GCC's note about
// their ABI concerns calls across objects, which never happen here.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace gluon_sparse {
namespace ops {
namespace {

typedef int32_t i32x4 __attribute__((vector_size(16)));
typedef double f64x4 __attribute__((vector_size(32)));

constexpr int kLanes = 8;
constexpr int32_t kAbsMask = 0x7fffffff;
constexpr int32_t kSignMask = static_cast<int32_t>(0x80000000u);
constexpr float kMinNormal = 1.17549435e-38f;  // FLT_MIN

/*! \brief What every block needs to know about b. */
struct Decay {
  float b;
  double b_double;
  int32_t t_bits;     //!< bits of T: the least float x > 0 with x * b >= FLT_MIN (exactly)
  double log_t;       //!< log(T)
  double log_shrink;  //!< -log(b (1 - 2^-24)): the least a step can shrink a normal value by
};

Decay make_decay(float b) {
  Decay d;
  d.b = b;
  d.b_double = b;
  // x * b is exact in double (24 x 24 bits), so the comparisons below are exact.
  float t = static_cast<float>(static_cast<double>(kMinNormal) / b);
  while (static_cast<double>(t) * b < kMinNormal) t = std::nextafter(t, 1.0f);
  for (;;) {
    const float below = std::nextafter(t, 0.0f);
    if (static_cast<double>(below) * b < kMinNormal) break;
    t = below;
  }
  std::memcpy(&d.t_bits, &t, sizeof(t));
  d.log_t = std::log(static_cast<double>(t));
  d.log_shrink = -std::log(static_cast<double>(b) * (1.0 - 0x1p-24));
  return d;
}

/*!
 * \brief Steps during which every value of magnitude >= the one with bits
 *        `min_bits` stays >= T, so that a step is a plain multiply: |x| shrinks
 *        by at most b (1 - 2^-24) a step.
 */
GS_INLINE int64_t plain_steps(int32_t min_bits, const Decay& d, int64_t left) {
  if (min_bits < d.t_bits) return 0;
  if (min_bits >= 0x7f800000) return left;  // only infinities and NaNs: never denormal
  float a;
  std::memcpy(&a, &min_bits, sizeof(a));
  const double steps = (std::log(static_cast<double>(a)) - d.log_t) / d.log_shrink;
  // Margin for the logarithms' own rounding; step i (0-based) reads a value
  // >= a (b (1 - 2^-24))^i >= T for every i < floor(steps).
  const double safe = std::floor(steps * (1.0 - 1e-9)) - 1.0;
  if (safe <= 0.0) return 0;
  return safe >= static_cast<double>(left) ? left : static_cast<int64_t>(safe);
}

/*!
 * \brief One step of every lane, for magnitudes on either side of T (bits
 *        `u`, sign stripped): above T a float multiply (never denormal), below
 *        it rne(k * b) on the integer grid of 2^-149 units, k = u.
 *
 * Below T, k * b < 2^23 (T * b is the least normal, 2^23 units), so:
 *  - with FMA (the AVX2 build): fma(k, b, 2^23) rounds k * b + 2^23 once, in
 *    the binade [2^23, 2^24) whose spacing is 1: that is 2^23 + rne(k * b),
 *    ties to even included (2^23 is even), and its bits are 0x4B000000 + the
 *    result. Three vector instructions for 8 lanes;
 *  - without it: the product, exact in double (24 x 24 bits), rounded to an
 *    integer by adding and subtracting 1.5 * 2^52.
 */
template <bool kFma>
GS_INLINE i32x8 step_bits(i32x8 u, const Decay& d) {
  const i32x8 t = d.t_bits - i32x8{};
  const i32x8 high = u >= t;
  // Lanes below T multiply T instead, so no float operation makes a denormal.
  const i32x8 high_bits = as_bits(as_float(high ? u : t) * d.b);
  const i32x8 k = high ? i32x8{} : u;  // < 2^24: exact in float and double
  i32x8 next_k;
  if constexpr (kFma) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    const f32x8 sum = __builtin_ia32_vfmaddps256(__builtin_convertvector(k, f32x8), d.b - f32x8{},
                                                 0x1p23f - f32x8{});
    next_k = as_bits(sum) - 0x4B000000;
#endif
  } else {
    const f64x4 round = 0x1.8p52 - f64x4{};
    f64x4 lo = __builtin_convertvector(__builtin_shufflevector(k, k, 0, 1, 2, 3), f64x4);
    f64x4 hi = __builtin_convertvector(__builtin_shufflevector(k, k, 4, 5, 6, 7), f64x4);
    lo = (lo * d.b_double + round) - round;  // rne(k * b): the product is exact
    hi = (hi * d.b_double + round) - round;
    const i32x4 klo = __builtin_convertvector(lo, i32x4);
    const i32x4 khi = __builtin_convertvector(hi, i32x4);
    next_k = __builtin_shufflevector(klo, khi, 0, 1, 2, 3, 4, 5, 6, 7);
  }
  return high ? high_bits : next_k;  // k' <= 2^23: the bits of k' units (2^23 is FLT_MIN)
}

/*!
 * \brief Decay `width` <= kV * 8 values at x, n steps; the block stays in
 *        registers (kV vectors) for the whole replay.
 */
template <int kV, bool kFma>
GS_INLINE void decay_block(float* x, int width, const Decay& d, int64_t n) {
  float buf[kV * kLanes] = {};
  std::memcpy(buf, x, sizeof(float) * width);  // padding lanes are +0: a fixed point
  f32x8 r[kV];
  std::memcpy(r, buf, sizeof(r));
  i32x8 parked[kV] = {};  // bits of lanes set aside at their fixed point (those lanes of r are +0)
  const f32x8 b = d.b - f32x8{};
  int64_t left = n;
  while (left > 0) {
    i32x8 smallest = std::numeric_limits<int32_t>::max() - i32x8{};
    for (int v = 0; v < kV; ++v) {
      const i32x8 u = as_bits(r[v]) & kAbsMask;
      smallest = ((u != 0) & (u < smallest)) ? u : smallest;
    }
    int32_t min_bits = smallest[0];
    for (int lane = 1; lane < kLanes; ++lane) min_bits = std::min(min_bits, smallest[lane]);
    if (min_bits == std::numeric_limits<int32_t>::max()) break;  // every lane zero or set aside

    const int64_t plain = plain_steps(min_bits, d, left);
    if (plain > 0) {
      for (int64_t s = 0; s < plain; ++s) {
#pragma GCC unroll 8
        for (int v = 0; v < kV; ++v) r[v] *= b;
      }
      left -= plain;
      continue;
    }
    // A value is near or below T: a few exact steps on both sides of it, then
    // set aside the lanes that the last step left unchanged (fixed points).
    const int64_t chunk = std::min<int64_t>(8, left);
    i32x8 u[kV], sign[kV];
    for (int v = 0; v < kV; ++v) {
      sign[v] = as_bits(r[v]) & kSignMask;
      u[v] = as_bits(r[v]) & kAbsMask;
    }
    for (int64_t s = 1; s < chunk; ++s) {  // the vectors are independent chains: interleave them
      for (int v = 0; v < kV; ++v) u[v] = step_bits<kFma>(u[v], d);
    }
    for (int v = 0; v < kV; ++v) {
      const i32x8 before = u[v];
      u[v] = step_bits<kFma>(u[v], d);
      const i32x8 fixed = (u[v] == before) & (u[v] != 0);
      parked[v] |= fixed & (u[v] | sign[v]);
      r[v] = as_float(fixed ? i32x8{} : (u[v] | sign[v]));
    }
    left -= chunk;
  }
  for (int v = 0; v < kV; ++v) r[v] = as_float(as_bits(r[v]) | parked[v]);
  std::memcpy(buf, r, sizeof(r));
  std::memcpy(x, buf, sizeof(float) * width);
}

template <int kV, bool kFma>
GS_INLINE void decay_all(int64_t count, float* x, float b, int64_t n) {
  const Decay d = make_decay(b);
  constexpr int kBlock = kV * kLanes;
  for (int64_t begin = 0; begin < count; begin += kBlock) {
    decay_block<kV, kFma>(x + begin, static_cast<int>(std::min<int64_t>(kBlock, count - begin)), d,
                          n);
  }
}

// The baseline keeps 4 vectors (8 SSE registers) a block, AVX2 8 (8 of its 16).
void decay_baseline(int64_t count, float* x, float b, int64_t n) {
  decay_all<4, false>(count, x, b, n);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// The one multiply-add here is the explicit one of step_bits<true>; the plain
// steps are bare multiplies, which nothing can contract.
__attribute__((target("avx2,fma"))) void decay_avx2(int64_t count, float* x, float b, int64_t n) {
  decay_all<8, true>(count, x, b, n);
}
#else
void decay_avx2(int64_t count, float* x, float b, int64_t n) {
  decay_all<4, false>(count, x, b, n);
}
#endif

}  // namespace

void decay_geometric(int64_t count, float* x, float b, int64_t n) {
  if (n <= 0 || count <= 0) return;
  if (!(b > 0.5f && b < 1.0f)) {  // outside what the fast path assumes (T < 2 FLT_MIN)
    for (int64_t s = 0; s < n; ++s) {
      for (int64_t j = 0; j < count; ++j) x[j] = x[j] * b;
    }
    return;
  }
  if (host_simd_path() == 1) {
    decay_avx2(count, x, b, n);
  } else {
    decay_baseline(count, x, b, n);
  }
}

}  // namespace ops
}  // namespace gluon_sparse

/*!
 * \brief For tests: x[j] = fl(b * x[j]) n times through `path` (0 baseline,
 *        1 AVX2 where the CPU has it, -1 by CPU); returns the path taken.
 */
extern "C" int gluon_sparse_decay_geometric(int64_t count, float* x, float b, int64_t n,
                                            int path) {
  namespace ops = gluon_sparse::ops;
  ops::force_host_simd_path(path);
  const int taken = ops::host_simd_path();
  ops::decay_geometric(count, x, b, n);
  ops::force_host_simd_path(-1);
  return taken;
}
