/*!
 * `gluon_sparse_dot`: out = dot(data, weight) for a CSR batch, whose weight
 * gradient costs what the batch's non-zeros cost.
 *
 * MXNet's own `sparse.dot(csr, W)` backward (DotCsrDnsRspImpl) builds its
 * row_sparse gradient by walking a per-feature row-flag array, which makes
 * every step O(in_units) however small the batch. Here the weight gradient is
 * built from the batch alone: its column ids are sorted, each distinct id
 * becomes one gradient row, and each row sums its entries' val * ograd[row].
 * Cost: O(nnz log nnz + nnz x units), nothing proportional to in_units.
 *
 * Inputs:  data   (batch, in_units)  CSR (or dense, scanned for non-zeros)
 *          weight (in_units, units)  dense
 *          bias   (units,)           dense, only with `with_bias`
 * Output:  out    (batch, units)     dense
 * Gradient (generated `_backward_gluon_sparse_dot`): weight -> row_sparse with
 * the batch's distinct columns as rows, sorted; data -> an empty (all-zero)
 * row_sparse array: like MXNet's sparse.dot, the op does not differentiate
 * with respect to its sparse operand; bias -> dense, the column sums of ograd.
 *
 * Attribute `squared` ("0"/"1", default "0"): compute
 * dot(data * data, weight * weight) instead, the sum_i x_i^2 v_if^2 term of a
 * factorization machine, without squaring the whole weight every step.
 *
 * Attribute `with_bias` ("0"/"1", default "0"): out = dot(data, weight) + bias,
 * bitwise what MXNet's broadcast_add after the product gives, gradient
 * included (column_sum.h). One operator instead of three in a training step
 * (the add, and its backward, which copies ograd and sums it with MXNet's
 * sequential reduction: ~4 ms a step for a 256 x 1024 layer on 2 cores).
 *
 * Files: this one (attributes, registration), sparse_dot_cpu.cc and
 * sparse_dot_gpu.cc (compute), sparse_dot.cu (CUDA kernels).
 *
 * lib_api hands an op neither the write request (write/add/null) nor a way to
 * tell an output that nobody reads; the Python blocks therefore use this op
 * only for grad_req='write' weights and fall back to MXNet's dot otherwise.
 */
#include <limits>
#include <string>
#include <vector>

#include "sparse_dot_op.h"

using namespace mxnet::ext;

