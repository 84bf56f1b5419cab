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
 * Output:  out    (batch, units)     dense
 * Gradient (generated `_backward_gluon_sparse_dot`): weight -> row_sparse with
 * the batch's distinct columns as rows, sorted; data -> an empty (all-zero)
 * row_sparse array: like MXNet's sparse.dot, the op does not differentiate
 * with respect to its sparse operand.
 *
 * Attribute `squared` ("0"/"1", default "0"): compute
 * dot(data * data, weight * weight) instead, the sum_i x_i^2 v_if^2 term of a
 * factorization machine, without squaring the whole weight every step.
 *
 * lib_api hands an op neither the write request (write/add/null) nor a way to
 * tell an output that nobody reads; the Python blocks therefore use this op
 * only for grad_req='write' weights and fall back to MXNet's dot otherwise.
 */
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "mxnet/lib_api.h"
#include "adam_deferred_registry.h"
#include "sparse_dot.h"
#include "omp_threads.h"

using namespace mxnet::ext;

namespace {

/*! \brief A CSR matrix as raw pointers, validated against the operand shapes. */
template <typename T>
struct CsrView {
  const int64_t* indptr;
  const int64_t* cols;
  const T* vals;
  int64_t batch;
  int64_t nnz;
};

/*!
 * \brief Check that (indptr, cols) describe a valid CSR batch with in_units columns.
 *
 * O(batch + nnz); it runs before any gather so that a malformed matrix is an
 * error naming its first bad entry, never an out-of-bounds read.
 */
bool ValidateCsr(const int64_t* indptr, int64_t indptr_len, const int64_t* cols, int64_t nnz,
                 int64_t batch, int64_t in_units) {
  if (indptr_len != batch + 1) {
    MX_ERROR_MSG << "gluon_sparse_dot: the CSR data has " << batch << " rows but its indptr "
                 << "holds " << indptr_len << " entries (expected " << batch + 1 << ")";
    return false;
  }
  if (indptr[0] != 0 || indptr[batch] != nnz) {
    MX_ERROR_MSG << "gluon_sparse_dot: the CSR indptr must run from 0 to nnz=" << nnz
                 << " but runs from " << indptr[0] << " to " << indptr[batch];
    return false;
  }
  for (int64_t r = 0; r < batch; ++r) {
    if (indptr[r + 1] < indptr[r]) {
      MX_ERROR_MSG << "gluon_sparse_dot: the CSR indptr decreases at row " << r << " ("
                   << indptr[r] << " then " << indptr[r + 1] << ")";
      return false;
    }
  }
  for (int64_t k = 0; k < nnz; ++k) {
    if (cols[k] < 0 || cols[k] >= in_units) {
      auto row = std::upper_bound(indptr, indptr + batch + 1, k) - indptr - 1;
      MX_ERROR_MSG << "gluon_sparse_dot: CSR column index " << cols[k] << " (row " << row
                   << ", entry " << k << ") is outside [0, " << in_units << ")";
      return false;
    }
  }
  return true;
}

/*! \brief The non-zeros of a dense (batch, in_units) matrix as CSR arrays. */
template <typename T>
void CompressDense(const T* dense, int64_t batch, int64_t in_units, std::vector<int64_t>* indptr,
                   std::vector<int64_t>* cols, std::vector<T>* vals) {
  indptr->assign(1, 0);
  for (int64_t r = 0; r < batch; ++r) {
    const T* row = dense + r * in_units;
    for (int64_t c = 0; c < in_units; ++c) {
      if (row[c] != T(0)) {
        cols->push_back(c);
        vals->push_back(row[c]);
      }
    }
    indptr->push_back(static_cast<int64_t>(cols->size()));
  }
}

/*! \brief out[r, :] = sum over the row's entries of x * weight[col, :] (x^2 * weight^2 if squared). */
template <typename T>
void ForwardCpu(const CsrView<T>& x, const T* weight, int64_t units, bool squared, T* out) {
  const int team = gluon_sparse::team_size(x.nnz * units + x.batch * units, x.batch);
  gluon_sparse::parallel_blocks(x.batch, team, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      T* dst = out + r * units;
      std::fill(dst, dst + units, T(0));
      for (int64_t k = x.indptr[r]; k < x.indptr[r + 1]; ++k) {
        const T* w = weight + x.cols[k] * units;
        const T v = x.vals[k];
        if (squared) {
          const T v2 = v * v;
          for (int64_t u = 0; u < units; ++u) dst[u] += v2 * w[u] * w[u];
        } else {
          for (int64_t u = 0; u < units; ++u) dst[u] += v * w[u];
        }
      }
    }
  });
}

