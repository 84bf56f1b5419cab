"""Multi-label data: LibSVM with label lists and the extreme-classification repository format.

Two text formats, both parsed by the native LibSVM parser:

* multi-label LibSVM, one example a line: ``3,17,204 f:v f:v ...`` (comma
  separated label ids, then the features; a line starting with a space has
  no label);
* the extreme-classification repository's format (Bhatia et al.): the same
  lines after a header ``num_rows num_features num_labels``, features and
  labels zero-based.

Labels are non-negative integer ids and come back as a CSR *indicator*
matrix ``Y`` of shape ``(num_rows, num_labels)`` (one 1.0 per positive),
which is what :class:`~gluon_sparse.nn.SampledOutput` and scikit-learn's
multi-label estimators take. Errors name the file and the line: a label that
is not an integer id or is out of range, a row without labels (unless
``allow_empty=True``), a feature index beyond the header's, and a header that
disagrees with the rows of the file.
"""
import logging
import numbers as numbers_abc

import numpy as np
import scipy.sparse as sp

from .._sparse_entries import first_not_binary, row_of_entry
from .batchify import CSRBatchify
from .libsvm import (_as_path_list, _check_zero_based, check_size, open_libsvm_buffer,
                     parse_libsvm_bytes, row_line_number, xc_header)
from .sampler import BatchSampler, PartitionSampler

__all__ = ["load_multilabel", "MultiLabelDataset", "MultiLabelLoader", "labels_to_indicator"]

logger = logging.getLogger(__name__)


# Label ids are parsed as float64 and must be integers it holds exactly.
_MAX_LABEL_ID = 2 ** 53
# A header's sizes: the same bound (a label id is below num_labels), also far beyond any
# matrix a machine holds, and within int64 (scipy's shapes overflowed past it).
_MAX_HEADER_SIZE = _MAX_LABEL_ID


def _read_header(buf, path):
    """``((num_rows, num_features, num_labels), body offset)`` if the file starts with an XC header."""
    tokens, offset = xc_header(buf)
    if tokens is None:
        return None, 0
    header = tuple(int(t) for t in tokens)
    first = b" ".join(tokens).decode()
    if header[1] == 0 or header[2] == 0:
        raise ValueError("%s, line 1: the header %r declares %d features and %d labels; both "
                         "must be positive" % (path, first, header[1], header[2]))
    if max(header) > _MAX_HEADER_SIZE:
        raise ValueError("%s, line 1: the header %r declares a size above 2^53 (rows, features "
                         "and labels must be below it)" % (path, first))
    return header, offset


def _label_error(path, body, line_base, row, message):
    return ValueError("%s, line %d: %s" % (path, row_line_number(body, row, line_base), message))


def _parse_file(path, fmt, dtype, reject_zero):
    """(chunk, header, first line number) of one file; ``reject_zero``: feature index 0 is an
    error (one-based indices)."""
    with open_libsvm_buffer(path) as buf:
        header, offset = _read_header(buf, path) if fmt in ("auto", "xc") else (None, 0)
        if fmt == "xc" and header is None:
            raise ValueError("%s, line 1: expected the extreme-classification header "
                             "'num_rows num_features num_labels'" % path)
        body = memoryview(buf)[offset:] if offset else buf
        line_base = 1 if header else 0
        chunk = parse_libsvm_bytes(body, dtype=dtype, multilabel=True, reject_zero=reject_zero,
                                   source=path, line_base=line_base)
        del body
    return chunk, header, line_base


def _row_error(path, header, line_base, row, message):
    """A ValueError naming the file and the line of data row ``row``."""
    with open_libsvm_buffer(path) as buf:
        offset = _read_header(buf, path)[1] if header else 0
        return _label_error(path, memoryview(buf)[offset:], line_base, row, message)


def _label_rows(chunk):
    return np.repeat(np.arange(chunk.num_rows), np.diff(chunk.label_ptr))


def _check_label_ids(path, chunk, header, line_base):
    """Every label an integer id in [0, 2^53) (before any size is derived from them)."""
    labels = chunk.labels
    bad = np.flatnonzero(~((labels >= 0) & (labels < _MAX_LABEL_ID) & (labels == np.floor(labels))))
    if bad.size:
        raise _row_error(path, header, line_base, int(_label_rows(chunk)[bad[0]]),
                         "label %r is not a label id (an integer in [0, 2^53))"
                         % float(labels[bad[0]]))


