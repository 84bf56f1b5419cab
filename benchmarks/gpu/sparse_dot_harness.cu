/*!
 * C entry points of the standalone GPU harness for `gluon_sparse_dot`'s CUDA
 * kernels (gluon_sparse/csrc/ops/sparse_dot.cu, launchers in sparse_dot.h),
 * called as sparse_dot_gpu.cc calls them: the forward (CSR x dense + bias),
 * the row_sparse weight gradient in two steps (its rows, which waits for their
 * count, then its values) and the bias gradient.
 *
 * The element type is named by its size (4: float32, 8: float64). Every
 * function returns 0 on success, or 1 with the launcher's message (a bad CSR
 * entry, a CUDA error) in `error`.
 */
#include <cstdint>
#include <cstdio>
#include <string>

#include "sparse_dot.h"

namespace sd = gluon_sparse::sparse_dot_cuda;

namespace {

int report(const std::string& message, char* error, int error_len) {
  if (message.empty()) return 0;
  std::snprintf(error, error_len, "%s", message.c_str());
  return 1;
}

bool known_type(int dtype_bytes, char* error, int error_len) {
  if (dtype_bytes == 4 || dtype_bytes == 8) return true;
  std::snprintf(error, error_len, "elements of %d bytes: only float32 (4) and float64 (8)",
                dtype_bytes);
  return false;
}

}  // namespace

extern "C" {

/*! \brief Bytes of device workspace the forward needs. */
int64_t gluon_sparse_harness_dot_forward_workspace_bytes(int64_t batch, int64_t nnz) {
  return static_cast<int64_t>(sd::ForwardWorkspaceBytes(batch, nnz));
}

/*! \brief Bytes of device workspace the weight gradient (both steps) needs. */
int64_t gluon_sparse_harness_dot_weight_grad_workspace_bytes(int64_t batch, int64_t nnz) {
  return static_cast<int64_t>(sd::WeightGradWorkspaceBytes(batch, nnz));
}

/*!
 * \brief out (batch x units) = dot(csr, weight) [+ bias]; `squared`: dot(csr^2,
 *        weight^2). `indptr` may be null for a batch without entries.
 */
int gluon_sparse_harness_dot_forward(int dtype_bytes, const int64_t* indptr, const int64_t* cols,
                                     const void* vals, int64_t batch, int64_t nnz,
                                     const void* weight, int64_t in_units, int64_t units,
                                     int squared, const void* bias, void* out, void* workspace,
                                     void* stream, char* error, int error_len) {
  if (!known_type(dtype_bytes, error, error_len)) return 1;
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype_bytes == 4) {
    return report(sd::Forward<float>(indptr, cols, static_cast<const float*>(vals), batch, nnz,
                                     static_cast<const float*>(weight), in_units, units,
                                     squared != 0, static_cast<const float*>(bias),
                                     static_cast<float*>(out), workspace, s),
                  error, error_len);
  }
  return report(sd::Forward<double>(indptr, cols, static_cast<const double*>(vals), batch, nnz,
                                    static_cast<const double*>(weight), in_units, units,
                                    squared != 0, static_cast<const double*>(bias),
                                    static_cast<double*>(out), workspace, s),
                error, error_len);
}

/*!
 * \brief Weight gradient, step 1: validates the CSR, sorts its columns and
 *        writes the number of distinct ones to `*num_rows` (host; waits).
 *        A batch without entries has none (the operator's early return).
 */
int gluon_sparse_harness_dot_weight_grad_rows(const int64_t* indptr, const int64_t* cols,
                                              int64_t batch, int64_t nnz, int64_t in_units,
                                              void* workspace, int64_t* num_rows, void* stream,
                                              char* error, int error_len) {
  *num_rows = 0;
  if (nnz == 0) return 0;
  return report(sd::WeightGradRows(indptr, cols, batch, nnz, in_units, workspace, num_rows,
                                   static_cast<cudaStream_t>(stream)),
                error, error_len);
}

/*!
 * \brief Weight gradient, step 2: `row_ids` (num_rows) and `grad` (num_rows x
 *        units), from the workspace step 1 filled.
 */
int gluon_sparse_harness_dot_weight_grad_values(int dtype_bytes, const void* vals, int64_t nnz,
                                                const void* ograd, const void* weight,
                                                int64_t units, int squared,
                                                const void* workspace, int64_t num_rows,
                                                int64_t* row_ids, void* grad, void* stream,
                                                char* error, int error_len) {
  if (!known_type(dtype_bytes, error, error_len)) return 1;
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype_bytes == 4) {
    return report(sd::WeightGradValues<float>(
                      static_cast<const float*>(vals), nnz, static_cast<const float*>(ograd),
                      static_cast<const float*>(weight), units, squared != 0, workspace,
                      num_rows, row_ids, static_cast<float*>(grad), s),
                  error, error_len);
  }
  return report(sd::WeightGradValues<double>(
                    static_cast<const double*>(vals), nnz, static_cast<const double*>(ograd),
                    static_cast<const double*>(weight), units, squared != 0, workspace, num_rows,
                    row_ids, static_cast<double*>(grad), s),
                error, error_len);
}

/*! \brief grad (units) = column sums of ograd (batch x units), MXNet's order and rounding. */
int gluon_sparse_harness_dot_bias_grad(int dtype_bytes, const void* ograd, int64_t batch,
                                       int64_t units, void* grad, void* stream, char* error,
                                       int error_len) {
  if (!known_type(dtype_bytes, error, error_len)) return 1;
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype_bytes == 4) {
    return report(sd::BiasGrad<float>(static_cast<const float*>(ograd), batch, units,
                                      static_cast<float*>(grad), s),
                  error, error_len);
  }
  return report(sd::BiasGrad<double>(static_cast<const double*>(ograd), batch, units,
                                     static_cast<double*>(grad), s),
                error, error_len);
}

}  // extern "C"
