/*!
 * CUDA kernels of deferred standard Adam (see adam_deferred_kernels.h for the
 * replay, adam_deferred_kernels_cuda.h for the launchers' contract).
 *
 * Catch-up: one block per listed row. Thread 0 claims the row with a
 * compare-and-swap of its last_step (old value -> target step), so a row listed
 * twice (a feature present in several rows of a batch) is replayed by exactly
 * one block; the block's threads then split the row's columns and replay the
 * missed steps in registers, with the eager kernel's never-fused arithmetic,
 * which keeps the results bitwise equal to the eager update's. Whether the
 * row's state is all zero (the fixed-point shortcut) is decided by the whole
 * block at once (__syncthreads_or), so every thread skips the same steps.
 * All offsets are 64-bit.
 */
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "adam_deferred_kernels.h"
#include "adam_deferred_kernels_cuda.h"
#include "cuda_search.cuh"

namespace gluon_sparse {
namespace adam {
namespace deferred {
namespace cuda {
namespace {

constexpr int kMaxThreadsPerBlock = 128;
constexpr int kThreadsPerBlock = 256;
constexpr int64_t kMaxBlocks = 65535;

LaunchStatus last_error() {
  const cudaError_t err = cudaGetLastError();
  return LaunchStatus{err == cudaSuccess ? nullptr : cudaGetErrorString(err)};
}

/*! \brief Threads per row block: the row's width rounded up to a warp, at most 128. */
int row_block_threads(int64_t cols) {
  const int64_t warps = std::max<int64_t>(1, (cols + 31) / 32);
  return static_cast<int>(std::min<int64_t>(warps * 32, kMaxThreadsPerBlock));
}

template <typename T>
__global__ void catch_up_kernel(DeviceState<T> st, FixedScalars fixed,
                                const int64_t* __restrict__ rows, int64_t n, int64_t step) {
  __shared__ int64_t from;
  for (int64_t k = blockIdx.x; k < n; k += gridDim.x) {
    const int64_t row = rows ? rows[k] : k;
    if (threadIdx.x == 0) {
      from = -1;
      // An out-of-range column is left for the product kernel to report.
      const int64_t last = row >= 0 && row < st.num_rows ? st.last_step[row] : -1;
      if (last >= 0 && last < step) {
        auto* slot = reinterpret_cast<unsigned long long*>(st.last_step + row);
        const auto seen = atomicCAS(slot, static_cast<unsigned long long>(last),
                                    static_cast<unsigned long long>(step));
        if (seen == static_cast<unsigned long long>(last)) from = last;
      }
    }
    __syncthreads();
    const int64_t start = from;
    if (start >= 0) {
      const int64_t offset = row * st.cols;
      T* w = st.weight + offset;
      T* m = st.mean + offset;
      T* v = st.var + offset;
      // The fixed-point shortcut's conditions (adam_deferred_kernels.h): +0
      // state, finite weights, epsilon > 0.
      int other = fixed.epsilon > 0.0f ? 0 : 1;
      for (int64_t j = threadIdx.x; j < st.cols; j += blockDim.x) {
        other |= !(is_positive_zero(m[j]) && is_positive_zero(v[j]) && w[j] - w[j] == T(0));
      }
      const bool zero = !__syncthreads_or(other);
      // Each thread replays its columns' missed steps in registers: one load
      // and one store of weight, mean and var per element, however many steps
      // the row missed. The skip decision depends only on `zero` and the
      // step's wd, both the same in every thread, so every column skips the
      // same steps, as the eager updates would have left them.
      for (int64_t j = threadIdx.x; j < st.cols; j += blockDim.x) {
        T wj = w[j], mj = m[j], vj = v[j];
        bool skipping = zero;
        for (int64_t s = start + 1; s <= step; ++s) {
          const StepRecord record = st.history[s];
          if (skipping && record.wd == 0.0f) continue;  // a fixed point: no change
          skipping = false;
          const AdamScalars<T> scalars = step_scalars<T>(record, fixed);
          if (record.clip_gradient >= 0.0f) {
            apply<true>(decay_grad(wj, scalars), &wj, &mj, &vj, scalars);
          } else {
            apply<false>(decay_grad(wj, scalars), &wj, &mj, &vj, scalars);
          }
        }
        w[j] = wj;
        m[j] = mj;
        v[j] = vj;
      }
    }
    __syncthreads();  // `from` is rewritten for the next row
  }
}

template <typename T>
__global__ void find_stale_row_kernel(DeviceState<T> st, const int64_t* __restrict__ indices,
                                      int64_t nnz, int64_t step,
                                      unsigned long long* first_bad) {
  for (int64_t k = blockIdx.x; k < nnz; k += gridDim.x) {
    const int64_t row = indices[k];
    const int64_t last = st.last_step[row];  // uniform across the block
    if (last == step - 1) continue;
    int bad = last >= step || last < 0;
    if (!bad) {
      const int64_t offset = row * st.cols;
      for (int64_t j = threadIdx.x; j < st.cols; j += blockDim.x) {
        bad |= !(is_positive_zero(st.mean[offset + j]) && is_positive_zero(st.var[offset + j]));
      }
      for (int64_t s = last + 1 + threadIdx.x; s < step; s += blockDim.x) {
        bad |= st.history[s].wd != 0.0f;
      }
    }
    if (__syncthreads_or(bad) && threadIdx.x == 0) {
      atomicMin(first_bad, static_cast<unsigned long long>(k));
    }
  }
}

__global__ void find_invalid_last_step_kernel(const int64_t* __restrict__ last_step,
                                              int64_t num_rows, int64_t step,
                                              unsigned long long* first_bad) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; row < num_rows;
       row += stride) {
    const int64_t last = last_step[row];
    if (last < 0 || last > step) atomicMin(first_bad, static_cast<unsigned long long>(row));
  }
}

template <bool kClip, typename T>
__global__ void update_kernel(DeviceState<T> st, AdamScalars<T> s, StepRecord record,
                              const T* __restrict__ grad, const int64_t* __restrict__ indices,
                              int64_t nnz, int64_t step) {
  const int64_t total = nnz * st.cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (first == 0) st.history[step] = record;
  for (int64_t i = first; i < total; i += stride) {
    const int64_t k = i / st.cols;
    const int64_t j = i - k * st.cols;
    const int64_t row = __ldg(indices + k);
    const int64_t e = row * st.cols + j;
    apply<kClip>(rescaled_grad(grad[i], st.weight[e], s), st.weight + e, st.mean + e,
                 st.var + e, s);
    if (j == 0) st.last_step[row] = step;
  }
}

}  // namespace

template <typename T>
LaunchStatus launch_catch_up(const DeviceState<T>& state, const FixedScalars& fixed,
                             const int64_t* rows, int64_t n, int64_t step, void* stream) {
  if (n == 0 || state.cols == 0) return LaunchStatus{nullptr};
  const int blocks = static_cast<int>(std::min<int64_t>(n, kMaxBlocks));
  catch_up_kernel<T><<<blocks, row_block_threads(state.cols), 0,
                       static_cast<cudaStream_t>(stream)>>>(state, fixed, rows, n, step);
  return last_error();
}

template <typename T>
LaunchStatus find_stale_row(const DeviceState<T>& state, const int64_t* indices, int64_t nnz,
                            int64_t step, void* workspace, void* stream, int64_t* position,
                            int64_t* row, int64_t* row_step) {
  *position = nnz;
  if (nnz == 0) return LaunchStatus{nullptr};
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  LaunchStatus status = cuda_search::first_failing(
      workspace, s, nnz,
      [&](unsigned long long* first_bad) {
        const int blocks = static_cast<int>(std::min<int64_t>(nnz, kMaxBlocks));
        find_stale_row_kernel<T><<<blocks, row_block_threads(state.cols), 0, s>>>(
            state, indices, nnz, step, first_bad);
      },
      position);
  if (!status.ok() || *position == nnz) return status;
  // Read back only what the error message names: the row and its step.
  cudaError_t err = cuda_search::read_back(row, indices + *position, sizeof(*row), s);
  if (err == cudaSuccess) {
    err = cuda_search::read_back(row_step, state.last_step + *row, sizeof(*row_step), s);
  }
  return cuda_search::status_of(err);
}

LaunchStatus find_invalid_last_step(const int64_t* last_step, int64_t num_rows, int64_t step,
                                    void* workspace, void* stream, int64_t* row,
                                    int64_t* row_step) {
  *row = num_rows;
  if (num_rows == 0) return LaunchStatus{nullptr};
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  LaunchStatus status = cuda_search::first_failing(
      workspace, s, num_rows,
      [&](unsigned long long* first_bad) {
        const int blocks = static_cast<int>(
            std::min<int64_t>((num_rows + kThreadsPerBlock - 1) / kThreadsPerBlock, kMaxBlocks));
        find_invalid_last_step_kernel<<<blocks, kThreadsPerBlock, 0, s>>>(last_step, num_rows,
                                                                           step, first_bad);
      },
      row);
  if (!status.ok() || *row == num_rows) return status;
  return cuda_search::status_of(
      cuda_search::read_back(row_step, last_step + *row, sizeof(*row_step), s));
}

template <typename T>
LaunchStatus launch_update(const DeviceState<T>& state, const AdamScalars<T>& scalars,
                           const StepRecord& record, const T* grad, const int64_t* indices,
                           int64_t nnz, int64_t step, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  // At least one thread runs, to write the step's record even for an empty gradient.
  const int64_t total = std::max<int64_t>(1, nnz * state.cols);
  const int blocks =
      static_cast<int>(std::min<int64_t>((total + kThreadsPerBlock - 1) / kThreadsPerBlock,
                                         kMaxBlocks));
  if (record.clip_gradient >= 0.0f) {
    update_kernel<true, T><<<blocks, kThreadsPerBlock, 0, s>>>(state, scalars, record, grad,
                                                                indices, nnz, step);
  } else {
    update_kernel<false, T><<<blocks, kThreadsPerBlock, 0, s>>>(state, scalars, record, grad,
                                                                 indices, nnz, step);
  }
  return last_error();
}

#define GS_INSTANTIATE(T)                                                                      \
  template LaunchStatus launch_catch_up<T>(const DeviceState<T>&, const FixedScalars&,         \
                                           const int64_t*, int64_t, int64_t, void*);           \
  template LaunchStatus find_stale_row<T>(const DeviceState<T>&, const int64_t*, int64_t,      \
                                          int64_t, void*, void*, int64_t*, int64_t*,           \
                                          int64_t*);                                           \
  template LaunchStatus launch_update<T>(const DeviceState<T>&, const AdamScalars<T>&,         \
                                         const StepRecord&, const T*, const int64_t*, int64_t, \
                                         int64_t, void*);
GS_INSTANTIATE(float)
GS_INSTANTIATE(double)
#undef GS_INSTANTIATE

}  // namespace cuda
}  // namespace deferred
}  // namespace adam
}  // namespace gluon_sparse