def _check_finite(path, chunk, header, line_base):
    """No NaN or infinite feature value (``allow_nonfinite=False``)."""
    found = chunk.first_nonfinite_value()
    if found:
        raise _row_error(path, header, line_base, found[0], "non-finite " + found[1])


def _limit(given, header, column, name):
    """``(size, its name in messages)``: the smaller of the size given and the header's."""
    if header and header[column] < given:
        return header[column], "%s=%d declared by the header (line 1)" % (name, header[column])
    return given, "%s=%d" % (name, given)


def _check_chunk(path, chunk, header, line_base, shift, num_features, num_labels, allow_empty):
    """Validate labels and feature indices of a parsed file against the sizes given and the
    sizes its header declares."""
    num_features, features_name = _limit(num_features, header, 1, "num_features")
    def error(row, message):
        return _row_error(path, header, line_base, row, message)

    if header and header[0] != chunk.num_rows:
        raise ValueError("%s, line 1: the header declares %d rows but the file has %d data rows"
                         % (path, header[0], chunk.num_rows))
    if num_labels is not None:  # None: labels unchecked (load_multilabel's check_labels)
        num_labels, labels_name = _limit(num_labels, header, 2, "num_labels")
        counts = np.diff(chunk.label_ptr)
        bad = np.flatnonzero(chunk.labels >= num_labels)  # ids checked by _check_label_ids
        if bad.size:
            raise error(int(_label_rows(chunk)[bad[0]]), "label %d is out of range for %s"
                        % (chunk.labels[bad[0]], labels_name))
        if not allow_empty and np.any(counts == 0):
            raise error(int(np.argmax(counts == 0)), "the row has no label (pass "
                                                     "allow_empty=True to keep rows without "
                                                     "labels)")
    found = chunk.first_index_at_least(num_features + shift)
    if found:
        raise error(found[0], "feature index %d is out of range for %s"
                    % (found[1], features_name))


