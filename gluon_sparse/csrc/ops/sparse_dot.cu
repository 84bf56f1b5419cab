/*!
 * CUDA kernels of `gluon_sparse_dot` (see sparse_dot.cc for the operator and
 * sparse_dot.h for the launchers' contracts).
 *
 * Forward: one thread per (row, unit) sums the row's entries. Weight gradient:
 * the batch's column ids are radix-sorted together with their entry ids (cub),
 * distinct columns are numbered by a prefix sum over "first of its column"
 * flags, and one thread per (distinct column, unit) sums that column's
 * entries. Every step is O(nnz x units) or O(nnz log in_units); nothing
 * touches the other in_units rows. The number of distinct columns is copied
 * to the host once (MXNet must allocate the row_sparse output), the one
 * synchronisation of the backward, as in MXNet's own GPU sparse dot.
 */
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <string>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include "column_sum.h"
#include "sparse_dot.h"

namespace gluon_sparse {
namespace sparse_dot_cuda {
namespace {

constexpr int kThreads = 256;
constexpr size_t kAlign = 256;
constexpr unsigned long long kNoError = std::numeric_limits<unsigned long long>::max();

size_t AlignUp(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

unsigned int Blocks(int64_t n) { return static_cast<unsigned int>((n + kThreads - 1) / kThreads); }

std::string CudaError(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return "";
  return std::string(what) + ": " + cudaGetErrorString(err);
}

/*! \brief Carves one workspace block into the arrays of the weight gradient. */
struct GradWorkspace {
  unsigned long long* bad;  // [0]: first bad indptr row, [1]: first bad column entry
  int64_t* entry_ids;       // 0..nnz-1, the values sorted along with the columns
  int64_t* sorted_cols;
  int64_t* sorted_entries;
  int64_t* row_of;          // row of each entry
  int64_t* first_flags;     // 1 where a sorted column differs from its predecessor
  int64_t* segment_ids;     // inclusive prefix sum of first_flags (1-based)
  int64_t* starts;          // offset of each distinct column in the sorted order, then nnz
  void* cub_temp;
  size_t cub_temp_bytes;

  static size_t CubTempBytes(int64_t nnz) {
    size_t sort_bytes = 0, scan_bytes = 0;
    cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const int64_t*>(nullptr),
                                    static_cast<int64_t*>(nullptr),
                                    static_cast<const int64_t*>(nullptr),
                                    static_cast<int64_t*>(nullptr), static_cast<int>(nnz));
    cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, static_cast<const int64_t*>(nullptr),
                                  static_cast<int64_t*>(nullptr), static_cast<int>(nnz));
    return sort_bytes > scan_bytes ? sort_bytes : scan_bytes;
  }

  static size_t Bytes(int64_t nnz) {
    const size_t array = AlignUp(sizeof(int64_t) * (nnz + 1));
    return AlignUp(2 * sizeof(unsigned long long)) + 7 * array + AlignUp(CubTempBytes(nnz));
  }

  GradWorkspace(void* base, int64_t nnz) {
    char* p = static_cast<char*>(base);
    const size_t array = AlignUp(sizeof(int64_t) * (nnz + 1));
    bad = reinterpret_cast<unsigned long long*>(p);
    p += AlignUp(2 * sizeof(unsigned long long));
    int64_t** arrays[] = {&entry_ids, &sorted_cols, &sorted_entries, &row_of,
                          &first_flags, &segment_ids, &starts};
    for (int64_t** a : arrays) {
      *a = reinterpret_cast<int64_t*>(p);
      p += array;
    }
    cub_temp = p;
    cub_temp_bytes = CubTempBytes(nnz);
  }
};

/*! \brief Flags the first non-monotone indptr row and the first out-of-range column. */
__global__ void ValidateKernel(const int64_t* indptr, const int64_t* cols, int64_t batch,
                               int64_t nnz, int64_t in_units, unsigned long long* bad) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i == 0 && (indptr[0] != 0 || indptr[batch] != nnz)) {
    atomicMin(&bad[0], static_cast<unsigned long long>(batch));
  }
  if (i < batch && indptr[i + 1] < indptr[i]) {
    atomicMin(&bad[0], static_cast<unsigned long long>(i));
  }
  if (i < nnz && (cols[i] < 0 || cols[i] >= in_units)) {
    atomicMin(&bad[1], static_cast<unsigned long long>(i));
  }
}

