/*!
 * CUDA kernels of the optimizer family (launchers' contract in
 * optim_kernels_cuda.h), generic over a Rule and instantiated for every rule
 * of GLUON_SPARSE_OPTIM_RULES. Each element goes through the same
 * Rule::apply as on the CPU, whose never-fused arithmetic (ops::mul, ... are
 * __fmul_rn, ... here) keeps CUDA results bitwise equal to the CPU's.
 *
 * Eager: one grid-stride pass, a thread on 16 bytes of consecutive elements
 * (float4 / double2) where the row width and pointers allow it, else on one;
 * a thread finds whether its row is in the gradient by binary search in the
 * sorted indices (as adam_kernels.cu).
 * Catch-up: one block per listed row, claimed by compare-and-swap of its
 * last_step (as adam_deferred_kernels.cu); whether the row is at zero state
 * (the fixed-point shortcut) is decided by the whole block at once, so every
 * thread skips the same steps; each thread replays its columns in registers.
 * All offsets are 64-bit.
 */
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda_lanes.cuh"
#include "cuda_search.cuh"
#include "optim_kernels_cuda.h"
#include "optim_rows.h"
#include "optim_rules.h"

namespace gluon_sparse {
namespace optim {
namespace cuda {
namespace {

using cuda_lanes::aligned16;
using cuda_lanes::Lanes;

constexpr int kMaxThreadsPerBlock = 128;
constexpr int kThreadsPerBlock = 256;
constexpr int64_t kMaxBlocks = 65535;

LaunchStatus last_error() {
  const cudaError_t err = cudaGetLastError();
  return LaunchStatus{err == cudaSuccess ? nullptr : cudaGetErrorString(err)};
}

int row_block_threads(int64_t cols) {
  const int64_t warps = std::max<int64_t>(1, (cols + 31) / 32);
  return static_cast<int>(std::min<int64_t>(warps * 32, kMaxThreadsPerBlock));
}

int element_blocks(int64_t total) {
  return static_cast<int>(std::min<int64_t>(
      std::max<int64_t>(1, (total + kThreadsPerBlock - 1) / kThreadsPerBlock), kMaxBlocks));
}

/*! \brief One element e through Rule::apply, its states loaded into registers. */
template <class Rule, bool kHasGrad, typename T>
__device__ __forceinline__ void step_element(const DeviceRows<T>& r, int64_t e, T grad,
                                             const typename Rule::template Scalars<T>& sc) {
  T s[RuleTraits<Rule>::kStateSlots];
#pragma unroll
  for (int k = 0; k < Rule::kNumStates; ++k) s[k] = r.states[k][e];
  T w = r.weight[e];
  Rule::template apply<kHasGrad, T>(grad, &w, s, sc);
  r.weight[e] = w;
#pragma unroll
  for (int k = 0; k < Rule::kNumStates; ++k) r.states[k][e] = s[k];
}

/*! \brief Whether element e is at zero state: states +0, weight finite and not -0. */
template <class Rule, typename T>
__device__ __forceinline__ bool zero_state(const DeviceRows<T>& r, int64_t e) {
  bool zero = true;
#pragma unroll
  for (int k = 0; k < Rule::kNumStates; ++k) zero = zero && ops::is_positive_zero(r.states[k][e]);
  const T w = r.weight[e];
  return zero && w - w == T(0) && !(w == T(0) && !ops::is_positive_zero(w));
}

/*!
 * \brief The eager pass over kLanes elements a thread (16-byte accesses of the
 *        weight and each state where the row width and pointers allow, else 1):
 *        one binary search serves the thread's lanes, which share a row.
 */
template <class Rule, int kLanes, typename T>
__global__ void __launch_bounds__(kThreadsPerBlock)
eager_kernel(DeviceRows<T> r, Floats step, Floats fixed, float rescale_grad,
             const T* __restrict__ grad, const int64_t* __restrict__ indices, int64_t nnz) {
  using Vec = Lanes<T, kLanes>;
  const auto sc = Rule::template scalars<T>(step.v, fixed.v, rescale_grad);
  const int64_t row_lanes = r.cols / kLanes;
  const int64_t total = r.num_rows * row_lanes;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int64_t row = i / row_lanes;
    const int64_t k = ops::lower_bound(indices, nnz, row);
    const bool in_grad = k < nnz && __ldg(indices + k) == row;
    Vec w = reinterpret_cast<const Vec*>(r.weight)[i];
    Vec s[RuleTraits<Rule>::kStateSlots];
#pragma unroll
    for (int q = 0; q < Rule::kNumStates; ++q) s[q] = reinterpret_cast<const Vec*>(r.states[q])[i];
    Vec g = {};
    if (in_grad) g = reinterpret_cast<const Vec*>(grad)[k * row_lanes + (i - row * row_lanes)];
#pragma unroll
    for (int j = 0; j < kLanes; ++j) {
      T lane[RuleTraits<Rule>::kStateSlots];
#pragma unroll
      for (int q = 0; q < Rule::kNumStates; ++q) lane[q] = s[q].v[j];
      if (in_grad) {
        Rule::template apply<true, T>(g.v[j], &w.v[j], lane, sc);
      } else {
        Rule::template apply<false, T>(T(0), &w.v[j], lane, sc);
      }
#pragma unroll
      for (int q = 0; q < Rule::kNumStates; ++q) s[q].v[j] = lane[q];
    }
    reinterpret_cast<Vec*>(r.weight)[i] = w;
#pragma unroll
    for (int q = 0; q < Rule::kNumStates; ++q) reinterpret_cast<Vec*>(r.states[q])[i] = s[q];
  }
}

template <class Rule, typename T>
__global__ void update_kernel(DeviceRows<T> r, Floats step_scalars, Floats fixed,
                              float rescale_grad, const T* __restrict__ grad,
                              const int64_t* __restrict__ indices, int64_t nnz, int64_t step) {
  const auto sc = Rule::template scalars<T>(step_scalars.v, fixed.v, rescale_grad);
  const int64_t total = nnz * r.cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (first == 0) {
    for (int i = 0; i < Rule::kNumStep; ++i) r.history[step * Rule::kNumStep + i] = step_scalars.v[i];
  }
  for (int64_t i = first; i < total; i += stride) {
    const int64_t k = i / r.cols;
    const int64_t j = i - k * r.cols;
    const int64_t row = __ldg(indices + k);
    step_element<Rule, true>(r, row * r.cols + j, grad[i], sc);
    if (j == 0) r.last_step[row] = step;
  }
}

template <class Rule, typename T>
__global__ void catch_up_kernel(DeviceRows<T> r, Floats fixed, const int64_t* __restrict__ list,
                                int64_t n, int64_t step) {
  __shared__ int64_t from;
  for (int64_t k = blockIdx.x; k < n; k += gridDim.x) {
    const int64_t row = list ? list[k] : k;
    if (threadIdx.x == 0) {
      from = -1;
      // An out-of-range column is left for the product kernel to report.
      const int64_t last = row >= 0 && row < r.num_rows ? r.last_step[row] : -1;
      if (last >= 0 && last < step) {
        auto* slot = reinterpret_cast<unsigned long long*>(r.last_step + row);
        const auto seen = atomicCAS(slot, static_cast<unsigned long long>(last),
                                    static_cast<unsigned long long>(step));
        if (seen == static_cast<unsigned long long>(last)) from = last;
      }
    }
    __syncthreads();
    const int64_t start = from;
    if (start >= 0) {
      const int64_t offset = row * r.cols;
      int other = 0;
      for (int64_t j = threadIdx.x; j < r.cols; j += blockDim.x) {
        other |= !zero_state<Rule>(r, offset + j);
      }
      const bool zero = !__syncthreads_or(other);
      // The rule's cheaper exact replay, if it has one, by one thread for the row.
      __shared__ int done;
      if (threadIdx.x == 0) {
        done = 0;
        if constexpr (HasReplayRow<Rule>::value) {
          T* states[kMaxStates];
          for (int s = 0; s < Rule::kNumStates; ++s) states[s] = r.states[s] + offset;
          if (!zero) {
            done = Rule::template replay_row<T>(r.cols, r.weight + offset, states, r.history,
                                                fixed.v, start, step);
          }
        }
      }
      __syncthreads();
      if (!done) {
        // Each thread replays its columns in registers: one load and one store
        // of the weight and each state per element, however many steps it missed.
        for (int64_t j = threadIdx.x; j < r.cols; j += blockDim.x) {
          const int64_t e = offset + j;
          T w = r.weight[e];
          T s[RuleTraits<Rule>::kStateSlots];
#pragma unroll
          for (int q = 0; q < Rule::kNumStates; ++q) s[q] = r.states[q][e];
          bool skipping = zero;
          for (int64_t t = start + 1; t <= step; ++t) {
            const float* rec = r.history + t * Rule::kNumStep;
            if (skipping && Rule::zero_state_is_fixed_point(rec, fixed.v)) continue;
            skipping = false;
            Rule::template apply<false, T>(T(0), &w, s,
                                           Rule::template scalars<T>(rec, fixed.v, 1.0f));
          }
          r.weight[e] = w;
#pragma unroll
          for (int q = 0; q < Rule::kNumStates; ++q) r.states[q][e] = s[q];
        }
      }
    }
    __syncthreads();  // `from` and `done` are rewritten for the next row
  }
}

template <class Rule, typename T>
__global__ void find_stale_row_kernel(DeviceRows<T> r, Floats fixed,
                                      const int64_t* __restrict__ indices, int64_t nnz,
                                      int64_t step, unsigned long long* first_bad) {
  for (int64_t k = blockIdx.x; k < nnz; k += gridDim.x) {
    const int64_t row = indices[k];
    const int64_t last = r.last_step[row];  // uniform across the block
    if (last == step - 1) continue;
    int bad = last >= step || last < 0;
    if (!bad) {
      for (int64_t j = threadIdx.x; j < r.cols; j += blockDim.x) {
        bad |= !zero_state<Rule>(r, row * r.cols + j);
      }
      for (int64_t t = last + 1 + threadIdx.x; t < step; t += blockDim.x) {
        bad |= !Rule::zero_state_is_fixed_point(r.history + t * Rule::kNumStep, fixed.v);
      }
    }
    if (__syncthreads_or(bad) && threadIdx.x == 0) {
      atomicMin(first_bad, static_cast<unsigned long long>(k));
    }
  }
}

}  // namespace

template <class Rule, typename T>
LaunchStatus launch_eager(const DeviceRows<T>& rows, const Floats& step, const Floats& fixed,
                          float rescale_grad, const T* grad, const int64_t* indices, int64_t nnz,
                          void* stream) {
  const int64_t total = rows.num_rows * rows.cols;
  if (total == 0) return LaunchStatus{nullptr};
  constexpr int kLanes = 16 / sizeof(T);
  bool vectorised = rows.cols % kLanes == 0 && aligned16(rows.weight) && (nnz == 0 || aligned16(grad));
  for (int q = 0; q < Rule::kNumStates; ++q) vectorised = vectorised && aligned16(rows.states[q]);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (vectorised) {
    eager_kernel<Rule, kLanes, T><<<element_blocks(total / kLanes), kThreadsPerBlock, 0, s>>>(
        rows, step, fixed, rescale_grad, grad, indices, nnz);
  } else {
    eager_kernel<Rule, 1, T><<<element_blocks(total), kThreadsPerBlock, 0, s>>>(
        rows, step, fixed, rescale_grad, grad, indices, nnz);
  }
  return last_error();
}

template <class Rule, typename T>
LaunchStatus launch_deferred_update(const DeviceRows<T>& rows, const Floats& step_scalars,
                                    const Floats& fixed, float rescale_grad, const T* grad,
                                    const int64_t* indices, int64_t nnz, int64_t step,
                                    void* stream) {
  // At least one thread runs, to write the step's record even for an empty gradient.
  update_kernel<Rule, T><<<element_blocks(nnz * rows.cols), kThreadsPerBlock, 0,
                           static_cast<cudaStream_t>(stream)>>>(rows, step_scalars, fixed,
                                                                rescale_grad, grad, indices, nnz,
                                                                step);
  return last_error();
}

template <class Rule, typename T>
LaunchStatus launch_catch_up(const DeviceRows<T>& rows, const Floats& fixed, const int64_t* list,
                             int64_t n, int64_t step, void* stream) {
  if (n == 0 || rows.cols == 0) return LaunchStatus{nullptr};
  const int blocks = static_cast<int>(std::min<int64_t>(n, kMaxBlocks));
  catch_up_kernel<Rule, T><<<blocks, row_block_threads(rows.cols), 0,
                             static_cast<cudaStream_t>(stream)>>>(rows, fixed, list, n, step);
  return last_error();
}

template <class Rule, typename T>
LaunchStatus find_stale_row(const DeviceRows<T>& rows, const Floats& fixed,
                            const int64_t* indices, int64_t nnz, int64_t step, void* workspace,
                            void* stream, int64_t* position, int64_t* row, int64_t* row_step) {
  *position = nnz;
  if (nnz == 0) return LaunchStatus{nullptr};
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  LaunchStatus status = cuda_search::first_failing(
      workspace, s, nnz,
      [&](unsigned long long* first_bad) {
        const int blocks = static_cast<int>(std::min<int64_t>(nnz, kMaxBlocks));
        find_stale_row_kernel<Rule, T><<<blocks, row_block_threads(rows.cols), 0, s>>>(
            rows, fixed, indices, nnz, step, first_bad);
      },
      position);
  if (!status.ok() || *position == nnz) return status;
  cudaError_t err = cuda_search::read_back(row, indices + *position, sizeof(*row), s);
  if (err == cudaSuccess) {
    err = cuda_search::read_back(row_step, rows.last_step + *row, sizeof(*row_step), s);
  }
  return cuda_search::status_of(err);
}

#define GS_INSTANTIATE(Rule, T)                                                                \
  template LaunchStatus launch_eager<Rule, T>(const DeviceRows<T>&, const Floats&,             \
                                              const Floats&, float, const T*, const int64_t*,  \
                                              int64_t, void*);                                 \
  template LaunchStatus launch_deferred_update<Rule, T>(const DeviceRows<T>&, const Floats&,   \
                                                        const Floats&, float, const T*,        \
                                                        const int64_t*, int64_t, int64_t,      \
                                                        void*);                                \
  template LaunchStatus launch_catch_up<Rule, T>(const DeviceRows<T>&, const Floats&,          \
                                                 const int64_t*, int64_t, int64_t, void*);     \
  template LaunchStatus find_stale_row<Rule, T>(const DeviceRows<T>&, const Floats&,           \
                                                const int64_t*, int64_t, int64_t, void*, void*, \
                                                int64_t*, int64_t*, int64_t*);
#define GS_INSTANTIATE_RULE(Rule) GS_INSTANTIATE(Rule, float) GS_INSTANTIATE(Rule, double)
GLUON_SPARSE_OPTIM_RULES(GS_INSTANTIATE_RULE)
#undef GS_INSTANTIATE_RULE
#undef GS_INSTANTIATE

}  // namespace cuda
}  // namespace optim
}  // namespace gluon_sparse
