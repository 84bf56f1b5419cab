/*!
 * Test hook for checked_sqrt.h: runs its exact test over a range of float bit
 * patterns and counts the lanes it would accept with a wrong root.
 */
// 64-byte vectors passed between the inlined helpers: GCC's note about their
// ABI concerns calls across objects, which never happen here.
#pragma GCC diagnostic ignored "-Wpsabi"

#include "checked_sqrt.h"

#include <cstdint>

#include "host_simd.h"

namespace {

#if GS_HOST_AVX2
namespace ops = gluon_sparse::ops;

/*!
 * \brief Over bit patterns first .. first + 16 * vectors - 1 (wrapping at 2^32):
 *        the lanes whose root the test accepts but which differ, in any bit,
 *        from the divider's (the return value), and the lanes accepted.
 */
__attribute__((target("avx512f"), flatten)) int64_t check_range(uint32_t first, int64_t vectors,
                                                                int64_t* accepted) {
  int64_t wrong = 0, taken = 0;
  ops::u32x16 bits;
  for (int lane = 0; lane < 16; ++lane) bits[lane] = first + static_cast<uint32_t>(lane);
  for (int64_t i = 0; i < vectors; ++i, bits += 16u) {
    const ops::f32x16 v = (ops::f32x16)bits;
    ops::f32x16 root;
    const uint16_t exact = ops::fma_sqrt16(v, &root);
    const ops::i32x16 want = (ops::i32x16)ops::sqrt_rn(v), got = (ops::i32x16)root;
    for (int lane = 0; lane < 16; ++lane) {
      if ((exact >> lane) & 1) {
        ++taken;
        wrong += got[lane] != want[lane];
      }
    }
  }
  *accepted = taken;
  return wrong;
}
#endif

}  // namespace

/*!
 * \brief For tests: checked_sqrt.h's exact test over `vectors` x 16 consecutive
 *        float bit patterns from `first`. Returns the lanes accepted with a root
 *        that is not bitwise sqrtps's (must be 0), and their count in `accepted`;
 *        -1 on a CPU (or build) without AVX-512.
 */
extern "C" int64_t gluon_sparse_checked_sqrt_errors(uint32_t first, int64_t vectors,
                                                    int64_t* accepted) {
  *accepted = 0;
#if GS_HOST_AVX2
  if (gluon_sparse::ops::cpu_has_avx512()) return check_range(first, vectors, accepted);
#endif
  return -1;
}
