/*!
 * Which build of the host SIMD kernels runs: the baseline x86-64 one (SSE2)
 * or the AVX2 one.
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

/*! \brief The build the kernels take: 0 baseline, 1 AVX2. */
int host_simd_path();

/*!
 * \brief Test hook: force the baseline (0) or AVX2 (1) build, or pick by CPU
 *        (-1); AVX2 on a CPU without it is the baseline.
 */
void force_host_simd_path(int path);

}  // namespace ops
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_HOST_SIMD_H_
