"""Random-access datasets of CSR rows and labels.

Both datasets keep the whole matrix as one ``scipy.sparse.csr_matrix``
(``.data``) and the labels as one numpy array (``.label``), which is what
:class:`~gluon_sparse.data.SparseDataLoader` slices in bulk. Indexing one
sample (``ds[i]``) is there for Gluon compatibility and inspection.
"""
import logging
import os

import numpy as np
import scipy.sparse as sp
from mxnet.gluon.data import Dataset

from . import cache as _cache
from .libsvm import _as_path_list, _check_zero_based, check_size, load_libsvm, locate_row

__all__ = ["CSRDataset", "LibSVMDataset"]

logger = logging.getLogger(__name__)


def _to_csr(data):
    import mxnet as mx
    if isinstance(data, mx.nd.NDArray):
        data = data.asscipy() if data.stype == "csr" else data.asnumpy()
    if sp.issparse(data):
        # csr_matrix also of scipy's sparse *arrays* (csr_array, coo_array, ...), which
        # the batchify functions and 1-D row slices do not serve.
        csr = data.tocsr() if isinstance(data, sp.spmatrix) else sp.csr_matrix(data)
    else:
        array = np.asarray(data)
        if array.ndim != 2:
            raise ValueError("data must be 2-D (num_samples, num_features), got shape %s"
                             % (array.shape,))
        csr = sp.csr_matrix(array)
    if csr.dtype.kind != "f":
        csr = csr.astype(np.float32)
    if not csr.has_canonical_format:
        # MXNet's CSR holds each column at most once a row, in ascending order
        # (a batch with "3:1 3:2" fails its format check and reads as 3:2 when
        # made dense); duplicates are summed, as scipy's own products count them.
        csr = csr.copy() if csr is data else csr  # never change the caller's matrix
        csr.sum_duplicates()
    return csr


class CSRDataset(Dataset):
    """A dataset over a sparse (or dense) matrix and optional labels.

    Parameters
    ----------
    data : scipy.sparse matrix, numpy.ndarray, CSRNDArray or NDArray
        Samples as rows; converted to CSR with sorted indices, a column at most
        once a row (duplicates summed, as scipy's products count them; integer
        data becomes float32). A CSR matrix already in that form is used
        without a copy; the caller's matrix is never changed.
    label : array-like, optional
        One label (shape ``(n,)``) or label vector (``(n, k)``) per row.

    Attributes
    ----------
    data : scipy.sparse.csr_matrix
    label : numpy.ndarray or None
    num_features : int

    Notes
    -----
    ``ds[i]`` returns ``(row, label)`` with ``row`` a ``(1, num_features)``
    scipy CSR matrix (``label`` is omitted when there are no labels).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> ds = CSRDataset(sp.eye(4, format="csr"), np.arange(4))
    >>> len(ds), ds.num_features
    (4, 4)
    """

    def __init__(self, data, label=None):
        self.data = _to_csr(data)
        if label is not None:
            label = np.asarray(label)
            if label.ndim == 0 or label.shape[0] != self.data.shape[0]:
                raise ValueError("label has shape %s but data has %d rows; labels must have "
                                 "shape (%d,) or (%d, k)" % (label.shape, self.data.shape[0],
                                                               self.data.shape[0], self.data.shape[0]))
        self.label = label

    @property
    def num_features(self):
        """Number of columns of ``data``."""
        return self.data.shape[1]

    def __len__(self):
        return self.data.shape[0]

    def __getitem__(self, idx):
        if not -len(self) <= idx < len(self):
            raise IndexError("index %d out of range for a dataset of %d samples" % (idx, len(self)))
        row = self.data[idx]
        if self.label is None:
            return row
        return row, self.label[idx]


class LibSVMDataset(CSRDataset):
    """A dataset read from LibSVM / svmlight files.

    Parameters
    ----------
    path_or_paths : str, os.PathLike or list of them
        File(s), concatenated in order; ``.gz`` / ``.bz2`` are decompressed.
    num_features : int, optional
        Number of columns; inferred from the largest index when None.
    zero_based : bool or 'auto'
        Index base; ``'auto'`` decides as ``sklearn.datasets.load_svmlight_file``.
    dtype : str
        float32 or float64 values.
    multilabel : bool
        Labels are comma separated lists. ``label`` is then an object array of
        tuples (as scikit-learn returns), which the loader cannot batch; use
        ``CSRDataset(ds.data, MultiLabelBinarizer().fit_transform(ds.label))``.
    cache : bool, str or os.PathLike
        Keep the parsed arrays in a binary cache keyed by path, size and
        modification time: ``True`` uses :func:`~gluon_sparse.data.cache.default_cache_dir`,
        a path names the directory.

    Attributes
    ----------
    data : scipy.sparse.csr_matrix
        The samples.
    label : numpy.ndarray
        float64 labels.
    num_features : int
    zero_based_ : bool
        The index base the files were read with: ``zero_based`` itself, or
        what ``'auto'`` resolved to (True: indices taken as written, False:
        shifted down by one). Read later files with this value.

    See Also
    --------
    load_libsvm : the parser, its errors and its deliberate differences from scikit-learn.

    Examples
    --------
    >>> ds = LibSVMDataset("heart_scale")  # doctest: +SKIP
    >>> row, label = ds[0]  # doctest: +SKIP
    """

    def __init__(self, path_or_paths, num_features=None, zero_based="auto", dtype="float32",
                 multilabel=False, cache=False):
        zero_based = _check_zero_based(zero_based)
        num_features = check_size("num_features", num_features)
        paths = _as_path_list(path_or_paths)
        self.paths = paths
        options = {"num_features": num_features, "zero_based": zero_based,
                   "dtype": str(np.dtype(dtype)), "multilabel": multilabel}
        if cache and multilabel:
            logger.info("cache=True is ignored for multilabel files (labels are tuples)")
        use_cache = bool(cache) and not multilabel
        loaded = None
        if use_cache:
            cache_dir = _cache.default_cache_dir() if cache is True else os.fspath(cache)
            key = _cache.cache_key(paths, options)
            loaded = _cache.load_cached(key, cache_dir)
        if loaded is None:
            loaded = load_libsvm(paths, num_features=num_features, zero_based=zero_based,
                                 dtype=dtype, multilabel=multilabel, return_zero_based=True)
            if use_cache:
                _cache.save_cached(key, cache_dir, *loaded, sources=paths)
        X, y, self.zero_based_ = loaded
        if multilabel:
            labels = np.empty(len(y), dtype=object)
            labels[:] = y
            y = labels
        super().__init__(X, y)

    def locate(self, row):
        """``(path, line)`` of sample ``row``: where to fix a row found wrong later.

        See :func:`~gluon_sparse.data.libsvm.locate_row`.
        """
        return locate_row(self.paths, row)