/*!
 * \brief The batch's entries ordered by column, and where each distinct column starts.
 *
 * `order` holds entry ids sorted by (column, entry), so a column's entries
 * keep their row order and the sums below are deterministic; `starts` has one
 * offset into `order` per distinct column plus a final nnz.
 */
template <typename T>
void GroupByColumn(const CsrView<T>& x, std::vector<int64_t>* order, std::vector<int64_t>* starts) {
  // Sorting (column, entry) pairs packed as one key pair keeps this a plain
  // std::sort over 16-byte values: nnz is ~100 per step, so no radix sort.
  std::vector<std::pair<int64_t, int64_t>> keyed(x.nnz);
  for (int64_t k = 0; k < x.nnz; ++k) keyed[k] = {x.cols[k], k};
  std::sort(keyed.begin(), keyed.end());
  order->resize(x.nnz);
  starts->clear();
  for (int64_t i = 0; i < x.nnz; ++i) {
    (*order)[i] = keyed[i].second;
    if (i == 0 || keyed[i].first != keyed[i - 1].first) starts->push_back(i);
  }
  starts->push_back(x.nnz);
}

/*!
 * \brief Fill the row_sparse weight gradient: one row per distinct column of the batch.
 *
 * grad[j, :] = sum over entries k of column row_ids[j] of
 * vals[k] * ograd[row(k), :]  (2 * vals[k]^2 * weight[col, :] * ograd[row(k), :] if squared).
 */
template <typename T>
void WeightGradCpu(const CsrView<T>& x, const T* ograd, const T* weight, int64_t units,
                   bool squared, const std::vector<int64_t>& order,
                   const std::vector<int64_t>& starts, int64_t* row_ids, T* grad) {
  std::vector<int64_t> row_of(x.nnz);
  for (int64_t r = 0; r < x.batch; ++r) {
    for (int64_t k = x.indptr[r]; k < x.indptr[r + 1]; ++k) row_of[k] = r;
  }
  const int64_t num_rows = static_cast<int64_t>(starts.size()) - 1;
  const int team = gluon_sparse::team_size(x.nnz * units + num_rows * units, num_rows);
  gluon_sparse::parallel_blocks(num_rows, team, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      const int64_t col = x.cols[order[starts[j]]];
      row_ids[j] = col;
      T* dst = grad + j * units;
      std::fill(dst, dst + units, T(0));
      for (int64_t i = starts[j]; i < starts[j + 1]; ++i) {
        const int64_t k = order[i];
        const T* g = ograd + row_of[k] * units;
        const T v = x.vals[k];
        if (squared) {
          const T* w = weight + col * units;
          const T scale = T(2) * v * v;
          for (int64_t u = 0; u < units; ++u) dst[u] += scale * w[u] * g[u];
        } else {
          for (int64_t u = 0; u < units; ++u) dst[u] += v * g[u];
        }
      }
    }
  });
}

bool ParseSquared(const std::unordered_map<std::string, std::string>& attrs, bool* squared) {
  auto it = attrs.find("squared");
  if (it == attrs.end()) {
    *squared = false;
    return true;
  }
  const std::string& v = it->second;
  if (v == "0" || v == "False" || v == "false") {
    *squared = false;
  } else if (v == "1" || v == "True" || v == "true") {
    *squared = true;
  } else {
    MX_ERROR_MSG << "gluon_sparse_dot: attribute squared must be 0/1 or True/False, got '" << v
                 << "'";
    return false;
  }
  return true;
}

/*!
 * \brief A CSR view of `data` (CSR, or a dense matrix compressed into `storage`).
 *
 * Returns false, with an error message, if the CSR arrays are malformed.
 */
template <typename T>
bool CsrOf(MXTensor* data, int64_t in_units, std::vector<int64_t>* indptr_storage,
           std::vector<int64_t>* cols_storage, std::vector<T>* vals_storage, CsrView<T>* view) {
  const int64_t batch = data->shape[0];
  view->batch = batch;
  if (data->stype == kCSRStorage) {
    MXSparse* csr = data->data<MXSparse>();
    // An all-zero CSR may come without an indptr; treat it as batch empty rows.
    if (csr->indices_len == 0 && csr->indptr_len == 0) {
      indptr_storage->assign(batch + 1, 0);
      *view = {indptr_storage->data(), nullptr, nullptr, batch, 0};
      return true;
    }
    if (!ValidateCsr(csr->indptr, csr->indptr_len, csr->indices, csr->indices_len, batch,
                     in_units)) {
      return false;
    }
    *view = {csr->indptr, csr->indices, static_cast<const T*>(csr->data), batch,
             csr->indices_len};
    return true;
  }
  CompressDense(data->data<T>(), batch, in_units, indptr_storage, cols_storage, vals_storage);
  *view = {indptr_storage->data(), cols_storage->data(), vals_storage->data(), batch,
           static_cast<int64_t>(cols_storage->size())};
  return true;
}

