/*!
 * Software prefetch of the weight rows a loop will touch a few iterations on.
 *
 * Why: deferred Adam visits the rows of a weight and of its mean and var in
 * the order of a batch's ids, rows kilobytes apart that the hardware
 * prefetcher cannot guess. On the CTR shape of bench_peers (~8,000 distinct
 * rows a step out of 10^6, 12 MB of rows and state) `perf` showed the first
 * load of each row as the hottest instruction of the catch-up and of the
 * update: a cache miss per row and array, one after the other. Asking for the
 * rows of iteration i + kRowsAhead while iteration i works overlaps them:
 * 2-3% of that step (benchmarks/RESULTS.md, "Twelfth session"). The other
 * rules' loops were measured with it too (wd = 1e-4: every row replays full
 * steps, compute-bound) and gained nothing, so they go without.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_ROW_PREFETCH_H_
#define GLUON_SPARSE_CSRC_OPS_ROW_PREFETCH_H_

#include <algorithm>
#include <cstdint>

namespace gluon_sparse {

/*!
 * \brief How many rows ahead of the current one to prefetch: a row's work is
 *        at least one Adam step over its columns (~60 ns at 128 columns), a
 *        miss to memory ~100 ns.
 */
constexpr int64_t kRowsAhead = 2;

/*!
 * \brief Ask for the first cache lines of a row (to be written): at most 1 KB,
 *        the hardware prefetcher follows a row once it is being read.
 */
template <typename T>
inline void prefetch_row(const T* row, int64_t cols) {
#if defined(__GNUC__) || defined(__clang__)
  const char* p = reinterpret_cast<const char*>(row);
  const int64_t bytes = std::min<int64_t>(cols * static_cast<int64_t>(sizeof(T)), 1024);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 1, 3);
#else
  (void)row;
  (void)cols;
#endif
}

/*! \brief prefetch_row of the row at `offset` in each array (a weight and its states). */
template <typename T, typename... More>
inline void prefetch_rows(int64_t offset, int64_t cols, const T* array, const More*... more) {
  prefetch_row(array + offset, cols);
  if constexpr (sizeof...(more) > 0) prefetch_rows(offset, cols, more...);
}

}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_ROW_PREFETCH_H_
