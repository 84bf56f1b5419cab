"""Rows read for a fitted model, fitted to its input width.

A model's width is fixed when it is trained. A file it predicts on may hold
features the training never saw (the new words of a text test set), whose
indices lie beyond that width. As LIBLINEAR's ``predict`` does, their values
are dropped: the model has no weights for them. One warning a file says how
many values, in how many rows, and the largest such index.

The file is read at its own width (``num_features=None``) and then fitted
here: a file within the width keeps its arrays (the matrix is only given the
model's shape); only one with indices beyond it is copied, without them.
"""
import logging

import numpy as np
import scipy.sparse as sp

from .libsvm import rows_per_file

__all__ = ["to_model_width"]

logger = logging.getLogger("gluon_sparse.data")  # as the package: its modules are private


def to_model_width(X, num_features, paths, zero_based):
    """``X`` with ``num_features`` columns, the values of columns beyond them dropped.

    Parameters
    ----------
    X : scipy.sparse.csr_matrix
        Rows read from ``paths`` at their own width (``num_features=None``).
    num_features : int
        The model's input width.
    paths : list of str
        The files ``X`` was read from, in order: each one with values dropped is
        named in a warning of its own.
    zero_based : bool
        The index base the files were read with: indices are named as the files
        write them.

    Returns
    -------
    scipy.sparse.csr_matrix
        ``X``'s arrays under the shape ``(n_rows, num_features)`` where no index
        is beyond the width; else new arrays without those values.
    """
    if X.shape[1] == num_features:
        return X
    if X.shape[1] < num_features or not X.nnz or X.indices.max() < num_features:
        # Within the width (an XC header may declare more columns than are used).
        return sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], num_features),
                             copy=False)
    beyond = X.indices >= num_features
    kept = ~beyond
    kept_before = np.concatenate(([0], np.cumsum(kept)))
    indptr = kept_before[X.indptr].astype(X.indptr.dtype, copy=False)
    _warn(X, beyond, np.diff(X.indptr) - np.diff(indptr), num_features, paths, zero_based)
    result = sp.csr_matrix((X.data[kept], X.indices[kept], indptr),
                           shape=(X.shape[0], num_features), copy=False)
    result.has_sorted_indices = X.has_sorted_indices
    return result


def _warn(X, beyond, dropped_per_row, num_features, paths, zero_based):
    """One warning for each file with values beyond the width."""
    shift = 0 if zero_based else 1
    counts = rows_per_file(paths) if len(paths) > 1 else [X.shape[0]]
    first_row = 0
    for path, rows in zip(paths, counts):
        entries = slice(X.indptr[first_row], X.indptr[first_row + rows])
        values = int(np.count_nonzero(beyond[entries]))
        if values:
            logger.warning(
                "%s: %d values in %d of %d rows have feature indices beyond the model's %d "
                "features (%s-based indices %d..%d; the largest here is %d): they are ignored, "
                "as features the training never saw", path, values,
                np.count_nonzero(dropped_per_row[first_row:first_row + rows]), rows,
                num_features, "zero" if zero_based else "one", shift,
                num_features - 1 + shift, X.indices[entries][beyond[entries]].max() + shift)
        first_row += rows
