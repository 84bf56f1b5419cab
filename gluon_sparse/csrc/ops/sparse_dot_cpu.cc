/*!
 * CPU compute of `gluon_sparse_dot` (see sparse_dot.cc for the operator): the
 * forward product and the row_sparse weight gradient built from the batch alone.
 */
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "column_sum.h"
#include "deferred_registry.h"
#include "omp_threads.h"
#include "sparse_dot_op.h"

using namespace mxnet::ext;

namespace gluon_sparse {
namespace dot {
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
    GS_ERROR_MSG << "gluon_sparse_dot: the CSR data has " << batch << " rows but its indptr "
                 << "holds " << indptr_len << " entries (expected " << batch + 1 << ")";
    return false;
  }
  if (indptr[0] != 0 || indptr[batch] != nnz) {
    GS_ERROR_MSG << "gluon_sparse_dot: the CSR indptr must run from 0 to nnz=" << nnz
                 << " but runs from " << indptr[0] << " to " << indptr[batch];
    return false;
  }
  for (int64_t r = 0; r < batch; ++r) {
    if (indptr[r + 1] < indptr[r]) {
      GS_ERROR_MSG << "gluon_sparse_dot: the CSR indptr decreases at row " << r << " ("
                   << indptr[r] << " then " << indptr[r + 1] << ")";
      return false;
    }
  }
  for (int64_t k = 0; k < nnz; ++k) {
    if (cols[k] < 0 || cols[k] >= in_units) {
      auto row = std::upper_bound(indptr, indptr + batch + 1, k) - indptr - 1;
      GS_ERROR_MSG << "gluon_sparse_dot: CSR column index " << cols[k] << " (row " << row
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

/*!
 * \brief out[r, :] = sum over the row's entries of x * weight[col, :] (x^2 * weight^2 if
 * squared), then + bias when there is one (after the sum, as a separate add would).
 */
template <typename T>
void ForwardCpu(const CsrView<T>& x, const T* weight, const T* bias, int64_t units, bool squared,
                T* out) {
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
      if (bias != nullptr) {
        for (int64_t u = 0; u < units; ++u) dst[u] += bias[u];
      }
    }
  });
}

/*! \brief grad[u] = sum over the batch of ograd[r, u], as MXNet's bias gradient (column_sum.h). */
template <typename T>
void BiasGradCpu(const T* ograd, int64_t batch, int64_t units, T* grad) {
  const int team = gluon_sparse::team_size(batch * units, units);
  gluon_sparse::parallel_blocks(units, team, [&](int64_t begin, int64_t end) {
    gluon_sparse::column_sums(ograd, batch, units, begin, end, grad);
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
MXReturnValue ForwardCpuTyped(const Options& options, std::vector<MXTensor>* inputs,
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
    GS_ERROR_MSG << "gluon_sparse_dot: " << deferred_error;
    return MX_FAIL;
  }
  const T* bias = options.with_bias ? (*inputs)[2].data<T>() : nullptr;
  ForwardCpu(x, weight.data<T>(), bias, units, options.squared, (*outputs)[0].data<T>());
  return MX_SUCCESS;
}

template <typename T>
MXReturnValue BackwardCpuTyped(const Options& options, std::vector<MXTensor>* inputs,
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
    GS_ERROR_MSG << "gluon_sparse_dot: a batch with " << num_rows << " distinct columns exceeds "
                 << "what MXNet's sparse allocator accepts (2^31 - 1)";
    return MX_FAIL;
  }
  const T* ograd = (*inputs)[kOgrad].data<T>();
  MXSparse* grad = (*outputs)[kWeightGrad].data<MXSparse>();
  res.alloc_sparse(grad, 1, static_cast<int>(num_rows));
  WeightGradCpu(x, ograd, weight.data<T>(), units, options.squared, order, starts, grad->indices,
                static_cast<T*>(grad->data));
  if (options.with_bias) BiasGradCpu(ograd, x.batch, units, (*outputs)[kBiasGrad].data<T>());
  return MX_SUCCESS;
}

}  // namespace

MXReturnValue compute_cpu(const ops::Attrs& attrs, std::vector<MXTensor>* inputs,
                          std::vector<MXTensor>* outputs, const OpResource& res) {
  Options options;
  if (!parse_options(attrs, &options) || !check_float_type((*inputs)[1], "weight")) {
    return MX_FAIL;
  }
  return ops::with_float_type((*inputs)[1].dtype, [&](auto zero) {
    return ForwardCpuTyped<decltype(zero)>(options, inputs, outputs);
  });
}

MXReturnValue gradient_cpu(const ops::Attrs& attrs, std::vector<MXTensor>* inputs,
                           std::vector<MXTensor>* outputs, const OpResource& res) {
  Options options;
  if (!parse_options(attrs, &options) || !check_float_type((*inputs)[kWeight], "weight")) {
    return MX_FAIL;
  }
  return ops::with_float_type((*inputs)[kWeight].dtype, [&](auto zero) {
    return BackwardCpuTyped<decltype(zero)>(options, inputs, outputs, res);
  });
}

}  // namespace dot
}  // namespace gluon_sparse
