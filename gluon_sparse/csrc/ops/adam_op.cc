/*!
 * `gs_adam_update`: standard (non-lazy) Adam on a row_sparse gradient, in place.
 *
 *   gs_adam_update(weight, grad, mean, var, out=weight, lr=..., beta1=0.9,
 *                  beta2=0.999, epsilon=1e-8, wd=0, rescale_grad=1, clip_gradient=-1,
 *                  flush_denormals=False)
 *
 * Same parameters and results as MXNet's adam_update(lazy_update=False) with a
 * row_sparse grad: every row of weight, mean and var moves; rows absent from the
 * gradient get grad 0 (plus wd * weight). weight is dense, or row_sparse holding
 * every row; mean and var are dense; all share one dtype (float32 or float64).
 * mean and var are mutated inputs, weight is updated through `out`, which must
 * be weight itself. flush_denormals=True (CPU only) flushes denormal values to
 * zero, trading bitwise equality with MXNet for speed (see FlushDenormals).
 *
 * Where MXNet 1.9.1 builds a num_rows-long prefix sum (sequentially on CPU)
 * and then runs a generic kernel, this op makes one pass over the data: OpenMP
 * threads take contiguous blocks of rows and walk the sorted gradient indices
 * alongside, so there is no temporary at all. The element math lives in
 * adam_kernels.h, shared with the CUDA kernels (adam_kernels.cu).
 *
 * Errors: shapes, dtypes, storage types and parameters are checked during
 * MXNet's inference, so they raise at the call; index checks run in the
 * forward function, before any write, and raise when the result is waited for.
 * (lib_api.h keeps every message a library has produced: the last line of the
 * "Extension Traceback" is the current one.)
 *
 * Layout: compute functions, then attribute functions, then REGISTER_OP.
 */
#include <omp.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

#include "adam_kernels.h"
#include "mxnet/lib_api.h"
#include "row_index_errors.h"
#include "omp_threads.h"
#if GLUON_SPARSE_WITH_CUDA
#include "adam_kernels_cuda.h"
#endif

using namespace mxnet::ext;

namespace {

namespace ga = gluon_sparse::adam;

constexpr const char* kOpName = "gs_adam_update";
enum Input { kWeight = 0, kGrad = 1, kMean = 2, kVar = 3, kNumInputs = 4 };
const char* const kInputNames[] = {"weight", "grad", "mean", "var"};

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

bool parse_bool(const std::string& key, const std::string& text, bool* out) {
  if (text == "True" || text == "true" || text == "1") {
    *out = true;
  } else if (text == "False" || text == "false" || text == "0") {
    *out = false;
  } else {
    MX_ERROR_MSG << kOpName << ": parameter " << key << "='" << text << "' is not a boolean";
    return false;
  }
  return true;
}

bool parse_float(const std::string& key, const std::string& text, float* out) {
  errno = 0;
  char* end = nullptr;
  const float value = std::strtof(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE) {
    MX_ERROR_MSG << kOpName << ": parameter " << key << "='" << text
                 << "' is not a float32 number";
    return false;
  }
  *out = value;
  return true;
}

bool parse_params(const std::unordered_map<std::string, std::string>& attrs, AdamParams* p) {
  const std::unordered_map<std::string, float*> fields = {
      {"lr", &p->lr},           {"beta1", &p->beta1},
      {"beta2", &p->beta2},     {"epsilon", &p->epsilon},
      {"wd", &p->wd},           {"rescale_grad", &p->rescale_grad},
      {"clip_gradient", &p->clip_gradient}};
  for (const auto& kv : attrs) {
    // MXNet adds its own attributes (__ext_dtype__, __profiler_scope__, ...).
    if (kv.first.rfind("__", 0) == 0) continue;
    if (kv.first == "flush_denormals") {
      if (!parse_bool(kv.first, kv.second, &p->flush_denormals)) return false;
      continue;
    }
    const auto field = fields.find(kv.first);
    if (field == fields.end()) {
      MX_ERROR_MSG << kOpName << ": unknown parameter '" << kv.first
                   << "'; the parameters are lr, beta1, beta2, epsilon, wd, rescale_grad, "
                   << "clip_gradient, flush_denormals";
      return false;
    }
    if (!parse_float(kv.first, kv.second, field->second)) return false;
    p->has_lr = p->has_lr || kv.first == "lr";
  }
  if (!p->has_lr) {
    MX_ERROR_MSG << kOpName << ": parameter lr is required";
    return false;
  }
  return true;
}

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
  MXDType dtype;
};

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

