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
