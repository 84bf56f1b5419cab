"""gluon_sparse_topk and top_k_scores against a NumPy lexsort reference, ties,
NaN and empty slots included, over many label and row chunks."""
import mxnet as mx
import numpy as np
import pytest

from gluon_sparse.nn import top_k_scores
from gluon_sparse.nn.topk import merge_top_k


def _reference(scores, k):
    """ids and scores of the k best per row: score descending, ties to the smaller id, NaN last."""
    ids = np.empty((scores.shape[0], k), dtype=np.int64)
    for r, row in enumerate(scores):
        nan = np.isnan(row)
        # lexsort: last key primary. NaN after numbers, then -score, then id.
        order = np.lexsort((np.arange(row.size), np.where(nan, 0, -row), nan))
        ids[r] = order[:k]
    return ids, np.take_along_axis(scores, ids, axis=1)


def _merge_in_chunks(scores, k, chunk):
    rows = scores.shape[0]
    best = mx.nd.full((rows, k), -np.inf, dtype=scores.dtype)
    best_id = mx.nd.full((rows, k), -1, dtype=np.int64)
    for c0 in range(0, scores.shape[1], chunk):
        block = mx.nd.array(scores[:, c0:c0 + chunk], dtype=scores.dtype)
        best, best_id = merge_top_k(block, best, best_id, offset=c0)
    return best_id.asnumpy(), best.asnumpy()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("k, chunk", [(1, 7), (5, 1), (5, 13), (20, 64), (64, 50)])
def test_merge_matches_lexsort_with_ties(dtype, k, chunk):
    rng = np.random.default_rng(k * 100 + chunk)
    # Few distinct values: most comparisons are ties, decided by the label id.
    scores = rng.integers(-3, 4, size=(37, 200)).astype(dtype)
    scores[3, 50:60] = np.nan
    scores[4, :] = 1.0
    ids, vals = _merge_in_chunks(scores, k, chunk)
    ref_ids, ref_vals = _reference(scores, k)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_array_equal(vals, ref_vals)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("k, chunk", [(1, 1000), (5, 333), (5, 17), (32, 160)])
def test_merge_skips_low_scores_exactly(dtype, k, chunk):
    """The scan that skips scores below the worst kept one (runs of 16 at a time) must
    let in every score that belongs: rare high scores at every offset within and across
    runs, ties with the worst kept score, -inf, +inf and NaN, and blocks given out of
    label order (a later block's labels smaller than those kept)."""
    rng = np.random.default_rng(k * 1000 + chunk)
    scores = rng.standard_normal((23, 1000)).astype(dtype) - 10.0
    for r in range(scores.shape[0]):  # a few winners at random positions, ends included
        hits = np.concatenate([rng.choice(1000, 6, replace=False), [0, 999, 15, 16, 17]])
        scores[r, hits] = rng.integers(0, 3, hits.size)  # 0, 1, 2: ties among winners
    scores[1, :] = -np.inf
    scores[1, 500] = 0.0
    scores[2, 100:900] = np.nan
    scores[3, 40] = np.inf
    scores[5, :] = 2.0  # every label ties: the smallest ids win
    ids, vals = _merge_in_chunks(scores, k, chunk)
    ref_ids, ref_vals = _reference(scores, k)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_array_equal(vals, ref_vals)
    # Blocks in reverse label order: kept entries then have larger ids than the block's.
    best = mx.nd.full((23, k), -np.inf, dtype=dtype)
    best_id = mx.nd.full((23, k), -1, dtype=np.int64)
    for c0 in reversed(range(0, 1000, chunk)):
        block = mx.nd.array(scores[:, c0:c0 + chunk], dtype=dtype)
        best, best_id = merge_top_k(block, best, best_id, offset=c0)
    np.testing.assert_array_equal(best_id.asnumpy(), ref_ids)


def test_merge_fills_empty_slots_when_fewer_than_k_labels():
    scores = np.array([[0.5, np.nan, 2.0]], dtype=np.float32)
    ids, vals = _merge_in_chunks(scores, 5, 3)
    np.testing.assert_array_equal(ids, [[2, 0, 1, -1, -1]])
    assert vals[0, 0] == 2.0 and vals[0, 1] == 0.5 and np.isnan(vals[0, 2])


def _run_merge(*args, **kwargs):
    # Errors of the compute function surface when the result is read.
    return [x.asnumpy() for x in merge_top_k(*args, **kwargs)]


