/*!
 * CUDA kernels of standard Adam on a row_sparse gradient (see adam_kernels.h
 * for the math, adam_kernels_cuda.h for the launchers' contract).
 *
 * Design: one element-parallel, grid-stride pass over weight/mean/var, each
 * thread handling a vector of 16 bytes (float4 / double2) when the row width
 * and the pointers allow it. A thread finds whether its row is in the gradient
 * by binary search in the sorted indices. That replaces MXNet's num_rows-long
 * flag array and prefix sum (two extra passes and a temporary of num_rows
 * entries) with O(log nnz) cached reads per row: consecutive threads share a
 * row, so a warp's search reads the same addresses (one broadcast load per step)
 * and the pass stays bound by the 24 bytes per element it must move.
 * The alternative, a decay-only pass followed by a pass over the gradient's
 * rows, cannot work: a row's new value depends on its old weight, so the second
 * pass would need the pre-decay values the first one overwrote.
 * All offsets are 64-bit: 1e6 x 4096 elements already overflow int32.
 */
#include <cuda_runtime.h>

#include <cstdint>

#include "adam_kernels.h"
#include "adam_kernels_cuda.h"
#include "cuda_lanes.cuh"
#include "cuda_search.cuh"

namespace gluon_sparse {
namespace adam {
namespace cuda {
namespace {

using cuda_lanes::aligned16;
using cuda_lanes::Lanes;

constexpr int kThreadsPerBlock = 256;

template <bool kClip, int kLanes, typename T>
__global__ void __launch_bounds__(kThreadsPerBlock)
adam_update_kernel(AdamScalars<T> s, T* __restrict__ weight, T* __restrict__ mean,
                   T* __restrict__ var, const T* __restrict__ grad,
                   const int64_t* __restrict__ indices, int64_t nnz, int64_t row_lanes,
                   int64_t total_lanes) {
  using Vec = Lanes<T, kLanes>;
  Vec* w_vec = reinterpret_cast<Vec*>(weight);
  Vec* m_vec = reinterpret_cast<Vec*>(mean);
  Vec* v_vec = reinterpret_cast<Vec*>(var);
  const Vec* g_vec = reinterpret_cast<const Vec*>(grad);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total_lanes;
       i += stride) {
    const int64_t row = i / row_lanes;
    const int64_t col = i - row * row_lanes;
    const int64_t k = lower_bound(indices, nnz, row);
    const bool in_grad = k < nnz && __ldg(indices + k) == row;
    Vec w = w_vec[i], m = m_vec[i], v = v_vec[i];
    if (in_grad) {
      const Vec g = g_vec[k * row_lanes + col];
#pragma unroll
      for (int j = 0; j < kLanes; ++j) {
        apply<kClip>(rescaled_grad(g.v[j], w.v[j], s), &w.v[j], &m.v[j], &v.v[j], s);
      }
    } else {
#pragma unroll
      for (int j = 0; j < kLanes; ++j) {
        apply<kClip>(decay_grad(w.v[j], s), &w.v[j], &m.v[j], &v.v[j], s);
      }
    }
    w_vec[i] = w;
    m_vec[i] = m;
    v_vec[i] = v;
  }
}

__global__ void find_invalid_index_kernel(const int64_t* __restrict__ indices, int64_t nnz,
                                          int64_t num_rows, unsigned long long* first_bad) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < nnz;
       k += stride) {
    const int64_t row = indices[k];
    if (row < 0 || row >= num_rows || (k > 0 && row <= indices[k - 1])) {
      atomicMin(first_bad, static_cast<unsigned long long>(k));
    }
  }
}

/*! \brief Enough blocks to fill the current device, at most what `work` needs. */
int grid_size(int64_t work) {
  int device = 0, sm_count = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    sm_count = 80;
  }
  // 2048 resident threads per SM on sm_70..sm_90: 8 blocks of 256.
  const int64_t full = static_cast<int64_t>(sm_count) * (2048 / kThreadsPerBlock);
  const int64_t needed = (work + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<int>(needed < full ? (needed > 0 ? needed : 1) : full);
}

LaunchStatus last_error() {
  const cudaError_t err = cudaGetLastError();
  return LaunchStatus{err == cudaSuccess ? nullptr : cudaGetErrorString(err)};
}

template <bool kClip, typename T>
LaunchStatus launch_with_clip(const AdamScalars<T>& s, T* weight, T* mean, T* var, const T* grad,
                              const int64_t* indices, int64_t nnz, int64_t num_rows, int64_t cols,
                              cudaStream_t stream) {
  constexpr int kLanes = 16 / sizeof(T);
  const bool vectorised = cols % kLanes == 0 && aligned16(weight) && aligned16(mean) &&
                          aligned16(var) && (nnz == 0 || aligned16(grad));
  if (vectorised) {
    const int64_t total = num_rows * (cols / kLanes);
    adam_update_kernel<kClip, kLanes, T><<<grid_size(total), kThreadsPerBlock, 0, stream>>>(
        s, weight, mean, var, grad, indices, nnz, cols / kLanes, total);
  } else {
    const int64_t total = num_rows * cols;
    adam_update_kernel<kClip, 1, T><<<grid_size(total), kThreadsPerBlock, 0, stream>>>(
        s, weight, mean, var, grad, indices, nnz, cols, total);
  }
  return last_error();
}

}  // namespace

LaunchStatus find_invalid_index(const int64_t* indices, int64_t nnz, int64_t num_rows,
                                void* workspace, void* stream, int64_t* position,
                                int64_t* value, int64_t* previous) {
  *position = nnz;
  if (nnz == 0) return LaunchStatus{nullptr};
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  LaunchStatus status = cuda_search::first_failing(
      workspace, s, nnz,
      [&](unsigned long long* first_bad) {
        find_invalid_index_kernel<<<grid_size(nnz), kThreadsPerBlock, 0, s>>>(indices, nnz,
                                                                               num_rows, first_bad);
      },
      position);
  if (!status.ok() || *position == nnz) return status;
  // Read back only what the error message names: the index and its predecessor.
  int64_t pair[2] = {0, 0};
  const int64_t first = *position > 0 ? *position - 1 : 0;
  status = cuda_search::status_of(cuda_search::read_back(
      pair, indices + first, (*position - first + 1) * sizeof(int64_t), s));
  *value = pair[*position - first];
  *previous = pair[0];
  return status;
}

template <typename T>
LaunchStatus launch_update(const AdamScalars<T>& scalars, bool clip, T* weight, T* mean, T* var,
                           const T* grad, const int64_t* indices, int64_t nnz, int64_t num_rows,
                           int64_t cols, void* stream) {
  if (num_rows == 0 || cols == 0) return LaunchStatus{nullptr};
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return clip ? launch_with_clip<true>(scalars, weight, mean, var, grad, indices, nnz, num_rows,
                                       cols, s)
              : launch_with_clip<false>(scalars, weight, mean, var, grad, indices, nnz, num_rows,
                                        cols, s);
}

template LaunchStatus launch_update<float>(const AdamScalars<float>&, bool, float*, float*, float*,
                                           const float*, const int64_t*, int64_t, int64_t, int64_t,
                                           void*);
template LaunchStatus launch_update<double>(const AdamScalars<double>&, bool, double*, double*,
                                            double*, const double*, const int64_t*, int64_t,
                                            int64_t, int64_t, void*);

}  // namespace cuda
}  // namespace adam
}  // namespace gluon_sparse
