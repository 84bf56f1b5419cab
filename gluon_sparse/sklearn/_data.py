"""Input handling shared by the estimators: what ``X`` may be, and CSR batches for MXNet.

The estimators accept scipy sparse matrices (any format), dense arrays, a
LibSVM file path (or a list of them) and a
:class:`gluon_sparse.data.LibSVMDataset`; all of them become one float32 scipy
CSR matrix here, validated by scikit-learn's ``validate_data``, before any
MXNet call.
"""
import errno
import os
import warnings

import numpy as np
import scipy.sparse as sp

from ..data import LibSVMDataset, csr_to_ndarray, load_libsvm
from ..data.batchify import check_batch_size

__all__ = ["is_libsvm_source", "libsvm_paths", "existing_libsvm_paths", "load_libsvm_source",
           "warn_if_base_guessed", "padded_csr_batches", "batch_rows_limit", "check_training_batch"]

# Rows per forward pass at prediction time. Every batch is padded to exactly
# this many rows (with empty rows, which cost nothing in sparse.dot) because
# the dense layers' GEMM kernels round differently for different batch
# heights: with a fixed height a sample's prediction does not depend on which
# other samples are predicted with it (scikit-learn's subset-invariance check).
PREDICT_BATCH_ROWS = 1024


_PATH_TYPES = (str, bytes, os.PathLike)


def is_libsvm_source(X):
    """Whether ``X`` is a LibSVM file path (str / PathLike), a non-empty list or tuple of
    them, or a LibSVMDataset."""
    if isinstance(X, _PATH_TYPES + (LibSVMDataset,)):
        return True
    return (isinstance(X, (list, tuple)) and len(X) > 0
            and all(isinstance(item, _PATH_TYPES) for item in X))


def libsvm_paths(X):
    """The file names of a path or a list of paths (what :func:`is_libsvm_source` accepts)."""
    return [os.fsdecode(path) for path in (X if isinstance(X, (list, tuple)) else [X])]


def existing_libsvm_paths(X):
    """:func:`libsvm_paths`, each of which must exist: else a FileNotFoundError that says
    how strings are read (documents passed without a vectorizer land here)."""
    paths = libsvm_paths(X)
    for path in paths:
        if not os.path.exists(path):
            raise FileNotFoundError(
                errno.ENOENT, "No such LibSVM file (a string, or a list of strings, given as X "
                "is read as LibSVM file paths; for raw text put a vectorizer such as "
                "sklearn's TfidfVectorizer or HashingVectorizer in front of the estimator)",
                path)
    return paths


def load_libsvm_source(X, n_features=None, zero_based="auto"):
    """Read a LibSVM path or LibSVMDataset into ``(scipy CSR float32, labels, zero_based)``.

    Parameters
    ----------
    X : str, os.PathLike, list of them, or LibSVMDataset
        Where the samples are (several files are read as one, row-wise).
    n_features : int, optional
        Width of the fitted model: narrower data is widened to it, an index
        past it is an error naming the file and line.
    zero_based : bool or 'auto'
        Index base of the file. A fitted model passes the base its training
        files resolved to: 'auto' decides per file, so a zero-based training
        file without feature 0 (read as one-based) and a test file with it
        would otherwise be read with different bases, their columns silently
        shifted against each other. A LibSVMDataset read with another base is
        an error.

    Returns
    -------
    X : scipy.sparse.csr_matrix of float32
    y : numpy.ndarray
    zero_based : bool
        The base the indices were read with.
    """
    if isinstance(X, LibSVMDataset):
        data, label, resolved = X.data, X.label, X.zero_based_
        if zero_based != "auto" and resolved != zero_based:
            raise ValueError("the LibSVMDataset of %s was read with zero_based=%s, but the model "
                             "was fitted on files read with zero_based=%s: create it with "
                             "LibSVMDataset(..., zero_based=%s)"
                             % (X.paths, resolved, zero_based, zero_based))
        if n_features is not None and data.shape[1] > n_features:
            raise ValueError("the LibSVMDataset of %s has %d features, but the model was fitted "
                             "with %d features" % (X.paths, data.shape[1], n_features))
    else:
        data, label, resolved = load_libsvm(existing_libsvm_paths(X), num_features=n_features,
                                            zero_based=zero_based, return_zero_based=True)
    if n_features is not None and data.shape[1] < n_features:
        data = sp.csr_matrix((data.data, data.indices, data.indptr),
                             shape=(data.shape[0], n_features))
    return sp.csr_matrix(data, dtype=np.float32), np.asarray(label), bool(resolved)


