/*!
 * How far an update may go without moving a float32 weight: what the frozen
 * replays (deferred Adam's, adam_deferred_kernels.h, and the frozen_replay.h
 * hooks of AdaMax and Nadam) compare their bound on every later step's update
 * with; and that bound for updates of Adam's form, coef * m / (sqrt(v) + eps).
 */
#ifndef GLUON_SPARSE_CSRC_OPS_FROZEN_WEIGHT_H_
#define GLUON_SPARSE_CSRC_OPS_FROZEN_WEIGHT_H_

#include <algorithm>
#include <cmath>
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

/*!
 * \brief 0 if no step of the n to come can change w; otherwise how many full
 *        steps to run before asking again (>= 1; n + 1: never in this range).
 *
 * For rules whose step without gradient (and with wd == 0) is
 *     m = fl(beta1 m),  v = fl(beta2 v),  w -= D,
 *     |D| <= (1 + 1e-5) coef |m| / (sqrt(v) + eps) + num_slack / (sqrt(v) + eps) + 2^-149,
 * where coef bounds every step's factor on m (Adam: |lr|; Nadam: |lr
 * momentum_next / (1 - m_schedule_next)|), 1e-5 the relative roundings (a few
 * units of 2^-24) and num_slack those of the numerator into the denormal range.
 *
 * With u = 2^-24, a = beta1 (1 + u) and c^2 = beta2 (1 - u), j steps ahead
 *     |m_j| <= a^j |m| + E,  E = 2^-150 / (1 - a),  |m_j| <= |m|,
 *     v_j >= c^2j v while v_j is normal,  v_j >= c^2j v - j 2^-149 always.
 * a^j / (c^j sqrt(v) + eps) does not grow with j when a < c (beta1^2 < beta2,
 * a little), so then the next step bounds every later one; when v may become
 * denormal within the n steps, or a >= c, the step with the least v does.
 * w stays while the bound is below unmoved_bound(w). The test needs no square
 * root or division by an element:
 *     (coef |m| (1 + 1e-5))^2 < T^2 (v + eps^2),  T = unmoved_bound(w) - the slack,
 * since (sqrt(v) + eps)^2 >= v + eps^2. The first element that fails it stops
 * the test, and the quotient of its two sides, r^2, says how many full steps
 * to run before asking again: r^2 shrinks by beta1^2 / beta2 a step while
 * sqrt(v) outweighs eps (faster when not).
 */
inline int64_t steps_until_frozen_sqrt(int64_t cols, const float* w, const float* m,
                                       const float* v, double beta1, double beta2, double eps,
                                       double coef, double num_slack, int64_t n) {
  constexpr int64_t kRetry = 8;  // full steps before asking again when r^2 cannot say
  constexpr double u = 0x1p-24;
  const double a = beta1 * (1.0 + u), c2 = beta2 * (1.0 - u);
  const bool next_bounds_all = a * a < c2;
  const double decay_n = std::pow(c2, static_cast<double>(n));
  const double v_normal = 0x1p-126 / decay_n;  // from here v stays normal for n steps
  const double v_slack = static_cast<double>(n) * 0x1p-149;
  // coef E and the numerator's denormal roundings over eps, and the quotient's.
  const double e_slack = next_bounds_all ? coef * 0x1p-150 / (1.0 - a) : 0.0;
  const double slack = (e_slack + num_slack) / (eps * (1.0 - 1e-6)) + 0x1p-149;
  const double eps2 = eps * eps;
  for (int64_t j = 0; j < cols; ++j) {
    const double half_ulp = unmoved_bound(w[j]);
    if (half_ulp != half_ulp) return n + 1;  // inf or NaN: never frozen
    if (half_ulp == 0.0) return kRetry;      // zero or denormal weight: may still move away
    const double mj = std::fabs(static_cast<double>(m[j])), vj = v[j];
    if (!(mj <= 3.5e38) || !(vj >= 0.0 && vj <= 3.5e38)) return n + 1;
    const double t = half_ulp - slack;
    if (!(t > 0.0)) return kRetry;
    const double num = coef * mj * (1.0 + 1e-5);
    const double v_least = next_bounds_all && vj >= v_normal
                               ? vj : std::max(0.0, vj * decay_n - v_slack);
    const double lhs = num * num, rhs = t * t * (v_least + eps2);
    if (lhs < rhs) continue;
    if (!next_bounds_all) return kRetry;
    const double steps = std::log(lhs / rhs) / std::log(beta2 / (beta1 * beta1));
    return steps < static_cast<double>(n) ? static_cast<int64_t>(steps) + 1 : n + 1;
  }
  return 0;
}

}  // namespace ops
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_FROZEN_WEIGHT_H_
