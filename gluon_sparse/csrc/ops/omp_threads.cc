/*!
 * Team sizes for the library's parallel kernels: see omp_threads.h for the rules.
 */
#include "omp_threads.h"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>

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

// Test knob (gluon_sparse_set_parallelism): 0 = no override.
std::atomic<int64_t> grain_override{0};
std::atomic<int> threads_override{0};

}  // namespace

int omp_threads() {
  static const int threads = compute_omp_threads();  // thread-safe static init
  const int forced = threads_override.load(std::memory_order_relaxed);
  return forced > 0 ? forced : threads;
}

int64_t grain() {
  const int64_t forced = grain_override.load(std::memory_order_relaxed);
  return forced > 0 ? forced : kGrain;
}

int team_size(int64_t work, int64_t items) {
  const int64_t g = grain();
  if (work < 2 * g || items < 2) return 1;
  const int64_t team = std::min<int64_t>({work / g, items, omp_threads()});
  return static_cast<int>(std::max<int64_t>(team, 1));
}

}  // namespace gluon_sparse

/*! \brief The largest team, for gluon_sparse._native.build_info(). */
extern "C" int gluon_sparse_omp_threads() { return gluon_sparse::omp_threads(); }

/*! \brief The grain in element operations, for gluon_sparse._native.build_info(). */
extern "C" int64_t gluon_sparse_grain() { return gluon_sparse::grain(); }

/*!
 * \brief Test knob: force the grain (element operations) and the largest team;
 *        0 restores the defaults. grain=1 with threads=2 makes every kernel with
 *        two or more items parallel; a huge grain makes every kernel serial.
 *        For tests and benchmarks/bench_grain.py only.
 */
extern "C" void gluon_sparse_set_parallelism(int64_t grain, int threads) {
  gluon_sparse::grain_override.store(grain > 0 ? grain : 0);
  gluon_sparse::threads_override.store(threads > 0 ? threads : 0);
}

/*!
 * \brief Test hook for the worker pool: out[i] += i + 1 for every i < n,
 *        through parallel_blocks (chunk 0) or parallel_dynamic (chunk > 0) on
 *        a team of `team`, each item also taking `item_micros` of busy time;
 *        returns how many threads ran items. An item run twice or never shows
 *        in `out`. For tests/test_grain.py only.
 */
extern "C" int gluon_sparse_parallel_fill(int64_t n, int64_t chunk, int team, int64_t item_micros,
                                          int64_t* out) {
  std::mutex mutex;
  std::set<std::thread::id> threads;
  auto item = [&](int64_t i) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      threads.insert(std::this_thread::get_id());
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(item_micros);
    while (std::chrono::steady_clock::now() < until) {
    }
    out[i] += i + 1;
  };
  if (chunk <= 0) {
    gluon_sparse::parallel_blocks(n, team, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) item(i);
    });
  } else {
    gluon_sparse::parallel_dynamic(n, chunk, team, item);
  }
  return static_cast<int>(threads.size());
}
