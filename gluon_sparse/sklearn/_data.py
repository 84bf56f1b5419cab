"""Input handling shared by the estimators: what ``X`` may be, and CSR batches for MXNet.

The estimators accept scipy sparse matrices (any format), dense arrays, a
LibSVM file path and a :class:`gluon_sparse.data.LibSVMDataset`; all of them
become one float32 scipy CSR matrix here, validated by scikit-learn's
``validate_data``, before any MXNet call.
"""
import os

import mxnet as mx
import numpy as np
import scipy.sparse as sp

__all__ = ["is_libsvm_source", "load_libsvm_source", "to_csr_ndarray", "padded_csr_batches"]

# Rows per forward pass at prediction time. Every batch is padded to exactly
# this many rows (with empty rows, which cost nothing in sparse.dot) because
# the dense layers' GEMM kernels round differently for different batch
# heights: with a fixed height a sample's prediction does not depend on which
# other samples are predicted with it (scikit-learn's subset-invariance check).
PREDICT_BATCH_ROWS = 1024


def _libsvm_dataset_type():
    try:
        from ..data import LibSVMDataset
    except ImportError:
        return None
    return LibSVMDataset


def is_libsvm_source(X):
    """Whether ``X`` is a LibSVM file path (str / PathLike) or a LibSVMDataset."""
    if isinstance(X, (str, bytes, os.PathLike)):
        return True
    dataset_type = _libsvm_dataset_type()
    return dataset_type is not None and isinstance(X, dataset_type)


def load_libsvm_source(X, n_features=None):
    """Read a LibSVM path or LibSVMDataset into ``(scipy CSR float32, labels)``.

    Parameters
    ----------
    X : str, os.PathLike or LibSVMDataset
        Where the samples are.
    n_features : int, optional
        Width of the fitted model; files whose largest index is smaller are
        widened to it, larger ones are an error naming both widths.

    Returns
    -------
    X : scipy.sparse.csr_matrix of float32
    y : numpy.ndarray
    """
    dataset_type = _libsvm_dataset_type()
    if dataset_type is not None and isinstance(X, dataset_type):
        data, label = X.data, X.label
    else:
        path = os.fsdecode(X)
        if not os.path.exists(path):
            raise FileNotFoundError("LibSVM file %s does not exist" % path)
        data, label = _read_libsvm(path)
    data = sp.csr_matrix(data, dtype=np.float32)
    if n_features is not None and data.shape[1] != n_features:
        if data.shape[1] > n_features:
            raise ValueError("%s has %d features, but the model was fitted with %d features"
                             % (_describe(X), data.shape[1], n_features))
        data = sp.csr_matrix((data.data, data.indices, data.indptr),
                             shape=(data.shape[0], n_features))
    return data, np.asarray(label)


def _read_libsvm(path):
    try:
        from ..data import load_libsvm
    except ImportError:
        load_libsvm = None
    if load_libsvm is not None:
        return load_libsvm(path)
    # gluon_sparse.data is not installed alongside (partial checkout): scikit-learn's
    # reader gives the same matrix, only slower.
    from sklearn.datasets import load_svmlight_file
    return load_svmlight_file(path, dtype=np.float32)


def _describe(X):
    if isinstance(X, (str, bytes, os.PathLike)):
        return "LibSVM file %s" % os.fsdecode(X)
    return type(X).__name__


def to_csr_ndarray(X, ctx, n_rows=None):
    """Copy a scipy CSR matrix to a CSRNDArray on ``ctx``.

    Parameters
    ----------
    X : scipy.sparse.csr_matrix
        Rows to copy (float32).
    ctx : mxnet.Context
        Device of the result.
    n_rows : int, optional
        Height of the result; rows past ``X.shape[0]`` are empty.
    """
    indptr = X.indptr
    if n_rows is not None and n_rows > X.shape[0]:
        indptr = np.concatenate([indptr, np.full(n_rows - X.shape[0], indptr[-1], indptr.dtype)])
    else:
        n_rows = X.shape[0]
    return mx.nd.sparse.csr_matrix((X.data, X.indices, indptr), shape=(n_rows, X.shape[1]),
                                   ctx=ctx, dtype=np.float32)


def padded_csr_batches(X, ctx, rows=PREDICT_BATCH_ROWS):
    """Yield ``(CSRNDArray of exactly `rows` rows, number of real rows)`` covering ``X``."""
    for start in range(0, X.shape[0], rows):
        chunk = X[start:start + rows]
        yield to_csr_ndarray(chunk, ctx, n_rows=rows), chunk.shape[0]
