/*!
 * CPU compute of `gluon_sparse_adam_update` (see adam_op.cc): one pass over weight,
 * mean and var, contiguous blocks of rows per thread (as many threads as the
 * work pays for, omp_threads.h), walking the sorted gradient indices alongside.
 */
#include <cstdint>
#include <vector>

#include "adam_kernels.h"
#include "adam_op.h"
#include "omp_threads.h"
#include "row_index_errors.h"

using namespace mxnet::ext;

namespace gluon_sparse {
namespace adam {
namespace {

/*!
 * \brief While alive, the calling thread flushes denormal results to zero and
 *        reads denormal inputs as zero (x86 MXCSR FTZ and DAZ), if `on`.
 *
 * Rows absent from the gradient decay their mean by beta1 every step: after
 * ~800 such steps it passes through the denormal range, where x86 arithmetic
 * is 30-45x slower (measured on this op). Flushing changes only values below
 * 1.2e-38 (float32), so results stay within any tolerance of MXNet's but are
 * no longer bitwise equal: hence opt-in. A no-op off x86.
 */
class FlushDenormals {
 public:
  explicit FlushDenormals(bool on) : on_(on) {
#if GS_HOST_SIMD
    if (on_) {
      saved_ = _mm_getcsr();
      _mm_setcsr(saved_ | kFlushToZero | kDenormalsAreZero);
    }
#endif
  }
  ~FlushDenormals() {
#if GS_HOST_SIMD
    if (on_) _mm_setcsr(saved_);
#endif
  }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  static constexpr unsigned kFlushToZero = 0x8000;
  static constexpr unsigned kDenormalsAreZero = 0x0040;
  bool on_;
  unsigned saved_ = 0;
};

/*!
 * \brief Update rows [begin, end), walking the gradient indices alongside from
 *        the first one >= begin (found by binary search).
 */
template <bool kClip, typename T>
void update_rows(const AdamScalars<T>& s, const UpdateArgs& a, int64_t begin, int64_t end) {
  T* weight = static_cast<T*>(a.weight);
  T* mean = static_cast<T*>(a.mean);
  T* var = static_cast<T*>(a.var);
  const T* grad = static_cast<const T*>(a.grad);
  const int64_t cols = a.cols;
  int64_t k = lower_bound(a.indices, a.nnz, begin);
  for (int64_t row = begin; row < end; ++row) {
    const int64_t offset = row * cols;
    if (k < a.nnz && a.indices[k] == row) {
      update_row_with_grad<kClip>(cols, weight + offset, mean + offset, var + offset,
                                      grad + k * cols, s);
      ++k;
    } else {
      update_row_without_grad<kClip>(cols, weight + offset, mean + offset, var + offset, s);
    }
  }
}

/*!
 * \brief CPU kernel: each OpenMP thread owns a contiguous block of rows, so the
 *        pass over weight/mean/var is one sequential stream per thread.
 */
template <bool kClip, typename T>
void update_cpu(const AdamScalars<T>& s, const UpdateArgs& a, bool flush_denormals) {
  const int team = gluon_sparse::team_size(a.num_rows * a.cols, a.num_rows);
  gluon_sparse::parallel_blocks(a.num_rows, team, [&](int64_t begin, int64_t end) {
    const FlushDenormals mode(flush_denormals);  // MXCSR is per thread
    update_rows<kClip, T>(s, a, begin, end);
  });
}

template <typename T>
void update_cpu(const AdamParams& p, const UpdateArgs& a) {
  const auto s = make_scalars<T>(p.lr, p.beta1, p.beta2, p.epsilon, p.wd, p.rescale_grad,
                                     p.clip_gradient);
  // MXNet clips when clip_gradient >= 0 (its default, -1, disables clipping).
  if (p.clip_gradient >= 0.0f) {
    update_cpu<true, T>(s, a, p.flush_denormals);
  } else {
    update_cpu<false, T>(s, a, p.flush_denormals);
  }
}

}  // namespace

MXReturnValue compute_cpu(const ops::Attrs& attrs,
                          std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                          const OpResource& res) {
  AdamParams p;
  UpdateArgs a;
  if (!parse_params(attrs, &p) || !collect_args(*inputs, *outputs, &a)) return MX_FAIL;
  // Validate every index before any memory is touched.
  const int64_t bad = first_invalid_index(a.indices, a.nnz, a.num_rows);
  if (bad < a.nnz) {
    GS_ERROR_MSG << kOpName << ": "
                 << gluon_sparse::invalid_row_index_message(bad, a.indices[bad],
                                                            bad > 0 ? a.indices[bad - 1] : 0,
                                                            a.num_rows);
    return MX_FAIL;
  }
  ops::with_float_type(a.dtype, [&](auto zero) { update_cpu<decltype(zero)>(p, a); });
  return MX_SUCCESS;
}

}  // namespace adam
}  // namespace gluon_sparse
