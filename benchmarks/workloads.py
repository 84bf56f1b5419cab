"""The workloads the benchmarks share.

The *reference workload* of the project: a 1000 x 1,000,000 CSR matrix with
density 1e-5 (10 non-zeros a row), label = row sum above the mean, batches of
10 rows, and a FullyConnectedSparse(128)-sigmoid-Dense(8)-sigmoid-Dense(1)
network trained with sigmoid binary cross-entropy.
"""
import mxnet as mx
import numpy as np
import scipy.sparse as sp
from mxnet import autograd, gluon

from gluon_sparse.nn import FullyConnectedSparse


def random_csr(rows, features, nnz_per_row, seed=0, dtype="float32"):
    """A CSR matrix with exactly ``nnz_per_row`` distinct random columns per row.

    Built row by row so that memory stays O(nnz) even for 10^9 cells
    (scipy.sparse.random would permute the whole index space).
    """
    rng = np.random.default_rng(seed)
    indices = np.empty(rows * nnz_per_row, dtype=np.int64)
    for row in range(rows):
        cols = rng.choice(features, size=nnz_per_row, replace=False)
        indices[row * nnz_per_row:(row + 1) * nnz_per_row] = np.sort(cols)
    data = rng.random(rows * nnz_per_row, dtype=np.float64).astype(dtype)
    indptr = np.arange(0, rows * nnz_per_row + 1, nnz_per_row, dtype=np.int64)
    return sp.csr_matrix((data, indices, indptr), shape=(rows, features))


def reference_data(rows=1000, features=1_000_000, density=1e-5, seed=0):
    """The reference dataset as (scipy CSR, float32 labels)."""
    nnz_per_row = max(1, int(round(features * density)))
    X = random_csr(rows, features, nnz_per_row, seed=seed)
    row_sums = np.asarray(X.sum(axis=1)).ravel()
    y = (row_sums > row_sums.mean()).astype("float32")
    return X, y


def to_mx_csr(matrix, ctx=None):
    return mx.nd.sparse.csr_matrix((matrix.data, matrix.indices, matrix.indptr),
                                   shape=matrix.shape, dtype=matrix.dtype, ctx=ctx or mx.cpu())


def batches(X, y, batch_size):
    """Pre-sliced (CSRNDArray, label) batches, so slicing is not part of the timings."""
    out = []
    for start in range(0, X.shape[0], batch_size):
        stop = min(start + batch_size, X.shape[0])
        out.append((to_mx_csr(X[start:stop]), mx.nd.array(y[start:stop])))
    return out


def reference_model(first_layer="sparse", grad_stype="row_sparse", in_units=1_000_000, hidden=128):
    """FullyConnectedSparse(128)-sigmoid-Dense(8)-sigmoid-Dense(1), or nn.Dense first."""
    net = gluon.nn.HybridSequential()
    if first_layer == "sparse":
        net.add(FullyConnectedSparse(hidden, activation="sigmoid", in_units=in_units,
                                     weight_grad_stype=grad_stype))
    else:
        net.add(gluon.nn.Dense(hidden, activation="sigmoid", in_units=in_units))
    net.add(gluon.nn.Dense(8, activation="sigmoid", in_units=hidden), gluon.nn.Dense(1, in_units=8))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    return net


def train_epoch(net, trainer, data, densify=False):
    """One pass over ``data``; returns the mean loss. Waits for all work to finish."""
    loss_fn = gluon.loss.SigmoidBinaryCrossEntropyLoss()
    total = 0.0
    for x, label in data:
        if densify:
            x = x.tostype("default")
        with autograd.record():
            loss = loss_fn(net(x), label)
        loss.backward()
        trainer.step(x.shape[0])
        total += loss.sum()
    mx.nd.waitall()
    return total.asscalar() / sum(x.shape[0] for x, _ in data)


# ---------------------------------------------------------------- peer workloads
# The shapes of benchmarks/bench_peers.py, generated as plain NumPy arrays so
# that every framework trains on the same bytes.

def _distinct_per_row(draw, rows, nnz, rng):
    """``rows`` x ``nnz`` ids, distinct within each row, sorted, from ``draw(rng, shape)``.

    Draws twice the ids needed and keeps the first ``nnz`` distinct ones of each
    row in draw order (a row with fewer distinct draws is drawn again).
    """
    out = np.empty((rows, nnz), dtype=np.int64)
    todo = np.arange(rows)
    while todo.size:
        ids = draw(rng, (todo.size, 2 * nnz))
        order = np.argsort(ids, axis=1, kind="stable")
        ordered = np.take_along_axis(ids, order, axis=1)
        first = np.ones_like(ids, dtype=bool)
        first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
        is_first = np.zeros_like(first)
        np.put_along_axis(is_first, order, first, axis=1)
        keep = is_first & (np.cumsum(is_first, axis=1) <= nnz)
        complete = keep.sum(axis=1) == nnz
        out[todo[complete]] = ids[complete][keep[complete]].reshape(-1, nnz)
        todo = todo[~complete]
    out.sort(axis=1)
    return out


def zipf_sampler(features, exponent, seed):
    """A draw(rng, shape) of feature ids whose popularity follows Zipf(exponent).

    Rank k (1-based) has probability proportional to k^-exponent over
    ``features`` ranks; ranks map to feature ids through a fixed random
    permutation, so hot features are spread over the weight's rows.
    """
    cdf = np.cumsum(np.arange(1, features + 1, dtype=np.float64) ** -exponent)
    cdf /= cdf[-1]
    ids_of_rank = np.random.default_rng(seed + 1).permutation(features)

    def draw(rng, shape):
        ranks = np.minimum(np.searchsorted(cdf, rng.random(shape)), features - 1)
        return ids_of_rank[ranks]
    return draw


def peer_batches(workload, features, count, seed=0):
    """``count`` batches ``(indptr, ids, values, labels)`` of a peer workload, as NumPy arrays.

    ``workload`` is ``"seed"`` (10 rows x 10 uniform ids, values in [0, 1)) or
    ``"ctr"`` (512 rows x 40 Zipf(1.1) ids, values 1). Labels come from a
    planted sparse logistic model (one N(0, 1) weight per feature), so that
    the loss can fall. Deterministic in ``seed``: every process, whatever
    framework it runs, regenerates the same bytes.
    """
    if workload == "seed":
        rows, nnz = 10, 10
        draw = lambda rng, shape: rng.integers(0, features, size=shape)  # noqa: E731
    elif workload == "ctr":
        rows, nnz = 512, 40
        draw = zipf_sampler(features, 1.1, seed)
    else:
        raise ValueError("unknown workload %r (seed or ctr)" % (workload,))
    rng = np.random.default_rng(seed)
    planted = rng.standard_normal(features, dtype=np.float32)
    indptr = np.arange(0, rows * nnz + 1, nnz, dtype=np.int64)
    out = []
    for _ in range(count):
        ids = _distinct_per_row(draw, rows, nnz, rng)
        if workload == "seed":
            values = rng.random((rows, nnz), dtype=np.float32)
        else:
            values = np.ones((rows, nnz), dtype=np.float32)
        margin = (planted[ids] * values).sum(axis=1) / np.sqrt(nnz)
        labels = (rng.random(rows) < 1 / (1 + np.exp(-margin))).astype(np.float32)
        out.append((indptr, ids.ravel(), values.ravel(), labels))
    return out
