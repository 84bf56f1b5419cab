/*!
 * The registry of deferred weights (see deferred_registry.h), the row
 * refresh that the product operators call, and the C functions through which
 * Python registers and unregisters weights. An entry's `kind` says who owns
 * the weight: deferred Adam (its own optimised replay, adam_deferred_kernels.h)
 * or a rule of GLUON_SPARSE_OPTIM_RULES (the generic replay, optim_rows.h).
 */
#include "deferred_registry.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "adam_deferred_kernels.h"
#include "omp_threads.h"
#include "row_prefetch.h"
#include "optim_catch_up.h"
#include "optim_rules.h"
#if GLUON_SPARSE_WITH_CUDA
#include "adam_deferred_kernels_cuda.h"
#include "optim_kernels_cuda.h"
#endif

namespace gluon_sparse {
namespace deferred {
namespace {

namespace gd = gluon_sparse::adam::deferred;

// MXDType codes (lib_api.h) of the two supported dtypes; this file does not
// include lib_api.h, which may be compiled into the library only once.
constexpr int kFloat32 = 0;
constexpr int kFloat64 = 1;
constexpr int kCpu = 1;
constexpr int kGpu = 2;

constexpr int kAdamKind = -1;  //!< Entry::kind of deferred Adam; rules are 0, 1, ...

/*! \brief One registered weight: who owns it, where its state lives, the step it has reached. */
struct Entry {
  std::mutex mutex;  //!< serialises refreshes and guards every field below
  bool alive = true;
  uint64_t owner = 0;
  int kind = kAdamKind;  //!< kAdamKind, or the rule's position in GLUON_SPARSE_OPTIM_RULES
  void* mean = nullptr;  //!< Adam's states
  void* var = nullptr;
  void* states[optim::kMaxStates] = {};  //!< a rule's states
  float fixed_scalars[optim::kMaxFixed] = {};  //!< a rule's fixed scalars
  optim::ReplayHint hint;  //!< a rule's replay hint, extended as steps come
  int64_t* last_step = nullptr;
  gd::StepRecord* history = nullptr;  //!< Adam's records; a rule's is (capacity, kNumStep) floats
  int64_t capacity = 0;
  int64_t num_rows = 0;
  int64_t cols = 0;
  int dtype = kFloat32;
  int device = kCpu;
  gd::FixedScalars fixed{};
  int64_t step = 0;
  gd::ReplayHints hints;  //!< of history[1..hints.scanned], extended as steps come
  std::atomic<bool> read_by_product{false};  //!< a refresh was asked (read_by_product())
};

std::mutex registry_mutex;
std::unordered_map<const void*, std::shared_ptr<Entry>>& registry() {
  static auto* entries = new std::unordered_map<const void*, std::shared_ptr<Entry>>();
  return *entries;
}

std::shared_ptr<Entry> find(const void* weight) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto& entries = registry();
  if (entries.empty()) return nullptr;
  const auto it = entries.find(weight);
  return it == entries.end() ? nullptr : it->second;
}

const char* dtype_name(int dtype) { return dtype == kFloat64 ? "float64" : "float32"; }

/*! \brief Check a refresh call against the registration; the entry's mutex is held. */
bool check_call(const Entry& e, int dtype, int device, std::string* error) {
  if (dtype != e.dtype) {
    *error = std::string("the weight is ") + dtype_name(dtype) +
             " but its deferred optimizer state was registered as " + dtype_name(e.dtype);
    return false;
  }
  if (device != e.device) {
    *error = "the weight is read on another device than its deferred optimizer state lives on";
    return false;
  }
  return true;
}

/*!
 * \brief The distinct rows among `cols` that are behind `step`, sorted; false
 *        (with a message) on a column out of range or a row ahead of `step`.
 */
bool rows_behind(const Entry& e, const int64_t* cols, int64_t n, std::vector<int64_t>* rows,
                 std::string* error) {
  rows->clear();
  rows->reserve(n);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t row = cols[k];
    if (row < 0 || row >= e.num_rows) {
      *error = "column index " + std::to_string(row) + " at position " + std::to_string(k) +
               " is outside the weight's " + std::to_string(e.num_rows) + " rows";
      return false;
    }
    const int64_t last = e.last_step[row];
    if (last > e.step || last < 0) {
      *error = "row " + std::to_string(row) + " of the weight is at step " +
               std::to_string(last) + " but the optimizer is at step " + std::to_string(e.step) +
               " (was the optimizer state replaced without its weights?)";
      return false;
    }
    if (last < e.step) rows->push_back(row);
  }
  std::sort(rows->begin(), rows->end());
  rows->erase(std::unique(rows->begin(), rows->end()), rows->end());
  return true;
}

template <typename T>
void catch_up_cpu(Entry* e, const std::vector<int64_t>& rows, T* weight) {
  T* mean = static_cast<T*>(e->mean);
  T* var = static_cast<T*>(e->var);
  const int64_t cols = e->cols, step = e->step, count = static_cast<int64_t>(rows.size());
  gd::extend_hints(e->history, step, &e->hints);
  const gd::ReplayHints& hints = e->hints;
  // Work in element-steps; a zero row with no weight decay since its last step
  // is skipped at once by the replay, so it costs nothing (a batch of fresh rows
  // must not open a parallel region). Counted only until it is enough for the
  // largest team: this loop runs on one thread, and scanning every fresh row's
  // state (8 KB at 1,024 columns, from memory) took 3.6 ms of the forum
  // network's step at step 50 and 19 ms in its first 20 steps.
  int64_t work = 0;
  const int64_t enough = gluon_sparse::work_for_largest_team();
  for (int64_t i = 0; i < count && work < enough; ++i) {
    const int64_t row = rows[i];
    if (i + kRowsAhead < count) prefetch_row(mean + rows[i + kRowsAhead] * cols, 1);
    const int64_t from = e->last_step[row];
    if (hints.last_wd <= from && gd::state_is_zero(cols, mean + row * cols, var + row * cols)) {
      continue;
    }
    work += (step - from) * cols;
  }
  // Rows are distinct, so threads never share one; dynamic scheduling because
  // the rows' gaps (steps to replay) differ by orders of magnitude.
  gluon_sparse::parallel_dynamic(count, 4, gluon_sparse::team_size(work, count), [&](int64_t i) {
    if (i + kRowsAhead < count) prefetch_rows(rows[i + kRowsAhead] * cols, cols, weight, mean, var);
    const int64_t row = rows[i];
    const int64_t offset = row * cols;
    gd::replay_row<T>(cols, weight + offset, mean + offset, var + offset, e->history, e->fixed,
                      e->last_step[row], step, hints);
    e->last_step[row] = step;
  });
}


// ------------------------------------------------------------------- rules
/*! \brief Catch rows up under a rule (entry mutex held). */
template <class Rule, typename T>
void rule_catch_up_cpu(Entry* e, const std::vector<int64_t>& rows, T* weight) {
  const float* history = reinterpret_cast<const float*>(e->history);
  optim::extend_hint<Rule>(history, e->fixed_scalars, e->step, &e->hint);
  optim::DeferredView view{weight, {}, e->last_step, history, e->fixed_scalars, e->num_rows,
                           e->cols};
  for (int k = 0; k < optim::kMaxStates; ++k) view.states[k] = e->states[k];
  optim::catch_up_rows<Rule, T>(view, static_cast<int64_t>(rows.size()),
                                [&](int64_t i) { return rows[i]; }, e->step, e->hint, 4);
}

#if GLUON_SPARSE_WITH_CUDA
/*! \brief Enqueue the catch-up of `cols[0, n)` (device) under a rule; CUDA's error or null. */
template <class Rule, typename T>
const char* rule_catch_up_gpu(const Entry& e, const void* weight, const int64_t* cols, int64_t n,
                              void* stream) {
  optim::cuda::DeviceRows<T> rows{static_cast<T*>(const_cast<void*>(weight)), {}, e.last_step,
                                  reinterpret_cast<float*>(e.history), e.num_rows, e.cols};
  for (int k = 0; k < optim::kMaxStates; ++k) rows.states[k] = static_cast<T*>(e.states[k]);
  optim::cuda::Floats fixed{};
  for (int k = 0; k < optim::kMaxFixed; ++k) fixed.v[k] = e.fixed_scalars[k];
  return optim::cuda::launch_catch_up<Rule, T>(rows, fixed, cols, n, e.step, stream).error;
}
#define GS_RULE_KIND_GPU(Rule) , &rule_catch_up_gpu<Rule, float>, &rule_catch_up_gpu<Rule, double>
#else
#define GS_RULE_KIND_GPU(Rule)
#endif

/*! \brief What the registry knows of each rule of GLUON_SPARSE_OPTIM_RULES. */
struct RuleKind {
  const char* name;
  int num_states, num_fixed, num_step;
  void (*catch_up_f32)(Entry*, const std::vector<int64_t>&, float*);
  void (*catch_up_f64)(Entry*, const std::vector<int64_t>&, double*);
#if GLUON_SPARSE_WITH_CUDA
  const char* (*catch_up_gpu_f32)(const Entry&, const void*, const int64_t*, int64_t, void*);
  const char* (*catch_up_gpu_f64)(const Entry&, const void*, const int64_t*, int64_t, void*);
#endif
};

#define GS_RULE_KIND(Rule)                                                                  \
  {Rule::kName, Rule::kNumStates, Rule::kNumFixed, Rule::kNumStep,                          \
   &rule_catch_up_cpu<Rule, float>, &rule_catch_up_cpu<Rule, double> GS_RULE_KIND_GPU(Rule)},
const RuleKind kRuleKinds[] = {GLUON_SPARSE_OPTIM_RULES(GS_RULE_KIND)};
#undef GS_RULE_KIND
#undef GS_RULE_KIND_GPU
constexpr int kNumRuleKinds = sizeof(kRuleKinds) / sizeof(kRuleKinds[0]);

int rule_kind(const char* name) {
  for (int i = 0; i < kNumRuleKinds; ++i) {
    if (std::string(name) == kRuleKinds[i].name) return i;
  }
  return -1;
}

}  // namespace