def test_merge_rejects_bad_input():
    scores = mx.nd.zeros((2, 4))
    with pytest.raises(mx.base.MXNetError, match="prev_id.*not a label id"):
        _run_merge(scores, mx.nd.zeros((2, 3)), mx.nd.full((2, 3), -5, dtype=np.int64))
    with pytest.raises(mx.base.MXNetError, match="rows = 2"):
        merge_top_k(scores, mx.nd.zeros((3, 3)), mx.nd.zeros((3, 3), dtype=np.int64))
    with pytest.raises(mx.base.MXNetError, match="prev_id must be int64"):
        merge_top_k(scores, mx.nd.zeros((2, 3)), mx.nd.zeros((2, 3), dtype=np.int32))
    with pytest.raises(mx.base.MXNetError, match="offset must be an integer"):
        _run_merge(scores, mx.nd.zeros((2, 3)), mx.nd.zeros((2, 3), dtype=np.int64), offset=-1)
    # k = 0: MXNet hands the operator's shape check a 0 as "unknown"; the result had
    # 2^32 - 1 columns (and a 51 GB allocation failed when computed).
    with pytest.raises(ValueError, match=r"prev_score has an empty dimension \(shape \(2, 0\)\)"):
        merge_top_k(scores, mx.nd.array(np.zeros((2, 0))),  # nd.zeros((2, 0)) fails itself
                    mx.nd.array(np.zeros((2, 0)), dtype=np.int64))


@pytest.mark.parametrize("row_chunk, label_chunk", [(1, 1000), (7, 33), (100, 100000)])
def test_top_k_scores_exact_over_all_labels(row_chunk, label_chunk):
    rng = np.random.default_rng(0)
    # Integer-valued operands: every dot product is exact in float32, so ties are real.
    h = rng.integers(-2, 3, size=(23, 8)).astype(np.float32)
    w = rng.integers(-2, 3, size=(1000, 8)).astype(np.float32)
    b = rng.integers(-2, 3, size=1000).astype(np.float32)
    ids, vals = top_k_scores(mx.nd.array(h), mx.nd.array(w), mx.nd.array(b), 10,
                             row_chunk=row_chunk, label_chunk=label_chunk)
    ref_ids, ref_vals = _reference(h @ w.T + b, 10)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_array_equal(vals, ref_vals)


def test_top_k_scores_random_float_without_bias():
    rng = np.random.default_rng(1)
    h = rng.standard_normal((50, 16))
    w = rng.standard_normal((3000, 16))
    ids, vals = top_k_scores(mx.nd.array(h, dtype="float64"), mx.nd.array(w, dtype="float64"),
                             None, 5, row_chunk=16, label_chunk=700)
    ref_ids, ref_vals = _reference(h @ w.T, 5)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(vals, ref_vals, rtol=1e-12)


def test_top_k_scores_argument_errors():
    h, w = mx.nd.zeros((2, 3)), mx.nd.zeros((10, 3))
    with pytest.raises(ValueError, match=r"k must be an int in \[1, 10\]"):
        top_k_scores(h, w, None, 11)
    with pytest.raises(ValueError, match="shapes"):
        top_k_scores(mx.nd.zeros((2, 4)), w, None, 1)
    with pytest.raises(ValueError, match="bias must have shape"):
        top_k_scores(h, w, mx.nd.zeros(9), 1)
    with pytest.raises(ValueError, match="label_chunk"):
        top_k_scores(h, w, None, 1, label_chunk=0)


def test_precision_and_ndcg_against_sklearn():
    import scipy.sparse as sp
    from sklearn.metrics import ndcg_score
    from gluon_sparse.nn.topk import ndcg_at_k, precision_at_k
    rng = np.random.default_rng(3)
    Y = sp.csr_matrix((rng.random((40, 30)) < 0.1).astype(np.float32))
    Y[0, 5] = 1  # at least one positive in every row for sklearn's nDCG
    Y = sp.csr_matrix(Y + sp.csr_matrix(np.eye(40, 30)))
    Y.data[:] = 1
    scores = rng.standard_normal((40, 30))
    ids = np.argsort(-scores, axis=1)[:, :5]
    dense = Y.toarray()
    for k in (1, 3, 5):
        ref_p = np.mean([dense[i, ids[i, :k]].sum() / k for i in range(40)])
        assert precision_at_k(Y, ids, k) == pytest.approx(ref_p)
        assert ndcg_at_k(Y, ids, k) == pytest.approx(ndcg_score(dense, scores, k=k))
    with pytest.raises(ValueError, match="at least 5 predictions"):
        precision_at_k(Y, ids[:, :3], 5)
    # Stored zeros are not positives, in the hits nor in the ideal DCG: zeros stored
    # at each row's two best predictions where the row has no label.
    indptr, indices, data = [0], [], []
    for i in range(40):
        row = Y.indices[Y.indptr[i]:Y.indptr[i + 1]].tolist()
        extra = [c for c in ids[i, :2] if dense[i, c] == 0]
        indices += row + extra
        data += [1.0] * len(row) + [0.0] * len(extra)
        indptr.append(len(indices))
    with_zeros = sp.csr_matrix((data, indices, indptr), shape=Y.shape)
    assert with_zeros.nnz > Y.nnz
    for k in (1, 3, 5):
        assert ndcg_at_k(with_zeros, ids, k) == ndcg_at_k(Y, ids, k)
        assert precision_at_k(with_zeros, ids, k) == precision_at_k(Y, ids, k)


