/*!
 * Registry of the weights trained by a deferred optimizer: deferred standard
 * Adam (adam_deferred_op.cc) or any rule of the family (optim_rule.h).
 *
 * A deferred update leaves the rows absent from a gradient behind; a row must
 * be brought up to date before anything reads it. The
 * product operators read weight rows inside the graph (also inside a
 * hybridized parent, where no Python code runs per block), so the state they
 * need lives here, in the operator library: a weight's data pointer maps to
 * an entry that knows which optimizer owns the weight (Adam, or a rule of
 * GLUON_SPARSE_OPTIM_RULES by name), its state arrays, last_step, history,
 * fixed scalars and the step the weight has reached. The product operator
 * only asks "bring these rows up to date"; the entry's kind picks the replay.
 * Python fills it through the C functions of deferred_registry.cc
 * (gluon_sparse/optimizer/_registry.py, via ctypes).
 *
 * Why writing rows inside a read-only operator is safe: the update operator
 * writes the weight and mutates mean, var, last_step and history, and the
 * product operator reads the weight, so MXNet's engine orders
 * update(t) -> forward(t + 1) -> update(t + 1). Between two updates nothing
 * else writes these arrays, and the only concurrent readers of the weight are
 * other product operators, which refresh the same way: an entry's mutex makes
 * their refreshes one after the other, and a row refreshed once is up to date
 * for the others. The weight must NOT be declared mutable by the product
 * operator: lib_api turns mutable inputs into auxiliary states, which would
 * lose the weight's gradient.
 *
 * Lifetime: Python unregisters an entry before it frees the arrays (and
 * re-registers when it reallocates the history); unregistering marks the
 * entry dead under its mutex, so a refresh that found it just before waits
 * for nothing and touches nothing afterwards.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_DEFERRED_REGISTRY_H_
#define GLUON_SPARSE_CSRC_OPS_DEFERRED_REGISTRY_H_

#include <cstdint>
#include <string>

namespace gluon_sparse {
namespace deferred {

/*!
 * \brief Bring rows `cols[0, n)` (any order, repeats allowed) of the weight
 *        whose data starts at `weight` up to its current step, on the CPU.
 *
 * Does nothing, in one hash lookup, when the weight is not registered.
 * `dtype` is the weight's MXDType (kFloat32 or kFloat64).
 * Returns false and sets `*error` if the registration does not fit the call
 * (dtype, device, a column out of range).
 */
bool refresh_rows_cpu(const void* weight, int dtype, const int64_t* cols, int64_t n,
                      std::string* error);

#if GLUON_SPARSE_WITH_CUDA
/*!
 * \brief The same on the GPU: `cols` is on the device, the replay is enqueued
 *        on `stream` (a cudaStream_t) before the caller's own kernels.
 */
bool refresh_rows_gpu(const void* weight, int dtype, const int64_t* cols, int64_t n,
                      void* stream, std::string* error);
#endif

/*! \brief Record that the weight whose data starts at `weight` has reached `step` (if registered). */
void set_step(const void* weight, int64_t step);

/*!
 * \brief Whether a product operator has asked to refresh rows of the registered
 *        weight at `weight` (false if it is not registered).
 *
 * The Trainer's update with several devices catches gradient rows that are
 * behind up to date (catch_up=1: the summed gradient holds rows that only
 * another device's forward pass read), trusting that every gradient row was
 * read up to date on some device. That holds where the product operators read
 * the weight; a weight that only other operators read (an Embedding's, say)
 * was read stale, and the update must refuse the rows behind as it does on one
 * device rather than catch them up under a gradient computed from stale
 * values: the update's catch_up_if_read=1 asks for that. Call it from the
 * update operator: the engine runs it after the forward passes that read the
 * weight.
 */
bool read_by_product(const void* weight);

/*!
 * \brief Whether a deferred update catches up its gradient rows that are behind:
 *        with `catch_up`, and with `catch_up_if_read` too only where
 *        read_by_product(weight) (above). Every deferred update operator, Adam's
 *        and the rules', CPU and GPU, asks this.
 */
inline bool catches_up(const void* weight, bool catch_up, bool catch_up_if_read) {
  return catch_up && (!catch_up_if_read || read_by_product(weight));
}

}  // namespace deferred
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_DEFERRED_REGISTRY_H_