template <typename T>
MXReturnValue ForwardCpuTyped(bool squared, std::vector<MXTensor>* inputs,
                              std::vector<MXTensor>* outputs) {
  MXTensor& weight = (*inputs)[1];
  const int64_t in_units = weight.shape[0], units = weight.shape[1];
  std::vector<int64_t> indptr, cols;
  std::vector<T> vals;
  CsrView<T> x;
  if (!CsrOf(&(*inputs)[0], in_units, &indptr, &cols, &vals, &x)) return MX_FAIL;
  // Rows left behind by deferred Adam are brought up to date before they are read
  // (nothing to do, in one lookup, unless the weight is registered).
  std::string deferred_error;
  if (!gluon_sparse::deferred::refresh_rows_cpu(weight.data_ptr, weight.dtype, x.cols, x.nnz,
                                                &deferred_error)) {
    MX_ERROR_MSG << "gluon_sparse_dot: " << deferred_error;
    return MX_FAIL;
  }
  ForwardCpu(x, weight.data<T>(), units, squared, (*outputs)[0].data<T>());
  return MX_SUCCESS;
}

// Backward inputs, in the order lib_api's generated FGradient passes them.
enum BackwardInput { kOgrad = 0, kData = 1, kWeight = 2, kOut = 3, kNumBackwardInputs = 4 };

template <typename T>
MXReturnValue BackwardCpuTyped(bool squared, std::vector<MXTensor>* inputs,
                               std::vector<MXTensor>* outputs, const OpResource& res) {
  MXTensor& weight = (*inputs)[kWeight];
  const int64_t in_units = weight.shape[0], units = weight.shape[1];
  std::vector<int64_t> indptr, cols;
  std::vector<T> vals;
  CsrView<T> x;
  if (!CsrOf(&(*inputs)[kData], in_units, &indptr, &cols, &vals, &x)) return MX_FAIL;
  std::vector<int64_t> order, starts;
  GroupByColumn(x, &order, &starts);
  const int64_t num_rows = static_cast<int64_t>(starts.size()) - 1;
  if (num_rows > std::numeric_limits<int>::max()) {
    MX_ERROR_MSG << "gluon_sparse_dot: a batch with " << num_rows << " distinct columns exceeds "
                 << "what MXNet's sparse allocator accepts (2^31 - 1)";
    return MX_FAIL;
  }
  MXSparse* grad = (*outputs)[1].data<MXSparse>();
  res.alloc_sparse(grad, 1, static_cast<int>(num_rows));
  WeightGradCpu(x, (*inputs)[kOgrad].data<T>(), weight.data<T>(), units, squared, order, starts,
                grad->indices, static_cast<T*>(grad->data));
  return MX_SUCCESS;
}

#if GLUON_SPARSE_WITH_CUDA
MXReturnValue FailCuda(const std::string& message) {
  MX_ERROR_MSG << "gluon_sparse_dot (GPU): " << message;
  return MX_FAIL;
}

template <typename T>
MXReturnValue ForwardGpuTyped(bool squared, std::vector<MXTensor>* inputs,
                              std::vector<MXTensor>* outputs, const OpResource& res) {
  namespace cu = gluon_sparse::sparse_dot_cuda;
  MXTensor& data = (*inputs)[0];
  MXTensor& weight = (*inputs)[1];
  if (data.stype != kCSRStorage) {
    return FailCuda("the data must be CSR on GPU (convert it with x.tostype('csr'))");
  }
  MXSparse* csr = data.data<MXSparse>();
  const int64_t batch = data.shape[0];
  if (csr->indptr_len != batch + 1 && !(csr->indptr_len == 0 && csr->indices_len == 0)) {
    return FailCuda("the CSR data has " + std::to_string(batch) + " rows but its indptr holds " +
                    std::to_string(csr->indptr_len) + " entries");
  }
  auto stream = static_cast<cudaStream_t>(res.get_cuda_stream());
  void* workspace = res.alloc_gpu(static_cast<int>(cu::ForwardWorkspaceBytes(batch, csr->indices_len)));
  // Rows left behind by deferred Adam are brought up to date before they are read.
  std::string deferred_error;
  if (!gluon_sparse::deferred::refresh_rows_gpu(weight.data_ptr, weight.dtype, csr->indices,
                                                csr->indices_len, stream, &deferred_error)) {
    return FailCuda(deferred_error);
  }
  std::string err = cu::Forward<T>(csr->indptr_len ? csr->indptr : nullptr, csr->indices,
                                   static_cast<const T*>(csr->data), batch, csr->indices_len,
                                   weight.data<T>(), weight.shape[0], weight.shape[1], squared,
                                   (*outputs)[0].data<T>(), workspace, stream);
  return err.empty() ? MX_SUCCESS : FailCuda(err);
}