bool refresh_rows_cpu(const void* weight, int dtype, const int64_t* cols, int64_t n,
                      std::string* error) {
  const std::shared_ptr<Entry> entry = find(weight);
  if (!entry) return true;
  entry->read_by_product = true;
  if (n == 0) return true;
  std::lock_guard<std::mutex> lock(entry->mutex);
  if (!entry->alive) return true;
  if (!check_call(*entry, dtype, kCpu, error)) return false;
  std::vector<int64_t> rows;
  if (!rows_behind(*entry, cols, n, &rows, error)) return false;
  if (rows.empty()) return true;
  // The weight is written through the pointer the forward pass received read-only:
  // safe by the engine-ordering argument in deferred_registry.h.
  void* data = const_cast<void*>(weight);
  Entry* e = entry.get();
  if (e->kind != kAdamKind) {
    const RuleKind& rule = kRuleKinds[e->kind];
    if (dtype == kFloat64) {
      rule.catch_up_f64(e, rows, static_cast<double*>(data));
    } else {
      rule.catch_up_f32(e, rows, static_cast<float*>(data));
    }
  } else if (dtype == kFloat64) {
    catch_up_cpu(e, rows, static_cast<double*>(data));
  } else {
    catch_up_cpu(e, rows, static_cast<float*>(data));
  }
  return true;
}

