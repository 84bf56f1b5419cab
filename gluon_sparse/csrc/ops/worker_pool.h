/*!
 * The operator library's own worker threads, behind omp_threads.h's
 * parallel_blocks and parallel_dynamic.
 *
 * Why not OpenMP. libgomp's threads spin after every parallel region before
 * they sleep: GOMP_SPINCOUNT iterations, 300,000 by default, which on a CPU
 * whose pause instruction takes ~140 cycles is ~15 ms. Deferred Adam opens a
 * region in most steps (the catch-up of returning rows), so a worker spun
 * between every two steps on the cores that MXNet's engine thread and the
 * Python thread needed. Measured on the 2-core machine, seed shape at 10^6
 * features: 5.3 ms a step with libgomp's defaults, 3.2-3.7 with
 * GOMP_SPINCOUNT=10000 (RESULTS.md, "Worker pool"). An environment variable
 * read once when MXNet loads libgomp cannot be the fix (users must not need
 * one, and it would change MXNet's own operators too), so the library runs
 * its regions on these threads instead: they spin for a bounded time
 * (kSpinMicros) after a region, then sleep on a condition variable.
 *
 * Contract.
 *  - pool_run(team, task, ctx) calls task(ctx, i, team) for every i in
 *    [0, team), the caller itself being i = 0, and returns when all have
 *    returned. It returns false, having run nothing, when it cannot give the
 *    work a team: team < 2, the pool already running another caller's task
 *    (MXNet runs operators on several engine threads; a task that calls
 *    pool_run again is the same case), or threads that cannot be started.
 *    The caller then runs the work serially: results never depend on the
 *    team (omp_threads.h).
 *  - A task must not throw (as in an OpenMP region).
 *  - Fork: the child of a fork() has none of the parent's threads; a fork
 *    handler gives it a fresh, empty pool.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_WORKER_POOL_H_
#define GLUON_SPARSE_CSRC_OPS_WORKER_POOL_H_

namespace gluon_sparse {

/*! \brief A task run by each member of a team: task(ctx, index, team). */
typedef void (*PoolTask)(void* ctx, int index, int team);

/*!
 * \brief How long a worker spins for the next task before it sleeps. Against
 *        libgomp with its defaults (which spin ~15 ms) on the 2-core machine,
 *        seed shape at 10^6 features: 50 us gave the same or shorter steps
 *        with 25% less CPU time; 0, 20, 200 and 1000 us were slower.
 */
constexpr int kSpinMicros = 50;

/*!
 * \brief Run task(ctx, i, team) for i in [0, team) on the calling thread
 *        (i = 0) and team - 1 pool workers; false, having run nothing, if no
 *        team can be had (see the file comment).
 */
bool pool_run(int team, PoolTask task, void* ctx);

}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_WORKER_POOL_H_