namespace gluon_sparse {
namespace dot {

bool parse_options(const ops::Attrs& attrs, Options* options) {
  *options = Options();
  for (const auto& attr : attrs) {
    if (attr.first == "squared" &&
        !ops::parse_bool(kOpName, "squared", attr.second, &options->squared)) {
      return false;
    }
    if (attr.first == "with_bias" &&
        !ops::parse_bool(kOpName, "with_bias", attr.second, &options->with_bias)) {
      return false;
    }
  }
  return true;
}

bool check_float_type(const MXTensor& t, const char* what) {
  if (t.dtype == kFloat32 || t.dtype == kFloat64) return true;
  GS_ERROR_MSG << "gluon_sparse_dot: " << what << " must be float32 or float64 (dtype "
               << dtype_name(t.dtype) << ")";
  return false;
}

namespace {

/* --------------------------- attribute functions --------------------------- */

MXReturnValue ParseAttrs(const std::unordered_map<std::string, std::string>& attrs,
                         int* num_in, int* num_out) {
  Options options;
  if (!parse_options(attrs, &options)) return MX_FAIL;
  *num_in = options.with_bias ? 3 : 2;
  *num_out = 1;
  return MX_SUCCESS;
}

MXReturnValue InferType(const std::unordered_map<std::string, std::string>& attrs,
                        std::vector<int>* in_types, std::vector<int>* out_types) {
  const int data = (*in_types)[0], weight = (*in_types)[1];
  const int known = weight != -1 ? weight : data;
  if (known != -1 && known != kFloat32 && known != kFloat64) {
    GS_ERROR_MSG << "gluon_sparse_dot: data and weight must be float32 or float64 (dtype "
                 << dtype_name(known) << ")";
    return MX_FAIL;
  }
  if (data != -1 && weight != -1 && data != weight) {
    GS_ERROR_MSG << "gluon_sparse_dot: data (dtype " << dtype_name(data) << ") and weight (dtype "
                 << dtype_name(weight) << ") must have the same dtype";
    return MX_FAIL;
  }
  if (in_types->size() == 3) {  // with_bias
    const int bias = (*in_types)[2];
    if (bias != -1 && known != -1 && bias != known) {
      GS_ERROR_MSG << "gluon_sparse_dot: bias (dtype " << dtype_name(bias) << ") must have the "
                   << "weight's dtype (dtype " << dtype_name(known) << ")";
      return MX_FAIL;
    }
    (*in_types)[2] = known;
  }
  (*in_types)[0] = (*in_types)[1] = known;
  (*out_types)[0] = known;
  return MX_SUCCESS;
}

MXReturnValue InferSType(const std::unordered_map<std::string, std::string>& attrs,
                         std::vector<int>* in_stypes, std::vector<int>* out_stypes) {
  if (out_stypes->size() == 1) {  // forward: (data, weight[, bias]) -> out
    const int data = (*in_stypes)[0];
    if (data != kCSRStorage && data != kDefaultStorage) {
      GS_ERROR_MSG << "gluon_sparse_dot: data must be CSR or dense, not row_sparse";
      return MX_FAIL;
    }
    for (size_t i = 1; i < in_stypes->size(); ++i) (*in_stypes)[i] = kDefaultStorage;
    (*out_stypes)[0] = kDefaultStorage;
    return MX_SUCCESS;
  }
  // backward: (ograd, data, weight[, bias], out) -> (data grad, weight grad[,
  // bias grad]). The data gradient is never computed and left as an empty
  // row_sparse array (all zeros). Sparse, so MXNet allocates no dense (batch,
  // in_units) array for it; row_sparse rather than CSR, so that a graph using
  // the same batch in several products (the factorization machine) sums these
  // with add_n's row_sparse kernel instead of a storage fallback to dense.
  (*out_stypes)[kDataGrad] = kRowSparseStorage;
  (*out_stypes)[kWeightGrad] = kRowSparseStorage;
  if (out_stypes->size() > kBiasGrad) (*out_stypes)[kBiasGrad] = kDefaultStorage;
  return MX_SUCCESS;
}

bool DimKnown(unsigned int d) { return d != 0 && d != std::numeric_limits<unsigned int>::max(); }

MXReturnValue InferShape(const std::unordered_map<std::string, std::string>& attrs,
                         std::vector<std::vector<unsigned int>>* in_shapes,
                         std::vector<std::vector<unsigned int>>* out_shapes) {
  std::vector<unsigned int>& data = (*in_shapes)[0];
  std::vector<unsigned int>& weight = (*in_shapes)[1];
  // A weight variable without a shape (a hand-written symbol bound by Module):
  // (in_units, units) from the data and the bias, where both are known.
  if (weight.empty() && data.size() == 2 && in_shapes->size() == 3 &&
      (*in_shapes)[2].size() == 1 && DimKnown((*in_shapes)[2][0])) {
    weight = {data[1], (*in_shapes)[2][0]};
  }
  if (data.size() != 2 || weight.size() != 2) {
    GS_ERROR_MSG << "gluon_sparse_dot: data (batch, in_units) and weight (in_units, units) must "
                 << "both be 2-D, got " << data.size() << "-D data and " << weight.size()
                 << "-D weight";
    return MX_FAIL;
  }
  // Deferred initialisation: a weight whose in_units is still unknown takes the data's.
  if (!DimKnown(weight[0]) && DimKnown(data[1])) weight[0] = data[1];
  if (DimKnown(weight[0]) && DimKnown(data[1]) && weight[0] != data[1]) {
    GS_ERROR_MSG << "gluon_sparse_dot: data has " << data[1] << " columns but weight has "
                 << weight[0] << " rows (shapes (" << data[0] << ", " << data[1] << ") and ("
                 << weight[0] << ", " << weight[1] << "))";
    return MX_FAIL;
  }
  if (in_shapes->size() == 3) {  // with_bias
    std::vector<unsigned int>& bias = (*in_shapes)[2];
    if (bias.empty() && DimKnown(weight[1])) bias = {weight[1]};
    if (bias.size() != 1 || (DimKnown(weight[1]) && DimKnown(bias[0]) && bias[0] != weight[1])) {
      GS_ERROR_MSG << "gluon_sparse_dot: bias must have shape (" << weight[1] << ",), one value "
                   << "per column of weight (" << weight[0] << ", " << weight[1] << "), got a "
                   << bias.size() << "-D bias" << (bias.empty() ? "" : " of length ")
                   << (bias.empty() ? "" : std::to_string(bias[0]));
      return MX_FAIL;
    }
    if (!DimKnown(weight[1]) && DimKnown(bias[0])) weight[1] = bias[0];
  }
  (*out_shapes)[0] = {data[0], weight[1]};
  return MX_SUCCESS;
}

}  // namespace
}  // namespace dot
}  // namespace gluon_sparse

namespace gdot = gluon_sparse::dot;

REGISTER_OP(gluon_sparse_dot)
    .setForward(gdot::compute_cpu, "cpu")
    .setBackward(gdot::gradient_cpu, "cpu")
#if GLUON_SPARSE_WITH_CUDA
    .setForward(gdot::compute_gpu, "gpu")
    .setBackward(gdot::gradient_gpu, "gpu")
#endif
    .setParseAttrs(gdot::ParseAttrs)
    .setInferType(gdot::InferType)
    .setInferSType(gdot::InferSType)
    .setInferShape(gdot::InferShape);