/*! \brief Runs ValidateKernel and turns its flags into a message ("" when valid). */
std::string Validate(const int64_t* indptr, const int64_t* cols, int64_t batch, int64_t nnz,
                     int64_t in_units, unsigned long long* bad, cudaStream_t stream) {
  cudaMemsetAsync(bad, 0xFF, 2 * sizeof(unsigned long long), stream);
  const int64_t n = batch > nnz ? batch : nnz;
  ValidateKernel<<<Blocks(n > 0 ? n : 1), kThreads, 0, stream>>>(indptr, cols, batch, nnz,
                                                                 in_units, bad);
  unsigned long long host_bad[2];
  cudaMemcpyAsync(host_bad, bad, sizeof(host_bad), cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  std::string err = CudaError("CSR validation");
  if (!err.empty()) return err;
  if (host_bad[0] == static_cast<unsigned long long>(batch)) {
    return "the CSR indptr must run from 0 to nnz=" + std::to_string(nnz);
  }
  if (host_bad[0] != kNoError) {
    return "the CSR indptr decreases at row " + std::to_string(host_bad[0]);
  }
  if (host_bad[1] != kNoError) {
    return "CSR entry " + std::to_string(host_bad[1]) + " has a column index outside [0, " +
           std::to_string(in_units) + ")";
  }
  return "";
}

template <typename T>
__global__ void ForwardKernel(const int64_t* indptr, const int64_t* cols, const T* vals,
                              int64_t batch, const T* weight, int64_t units, bool squared,
                              const T* bias, T* out) {
  const int64_t r = blockIdx.x;
  const int64_t u = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (r >= batch || u >= units) return;
  // Never-fused, in the CPU operator's order and association (sparse_dot_cpu.cc):
  // the result is the CPU's bit for bit.
  T acc = 0;
  if (indptr != nullptr) {
    for (int64_t k = indptr[r]; k < indptr[r + 1]; ++k) {
      const T w = weight[cols[k] * units + u];
      const T v = vals[k];
      acc = ops::add(acc, squared ? ops::mul(ops::mul(ops::mul(v, v), w), w) : ops::mul(v, w));
    }
  }
  out[r * units + u] = bias != nullptr ? ops::add(acc, bias[u]) : acc;
}

// One thread per column, down the rows in order: the sum of MXNet's reduction.
template <typename T>
__global__ void BiasGradKernel(const T* ograd, int64_t batch, int64_t units, T* grad) {
  const int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (u >= units) return;
  T sum = 0, residual = 0;
  for (int64_t r = 0; r < batch; ++r) kahan_add(&sum, &residual, ograd[r * units + u]);
  grad[u] = sum;
}

__global__ void RowOfEntryKernel(const int64_t* indptr, int64_t batch, int64_t* row_of,
                                 int64_t* entry_ids) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= batch) return;
  for (int64_t k = indptr[r]; k < indptr[r + 1]; ++k) {
    row_of[k] = r;
    entry_ids[k] = k;
  }
}

__global__ void FirstOfColumnKernel(const int64_t* sorted_cols, int64_t nnz, int64_t* flags) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < nnz) flags[i] = (i == 0 || sorted_cols[i] != sorted_cols[i - 1]) ? 1 : 0;
}

__global__ void SegmentStartsKernel(const int64_t* flags, const int64_t* segment_ids, int64_t nnz,
                                    int64_t* starts) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= nnz) return;
  if (flags[i]) starts[segment_ids[i] - 1] = i;
  if (i == nnz - 1) starts[segment_ids[i]] = nnz;
}

template <typename T>
__global__ void WeightGradKernel(const T* vals, const T* ograd, const T* weight, int64_t units,
                                 bool squared, const int64_t* sorted_cols,
                                 const int64_t* sorted_entries, const int64_t* row_of,
                                 const int64_t* starts, int64_t num_rows, int64_t* row_ids,
                                 T* grad) {
  const int64_t j = blockIdx.x;
  const int64_t u = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= num_rows) return;
  const int64_t col = sorted_cols[starts[j]];
  if (u == 0) row_ids[j] = col;
  if (u >= units) return;
  // Never-fused, entries in (column, entry) order as on the CPU: bitwise the CPU's.
  T acc = 0;
  for (int64_t i = starts[j]; i < starts[j + 1]; ++i) {
    const int64_t k = sorted_entries[i];
    const T g = ograd[row_of[k] * units + u];
    const T v = vals[k];
    acc = ops::add(acc, squared ? ops::mul(ops::mul(ops::mul(ops::mul(T(2), v), v),
                                                    weight[col * units + u]), g)
                                : ops::mul(v, g));
  }
  grad[j * units + u] = acc;
}

/*! \brief Number of low bits that hold every column id below in_units. */
int KeyBits(int64_t in_units) {
  int bits = 1;
  while (bits < 63 && (int64_t(1) << bits) < in_units) ++bits;
  return bits;
}

}  // namespace

size_t ForwardWorkspaceBytes(int64_t batch, int64_t nnz) {
  return AlignUp(2 * sizeof(unsigned long long));
}

