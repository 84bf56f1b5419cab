"""LibSVM / svmlight parsing: the Python front end of the native parser.

:func:`load_libsvm` reads whole files into a ``scipy.sparse.csr_matrix``;
:func:`parse_libsvm_bytes` parses one in-memory buffer and is what the
streaming reader uses on each chunk. Both call the multi-threaded C++ parser
of ``libgluon_sparse_io.so`` (``csrc/io/libsvm_parser.cc``) through ctypes:
Python allocates every output array and the parser fills it, so the C side
never owns Python memory. ctypes releases the GIL during the calls, so
parsing in a background thread does not stall the training loop.
"""
import bz2
import contextlib
import ctypes
import gzip
import logging
import mmap
import os
import time

import numpy as np
import scipy.sparse as sp

from .. import _native

__all__ = ["load_libsvm", "parse_libsvm_bytes", "ParsedChunk"]

logger = logging.getLogger(__name__)

# Flags and error codes of csrc/io/libsvm_parser.h.
_MULTILABEL, _REJECT_ZERO, _REQUIRE_SORTED, _FLOAT32 = 1, 2, 4, 8
_OUT_OF_MEMORY = 1
_ERROR_MESSAGES = {
    1: "out of memory while parsing",
    2: "invalid label {token} (expected a number{labels})",
    3: "invalid feature {token} (expected index:value)",
    4: "invalid feature index in {token} (expected an integer)",
    5: "invalid feature index in {token}: indices must not be negative",
    6: "invalid feature index in {token}: index 0 with zero_based=False (indices are one-based)",
    7: "invalid feature value in {token} (expected a number)",
    8: "feature index {detail} in {token} is smaller than the previous one "
       "(allow_unsorted=False requires increasing indices)",
    9: "duplicate feature index {detail} in {token} (indices in a row must be unique)",
    10: "invalid query id {token} (expected qid:<integer>)",
    11: "feature index in {token} is too large",
}
_MAX_TOKEN_CHARS = 60
_INT32_MAX = np.iinfo(np.int32).max


class _ErrorInfo(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int32), ("token_offset", ctypes.c_int64),
                ("token_length", ctypes.c_int64), ("detail", ctypes.c_int64)]


_i64 = ctypes.c_int64
_i64p = ctypes.POINTER(ctypes.c_int64)
_lib = None


def _parser_library():
    """The native library with argument types declared (once)."""
    global _lib
    if _lib is None:
        lib = _native.io_library()
        lib.gs_libsvm_parse.restype = ctypes.c_void_p
        lib.gs_libsvm_parse.argtypes = [ctypes.c_void_p, _i64, ctypes.c_int32, ctypes.c_int32]
        lib.gs_libsvm_error.restype = ctypes.c_int32
        lib.gs_libsvm_error.argtypes = [ctypes.c_void_p, ctypes.POINTER(_ErrorInfo)]
        lib.gs_libsvm_counts.restype = None
        lib.gs_libsvm_counts.argtypes = [ctypes.c_void_p] + [_i64p] * 5
        lib.gs_libsvm_copy.restype = ctypes.c_int32
        lib.gs_libsvm_copy.argtypes = ([ctypes.c_void_p] * 4 + [ctypes.c_int32, _i64, _i64]
                                       + [ctypes.c_void_p, ctypes.c_void_p, _i64, _i64, _i64])
        lib.gs_libsvm_free.restype = None
        lib.gs_libsvm_free.argtypes = [ctypes.c_void_p]
        lib.gs_libsvm_line_of_offset.restype = _i64
        lib.gs_libsvm_line_of_offset.argtypes = [ctypes.c_void_p, _i64, _i64]
        lib.gs_libsvm_row_offset.restype = _i64
        lib.gs_libsvm_row_offset.argtypes = [ctypes.c_void_p, _i64, _i64]
        _lib = lib
    return _lib


def _default_threads():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class ParsedChunk:
    """Raw result of parsing one buffer, before index shifting and shape checks.

    Attributes
    ----------
    values : numpy.ndarray
        Non-zero values (float32 or float64), rows' indices sorted.
    indices : numpy.ndarray
        Feature indices exactly as written in the text (int64, or int32 when
        every index fits), not yet shifted for one-based files.
    indptr : numpy.ndarray
        Row pointers, ``len(indptr) == num_rows + 1``.
    labels : numpy.ndarray
        float64 labels; for multilabel data all rows' labels concatenated.
    label_ptr : numpy.ndarray or None
        Row pointers into ``labels`` (multilabel only).
    min_index, max_index : int
        Smallest and largest raw index (``-1``/``-1`` when there is none).
    """

    def __init__(self, values, indices, indptr, labels, label_ptr, min_index, max_index):
        self.values = values
        self.indices = indices
        self.indptr = indptr
        self.labels = labels
        self.label_ptr = label_ptr
        self.min_index = min_index
        self.max_index = max_index

    @property
    def num_rows(self):
        """Number of data rows."""
        return len(self.indptr) - 1

    def multilabel_tuples(self):
        """Labels as load_svmlight_file's list of sorted tuples (multilabel only)."""
        ptr = self.label_ptr.tolist()
        labels = self.labels.tolist()
        return [tuple(labels[ptr[i]:ptr[i + 1]]) for i in range(len(ptr) - 1)]