#if GLUON_SPARSE_WITH_CUDA
namespace {
template <typename T>
const char* catch_up_gpu(const Entry& e, const void* weight, const int64_t* cols, int64_t n,
                         void* stream) {
  gd::cuda::DeviceState<T> state{static_cast<T*>(const_cast<void*>(weight)),
                                 static_cast<T*>(e.mean), static_cast<T*>(e.var), e.last_step,
                                 e.history, e.num_rows, e.cols};
  return gd::cuda::launch_catch_up<T>(state, e.fixed, cols, n, e.step, stream).error;
}
}  // namespace

bool refresh_rows_gpu(const void* weight, int dtype, const int64_t* cols, int64_t n, void* stream,
                      std::string* error) {
  const std::shared_ptr<Entry> entry = find(weight);
  if (!entry) return true;
  entry->read_by_product = true;
  if (n == 0) return true;
  std::lock_guard<std::mutex> lock(entry->mutex);
  if (!entry->alive) return true;
  if (!check_call(*entry, dtype, kGpu, error)) return false;
  // The columns were validated by the caller; the kernel claims each row once.
  const char* cuda_error = nullptr;
  if (entry->kind != kAdamKind) {
    const RuleKind& rule = kRuleKinds[entry->kind];
    cuda_error = dtype == kFloat64 ? rule.catch_up_gpu_f64(*entry, weight, cols, n, stream)
                                   : rule.catch_up_gpu_f32(*entry, weight, cols, n, stream);
  } else {
    cuda_error = dtype == kFloat64 ? catch_up_gpu<double>(*entry, weight, cols, n, stream)
                                   : catch_up_gpu<float>(*entry, weight, cols, n, stream);
  }
  if (cuda_error != nullptr) {
    *error = std::string("CUDA error while bringing rows up to date: ") + cuda_error;
    return false;
  }
  return true;
}
#endif  // GLUON_SPARSE_WITH_CUDA

