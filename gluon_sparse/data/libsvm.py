"""LibSVM / svmlight files: :func:`load_libsvm` and the file-level helpers.

:func:`load_libsvm` reads whole files into a ``scipy.sparse.csr_matrix`` with
the native parser (``_libsvm_parser.py``, which also serves the streaming
reader chunk by chunk); :func:`locate_row` names the file and line of a row of
its result, for errors found later (non-finite values rejected by an
estimator, say).
"""
import bz2
import contextlib
import gzip
import logging
import mmap
import os
import stat
import time
import zlib

import numpy as np
import scipy.sparse as sp

from .._sparse_entries import row_of_entry
from ._libsvm_parser import ParsedChunk, count_rows, parse_libsvm_bytes, row_line_number

__all__ = ["load_libsvm", "locate_row", "parse_libsvm_bytes", "ParsedChunk"]

logger = logging.getLogger(__name__)

_INT32_MAX = np.iinfo(np.int32).max
_INT64_MAX = np.iinfo(np.int64).max
# Errors of gzip / bz2 on a truncated or damaged file (EOFError: it ends early).
DECOMPRESSION_ERRORS = (EOFError, OSError, zlib.error)
_READ_BYTES = 1 << 20


def decompression_error(path, err, offset, line):
    """The ValueError for a compressed file that cannot be read to its end.

    Parameters
    ----------
    path : str
        The file.
    err : Exception
        What gzip / bz2 raised (chained as the cause).
    offset : int
        Bytes of text decompressed before the failure.
    line : int
        The line being read at the failure (1-based).
    """
    what = "ends early (truncated?)" if isinstance(err, EOFError) else "is corrupt"
    return ValueError("%s, line %d: compressed data %s after %d bytes of text: %s"
                      % (path, line, what, offset, err))


def _fspath(path):
    try:
        return os.fsdecode(os.fspath(path))
    except TypeError:
        raise TypeError("expected a path (str or os.PathLike) or a list of paths, got %s"
                        % type(path).__name__) from None


