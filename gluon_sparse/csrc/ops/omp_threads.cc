/*!
 * Team size for the library's OpenMP regions: see omp_threads.h for the rules.
 */
#include "omp_threads.h"

#include <omp.h>

#include <cstdlib>

namespace gluon_sparse {
namespace {

/*! \brief Leading positive integer of environment variable `name`, or 0. */
int positive_env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return 0;
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  if (end == value || parsed <= 0) return 0;
  return parsed > 4096 ? 4096 : static_cast<int>(parsed);
}

int compute_omp_threads() {
  if (const int cap = positive_env("MXNET_OMP_MAX_THREADS")) return cap;
  if (const int requested = positive_env("OMP_NUM_THREADS")) return requested;
  const int procs = omp_get_num_procs();
  return procs > 0 ? procs : 1;
}

}  // namespace

int omp_threads() {
  static const int threads = compute_omp_threads();  // thread-safe static init
  return threads;
}

}  // namespace gluon_sparse

/*! \brief The team size, for gluon_sparse._native.build_info(). */
extern "C" int gluon_sparse_omp_threads() { return gluon_sparse::omp_threads(); }
