/*!
 * `gluon_sparse_topk`: merge a block of scores into a running top-k, per row.
 *
 * Exact top-k over millions of labels is computed block by block (see
 * gluon_sparse/nn/topk.py): the scores of a (rows x labels) block come from
 * MXNet's dot, and this operator folds them into the k best entries kept so
 * far, so that no (rows x all labels) matrix ever exists. Per row it keeps a
 * heap of the k best entries (worst on top); each score of the block is
 * compared with the top and replaces it only if better, so a block costs
 * O(n + r log k) for n scores and r replacements (r is small once the heap
 * holds good entries), against MXNet's topk, which sorts the whole row. The
 * O(n) part is a vectorised scan for scores at or above the worst kept one.
 *
 * Inputs:  scores     (rows, n)  float32/float64, block of scores of labels
 *                                 offset .. offset + n - 1
 *          prev_score (rows, k)  same dtype, the running top-k (any order)
 *          prev_id    (rows, k)  int64 label ids; -1 marks an empty slot
 * Output:  score      (rows, k)  the k best of prev and the block, best first
 *          id         (rows, k)  int64 their label ids (-1 if fewer than k exist)
 * Attribute `offset` (int64 >= 0, default 0): label id of the block's column 0.
 *
 * Order (the tie rule): a higher score first; equal scores by the smaller
 * label id; NaN scores after every number (then by id); empty slots last.
 * This is NumPy's `np.lexsort((ids, -scores))` order, which the tests use as
 * the reference.
 */
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "error_messages.h"
#include "mxnet/lib_api.h"
#include "omp_threads.h"

using namespace mxnet::ext;