def load_multilabel(paths, num_features=None, num_labels=None, zero_based="auto",
                    dtype="float32", format="auto", allow_empty=False, return_zero_based=False,
                    *, allow_nonfinite=True, check_labels=True):
    """Read multi-label LibSVM or extreme-classification files into ``(X, Y)``.

    Parameters
    ----------
    paths : str, os.PathLike or list of them
        Files, concatenated row-wise (``.gz`` / ``.bz2`` are decompressed).
    num_features, num_labels : int, optional
        Widths of ``X`` and ``Y``; default: the header's (XC format), else the
        largest index + 1. Larger indices are an error naming file and line.
    zero_based : bool or 'auto'
        Feature index base. ``'auto'``: zero-based for XC files (the format's
        convention), else scikit-learn's rule (one-based if no index 0 occurs).
        Label ids are taken as written.
    dtype : {'float32', 'float64'}
        dtype of ``X`` and ``Y``.
    format : {'auto', 'libsvm', 'xc'}
        ``'auto'`` reads a first line of exactly three integers as the XC header.
    allow_empty : bool, default False
        Keep rows without labels (an error otherwise).
    return_zero_based : bool, default False
        Also return the feature index base used (what ``'auto'`` resolved to).
    allow_nonfinite : bool, default True
        With False, a NaN or infinite feature value is an error naming the file
        and the line.
    check_labels : bool, default True
        With False (for prediction, which does not use them) the labels are
        neither checked nor returned: ``Y`` is None, and a test file labelled
        ``-1``/``+1`` reads as well as one labelled with ids.

    Returns
    -------
    X : scipy.sparse.csr_matrix of shape (num_rows, num_features)
    Y : scipy.sparse.csr_matrix of shape (num_rows, num_labels), or None
        The label indicator (sorted indices, values 1); None with
        ``check_labels=False``.
    zero_based : bool
        Only with ``return_zero_based=True``.

    Raises
    ------
    ValueError
        On malformed text or inconsistent sizes, naming the file and the line.
    """
    zero_based = _check_zero_based(zero_based)
    num_features = check_size("num_features", num_features)
    num_labels = check_size("num_labels", num_labels)
    if format not in ("auto", "libsvm", "xc"):
        raise ValueError("format must be 'auto', 'libsvm' or 'xc', got %r" % (format,))
    paths = _as_path_list(paths)
    parsed = [(path,) + _parse_file(path, format, dtype, zero_based is False) for path in paths]
    for path, chunk, header, line_base in parsed:
        if check_labels:
            _check_label_ids(path, chunk, header, line_base)
        if not allow_nonfinite:
            _check_finite(path, chunk, header, line_base)
    headers = [p[2] for p in parsed if p[2]]
    if headers and len(headers) != len(parsed):
        raise ValueError("%s mixes files with and without the XC header" % (paths,))
    chunks = [p[1] for p in parsed]
    if zero_based == "auto":
        one_based = not headers and all(c.indices.size and c.min_index > 0 for c in chunks)
    else:
        one_based = not zero_based
    shift = 1 if one_based else 0
    if num_features is None:
        num_features = max([h[1] for h in headers] or
                           [max(c.max_index for c in chunks) - shift + 1, 1])
    if num_labels is None and check_labels:
        num_labels = max([h[2] for h in headers] or
                         [int(max((c.labels.max() for c in chunks if c.labels.size),
                                  default=-1)) + 1, 1])
    for path, chunk, header, line_base in parsed:
        _check_chunk(path, chunk, header, line_base, shift, num_features,
                     num_labels if check_labels else None, allow_empty)
    X = sp.vstack([sp.csr_matrix((c.values, c.indices.astype(np.int64) - shift, c.indptr),
                                 shape=(c.num_rows, num_features)) for c in chunks],
                  format="csr", dtype=dtype)
    Y = None
    if check_labels:
        Y = sp.vstack([sp.csr_matrix((np.ones(c.labels.size, dtype=dtype),
                                      c.labels.astype(np.int64), c.label_ptr),
                                     shape=(c.num_rows, num_labels)) for c in chunks],
                      format="csr", dtype=dtype)
        Y.sum_duplicates()  # "3,3" is one positive
        Y.data[:] = 1
    logger.debug("read %d rows, %d features, %s labels from %s", X.shape[0], num_features,
                 num_labels, paths)
    if return_zero_based:
        return X, Y, not one_based
    return X, Y


def _whole_label_ids(values, lengths):
    """``values`` as int64 label ids; a value that is not a whole number (2.7 would
    have become label 2) is a ValueError naming its row."""
    ids = np.asarray(values) if values else np.zeros(0, np.int64)
    if ids.dtype.kind in "iu":
        return ids.astype(np.int64)
    try:
        numbers = ids.astype(np.float64)
    except (TypeError, ValueError):  # strings: find the first one that is not a number
        numbers = np.array([float(v) if isinstance(v, numbers_abc.Real) else np.nan
                            for v in values])
    whole = np.isfinite(numbers) & (numbers == np.floor(numbers)) & (ids.dtype.kind != "b")
    if not whole.all():
        first = int(np.flatnonzero(~whole)[0])
        row = row_of_entry(np.concatenate([[0], np.cumsum(lengths)]), first)
        raise ValueError("row %d: label %r is not a label id (a whole number >= 0)"
                         % (row, values[first]))
    return numbers.astype(np.int64)


def labels_to_indicator(label_lists, num_labels=None, dtype="float32"):
    """A CSR indicator ``(n, num_labels)`` from a list of label-id lists.

    Parameters
    ----------
    label_lists : sequence of sequences of int
        The positive label ids of each row (may be empty).
    num_labels : int, optional
        Default: the largest id + 1.
    dtype : str or numpy.dtype, default 'float32'
        Data type of the indicator's stored values, each 1 (an id given twice
        in a row is stored once).
    """
    lengths = [len(labels) for labels in label_lists]
    ids = _whole_label_ids([l for labels in label_lists for l in labels], lengths)
    if ids.size and ids.min() < 0:
        raise ValueError("label ids must be >= 0, got %d" % ids.min())
    if num_labels is None:
        num_labels = int(ids.max()) + 1 if ids.size else 1
    elif ids.size and ids.max() >= num_labels:
        raise ValueError("label id %d is out of range for num_labels=%d" % (ids.max(), num_labels))
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    Y = sp.csr_matrix((np.ones(ids.size, dtype=dtype), ids, indptr),
                      shape=(len(lengths), num_labels))
    Y.sum_duplicates()
    Y.data[:] = 1
    return Y


