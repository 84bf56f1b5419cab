/*!
 * Column sums of a (rows, cols) matrix in MXNet's own order and rounding.
 *
 * MXNet sums a broadcast operand's gradient (the bias gradient of
 * `dot(x, W) + b`: _backward_broadcast_add, ReduceWithExtraMem with
 * mshadow::red::sum) one output at a time, over the reduced rows in order,
 * with Kahan compensation whose residual is reset when the sum overflows.
 * gluon_sparse_dot's fused bias gradient does the same arithmetic in the same
 * order, so that a model trained with the fused op is bitwise the model
 * trained with MXNet's separate bias add. Shared by the CPU and CUDA code.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_COLUMN_SUM_H_
#define GLUON_SPARSE_CSRC_OPS_COLUMN_SUM_H_

#include <cmath>
#include <cstdint>

#include "optim_rule.h"  // GS_HOST_DEVICE and the exact arithmetic (ops::add, ops::sub)

namespace gluon_sparse {

/*! \brief One step of mshadow::red::sum's compensated Reduce(sum, x, residual). */
template <typename T>
GS_HOST_DEVICE void kahan_add(T* sum, T* residual, T x) {
  const T y = ops::sub(x, *residual);
  const T t = ops::add(*sum, y);
#if defined(__CUDA_ARCH__)
  const bool overflowed = isinf(t);
#else
  const bool overflowed = std::isinf(t);
#endif
  *residual = overflowed ? T(0) : ops::sub(ops::sub(t, *sum), y);
  *sum = t;
}

#if !defined(__CUDACC__)
/*!
 * \brief out[c] = sum over r of m[r, c], for columns [begin, end), as MXNet sums them.
 *
 * Rows outer and columns inner, so that the matrix is read once, in order;
 * each column's additions still happen in row order.
 */
template <typename T>
void column_sums(const T* m, int64_t rows, int64_t cols, int64_t begin, int64_t end, T* out) {
  constexpr int64_t kBlock = 256;
  T sum[kBlock], residual[kBlock];
  for (int64_t c0 = begin; c0 < end; c0 += kBlock) {
    const int64_t n = end - c0 < kBlock ? end - c0 : kBlock;
    for (int64_t i = 0; i < n; ++i) sum[i] = residual[i] = T(0);
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = m + r * cols + c0;
      for (int64_t i = 0; i < n; ++i) kahan_add(&sum[i], &residual[i], row[i]);
    }
    for (int64_t i = 0; i < n; ++i) out[c0 + i] = sum[i];
  }
}
#endif

}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_COLUMN_SUM_H_