def check_rereadable(path):
    """Refuse a pipe or device: the whole-file readers read a file again to name the line
    of an error (and the cache keys on its identity), which a pipe cannot give; its size
    of 0 made it an empty file."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # open() names what is wrong
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    kind = ("a pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device")
    raise ValueError("%s is %s, not a regular file: load_libsvm and LibSVMDataset read a "
                     "file more than once (again to name the line of an error); write it to "
                     "a file first, or read it with LibSVMStream, which reads it once"
                     % (path, kind))


# What compressed files start with: (magic bytes, format, the suffix that has them
# decompressed when read; None where none does).
_COMPRESSED_MAGIC = ((b"\x1f\x8b", "gzip", ".gz"), (b"BZh", "bzip2", ".bz2"),
                     (b"\xfd7zXZ\x00", "xz", None))


def check_not_compressed(path, head):
    """Raise a ValueError where ``head``, the first bytes of a file about to be parsed as
    text, are those of a compressed file: its name lacks the suffix (``.gz``, ``.bz2``) by
    which the readers decompress it, and the parser would report its bytes as a bad label.

    Parameters
    ----------
    path : str
        The file (named in the message).
    head : bytes
        Its first bytes (6 suffice).
    """
    head = bytes(head[:6])
    for magic, kind, suffix in _COMPRESSED_MAGIC:
        if not head.startswith(magic) or (kind == "bzip2" and head[3:4] not in b"123456789"):
            continue
        what = "%s looks %s-compressed (it starts with the bytes %s)" % (path, kind,
                                                                          magic.hex(" "))
        if suffix is None:
            raise ValueError("%s: decompress it first (only .gz and .bz2 files are decompressed "
                             "as they are read)" % what)
        raise ValueError("%s but its name does not end in %s: rename it to *%s (such files are "
                         "decompressed as they are read) or decompress it"
                         % (what, suffix, suffix))


@contextlib.contextmanager
def open_libsvm_buffer(path):
    """Yield the bytes of ``path`` as a buffer: memory-mapped, or decompressed for .gz/.bz2.

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    ValueError
        If it is a pipe or a device, not a regular file, or if it is compressed but
        its name does not say so (see :func:`check_not_compressed`).
    """
    path = _fspath(path)
    check_rereadable(path)
    lower = path.lower()
    if lower.endswith(".gz") or lower.endswith(".bz2"):
        opener = gzip.open if lower.endswith(".gz") else bz2.open
        pieces, offset = [], 0
        with opener(path, "rb") as f:
            while True:
                try:
                    # read1: what one step of decompression gives (tens of kB), kept
                    # when the next step fails, so the error's position is that close.
                    piece = f.read1(_READ_BYTES)
                except DECOMPRESSION_ERRORS as err:
                    line = 1 + sum(p.count(b"\n") for p in pieces)
                    raise decompression_error(path, err, offset, line) from err
                if not piece:
                    break
                pieces.append(piece)
                offset += len(piece)
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        del pieces
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
            check_not_compressed(path, mapped[:6])
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
    try:
        paths = list(paths)
    except TypeError:
        _fspath(paths)  # raises the "expected a path" TypeError
        raise
    paths = [_fspath(p) for p in paths]
    if not paths:
        raise ValueError("no file given: paths is an empty list")
    return paths


def check_size(name, value):
    """``value`` as a Python int if it is a positive integer (numpy's too), None for None;
    a ValueError naming ``name`` otherwise (bools are not sizes)."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError("%s must be a positive integer or None, got %r" % (name, value))
    if value > 2 ** 53:  # beyond any matrix; past int64, scipy raised a bare OverflowError
        raise ValueError("%s=%d is too large (at most 2^53)" % (name, value))
    return int(value)


def _check_zero_based(zero_based, allow_auto=True):
    """``zero_based`` as True, False or 'auto' (a NumPy bool becomes a bool).

    Anything else is refused, as scikit-learn's svmlight reader does: the
    readers compare with ``is False``, under which a 0 or 1 would silently mean
    the other index base.
    """
    if isinstance(zero_based, (bool, np.bool_)):
        return bool(zero_based)
    if allow_auto and isinstance(zero_based, str) and zero_based == "auto":
        return "auto"
    raise ValueError("zero_based must be True, False%s, got %r (%s)"
                     % (" or 'auto'" if allow_auto else "", zero_based, type(zero_based).__name__))


def load_libsvm(paths, num_features=None, zero_based="auto", dtype="float32", multilabel=False,
                *, allow_unsorted=True, allow_nonfinite=True, num_threads=None,
                return_zero_based=False):
    """Load LibSVM / svmlight files into a CSR matrix and labels.

    The result equals ``sklearn.datasets.load_svmlight_file`` (or
    ``load_svmlight_files`` concatenated) with the same arguments, but the
    parser runs in C++ on several threads. Differences, all deliberate:
    ``dtype`` is float32 by default (scikit-learn's is float64), a row with
    unsorted indices is sorted (scikit-learn raises; pass
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
    allow_nonfinite : bool
        Accept ``nan`` / ``inf`` values and labels, as scikit-learn does
        (default); if False, the first one is a ValueError naming its file
        and line. Estimators reject such input later, without a line: pass
        False, or use :func:`locate_row`, to tell the user where it is.
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
        ``>= num_features``, a negative index, index 0 with
        ``zero_based=False``, an index that leaves no room for the number of
        columns in int64 (2^63 - 1 with zero-based indices), a non-finite
        value with ``allow_nonfinite=False``, or a compressed file that is
        truncated or corrupt (its position named).

    Examples
    --------
    >>> X, y = load_libsvm("heart_scale")  # doctest: +SKIP
    >>> X.shape  # doctest: +SKIP
    (270, 13)
    >>> X, y, zero_based = load_libsvm("heart_scale", return_zero_based=True)  # doctest: +SKIP
    >>> zero_based  # heart_scale's indices start at 1  # doctest: +SKIP
    False
    """
    zero_based = _check_zero_based(zero_based)
    num_features = check_size("num_features", num_features)
    paths = _as_path_list(paths)
    chunks = []
    for path in paths:
        start = time.perf_counter()
        with open_libsvm_buffer(path) as buf:
            try:
                chunks.append(parse_libsvm_bytes(
                    buf, dtype=dtype, multilabel=multilabel, reject_zero=zero_based is False,
                    allow_unsorted=allow_unsorted, num_threads=num_threads, source=path))
            except ValueError as err:
                if str(err).startswith("%s, line 1: " % path) and xc_header(buf)[0] is not None:
                    raise ValueError("%s: the line is an extreme-classification header "
                                     "('num_rows num_features num_labels'), so the file holds "
                                     "multi-label data, which gluon_sparse.data.load_multilabel "
                                     "reads (and gluon-sparse train --multilabel)" % err) from None
                raise
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
        if largest >= _INT64_MAX:
            path, line, index = _first_index_at_least(paths, chunks, _INT64_MAX + shift)
            raise ValueError("%s, line %d: feature index %d is too large: with zero-based "
                             "indices the matrix would need 2^63 columns, more than int64 can "
                             "count" % (path, line, index))
        num_features = max(largest + 1, 1) if any(c.indices.size for c in chunks) else 1
    elif largest >= num_features:
        path, line, index = _first_index_at_least(paths, chunks, num_features + shift)
        raise ValueError("%s, line %d: feature index %d is out of range for num_features=%d%s"
                         % (path, line, index, num_features,
                            " (indices are one-based, so the largest allowed is %d)" % num_features
                            if shift else ""))
    if not allow_nonfinite:
        _check_finite(paths, chunks)
    X = _concatenate(chunks, shift, num_features)
    if multilabel:
        y = [t for c in chunks for t in c.multilabel_tuples()]
    else:
        y = chunks[0].labels if len(chunks) == 1 else np.concatenate([c.labels for c in chunks])
    if return_zero_based:
        return X, y, not one_based
    return X, y


def _stacked_indptr(indptrs, index_dtype):
    """The row pointers of CSR blocks stacked vertically, in ``index_dtype``.

    Each block's pointers are converted before the offset is added: a file's
    own int32 pointers plus an offset past 2^31 - 1 would wrap (NumPy < 2 keeps
    an int32 array plus a scalar that fits in int32 in int32).
    """
    indptr = np.zeros(sum(p.size - 1 for p in indptrs) + 1, dtype=index_dtype)
    row = 0
    for block in indptrs:
        rows = block.size - 1
        indptr[row + 1:row + 1 + rows] = block[1:].astype(index_dtype) + indptr[row]
        row += rows
    return indptr


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
        indptr = _stacked_indptr([c.indptr for c in chunks], index_dtype)
    if num_features > _INT32_MAX and indices.dtype != np.int64:
        indices, indptr = indices.astype(np.int64), indptr.astype(np.int64)
    X = sp.csr_matrix((values, indices, indptr), shape=(num_rows, num_features), copy=False)
    X.has_sorted_indices = True  # the parser sorted every row
    return X


def xc_header(buf):
    """``(tokens, body offset)`` when the first line of ``buf`` is an extreme-classification
    header (exactly three whole numbers: rows, features, labels), else ``(None, 0)``.

    No LibSVM data line has that form (its features are ``index:value``), so a
    header is told from data by its form alone.
    """
    end = buf.find(b"\n")
    first = bytes(buf[:end if end >= 0 else len(buf)])
    tokens = first.split()
    if len(tokens) != 3 or not all(t.isdigit() for t in tokens):
        return None, 0
    return tokens, (end + 1 if end >= 0 else len(buf))


@contextlib.contextmanager
def _data_rows(path):
    """``(bytes, line base)`` of the data rows of ``path``: after an XC header (which is
    not a row), its line counted."""
    with open_libsvm_buffer(path) as buf:
        header, offset = xc_header(buf)
        body = memoryview(buf)[offset:] if offset else buf
        try:
            yield body, 1 if header else 0
        finally:
            del body


def _line_of_row(path, row):
    with _data_rows(path) as (body, line_base):
        return row_line_number(body, row, line_base=line_base)


def _first_index_at_least(paths, chunks, raw_limit):
    """``(path, line, index)`` of the first index (as written) ``>= raw_limit``."""
    for path, chunk in zip(paths, chunks):
        found = chunk.first_index_at_least(raw_limit)
        if found:
            return path, _line_of_row(path, found[0]), found[1]
    raise AssertionError("no index >= %d" % raw_limit)


def _check_finite(paths, chunks):
    """Raise a ValueError naming the file and line of the first nan / inf (raw chunks)."""
    for path, chunk in zip(paths, chunks):
        value = chunk.first_nonfinite_value()
        found = [value] if value else []
        bad = np.flatnonzero(~np.isfinite(chunk.labels))
        if bad.size:
            position = int(bad[0])
            row = (position if chunk.label_ptr is None
                   else row_of_entry(chunk.label_ptr, position))
            found.append((row, "label %r" % float(chunk.labels[position])))
        if found:
            row, what = min(found)
            raise ValueError("%s, line %d: non-finite %s (allow_nonfinite=False)"
                             % (path, _line_of_row(path, row), what))


def rows_per_file(paths):
    """The number of data rows of each of ``paths`` (an XC header is not one): where each
    file's rows start in what :func:`load_libsvm` or ``load_multilabel`` read from them."""
    counts = []
    for path in _as_path_list(paths):
        with _data_rows(path) as (body, _):
            counts.append(count_rows(body))
    return counts


def locate_row(paths, row):
    """The file and line of row ``row`` of what :func:`load_libsvm` read from ``paths``.

    For messages about a row found wrong after loading (an estimator's
    "Input X contains NaN", a label it cannot use): name the line to fix.

    Parameters
    ----------
    paths : str, os.PathLike or list of them
        The files, as given to :func:`load_libsvm`.
    row : int
        Row of the loaded matrix (0-based; negative counts from the end).

    Returns
    -------
    (str, int)
        The file and its 1-based line number.

    Raises
    ------
    IndexError
        If the files hold fewer rows.

    Examples
    --------
    >>> X, y = load_libsvm(["a.libsvm", "b.libsvm"])  # doctest: +SKIP
    >>> locate_row(["a.libsvm", "b.libsvm"], 120)  # doctest: +SKIP
    ('b.libsvm', 23)
    """
    paths = _as_path_list(paths)
    counts = rows_per_file(paths)
    total = sum(counts)
    if not -total <= row < total:
        raise IndexError("row %d is out of range: %s hold %d rows"
                         % (row, ", ".join(paths), total))
    row %= total
    for path, count in zip(paths, counts):
        if row < count:
            return path, _line_of_row(path, row)
        row -= count
    raise AssertionError("unreachable")
