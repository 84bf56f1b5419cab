"""Assembly of CSR batches: rows are sliced in bulk, never densified."""
import ctypes
import logging

import mxnet as mx
import numpy as np
import scipy.sparse as sp
from mxnet.base import _LIB, check_call

from .. import _native
from ._ndarray_bytes import csr_from_parts, dense_from_numpy

logger = logging.getLogger(__name__)

__all__ = ["gather_rows", "array_to_ndarray", "csr_to_ndarray", "csr_parts_to_ndarray",
           "csr_row_range_to_ndarray", "CSRBatchify", "stack_samples",
           "check_batch_size"]


def array_to_ndarray(array, ctx=None):
    """Copy a numpy array into a dense NDArray, without an engine round trip.

    ``mx.nd.array`` allocates and then copies through MXNet's engine (about
    50 us per batch label); this creates the array from bytes in the calling
    thread (see ``gluon_sparse/data/_ndarray_bytes.py``), or else wraps a
    private copy with DLPack (``from_numpy(zero_copy=True)``).

    Parameters
    ----------
    array : array-like
    ctx : mxnet.Context, optional
        Device of the result (default: CPU).

    Returns
    -------
    mxnet.nd.NDArray
    """
    array = _native_byte_order(np.asarray(array))
    result = dense_from_numpy(array)
    if result is None:
        result = mx.nd.from_numpy(np.array(array, order="C", copy=True), zero_copy=True)
    if ctx is not None and ctx != result.context:
        result = result.as_in_context(ctx)
    return result


def _native_byte_order(array):
    """``array``, converted where its dtype is in the other byte order ('>f8' here)."""
    return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))


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

    Notes
    -----
    ``mx.nd.sparse.csr_matrix`` turns each of the three arrays into a dense
    NDArray and copies each into the CSR array through MXNet's engine: six
    round trips to its worker thread, about 0.8 ms per batch, more than
    slicing the batch. Here the array is created from bytes in the calling
    thread (``gluon_sparse/data/_ndarray_bytes.py``, about 5 us for 256 rows);
    where MXNet refuses that (numpy shape semantics on), the values are copied
    into the new array's storage directly and the two index arrays through
    two engine round trips. No numpy memory is referenced once this function
    returns. Any ``ctx`` but ``mx.cpu(0)`` is served by a copy of the ``cpu(0)`` array.
    """
    return csr_parts_to_ndarray(matrix.data, matrix.indices, matrix.indptr, matrix.shape, dtype,
                                ctx)


def csr_parts_to_ndarray(values, indices, indptr, shape, dtype=None, ctx=None, row_offset=0):
    """Like :func:`csr_to_ndarray`, from the three CSR arrays.

    ``indptr[0]`` must equal ``row_offset``, which is subtracted from every
    row pointer (for rows sliced out of a larger matrix without a copy).
    """
    # MXNet's arrays are in the machine's byte order: '>f4' values (a .npy file
    # from a big-endian machine) are converted as they are copied.
    dtype = np.dtype(dtype or values.dtype).newbyteorder("=")
    ctx = ctx or mx.context.current_context()
    if ctx != mx.cpu():  # a GPU, pinned memory or another CPU device id: built on cpu(0)
        return csr_parts_to_ndarray(values, indices, indptr, shape, dtype, mx.cpu(),
                                    row_offset).as_in_context(ctx)
    result = csr_from_parts(values, indices, indptr, shape, dtype, row_offset)
    if result is not None:
        return result
    return _csr_through_engine(values, indices, np.asarray(indptr) - row_offset if row_offset
                               else indptr, shape, dtype)


def _csr_through_engine(values, indices, indptr, shape, dtype):
    """The CSRNDArray through MXNet's public API: two engine round trips."""
    values = np.ascontiguousarray(values, dtype=dtype)
    # views, so marking them read-only (from_numpy does) leaves the caller's arrays alone
    indptr = np.ascontiguousarray(indptr, dtype=np.int64).view()
    indices = np.ascontiguousarray(indices, dtype=np.int64).view()
    result = mx.nd.sparse.CSRNDArray(mx.nd.sparse._new_alloc_handle(
        "csr", tuple(shape), mx.cpu(), False, dtype, [np.int64, np.int64],
        [indptr.shape, indices.shape]))
    if values.size:
        # The values are written straight into the new array's storage, as
        # SyncCopyFromCPU does for dense arrays: nothing else can see the array
        # yet, and WaitToWrite returns at once for a fresh one.
        check_call(_LIB.MXNDArrayWaitToWrite(result.handle))
        address = ctypes.c_void_p()
        check_call(_LIB.MXNDArrayGetData(result.handle, ctypes.byref(address)))
        ctypes.memmove(address, values.ctypes.data, values.nbytes)
    # MXNet has no pointer to a CSR array's aux storage: indptr (aux 0) and
    # indices (aux 1) go through the synchronous copy csr_matrix() also uses.
    for component, array in ((0, indptr), (1, indices)):
        source = mx.nd.from_numpy(array, zero_copy=True)
        check_call(_LIB.MXNDArraySyncCopyFromNDArray(result.handle, source.handle,
                                                     ctypes.c_int(component)))
    return result


