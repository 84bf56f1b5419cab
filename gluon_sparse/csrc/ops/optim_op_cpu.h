/*!
 * CPU compute of the family's three operators (optim_op.h), generic over a
 * Rule: the eager update (contiguous blocks of rows per thread, walking the
 * sorted gradient indices alongside), the deferred update of the gradient's
 * rows, the flush of every row (optim_catch_up.h) and the dense update of
 * several weights in one call (optim_multi_op.h). Included once, by
 * optim_op_register.cc, which instantiates it for every rule.
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OPTIM_OP_CPU_H_
#define GLUON_SPARSE_CSRC_OPS_OPTIM_OP_CPU_H_

#include <cstdint>
#include <vector>

#include "deferred_registry.h"
#include "omp_threads.h"
#include "optim_catch_up.h"
#include "optim_multi_op.h"
#include "optim_op.h"
#include "optim_rows.h"

namespace gluon_sparse {
namespace optim {

template <typename T>
StatePtrs<T> state_ptrs(const Args& a, int num_states) {
  StatePtrs<T> s;
  for (int k = 0; k < kMaxStates; ++k) s.p[k] = k < num_states ? static_cast<T*>(a.states[k]) : nullptr;
  return s;
}

template <class Rule>
DeferredView view_of(const Args& a, const Params& p) {
  DeferredView v{a.weight, {}, a.last_step, a.history, p.fixed, a.num_rows, a.cols};
  for (int k = 0; k < kMaxStates; ++k) v.states[k] = a.states[k];
  return v;
}

/*! \brief Eager: every row steps, with its gradient row or without. */
template <class Rule, typename T>
void eager_cpu(const Params& p, const Args& a) {
  const auto sc = Rule::template scalars<T>(p.step_scalars, p.fixed, p.rescale_grad);
  T* weight = static_cast<T*>(a.weight);
  const T* grad = static_cast<const T*>(a.grad);
  const StatePtrs<T> states = state_ptrs<T>(a, Rule::kNumStates);
  const int64_t cols = a.cols;
  const int team = team_size(a.num_rows * cols, a.num_rows);
  parallel_blocks(a.num_rows, team, [&](int64_t begin, int64_t end) {
    int64_t k = ops::lower_bound(a.indices, a.nnz, begin);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t offset = row * cols;
      const StatePtrs<T> rs = states.at(offset, Rule::kNumStates);
      if (k < a.nnz && a.indices[k] == row) {
        step_row<Rule, true>(cols, weight + offset, rs, grad + k * cols, sc);
        ++k;
      } else {
        step_row<Rule, false>(cols, weight + offset, rs, static_cast<const T*>(nullptr), sc);
      }
    }
  });
}

/*!
 * \brief Deferred update: record the step, step the gradient's rows. Every
 *        check runs before any memory is written.
 */
template <class Rule, typename T>
bool deferred_update_cpu(const RuleInfo& info, const Params& p, const Args& a) {
  T* weight = static_cast<T*>(a.weight);
  const StatePtrs<T> states = state_ptrs<T>(a, Rule::kNumStates);
  const int64_t cols = a.cols, step = p.step;
  ReplayHint hint;  // of steps 1..step-1, computed only when a row is behind
  bool have_hint = false;
  int64_t work = a.nnz * cols;
  for (int64_t k = 0; k < a.nnz; ++k) {
    const int64_t row = a.indices[k];
    const int64_t row_step = a.last_step[row];
    if (row_step == step - 1) continue;
    if (row_step >= step || row_step < 0) return report_stale_row(info, row, row_step, step);
    if (!have_hint) {
      extend_hint<Rule>(a.history, p.fixed, step - 1, &hint);
      have_hint = true;
    }
    if (p.catch_up) {
      work += (step - 1 - row_step) * cols;
    } else if (!replay_is_noop<Rule>(cols, weight + row * cols,
                                     states.at(row * cols, Rule::kNumStates), hint, row_step)) {
      return report_stale_row(info, row, row_step, step);
    }
  }
  float* rec = a.history + step * Rule::kNumStep;
  for (int i = 0; i < Rule::kNumStep; ++i) rec[i] = p.step_scalars[i];
  const auto sc = Rule::template scalars<T>(p.step_scalars, p.fixed, p.rescale_grad);
  const T* grad = static_cast<const T*>(a.grad);
  parallel_dynamic(a.nnz, 16, team_size(work, a.nnz), [&](int64_t k) {
    const int64_t row = a.indices[k];
    const int64_t offset = row * cols;
    const StatePtrs<T> rs = states.at(offset, Rule::kNumStates);
    if (a.last_step[row] < step - 1) {
      // catch_up (rows read by another device), or a no-op replay (checked above).
      replay_row<Rule, T>(cols, weight + offset, rs, a.history, p.fixed, a.last_step[row],
                          step - 1, hint);
    }
    step_row<Rule, true>(cols, weight + offset, rs, grad + k * cols, sc);
    a.last_step[row] = step;
  });
  return true;
}

/*! \brief Flush: every row replays the steps it missed, up to `step`. */
template <class Rule, typename T>
bool flush_cpu(const RuleInfo& info, const Params& p, const Args& a) {
  for (int64_t row = 0; row < a.num_rows; ++row) {
    if (a.last_step[row] > p.step || a.last_step[row] < 0) {
      return report_invalid_last_step(info, row, a.last_step[row], p.step);
    }
  }
  ReplayHint hint;
  extend_hint<Rule>(a.history, p.fixed, p.step, &hint);
  catch_up_rows<Rule, T>(view_of<Rule>(a, p), a.num_rows, [](int64_t i) { return i; }, p.step,
                         hint, 256);
  return true;
}

