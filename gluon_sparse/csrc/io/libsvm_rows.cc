// Row parsing of LibSVM / svmlight text (see libsvm_rows.h).
#include "libsvm_rows.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "number_lexer.h"

namespace gluon_sparse {
namespace io {
namespace {

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
        // Beyond int64 but negative: the error is the sign (detail: the most negative int64).
        case IntStatus::kTooSmall:
          return Fail(GS_LIBSVM_NEGATIVE_INDEX, t, t_end, std::numeric_limits<int64_t>::min());
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

}  // namespace

template <typename Real>
void ParseRange(const char* buf, int64_t begin, int64_t end, int32_t flags, Chunk<Real>* chunk) {
  Parser<Real>(buf, flags, chunk).ParseRange(begin, end);
}

template void ParseRange<float>(const char*, int64_t, int64_t, int32_t, Chunk<float>*);
template void ParseRange<double>(const char*, int64_t, int64_t, int32_t, Chunk<double>*);

}  // namespace io
}  // namespace gluon_sparse
