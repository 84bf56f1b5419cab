/*!
 * `gluon_sparse_cross_entropy`: the cross-entropy of each row of a batch of
 * logits against its target, in one operator, forward and backward.
 *
 * Why by hand: SampledOutput's loss over a batch's candidates, written with
 * MXNet operators (log_softmax, a broadcast multiply by the target, a sum over
 * the row), is five operators forward and four backward over (batch,
 * candidates) arrays, and MXNet's `sum` over an axis alone took 1.2 ms for
 * 256 x 1,280 (3.6 ns an element, benchmarks/RESULTS.md): the loss cost more
 * than the logits' product. Here a row is three vectorised passes forward and
 * three backward, with nothing (batch, candidates)-sized allocated but the
 * gradients.
 *
 * Inputs:  logits (B, C)  float32 or float64
 *          target (B, C)  same dtype: softmax, the target distribution's
 *                         weights (one-hot, or 1/|Y| on each of the row's
 *                         positives); sigmoid, the 0/1 indicator (any value)
 *                  or (B,) softmax only: each row's class, an integer in [0, C)
 * Output:  loss   (B,)
 * Attribute `loss`: "softmax" (default) or "sigmoid".
 *
 *   softmax: loss_i = sum_c t_ic (lse_i - z_ic),  lse_i = log sum_c exp(z_ic)
 *            (a class target y_i: lse_i - z_iy), the same as
 *            -sum(t * log_softmax(z)) and -pick(log_softmax(z), y);
 *   sigmoid: loss_i = sum_c softplus(z_ic) - z_ic t_ic (binary cross-entropy
 *            on the logits, summed over the row).
 *
 * Backward (g_i the loss's gradient; T_i = sum_c t_ic):
 *   softmax: d z_ic = g_i (T_i softmax(z_i)_c - t_ic), d t_ic = g_i (lse_i - z_ic);
 *   sigmoid: d z_ic = g_i (sigmoid(z_ic) - t_ic),      d t_ic = -g_i z_ic;
 *   a class target gets a zero gradient.
 * A target of 0 contributes 0 to the loss also where its logit is -inf (a
 * candidate masked out), where the composition with log_softmax gives NaN.
 *
 * Precision: float32 rows use exp_lanes (below), a polynomial exponential
 * with a relative error under 2e-7 (1-2 ulp) where it matters (inputs above
 * -87; below, exactly 0, where exp is under 2^-125); sums are kept in float
 * lanes and added in double. float64 rows use std::exp / std::log1p. Results
 * agree with the MXNet composition within float rounding, not bitwise
 * (tests/test_cross_entropy_op.py). The float32 kernels are compiled twice
 * (baseline SSE2 and `target("avx2")`, no FMA: host_simd.h); the two builds
 * are bitwise equal.
 */
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "error_messages.h"
#include "host_simd.h"
#include "mxnet/lib_api.h"
#include "omp_threads.h"
#include "op_attrs.h"

// 32-byte vectors passed between always-inlined helpers: GCC's note about
// their ABI concerns calls across objects, which never happen here.
#pragma GCC diagnostic ignored "-Wpsabi"

using namespace mxnet::ext;

