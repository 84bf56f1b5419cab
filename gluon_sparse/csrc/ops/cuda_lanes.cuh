/*!
 * 16-byte accesses of the element-parallel CUDA kernels (adam_kernels.cu,
 * optim_kernels.cu): a thread loads and stores kLanes = 16 / sizeof(T)
 * consecutive elements at once where the row width and the pointers allow it,
 * and one element otherwise. CUDA-only (.cu files).
 */
#ifndef GLUON_SPARSE_CSRC_OPS_CUDA_LANES_CUH_
#define GLUON_SPARSE_CSRC_OPS_CUDA_LANES_CUH_

#include <cstdint>

namespace gluon_sparse {
namespace cuda_lanes {

/*! \brief kLanes consecutive elements loaded and stored as one 16-byte access. */
template <typename T, int kLanes>
struct alignas(sizeof(T) * kLanes) Lanes {
  T v[kLanes];
};

/*! \brief Whether `p` may be read as Lanes (16-byte aligned). */
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace cuda_lanes
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_CUDA_LANES_CUH_
