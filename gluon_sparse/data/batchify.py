"""Assembly of CSR batches: rows are sliced in bulk, never densified."""
import mxnet as mx
import numpy as np
import scipy.sparse as sp

__all__ = ["csr_to_ndarray", "CSRBatchify"]


def csr_to_ndarray(matrix, dtype=None, ctx=None):
    """Convert a ``scipy.sparse.csr_matrix`` to a ``CSRNDArray`` (one copy).

    Parameters
    ----------
    matrix : scipy.sparse.csr_matrix
    dtype : str or numpy.dtype, optional
        Value type of the result (default: the matrix's).
    ctx : mxnet.Context, optional
        Where to create it (default: the current context).

    Returns
    -------
    mxnet.nd.sparse.CSRNDArray
    """
    dtype = np.dtype(dtype or matrix.dtype)
    # MXNet stores CSR indices as int64; converting here is one small copy per batch.
    return mx.nd.sparse.csr_matrix(
        (matrix.data.astype(dtype, copy=False), matrix.indices.astype(np.int64, copy=False),
         matrix.indptr.astype(np.int64, copy=False)),
        shape=matrix.shape, dtype=dtype, ctx=ctx)


def _is_contiguous(indices):
    n = len(indices)
    return n > 0 and indices[-1] - indices[0] == n - 1 and (n < 3 or bool(np.all(np.diff(indices) == 1)))


class CSRBatchify:
    """Builds ``(data, label)`` batches from a CSR matrix and a label array.

    Parameters
    ----------
    data : scipy.sparse.csr_matrix
        All samples.
    label : numpy.ndarray, optional
        Labels, shape ``(n,)`` or ``(n, k)``; batches then have label None when absent.
    dtype : str or numpy.dtype, optional
        dtype of the batch's data and labels (default: the matrix's).

    Notes
    -----
    ``batchify(indices)`` slices the rows in one scipy call (a plain ``indptr``
    range when the indices are consecutive) and converts them to a
    ``CSRNDArray`` of shape ``(len(indices), num_features)``.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> data, label = CSRBatchify(sp.eye(3, format="csr"), np.arange(3))(np.array([2, 0]))
    >>> data.stype, data.shape
    ('csr', (2, 3))
    """

    def __init__(self, data, label=None, dtype=None):
        if not sp.isspmatrix_csr(data):
            raise TypeError("CSRBatchify needs a scipy.sparse.csr_matrix, got %s" % type(data).__name__)
        self.data = data
        self.label = label
        self.dtype = np.dtype(dtype or data.dtype)

    def rows(self, indices):
        """The scipy CSR matrix of the given rows, in order."""
        indices = np.asarray(indices, dtype=np.int64)
        if _is_contiguous(indices):
            return self.data[int(indices[0]):int(indices[-1]) + 1]
        return self.data[indices]

    def __call__(self, indices, ctx=None):
        indices = np.asarray(indices, dtype=np.int64)
        data = csr_to_ndarray(self.rows(indices), self.dtype, ctx)
        if self.label is None:
            return data, None
        return data, mx.nd.array(self.label[indices], dtype=self.dtype, ctx=ctx)


def stack_samples(samples, num_features=None, dtype=None):
    """Fallback batchify for datasets without ``.data``/``.label``: vstack sample rows.

    Each sample is ``(row, label)`` with ``row`` a scipy sparse row, a
    ``CSRNDArray`` row, or a dense vector.
    """
    rows, labels = [], []
    for sample in samples:
        row, label = sample if isinstance(sample, tuple) else (sample, None)
        if isinstance(row, mx.nd.NDArray):
            row = row.asscipy() if row.stype == "csr" else row.asnumpy()
        row = row if sp.issparse(row) else sp.csr_matrix(np.asarray(row).reshape(1, -1))
        rows.append(row)
        labels.append(label.asnumpy() if isinstance(label, mx.nd.NDArray) else label)
    matrix = sp.vstack(rows, format="csr")
    if num_features is not None and matrix.shape[1] != num_features:
        raise ValueError("samples have %d features, expected %d" % (matrix.shape[1], num_features))
    matrix.sort_indices()
    dtype = np.dtype(dtype or (matrix.dtype if matrix.dtype.kind == "f" else np.float32))
    data = csr_to_ndarray(matrix, dtype)
    if all(label is None for label in labels):
        return data, None
    return data, mx.nd.array(np.asarray(labels), dtype=dtype)
