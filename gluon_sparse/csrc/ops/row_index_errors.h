/*!
 * The error message of an invalid row index in a row_sparse gradient, shared by
 * the eager (adam_op.cc) and deferred (adam_deferred_op.cc) Adam operators and
 * the standalone GPU harness (benchmarks/gpu/), so that all name the problem
 * the same way. Plain C++ (no lib_api.h), so the harness can include it.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_ROW_INDEX_ERRORS_H_
#define GLUON_SPARSE_CSRC_OPS_ROW_INDEX_ERRORS_H_

#include <cstdint>
#include <sstream>
#include <string>

namespace gluon_sparse {

/*!
 * \brief Describe the first invalid gradient row index.
 * \param position position of the index in the gradient's index array
 * \param value the invalid index
 * \param previous the index before it (unused when position is 0)
 * \param num_rows rows of the weight
 */
inline std::string invalid_row_index_message(int64_t position, int64_t value, int64_t previous,
                                             int64_t num_rows) {
  std::ostringstream message;
  if (value < 0 || value >= num_rows) {
    message << "grad row index " << value << " at position " << position
            << " is out of range for a weight of " << num_rows << " rows";
  } else {
    message << "grad row indices must be sorted and unique, but index " << value
            << " at position " << position << " follows " << previous;
  }
  return message.str();
}

}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_ROW_INDEX_ERRORS_H_
