// C ABI of the LibSVM / svmlight parser (libsvm_parser.h): argument checks
// and the hand-over between the opaque handle and the caller's arrays. The
// work is done by libsvm_parallel.cc (threads), libsvm_rows.cc (rows) and
// number_lexer.h (numbers); the line-index helpers are in line_index.cc.
#include "libsvm_parser.h"

#include <limits>
#include <new>

#include "libsvm_parallel.h"

using gluon_sparse::io::CopyParsed;
using gluon_sparse::io::ErrorInfo;
using gluon_sparse::io::Handle;
using gluon_sparse::io::HandleBase;
using gluon_sparse::io::ParseBuffer;

extern "C" {

void* gluon_sparse_libsvm_parse(const char* buf, int64_t length, int32_t flags,
                                int32_t num_threads) {
  if (length < 0 || (length > 0 && buf == nullptr)) length = 0;
  return ParseBuffer(buf, length, flags, num_threads);
}

int32_t gluon_sparse_libsvm_error(const void* handle, GsLibSVMErrorInfo* info) {
  if (!handle) return GS_LIBSVM_OUT_OF_MEMORY;
  const ErrorInfo& e = static_cast<const HandleBase*>(handle)->error;
  if (info) {
    info->code = e.code;
    info->token_offset = e.token_offset;
    info->token_length = e.token_length;
    info->detail = e.detail;
  }
  return e.code;
}

void gluon_sparse_libsvm_counts(const void* handle, int64_t* num_rows, int64_t* nnz,
                                int64_t* num_labels, int64_t* min_index, int64_t* max_index) {
  const HandleBase* h = static_cast<const HandleBase*>(handle);
  *num_rows = h->num_rows;
  *nnz = h->nnz;
  *num_labels = h->num_labels;
  *min_index = h->min_index;
  *max_index = h->max_index;
}

int32_t gluon_sparse_libsvm_copy(const void* handle, void* values, void* indices, void* indptr,
                                 int32_t index_bytes, int64_t index_shift, int64_t indptr_base,
                                 double* labels, int64_t* label_ptr, int64_t num_rows, int64_t nnz,
                                 int64_t num_labels) {
  const HandleBase* h = static_cast<const HandleBase*>(handle);
  if (!h || h->error.code != GS_LIBSVM_OK) return GS_LIBSVM_BAD_ARGUMENT;
  const bool multilabel = h->flags & GS_LIBSVM_MULTILABEL;
  if (num_rows != h->num_rows || nnz != h->nnz || num_labels != h->num_labels ||
      (index_bytes != 4 && index_bytes != 8) || !indptr ||
      (nnz > 0 && (!values || !indices)) || (num_labels > 0 && !labels) ||
      (multilabel && !label_ptr))
    return GS_LIBSVM_BAD_ARGUMENT;
  if (index_bytes == 4) {
    // Every stored index and indptr entry must fit in int32.
    const int64_t int32_max = std::numeric_limits<int32_t>::max();
    if (indptr_base < 0 || indptr_base + nnz > int32_max) return GS_LIBSVM_BAD_ARGUMENT;
    if (nnz > 0 && (h->max_index - index_shift > int32_max || h->min_index - index_shift < 0))
      return GS_LIBSVM_BAD_ARGUMENT;
  }
  try {
    if (h->flags & GS_LIBSVM_FLOAT32)
      return CopyParsed(*static_cast<const Handle<float>*>(h), static_cast<float*>(values),
                        indices, indptr, index_bytes, index_shift, indptr_base, labels, label_ptr);
    return CopyParsed(*static_cast<const Handle<double>*>(h), static_cast<double*>(values),
                      indices, indptr, index_bytes, index_shift, indptr_base, labels, label_ptr);
  } catch (const std::bad_alloc&) {
    return GS_LIBSVM_OUT_OF_MEMORY;
  }
}

void gluon_sparse_libsvm_free(void* handle) { delete static_cast<HandleBase*>(handle); }

int32_t gluon_sparse_libsvm_team_size(int64_t length, int32_t num_threads) {
  return gluon_sparse::io::ParseTeamSize(length, num_threads);
}

}  // extern "C"
