"""Parameter files proportional to what was learned: untouched rows left to the initialiser.

A sparse first layer has a weight row per feature, and a batch moves only the
rows of its features: after training on a few thousand rows of a million
features almost every row still holds its initial value. Those rows are not
stored. A parameter whose rows mostly equal the values the initialiser
regenerates is stored as a ``row_sparse`` array of the rows that differ (bit
for bit); loading regenerates the initial values and puts the stored rows over
them, which gives back the trained array exactly.

A CRC-32 of the regenerated initial values is stored with each such parameter
and checked at load: should the initialiser produce other numbers (another
seed, initializer or library version), loading fails with a clear error
instead of returning a different model.

Memory: the initial values are never needed whole. They come as a stream of
``(name, first_row, rows)`` blocks (*initial rows*), compared with the
trained rows block by block at save and checked (CRC-32, updated block by
block) at load, so a save or load needs the model plus one block of rows.
Both the estimators' model directories (:mod:`gluon_sparse.sklearn`) and
:func:`gluon_sparse.nn.save_compact_parameters` use this module.
"""
import zlib

import mxnet as mx
import numpy as np

from ._sparse_entries import first_outside

__all__ = ["compact_param_arrays", "expand_param_arrays", "row_blocks", "block_rows",
           "ndarrays_from_bytes", "BLOCK_BYTES"]

# Smaller parameters are always stored whole: the saving is not worth a regeneration.
_MIN_ELEMENTS = 4096
# Rows per block of initial values: bounded memory, large enough for numpy to run at full speed.
BLOCK_BYTES = 16 << 20


def block_rows(shape, dtype):
    """Rows of an array of ``shape`` and ``dtype`` per block of about :data:`BLOCK_BYTES`."""
    row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * np.dtype(dtype).itemsize
    return max(1, BLOCK_BYTES // max(1, row_bytes))


def row_blocks(array):
    """``(first_row, numpy rows)`` blocks of ``array`` (numpy array or NDArray), in order."""
    rows = array.shape[0]
    step = block_rows(array.shape, array.dtype)
    for start in range(0, rows, step):
        block = array[start:min(rows, start + step)]
        yield start, block.asnumpy() if isinstance(block, mx.nd.NDArray) else block


def _bits(array):
    """``array`` viewed as unsigned integers of its width: equal bits, equal values (NaN, -0.0)."""
    return np.ascontiguousarray(array).view("u%d" % array.dtype.itemsize)


def _crc(block, previous=0):
    return zlib.crc32(np.ascontiguousarray(block).view(np.uint8).reshape(-1), previous)


class _Comparison:
    """The rows of one trained parameter that differ from its initial rows, block by block."""

    def __init__(self, value):
        self.value = value
        self.rows = value.shape[0]
        row_bytes = int(np.prod(value.shape[1:], dtype=np.int64)) * np.dtype(value.dtype).itemsize
        # Rows plus their int64 indices, against the whole array: at least halved, or whole.
        self.limit = (self.rows * row_bytes // 2) // (row_bytes + 8)
        self.covered, self.crc, self.count = 0, 0, 0
        self.indices, self.changed = [], []
        self.usable = True

    def add(self, start, initial):
        value = self.value
        stop = start + len(initial)
        if (start != self.covered or stop > self.rows or initial.dtype != np.dtype(value.dtype)
                or initial.shape[1:] != value.shape[1:]):
            self.usable = False  # not this parameter's initial values: store it whole
            return
        trained = value[start:stop]
        if isinstance(trained, mx.nd.NDArray):
            trained = trained.asnumpy()
        differ = np.flatnonzero((_bits(trained) != _bits(initial)).reshape(len(initial), -1)
                                .any(axis=1))
        self.count += len(differ)
        if self.count > self.limit:
            self.usable, self.indices, self.changed = False, None, None
            return
        self.indices.append(differ + start)
        self.changed.append(trained[differ])
        self.crc = _crc(initial, self.crc)
        self.covered = stop

    def row_sparse(self):
        indices = np.concatenate(self.indices).astype(np.int64)
        rows = np.concatenate(self.changed).reshape((len(indices),) + self.value.shape[1:])
        return mx.nd.sparse.row_sparse_array((rows, indices), shape=self.value.shape,
                                             dtype=self.value.dtype)


def _whole(value):
    if isinstance(value, mx.nd.NDArray):
        return value.as_in_context(mx.cpu())  # saved like save_parameters: from the CPU
    return mx.nd.array(value, dtype=value.dtype)


def compact_param_arrays(arrays, initial_rows):
    """The NDArrays to save for ``arrays`` and the description of what was left out.

    Parameters
    ----------
    arrays : dict of str to numpy.ndarray or NDArray
        The trained parameters (read a block of rows at a time).
    initial_rows : iterable of (str, int, numpy.ndarray)
        The values they started from, as the initialiser regenerates them:
        ``(name, first_row, rows)`` blocks, each parameter's in row order
        (parameters missing or incomplete here are stored whole).

    Returns
    -------
    to_save : dict of str to NDArray
        For ``mx.nd.save``: dense arrays, and ``row_sparse`` ones holding only
        the rows that differ from their initial values.
    left_out : dict
        ``{name: {"crc32": checksum of the initial values}}`` for the
        ``row_sparse`` ones; goes to the file's description.
    """
    comparisons = {name: _Comparison(value) for name, value in arrays.items()
                   if len(value.shape) >= 2 and value.shape[0] > 0
                   and int(np.prod(value.shape)) >= _MIN_ELEMENTS}
    for name, start, initial in initial_rows:
        comparison = comparisons.get(name)
        if comparison is not None and comparison.usable:
            comparison.add(start, initial)
    to_save, left_out = {}, {}
    for name, value in arrays.items():
        comparison = comparisons.get(name)
        if comparison is None or not comparison.usable or comparison.covered != comparison.rows:
            to_save[name] = _whole(value)
            continue
        to_save[name] = comparison.row_sparse()
        left_out[name] = {"crc32": comparison.crc}
    return to_save, left_out


class DamagedFile(ValueError):
    """A parameter file whose contents contradict themselves (not a mismatch with the net)."""


def expand_param_arrays(loaded, left_out, initial_rows, params_path):
    """Whole numpy arrays from what :func:`compact_param_arrays` saved.

    Parameters
    ----------
    loaded : dict of str to NDArray
        What ``mx.nd.load`` gave.
    left_out : dict
        The ``left_out`` description saved with them.
    initial_rows : callable
        Returns the initial rows as :func:`compact_param_arrays` takes them
        (called only if something was left out; blocks of other parameters
        are skipped).
    params_path : str
        For messages.

    Returns
    -------
    dict of str to numpy.ndarray

    Raises
    ------
    ValueError
        If a left-out parameter cannot be regenerated as it was at save time.
    """
    if not isinstance(left_out, dict):
        raise DamagedFile("%s is damaged: the description of the rows left to the initialiser "
                          "reads %r" % (params_path, left_out))
    for name, entry in left_out.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("crc32"), int)):
            raise DamagedFile("%s is damaged: the description of the rows of %r left to the "
                              "initialiser reads %r" % (params_path, name, entry))
    # Rows of these come from the initialiser. Any other row_sparse array is read as
    # MXNet reads it (load_parameters into a dense parameter): its absent rows are
    # zero. That is the file of a row_sparse-weight layer (save_parameters, or a
    # compact file, which stores such a weight whole), loaded into the plain layer.
    sparse = {name: stored for name, stored in loaded.items() if stored.stype == "row_sparse"
              and name in left_out}
    arrays, covered, crcs = {}, {}, {}
    if sparse:
        for name, start, initial in initial_rows():
            stored = sparse.get(name)
            if stored is None or covered.get(name, 0) < 0:
                continue
            expected = covered.get(name, 0)
            if (start != expected or initial.shape[1:] != stored.shape[1:]
                    or start + len(initial) > stored.shape[0]):
                covered[name] = -1  # reported below as another shape
                continue
            if start == 0 and len(initial) == stored.shape[0]:
                arrays[name] = initial.astype(stored.dtype, copy=False)  # whole: no copy
            else:
                if name not in arrays:
                    arrays[name] = np.empty(stored.shape, dtype=stored.dtype)
                arrays[name][start:start + len(initial)] = initial
            crcs[name] = _crc(arrays[name][start:start + len(initial)], crcs.get(name, 0))
            covered[name] = start + len(initial)
    for name, stored in loaded.items():
        if name not in sparse:
            arrays[name] = stored.asnumpy()
            continue
        rows = covered.get(name)
        if rows != stored.shape[0] or crcs.get(name) != left_out[name]["crc32"]:
            arrays.pop(name, None)
            raise ValueError("%s stores only the trained rows of %r, and its other rows cannot be "
                             "regenerated as they were saved (initial values %s)"
                             % (params_path, name, "unknown" if rows is None else
                                "of another shape" if rows != stored.shape[0] else
                                "with another checksum"))
        value = arrays[name]
        if not value.flags.writeable:
            value = arrays[name] = value.copy()
        indices = stored.indices.asnumpy()
        bad = first_outside(indices, stored.shape[0])
        if bad is not None:
            arrays.pop(name, None)
            raise DamagedFile("%s is damaged: %r stores row %d of a weight of %d rows"
                              % (params_path, name, indices[bad], stored.shape[0]))
        value[indices] = stored.data.asnumpy()
    return arrays