def test_mixed_dtypes_are_named():
    with pytest.raises(TypeError, match="one dtype, got float64, float32"):
        top_k_scores(mx.nd.ones((2, 3), dtype="float64"), mx.nd.ones((5, 3)), None, 2)


@pytest.mark.parametrize("k", [0, -1, True, 2.0])
def test_metrics_refuse_a_k_that_is_not_a_positive_int(k):
    import scipy.sparse as sp
    from gluon_sparse.nn.topk import ndcg_at_k, precision_at_k
    Y = sp.csr_matrix(np.array([[0, 1, 0], [1, 0, 0]], dtype=np.float32))
    ids = np.array([[1, 0, 2], [0, 1, 2]])
    for metric in (precision_at_k, ndcg_at_k):
        with pytest.raises(ValueError, match="needs an int k >= 1"):
            metric(Y, ids, k)


def test_metrics_refuse_an_indicator_value_other_than_0_and_1():
    import scipy.sparse as sp
    from gluon_sparse.nn.topk import precision_at_k
    Y = sp.csr_matrix(np.array([[0, -1, 0], [1, 0, 0]], dtype=np.float32))
    with pytest.raises(ValueError, match="row 0 has -1.0 for label 1"):
        precision_at_k(Y, np.array([[1], [0]]), 1)


def test_float16_is_refused_by_name():
    from gluon_sparse.nn import FactorizationMachine, FullyConnectedSparse
    with pytest.raises(TypeError, match="float32 or float64"):
        FullyConnectedSparse(3, dtype="float16")
    with pytest.raises(TypeError, match="float32 or float64"):
        FactorizationMachine(2, dtype="float16")
    with pytest.raises(TypeError, match="float32 or float64"):
        top_k_scores(mx.nd.ones((2, 4), dtype="float16"), mx.nd.ones((6, 4), dtype="float16"),
                     None, 2)


def test_ranking_metrics_take_mxnet_arrays_and_refuse_rankings_that_count_a_label_twice():
    import scipy.sparse as sp
    from gluon_sparse.nn.topk import ndcg_at_k, precision_at_k
    Y = sp.csr_matrix(np.array([[1, 0, 0, 1], [0, 1, 0, 0]], dtype=np.float32))
    ids = np.array([[3, 1, 2], [0, 2, 1]])
    want = (1 / 3 + 1 / 3) / 2
    # A MultiLabelLoader's labels are a CSRNDArray: scipy alone iterated one without end.
    mx_Y = mx.nd.sparse.csr_matrix((Y.data, Y.indices, Y.indptr), shape=Y.shape)
    for labels in (Y, Y.toarray(), mx_Y):
        for ranked in (ids, mx.nd.array(ids, dtype=np.int64)):
            assert precision_at_k(labels, ranked, 3) == pytest.approx(want)
    assert ndcg_at_k(mx_Y, ids, 3) == pytest.approx(ndcg_at_k(Y, ids, 3))
    # Each label once per ranking (a repeated hit gave P@3 = 1 and nDCG@3 = 2.13).
    for metric in (precision_at_k, ndcg_at_k):
        with pytest.raises(ValueError, match="more than once"):
            metric(Y, np.array([[0, 0, 0], [1, 2, 3]]), 3)
        with pytest.raises(ValueError, match="negative label id"):
            metric(Y, np.array([[0, -7, 1], [1, 2, 3]]), 3)
        with pytest.raises(ValueError, match="integer label ids"):
            metric(Y, np.array([[0.5, 1.0, 2.0], [1, 2, 3]]), 3)
    # An id past the indicator's columns (a test set narrower than the model): a miss.
    assert precision_at_k(Y, np.array([[3, 9, 0], [1, 9, 8]]), 3) == pytest.approx((2 / 3 + 1 / 3) / 2)
    # Whole-number floats are ids.
    assert precision_at_k(Y, ids.astype(np.float64), 3) == pytest.approx(want)
