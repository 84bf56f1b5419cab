/*!
 * Repeated float32 decay x -> fl(b * x), n times, bit for bit as n float
 * multiplications would leave it (round to nearest even, denormals included),
 * at close to one vector multiply per 8 elements a step.
 *
 * Why it exists: a row left behind by deferred Adam replays the steps it
 * missed; once its weights can no longer move (adam_deferred_kernels.h, "fast
 * replay") what is left is each mean and var element multiplied by beta1 or
 * beta2 once per missed step. n roundings have no closed form, so the steps
 * are done one by one; how fast they go decides the cost of a row that comes
 * back after thousands of steps (benchmarks/bench_replay.py).
 *
 * How (geometric_decay.cc):
 *  - a block of 32 or 64 values is held in vector registers across the steps
 *    (the loop over steps inside the loop over blocks);
 *  - while every value of a block stays above T, the least float whose product
 *    with b is normal, a step is one vector multiply;
 *  - a value below T, where x86 takes a microcode assist on every float
 *    operation that reads or makes a denormal (30-45x slower), is k units of
 *    2^-149 with k < 2^24 its bit pattern (T < 2 FLT_MIN); its next value is
 *    rne(k * b) units, computed exactly in double (24 x 24 bits) and rounded
 *    to an integer by adding and subtracting 1.5 * 2^52: the float
 *    multiplication's own rounding. No float operation touches a denormal;
 *  - a value that a step leaves unchanged is at its fixed point (zero, or a
 *    few denormal units) and is set aside; a block whose values all are stops.
 *
 * Compiled twice, for baseline x86-64 and for AVX2, and picked at run time
 * (host_simd.h); both paths are bitwise equal to the plain loop
 * (tests/test_grain.py).
 */
#ifndef GLUON_SPARSE_CSRC_OPS_GEOMETRIC_DECAY_H_
#define GLUON_SPARSE_CSRC_OPS_GEOMETRIC_DECAY_H_

#include <cstdint>

namespace gluon_sparse {
namespace ops {

/*!
 * \brief x[j] = fl(b * x[j]), n times, for j < count.
 *
 * Exact for every float32 input (signed zeros, denormals, infinities, NaNs)
 * when 0.5 < b < 1; any other b takes the plain loop.
 */
void decay_geometric(int64_t count, float* x, float b, int64_t n);

/*!
 * \brief n >= 1 steps of x[j] = fl(b * x[j]) + (+0), for j < count: the step
 *        without gradient of an optimizer state whose gradient term is +0 (the
 *        frozen replays' m and v, plain RMSProp's n).
 *
 * The first addition takes a -0 to +0; after it the steps are decay_geometric.
 * Exact when no nonzero x can round to -0 on the way: 0.5 < b < 1 (a nonzero
 * x never reaches zero), or x >= 0.
 */
inline void decay_geometric_adding_zero(int64_t count, float* x, float b, int64_t n) {
  for (int64_t j = 0; j < count; ++j) {
    if (x[j] == 0.0f) x[j] = 0.0f;
  }
  decay_geometric(count, x, b, n);
}

}  // namespace ops
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_GEOMETRIC_DECAY_H_