/*! \brief Check devices and sparse layouts (shapes and dtypes were inferred) and collect pointers. */
bool collect_args(const std::vector<MXTensor>& inputs, const std::vector<MXTensor>& outputs,
                  UpdateArgs* args) {
  if (inputs.size() != kNumInputs || outputs.size() != 1) {
    MX_ERROR_MSG << kOpName << ": expects 4 inputs (weight, grad, mean, var) and 1 output, got "
                 << inputs.size() << " and " << outputs.size();
    return false;
  }
  const MXTensor& weight = inputs[kWeight];
  for (int i = 0; i < kNumInputs; ++i) {
    if (inputs[i].ctx.dev_type != weight.ctx.dev_type || inputs[i].ctx.dev_id != weight.ctx.dev_id) {
      MX_ERROR_MSG << kOpName << ": " << kInputNames[i] << " is on " << inputs[i].ctx.dev_type
                   << "(" << inputs[i].ctx.dev_id << ") but weight is on " << weight.ctx.dev_type
                   << "(" << weight.ctx.dev_id << ")";
      return false;
    }
  }
  args->dtype = weight.dtype;
  args->num_rows = weight.shape.empty() ? 0 : weight.shape[0];
  args->cols = 1;
  for (size_t d = 1; d < weight.shape.size(); ++d) args->cols *= weight.shape[d];

  const void* out_data = nullptr;
  if (weight.stype == kRowSparseStorage) {
    // As in MXNet's AdamStdUpdateRspImpl: a standard update moves every row, so
    // a row_sparse weight must already store all of them.
    const MXSparse* w = reinterpret_cast<const MXSparse*>(weight.data_ptr);
    if (w->indices_len != args->num_rows) {
      MX_ERROR_MSG << kOpName << ": a row_sparse weight must store all its " << args->num_rows
                   << " rows for a standard (non-lazy) update, but it stores "
                   << w->indices_len;
      return false;
    }
    args->weight = w->data;
    if (outputs[0].stype == kRowSparseStorage) {
      out_data = reinterpret_cast<const MXSparse*>(outputs[0].data_ptr)->data;
    }
  } else {
    args->weight = weight.data_ptr;
    if (outputs[0].stype == kDefaultStorage) out_data = outputs[0].data_ptr;
  }
  if (out_data != args->weight) {
    MX_ERROR_MSG << kOpName << " updates the weight in place: call it with out=weight";
    return false;
  }

  const MXSparse* grad = reinterpret_cast<const MXSparse*>(inputs[kGrad].data_ptr);
  if (grad->indices_len < 0 || grad->indices_len > args->num_rows ||
      grad->data_len != grad->indices_len * args->cols) {
    MX_ERROR_MSG << kOpName << ": grad stores " << grad->indices_len << " row indices and "
                 << grad->data_len << " values, inconsistent with its shape "
                 << shape_str(inputs[kGrad].shape);
    return false;
  }
  args->grad = grad->data;
  args->indices = grad->indices;
  args->nnz = grad->indices_len;
  args->mean = inputs[kMean].data_ptr;
  args->var = inputs[kVar].data_ptr;
  return true;
}

/*!
 * \brief While alive, the calling thread flushes denormal results to zero and
 *        reads denormal inputs as zero (x86 MXCSR FTZ and DAZ), if `on`.
 *
 * Rows absent from the gradient decay their mean by beta1 every step: after
 * ~800 such steps it passes through the denormal range, where x86 arithmetic
 * is 30-45x slower (measured on this op). Flushing changes only values below
 * 1.2e-38 (float32), so results stay within any tolerance of MXNet's but are
 * no longer bitwise equal: hence opt-in. A no-op off x86.
 */
class FlushDenormals {
 public:
  explicit FlushDenormals(bool on) : on_(on) {
#if GS_HOST_SIMD
    if (on_) {
      saved_ = _mm_getcsr();
      _mm_setcsr(saved_ | kFlushToZero | kDenormalsAreZero);
    }
#endif
  }
  ~FlushDenormals() {
#if GS_HOST_SIMD
    if (on_) _mm_setcsr(saved_);
#endif
  }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  static constexpr unsigned kFlushToZero = 0x8000;
  static constexpr unsigned kDenormalsAreZero = 0x0040;
  bool on_;
  unsigned saved_ = 0;
};

/*!
 * \brief Update rows [begin, end), walking the gradient indices alongside from
 *        the first one >= begin (found by binary search).
 */
