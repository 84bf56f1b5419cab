/*!
 * The `gluon_sparse_dot` operator's pieces shared by its files: sparse_dot.cc
 * (attributes, registration), sparse_dot_cpu.cc and sparse_dot_gpu.cc (compute).
 */
#ifndef GLUON_SPARSE_CSRC_OPS_SPARSE_DOT_OP_H_
#define GLUON_SPARSE_CSRC_OPS_SPARSE_DOT_OP_H_

#include <string>
#include <unordered_map>
#include <vector>

#include "mxnet/lib_api.h"
#include "op_attrs.h"

namespace gluon_sparse {
namespace dot {

constexpr const char* kOpName = "gluon_sparse_dot";

// Backward inputs, in the order lib_api's generated FGradient passes them
// (ograd, the forward's inputs, its output); kBias only with_bias.
enum BackwardInput { kOgrad = 0, kData = 1, kWeight = 2, kBias = 3 };

// Backward outputs: the gradients of the forward's inputs.
enum BackwardOutput { kDataGrad = 0, kWeightGrad = 1, kBiasGrad = 2 };

/*! \brief The operator's attributes. */
struct Options {
  bool squared = false;    // dot(data * data, weight * weight)
  bool with_bias = false;  // a third input, bias (units,), added to every row
};

/*! \brief Parse `squared` and `with_bias` ("0"/"1", default "0"). */
bool parse_options(const ops::Attrs& attrs, Options* options);

/*! \brief The weight's dtype is one the compute functions implement (float32/float64). */
bool check_float_type(const mxnet::ext::MXTensor& t, const char* what);

// Forward (out = dot(data, weight)) and weight gradient, on each device.
ops::Compute compute_cpu;
ops::Compute gradient_cpu;
#if GLUON_SPARSE_WITH_CUDA
ops::Compute compute_gpu;
ops::Compute gradient_gpu;
#endif

}  // namespace dot
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_SPARSE_DOT_OP_H_