bool read_by_product(const void* weight) {
  const std::shared_ptr<Entry> entry = find(weight);
  return entry && entry->read_by_product;
}

void set_step(const void* weight, int64_t step) {
  const std::shared_ptr<Entry> entry = find(weight);
  if (!entry) return;
  std::lock_guard<std::mutex> lock(entry->mutex);
  if (entry->alive) entry->step = step;
}

/*! \brief Make `entry` the registration of `weight`, retiring any previous one. */
void install(const void* weight, std::shared_ptr<Entry> entry) {
  std::shared_ptr<Entry> previous;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    auto& slot = registry()[weight];
    previous.swap(slot);
    slot = std::move(entry);
  }
  if (previous) {
    std::lock_guard<std::mutex> lock(previous->mutex);
    previous->alive = false;
  }
}

}  // namespace deferred
}  // namespace gluon_sparse

// ------------------------------------------------------------ C functions
// Called from gluon_sparse/optimizer/_registry.py with ctypes. Each returns 0 on
// success and a negative code the Python side turns into an exception.

namespace gsd = gluon_sparse::deferred;

/*!
 * \brief Register (or re-register) the deferred state of the weight whose data
 *        starts at `weight`. A previous registration of the same weight, by
 *        any owner, is replaced.
 *
 * \return 0, or -1 on invalid arguments.
 */
extern "C" int gluon_sparse_deferred_register(const void* weight, uint64_t owner, void* mean,
                                              void* var, int64_t* last_step, void* history,
                                              int64_t capacity, int64_t num_rows, int64_t cols,
                                              int dtype, int device, float beta1, float beta2,
                                              float epsilon, int64_t step) {
  if (weight == nullptr || mean == nullptr || var == nullptr || last_step == nullptr ||
      history == nullptr || capacity <= step || step < 0 || num_rows < 0 || cols < 0 ||
      (dtype != gsd::kFloat32 && dtype != gsd::kFloat64) ||
      (device != gsd::kCpu && device != gsd::kGpu)) {
    return -1;
  }
  auto entry = std::make_shared<gsd::Entry>();
  entry->owner = owner;
  entry->mean = mean;
  entry->var = var;
  entry->last_step = last_step;
  entry->history = static_cast<gluon_sparse::adam::deferred::StepRecord*>(history);
  entry->capacity = capacity;
  entry->num_rows = num_rows;
  entry->cols = cols;
  entry->dtype = dtype;
  entry->device = device;
  entry->fixed = {beta1, beta2, epsilon};
  entry->step = step;
  gsd::install(weight, std::move(entry));
  return 0;
}

/*!
 * \brief Register (or re-register) the deferred state of the weight whose data
 *        starts at `weight` under the rule named `rule` (its kName):
 *        `states[0, num_states)` its state arrays, `history` its (capacity,
 *        record_width) float32 records, `fixed[0, num_fixed)` its fixed scalars.
 *        A previous registration of the same weight, by any owner, is replaced.
 *
 * \return 0; -1 on invalid arguments; -3 if no rule has that name or the
 *         counts differ from the rule's (a library built from other rules).
 */