def _as_indicator(label):
    """``label`` as a CSR matrix if it is an indicator (sparse, or a 2-D numeric
    array), None if it is label lists."""
    if sp.issparse(label):
        return sp.csr_matrix(label)
    if isinstance(label, (list, tuple)):
        return None
    array = np.asarray(label)
    if array.ndim == 2 and array.dtype.kind in "biuf":
        return sp.csr_matrix(array)
    return None


def _checked_indicator(Y, num_labels):
    """A 0/1 indicator, or a ValueError naming the row and label of the first other value."""
    bad = first_not_binary(Y.data)
    if bad is not None:
        raise ValueError("a label indicator holds only 0 and 1; row %d has %r for label %d"
                         % (row_of_entry(Y.indptr, bad), Y.data[bad].item(), Y.indices[bad]))
    if num_labels is not None and num_labels != Y.shape[1]:
        raise ValueError("num_labels=%d but the label indicator has %d columns"
                         % (num_labels, Y.shape[1]))
    return Y


class MultiLabelDataset:
    """Samples ``X`` (CSR) with a CSR label indicator ``Y``.

    Parameters
    ----------
    data : scipy.sparse matrix
        ``(n, num_features)``.
    label : scipy.sparse matrix, 2-D array, or list of label-id lists
        ``(n, num_labels)`` indicator of 0 and 1, sparse or dense (as
        scikit-learn's ``MultiLabelBinarizer`` returns it), or one list of ids
        per row (a list of lists is always read as ids).
    num_labels : int, optional
        For list labels: the number of labels (default: largest id + 1). For an
        indicator: its width, checked.
    """

    def __init__(self, data, label, num_labels=None):
        from .dataset import _to_csr
        self.data = _to_csr(data)  # never reorders the caller's matrix
        indicator = _as_indicator(label)
        if indicator is None:
            self.label = labels_to_indicator(label, num_labels, dtype=self.data.dtype)
        else:
            self.label = _checked_indicator(indicator, num_labels).astype(self.data.dtype)
        if self.label.shape[0] != self.data.shape[0]:
            raise ValueError("the label indicator has %d rows but data has %d"
                             % (self.label.shape[0], self.data.shape[0]))

    @classmethod
    def from_files(cls, paths, **kwargs):
        """Read ``paths`` with :func:`load_multilabel` (same keyword arguments)."""
        return cls(*load_multilabel(paths, **kwargs))

    @property
    def num_features(self):
        """Width of ``data``."""
        return self.data.shape[1]

    @property
    def num_labels(self):
        """Width of ``label``."""
        return self.label.shape[1]

    def __len__(self):
        return self.data.shape[0]

    def __getitem__(self, idx):
        if not -len(self) <= idx < len(self):
            raise IndexError("index %d out of range for a dataset of %d samples" % (idx, len(self)))
        return self.data[idx], self.label[idx]


class MultiLabelLoader:
    """Batches ``(x, y)`` of a :class:`MultiLabelDataset`: ``x`` and ``y`` CSRNDArrays.

    Parameters
    ----------
    dataset : MultiLabelDataset
    batch_size : int
    shuffle : bool, default False
    seed : int, optional
        Seed of the shuffling (a different order each epoch).
    last_batch : {'keep', 'discard'}
    ctx : Context, optional
    """

    def __init__(self, dataset, batch_size, shuffle=False, seed=None, last_batch="keep",
                 ctx=None):
        self._dataset = dataset
        sampler = PartitionSampler(len(dataset), shuffle=shuffle, seed=seed)
        self._batches = BatchSampler(sampler, batch_size, last_batch)
        self._x = CSRBatchify(dataset.data)
        self._y = CSRBatchify(dataset.label)
        self._ctx = ctx

    def __len__(self):
        return len(self._batches)

    def __iter__(self):
        for indices in self._batches:
            x, _ = self._x(indices, self._ctx)
            y, _ = self._y(indices, self._ctx)
            yield x, y
