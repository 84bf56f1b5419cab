/*!
 * What both harness entry-point files (adam_harness.cu, adam_deferred_harness.cu)
 * do around a launch: the operators' gradient-index check, and a launch
 * status turned into the text the entry points return.
 */
#ifndef GLUON_SPARSE_BENCHMARKS_GPU_HARNESS_CHECKS_H_
#define GLUON_SPARSE_BENCHMARKS_GPU_HARNESS_CHECKS_H_

#include <cstdint>
#include <cstdio>

#include "adam_kernels_cuda.h"
#include "row_index_errors.h"

namespace harness {

using gluon_sparse::adam::cuda::LaunchStatus;

/*!
 * \brief Whether `status` failed; if so "CUDA error: ..." (or "CUDA error while
 *        <what>: ...") is written to `error`.
 */
inline bool failed(const LaunchStatus& status, const char* what, char* error, int error_len) {
  if (status.ok()) return false;
  if (what != nullptr) {
    std::snprintf(error, error_len, "CUDA error while %s: %s", what, status.error);
  } else {
    std::snprintf(error, error_len, "CUDA error: %s", status.error);
  }
  return true;
}

/*!
 * \brief The operators' check of the gradient's row indices (in range, sorted,
 *        unique); false with the operators' message in `error` when one is not.
 */
inline bool indices_valid(const int64_t* indices, int64_t nnz, int64_t num_rows, void* workspace,
                          void* stream, char* error, int error_len) {
  int64_t bad = nnz, value = 0, previous = 0;
  const auto status = gluon_sparse::adam::cuda::find_invalid_index(
      indices, nnz, num_rows, workspace, stream, &bad, &value, &previous);
  if (failed(status, "checking indices", error, error_len)) return false;
  if (bad < nnz) {
    std::snprintf(error, error_len, "%s",
                  gluon_sparse::invalid_row_index_message(bad, value, previous, num_rows).c_str());
    return false;
  }
  return true;
}

/*! \brief The deferred operators' history bound: record `step` must exist. */
inline bool check_capacity(int64_t step, int64_t capacity, char* error, int error_len) {
  if (step < 0 || step >= capacity) {
    std::snprintf(error, error_len, "step %lld does not fit a history of %lld records",
                  static_cast<long long>(step), static_cast<long long>(capacity));
    return false;
  }
  return true;
}

}  // namespace harness

#endif  // GLUON_SPARSE_BENCHMARKS_GPU_HARNESS_CHECKS_H_
