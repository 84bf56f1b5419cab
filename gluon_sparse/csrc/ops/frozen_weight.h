/*!
 * How far an update may go without moving a float32 weight: what the frozen
 * replays (deferred Adam's steps_until_frozen, adam_deferred_kernels.h, and
 * AdaMax's, optim_rule_adamax_replay.h) compare their bound on every later
 * step's update with.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_FROZEN_WEIGHT_H_
#define GLUON_SPARSE_CSRC_OPS_FROZEN_WEIGHT_H_

#include <cstdint>
#include <cstring>
#include <limits>

namespace gluon_sparse {
namespace ops {

/*!
 * \brief For a normal w, the bound below which every |d| leaves fl(w - d) == w:
 *        half of w's ulp, or a quarter when w is a power of two (its lower
 *        neighbour is half an ulp away). 0 for a zero or denormal w (a frozen
 *        replay retries later: it may still move away), NaN for an infinite
 *        or NaN w (never frozen).
 */
inline double unmoved_bound(float w) {
  uint32_t bits;
  std::memcpy(&bits, &w, sizeof(bits));
  const uint64_t exponent = (bits >> 23) & 0xff;
  if (exponent == 0xff) return std::numeric_limits<double>::quiet_NaN();
  if (exponent == 0) return 0.0;
  // 2^(exponent - 151) or 2^(exponent - 152), built as a double's bits
  // (exponent + 1023 - shift is always > 0).
  const uint64_t shift = (bits & 0x7fffff) == 0 ? 152 : 151;
  const uint64_t out_bits = (exponent + 1023 - shift) << 52;
  double out;
  std::memcpy(&out, &out_bits, sizeof(out));
  return out;
}

}  // namespace ops
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_FROZEN_WEIGHT_H_
