// Row parsing of LibSVM / svmlight text: one byte range of whole lines into
// growable per-range arrays (a Chunk), stopping at the first malformed token.
//
// The grammar follows sklearn.datasets.load_svmlight_file: a line is split at
// '\n'; everything from the first '#' is a comment; tokens are separated by
// ASCII whitespace (space, \t, \r, \v, \f); the first token is the label
// (a comma separated list with GS_LIBSVM_MULTILABEL, where a first token with
// a ':' means "no label"); an optional "qid:<int>" follows; then index:value
// pairs. Numbers are lexed by number_lexer.h. Every read is bounded by the
// range end, so arbitrary bytes (NULs included) are safe.
#ifndef GLUON_SPARSE_CSRC_IO_LIBSVM_ROWS_H_
#define GLUON_SPARSE_CSRC_IO_LIBSVM_ROWS_H_

#include <cstdint>
#include <limits>
#include <vector>

#include "libsvm_parser.h"

namespace gluon_sparse {
namespace io {

constexpr int64_t kNoIndex = std::numeric_limits<int64_t>::max();

struct ErrorInfo {
  int32_t code = GS_LIBSVM_OK;
  int64_t token_offset = 0;
  int64_t token_length = 0;
  int64_t detail = 0;
};

// Rows parsed by one thread from its byte range.
template <typename Real>
struct Chunk {
  std::vector<Real> values;
  std::vector<int64_t> indices;
  std::vector<int64_t> row_end;    // nnz within the chunk after each row
  std::vector<double> labels;
  std::vector<int64_t> label_end;  // labels within the chunk after each row (multilabel)
  int64_t min_index = kNoIndex;
  int64_t max_index = -1;
  ErrorInfo error;
};

// Parses the lines starting in buf[begin, end) into *chunk; on a malformed
// token it records chunk->error (offsets from buf) and stops.
// Instantiated for float and double.
template <typename Real>
void ParseRange(const char* buf, int64_t begin, int64_t end, int32_t flags, Chunk<Real>* chunk);

}  // namespace io
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_IO_LIBSVM_ROWS_H_
