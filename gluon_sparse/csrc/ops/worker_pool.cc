/*!
 * The operator library's worker threads (see worker_pool.h for why and the contract).
 *
 * One task at a time: a caller takes the pool with an atomic flag (try, never
 * wait: a caller that finds it taken runs serially), publishes the task, posts
 * a new job number to each of its team's workers and runs its own share.
 * Workers wait for a post by spinning on their own atomic for up to
 * kSpinMicros, then sleep on their own condition variable, so a team of two
 * on a 64-thread pool wakes one thread, not 63. Each worker's share is then
 * claimed once, by the worker or, if the caller gets there first (the worker
 * has not woken up yet), by the caller, which runs it itself; the caller
 * waits (spinning, then yielding its core: the worker may need it) only for
 * the shares that workers claimed.
 */
#include "worker_pool.h"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define GS_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define GS_CPU_RELAX() asm volatile("yield" ::: "memory")
#else
#define GS_CPU_RELAX() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

namespace gluon_sparse {
namespace {

using Clock = std::chrono::steady_clock;

// More workers than this is a request no machine here can use (the test knob
// can ask for any team size).
constexpr int kMaxWorkers = 255;

class WorkerPool {
 public:
  bool run(int team, PoolTask task, void* ctx) {
    if (team < 2) return false;
    if (busy_.test_and_set(std::memory_order_acquire)) return false;  // another caller's task
    const int workers = team - 1 > kMaxWorkers ? kMaxWorkers : team - 1;
    if (!start_workers(workers)) {
      busy_.clear(std::memory_order_release);
      return false;
    }
    team = workers + 1;
    task_ = task;
    ctx_ = ctx;
    team_ = team;
    const unsigned long long job = ++generation_;
    for (int i = 0; i < workers; ++i) post(workers_[i].get(), job);
    task(ctx, 0, team);
    // Shares no worker has claimed yet are the caller's: it never waits for a
    // worker to wake up (on a busy machine that can take milliseconds), only
    // for those already running a share to finish it.
    for (int i = 0; i < workers; ++i) {
      Worker* w = workers_[i].get();
      if (claim(w, job)) {
        task(ctx, w->index, team);
      } else {
        wait_until_done(w, job);
      }
    }
    busy_.clear(std::memory_order_release);
    return true;
  }

 private:
  struct Worker {
    std::atomic<unsigned long long> posted{0};   // the last job posted to it
    std::atomic<unsigned long long> claimed{0};  // the last job whose share someone claimed
    std::atomic<unsigned long long> done{0};     // the last job it ran its share of
    std::mutex mutex;
    std::condition_variable wake;
    int index = 0;
  };

  /*! \brief Start workers until there are `count` (caller holds busy_); false if none can be. */
  bool start_workers(int count) {
    while (static_cast<int>(workers_.size()) < count) {
      auto worker = std::make_unique<Worker>();
      worker->index = static_cast<int>(workers_.size()) + 1;
      Worker* raw = worker.get();
      try {
        // Detached: the pool lives as long as the process (it is never
        // destroyed, so exit() does not wait for or on its threads).
        std::thread([this, raw] { loop(raw); }).detach();
      } catch (const std::system_error&) {
        return false;
      }
      workers_.push_back(std::move(worker));
    }
    return true;
  }

  static void post(Worker* w, unsigned long long generation) {
    w->posted.store(generation, std::memory_order_release);
    // Under the worker's mutex: a worker between its last check of `posted`
    // and its wait holds it, so the notification cannot fall between the two.
    std::lock_guard<std::mutex> lock(w->mutex);
    w->wake.notify_one();
  }

  /*! \brief The next generation posted to `w` after `seen`: spin, then sleep. */
  static unsigned long long wait_for_post(Worker* w, unsigned long long seen) {
    const auto deadline = Clock::now() + std::chrono::microseconds(kSpinMicros);
    for (unsigned spins = 1;; ++spins) {
      const unsigned long long posted = w->posted.load(std::memory_order_acquire);
      if (posted != seen) return posted;
      GS_CPU_RELAX();
      if ((spins & 63) == 0 && Clock::now() >= deadline) break;
    }
    std::unique_lock<std::mutex> lock(w->mutex);
    w->wake.wait(lock, [&] { return w->posted.load(std::memory_order_acquire) != seen; });
    return w->posted.load(std::memory_order_acquire);
  }

  /*!
   * \brief Claim worker `w`'s share of `job`, for the worker or for the caller:
   *        true for exactly one of them. A worker that wakes late, after the
   *        caller took its share (or after later jobs), fails and skips it.
   */
  static bool claim(Worker* w, unsigned long long job) {
    unsigned long long last = w->claimed.load(std::memory_order_acquire);
    return last < job &&
           w->claimed.compare_exchange_strong(last, job, std::memory_order_acq_rel);
  }

  void loop(Worker* w) {
    unsigned long long seen = 0;
    for (;;) {
      seen = wait_for_post(w, seen);
      // The task of job `seen` is published until its caller returns, which
      // it does not before this share is done: read it only once claimed.
      if (!claim(w, seen)) continue;
      task_(ctx_, w->index, team_);
      w->done.store(seen, std::memory_order_release);
    }
  }

  static void wait_until_done(Worker* w, unsigned long long job) {
    for (unsigned spins = 1; w->done.load(std::memory_order_acquire) != job; ++spins) {
      if (spins < 4096) {
        GS_CPU_RELAX();
      } else {
        std::this_thread::yield();
      }
    }
  }

  std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
  std::vector<std::unique_ptr<Worker>> workers_;  // only grows, under busy_
  // The task in flight: written by the caller before it posts, read by the
  // workers after they see the post (release/acquire on Worker::posted).
  PoolTask task_ = nullptr;
  void* ctx_ = nullptr;
  int team_ = 0;
  unsigned long long generation_ = 0;  // the last job; written under busy_
};

std::atomic<WorkerPool*> the_pool{nullptr};

// The child of a fork has only the forking thread: the parent's workers do not
// exist there (and the pool may have been taken). It starts a pool of its own;
// the old one is left unreachable (never destroyed: its mutexes may be held).
void forget_pool_in_child() { the_pool.store(nullptr, std::memory_order_relaxed); }
const bool fork_handler_registered = pthread_atfork(nullptr, nullptr, forget_pool_in_child) == 0;

WorkerPool* pool() {
  WorkerPool* p = the_pool.load(std::memory_order_acquire);
  if (p != nullptr) return p;
  // No lock (a fork could leave one held): racing creators keep the first
  // pool; a loser's has started no thread yet, so it is simply deleted.
  auto* created = new WorkerPool();  // never deleted once published: see start_workers
  if (the_pool.compare_exchange_strong(p, created, std::memory_order_acq_rel)) return created;
  delete created;
  return p;
}

}  // namespace

bool pool_run(int team, PoolTask task, void* ctx) {
  if (team < 2) return false;
  return pool()->run(team, task, ctx);
}

}  // namespace gluon_sparse