extern "C" int gluon_sparse_deferred_register_rule(
    const void* weight, uint64_t owner, const char* rule, void* const* states, int num_states,
    int64_t* last_step, void* history, int64_t capacity, int record_width, const float* fixed,
    int num_fixed, int64_t num_rows, int64_t cols, int dtype, int device, int64_t step) {
  if (weight == nullptr || rule == nullptr || last_step == nullptr || history == nullptr ||
      capacity <= step || step < 0 || num_rows < 0 || cols < 0 || num_states < 0 ||
      num_fixed < 0 || (num_states > 0 && states == nullptr) ||
      (num_fixed > 0 && fixed == nullptr) || (dtype != gsd::kFloat32 && dtype != gsd::kFloat64) ||
      (device != gsd::kCpu && device != gsd::kGpu)) {
    return -1;
  }
  const int kind = gsd::rule_kind(rule);
  if (kind < 0) return -3;
  const gsd::RuleKind& info = gsd::kRuleKinds[kind];
  if (num_states != info.num_states || num_fixed != info.num_fixed ||
      record_width != info.num_step) {
    return -3;
  }
  auto entry = std::make_shared<gsd::Entry>();
  entry->owner = owner;
  entry->kind = kind;
  for (int k = 0; k < num_states; ++k) {
    if (states[k] == nullptr) return -1;
    entry->states[k] = states[k];
  }
  for (int k = 0; k < num_fixed; ++k) entry->fixed_scalars[k] = fixed[k];
  entry->last_step = last_step;
  entry->history = static_cast<gluon_sparse::adam::deferred::StepRecord*>(history);
  entry->capacity = capacity;
  entry->num_rows = num_rows;
  entry->cols = cols;
  entry->dtype = dtype;
  entry->device = device;
  entry->step = step;
  gsd::install(weight, std::move(entry));
  return 0;
}

/*!
 * \brief Point a registered weight at a reallocated history (the old one may be
 *        freed once this returns).
 *
 * \return 0, or -2 if the weight is not registered by `owner`.
 */
extern "C" int gluon_sparse_deferred_set_history(const void* weight, uint64_t owner,
                                                 void* history, int64_t capacity) {
  const std::shared_ptr<gsd::Entry> entry = gsd::find(weight);
  if (!entry) return -2;
  std::lock_guard<std::mutex> lock(entry->mutex);
  if (!entry->alive || entry->owner != owner || capacity <= entry->step) return -2;
  entry->history = static_cast<gluon_sparse::adam::deferred::StepRecord*>(history);
  entry->capacity = capacity;
  return 0;
}

/*!
 * \brief Unregister the weight if `owner` registered it. Once this returns no
 *        refresh touches the owner's arrays, so they may be freed.
 *
 * \return 0 if an entry was removed, 1 if there was none of this owner.
 */
extern "C" int gluon_sparse_deferred_unregister(const void* weight, uint64_t owner) {
  std::shared_ptr<gsd::Entry> entry;
  {
    std::lock_guard<std::mutex> lock(gsd::registry_mutex);
    auto& entries = gsd::registry();
    const auto it = entries.find(weight);
    if (it == entries.end() || it->second->owner != owner) return 1;
    entry = it->second;
    entries.erase(it);
  }
  // Waits for a refresh in progress, and stops any that found the entry before the erase.
  std::lock_guard<std::mutex> lock(entry->mutex);
  entry->alive = false;
  return 0;
}

/*! \brief The step a registered weight has reached, or -1 if it is not registered. */
extern "C" int64_t gluon_sparse_deferred_step(const void* weight) {
  const std::shared_ptr<gsd::Entry> entry = gsd::find(weight);
  if (!entry) return -1;
  std::lock_guard<std::mutex> lock(entry->mutex);
  return entry->alive ? entry->step : -1;
}

/*! \brief Number of registered weights (for tests and diagnostics). */
extern "C" int64_t gluon_sparse_deferred_count() {
  std::lock_guard<std::mutex> lock(gsd::registry_mutex);
  return static_cast<int64_t>(gsd::registry().size());
}
