// Parallel LibSVM / svmlight parser behind the C ABI of libsvm_parser.h.
//
// The grammar follows sklearn.datasets.load_svmlight_file: a line is split at
// '\n'; everything from the first '#' is a comment; tokens are separated by
// ASCII whitespace (space, \t, \r, \v, \f); the first token is the label
// (a comma separated list with GS_LIBSVM_MULTILABEL, where a first token with
// a ':' means "no label"); an optional "qid:<int>" follows; then index:value
// pairs. Numbers are stricter than Python's float()/int() in one respect:
// digit-group underscores ("1_000") are rejected.
//
// The buffer is cut into one byte range per thread at line boundaries; each
// thread parses its lines into its own growable arrays, and gs_libsvm_copy
// concatenates them into the caller's arrays (also in parallel). Every read
// is bounded by the range end, so arbitrary bytes (NULs included) are safe.
#include "libsvm_parser.h"

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace {

constexpr int64_t kNoIndex = std::numeric_limits<int64_t>::max();

inline bool IsSpace(char c) {
  // bytes.split()'s whitespace, minus '\n' which already ended the line.
  return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

inline bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Exact powers of ten representable in a double (10^0 .. 10^22).
constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                             1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

// Clinger's fast path for the common short decimals ("0.123456", "3", "1e-3"):
// with at most 15 significant digits the mantissa is exact in a double, and
// so is 10^|e| for |e| <= 22, so one IEEE multiplication or division gives the
// correctly rounded result, the same as strtod/from_chars. Returns false when
// the token is not of that simple form; the caller then uses from_chars.
bool FastParseDouble(const char* p, const char* e, double* out) {
  uint64_t mantissa = 0;
  int digits = 0;        // significant digits accumulated (leading zeros skipped)
  int exponent = 0;      // decimal exponent adjustment from the fraction
  bool any_digit = false;
  for (; p < e && IsDigit(*p); ++p) {
    any_digit = true;
    if (mantissa == 0 && *p == '0') continue;
    if (++digits > 15) return false;
    mantissa = mantissa * 10 + static_cast<uint64_t>(*p - '0');
  }
  if (p < e && *p == '.') {
    for (++p; p < e && IsDigit(*p); ++p) {
      any_digit = true;
      --exponent;
      if (mantissa == 0 && *p == '0') continue;
      if (++digits > 15) return false;
      mantissa = mantissa * 10 + static_cast<uint64_t>(*p - '0');
    }
  }
  if (!any_digit) return false;
  if (p < e && (*p == 'e' || *p == 'E')) {
    ++p;
    bool negative = false;
    if (p < e && (*p == '+' || *p == '-')) {
      negative = *p == '-';
      ++p;
    }
    if (p == e || e - p > 4) return false;
    int value = 0;
    for (; p < e; ++p) {
      if (!IsDigit(*p)) return false;
      value = value * 10 + (*p - '0');
    }
    exponent += negative ? -value : value;
  }
  if (p != e) return false;
  if (mantissa == 0) {
    *out = 0.0;
    return true;
  }
  if (exponent < -22 || exponent > 22) return false;
  const double m = static_cast<double>(mantissa);
  *out = exponent >= 0 ? m * kPow10[exponent] : m / kPow10[-exponent];
  return true;
}

// Parses [s, e) as a whole decimal floating point number (what Python's
// float() accepts, without underscores). Returns false on any other text.
bool ParseDouble(const char* s, const char* e, double* out) {
  const char* p = s;
  bool negative = false;
  if (p < e && (*p == '+' || *p == '-')) {
    negative = *p == '-';
    ++p;
  }
  if (p == e) return false;
  double value = 0.0;
  if (FastParseDouble(p, e, &value)) {
    *out = negative ? -value : value;
    return true;
  }
  const char c = *p;
  // from_chars would accept a second sign, and "nan(...)" which float() does not.
  if (!(IsDigit(c) || c == '.' || c == 'i' || c == 'I' || c == 'n' || c == 'N')) return false;
  if ((c == 'n' || c == 'N') && std::memchr(p, '(', e - p) != nullptr) return false;
  auto result = std::from_chars(p, e, value, std::chars_format::general);
  if (result.ptr != e) return false;
  if (result.ec == std::errc::result_out_of_range) {
    // from_chars leaves the value unset on overflow/underflow; strtod gives
    // +-HUGE_VAL or the correctly rounded (sub)normal, like Python. The token
    // is copied so strtod reads a NUL-terminated string, never past e.
    std::string copy(p, e);
    value = std::strtod(copy.c_str(), nullptr);
  } else if (result.ec != std::errc()) {
    return false;
  }
  *out = negative ? -value : value;
  return true;
}

enum class IntStatus { kOk, kInvalid, kTooLarge };

// Parses [s, e) as a whole base-10 integer with an optional sign.
IntStatus ParseInt(const char* s, const char* e, int64_t* out) {
  const char* p = s;
  bool negative = false;
  if (p < e && (*p == '+' || *p == '-')) {
    negative = *p == '-';
    ++p;
  }
  if (p == e) return IntStatus::kInvalid;
  uint64_t value = 0;
  const uint64_t limit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  bool too_large = false;
  for (; p < e; ++p) {
    if (!IsDigit(*p)) return IntStatus::kInvalid;
    const uint64_t digit = static_cast<uint64_t>(*p - '0');
    if (value > (limit - digit) / 10) too_large = true;
    if (!too_large) value = value * 10 + digit;
  }
  if (too_large) return IntStatus::kTooLarge;
  *out = negative ? -static_cast<int64_t>(value) : static_cast<int64_t>(value);
  return IntStatus::kOk;
}

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

template <typename Real>
class Parser {
 public:
  Parser(const char* buf, int32_t flags, Chunk<Real>* chunk)
      : buf_(buf), flags_(flags), chunk_(chunk) {}

  // Parses the lines starting in [begin, end); stops at the first error.
  void ParseRange(int64_t begin, int64_t end) {
    // Typical LibSVM text spends 12-20 bytes per feature and 100+ per row;
    // reserving that much saves most of the reallocation copies.
    const size_t length = static_cast<size_t>(end - begin);
    chunk_->indices.reserve(length / 16);
    chunk_->values.reserve(length / 16);
    chunk_->row_end.reserve(length / 128);
    chunk_->labels.reserve(length / 128);
    const char* p = buf_ + begin;
    const char* stop = buf_ + end;
    while (p < stop) {
      const char* newline = static_cast<const char*>(std::memchr(p, '\n', stop - p));
      const char* line_end = newline ? newline : stop;
      if (!ParseLine(p, line_end)) return;
      p = newline ? newline + 1 : stop;
    }
  }

 private:
  bool Fail(int32_t code, const char* token, const char* token_end, int64_t detail = 0) {
    chunk_->error.code = code;
    chunk_->error.token_offset = token - buf_;
    chunk_->error.token_length = token_end - token;
    chunk_->error.detail = detail;
    return false;
  }

  // Next whitespace separated token in [*p, e), or false at the end.
  static bool NextToken(const char** p, const char* e, const char** t, const char** t_end) {
    const char* q = *p;
    while (q < e && IsSpace(*q)) ++q;
    if (q == e) return false;
    *t = q;
    while (q < e && !IsSpace(*q)) ++q;
    *t_end = q;
    *p = q;
    return true;
  }

  bool ParseLabels(const char* t, const char* t_end) {
    if (!(flags_ & GS_LIBSVM_MULTILABEL)) {
      double label;
      if (!ParseDouble(t, t_end, &label)) return Fail(GS_LIBSVM_BAD_LABEL, t, t_end);
      chunk_->labels.push_back(label);
      return true;
    }
    const size_t first = chunk_->labels.size();
    const char* part = t;
    while (true) {
      const char* comma = static_cast<const char*>(std::memchr(part, ',', t_end - part));
      const char* part_end = comma ? comma : t_end;
      double label;
      if (!ParseDouble(part, part_end, &label)) return Fail(GS_LIBSVM_BAD_LABEL, t, t_end);
      chunk_->labels.push_back(label);
      if (!comma) break;
      part = comma + 1;
    }
    // load_svmlight_file returns each row's labels sorted.
    std::sort(chunk_->labels.begin() + first, chunk_->labels.end());
    return true;
  }

  bool ParseLine(const char* line, const char* e) {
    const char* hash = static_cast<const char*>(std::memchr(line, '#', e - line));
    if (hash) e = hash;
    const char* p = line;
    const char *t, *t_end;
    if (!NextToken(&p, e, &t, &t_end)) return true;  // blank or comment-only line

    const bool multilabel = flags_ & GS_LIBSVM_MULTILABEL;
    bool have_feature_token = true;
    if (multilabel && std::memchr(t, ':', t_end - t) != nullptr) {
      // "2:3.5 ..." in a multilabel file: a row without labels.
    } else {
      if (!ParseLabels(t, t_end)) return false;
      have_feature_token = NextToken(&p, e, &t, &t_end);
    }
    if (multilabel) chunk_->label_end.push_back(static_cast<int64_t>(chunk_->labels.size()));

    const size_t row_begin = chunk_->indices.size();
    if (have_feature_token && t_end - t >= 3 && std::memcmp(t, "qid", 3) == 0) {
      int64_t qid;
      if (t_end - t < 5 || t[3] != ':' || ParseInt(t + 4, t_end, &qid) != IntStatus::kOk)
        return Fail(GS_LIBSVM_BAD_QID, t, t_end);
      have_feature_token = NextToken(&p, e, &t, &t_end);
    }
    int64_t previous = -1;
    bool sorted = true;
    while (have_feature_token) {
      const char* colon = static_cast<const char*>(std::memchr(t, ':', t_end - t));
      if (!colon) return Fail(GS_LIBSVM_MISSING_COLON, t, t_end);
      int64_t index;
      switch (ParseInt(t, colon, &index)) {
        case IntStatus::kInvalid: return Fail(GS_LIBSVM_BAD_INDEX, t, t_end);
        case IntStatus::kTooLarge: return Fail(GS_LIBSVM_INDEX_TOO_LARGE, t, t_end);
        case IntStatus::kOk: break;
      }
      if (index < 0) return Fail(GS_LIBSVM_NEGATIVE_INDEX, t, t_end, index);
      if (index == 0 && (flags_ & GS_LIBSVM_REJECT_ZERO)) return Fail(GS_LIBSVM_ZERO_INDEX, t, t_end);
      double value;
      if (!ParseDouble(colon + 1, t_end, &value)) return Fail(GS_LIBSVM_BAD_VALUE, t, t_end);
      if (index == previous) return Fail(GS_LIBSVM_DUPLICATE_INDEX, t, t_end, index);
      if (index < previous) {
        if (flags_ & GS_LIBSVM_REQUIRE_SORTED) return Fail(GS_LIBSVM_UNSORTED, t, t_end, index);
        sorted = false;
      }
      previous = index;
      chunk_->indices.push_back(index);
      chunk_->values.push_back(static_cast<Real>(value));
      chunk_->min_index = std::min(chunk_->min_index, index);
      chunk_->max_index = std::max(chunk_->max_index, index);
      have_feature_token = NextToken(&p, e, &t, &t_end);
    }
    if (!sorted && !SortRow(row_begin, line, e)) return false;
    chunk_->row_end.push_back(static_cast<int64_t>(chunk_->indices.size()));
    return true;
  }

  // Sorts the row's (index, value) pairs by index; a repeated index is an error.
  bool SortRow(size_t begin, const char* line, const char* line_end) {
    const size_t n = chunk_->indices.size() - begin;
    std::vector<std::pair<int64_t, Real>> pairs(n);
    for (size_t i = 0; i < n; ++i)
      pairs[i] = {chunk_->indices[begin + i], chunk_->values[begin + i]};
    std::sort(pairs.begin(), pairs.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 0; i < n; ++i) {
      if (i > 0 && pairs[i].first == pairs[i - 1].first)
        return Fail(GS_LIBSVM_DUPLICATE_INDEX, line, line_end, pairs[i].first);
      chunk_->indices[begin + i] = pairs[i].first;
      chunk_->values[begin + i] = pairs[i].second;
    }
    return true;
  }

  const char* buf_;
  int32_t flags_;
  Chunk<Real>* chunk_;
};

// Runs fn(i) for i in [0, n) on n threads (the calling thread takes i = 0).
// Falls back to running inline when a thread cannot be started.
template <typename Fn>
void RunParallel(int n, Fn fn) {
  std::vector<std::thread> threads;
  int started_until = 1;
  try {
    for (int i = 1; i < n; ++i) {
      threads.emplace_back(fn, i);
      started_until = i + 1;
    }
  } catch (const std::system_error&) {
  } catch (const std::bad_alloc&) {
  }
  fn(0);
  for (int i = started_until; i < n; ++i) fn(i);
  for (auto& thread : threads) thread.join();
}

struct HandleBase {
  virtual ~HandleBase() = default;
  int32_t flags = 0;
  ErrorInfo error;
  int64_t num_rows = 0, nnz = 0, num_labels = 0;
  int64_t min_index = kNoIndex, max_index = -1;
};

template <typename Real>
struct Handle : HandleBase {
  std::vector<Chunk<Real>> chunks;
};

template <typename Real>
HandleBase* Parse(const char* buf, int64_t length, int32_t flags, int32_t num_threads) {
  auto* handle = new (std::nothrow) Handle<Real>();
  if (!handle) return nullptr;
  handle->flags = flags;
  try {
    // Ranges under ~1 MiB are not worth a thread.
    const int64_t max_threads = std::max<int64_t>(1, length >> 20);
    const int n = static_cast<int>(std::clamp<int64_t>(num_threads, 1, std::min<int64_t>(max_threads, 256)));
    handle->chunks.resize(n);
    std::vector<int64_t> bounds(n + 1);
    bounds[0] = 0;
    bounds[n] = length;
    for (int i = 1; i < n; ++i) {
      // Each range starts just after a newline so no line is split.
      int64_t b = std::max(bounds[i - 1], length / n * i);
      const char* nl = b > 0 ? static_cast<const char*>(std::memchr(buf + b - 1, '\n', length - (b - 1))) : buf - 1;
      bounds[i] = nl ? (nl - buf) + 1 : length;
    }
    RunParallel(n, [&](int i) {
      Chunk<Real>& chunk = handle->chunks[i];
      try {
        Parser<Real>(buf, flags, &chunk).ParseRange(bounds[i], bounds[i + 1]);
      } catch (const std::bad_alloc&) {
        chunk.error.code = GS_LIBSVM_OUT_OF_MEMORY;
        chunk.error.token_offset = bounds[i];
      }
    });
  } catch (const std::bad_alloc&) {
    handle->error.code = GS_LIBSVM_OUT_OF_MEMORY;
    return handle;
  }
  for (const auto& chunk : handle->chunks) {
    if (chunk.error.code != GS_LIBSVM_OK) {
      handle->error = chunk.error;  // chunks are in byte order: the first is the earliest
      return handle;
    }
    handle->num_rows += static_cast<int64_t>(chunk.row_end.size());
    handle->nnz += static_cast<int64_t>(chunk.indices.size());
    handle->num_labels += static_cast<int64_t>(chunk.labels.size());
    handle->min_index = std::min(handle->min_index, chunk.min_index);
    handle->max_index = std::max(handle->max_index, chunk.max_index);
  }
  return handle;
}

template <typename Int>
void CopyIndices(const std::vector<int64_t>& src, int64_t shift, Int* dst) {
  for (size_t i = 0; i < src.size(); ++i) dst[i] = static_cast<Int>(src[i] - shift);
}

template <typename Int>
void CopyIndptr(const std::vector<int64_t>& row_end, int64_t base, Int* dst) {
  for (size_t i = 0; i < row_end.size(); ++i) dst[i] = static_cast<Int>(row_end[i] + base);
}

template <typename Real>
int32_t Copy(const Handle<Real>& h, Real* values, void* indices, void* indptr, int32_t index_bytes,
             int64_t index_shift, int64_t indptr_base, double* labels, int64_t* label_ptr) {
  const int n = static_cast<int>(h.chunks.size());
  std::vector<int64_t> row_at(n + 1, 0), nnz_at(n + 1, 0), label_at(n + 1, 0);
  for (int i = 0; i < n; ++i) {
    row_at[i + 1] = row_at[i] + static_cast<int64_t>(h.chunks[i].row_end.size());
    nnz_at[i + 1] = nnz_at[i] + static_cast<int64_t>(h.chunks[i].indices.size());
    label_at[i + 1] = label_at[i] + static_cast<int64_t>(h.chunks[i].labels.size());
  }
  const bool multilabel = h.flags & GS_LIBSVM_MULTILABEL;
  // indptr[0] is written here; each chunk writes its rows' ends after it.
  if (index_bytes == 4) static_cast<int32_t*>(indptr)[0] = static_cast<int32_t>(indptr_base);
  else static_cast<int64_t*>(indptr)[0] = indptr_base;
  if (multilabel) label_ptr[0] = 0;
  RunParallel(n, [&](int i) {
    const Chunk<Real>& c = h.chunks[i];
    std::copy(c.values.begin(), c.values.end(), values + nnz_at[i]);
    std::copy(c.labels.begin(), c.labels.end(), labels + label_at[i]);
    if (index_bytes == 4) {
      CopyIndices(c.indices, index_shift, static_cast<int32_t*>(indices) + nnz_at[i]);
      CopyIndptr(c.row_end, indptr_base + nnz_at[i], static_cast<int32_t*>(indptr) + 1 + row_at[i]);
    } else {
      CopyIndices(c.indices, index_shift, static_cast<int64_t*>(indices) + nnz_at[i]);
      CopyIndptr(c.row_end, indptr_base + nnz_at[i], static_cast<int64_t*>(indptr) + 1 + row_at[i]);
    }
    if (multilabel) {
      for (size_t r = 0; r < c.label_end.size(); ++r)
        label_ptr[1 + row_at[i] + r] = c.label_end[r] + label_at[i];
    }
  });
  return GS_LIBSVM_OK;
}

}  // namespace

extern "C" {

void* gs_libsvm_parse(const char* buf, int64_t length, int32_t flags, int32_t num_threads) {
  if (length < 0 || (length > 0 && buf == nullptr)) length = 0;
  if (flags & GS_LIBSVM_FLOAT32) return Parse<float>(buf, length, flags, num_threads);
  return Parse<double>(buf, length, flags, num_threads);
}

int32_t gs_libsvm_error(const void* handle, GsLibSVMErrorInfo* info) {
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

void gs_libsvm_counts(const void* handle, int64_t* num_rows, int64_t* nnz, int64_t* num_labels,
                      int64_t* min_index, int64_t* max_index) {
  const HandleBase* h = static_cast<const HandleBase*>(handle);
  *num_rows = h->num_rows;
  *nnz = h->nnz;
  *num_labels = h->num_labels;
  *min_index = h->min_index;
  *max_index = h->max_index;
}

int32_t gs_libsvm_copy(const void* handle, void* values, void* indices, void* indptr,
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
      return Copy(*static_cast<const Handle<float>*>(h), static_cast<float*>(values), indices,
                  indptr, index_bytes, index_shift, indptr_base, labels, label_ptr);
    return Copy(*static_cast<const Handle<double>*>(h), static_cast<double*>(values), indices,
                indptr, index_bytes, index_shift, indptr_base, labels, label_ptr);
  } catch (const std::bad_alloc&) {
    return GS_LIBSVM_OUT_OF_MEMORY;
  }
}

void gs_libsvm_free(void* handle) { delete static_cast<HandleBase*>(handle); }

int64_t gs_libsvm_line_of_offset(const char* buf, int64_t length, int64_t offset) {
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

int64_t gs_libsvm_row_offset(const char* buf, int64_t length, int64_t row) {
  const char* p = buf;
  const char* stop = buf + length;
  int64_t seen = 0;
  while (p < stop) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', stop - p));
    const char* e = nl ? nl : stop;
    const char* hash = static_cast<const char*>(std::memchr(p, '#', e - p));
    const char* content_end = hash ? hash : e;
    bool blank = true;
    for (const char* q = p; q < content_end; ++q) {
      if (!IsSpace(*q)) {
        blank = false;
        break;
      }
    }
    if (!blank) {
      if (seen == row) return p - buf;
      ++seen;
    }
    p = nl ? nl + 1 : stop;
  }
  return -1;
}

}  // extern "C"