def csr_row_range_to_ndarray(matrix, start, stop, dtype=None, ctx=None):
    """Rows ``[start, stop)`` of a scipy CSR matrix as a ``CSRNDArray``.

    Slices the three arrays directly (views, copied once into the result):
    scipy's ``matrix[start:stop]`` costs more than the conversion itself for
    a batch-sized range.
    """
    first, last = int(matrix.indptr[start]), int(matrix.indptr[stop])
    return csr_parts_to_ndarray(matrix.data[first:last], matrix.indices[first:last],
                                matrix.indptr[start:stop + 1], (stop - start, matrix.shape[1]),
                                dtype, ctx, row_offset=first)


_gather_lib = None


def _gather_library():
    global _gather_lib
    if _gather_lib is None:
        lib = _native.io_library()
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        lib.gluon_sparse_csr_gather_indptr.restype = ctypes.c_int32
        lib.gluon_sparse_csr_gather_indptr.argtypes = [ptr, ctypes.c_int32, i64, i64, ptr, i64,
                                                       ptr, ptr]
        lib.gluon_sparse_csr_gather_fill.restype = ctypes.c_int32
        lib.gluon_sparse_csr_gather_fill.argtypes = [ptr, ptr, ptr, ctypes.c_int32, ctypes.c_int32,
                                                     ptr, i64, ptr, i64, ptr, ptr]
        _gather_lib = lib
    return _gather_lib


def gather_rows(matrix, rows):
    """Rows ``rows`` of a scipy CSR matrix as ``(values, indices, indptr)`` arrays.

    Indices and row pointers come back as int64 (MXNet's CSR index type).
    Runs in the native library (one pass, GIL released); matrices it does not
    handle (mixed index dtypes, non-contiguous or non-float arrays) go
    through scipy.

    Raises
    ------
    IndexError
        If a row number is outside ``[0, matrix.shape[0])``.
    """
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    index_dtype = matrix.indptr.dtype
    native = (matrix.indices.dtype == index_dtype and index_dtype in (np.int32, np.int64)
              and matrix.data.dtype in (np.float32, np.float64)
              and matrix.data.flags.c_contiguous and matrix.indices.flags.c_contiguous
              and matrix.indptr.flags.c_contiguous)
    if not native:
        part = matrix[rows]
        return part.data, part.indices.astype(np.int64), part.indptr.astype(np.int64)
    lib = _gather_library()
    out_indptr = np.empty(len(rows) + 1, dtype=np.int64)
    bad = ctypes.c_int64(-1)
    status = lib.gluon_sparse_csr_gather_indptr(matrix.indptr.ctypes.data, index_dtype.itemsize,
                                      matrix.shape[0], len(matrix.indices), rows.ctypes.data,
                                      len(rows), out_indptr.ctypes.data, ctypes.byref(bad))
    if status == -1:
        raise IndexError("row %d is out of range for a matrix of %d rows"
                         % (rows[bad.value], matrix.shape[0]))
    if status:
        raise ValueError("invalid CSR matrix: its indptr is not a valid row pointer array")
    nnz = int(out_indptr[-1])
    out_indices = np.empty(nnz, dtype=np.int64)
    out_values = np.empty(nnz, dtype=matrix.data.dtype)
    status = lib.gluon_sparse_csr_gather_fill(matrix.indptr.ctypes.data, matrix.indices.ctypes.data,
                                    matrix.data.ctypes.data, index_dtype.itemsize,
                                    matrix.data.itemsize, rows.ctypes.data, len(rows),
                                    out_indptr.ctypes.data, nnz, out_indices.ctypes.data,
                                    out_values.ctypes.data)
    if status:
        raise RuntimeError("internal error: gluon_sparse_csr_gather_fill returned %d" % status)
    return out_values, out_indices, out_indptr


