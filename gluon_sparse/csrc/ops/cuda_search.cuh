/*!
 * Device-side searches that answer the host: "the first position where a
 * check fails", used by the operators to validate their input before any
 * write (adam_kernels.cu, adam_deferred_kernels.cu).
 *
 * A search kernel atomicMin-s each failing position into an 8-byte device
 * word preset to all ones; the host reads the word back and waits for it,
 * since the answer decides whether the update may run. CUDA-only (.cu files).
 */
#ifndef GLUON_SPARSE_CSRC_OPS_CUDA_SEARCH_CUH_
#define GLUON_SPARSE_CSRC_OPS_CUDA_SEARCH_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "adam_kernels_cuda.h"

namespace gluon_sparse {
namespace cuda_search {

using ::gluon_sparse::adam::cuda::LaunchStatus;

inline LaunchStatus status_of(cudaError_t err) {
  return LaunchStatus{err == cudaSuccess ? nullptr : cudaGetErrorString(err)};
}

/*! \brief Copy `bytes` from the device to the host and wait for them. */
inline cudaError_t read_back(void* host, const void* device, size_t bytes, cudaStream_t stream) {
  cudaError_t err = cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream);
  return err == cudaSuccess ? cudaStreamSynchronize(stream) : err;
}

/*!
 * \brief Run a search and return the first failing position.
 *
 * \param workspace 8 bytes of device memory
 * \param launch    called with the preset device word (unsigned long long*);
 *                  launches the search kernel on `stream`
 * \param none      what `*found` receives when nothing failed (and the bound
 *                  of a valid position)
 */
template <typename Launch>
LaunchStatus first_failing(void* workspace, cudaStream_t stream, int64_t none, Launch launch,
                           int64_t* found) {
  *found = none;
  auto* first_bad = static_cast<unsigned long long*>(workspace);
  cudaError_t err = cudaMemsetAsync(first_bad, 0xff, sizeof(*first_bad), stream);
  if (err != cudaSuccess) return status_of(err);
  launch(first_bad);
  err = cudaGetLastError();
  if (err != cudaSuccess) return status_of(err);
  unsigned long long bad = 0;
  err = read_back(&bad, first_bad, sizeof(bad), stream);
  if (err != cudaSuccess) return status_of(err);
  if (bad < static_cast<unsigned long long>(none)) *found = static_cast<int64_t>(bad);
  return LaunchStatus{nullptr};
}

}  // namespace cuda_search
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_CUDA_SEARCH_CUH_
