/*!
 * The deferred standard-Adam operators' pieces shared by their files:
 * adam_deferred_op.cc (parameters, checks, attributes, registration),
 * adam_deferred_op_cpu.cc and adam_deferred_op_gpu.cc (compute).
 */
#ifndef GLUON_SPARSE_CSRC_OPS_ADAM_DEFERRED_OP_H_
#define GLUON_SPARSE_CSRC_OPS_ADAM_DEFERRED_OP_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "adam_deferred_kernels.h"
#include "mxnet/lib_api.h"
#include "op_attrs.h"

namespace gluon_sparse {
namespace deferred {

namespace gd = gluon_sparse::adam::deferred;

constexpr const char* kUpdateName = "gluon_sparse_adam_deferred_update";
constexpr const char* kFlushName = "gluon_sparse_adam_deferred_flush";

/*! \brief The parameters of both operators, parsed as the eager operator parses them. */
struct Params {
  float lr = NAN;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float wd = 0.0f;
  float rescale_grad = 1.0f;
  float clip_gradient = -1.0f;
  int64_t step = -1;
  bool catch_up = false;
  bool catch_up_if_read = false;  //!< catch up only a weight a product operator read
};

/*! \brief Parse `attrs`; `is_update` selects the update's parameters, else the flush's. */
bool parse_params(const ops::Attrs& attrs, bool is_update, Params* p);

/*! \brief Input positions of each operator. */
struct Layout {
  int weight, grad, mean, var, last_step, history, count;
  const char* const* names;
};
inline const char* const kUpdateInputs[] = {"weight", "grad", "mean", "var", "last_step",
                                            "history"};
inline const char* const kFlushInputs[] = {"weight", "mean", "var", "last_step", "history"};
inline constexpr Layout kUpdateLayout = {0, 1, 2, 3, 4, 5, 6, kUpdateInputs};
inline constexpr Layout kFlushLayout = {0, -1, 1, 2, 3, 4, 5, kFlushInputs};

/*! \brief Raw pointers and sizes of one call, after every check has passed. */
struct Args {
  void* weight;
  void* mean;
  void* var;
  int64_t* last_step;
  gd::StepRecord* history;
  int64_t capacity;
  const void* grad;
  const int64_t* indices;
  int64_t nnz;
  int64_t num_rows;
  int64_t cols;
  mxnet::ext::MXDType dtype;
  bool gpu;
};

/*! \brief Check devices, the in-place output and the history's capacity; collect pointers. */
bool collect_args(const char* op, const Layout& layout,
                  const std::vector<mxnet::ext::MXTensor>& inputs,
                  const std::vector<mxnet::ext::MXTensor>& outputs, int64_t step, Args* a);

/*! \brief The update's error for a gradient row that is not at step - 1 (returns false). */
bool report_stale_row(int64_t row, int64_t row_step, int64_t step);

/*! \brief The flush's error for a row whose last_step lies outside [0, step]. */
void report_invalid_last_step(int64_t row, int64_t row_step, int64_t step);

// gluon_sparse_adam_deferred_update (compute_*) and gluon_sparse_adam_deferred_flush (flush_*)
// on each device.
ops::Compute compute_cpu;
ops::Compute flush_cpu;
#if GLUON_SPARSE_WITH_CUDA
ops::Compute compute_gpu;
ops::Compute flush_gpu;
#endif

}  // namespace deferred
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_ADAM_DEFERRED_OP_H_
