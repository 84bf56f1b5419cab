"""Host-side checks of a CSR batch, for the products that MXNet runs unchecked.

``gluon_sparse_dot`` validates its CSR input itself. MXNet's ``sparse.dot``
does not: a column index past the weight reads (or, in the backward, writes)
out of bounds, and a row pointer past the entries reads past them. Its
row_sparse-weight kernel also assumes each row's columns sorted and unique.
The blocks that call it check their batch here first; each check copies the
batch's index arrays to the host, O(nnz).
"""
import mxnet as mx
import numpy as np
import scipy.sparse as sp

from .._sparse_entries import first_outside, row_of_entry

__all__ = ["checked_csr"]


def _check_indptr(indptr, nnz, name):
    if indptr[0] != 0 or indptr[-1] != nnz or np.any(np.diff(indptr) < 0):
        raise ValueError("%s: the CSR batch's indptr %s is not a row pointer array of its %d "
                         "entries (it must start at 0, never decrease and end at %d)"
                         % (name, np.array2string(indptr, threshold=8), nnz, nnz))


def _is_canonical(indptr, indices):
    """Whether every row's columns are strictly increasing."""
    if indices.size < 2:
        return True
    increasing = np.diff(indices) > 0
    starts = indptr[1:-1]
    starts = starts[(starts > 0) & (starts < indices.size)]
    increasing[starts - 1] = True  # a row may start below the previous row's end
    return bool(increasing.all())


def checked_csr(x, name, canonical=False):
    """``x`` after checking its indptr and column indices against its shape.

    Parameters
    ----------
    x : CSRNDArray
    name : str
        The block, for the error message.
    canonical : bool, default False
        Also return a batch whose rows have sorted, unique columns (duplicates
        summed, as ``scipy.sparse``'s ``sum_duplicates`` does and as the dense
        matrix the CSR stands for has them); ``x`` itself when it has them.

    Raises
    ------
    ValueError
        Naming the first bad row pointer or column index.
    """
    indptr, indices = x.indptr.asnumpy(), x.indices.asnumpy()
    _check_indptr(indptr, indices.size, name)
    bad = first_outside(indices, x.shape[1])
    if bad is not None:
        raise ValueError("%s: CSR column index %d (row %d, entry %d) is outside [0, %d)"
                         % (name, int(indices[bad]), row_of_entry(indptr, bad), bad,
                            x.shape[1]))
    if not canonical or _is_canonical(indptr, indices):
        return x
    matrix = sp.csr_matrix((x.data.asnumpy(), indices, indptr), shape=x.shape)
    matrix.sum_duplicates()  # sorts each row's columns too
    return mx.nd.sparse.csr_matrix((matrix.data, matrix.indices.astype(np.int64),
                                    matrix.indptr.astype(np.int64)), shape=x.shape,
                                   ctx=x.context, dtype=x.dtype)
