"""ctypes binding of the native LibSVM parser (``csrc/io/libsvm_parser.h``).

:func:`parse_libsvm_bytes` parses one in-memory buffer with the
multi-threaded C++ parser of ``libgluon_sparse_io.so``: Python allocates every
output array and the parser fills it, so the C side never owns Python memory.
ctypes releases the GIL during the calls, so parsing in a background thread
does not stall the training loop. The line-index helpers turn byte offsets
and row numbers into the line numbers error messages name.
"""
import ctypes
import os

import numpy as np

from .. import _native
from .._sparse_entries import row_of_entry

__all__ = ["parse_libsvm_bytes", "ParsedChunk", "newlines_before", "row_line_number",
           "count_rows", "team_size", "quote_token"]

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
        lib.gluon_sparse_libsvm_parse.restype = ctypes.c_void_p
        lib.gluon_sparse_libsvm_parse.argtypes = [ctypes.c_void_p, _i64, ctypes.c_int32,
                                                  ctypes.c_int32]
        lib.gluon_sparse_libsvm_error.restype = ctypes.c_int32
        lib.gluon_sparse_libsvm_error.argtypes = [ctypes.c_void_p, ctypes.POINTER(_ErrorInfo)]
        lib.gluon_sparse_libsvm_counts.restype = None
        lib.gluon_sparse_libsvm_counts.argtypes = [ctypes.c_void_p] + [_i64p] * 5
        lib.gluon_sparse_libsvm_copy.restype = ctypes.c_int32
        lib.gluon_sparse_libsvm_copy.argtypes = ([ctypes.c_void_p] * 4
                                                 + [ctypes.c_int32, _i64, _i64]
                                                 + [ctypes.c_void_p, ctypes.c_void_p,
                                                    _i64, _i64, _i64])
        lib.gluon_sparse_libsvm_free.restype = None
        lib.gluon_sparse_libsvm_free.argtypes = [ctypes.c_void_p]
        lib.gluon_sparse_libsvm_line_of_offset.restype = _i64
        lib.gluon_sparse_libsvm_line_of_offset.argtypes = [ctypes.c_void_p, _i64, _i64]
        lib.gluon_sparse_libsvm_row_offset.restype = _i64
        lib.gluon_sparse_libsvm_row_offset.argtypes = [ctypes.c_void_p, _i64, _i64]
        lib.gluon_sparse_libsvm_count_rows.restype = _i64
        lib.gluon_sparse_libsvm_count_rows.argtypes = [ctypes.c_void_p, _i64]
        lib.gluon_sparse_libsvm_team_size.restype = ctypes.c_int32
        lib.gluon_sparse_libsvm_team_size.argtypes = [_i64, ctypes.c_int32]
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

    def row_of_entry(self, position):
        """The data row holding feature entry ``position`` (an index into ``values``)."""
        return row_of_entry(self.indptr, position)

    def first_index_at_least(self, raw_limit):
        """``(row, raw index)`` of the first feature index ``>= raw_limit``, or None."""
        if self.max_index < raw_limit:
            return None
        position = int(np.argmax(self.indices >= raw_limit))
        return self.row_of_entry(position), int(self.indices[position])

    def first_nonfinite_value(self):
        """``(row, description)`` of the first NaN or infinite feature value, or None."""
        bad = np.flatnonzero(~np.isfinite(self.values))
        if not bad.size:
            return None
        position = int(bad[0])
        return self.row_of_entry(position), "value %r of feature %d" % (
            float(self.values[position]), int(self.indices[position]))

    def multilabel_tuples(self):
        """Labels as load_svmlight_file's list of sorted tuples (multilabel only)."""
        ptr = self.label_ptr.tolist()
        labels = self.labels.tolist()
        return [tuple(labels[ptr[i]:ptr[i + 1]]) for i in range(len(ptr) - 1)]


def _buffer_address(buf):
    """``(array, address, length in bytes)`` of a bytes-like object, without copying it
    where it is one contiguous run of bytes (the parser reads ``length`` bytes from
    ``address``: a strided or reversed view, or wider elements, would have it read
    past the data or only part of it)."""
    if not isinstance(buf, np.ndarray):
        buf = np.frombuffer(buf, dtype=np.uint8)
    elif not buf.flags.c_contiguous:
        buf = np.ascontiguousarray(buf)
    array = buf.reshape(-1).view(np.uint8)
    return array, array.ctypes.data, array.size


