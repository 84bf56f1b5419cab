/*!
 * What bounds deferred Adam's replay of full steps (benchmarks/bench_replay_bound.py).
 *
 * A returning row whose weights still move replays each missed step in full:
 *   g = w * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g;
 *   w = w - (lr m) / (sqrt(v) + eps)
 * with IEEE operations and no fused multiply-add, as MXNet's Adam computes it
 * (bitwise equality with it is the product's claim). This loop runs that step
 * over rows of 1,024 columns, 20 steps a row (the forum network's first layer),
 * in variants that tell the square root's and the division's share:
 *   0  8 lanes (the library's AVX2 build), square root and division
 *   1  16 lanes (AVX-512), square root and division
 *   2  16 lanes, a correctly rounded square root built from vrsqrt14ps, a
 *      Newton step and a one-ulp correction on the FMA ports, then division
 *      (an attempt to take the square root off the divider; not exact for
 *      every input, timed only)
 *   3  16 lanes, square root, multiplication instead of division
 *   4  16 lanes, neither (v instead of sqrt(v), multiplication)
 *   5  16 lanes in pairs of vectors, the first with the library's checked
 *      square root (gluon_sparse/csrc/ops/checked_sqrt.h: from the FMA ports,
 *      exact), the second with the hardware's: the library's AVX-512 build
 * Prints nanoseconds per element-step, one thread.
 */
#include <immintrin.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "checked_sqrt.h"  // the library's (bench_replay_bound.py passes its -I)

typedef float f32x8 __attribute__((vector_size(32)));
typedef float f32x16 __attribute__((vector_size(64)));

enum Root { kHardware, kNewton, kNone };

template <Root R> __attribute__((always_inline)) inline f32x8 root(f32x8 a) {
  return (f32x8)_mm256_sqrt_ps((__m256)a);
}

template <Root R> __attribute__((always_inline)) inline f32x16 root(f32x16 a) {
  const __m512 x = (__m512)a;
  if (R == kNone) return a;
  if (R == kHardware) return (f32x16)_mm512_sqrt_ps(x);
  const __m512 half = _mm512_set1_ps(0.5f);
  const __m512 y = _mm512_rsqrt14_ps(x);
  const __m512 s0 = _mm512_mul_ps(x, y), h0 = _mm512_mul_ps(half, y);
  const __m512 r0 = _mm512_fnmadd_ps(s0, h0, half);
  const __m512 s1 = _mm512_fmadd_ps(s0, r0, s0), h1 = _mm512_fmadd_ps(h0, r0, h0);
  const __m512 s = _mm512_fmadd_ps(_mm512_fnmadd_ps(s1, s1, x), h1, s1);
  // One ulp up or down, by the sign of the residual against s * ulp(s).
  const __m512 residual = _mm512_fnmadd_ps(s, s, x);
  const __m512i exponent = _mm512_and_si512(_mm512_castps_si512(s), _mm512_set1_epi32(0x7f800000));
  const __m512 ulp = _mm512_mul_ps(_mm512_castsi512_ps(exponent), _mm512_set1_ps(0x1p-23f));
  const __m512 t = _mm512_mul_ps(s, ulp);
  const __mmask16 up = _mm512_cmp_ps_mask(residual, t, _CMP_GT_OQ);
  const __mmask16 down = _mm512_cmp_ps_mask(residual, _mm512_sub_ps(_mm512_setzero_ps(), t),
                                            _CMP_LE_OQ);
  __m512i bits = _mm512_castps_si512(s);
  bits = _mm512_mask_add_epi32(bits, up, bits, _mm512_set1_epi32(1));
  bits = _mm512_mask_sub_epi32(bits, down, bits, _mm512_set1_epi32(1));
  return (f32x16)_mm512_castsi512_ps(bits);
}

struct Scalars { float lr, b1, b2, omb1, omb2, eps, wd; };

// kPairs: the library's AVX-512 build (variant 5), its checked root in one vector of two.
template <typename V, Root R, bool kDivide, bool kPairs = false>
__attribute__((noinline)) void steps(int cols, float* w, float* m, float* v, const Scalars& s,
                                     int n) {
  constexpr int kLanes = sizeof(V) / sizeof(float);
  const V lr = V{} + s.lr, b1 = V{} + s.b1, b2 = V{} + s.b2, omb1 = V{} + s.omb1,
          omb2 = V{} + s.omb2, eps = V{} + s.eps, wd = V{} + s.wd;
  for (int k = 0; k < n; ++k) {
    for (int j = 0; j < cols; j += kLanes) {
      V W, M, VV;
      std::memcpy(&W, w + j, sizeof(V));
      std::memcpy(&M, m + j, sizeof(V));
      std::memcpy(&VV, v + j, sizeof(V));
      const V g = W * wd;
      M = b1 * M + omb1 * g;
      VV = b2 * VV + omb2 * (g * g);
      V r;
      if constexpr (kPairs) {
        r = (j / kLanes) % 2 == 0 ? gluon_sparse::ops::checked_sqrt16(VV) : root<R>(VV);
      } else {
        r = root<R>(VV);
      }
      const V denominator = r + eps;
      W = kDivide ? W - (lr * M) / denominator : W - (lr * M) * denominator;
      std::memcpy(w + j, &W, sizeof(V));
      std::memcpy(m + j, &M, sizeof(V));
      std::memcpy(v + j, &VV, sizeof(V));
    }
  }
}

int main() {
  const int cols = 1024, rows = 2000, n = 20;
  std::vector<float> w(rows * cols), m(rows * cols), v(rows * cols);
  for (size_t i = 0; i < w.size(); ++i) {
    w[i] = 0.01f * static_cast<float>(static_cast<int>((i * 7919) % 1000) - 500) / 500.0f;
    m[i] = 1e-4f * static_cast<float>(static_cast<int>((i * 31) % 100) - 50);
    v[i] = 1e-7f * static_cast<float>((i * 17) % 100 + 1);
  }
  const Scalars s{1e-3f, 0.9f, 0.999f, 1.0f - 0.9f, 1.0f - 0.999f, 1e-8f, 0.0f};
  typedef void (*Kernel)(int, float*, float*, float*, const Scalars&, int);
  const Kernel kernels[] = {steps<f32x8, kHardware, true>, steps<f32x16, kHardware, true>,
                            steps<f32x16, kNewton, true>, steps<f32x16, kHardware, false>,
                            steps<f32x16, kNone, false>, steps<f32x16, kHardware, true, true>};
  for (int repeat = 0; repeat < 3; ++repeat) {
    for (int variant = 0; variant < 6; ++variant) {
      const auto start = std::chrono::steady_clock::now();
      for (int r = 0; r < rows; ++r) {
        kernels[variant](cols, &w[r * cols], &m[r * cols], &v[r * cols], s, n);
      }
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("%d %.4f\n", variant, seconds * 1e9 / (static_cast<double>(rows) * cols * n));
    }
  }
  return 0;
}
