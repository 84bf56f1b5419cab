/*!
 * The error message of an invalid row index in a row_sparse gradient, shared by
 * the eager (adam_op.cc) and deferred (adam_deferred_op.cc) Adam operators so
 * that both name the problem the same way.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_ROW_INDEX_ERRORS_H_
#define GLUON_SPARSE_CSRC_OPS_ROW_INDEX_ERRORS_H_

#include <cstdint>

#include "mxnet/lib_api.h"

namespace gluon_sparse {

/*!
 * \brief Report the first invalid gradient row index through MX_ERROR_MSG.
 * \param op operator name, first word of the message
 * \param position position of the index in the gradient's index array
 * \param value the invalid index
 * \param previous the index before it (unused when position is 0)
 * \param num_rows rows of the weight
 */
inline void report_invalid_row_index(const char* op, int64_t position, int64_t value,
                                     int64_t previous, int64_t num_rows) {
  if (value < 0 || value >= num_rows) {
    MX_ERROR_MSG << op << ": grad row index " << value << " at position " << position
                 << " is out of range for a weight of " << num_rows << " rows";
  } else {
    MX_ERROR_MSG << op << ": grad row indices must be sorted and unique, but index " << value
                 << " at position " << position << " follows " << previous;
  }
}

}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_ROW_INDEX_ERRORS_H_