/*!
 * \brief Multi-update (optim_multi_op.h): each dense weight steps every element
 *        with its gradient, in contiguous blocks across the team.
 */
template <class Rule, typename T>
void multi_update_cpu(const MultiParams& p, std::vector<mxnet::ext::MXTensor>* inputs) {
  constexpr int per_weight = 2 + Rule::kNumStates;
  constexpr int64_t kBlock = 4096;
  for (int64_t w = 0; w < p.num_weights; ++w) {
    mxnet::ext::MXTensor* t = &(*inputs)[per_weight * w];
    const auto sc = Rule::template scalars<T>(&p.steps[w * Rule::kNumStep], p.fixed,
                                              p.rescale_grad);
    T* weight = t[0].data<T>();
    const T* grad = t[1].data<T>();
    StatePtrs<T> states;
    for (int k = 0; k < Rule::kNumStates; ++k) states.p[k] = t[2 + k].data<T>();
    const int64_t size = t[0].size();
    const int64_t blocks = (size + kBlock - 1) / kBlock;
    parallel_blocks(blocks, team_size(size, blocks), [&](int64_t begin, int64_t end) {
      const int64_t first = begin * kBlock;
      const int64_t last = end * kBlock < size ? end * kBlock : size;
      step_row<Rule, true>(last - first, weight + first, states.at(first, Rule::kNumStates),
                           grad + first, sc);
    });
  }
}

/*! \brief The registered compute functions of one rule on the CPU. */
template <class Rule>
struct CpuOps {
  static constexpr RuleInfo kInfo = rule_info<Rule>();

  static mxnet::ext::MXReturnValue compute_cpu(const ops::Attrs& attrs,
                                               std::vector<mxnet::ext::MXTensor>* inputs,
                                               std::vector<mxnet::ext::MXTensor>* outputs,
                                               const mxnet::ext::OpResource& res) {
    Params p;
    Args a;
    if (!parse_params(kInfo, OpKind::kEager, attrs, &p) ||
        !collect_args(kInfo, OpKind::kEager, p, *inputs, *outputs, &a)) {
      return mxnet::ext::MX_FAIL;
    }
    ops::with_float_type(a.dtype, [&](auto zero) { eager_cpu<Rule, decltype(zero)>(p, a); });
    return mxnet::ext::MX_SUCCESS;
  }

  static mxnet::ext::MXReturnValue deferred_update_cpu(
      const ops::Attrs& attrs, std::vector<mxnet::ext::MXTensor>* inputs,
      std::vector<mxnet::ext::MXTensor>* outputs, const mxnet::ext::OpResource& res) {
    Params p;
    Args a;
    if (!parse_params(kInfo, OpKind::kDeferredUpdate, attrs, &p) ||
        !collect_args(kInfo, OpKind::kDeferredUpdate, p, *inputs, *outputs, &a)) {
      return mxnet::ext::MX_FAIL;
    }
    p.catch_up = deferred::catches_up(a.weight, p.catch_up, p.catch_up_if_read);
    const bool ok = ops::with_float_type(a.dtype, [&](auto zero) {
      return optim::deferred_update_cpu<Rule, decltype(zero)>(kInfo, p, a);
    });
    if (!ok) return mxnet::ext::MX_FAIL;
    deferred::set_step(a.weight, p.step);
    return mxnet::ext::MX_SUCCESS;
  }

  static mxnet::ext::MXReturnValue flush_cpu(const ops::Attrs& attrs,
                                             std::vector<mxnet::ext::MXTensor>* inputs,
                                             std::vector<mxnet::ext::MXTensor>* outputs,
                                             const mxnet::ext::OpResource& res) {
    Params p;
    Args a;
    if (!parse_params(kInfo, OpKind::kFlush, attrs, &p) ||
        !collect_args(kInfo, OpKind::kFlush, p, *inputs, *outputs, &a)) {
      return mxnet::ext::MX_FAIL;
    }
    const bool ok = ops::with_float_type(a.dtype, [&](auto zero) {
      return optim::flush_cpu<Rule, decltype(zero)>(kInfo, p, a);
    });
    return ok ? mxnet::ext::MX_SUCCESS : mxnet::ext::MX_FAIL;
  }

  static mxnet::ext::MXReturnValue multi_update_cpu(const ops::Attrs& attrs,
                                                    std::vector<mxnet::ext::MXTensor>* inputs,
                                                    std::vector<mxnet::ext::MXTensor>* outputs,
                                                    const mxnet::ext::OpResource& res) {
    MultiParams p;
    if (!parse_multi_params(kInfo, attrs, &p) || !check_multi_args(kInfo, p, *inputs, *outputs)) {
      return mxnet::ext::MX_FAIL;
    }
    ops::with_float_type((*inputs)[0].dtype, [&](auto zero) {
      optim::multi_update_cpu<Rule, decltype(zero)>(p, inputs);
    });
    return mxnet::ext::MX_SUCCESS;
  }
};

}  // namespace optim
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_OPTIM_OP_CPU_H_
