// Number lexing for the LibSVM parser: whitespace, decimal floating point
// and integer tokens, each bounded by an end pointer (no NUL terminator is
// needed and none is read past), with Python's float()/int() as reference.
// Header-only: the row parser calls these per token, and they must inline.
#ifndef GLUON_SPARSE_CSRC_IO_NUMBER_LEXER_H_
#define GLUON_SPARSE_CSRC_IO_NUMBER_LEXER_H_

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <system_error>

namespace gluon_sparse {
namespace io {

inline bool IsSpace(char c) {
  // bytes.split()'s whitespace, minus '\n' which already ended the line.
  return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

inline bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// kTooLarge: above INT64_MAX; kTooSmall: below -INT64_MAX (a negative number all the same).
enum class IntStatus { kOk, kInvalid, kTooLarge, kTooSmall };

constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                             1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

// Clinger's fast path for the common short decimals ("0.123456", "3", "1e-3"):
// with at most 15 significant digits the mantissa is exact in a double, and
// so is 10^|e| for |e| <= 22, so one IEEE multiplication or division gives the
// correctly rounded result, the same as strtod/from_chars. Returns false when
// the token is not of that simple form; the caller then uses from_chars.
inline bool FastParseDouble(const char* p, const char* e, double* out) {
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
inline bool ParseDouble(const char* s, const char* e, double* out) {
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

// Parses [s, e) as a whole base-10 integer with an optional sign.
inline IntStatus ParseInt(const char* s, const char* e, int64_t* out) {
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
  if (too_large) return negative ? IntStatus::kTooSmall : IntStatus::kTooLarge;
  *out = negative ? -static_cast<int64_t>(value) : static_cast<int64_t>(value);
  return IntStatus::kOk;
}

}  // namespace io
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_IO_NUMBER_LEXER_H_