def batch_rows_limit(n_features):
    """The most rows a CSR batch ``n_features`` wide may have in this MXNet build (it counts
    ``rows x n_features`` elements against 2^31 - 1: docs/limits.md); None without limit."""
    return check_batch_size(None, n_features)


def check_training_batch(batch_size, n_features, owner=None, flag="batch_size"):
    """Raise a ValueError, before any step, for training batches MXNet cannot take.

    ``owner`` (an estimator) starts the message; ``flag`` names the setting
    (``'--batch-size'`` for the command line).
    """
    limit = batch_rows_limit(n_features)
    if limit is not None and batch_size > limit:
        given = ("%s %d" if flag.startswith("--") else "%s=%d") % (flag, batch_size)
        raise ValueError("%s%s with %d features: MXNet 1.9.1 refuses a CSR batch of 2^31 - 1 "
                         "elements (rows x features) or more; use %s <= %d"
                         % ("%s: " % type(owner).__name__ if owner is not None else "", given,
                            n_features, flag, limit))


def padded_csr_batches(X, ctx, rows=PREDICT_BATCH_ROWS):
    """Yield ``(CSRNDArray of exactly `rows` rows, number of real rows)`` covering ``X``
    (fewer rows a block where ``X`` is too wide for MXNet to take ``rows`` at once)."""
    limit = batch_rows_limit(X.shape[1])
    if limit is not None:
        rows = min(rows, limit)
    for start in range(0, X.shape[0], rows):
        chunk = X[start:start + rows]
        n_real = chunk.shape[0]
        indptr = np.concatenate([chunk.indptr, np.full(rows - n_real, chunk.indptr[-1],
                                                       chunk.indptr.dtype)])
        padded = sp.csr_matrix((chunk.data, chunk.indices, indptr), shape=(rows, X.shape[1]))
        yield csr_to_ndarray(padded, np.float32, ctx), n_real


def base_is_a_guess(estimator, X, zero_based):
    """Whether ``X``, read with ``zero_based`` for a fitted ``estimator``, has an index
    base that 'auto' guessed: the estimator records none (fitted on a matrix) and the
    file has no feature 0, and its largest index is not the model's width (one-based for
    certain: read as zero-based, it would not fit). ``X`` is the file read at its own width
    (before features beyond the model's are dropped: with any, the file fits neither base)."""
    if zero_based is not False or hasattr(estimator, "zero_based_"):
        return False
    return not (X.nnz and X.indices.max() == estimator.n_features_in_ - 1)


def warn_if_base_guessed(estimator, X, zero_based, source, reset):
    """Warn where a model fitted on a matrix reads a file whose index base is a guess.

    A model fitted on LibSVM files reads every later file with their base
    (``zero_based_``). One fitted on a matrix has no base to go by: 'auto' reads
    a file without feature 0 as one-based, right for a file like the one
    ``load_svmlight_file`` made the matrix from, one column off for a zero-based
    file that does not use feature 0 (``dump_svmlight_file`` writes zero-based
    files). Only a file with feature 0 (zero-based) or with an index equal to
    the model's width (one-based) says which it is.
    """
    if reset or isinstance(source, LibSVMDataset):  # a dataset's base is its reader's choice
        return
    if not base_is_a_guess(estimator, X, zero_based):
        return
    warnings.warn("%s: %s was fitted on a matrix, so this file's index base is unknown; it was "
                  "read as one-based (it has no feature 0). If its indices start at 0, read it "
                  "with gluon_sparse.data.load_libsvm(..., zero_based=True, num_features=%d) "
                  "and pass the matrix" % (", ".join(libsvm_paths(source)),
                                           type(estimator).__name__, estimator.n_features_in_),
                  UserWarning, stacklevel=4)
