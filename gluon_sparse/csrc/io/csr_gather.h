// Plain C ABI: gather rows of a CSR matrix into a new CSR batch (libgluon_sparse_io.so).
//
// Used by the data loader to assemble shuffled batches. The caller owns every
// array; gluon_sparse_csr_gather_indptr() computes the batch's row pointers (and so its
// nnz, out_indptr[n]) so the caller can allocate the rest for
// gluon_sparse_csr_gather_fill(). Output indices and row pointers are int64, MXNet's
// CSR index type, so no conversion pass is needed afterwards.
#ifndef GLUON_SPARSE_CSRC_IO_CSR_GATHER_H_
#define GLUON_SPARSE_CSRC_IO_CSR_GATHER_H_

#include <cstdint>

extern "C" {

// Fills out_indptr[0..n] for rows `rows[0..n)` of a matrix with num_rows rows
// and nnz stored entries whose row pointers are `indptr` (index_bytes 4 or 8
// per entry). Returns 0, or -1 with *bad_position set to the first i whose
// rows[i] is outside [0, num_rows), or -2 for an invalid index_bytes or a
// row pointer outside [0, nnz] or decreasing.
int32_t gluon_sparse_csr_gather_indptr(const void* indptr, int32_t index_bytes, int64_t num_rows,
                             int64_t nnz, const int64_t* rows, int64_t n, int64_t* out_indptr,
                             int64_t* bad_position);

// Copies the rows' indices (widened to int64) and values (value_bytes per
// value, copied as bytes) after gluon_sparse_csr_gather_indptr() succeeded with the
// same arguments. out_nnz must equal out_indptr[n]; returns 0 or -2.
int32_t gluon_sparse_csr_gather_fill(const void* indptr, const void* indices, const void* values,
                           int32_t index_bytes, int32_t value_bytes, const int64_t* rows,
                           int64_t n, const int64_t* out_indptr, int64_t out_nnz,
                           int64_t* out_indices, void* out_values);

}  // extern "C"

#endif  // GLUON_SPARSE_CSRC_IO_CSR_GATHER_H_