_INT32_ELEMENTS = 2 ** 31 - 1


def check_batch_size(batch_size, num_features):
    """Warn when MXNet cannot run operators on batches this wide.

    MXNet wheels are built without ``USE_INT64_TENSOR_SIZE``; their operators
    then refuse any input of more than 2^31 - 1 elements, and a CSR batch
    counts as ``rows x num_features`` however sparse it is (256 x 10^7
    already fails in ``sparse.dot``). Returns the largest usable batch size.
    """
    if num_features is None or mx.runtime.Features().is_enabled("INT64_TENSOR_SIZE"):
        return batch_size
    largest = max(_INT32_ELEMENTS // max(int(num_features), 1), 1)
    if batch_size is not None and batch_size > largest:
        logger.warning(
            "batches of %d x %d features exceed the 2^31 - 1 elements this MXNet build allows "
            "per operator input (it lacks USE_INT64_TENSOR_SIZE): operators such as sparse.dot "
            "will fail on them. Use batch_size <= %d.", batch_size, num_features, largest)
    return largest


def _checked_rows(indices, num_rows):
    """Row indices as int64, negative ones counted from the end (as ``dataset[-1]``);
    an IndexError naming the first index outside ``[-num_rows, num_rows)``."""
    indices = np.asarray(indices, dtype=np.int64)
    bad = np.flatnonzero((indices < -num_rows) | (indices >= num_rows))
    if bad.size:
        raise IndexError("row %d is out of range for a matrix of %d rows"
                         % (indices[bad[0]], num_rows))
    if indices.size and indices.min() < 0:
        indices = np.where(indices < 0, indices + num_rows, indices)
    return indices


def _is_contiguous(indices):
    n = len(indices)
    return (n > 0 and indices[-1] - indices[0] == n - 1
            and (n < 3 or bool(np.all(np.diff(indices) == 1))))


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
            raise TypeError("CSRBatchify needs a scipy.sparse.csr_matrix, got %s"
                            % type(data).__name__)
        self.data = data
        self.label = label
        self.dtype = np.dtype(dtype or data.dtype)

    def rows(self, indices):
        """The scipy CSR matrix of the given rows, in order."""
        indices = _checked_rows(indices, self.data.shape[0])
        if _is_contiguous(indices):
            return self.data[int(indices[0]):int(indices[-1]) + 1]
        return self.data[indices]

    def __call__(self, indices, ctx=None):
        indices = _checked_rows(indices, self.data.shape[0])
        if _is_contiguous(indices):
            start, stop = int(indices[0]), int(indices[-1]) + 1
            data = csr_row_range_to_ndarray(self.data, start, stop, self.dtype, ctx)
            label = None if self.label is None else self.label[start:stop]
        else:
            values, columns, indptr = gather_rows(self.data, indices)
            data = csr_parts_to_ndarray(values, columns, indptr,
                                        (len(indices), self.data.shape[1]), self.dtype, ctx)
            label = None if self.label is None else self.label[indices]
        if label is None:
            return data, None
        return data, array_to_ndarray(label.astype(self.dtype, copy=False), ctx)


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
    matrix.sum_duplicates()  # MXNet's CSR: each column once a row, ascending
    dtype = np.dtype(dtype or (matrix.dtype if matrix.dtype.kind == "f" else np.float32))
    data = csr_to_ndarray(matrix, dtype)
    if all(label is None for label in labels):
        return data, None
    return data, array_to_ndarray(np.asarray(labels, dtype=dtype))