def _buffer_address(buf):
    """(address, length) of a bytes-like object, without copying it."""
    array = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
    return array, array.ctypes.data, array.size


def _describe_error(buf, info, source, line_base, multilabel):
    lib = _parser_library()
    array, address, length = _buffer_address(buf)
    line = line_base + lib.gs_libsvm_line_of_offset(address, length, info.token_offset)
    start = info.token_offset
    token = bytes(array[start:start + min(info.token_length, _MAX_TOKEN_CHARS)])
    # Quoted by hand, not with repr(): repr would escape the backslash of an
    # invalid byte's \xNN a second time ('\\xfc').
    token = token.decode("utf-8", errors="backslashreplace")
    if info.token_length > _MAX_TOKEN_CHARS:
        token += "..."
    token = "'%s'" % token
    message = _ERROR_MESSAGES.get(info.code, "parser error %d" % info.code).format(
        token=token, detail=info.detail,
        labels=" or comma separated numbers" if multilabel else "")
    return ValueError("%s, line %d: %s" % (source, line, message))


def parse_libsvm_bytes(buf, *, dtype="float32", multilabel=False, reject_zero=False,
                       allow_unsorted=True, num_threads=None, source="<bytes>", line_base=0):
    """Parse a LibSVM buffer with the native parser.

    Parameters
    ----------
    buf : bytes-like
        Whole lines of LibSVM text (a missing final newline is fine).
    dtype : {'float32', 'float64'}
        Type of the stored values.
    multilabel : bool
        Labels are comma separated lists.
    reject_zero : bool
        Index 0 is an error (one-based files, ``zero_based=False``).
    allow_unsorted : bool
        Sort rows whose indices are out of order; if False they are an error.
    num_threads : int, optional
        Parser threads (default: the CPUs this process may use).
    source : str
        File name used in error messages.
    line_base : int
        Lines before ``buf`` in ``source``, added to line numbers in errors.

    Returns
    -------
    ParsedChunk

    Raises
    ------
    ValueError
        On malformed text, naming ``source``, the line and the token.
    """
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError("dtype must be float32 or float64, got %s" % dtype)
    lib = _parser_library()
    flags = ((_MULTILABEL if multilabel else 0) | (_REJECT_ZERO if reject_zero else 0)
             | (0 if allow_unsorted else _REQUIRE_SORTED) | (_FLOAT32 if dtype == np.float32 else 0))
    array, address, length = _buffer_address(buf)
    handle = lib.gs_libsvm_parse(address, length, flags, num_threads or _default_threads())
    if not handle:
        raise MemoryError("out of memory while parsing %s" % source)
    try:
        info = _ErrorInfo()
        if lib.gs_libsvm_error(handle, ctypes.byref(info)):
            if info.code == _OUT_OF_MEMORY:
                raise MemoryError("out of memory while parsing %s" % source)
            raise _describe_error(array, info, source, line_base, multilabel)
        counts = [ctypes.c_int64() for _ in range(5)]
        lib.gs_libsvm_counts(handle, *[ctypes.byref(c) for c in counts])
        num_rows, nnz, num_labels, min_index, max_index = (c.value for c in counts)
        if nnz == 0:
            min_index = max_index = -1
        # scipy keeps int32 indices whenever they fit; so does the parser.
        index_dtype = np.int32 if max(nnz, max_index) <= _INT32_MAX else np.int64
        values = np.empty(nnz, dtype=dtype)
        indices = np.empty(nnz, dtype=index_dtype)
        indptr = np.empty(num_rows + 1, dtype=index_dtype)
        labels = np.empty(num_labels, dtype=np.float64)
        label_ptr = np.empty(num_rows + 1, dtype=np.int64) if multilabel else None
        status = lib.gs_libsvm_copy(
            handle, values.ctypes.data, indices.ctypes.data, indptr.ctypes.data,
            indices.itemsize, 0, 0, labels.ctypes.data,
            label_ptr.ctypes.data if multilabel else None, num_rows, nnz, num_labels)
        if status == _OUT_OF_MEMORY:
            raise MemoryError("out of memory while parsing %s" % source)
        if status:
            raise RuntimeError("internal error: gs_libsvm_copy returned %d for %s" % (status, source))
    finally:
        lib.gs_libsvm_free(handle)
    return ParsedChunk(values, indices, indptr, labels, label_ptr, min_index, max_index)


