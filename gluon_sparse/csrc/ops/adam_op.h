/*!
 * The `gluon_sparse_adam_update` operator's pieces shared by its files: adam_op.cc
 * (parameters, checks, attributes, registration), adam_op_cpu.cc and
 * adam_op_gpu.cc (compute).
 */
#ifndef GLUON_SPARSE_CSRC_OPS_ADAM_OP_H_
#define GLUON_SPARSE_CSRC_OPS_ADAM_OP_H_

#include <cstdint>
#include <vector>

#include "mxnet/lib_api.h"
#include "op_attrs.h"

namespace gluon_sparse {
namespace adam {

constexpr const char* kOpName = "gluon_sparse_adam_update";
enum Input { kWeight = 0, kGrad = 1, kMean = 2, kVar = 3, kNumInputs = 4 };
extern const char* const kInputNames[kNumInputs];

/*! \brief The operator's parameters, parsed as C floats exactly as MXNet's AdamParam. */
struct AdamParams {
  bool has_lr = false;
  float lr = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float wd = 0.0f;
  float rescale_grad = 1.0f;
  float clip_gradient = -1.0f;
  bool flush_denormals = false;
};

/*! \brief Parse the operator's attributes (false, with a message, on a bad one). */
bool parse_params(const ops::Attrs& attrs, AdamParams* p);

/*! \brief Raw pointers and sizes of one call, after every check has passed. */
struct UpdateArgs {
  void* weight;
  void* mean;
  void* var;
  const void* grad;
  const int64_t* indices;
  int64_t nnz;
  int64_t num_rows;
  int64_t cols;
  mxnet::ext::MXDType dtype;
};

/*!
 * \brief Check devices and sparse layouts (shapes and dtypes were inferred) and collect pointers.
 */
bool collect_args(const std::vector<mxnet::ext::MXTensor>& inputs,
                  const std::vector<mxnet::ext::MXTensor>& outputs, UpdateArgs* args);

ops::Compute compute_cpu;
#if GLUON_SPARSE_WITH_CUDA
ops::Compute compute_gpu;
#endif

}  // namespace adam
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_ADAM_OP_H_
