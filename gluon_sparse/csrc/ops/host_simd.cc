/*!
 * Run-time choice between the baseline, AVX2 and AVX-512 builds (see host_simd.h).
 */
#include "host_simd.h"

#include <atomic>

namespace gluon_sparse {
namespace ops {
namespace {

std::atomic<int> forced_path{-1};

}  // namespace

bool cpu_has_avx2() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  // Every CPU with AVX2 so far has FMA too (Haswell, Excavator on); the
  // decay's AVX2 build uses one, so both are required.
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

namespace {

/*! \brief The forced path, or the CPU's best: 0 baseline, 1 AVX2, 2 AVX-512 replay. */
int chosen_path() {
  const int forced = forced_path.load(std::memory_order_relaxed);
  if (forced >= 0) return forced;
  static const int detected = cpu_has_avx512() ? 2 : cpu_has_avx2() ? 1 : 0;
  return detected;
}

}  // namespace

int host_simd_path() { return chosen_path() >= 1 ? 1 : 0; }

bool host_replay_avx512() { return chosen_path() == 2; }

void force_host_simd_path(int path) {
  // A forced build the CPU lacks falls back to the next one down.
  if (path == 2 && !cpu_has_avx512()) path = 1;
  if (path == 1 && !cpu_has_avx2()) path = 0;
  forced_path.store(path >= 0 && path <= 2 ? path : -1, std::memory_order_relaxed);
}

}  // namespace ops
}  // namespace gluon_sparse

/*! \brief Test knob: the build every host SIMD kernel takes from now on (-1: by CPU). */
extern "C" void gluon_sparse_force_simd_path(int path) {
  gluon_sparse::ops::force_host_simd_path(path);
}