def newlines_before(buf, offset):
    """Number of line breaks in ``buf[:offset]`` (memchr in C, without the GIL)."""
    array, address, length = _buffer_address(buf)
    return _parser_library().gs_libsvm_line_of_offset(address, length, offset) - 1


def row_line_number(buf, row, line_base=0):
    """1-based line number of data row ``row`` of ``buf`` (comment/blank lines skipped)."""
    lib = _parser_library()
    array, address, length = _buffer_address(buf)
    offset = lib.gs_libsvm_row_offset(address, length, row)
    return line_base + lib.gs_libsvm_line_of_offset(address, length, max(offset, 0))


def _fspath(path):
    try:
        return os.fsdecode(os.fspath(path))
    except TypeError:
        raise TypeError("expected a path (str or os.PathLike) or a list of paths, got %s"
                        % type(path).__name__) from None


@contextlib.contextmanager
def open_libsvm_buffer(path):
    """Yield the bytes of ``path`` as a buffer: memory-mapped, or decompressed for .gz/.bz2.

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    """
    path = _fspath(path)
    lower = path.lower()
    if lower.endswith(".gz") or lower.endswith(".bz2"):
        opener = gzip.open if lower.endswith(".gz") else bz2.open
        try:
            with opener(path, "rb") as f:
                data = f.read()
        except (OSError, EOFError) as err:
            if isinstance(err, FileNotFoundError):
                raise
            raise ValueError("%s: cannot decompress: %s" % (path, err)) from err
        yield data
        return
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            yield b""
            return
        # A read-only map costs no copy; the page cache backs it. The map
        # itself is yielded, not a numpy view of it, so the caller's variable
        # does not keep it open.
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            yield mapped
        finally:
            try:
                mapped.close()
            except BufferError:
                # A parse error's traceback still holds a view of the map; it
                # is unmapped when that traceback is freed.
                logger.debug("map of %s still referenced by a traceback", path)


def _as_path_list(paths):
    if isinstance(paths, (str, bytes, os.PathLike)):
        return [_fspath(paths)]
    paths = [_fspath(p) for p in paths]
    if not paths:
        raise ValueError("no file given: paths is an empty list")
    return paths


def _check_zero_based(zero_based):
    if zero_based not in (True, False, "auto"):
        raise ValueError("zero_based must be True, False or 'auto', got %r" % (zero_based,))