template <typename T>
MXReturnValue BackwardGpuTyped(bool squared, std::vector<MXTensor>* inputs,
                               std::vector<MXTensor>* outputs, const OpResource& res) {
  namespace cu = gluon_sparse::sparse_dot_cuda;
  MXTensor& data = (*inputs)[kData];
  MXTensor& weight = (*inputs)[kWeight];
  if (data.stype != kCSRStorage) {
    return FailCuda("the data must be CSR on GPU (convert it with x.tostype('csr'))");
  }
  MXSparse* csr = data.data<MXSparse>();
  const int64_t batch = data.shape[0], nnz = csr->indices_len;
  auto stream = static_cast<cudaStream_t>(res.get_cuda_stream());
  MXSparse* grad = (*outputs)[1].data<MXSparse>();
  if (nnz == 0) {
    res.alloc_sparse(grad, 1, 0);
    return MX_SUCCESS;
  }
  void* workspace = res.alloc_gpu(static_cast<int>(cu::WeightGradWorkspaceBytes(batch, nnz)));
  int64_t num_rows = 0;
  std::string err = cu::WeightGradRows(csr->indptr, csr->indices, batch, nnz, weight.shape[0],
                                       workspace, &num_rows, stream);
  if (!err.empty()) return FailCuda(err);
  res.alloc_sparse(grad, 1, static_cast<int>(num_rows));
  err = cu::WeightGradValues<T>(static_cast<const T*>(csr->data), nnz,
                                (*inputs)[kOgrad].data<T>(), weight.data<T>(), weight.shape[1],
                                squared, workspace, num_rows, grad->indices,
                                static_cast<T*>(grad->data), stream);
  return err.empty() ? MX_SUCCESS : FailCuda(err);
}
#endif  // GLUON_SPARSE_WITH_CUDA

bool CheckFloatType(const MXTensor& t, const char* what) {
  if (t.dtype == kFloat32 || t.dtype == kFloat64) return true;
  MX_ERROR_MSG << "gluon_sparse_dot: " << what << " must be float32 or float64 (dtype code "
               << t.dtype << ")";
  return false;
}

/* ---------------------------- compute functions ---------------------------- */

MXReturnValue ForwardCpuFn(const std::unordered_map<std::string, std::string>& attrs,
                           std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                           const OpResource& res) {
  bool squared;
  if (!ParseSquared(attrs, &squared) || !CheckFloatType((*inputs)[1], "weight")) return MX_FAIL;
  if ((*inputs)[1].dtype == kFloat64) return ForwardCpuTyped<double>(squared, inputs, outputs);
  return ForwardCpuTyped<float>(squared, inputs, outputs);
}

MXReturnValue BackwardCpuFn(const std::unordered_map<std::string, std::string>& attrs,
                            std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                            const OpResource& res) {
  bool squared;
  if (!ParseSquared(attrs, &squared) || !CheckFloatType((*inputs)[kWeight], "weight")) {
    return MX_FAIL;
  }
  if ((*inputs)[kWeight].dtype == kFloat64) {
    return BackwardCpuTyped<double>(squared, inputs, outputs, res);
  }
  return BackwardCpuTyped<float>(squared, inputs, outputs, res);
}

#if GLUON_SPARSE_WITH_CUDA
MXReturnValue ForwardGpuFn(const std::unordered_map<std::string, std::string>& attrs,
                           std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                           const OpResource& res) {
  bool squared;
  if (!ParseSquared(attrs, &squared) || !CheckFloatType((*inputs)[1], "weight")) return MX_FAIL;
  if ((*inputs)[1].dtype == kFloat64) return ForwardGpuTyped<double>(squared, inputs, outputs, res);
  return ForwardGpuTyped<float>(squared, inputs, outputs, res);
}

MXReturnValue BackwardGpuFn(const std::unordered_map<std::string, std::string>& attrs,
                            std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                            const OpResource& res) {
  bool squared;
  if (!ParseSquared(attrs, &squared) || !CheckFloatType((*inputs)[kWeight], "weight")) {
    return MX_FAIL;
  }
  if ((*inputs)[kWeight].dtype == kFloat64) {
    return BackwardGpuTyped<double>(squared, inputs, outputs, res);
  }
  return BackwardGpuTyped<float>(squared, inputs, outputs, res);
}
#endif  // GLUON_SPARSE_WITH_CUDA