template <typename T>
std::string Forward(const int64_t* indptr, const int64_t* cols, const T* vals, int64_t batch,
                    int64_t nnz, const T* weight, int64_t in_units, int64_t units, bool squared,
                    const T* bias, T* out, void* workspace, cudaStream_t stream) {
  if (batch == 0 || units == 0) return "";
  if (indptr != nullptr) {
    std::string err = Validate(indptr, cols, batch, nnz, in_units,
                               static_cast<unsigned long long*>(workspace), stream);
    if (!err.empty()) return err;
  }
  dim3 grid(static_cast<unsigned int>(batch), Blocks(units));
  ForwardKernel<T><<<grid, kThreads, 0, stream>>>(indptr, cols, vals, batch, weight, units,
                                                  squared, bias, out);
  return CudaError("forward kernel");
}

template <typename T>
std::string BiasGrad(const T* ograd, int64_t batch, int64_t units, T* grad, cudaStream_t stream) {
  if (units == 0) return "";
  BiasGradKernel<T><<<Blocks(units), kThreads, 0, stream>>>(ograd, batch, units, grad);
  return CudaError("bias gradient kernel");
}

size_t WeightGradWorkspaceBytes(int64_t batch, int64_t nnz) { return GradWorkspace::Bytes(nnz); }

std::string WeightGradRows(const int64_t* indptr, const int64_t* cols, int64_t batch,
                           int64_t nnz, int64_t in_units, void* workspace, int64_t* num_rows,
                           cudaStream_t stream) {
  if (nnz > std::numeric_limits<int>::max()) {
    return "a batch of " + std::to_string(nnz) + " non-zeros exceeds the 2^31 - 1 that cub sorts";
  }
  GradWorkspace ws(workspace, nnz);
  std::string err = Validate(indptr, cols, batch, nnz, in_units, ws.bad, stream);
  if (!err.empty()) return err;
  RowOfEntryKernel<<<Blocks(batch), kThreads, 0, stream>>>(indptr, batch, ws.row_of,
                                                           ws.entry_ids);
  size_t temp_bytes = ws.cub_temp_bytes;
  cub::DeviceRadixSort::SortPairs(ws.cub_temp, temp_bytes, cols, ws.sorted_cols, ws.entry_ids,
                                  ws.sorted_entries, static_cast<int>(nnz), 0,
                                  KeyBits(in_units), stream);
  FirstOfColumnKernel<<<Blocks(nnz), kThreads, 0, stream>>>(ws.sorted_cols, nnz,
                                                            ws.first_flags);
  temp_bytes = ws.cub_temp_bytes;
  cub::DeviceScan::InclusiveSum(ws.cub_temp, temp_bytes, ws.first_flags, ws.segment_ids,
                                static_cast<int>(nnz), stream);
  SegmentStartsKernel<<<Blocks(nnz), kThreads, 0, stream>>>(ws.first_flags, ws.segment_ids, nnz,
                                                            ws.starts);
  cudaMemcpyAsync(num_rows, ws.segment_ids + nnz - 1, sizeof(int64_t), cudaMemcpyDeviceToHost,
                  stream);
  cudaStreamSynchronize(stream);
  return CudaError("weight gradient rows");
}

template <typename T>
std::string WeightGradValues(const T* vals, int64_t nnz, const T* ograd, const T* weight,
                             int64_t units, bool squared, const void* workspace, int64_t num_rows,
                             int64_t* row_ids, T* grad, cudaStream_t stream) {
  if (num_rows == 0) return "";
  GradWorkspace ws(const_cast<void*>(workspace), nnz);
  dim3 grid(static_cast<unsigned int>(num_rows), Blocks(units > 0 ? units : 1));
  WeightGradKernel<T><<<grid, kThreads, 0, stream>>>(vals, ograd, weight, units, squared,
                                                     ws.sorted_cols, ws.sorted_entries, ws.row_of,
                                                     ws.starts, num_rows, row_ids, grad);
  return CudaError("weight gradient kernel");
}

template std::string Forward<float>(const int64_t*, const int64_t*, const float*, int64_t, int64_t,
                                    const float*, int64_t, int64_t, bool, const float*, float*,
                                    void*, cudaStream_t);
template std::string Forward<double>(const int64_t*, const int64_t*, const double*, int64_t,
                                     int64_t, const double*, int64_t, int64_t, bool, const double*,
                                     double*, void*, cudaStream_t);
template std::string BiasGrad<float>(const float*, int64_t, int64_t, float*, cudaStream_t);
template std::string BiasGrad<double>(const double*, int64_t, int64_t, double*, cudaStream_t);
template std::string WeightGradValues<float>(const float*, int64_t, const float*, const float*,
                                             int64_t, bool, const void*, int64_t, int64_t*,
                                             float*, cudaStream_t);
template std::string WeightGradValues<double>(const double*, int64_t, const double*,
                                              const double*, int64_t, bool, const void*, int64_t,
                                              int64_t*, double*, cudaStream_t);

}  // namespace sparse_dot_cuda
}  // namespace gluon_sparse
