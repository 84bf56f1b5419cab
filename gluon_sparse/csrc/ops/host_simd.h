/*!
 * Which build of the host SIMD kernels runs: the baseline x86-64 one (SSE2),
 * the AVX2 one, or, for deferred Adam's full-step replay alone, the AVX-512 one
 * (checked_sqrt.h: half its square roots off the divider).
 *
 * Kernels whose speed depends on the vector width (geometric_decay.cc, deferred
 * Adam's replay in adam_replay_steps.cc) are compiled twice from one source,
 * once as `target("avx2")` functions, and pick a build at run time with
 * host_simd_path(): the wheel runs on any x86-64 CPU and uses AVX2 where the
 * CPU has it. Both builds do the same IEEE operations per element and are
 * bitwise equal; tests force each path (gluon_sparse_force_simd_path) to
 * compare them.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_HOST_SIMD_H_
#define GLUON_SPARSE_CSRC_OPS_HOST_SIMD_H_

#include <cstdint>
#include <cstring>

// GS_HOST_AVX2: whether this translation unit builds the AVX2 copies. They rely
// on GCC inlining the kernels' helpers (and AVX builtins) into `target("avx2"),
// flatten` functions, which it does when optimising; other compilers, -O0 builds
// (the sanitizer test) and nvcc keep the baseline alone.
#if !defined(__CUDACC__) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    defined(__OPTIMIZE__)
#define GS_HOST_AVX2 1
#endif

namespace gluon_sparse {
namespace ops {

/*! \brief Whether this CPU runs AVX2 and FMA code (false off x86-64 GCC/Clang builds). */
bool cpu_has_avx2();

/*! \brief Whether this CPU runs AVX-512 Foundation code, besides AVX2 and FMA. */
bool cpu_has_avx512();

/*! \brief The build the kernels take: 0 baseline, 1 AVX2 (also under a forced path 2). */
int host_simd_path();

/*!
 * \brief Whether deferred Adam's full-step replay takes its AVX-512 build: by
 *        default where the CPU has AVX-512F, or when the test knob forces path 2.
 */
bool host_replay_avx512();

/*!
 * \brief Test hook: force the baseline (0), AVX2 (1) or AVX-512 replay (2, with
 *        AVX2 for every other kernel) build, or pick by CPU (-1). A build the CPU
 *        lacks falls back to the next one down.
 */
void force_host_simd_path(int path);

#if !defined(__CUDACC__)
// What the kernels compiled for both builds share. Their helpers are
// GS_INLINE, so that each is compiled inside the entry point that calls it, for
// that entry point's target (AVX2 or baseline). Eight lanes are one register in
// the AVX2 build and two in the baseline's (GCC/Clang vector extensions).
#define GS_INLINE __attribute__((always_inline)) inline

typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));

// 32-byte vectors passed between always-inlined helpers: GCC's note about
// their ABI concerns calls across objects, which never happen here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
/*! \brief The lanes' bits as floats, and back (a bit copy, no conversion). */
GS_INLINE f32x8 as_float(i32x8 bits) {
  f32x8 x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}
GS_INLINE i32x8 as_bits(f32x8 x) {
  i32x8 bits;
  std::memcpy(&bits, &x, sizeof(x));
  return bits;
}
#pragma GCC diagnostic pop
#endif  // !__CUDACC__

}  // namespace ops
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_HOST_SIMD_H_
