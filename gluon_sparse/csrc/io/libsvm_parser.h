// Plain C ABI of the parallel LibSVM / svmlight parser (libgluon_sparse_io.so).
//
// Python owns every output array: it calls gluon_sparse_libsvm_parse() on a byte
// buffer, reads the sizes with gluon_sparse_libsvm_counts(), allocates numpy arrays of
// exactly those sizes and passes them with their sizes to gluon_sparse_libsvm_copy().
// The parser keeps its own intermediate buffers inside the opaque handle and
// never holds a pointer to Python memory after a call returns. No function
// throws or aborts: failures come back as a GsLibSVMError code plus the byte
// offset and length of the offending token, from which Python builds a
// message naming file, line and token.
#ifndef GLUON_SPARSE_CSRC_IO_LIBSVM_PARSER_H_
#define GLUON_SPARSE_CSRC_IO_LIBSVM_PARSER_H_

#include <cstdint>

extern "C" {

// Parse options (bit flags).
enum GsLibSVMFlags {
  GS_LIBSVM_MULTILABEL = 1,       // the label token is a comma separated list
  GS_LIBSVM_REJECT_ZERO = 2,      // indices are one-based: index 0 is an error
  GS_LIBSVM_REQUIRE_SORTED = 4,   // unsorted rows are an error instead of being sorted
  GS_LIBSVM_FLOAT32 = 8,          // values are stored as float32 (else float64)
};

enum GsLibSVMError {
  GS_LIBSVM_OK = 0,
  GS_LIBSVM_OUT_OF_MEMORY = 1,
  GS_LIBSVM_BAD_LABEL = 2,        // label token is not a number
  GS_LIBSVM_MISSING_COLON = 3,    // feature token is not index:value
  GS_LIBSVM_BAD_INDEX = 4,        // index is not an integer
  GS_LIBSVM_NEGATIVE_INDEX = 5,
  GS_LIBSVM_ZERO_INDEX = 6,       // index 0 with GS_LIBSVM_REJECT_ZERO
  GS_LIBSVM_BAD_VALUE = 7,        // value is not a number
  GS_LIBSVM_UNSORTED = 8,         // with GS_LIBSVM_REQUIRE_SORTED
  GS_LIBSVM_DUPLICATE_INDEX = 9,  // the same index twice in one row
  GS_LIBSVM_BAD_QID = 10,         // qid:<not an integer>
  GS_LIBSVM_INDEX_TOO_LARGE = 11, // does not fit in int64
  GS_LIBSVM_BAD_ARGUMENT = 12,    // sizes passed to gluon_sparse_libsvm_copy do not match
};

// Where and why parsing stopped; offsets are bytes from the buffer start.
struct GsLibSVMErrorInfo {
  int32_t code;
  int64_t token_offset;
  int64_t token_length;
  int64_t detail;  // the offending index for UNSORTED / DUPLICATE_INDEX
};

// Parses buf[0, length) with up to num_threads threads (fewer for a small
// buffer, see gluon_sparse_libsvm_team_size). Returns a handle
// (free it with gluon_sparse_libsvm_free) or nullptr when not even the handle could be
// allocated. Check gluon_sparse_libsvm_error() before reading counts.
void* gluon_sparse_libsvm_parse(const char* buf, int64_t length, int32_t flags,
                                int32_t num_threads);

// Copies the first error (lowest byte offset) into *info; returns its code.
int32_t gluon_sparse_libsvm_error(const void* handle, GsLibSVMErrorInfo* info);

// Sizes of the parsed data. min_index is INT64_MAX and max_index -1 when the
// buffer holds no feature; num_labels equals num_rows unless multilabel.
void gluon_sparse_libsvm_counts(const void* handle, int64_t* num_rows, int64_t* nnz,
                                int64_t* num_labels, int64_t* min_index, int64_t* max_index);

// Fills caller-allocated arrays. values: nnz floats (float32 or float64 as
// parsed); indices: nnz integers of index_bytes (4 or 8) bytes, each reduced
// by index_shift; indptr: num_rows + 1 integers of index_bytes bytes;
// labels: num_labels doubles; label_ptr: num_rows + 1 int64 (multilabel only,
// may be null otherwise). indptr starts at indptr_base (to append after
// earlier files). Sizes must equal gluon_sparse_libsvm_counts(), else
// GS_LIBSVM_BAD_ARGUMENT is returned and nothing is written.
int32_t gluon_sparse_libsvm_copy(const void* handle, void* values, void* indices, void* indptr,
                                 int32_t index_bytes, int64_t index_shift, int64_t indptr_base,
                                 double* labels, int64_t* label_ptr, int64_t num_rows, int64_t nnz,
                                 int64_t num_labels);

void gluon_sparse_libsvm_free(void* handle);

// 1-based number of the line holding byte `offset` of buf.
int64_t gluon_sparse_libsvm_line_of_offset(const char* buf, int64_t length, int64_t offset);

// Byte offset of the start of the line of data row `row` (0-based; comment
// and blank lines are not rows), or -1 if the buffer has fewer rows.
int64_t gluon_sparse_libsvm_row_offset(const char* buf, int64_t length, int64_t row);

// Number of data rows in buf (lines that are neither blank nor comments).
int64_t gluon_sparse_libsvm_count_rows(const char* buf, int64_t length);

// Threads gluon_sparse_libsvm_parse uses for `length` bytes with num_threads allowed:
// 1 below the grain size (libsvm_parallel.h), at most length / grain above.
int32_t gluon_sparse_libsvm_team_size(int64_t length, int32_t num_threads);

}  // extern "C"

#endif  // GLUON_SPARSE_CSRC_IO_LIBSVM_PARSER_H_
