// Line-index helpers of the LibSVM C ABI (libsvm_parser.h): map byte offsets
// and data rows of a buffer to line numbers, for error messages that name the
// line. They scan with memchr and never read past the buffer.
#include <algorithm>
#include <cstring>

#include "libsvm_parser.h"
#include "number_lexer.h"

using gluon_sparse::io::IsSpace;

namespace {

// True when [p, e) holds a data row: something before any '#' that is not
// whitespace (comment and blank lines are not rows).
bool IsDataLine(const char* p, const char* e) {
  const char* hash = static_cast<const char*>(std::memchr(p, '#', e - p));
  const char* content_end = hash ? hash : e;
  for (const char* q = p; q < content_end; ++q) {
    if (!IsSpace(*q)) return true;
  }
  return false;
}

}  // namespace

extern "C" {

int64_t gluon_sparse_libsvm_line_of_offset(const char* buf, int64_t length, int64_t offset) {
  const char* end = buf + std::clamp<int64_t>(offset, 0, length);
  int64_t line = 1;
  for (const char* p = buf; p < end;) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
    if (!nl) break;
    ++line;
    p = nl + 1;
  }
  return line;
}

int64_t gluon_sparse_libsvm_row_offset(const char* buf, int64_t length, int64_t row) {
  const char* p = buf;
  const char* stop = buf + length;
  int64_t seen = 0;
  while (p < stop) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', stop - p));
    const char* e = nl ? nl : stop;
    if (IsDataLine(p, e)) {
      if (seen == row) return p - buf;
      ++seen;
    }
    p = nl ? nl + 1 : stop;
  }
  return -1;
}

int64_t gluon_sparse_libsvm_count_rows(const char* buf, int64_t length) {
  const char* p = buf;
  const char* stop = buf + std::max<int64_t>(length, 0);
  int64_t rows = 0;
  while (p < stop) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', stop - p));
    const char* e = nl ? nl : stop;
    if (IsDataLine(p, e)) ++rows;
    p = nl ? nl + 1 : stop;
  }
  return rows;
}

}  // extern "C"
