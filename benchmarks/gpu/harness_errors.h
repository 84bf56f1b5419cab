/*!
 * Error text shared by the harness entry points (adam_harness.cu,
 * adam_deferred_harness.cu): the same words as the operators' MXNetError for
 * an invalid gradient row index (gluon_sparse/csrc/ops/row_index_errors.h).
 */
#ifndef GLUON_SPARSE_BENCHMARKS_GPU_HARNESS_ERRORS_H_
#define GLUON_SPARSE_BENCHMARKS_GPU_HARNESS_ERRORS_H_

#include <cstdint>
#include <cstdio>

/*! \brief Describe the invalid index `value` at `position` (after `previous`) into `error`. */
inline void format_invalid_index(char* error, int error_len, int64_t position, int64_t value,
                                 int64_t previous, int64_t num_rows) {
  if (value < 0 || value >= num_rows) {
    std::snprintf(error, error_len, "grad row index %lld at position %lld is out of range "
                  "for a weight of %lld rows", static_cast<long long>(value),
                  static_cast<long long>(position), static_cast<long long>(num_rows));
  } else {
    std::snprintf(error, error_len, "grad row indices must be sorted and unique, but index "
                  "%lld at position %lld follows %lld", static_cast<long long>(value),
                  static_cast<long long>(position), static_cast<long long>(previous));
  }
}

#endif  // GLUON_SPARSE_BENCHMARKS_GPU_HARNESS_ERRORS_H_