template <bool kClip, typename T>
void update_rows(const ga::AdamScalars<T>& s, const UpdateArgs& a, int64_t begin, int64_t end) {
  T* weight = static_cast<T*>(a.weight);
  T* mean = static_cast<T*>(a.mean);
  T* var = static_cast<T*>(a.var);
  const T* grad = static_cast<const T*>(a.grad);
  const int64_t cols = a.cols;
  int64_t k = ga::lower_bound(a.indices, a.nnz, begin);
  for (int64_t row = begin; row < end; ++row) {
    const int64_t offset = row * cols;
    if (k < a.nnz && a.indices[k] == row) {
      ga::update_row_with_grad<kClip>(cols, weight + offset, mean + offset, var + offset,
                                      grad + k * cols, s);
      ++k;
    } else {
      ga::update_row_without_grad<kClip>(cols, weight + offset, mean + offset, var + offset, s);
    }
  }
}

/*!
 * \brief CPU kernel: each OpenMP thread owns a contiguous block of rows, so the
 *        pass over weight/mean/var is one sequential stream per thread.
 */
template <bool kClip, typename T>
void update_cpu(const ga::AdamScalars<T>& s, const UpdateArgs& a, bool flush_denormals) {
  const int team = gluon_sparse::team_size(a.num_rows * a.cols, a.num_rows);
  gluon_sparse::parallel_blocks(a.num_rows, team, [&](int64_t begin, int64_t end) {
    const FlushDenormals mode(flush_denormals);  // MXCSR is per thread
    update_rows<kClip, T>(s, a, begin, end);
  });
}

template <typename T>
void update_cpu(const AdamParams& p, const UpdateArgs& a) {
  const auto s = ga::make_scalars<T>(p.lr, p.beta1, p.beta2, p.epsilon, p.wd, p.rescale_grad,
                                     p.clip_gradient);
  // MXNet clips when clip_gradient >= 0 (its default, -1, disables clipping).
  if (p.clip_gradient >= 0.0f) {
    update_cpu<true, T>(s, a, p.flush_denormals);
  } else {
    update_cpu<false, T>(s, a, p.flush_denormals);
  }
}

MXReturnValue forward_cpu(const std::unordered_map<std::string, std::string>& attrs,
                          std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                          const OpResource& res) {
  AdamParams p;
  UpdateArgs a;
  if (!parse_params(attrs, &p) || !collect_args(*inputs, *outputs, &a)) return MX_FAIL;
  // Validate every index before any memory is touched.
  const int64_t bad = ga::first_invalid_index(a.indices, a.nnz, a.num_rows);
  if (bad < a.nnz) {
    MX_ERROR_MSG << kOpName << ": "
                 << gluon_sparse::invalid_row_index_message(bad, a.indices[bad],
                                                            bad > 0 ? a.indices[bad - 1] : 0,
                                                            a.num_rows);
    return MX_FAIL;
  }
  if (a.dtype == kFloat32) {
    update_cpu<float>(p, a);
  } else {
    update_cpu<double>(p, a);
  }
  return MX_SUCCESS;
}

#if GLUON_SPARSE_WITH_CUDA
template <typename T>
ga::cuda::LaunchStatus launch_gpu(const AdamParams& p, const UpdateArgs& a, void* stream) {
  const auto s = ga::make_scalars<T>(p.lr, p.beta1, p.beta2, p.epsilon, p.wd, p.rescale_grad,
                                     p.clip_gradient);
  return ga::cuda::launch_update<T>(s, p.clip_gradient >= 0.0f, static_cast<T*>(a.weight),
                                    static_cast<T*>(a.mean), static_cast<T*>(a.var),
                                    static_cast<const T*>(a.grad), a.indices, a.nnz, a.num_rows,
                                    a.cols, stream);
}

MXReturnValue forward_gpu(const std::unordered_map<std::string, std::string>& attrs,
                          std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                          const OpResource& res) {
  AdamParams p;
  UpdateArgs a;
  if (!parse_params(attrs, &p) || !collect_args(*inputs, *outputs, &a)) return MX_FAIL;
  void* stream = res.get_cuda_stream();
  int64_t bad = a.nnz, value = 0, previous = 0;
  if (a.nnz > 0) {
    void* workspace = res.alloc_gpu(sizeof(unsigned long long));
    const auto status = ga::cuda::find_invalid_index(a.indices, a.nnz, a.num_rows, workspace,
                                                     stream, &bad, &value, &previous);
    if (!status.ok()) {
      MX_ERROR_MSG << kOpName << ": CUDA error while checking grad indices: " << status.error;
      return MX_FAIL;
    }
  }
  if (bad < a.nnz) {
    MX_ERROR_MSG << kOpName << ": "
                 << gluon_sparse::invalid_row_index_message(bad, value, previous, a.num_rows);
    return MX_FAIL;
  }
  const auto status = a.dtype == kFloat32 ? launch_gpu<float>(p, a, stream)
                                          : launch_gpu<double>(p, a, stream);
  if (!status.ok()) {
    MX_ERROR_MSG << kOpName << ": CUDA error: " << status.error;
    return MX_FAIL;
  }
  return MX_SUCCESS;
}
#endif  // GLUON_SPARSE_WITH_CUDA

