"""Exact top-k labels of ``h W^T + b`` over a huge label set, in bounded memory.

The scores of a block of ``row_chunk`` rows and ``label_chunk`` labels come
from MXNet's ``FullyConnected`` (oneDNN on the CPU); the operator library's ``gluon_sparse_topk``
folds each block into a running top-k per row with a k-entry heap. Memory is
one block of scores plus ``rows x k``, never ``rows x num_labels``.

Order of the result (the tie rule): higher score first, equal scores by the
smaller label id, NaN scores after all numbers; the order of NumPy's
``np.lexsort((ids, -scores))`` on the full score matrix.
"""
from numbers import Integral

import mxnet as mx
import numpy as np
import scipy.sparse as sp

from .. import _native
from .._sparse_entries import first_not_binary, row_of_entry

__all__ = ["top_k_scores", "merge_top_k", "precision_at_k", "ndcg_at_k"]


def merge_top_k(scores, prev_score, prev_id, offset=0):
    """Fold a block of scores into a running top-k (operator ``gluon_sparse_topk``).

    Parameters
    ----------
    scores : NDArray of shape (rows, n)
        Scores of labels ``offset .. offset + n - 1`` (float32 or float64).
    prev_score : NDArray of shape (rows, k)
        The running top-k scores (same dtype), any order.
    prev_id : NDArray of int64, shape (rows, k)
        Their label ids; -1 marks an empty slot.
    offset : int
        Label id of column 0 of ``scores``.

    Returns
    -------
    score, id : NDArray of shape (rows, k)
        The k best entries, best first.
    """
    _native.load_ops()
    # MXNet 1.9.1 hands an operator's shape inference a 0 dimension as "unknown": the
    # operator's own checks cannot see an empty one (the result had 2^32 - 1 columns).
    for name, array in (("scores", scores), ("prev_score", prev_score), ("prev_id", prev_id)):
        if 0 in array.shape:
            raise ValueError("merge_top_k: %s has an empty dimension (shape %s): rows, labels "
                             "and k must be at least 1" % (name, tuple(array.shape)))
    out = mx.nd.gluon_sparse_topk(scores, prev_score, prev_id, offset=int(offset))
    return out[0], out[1]


def _block_scores(h, weight, bias=None):
    """``h weight^T + bias``, shape ``(rows, labels)``, by MXNet's ``FullyConnected``.

    On the CPU that is oneDNN's kernel (float32), several times faster than
    ``dot``'s BLAS here; float64 and GPUs take MXNet's own kernels.
    """
    return mx.nd.FullyConnected(h, weight, bias, no_bias=bias is None,
                                num_hidden=weight.shape[0])


def _is_int(value):
    """An integer, not a bool (``True`` is an int to Python, not a count to a user)."""
    return isinstance(value, (Integral, np.integer)) and not isinstance(value, (bool, np.bool_))


def _check_args(h, weight, bias, k, row_chunk, label_chunk):
    if h.ndim != 2 or weight.ndim != 2 or h.shape[1] != weight.shape[1]:
        raise ValueError("top_k needs h (rows, H) and weight (num_labels, H), got shapes %s and %s"
                         % (tuple(h.shape), tuple(weight.shape)))
    dtypes = [np.dtype(a.dtype) for a in (h, weight, bias) if a is not None]
    if len(set(dtypes)) > 1:
        raise TypeError("top_k needs h, weight and bias of one dtype, got %s"
                        % ", ".join(d.name for d in dtypes))
    if dtypes[0] not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError("top_k computes in float32 or float64, got %s" % dtypes[0].name)
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError("bias must have shape (%d,), got %s" % (weight.shape[0],
                                                                 tuple(bias.shape)))
    num_labels = weight.shape[0]
    if not _is_int(k) or not 1 <= k <= num_labels:
        raise ValueError("k must be an int in [1, %d] (the number of labels), got %r"
                         % (num_labels, k))
    for name, value in (("row_chunk", row_chunk), ("label_chunk", label_chunk)):
        if not _is_int(value) or value < 1:
            raise ValueError("%s must be a positive int, got %r" % (name, value))


def top_k_scores(h, weight, bias, k, row_chunk=1024, label_chunk=16384):
    """The ``k`` best labels of each row of ``h W^T + b``, exactly.

    Parameters
    ----------
    h : NDArray of shape (rows, H)
    weight : NDArray of shape (num_labels, H)
    bias : NDArray of shape (num_labels,) or None
    k : int
        Number of labels per row, ``1 <= k <= num_labels``.
    row_chunk, label_chunk : int
        Block size; the block of scores takes ``row_chunk x label_chunk``
        values (64 MB in float32 with the defaults).

    Returns
    -------
    ids : numpy.ndarray of int64, shape (rows, k)
        Best first; ties to the smaller label id.
    scores : numpy.ndarray of shape (rows, k)
    """
    _check_args(h, weight, bias, k, row_chunk, label_chunk)
    rows, num_labels = h.shape[0], weight.shape[0]
    dtype = np.dtype(weight.dtype)
    ids_out = np.empty((rows, k), dtype=np.int64)
    scores_out = np.empty((rows, k), dtype=dtype)
    # The merge operator runs on the CPU: blocks scored on a GPU are copied over.
    cpu = mx.cpu()
    for r0 in range(0, rows, row_chunk):
        r1 = min(r0 + row_chunk, rows)
        block_h = h[r0:r1]
        best = mx.nd.full((r1 - r0, k), -np.inf, ctx=cpu, dtype=dtype)
        best_id = mx.nd.full((r1 - r0, k), -1, ctx=cpu, dtype=np.int64)
        for l0 in range(0, num_labels, label_chunk):
            l1 = min(l0 + label_chunk, num_labels)
            block = _block_scores(block_h, weight[l0:l1], None if bias is None else bias[l0:l1])
            best, best_id = merge_top_k(block.as_in_context(cpu), best, best_id, offset=l0)
        ids_out[r0:r1] = best_id.asnumpy()
        scores_out[r0:r1] = best.asnumpy()
    return ids_out, scores_out