def ndarrays_from_bytes(buffer, params_path):
    """``{name: NDArray}`` from the bytes of an MXNet ``.params`` file.

    Raises
    ------
    ValueError
        One line naming ``params_path`` and the cause, if the bytes are not a
        whole parameter file of named arrays.
    """
    try:
        loaded = mx.nd.load_frombuffer(buffer)
    except mx.base.MXNetError as err:
        raise ValueError("%s could not be read: %s"
                         % (params_path, _mxnet_load_cause(err))) from err
    except UnicodeDecodeError as err:  # a damaged byte in a parameter's name
        raise DamagedFile("%s is damaged: a parameter name is not text (%s)"
                          % (params_path, err)) from err
    if not isinstance(loaded, dict):
        raise ValueError("%s holds unnamed arrays, not a network's parameters" % params_path)
    for name, array in loaded.items():
        try:  # a damaged header's shape fails only when read (sizes past 2^31, negative dims)
            array.shape  # noqa: B018
            if array.stype == "row_sparse":
                array.indices.shape  # noqa: B018
        except mx.base.MXNetError as err:
            raise DamagedFile("%s is damaged: the shape of %r cannot be read (%s)"
                              % (params_path, name, _mxnet_load_cause(err))) from err
    return loaded


def _mxnet_load_cause(err):
    """What went wrong in ``mx.nd.load``, in words, on one line.

    MXNet's message is a C++ traceback whose last line is a failed check.
    """
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    check = lines[-1].replace("MXNetError:", "").strip() if lines else ""
    if "Invalid NDArray file format" in check:
        return "not an MXNet parameter file (its header is not MXNet's)"
    if "buffer_size_" in check:  # dmlc's MemoryFixedSizeStream read past the end
        return "the file is truncated (it ends before the arrays its header announces)"
    return "MXNet cannot parse it (%s)" % (check or type(err).__name__)
