/*!
 * Plain SGD (momentum 0): MXNet 1.9.1's dense-gradient `mx.optimizer.SGD`
 * update (multi_sgd_update: MultiSGDKernel without momentum), operation for
 * operation:
 *
 *   d = 0 * 0 - (lr * wd) * w - (lr * rescale_grad) * grad   (clip as sgd_mom)
 *   w = w + d
 *
 * No state: a row absent from the gradient moves only by weight decay, so with
 * wd == 0 nothing is deferred at all (every replayed step is a fixed point).
 */
#ifndef GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_SGD_H_
#define GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_SGD_H_

#include <cmath>

#include "optim_rule.h"
#include "optim_rule_sgd_mom.h"

namespace gluon_sparse {
namespace optim {

struct SgdRule {
  static constexpr const char* kName = "sgd";
  static constexpr int kNumStates = 0;
  static constexpr const char* kStateNames[] = {nullptr};
  static constexpr int kNumFixed = 0;
  static constexpr const char* kFixedNames[] = {nullptr};
  static constexpr float kFixedDefaults[] = {0.0f};
  static constexpr int kNumStep = 3;
  static constexpr const char* kStepNames[] = {"lr", "wd", "clip_gradient"};
  static constexpr float kStepDefaults[] = {NAN, 0.0f, -1.0f};
  // mx.optimizer.SGD passes lr and wd in multi_sgd(_mom)_update's lrs/wds tuples.
  static constexpr Parse kStepParse[] = {Parse::kTupleElement, Parse::kTupleElement,
                                         Parse::kField};

  template <typename T>
  using Scalars = SgdScalars<T>;

  template <typename T>
  GS_HOST_DEVICE static Scalars<T> scalars(const float* step, const float* fixed,
                                           float rescale_grad) {
    // MultiSGDKernelParam sets momentum = 0 for multi_sgd_update.
    return {static_cast<T>(step[0]), static_cast<T>(step[1]), T(0), static_cast<T>(rescale_grad),
            static_cast<T>(step[2])};
  }

  template <bool kHasGrad, typename T>
  GS_HOST_DEVICE static void apply(T grad, T* w, T* s, const Scalars<T>& sc) {
    *w = ops::add(*w, sgd_momentum<kHasGrad>(grad, *w, T(0), sc));
  }

  GS_HOST_DEVICE static bool zero_state_is_fixed_point(const float* step, const float* fixed) {
    return sgd_zero_is_fixed_point(step[0], step[1], 0.0f);
  }
};

}  // namespace optim
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_OPS_OPTIM_RULE_SGD_H_