namespace gluon_sparse {
namespace topk {

template <typename T>
struct Entry {
  T score;
  int64_t id;
};

/*! \brief True when `a` ranks before `b` (see the order in the file comment). */
template <typename T>
inline bool Better(const Entry<T>& a, const Entry<T>& b) {
  if ((a.id < 0) != (b.id < 0)) return b.id < 0;  // empty slots last
  const bool a_nan = std::isnan(a.score), b_nan = std::isnan(b.score);
  if (a_nan != b_nan) return b_nan;
  if (!a_nan && a.score != b.score) return a.score > b.score;
  return a.id < b.id;
}

/*! \brief Comparator for std heap functions: the worst entry ends on top. */
template <typename T>
struct WorstOnTop {
  bool operator()(const Entry<T>& a, const Entry<T>& b) const { return Better(a, b); }
};

template <typename T>
void MergeRow(const T* scores, int64_t n, int64_t offset, const T* prev_score,
              const int64_t* prev_id, int64_t k, T* out_score, int64_t* out_id,
              std::vector<Entry<T>>* heap) {
  heap->resize(k);
  for (int64_t j = 0; j < k; ++j) (*heap)[j] = {prev_score[j], prev_id[j]};
  WorstOnTop<T> cmp;
  std::make_heap(heap->begin(), heap->end(), cmp);
  // Once the worst kept entry is a number (not an empty slot, not NaN), a score
  // below it, or a NaN, cannot enter: skip those with one comparison, and whole
  // runs of kRun such scores with a comparison the compiler vectorises. Most
  // scores of a big block are skipped that way; the rest go through Better().
  constexpr int64_t kRun = 16;
  bool filter = false;
  T floor = T(0);
  auto refresh = [&] {
    const Entry<T>& worst = heap->front();
    filter = worst.id >= 0 && !std::isnan(worst.score);
    floor = worst.score;
  };
  refresh();
  for (int64_t c = 0; c < n; ++c) {
    if (filter) {
      while (c + kRun <= n) {
        bool any = false;
        for (int64_t j = 0; j < kRun; ++j) any |= scores[c + j] >= floor;
        if (any) break;
        c += kRun;
      }
      if (c == n) break;
      if (!(scores[c] >= floor)) continue;
    }
    const Entry<T> e{scores[c], offset + c};
    if (Better(e, heap->front())) {
      std::pop_heap(heap->begin(), heap->end(), cmp);
      heap->back() = e;
      std::push_heap(heap->begin(), heap->end(), cmp);
      refresh();
    }
  }
  std::sort(heap->begin(), heap->end(), cmp);  // best first
  for (int64_t j = 0; j < k; ++j) {
    out_score[j] = (*heap)[j].score;
    out_id[j] = (*heap)[j].id;
  }
}

template <typename T>
MXReturnValue Compute(int64_t offset, std::vector<MXTensor>* inputs,
                      std::vector<MXTensor>* outputs) {
  MXTensor& scores = (*inputs)[0];
  const int64_t rows = scores.shape[0], n = scores.shape[1], k = (*inputs)[1].shape[1];
  const T* s = scores.data<T>();
  const T* ps = (*inputs)[1].data<T>();
  const int64_t* pid = (*inputs)[2].data<int64_t>();
  // A label id beyond int64 would wrap: refuse rather than corrupt the order.
  if (offset > std::numeric_limits<int64_t>::max() - n) {
    GS_ERROR_MSG << "gluon_sparse_topk: offset " << offset << " + " << n << " columns overflows";
    return MX_FAIL;
  }
  for (int64_t i = 0; i < rows * k; ++i) {
    if (pid[i] < -1) {
      GS_ERROR_MSG << "gluon_sparse_topk: prev_id[" << i / k << ", " << i % k << "] = " << pid[i]
                   << " is not a label id (>= 0) or -1 (empty slot)";
      return MX_FAIL;
    }
  }
  T* out_s = (*outputs)[0].data<T>();
  int64_t* out_id = (*outputs)[1].data<int64_t>();
  gluon_sparse::parallel_blocks(rows, gluon_sparse::team_size(rows * n, rows),
                                [&](int64_t begin, int64_t end) {
                                  std::vector<Entry<T>> heap;
                                  for (int64_t r = begin; r < end; ++r) {
                                    MergeRow(s + r * n, n, offset, ps + r * k, pid + r * k, k,
                                             out_s + r * k, out_id + r * k, &heap);
                                  }
                                });
  return MX_SUCCESS;
}

bool ParseOffset(const std::unordered_map<std::string, std::string>& attrs, int64_t* offset) {
  *offset = 0;
  auto it = attrs.find("offset");
  if (it == attrs.end()) return true;
  try {
    size_t used = 0;
    const long long v = std::stoll(it->second, &used);
    if (used != it->second.size() || v < 0) throw std::invalid_argument("offset");
    *offset = v;
  } catch (const std::exception&) {
    GS_ERROR_MSG << "gluon_sparse_topk: attribute offset must be an integer >= 0, got '"
                 << it->second << "'";
    return false;
  }
  return true;
}

MXReturnValue compute_cpu(const std::unordered_map<std::string, std::string>& attrs,
                         std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                         const OpResource& res) {
  int64_t offset;
  if (!ParseOffset(attrs, &offset)) return MX_FAIL;
  if ((*inputs)[0].dtype == kFloat64) return Compute<double>(offset, inputs, outputs);
  return Compute<float>(offset, inputs, outputs);
}

MXReturnValue ParseAttrs(const std::unordered_map<std::string, std::string>& attrs, int* num_in,
                         int* num_out) {
  int64_t offset;
  if (!ParseOffset(attrs, &offset)) return MX_FAIL;
  *num_in = 3;
  *num_out = 2;
  return MX_SUCCESS;
}

MXReturnValue InferType(const std::unordered_map<std::string, std::string>& attrs,
                        std::vector<int>* in_types, std::vector<int>* out_types) {
  const int scores = (*in_types)[0], prev = (*in_types)[1], ids = (*in_types)[2];
  if (scores != kFloat32 && scores != kFloat64) {
    GS_ERROR_MSG << "gluon_sparse_topk: scores must be float32 or float64 (dtype "
                 << dtype_name(scores)
                 << ")";
    return MX_FAIL;
  }
  if (prev != scores) {
    GS_ERROR_MSG << "gluon_sparse_topk: prev_score (dtype " << dtype_name(prev)
                 << ") must have the "
                 << "dtype of scores (dtype " << dtype_name(scores) << ")";
    return MX_FAIL;
  }
  if (ids != kInt64) {
    GS_ERROR_MSG << "gluon_sparse_topk: prev_id must be int64 (dtype " << dtype_name(ids) << ")";
    return MX_FAIL;
  }
  (*out_types)[0] = scores;
  (*out_types)[1] = kInt64;
  return MX_SUCCESS;
}

MXReturnValue InferShape(const std::unordered_map<std::string, std::string>& attrs,
                         std::vector<std::vector<unsigned int>>* in_shapes,
                         std::vector<std::vector<unsigned int>>* out_shapes) {
  const auto& scores = (*in_shapes)[0];
  const auto& prev = (*in_shapes)[1];
  const auto& ids = (*in_shapes)[2];
  if (scores.size() != 2 || prev.size() != 2 || ids.size() != 2) {
    GS_ERROR_MSG << "gluon_sparse_topk: scores (rows, n), prev_score and prev_id (rows, k) must "
                 << "be 2-D";
    return MX_FAIL;
  }
  if (prev != ids || prev[0] != scores[0] || prev[1] == 0) {
    GS_ERROR_MSG << "gluon_sparse_topk: prev_score (" << prev[0] << ", " << prev[1]
                 << ") and prev_id (" << ids[0] << ", " << ids[1] << ") must both be (rows, k) "
                 << "with k >= 1 and rows = " << scores[0] << " (the rows of scores)";
    return MX_FAIL;
  }
  (*out_shapes)[0] = prev;
  (*out_shapes)[1] = prev;
  return MX_SUCCESS;
}

}  // namespace topk
}  // namespace gluon_sparse

REGISTER_OP(gluon_sparse_topk)
    .setForward(gluon_sparse::topk::compute_cpu, "cpu")
    .setParseAttrs(gluon_sparse::topk::ParseAttrs)
    .setInferType(gluon_sparse::topk::InferType)
    .setInferShape(gluon_sparse::topk::InferShape);