def load_libsvm(paths, num_features=None, zero_based="auto", dtype="float32", multilabel=False,
                *, allow_unsorted=True, num_threads=None, return_zero_based=False):
    """Load LibSVM / svmlight files into a CSR matrix and labels.

    The result equals ``sklearn.datasets.load_svmlight_file`` (or
    ``load_svmlight_files`` concatenated) with the same arguments, but the
    parser runs in C++ on several threads. Differences, all deliberate:
    a row with unsorted indices is sorted (scikit-learn raises; pass
    ``allow_unsorted=False`` for its behaviour), errors name the file, line
    and token, ``qid:`` must carry an integer, and numbers with digit-group
    underscores (``1_000``) are rejected.

    Parameters
    ----------
    paths : str, os.PathLike or list of them
        File(s) to read; several files are concatenated row-wise. Names ending
        in ``.gz`` or ``.bz2`` are decompressed.
    num_features : int, optional
        Number of columns; inferred as the largest index + 1 when None.
    zero_based : bool or 'auto'
        Whether indices start at 0. ``'auto'`` follows scikit-learn: the files
        are one-based if every file has a feature and none has index 0.
    dtype : str or numpy.dtype
        float32 or float64, the dtype of ``X``.
    multilabel : bool
        Labels are comma separated lists (``1,3``); ``y`` is then a list of
        sorted tuples.
    allow_unsorted : bool
        Sort rows whose indices are not increasing (default) or raise.
    num_threads : int, optional
        Parser threads; default: the CPUs available to this process.
    return_zero_based : bool
        Also return the index base that was used, which is what ``'auto'``
        resolved to. A model trained on these files must read later files
        (test sets, which may lack the lowest feature) with the same base.

    Returns
    -------
    X : scipy.sparse.csr_matrix
        Shape ``(num_rows, num_features)``, sorted indices, dtype ``dtype``.
    y : numpy.ndarray or list of tuple
        float64 labels of shape ``(num_rows,)``, or tuples for multilabel.
    zero_based : bool
        Only with ``return_zero_based=True``: True if the indices were taken
        as they are (zero-based), False if they were shifted down by one.

    Raises
    ------
    FileNotFoundError
        If a file does not exist.
    ValueError
        On malformed text (file, line and token named), an index
        ``>= num_features``, a negative index, or index 0 with
        ``zero_based=False``.

    Examples
    --------
    >>> X, y = load_libsvm("heart_scale")  # doctest: +SKIP
    >>> X.shape
    (270, 13)
    >>> X, y, zero_based = load_libsvm("heart_scale", return_zero_based=True)  # doctest: +SKIP
    >>> zero_based  # heart_scale's indices start at 1
    False
    """
    _check_zero_based(zero_based)
    if num_features is not None and (not isinstance(num_features, (int, np.integer)) or num_features < 1):
        raise ValueError("num_features must be a positive integer or None, got %r" % (num_features,))
    paths = _as_path_list(paths)
    chunks = []
    for path in paths:
        start = time.perf_counter()
        with open_libsvm_buffer(path) as buf:
            chunks.append(parse_libsvm_bytes(
                buf, dtype=dtype, multilabel=multilabel, reject_zero=zero_based is False,
                allow_unsorted=allow_unsorted, num_threads=num_threads, source=path))
            size = len(buf)
        seconds = time.perf_counter() - start
        logger.debug("parsed %s: %d rows, %d non-zeros, %.1f MB in %.2f s (%.0f MB/s)", path,
                     chunks[-1].num_rows, chunks[-1].indices.size, size / 1e6, seconds,
                     size / 1e6 / max(seconds, 1e-9))
    one_based = zero_based is False or (
        zero_based == "auto" and all(c.indices.size and c.min_index > 0 for c in chunks))
    shift = 1 if one_based else 0
    largest = max(c.max_index for c in chunks) - shift
    if num_features is None:
        num_features = max(largest + 1, 1) if any(c.indices.size for c in chunks) else 1
    elif largest >= num_features:
        _raise_index_too_large(paths, chunks, shift, num_features)
    X = _concatenate(chunks, shift, num_features)
    if multilabel:
        y = [t for c in chunks for t in c.multilabel_tuples()]
    else:
        y = chunks[0].labels if len(chunks) == 1 else np.concatenate([c.labels for c in chunks])
    if return_zero_based:
        return X, y, not one_based
    return X, y


def _concatenate(chunks, shift, num_features):
    """One CSR matrix of all chunks, indices shifted; single chunks are not copied."""
    num_rows = sum(c.num_rows for c in chunks)
    nnz = sum(c.indices.size for c in chunks)
    if len(chunks) == 1:
        values, indices, indptr = chunks[0].values, chunks[0].indices, chunks[0].indptr
        if shift:
            indices -= indices.dtype.type(shift)
    else:
        index_dtype = np.int32 if max(nnz, num_features) <= _INT32_MAX else np.int64
        values = np.concatenate([c.values for c in chunks])
        indices = np.concatenate([c.indices for c in chunks]).astype(index_dtype, copy=False)
        if shift:
            indices -= index_dtype(shift)
        indptr = np.zeros(num_rows + 1, dtype=index_dtype)
        row = 0
        for c in chunks:
            indptr[row + 1:row + 1 + c.num_rows] = c.indptr[1:] + indptr[row]
            row += c.num_rows
    if num_features > _INT32_MAX and indices.dtype != np.int64:
        indices, indptr = indices.astype(np.int64), indptr.astype(np.int64)
    X = sp.csr_matrix((values, indices, indptr), shape=(num_rows, num_features), copy=False)
    X.has_sorted_indices = True  # the parser sorted every row
    return X


def _raise_index_too_large(paths, chunks, shift, num_features):
    for path, chunk in zip(paths, chunks):
        if chunk.max_index - shift < num_features:
            continue
        position = int(np.argmax(chunk.indices >= num_features + shift))
        row = int(np.searchsorted(chunk.indptr, position, side="right")) - 1
        with open_libsvm_buffer(path) as buf:
            line = row_line_number(buf, row)
        raise ValueError("%s, line %d: feature index %d is out of range for num_features=%d%s"
                         % (path, line, int(chunk.indices[position]), num_features,
                            " (indices are one-based, so the largest allowed is %d)" % num_features
                            if shift else ""))