def quote_token(raw, truncated=False):
    """``raw`` bytes in quotes for a message, escaped once.

    Valid UTF-8 is shown as text; invalid bytes and control characters as
    ``\\xNN`` escapes, written once: a message printed to the terminal reads
    ``'\\xfc'``, not ``'\\\\xfc'`` as the ``repr`` of an escaped string would.

    Examples
    --------
    >>> print(quote_token(b"1:\\xfc"))
    '1:\\xfc'
    """
    text = raw.decode("utf-8", errors="backslashreplace")
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return "'%s%s'" % (text, "..." if truncated else "")


def _describe_error(buf, info, source, line_base, multilabel):
    lib = _parser_library()
    array, address, length = _buffer_address(buf)
    line = line_base + lib.gluon_sparse_libsvm_line_of_offset(address, length, info.token_offset)
    start = info.token_offset
    token = quote_token(bytes(array[start:start + min(info.token_length, _MAX_TOKEN_CHARS)]),
                        truncated=info.token_length > _MAX_TOKEN_CHARS)
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
             | (0 if allow_unsorted else _REQUIRE_SORTED)
             | (_FLOAT32 if dtype == np.float32 else 0))
    array, address, length = _buffer_address(buf)
    handle = lib.gluon_sparse_libsvm_parse(address, length, flags,
                                           num_threads or _default_threads())
    if not handle:
        raise MemoryError("out of memory while parsing %s" % source)
    try:
        info = _ErrorInfo()
        if lib.gluon_sparse_libsvm_error(handle, ctypes.byref(info)):
            if info.code == _OUT_OF_MEMORY:
                raise MemoryError("out of memory while parsing %s" % source)
            raise _describe_error(array, info, source, line_base, multilabel)
        counts = [ctypes.c_int64() for _ in range(5)]
        lib.gluon_sparse_libsvm_counts(handle, *[ctypes.byref(c) for c in counts])
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
        status = lib.gluon_sparse_libsvm_copy(
            handle, values.ctypes.data, indices.ctypes.data, indptr.ctypes.data,
            indices.itemsize, 0, 0, labels.ctypes.data,
            label_ptr.ctypes.data if multilabel else None, num_rows, nnz, num_labels)
        if status == _OUT_OF_MEMORY:
            raise MemoryError("out of memory while parsing %s" % source)
        if status:
            raise RuntimeError("internal error: gluon_sparse_libsvm_copy returned %d for %s"
                               % (status, source))
    finally:
        lib.gluon_sparse_libsvm_free(handle)
    return ParsedChunk(values, indices, indptr, labels, label_ptr, min_index, max_index)


def newlines_before(buf, offset):
    """Number of line breaks in ``buf[:offset]`` (memchr in C, without the GIL)."""
    array, address, length = _buffer_address(buf)
    return _parser_library().gluon_sparse_libsvm_line_of_offset(address, length, offset) - 1


def count_rows(buf):
    """Number of data rows in ``buf`` (comment and blank lines are not rows)."""
    array, address, length = _buffer_address(buf)
    return _parser_library().gluon_sparse_libsvm_count_rows(address, length)


def team_size(num_bytes, num_threads=None):
    """Threads the parser uses for a buffer of ``num_bytes`` with ``num_threads`` allowed.

    One below the parser's grain size, at most ``num_bytes / grain`` above it
    (``csrc/io/libsvm_parallel.h``).
    """
    return _parser_library().gluon_sparse_libsvm_team_size(num_bytes,
                                                           num_threads or _default_threads())


def row_line_number(buf, row, line_base=0):
    """1-based line number of data row ``row`` of ``buf`` (comment/blank lines skipped)."""
    lib = _parser_library()
    array, address, length = _buffer_address(buf)
    offset = lib.gluon_sparse_libsvm_row_offset(address, length, row)
    return line_base + lib.gluon_sparse_libsvm_line_of_offset(address, length, max(offset, 0))
