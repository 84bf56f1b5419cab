/*!
 * What every operator of the library shares around its compute: parsing of
 * attribute values (with messages that name the operator and the parameter),
 * shape text for messages, and the one dtype dispatch (float32 / float64).
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OP_ATTRS_H_
#define GLUON_SPARSE_CSRC_OPS_OP_ATTRS_H_

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "dmlc/strtonum.h"
#include "error_messages.h"
#include "mxnet/lib_api.h"

namespace gluon_sparse {
namespace ops {

using Attrs = std::unordered_map<std::string, std::string>;

/*!
 * \brief The type of every function an op registers with lib_api (setForward,
 *        setBackward): declare one as `ops::Compute compute_cpu;`.
 */
using Compute = mxnet::ext::MXReturnValue(const Attrs& attrs,
                                          std::vector<mxnet::ext::MXTensor>* inputs,
                                          std::vector<mxnet::ext::MXTensor>* outputs,
                                          const mxnet::ext::OpResource& res);

/*! \brief Attributes MXNet adds itself (__ext_dtype__, __profiler_scope__, ...). */
inline bool is_framework_attr(const std::string& key) { return key.rfind("__", 0) == 0; }

/*!
 * \brief `text` as a C float, exactly as MXNet's parameter structs parse a
 *        `float` field (dmlc::stof, dmlc-core's own parser).
 *
 * dmlc's parser is not always correctly rounded: '7.51420425227274e-05' gives
 * the float one unit below std::strtof's. An update whose lr MXNet parsed
 * that way is then bitwise MXNet's only if ours parses it the same way.
 */
inline bool parse_float(const char* op, const std::string& key, const std::string& text,
                        float* out) {
  errno = 0;
  char* end = nullptr;
  const float value = dmlc::strtof_check_range(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE) {
    GS_ERROR_MSG << op << ": parameter " << key << "='" << text << "' is not a float32 number";
    return false;
  }
  *out = value;
  return true;
}

/*!
 * \brief `text` as a C float, as MXNet parses an element of a `Tuple<float>`
 *        field (std::istream >> float: correctly rounded, as std::strtof),
 *        e.g. the `lrs` and `wds` of multi_sgd_update.
 */
inline bool parse_float_rounded(const char* op, const std::string& key, const std::string& text,
                                float* out) {
  errno = 0;
  char* end = nullptr;
  const float value = std::strtof(text.c_str(), &end);
  // std::istream accepts an underflow (ERANGE with a denormal or zero result), as a
  // learning rate decayed below FLT_MIN; only an overflow is out of range.
  if (text.empty() || end != text.c_str() + text.size() ||
      (errno == ERANGE && std::isinf(value))) {
    GS_ERROR_MSG << op << ": parameter " << key << "='" << text << "' is not a float32 number";
    return false;
  }
  *out = value;
  return true;
}

/*!
 * \brief A comma-separated list of floats (the multi-weight updates' per-weight
 *        scalars), each element parsed by `parse_one` (parse_float or
 *        parse_float_rounded) as the single-weight operator parses the scalar.
 */
template <typename ParseOne>
bool parse_float_list(const char* op, const std::string& key, const std::string& text,
                      ParseOne parse_one, std::vector<float>* out) {
  out->clear();
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    float value;
    if (!parse_one(op, key, item, &value)) return false;
    out->push_back(value);
  }
  return true;
}

/*! \brief `text` as a boolean: 1/0, True/False, true/false. */
inline bool parse_bool(const char* op, const std::string& key, const std::string& text,
                       bool* out) {
  if (text == "1" || text == "True" || text == "true") {
    *out = true;
  } else if (text == "0" || text == "False" || text == "false") {
    *out = false;
  } else {
    GS_ERROR_MSG << op << ": parameter " << key << "='" << text
                 << "' is not a boolean (0/1 or True/False)";
    return false;
  }
  return true;
}

/*! \brief `text` as a positive 64-bit integer. */
inline bool parse_positive_int(const char* op, const std::string& key, const std::string& text,
                               int64_t* out) {
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || value < 1) {
    GS_ERROR_MSG << op << ": parameter " << key << "='" << text << "' is not a positive integer";
    return false;
  }
  *out = value;
  return true;
}

/*! \brief "(2, 3)" / "(4,)" for messages. */
template <typename Int>
std::string shape_str(const std::vector<Int>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

/*!
 * \brief Call `typed(T())` with T the C++ type of `dtype` (float64 -> double,
 *        anything else -> float: the callers' type inference admits only the two).
 *
 * The one dtype dispatch of the library: a compute function writes its body
 * once as a generic lambda, e.g.
 *   return with_float_type(dtype, [&](auto zero) { return run<decltype(zero)>(...); });
 */
template <typename Typed>
auto with_float_type(int dtype, Typed&& typed) {
  if (dtype == mxnet::ext::kFloat64) return typed(double());
  return typed(float());
}

}  // namespace ops
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_OP_ATTRS_H_