/* --------------------------- attribute functions --------------------------- */

MXReturnValue ParseAttrs(const std::unordered_map<std::string, std::string>& attrs,
                         int* num_in, int* num_out) {
  bool squared;
  if (!ParseSquared(attrs, &squared)) return MX_FAIL;
  *num_in = 2;
  *num_out = 1;
  return MX_SUCCESS;
}

MXReturnValue InferType(const std::unordered_map<std::string, std::string>& attrs,
                        std::vector<int>* in_types, std::vector<int>* out_types) {
  const int data = (*in_types)[0], weight = (*in_types)[1];
  const int known = weight != -1 ? weight : data;
  if (known != -1 && known != kFloat32 && known != kFloat64) {
    MX_ERROR_MSG << "gluon_sparse_dot: data and weight must be float32 or float64 (dtype code "
                 << known << ")";
    return MX_FAIL;
  }
  if (data != -1 && weight != -1 && data != weight) {
    MX_ERROR_MSG << "gluon_sparse_dot: data (dtype code " << data << ") and weight (dtype code "
                 << weight << ") must have the same dtype";
    return MX_FAIL;
  }
  (*in_types)[0] = (*in_types)[1] = known;
  (*out_types)[0] = known;
  return MX_SUCCESS;
}

MXReturnValue InferSType(const std::unordered_map<std::string, std::string>& attrs,
                         std::vector<int>* in_stypes, std::vector<int>* out_stypes) {
  if (in_stypes->size() == 2) {  // forward: (data, weight) -> out
    const int data = (*in_stypes)[0];
    if (data != kCSRStorage && data != kDefaultStorage) {
      MX_ERROR_MSG << "gluon_sparse_dot: data must be CSR or dense, not row_sparse";
      return MX_FAIL;
    }
    (*in_stypes)[1] = kDefaultStorage;
    (*out_stypes)[0] = kDefaultStorage;
    return MX_SUCCESS;
  }
  // backward: (ograd, data, weight, out) -> (data grad, weight grad). The data
  // gradient is never computed and left as an empty row_sparse array (all
  // zeros). Sparse, so MXNet allocates no dense (batch, in_units) array for
  // it; row_sparse rather than CSR, so that a graph using the same batch in
  // several products (the factorization machine) sums these with add_n's
  // row_sparse kernel instead of a storage fallback to dense.
  (*out_stypes)[0] = kRowSparseStorage;
  (*out_stypes)[1] = kRowSparseStorage;
  return MX_SUCCESS;
}

bool DimKnown(unsigned int d) { return d != 0 && d != std::numeric_limits<unsigned int>::max(); }

MXReturnValue InferShape(const std::unordered_map<std::string, std::string>& attrs,
                         std::vector<std::vector<unsigned int>>* in_shapes,
                         std::vector<std::vector<unsigned int>>* out_shapes) {
  std::vector<unsigned int>& data = (*in_shapes)[0];
  std::vector<unsigned int>& weight = (*in_shapes)[1];
  if (data.size() != 2 || weight.size() != 2) {
    MX_ERROR_MSG << "gluon_sparse_dot: data (batch, in_units) and weight (in_units, units) must "
                 << "both be 2-D, got " << data.size() << "-D data and " << weight.size()
                 << "-D weight";
    return MX_FAIL;
  }
  // Deferred initialisation: a weight whose in_units is still unknown takes the data's.
  if (!DimKnown(weight[0]) && DimKnown(data[1])) weight[0] = data[1];
  if (DimKnown(weight[0]) && DimKnown(data[1]) && weight[0] != data[1]) {
    MX_ERROR_MSG << "gluon_sparse_dot: data has " << data[1] << " columns but weight has "
                 << weight[0] << " rows (shapes (" << data[0] << ", " << data[1] << ") and ("
                 << weight[0] << ", " << weight[1] << "))";
    return MX_FAIL;
  }
  (*out_shapes)[0] = {data[0], weight[1]};
  return MX_SUCCESS;
}

}  // namespace

REGISTER_OP(gluon_sparse_dot)
    .setForward(ForwardCpuFn, "cpu")
    .setBackward(BackwardCpuFn, "cpu")
#if GLUON_SPARSE_WITH_CUDA
    .setForward(ForwardGpuFn, "gpu")
    .setBackward(BackwardGpuFn, "gpu")
#endif
    .setParseAttrs(ParseAttrs)
    .setInferType(InferType)
    .setInferSType(InferSType)
    .setInferShape(InferShape);