// ---------------------------------------------------------------- attributes

MXReturnValue parse_attrs(const std::unordered_map<std::string, std::string>& attrs,
                          int* num_inputs, int* num_outputs) {
  AdamParams p;
  if (!parse_params(attrs, &p)) return MX_FAIL;
  *num_inputs = kNumInputs;
  *num_outputs = 1;
  return MX_SUCCESS;
}

MXReturnValue infer_type(const std::unordered_map<std::string, std::string>& attrs,
                         std::vector<int>* in_types, std::vector<int>* out_types) {
  const int dtype = (*in_types)[kWeight];
  if (dtype != kFloat32 && dtype != kFloat64) {
    MX_ERROR_MSG << kOpName << ": weight must be float32 or float64 (dtype code " << dtype
                 << "); train float16 weights with multi_precision=True, which updates a "
                 << "float32 master copy";
    return MX_FAIL;
  }
  for (int i = 1; i < kNumInputs; ++i) {
    if ((*in_types)[i] != dtype) {
      MX_ERROR_MSG << kOpName << ": " << kInputNames[i] << " has dtype code " << (*in_types)[i]
                   << " but weight has " << dtype << "; all four must share one dtype";
      return MX_FAIL;
    }
  }
  (*out_types)[0] = dtype;
  return MX_SUCCESS;
}

MXReturnValue infer_shape(const std::unordered_map<std::string, std::string>& attrs,
                          std::vector<std::vector<unsigned int>>* in_shapes,
                          std::vector<std::vector<unsigned int>>* out_shapes) {
  const auto& weight = (*in_shapes)[kWeight];
  if (weight.empty()) {
    MX_ERROR_MSG << kOpName << ": weight must have at least one dimension (its rows)";
    return MX_FAIL;
  }
  for (int i = 1; i < kNumInputs; ++i) {
    if ((*in_shapes)[i] != weight) {
      std::vector<int64_t> got((*in_shapes)[i].begin(), (*in_shapes)[i].end());
      std::vector<int64_t> want(weight.begin(), weight.end());
      MX_ERROR_MSG << kOpName << ": " << kInputNames[i] << " has shape " << shape_str(got)
                   << " but weight has shape " << shape_str(want);
      return MX_FAIL;
    }
  }
  (*out_shapes)[0] = weight;
  return MX_SUCCESS;
}

MXReturnValue infer_storage_type(const std::unordered_map<std::string, std::string>& attrs,
                                 std::vector<int>* in_stypes, std::vector<int>* out_stypes) {
  const int weight = (*in_stypes)[kWeight];
  if (weight != kDefaultStorage && weight != kRowSparseStorage) {
    MX_ERROR_MSG << kOpName << ": weight must be dense (default) or row_sparse storage";
    return MX_FAIL;
  }
  if ((*in_stypes)[kGrad] != kRowSparseStorage) {
    MX_ERROR_MSG << kOpName << ": grad must be row_sparse; use mx.nd.adam_update for a dense "
                 << "gradient";
    return MX_FAIL;
  }
  for (int i : {kMean, kVar}) {
    if ((*in_stypes)[i] != kDefaultStorage) {
      MX_ERROR_MSG << kOpName << ": " << kInputNames[i]
                   << " must be dense (default storage) for a standard update";
      return MX_FAIL;
    }
  }
  (*out_stypes)[0] = weight;
  return MX_SUCCESS;
}

MXReturnValue mutate_inputs(const std::unordered_map<std::string, std::string>& attrs,
                            std::vector<int>* input_indices) {
  input_indices->push_back(kMean);
  input_indices->push_back(kVar);
  return MX_SUCCESS;
}

}  // namespace

REGISTER_OP(gs_adam_update)
    .setParseAttrs(parse_attrs)
    .setInferType(infer_type)
    .setInferShape(infer_shape)
    .setInferSType(infer_storage_type)
    .setMutateInputs(mutate_inputs)
#if GLUON_SPARSE_WITH_CUDA
    .setForward(forward_gpu, "gpu")
#endif
    .setForward(forward_cpu, "cpu");