def _hits(Y, ids, k, metric):
    """(rows, k) 0/1 matrix: whether ``ids[i, j]`` (j < k) is a positive of row i of the
    indicator ``Y``, and each row's number of positives."""
    if not _is_int(k) or k < 1:
        raise ValueError("%s@k needs an int k >= 1, got %r" % (metric, k))
    # MXNet arrays (a MultiLabelLoader's labels are a CSRNDArray) as scipy / NumPy:
    # scipy does not know them and would iterate one without end.
    if isinstance(Y, mx.nd.sparse.CSRNDArray):
        Y = Y.asscipy()
    elif isinstance(Y, mx.nd.NDArray):
        Y = Y.asnumpy()
    ids = ids.asnumpy() if isinstance(ids, mx.nd.NDArray) else np.asarray(ids)
    if ids.ndim != 2:
        raise ValueError("%s@k needs predictions of shape (rows, >= k), got shape %r"
                         % (metric, ids.shape))
    ids = ids[:, :k]
    if ids.shape[1] < k:
        raise ValueError("%s@%d needs at least %d predictions per row, got %d"
                         % (metric, k, k, ids.shape[1]))
    Y = sp.csr_matrix(Y, copy=True)
    if Y.shape[0] != ids.shape[0]:
        raise ValueError("the indicator has %d rows but the predictions %d"
                         % (Y.shape[0], ids.shape[0]))
    _check_ranked_ids(ids, metric, k)
    Y.eliminate_zeros()  # stored zeros are not positives (nor are they in the counts)
    bad = first_not_binary(Y.data)  # no zeros left: a value that is not 1
    if bad is not None:
        raise ValueError("a label indicator holds 0 and 1; row %d has %r for label %d"
                         % (row_of_entry(Y.indptr, bad), float(Y.data[bad]), Y.indices[bad]))
    Y.sum_duplicates()
    hits = np.zeros(ids.shape)
    for i in range(ids.shape[0]):
        hits[i] = np.isin(ids[i], Y.indices[Y.indptr[i]:Y.indptr[i + 1]])
    return hits, np.diff(Y.indptr)


def _check_ranked_ids(ids, metric, k):
    """Each row of ``ids`` ranks distinct label ids >= 0: a label counted twice would give
    precision above its share and nDCG above 1. (An id past the indicator's columns is a
    label no row of it holds, a miss: a test file's indicator may be narrower than the
    model's labels.)"""
    if ids.size == 0:
        return
    if ids.dtype.kind == "f":
        if not np.array_equal(ids, np.floor(ids)):
            raise ValueError("%s@%d needs integer label ids; got %r"
                             % (metric, k, ids[ids != np.floor(ids)][0]))
    elif ids.dtype.kind not in "iu":
        raise ValueError("%s@%d needs integer label ids; got an array of %s"
                         % (metric, k, ids.dtype))
    if (ids < 0).any():
        row, col = np.argwhere(ids < 0)[0]
        raise ValueError("%s@%d: row %d ranks the negative label id %r"
                         % (metric, k, row, ids[row, col]))
    ordered = np.sort(ids, axis=1)
    repeated = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
    if repeated.any():
        row = int(np.flatnonzero(repeated)[0])
        raise ValueError("%s@%d: row %d ranks a label more than once in its top %d: %r"
                         % (metric, k, row, k, ids[row].tolist()))


def precision_at_k(Y, ids, k):
    """Precision@k of ranked predictions: mean over rows of ``|top-k ∩ Y_i| / k``.

    Parameters
    ----------
    Y : scipy.sparse matrix of shape (rows, num_labels)
        The true label indicator (a NumPy array or MXNet CSRNDArray too).
    ids : numpy.ndarray of shape (rows, >= k)
        Predicted label ids, best first (as :func:`top_k_scores` returns): distinct
        integers >= 0 in each row's first k, else a ValueError. An id past ``Y``'s
        columns is a label no row holds (a miss).
    k : int

    Returns
    -------
    float
    """
    hits, _ = _hits(Y, ids, k, "precision")
    return float(hits.sum(axis=1).mean() / k)


def ndcg_at_k(Y, ids, k):
    """nDCG@k with binary relevance: ``DCG@k / IDCG@k`` averaged over rows.

    ``DCG@k = sum_{j<=k} y_j / log2(j + 1)``; the ideal DCG ranks the row's
    ``min(k, |Y_i|)`` positives first. Rows without positives count as 0.

    Parameters
    ----------
    Y : scipy.sparse matrix of shape (rows, num_labels)
        As for :func:`precision_at_k`.
    ids : numpy.ndarray of shape (rows, >= k)
        As for :func:`precision_at_k`.
    k : int

    Returns
    -------
    float
    """
    hits, counts = _hits(Y, ids, k, "nDCG")
    discount = 1.0 / np.log2(np.arange(2, k + 2))
    dcg = hits @ discount
    ideal = np.concatenate([[0.0], np.cumsum(discount)])[np.minimum(counts, k)]
    with np.errstate(invalid="ignore", divide="ignore"):
        return float(np.where(ideal > 0, dcg / ideal, 0.0).mean())
