/*!
 * CUDA launchers of the `gluon_sparse_dot` operator (see sparse_dot.cc).
 *
 * Plain C++ declarations over raw device pointers so that the operator's .cc
 * file, compiled by the host compiler against lib_api.h, can call kernels that
 * nvcc compiles in sparse_dot.cu without either side seeing the other's
 * headers. Every launcher enqueues on `stream` and reports failure through its
 * return value (an empty string on success, else a message naming the problem).
 */
#ifndef GLUON_SPARSE_OPS_SPARSE_DOT_H_
#define GLUON_SPARSE_OPS_SPARSE_DOT_H_

#include <cstddef>
#include <cstdint>
#include <string>

// Same declaration as CUDA's driver_types.h, so the host compiler needs no CUDA headers.
struct CUstream_st;
typedef CUstream_st* cudaStream_t;

namespace gluon_sparse {
namespace sparse_dot_cuda {

/*!
 * \brief out = dot(csr, weight), or dot(csr*csr, weight*weight) when `squared`,
 * plus `bias` (units,) on every row unless it is null.
 *
 * The CSR arrays (`indptr` of batch+1, `cols`/`vals` of nnz) are validated on
 * the device first: the call fails, naming the offending entry, if indptr is
 * not a monotone 0..nnz sequence or a column lies outside [0, in_units).
 */
template <typename T>
std::string Forward(const int64_t* indptr, const int64_t* cols, const T* vals,
                    int64_t batch, int64_t nnz, const T* weight, int64_t in_units,
                    int64_t units, bool squared, const T* bias, T* out, void* workspace,
                    cudaStream_t stream);

/*! \brief Bytes of device workspace that Forward needs. */
size_t ForwardWorkspaceBytes(int64_t batch, int64_t nnz);

/*!
 * \brief Weight gradient, step 1: sort the batch's column ids and count the distinct ones.
 *
 * Fills the workspace (WeightGradWorkspaceBytes) and writes the number of
 * distinct columns to `*num_rows` (a host pointer; the call waits for it).
 */
std::string WeightGradRows(const int64_t* indptr, const int64_t* cols, int64_t batch,
                           int64_t nnz, int64_t in_units, void* workspace,
                           int64_t* num_rows, cudaStream_t stream);

/*! \brief Bytes of device workspace that WeightGradRows / WeightGradValues need. */
size_t WeightGradWorkspaceBytes(int64_t batch, int64_t nnz);

/*!
 * \brief Weight gradient, step 2: fill the row_sparse gradient of `num_rows` rows.
 *
 * `row_ids` (num_rows) receives the sorted distinct columns and `grad`
 * (num_rows x units) their gradient rows: sum over the entries of each column
 * of val * ograd[row] (2 * val^2 * weight[col] * ograd[row] when `squared`).
 */
template <typename T>
std::string WeightGradValues(const T* vals, int64_t nnz, const T* ograd, const T* weight,
                             int64_t units, bool squared, const void* workspace,
                             int64_t num_rows, int64_t* row_ids, T* grad,
                             cudaStream_t stream);

/*!
 * \brief grad (units) = the column sums of ograd (batch, units): the bias gradient,
 * each column summed over the batch in order as MXNet does (column_sum.h).
 */
template <typename T>
std::string BiasGrad(const T* ograd, int64_t batch, int64_t units, T* grad, cudaStream_t stream);

}  // namespace sparse_dot_cuda
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_OPS_SPARSE_DOT_H_
