/*!
 * Host catch-up of deferred rows for any rule, shared by the deferred update
 * (catch_up rows), the flush (every row) and the registry's row refresh (the
 * rows a batch reads). Plain C++ without lib_api.h (the registry includes it).
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OPTIM_CATCH_UP_H_
#define GLUON_SPARSE_CSRC_OPS_OPTIM_CATCH_UP_H_

#include <cstdint>

#include "omp_threads.h"
#include "optim_rows.h"

namespace gluon_sparse {
namespace optim {

/*! \brief A deferred weight's arrays (host pointers), as the ops and the registry hold them. */
struct DeferredView {
  void* weight;
  void* states[kMaxStates];
  int64_t* last_step;
  const float* history;
  const float* fixed;
  int64_t num_rows;
  int64_t cols;
};

template <typename T>
StatePtrs<T> state_ptrs(const DeferredView& v, int num_states) {
  StatePtrs<T> s;
  for (int k = 0; k < kMaxStates; ++k) s.p[k] = k < num_states ? static_cast<T*>(v.states[k]) : nullptr;
  return s;
}

/*!
 * \brief Bring rows row_of(0..count-1) (distinct) from their last_step to
 *        `step`; `hint` covers steps up to `step`.
 *
 * Dynamic scheduling: the rows' gaps differ by orders of magnitude, and rows
 * at zero state with no moving step since their last cost nothing (they are
 * left out of the work estimate, so a batch of fresh rows opens no team).
 */
template <class Rule, typename T, typename RowOf>
void catch_up_rows(const DeferredView& v, int64_t count, RowOf row_of, int64_t step,
                   const ReplayHint& hint, int64_t chunk) {
  T* weight = static_cast<T*>(v.weight);
  const StatePtrs<T> states = state_ptrs<T>(v, Rule::kNumStates);
  const int64_t cols = v.cols;
  // Counted on one thread, so only until it is enough for the largest team
  // (deferred_registry.cc's Adam catch-up says what a full scan cost).
  int64_t work = 0;
  const int64_t enough = work_for_largest_team();
  for (int64_t i = 0; i < count && work < enough; ++i) {
    const int64_t row = row_of(i);
    const int64_t from = v.last_step[row];
    if (from >= step) continue;
    if (hint.last_moving <= from &&
        row_is_zero_state<Rule>(cols, weight + row * cols, states.at(row * cols, Rule::kNumStates))) {
      continue;
    }
    work += (step - from) * cols;
  }
  parallel_dynamic(count, chunk, team_size(work, count), [&](int64_t i) {
    const int64_t row = row_of(i);
    const int64_t from = v.last_step[row];
    if (from >= step) return;
    const int64_t offset = row * cols;
    replay_row<Rule, T>(cols, weight + offset, states.at(offset, Rule::kNumStates), v.history,
                        v.fixed, from, step, hint);
    v.last_step[row] = step;
  });
}

}  // namespace optim
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_OPTIM_CATCH_UP_H_