namespace gluon_sparse {
namespace xent {
namespace {

constexpr const char* kOpName = "gluon_sparse_cross_entropy";

enum class Loss { kSoftmax, kSigmoid };

/*! \brief One row's operands; `target` is null for a class target (then `label`). */
template <typename T>
struct Row {
  const T* z;
  const T* target;
  int64_t label;
  int64_t n;
};

/* ------------------------------- float32 lanes ------------------------------ */

using ops::as_bits;
using ops::as_float;
using ops::f32x8;
using ops::i32x8;
constexpr int kLanes = 8;

GS_INLINE f32x8 splat(float v) { return v - f32x8{}; }

/*! \brief Lanes [0, 8) of p + i, those at or past `n` set to `pad`, and which are real. */
GS_INLINE f32x8 load(const float* p, int64_t i, int64_t n, float pad, i32x8* valid) {
  f32x8 v;
  if (i + kLanes <= n) {
    std::memcpy(&v, p + i, sizeof(v));
    *valid = i32x8{} == i32x8{};  // all lanes
    return v;
  }
  float buf[kLanes];
  for (int j = 0; j < kLanes; ++j) buf[j] = i + j < n ? p[i + j] : pad;
  std::memcpy(&v, buf, sizeof(v));
  const i32x8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
  *valid = lane < static_cast<int32_t>(n - i) - i32x8{};
  return v;
}

GS_INLINE void store(float* p, int64_t i, int64_t n, f32x8 v) {
  if (i + kLanes <= n) {
    std::memcpy(p + i, &v, sizeof(v));
    return;
  }
  for (int j = 0; i + j < n; ++j) p[i + j] = v[j];
}

GS_INLINE double lane_sum(f32x8 v) {
  double s = 0.0;
  for (int j = 0; j < kLanes; ++j) s += v[j];
  return s;
}

/*!
 * \brief exp(x) in every lane: Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2,
 *        and Cephes' degree-7 polynomial of exp(r); 2^n put in the exponent bits.
 *
 * Above 88.72 (exp(x) > FLT_MAX) +inf; below -87, 0: there n would reach
 * -126 with exp(r) < 1, a denormal that the exponent trick cannot make, and
 * exp(x) < 1.7e-38 changes none of this file's sums. NaN stays NaN.
 */
GS_INLINE f32x8 exp_lanes(f32x8 x) {
  const i32x8 under = x < splat(-87.0f);
  const i32x8 over = x > splat(88.72283f);
  const f32x8 xs = (under | over) ? splat(0.0f) : x;
  // Round x / ln2 to the nearest integer by adding 1.5 * 2^23: n is then in the
  // low mantissa bits of `shifted`.
  const f32x8 magic = splat(12582912.0f);
  const f32x8 shifted = xs * splat(1.44269504088896341f) + magic;
  const f32x8 n = shifted - magic;
  const i32x8 n_bits = as_bits(shifted) - 0x4B400000;  // less the bits of `magic`
  f32x8 r = xs - n * splat(0.693359375f);
  r = r - n * splat(-2.12194440e-4f);
  f32x8 p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  f32x8 y = as_float(as_bits(p * (r * r) + r + splat(1.0f)) + (n_bits << 23));
  y = under ? splat(0.0f) : y;
  y = over ? splat(std::numeric_limits<float>::infinity()) : y;
  return x != x ? x : y;  // NaN in, NaN out
}

GS_INLINE float row_max(const float* z, int64_t n) {
  f32x8 m = splat(-std::numeric_limits<float>::infinity());
  i32x8 valid;
  for (int64_t i = 0; i < n; i += kLanes) {
    const f32x8 v = load(z, i, n, -std::numeric_limits<float>::infinity(), &valid);
    m = (v > m) ? v : m;
    m = (v != v) ? v : m;  // a NaN wins, so that it reaches the loss
  }
  float best = m[0];
  for (int j = 1; j < kLanes; ++j) {
    if (m[j] > best || m[j] != m[j]) best = m[j];
  }
  return best;
}

/*! \brief log sum_c exp(z_c), from the row's maximum. */
GS_INLINE double log_sum_exp(const float* z, int64_t n) {
  const float m = row_max(z, n);
  if (std::isinf(m)) return m;  // every logit -inf (or one +inf): lse is that infinity
  f32x8 s = f32x8{};
  i32x8 valid;
  for (int64_t i = 0; i < n; i += kLanes) {
    const f32x8 e = exp_lanes(load(z, i, n, 0.0f, &valid) - splat(m));
    s += valid ? e : f32x8{};
  }
  return m + std::log(lane_sum(s));
}

GS_INLINE double softmax_loss(const Row<float>& row, double lse) {
  if (!row.target) return lse - row.z[row.label];
  f32x8 s = f32x8{};
  const f32x8 l = splat(static_cast<float>(lse));
  i32x8 valid;
  for (int64_t i = 0; i < row.n; i += kLanes) {
    const f32x8 z = load(row.z, i, row.n, 0.0f, &valid);
    const f32x8 t = load(row.target, i, row.n, 0.0f, &valid);
    // A target of 0 adds 0, also against a logit of -inf (a masked candidate).
    s += (valid & (t != f32x8{})) ? t * (l - z) : f32x8{};
  }
  return lane_sum(s);
}

/*! \brief sum_c softplus(z_c) - z_c t_c, softplus(z) = max(z, 0) + log1p(exp(-|z|)). */
GS_INLINE double sigmoid_loss(const Row<float>& row) {
  f32x8 linear = f32x8{};
  // log1p(e) summed as the log of a product of (1 + e) in double, a factor in
  // (1, 2]: at most 2^512 after 512 factors a lane, then folded into `logs`.
  double product[kLanes];
  for (double& p : product) p = 1.0;
  double logs = 0.0;
  int64_t factors = 0;
  i32x8 valid;
  for (int64_t i = 0; i < row.n; i += kLanes) {
    const f32x8 z = load(row.z, i, row.n, 0.0f, &valid);
    const f32x8 t = load(row.target, i, row.n, 0.0f, &valid);
    const f32x8 pos = (z > f32x8{}) ? z : f32x8{};
    linear += valid ? pos - ((t != f32x8{}) ? z * t : f32x8{}) : f32x8{};
    const f32x8 neg_abs = (z > f32x8{}) ? -z : z;
    const f32x8 e = valid ? exp_lanes(neg_abs) : f32x8{};
    for (int j = 0; j < kLanes; ++j) product[j] *= 1.0 + static_cast<double>(e[j]);
    if (++factors == 512) {
      for (double& p : product) {
        logs += std::log(p);
        p = 1.0;
      }
      factors = 0;
    }
  }
  for (double p : product) logs += std::log(p);
  return lane_sum(linear) + logs;
}

/*! \brief d z (and d t when the target is dense) of one row, scaled by g. */
template <Loss kLoss>
GS_INLINE void row_grad(const Row<float>& row, float g, float* dz, float* dt) {
  i32x8 valid;
  const f32x8 gv = splat(g);
  if (kLoss == Loss::kSoftmax) {
    const double lse = log_sum_exp(row.z, row.n);
    double total = 1.0;  // T = sum_c t_c; 1 for a class target
    if (row.target) {
      f32x8 s = f32x8{};
      for (int64_t i = 0; i < row.n; i += kLanes) s += load(row.target, i, row.n, 0.0f, &valid);
      total = lane_sum(s);
    }
    const f32x8 l = splat(static_cast<float>(lse));
    const f32x8 scale = splat(static_cast<float>(g * total));
    for (int64_t i = 0; i < row.n; i += kLanes) {
      const f32x8 z = load(row.z, i, row.n, 0.0f, &valid);
      const f32x8 p = exp_lanes(z - l) * scale;
      if (row.target) {
        const f32x8 t = load(row.target, i, row.n, 0.0f, &valid);
        store(dz, i, row.n, p - gv * t);
        store(dt, i, row.n, gv * (l - z));
      } else {
        store(dz, i, row.n, p);
      }
    }
    if (!row.target) dz[row.label] -= g;
    return;
  }
  for (int64_t i = 0; i < row.n; i += kLanes) {
    const f32x8 z = load(row.z, i, row.n, 0.0f, &valid);
    const f32x8 t = load(row.target, i, row.n, 0.0f, &valid);
    const f32x8 sigmoid = splat(1.0f) / (splat(1.0f) + exp_lanes(-z));
    store(dz, i, row.n, gv * (sigmoid - t));
    store(dt, i, row.n, -(gv * z));
  }
}

/* ------------------------------- float64 rows ------------------------------- */

double log_sum_exp(const double* z, int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < n; ++c) {
    if (z[c] > m || z[c] != z[c]) m = z[c];
  }
  if (std::isinf(m)) return m;
  double s = 0.0;
  for (int64_t c = 0; c < n; ++c) s += std::exp(z[c] - m);
  return m + std::log(s);
}

double softmax_loss(const Row<double>& row, double lse) {
  if (!row.target) return lse - row.z[row.label];
  double total = 0.0;
  for (int64_t c = 0; c < row.n; ++c) {
    if (row.target[c] != 0) total += row.target[c] * (lse - row.z[c]);
  }
  return total;
}

double sigmoid_loss(const Row<double>& row) {
  double total = 0.0;
  for (int64_t c = 0; c < row.n; ++c) {
    const double z = row.z[c];
    const double zt = row.target[c] != 0 ? z * row.target[c] : 0.0;
    total += (z > 0 ? z : 0.0) - zt + std::log1p(std::exp(-std::fabs(z)));
  }
  return total;
}

template <Loss kLoss>
void row_grad(const Row<double>& row, double g, double* dz, double* dt) {
  if (kLoss == Loss::kSoftmax) {
    const double lse = log_sum_exp(row.z, row.n);
    double total = 1.0;
    if (row.target) {
      total = 0.0;
      for (int64_t c = 0; c < row.n; ++c) total += row.target[c];
    }
    for (int64_t c = 0; c < row.n; ++c) {
      const double p = g * total * std::exp(row.z[c] - lse);
      dz[c] = row.target ? p - g * row.target[c] : p;
      if (row.target) dt[c] = g * (lse - row.z[c]);
    }
    if (!row.target) dz[row.label] -= g;
    return;
  }
  for (int64_t c = 0; c < row.n; ++c) {
    const double z = row.z[c];
    dz[c] = g * (1.0 / (1.0 + std::exp(-z)) - row.target[c]);
    dt[c] = -g * z;
  }
}

/* ---------------------------- rows, both builds ----------------------------- */

/*! \brief What a range of rows needs: operands, gradients (backward) and output. */
template <typename T>
struct Batch {
  const T* z;
  const T* target;   // (B, C), or null with `labels`
  const T* labels;   // (B,) class ids, or null
  const T* ograd;    // backward only
  T* out;            // forward: (B,) losses
  T* dz;             // backward: (B, C)
  T* dt;             // backward: (B, C) or (B,) zeros for class targets
  int64_t n;
};

template <typename T>
GS_INLINE Row<T> row_of(const Batch<T>& b, int64_t r) {
  return Row<T>{b.z + r * b.n, b.target ? b.target + r * b.n : nullptr,
                b.labels ? static_cast<int64_t>(b.labels[r]) : 0, b.n};
}

template <Loss kLoss, bool kBackward, typename T>
GS_INLINE void rows(const Batch<T>& b, int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const Row<T> row = row_of(b, r);
    if (kBackward) {
      row_grad<kLoss>(row, b.ograd[r], b.dz + r * b.n, b.target ? b.dt + r * b.n : nullptr);
      if (!b.target) b.dt[r] = T(0);
    } else if (kLoss == Loss::kSoftmax) {
      b.out[r] = static_cast<T>(softmax_loss(row, log_sum_exp(row.z, row.n)));
    } else {
      b.out[r] = static_cast<T>(sigmoid_loss(row));
    }
  }
}

template <Loss kLoss, bool kBackward>
void rows_baseline(const Batch<float>& b, int64_t begin, int64_t end) {
  rows<kLoss, kBackward>(b, begin, end);
}

#if GS_HOST_AVX2
// `flatten` inlines the helpers into this AVX2 function; no FMA, so its
// arithmetic is the baseline's, operation for operation.
template <Loss kLoss, bool kBackward>
__attribute__((target("avx2"), flatten)) void rows_avx2(const Batch<float>& b, int64_t begin,
                                                      int64_t end) {
  rows<kLoss, kBackward>(b, begin, end);
}
#endif

template <Loss kLoss, bool kBackward>
void run_rows(const Batch<float>& b, int64_t begin, int64_t end) {
#if GS_HOST_AVX2
  if (ops::host_simd_path() == 1) {
    rows_avx2<kLoss, kBackward>(b, begin, end);
    return;
  }
#endif
  rows_baseline<kLoss, kBackward>(b, begin, end);
}

template <Loss kLoss, bool kBackward>
void run_rows(const Batch<double>& b, int64_t begin, int64_t end) {
  rows<kLoss, kBackward>(b, begin, end);
}

template <Loss kLoss, bool kBackward, typename T>
void run_batch(const Batch<T>& b, int64_t batch) {
  // A row is a few passes of exp over C values: ~8 element operations each.
  const int team = team_size(batch * b.n * 8, batch);
  parallel_blocks(batch, team, [&](int64_t begin, int64_t end) {
    run_rows<kLoss, kBackward>(b, begin, end);
  });
}

/* ------------------------------ the operator -------------------------------- */

bool parse_loss(const ops::Attrs& attrs, Loss* loss) {
  *loss = Loss::kSoftmax;
  auto it = attrs.find("loss");
  if (it == attrs.end() || it->second == "softmax") return true;
  if (it->second == "sigmoid") {
    *loss = Loss::kSigmoid;
    return true;
  }
  GS_ERROR_MSG << kOpName << ": attribute loss must be 'softmax' or 'sigmoid', got '"
               << it->second << "'";
  return false;
}

/*! \brief Class targets must be integers in [0, C): the first that is not, named. */
template <typename T>
bool check_labels(const T* labels, int64_t batch, int64_t n) {
  for (int64_t r = 0; r < batch; ++r) {
    const T y = labels[r];
    if (!(y >= 0 && y < static_cast<T>(n)) || y != std::floor(y)) {
      GS_ERROR_MSG << kOpName << ": the class of row " << r << " is " << y
                   << ", not an integer in [0, " << n << ") (the logits' columns)";
      return false;
    }
  }
  return true;
}

/*!
 * \brief Forward (kBackward false: inputs logits, target; output the losses) or
 *        backward (inputs ograd, logits, target, loss; outputs d logits, d target).
 */
template <bool kBackward, typename T>
MXReturnValue compute_typed(Loss loss, std::vector<MXTensor>* inputs,
                            std::vector<MXTensor>* outputs) {
  const int first = kBackward ? 1 : 0;  // backward inputs start with the ograd
  MXTensor& logits = (*inputs)[first];
  MXTensor& target = (*inputs)[first + 1];
  const int64_t batch = logits.shape[0], n = logits.shape[1];
  // InferShape cannot refuse 0 classes: MXNet 1.9.1 hands the extension API a 0
  // dimension as "unknown" (UINT_MAX). The arrays here have their real shapes.
  if (n < 1) {
    GS_ERROR_MSG << kOpName << ": logits must be (batch, classes) with classes >= 1, got shape ("
                 << batch << ", " << n << ")";
    return MX_FAIL;
  }
  if (batch == 0) return MX_SUCCESS;  // nothing to compute (nor to read: empty arrays)
  const bool classes = target.shape.size() == 1;
  Batch<T> b{logits.data<T>(), classes ? nullptr : target.data<T>(),
             classes ? target.data<T>() : nullptr, nullptr, nullptr, nullptr, nullptr, n};
  if (kBackward) {
    b.ograd = (*inputs)[0].data<T>();
    b.dz = (*outputs)[0].data<T>();
    b.dt = (*outputs)[1].data<T>();
  } else {
    b.out = (*outputs)[0].data<T>();
  }
  if (classes && !check_labels(b.labels, batch, n)) return MX_FAIL;
  if (loss == Loss::kSoftmax) {
    run_batch<Loss::kSoftmax, kBackward>(b, batch);
  } else {
    run_batch<Loss::kSigmoid, kBackward>(b, batch);
  }
  return MX_SUCCESS;
}

/*! \brief The forward (kBackward false) or backward operator on the CPU. */
template <bool kBackward>
MXReturnValue compute_cpu(const ops::Attrs& attrs, std::vector<MXTensor>* inputs,
                          std::vector<MXTensor>* outputs, const OpResource& res) {
  Loss loss;
  if (!parse_loss(attrs, &loss)) return MX_FAIL;
  const int logits = kBackward ? 1 : 0;  // backward inputs start with the ograd
  return ops::with_float_type((*inputs)[logits].dtype, [&](auto zero) {
    return compute_typed<kBackward, decltype(zero)>(loss, inputs, outputs);
  });
}

MXReturnValue ParseAttrs(const ops::Attrs& attrs, int* num_in, int* num_out) {
  Loss loss;
  if (!parse_loss(attrs, &loss)) return MX_FAIL;
  *num_in = 2;
  *num_out = 1;
  return MX_SUCCESS;
}

MXReturnValue InferType(const ops::Attrs& attrs, std::vector<int>* in_types,
                        std::vector<int>* out_types) {
  const int logits = (*in_types)[0], target = (*in_types)[1];
  if (logits != kFloat32 && logits != kFloat64) {
    GS_ERROR_MSG << kOpName << ": logits must be float32 or float64 (dtype " << dtype_name(logits)
                 << ")";
    return MX_FAIL;
  }
  if (target != logits) {
    GS_ERROR_MSG << kOpName << ": target (dtype " << dtype_name(target)
                 << ") must have the logits' "
                 << "dtype (dtype " << dtype_name(logits) << ")";
    return MX_FAIL;
  }
  (*out_types)[0] = logits;
  return MX_SUCCESS;
}

MXReturnValue InferShape(const ops::Attrs& attrs,
                         std::vector<std::vector<unsigned int>>* in_shapes,
                         std::vector<std::vector<unsigned int>>* out_shapes) {
  Loss loss;
  if (!parse_loss(attrs, &loss)) return MX_FAIL;
  const auto& logits = (*in_shapes)[0];
  const auto& target = (*in_shapes)[1];
  if (logits.size() != 2 || logits[1] == 0) {
    GS_ERROR_MSG << kOpName << ": logits must be (batch, classes) with classes >= 1, got shape "
                 << ops::shape_str(logits);
    return MX_FAIL;
  }
  const bool dense = target == logits;
  const bool classes = target.size() == 1 && target[0] == logits[0];
  if (!dense && !(classes && loss == Loss::kSoftmax)) {
    GS_ERROR_MSG << kOpName << ": target must have the logits' shape " << ops::shape_str(logits)
                 << (loss == Loss::kSoftmax ? " or be (" + std::to_string(logits[0]) +
                                                  ",) class ids"
                                            : std::string())
                 << ", got " << ops::shape_str(target);
    return MX_FAIL;
  }
  (*out_shapes)[0] = {logits[0]};
  return MX_SUCCESS;
}

}  // namespace
}  // namespace xent
}  // namespace gluon_sparse

namespace gxent = gluon_sparse::xent;

REGISTER_OP(gluon_sparse_cross_entropy)
    .setForward(gxent::compute_cpu<false>, "cpu")
    .setBackward(gxent::compute_cpu<true>, "cpu")
    .setParseAttrs(gxent::ParseAttrs)
    .setInferType(gxent::InferType)
    .setInferShape(gxent::InferShape);
