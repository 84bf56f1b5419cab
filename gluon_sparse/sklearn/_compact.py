"""Parameter files proportional to what was learned: untouched rows left to the initialiser.

A sparse first layer has a weight row per feature, and a batch moves only the
rows of its features: after training on a few thousand rows of a million
features almost every row still holds its initial value. Those rows are not
stored. A parameter whose rows mostly equal the values the initialiser
regenerates from the saved seed is stored as a ``row_sparse`` array of the
rows that differ (bit for bit); loading regenerates the initial values and
puts the stored rows over them, which gives back the trained array exactly.

A CRC-32 of the regenerated initial values is stored with each such
parameter and checked at load: should the initialiser ever produce other
numbers (another library version), loading fails with a clear error instead
of returning a different model.

Files stay MXNet's ``nd.save`` format under the same names; a plain
``mx.nd.load`` reads the differing rows and zeros elsewhere.
"""
import zlib

import mxnet as mx
import numpy as np

__all__ = ["compact_param_arrays", "expand_param_arrays"]

# Smaller parameters are always stored whole: the saving is not worth a regeneration.
_MIN_ELEMENTS = 4096


def _bits(array):
    """``array`` viewed as unsigned integers of its width: equal bits, equal values (NaN, -0.0)."""
    return np.ascontiguousarray(array).view("u%d" % array.dtype.itemsize)


def _checksum(array):
    return zlib.crc32(np.ascontiguousarray(array).view(np.uint8).reshape(-1))


def compact_param_arrays(arrays, initial):
    """The NDArrays to save for ``arrays`` and the description of what was left out.

    Parameters
    ----------
    arrays : dict of str to numpy.ndarray
        The trained parameters.
    initial : dict of str to numpy.ndarray
        The values they started from, as the initialiser regenerates them
        (parameters missing here are stored whole).

    Returns
    -------
    to_save : dict of str to NDArray
        For ``mx.nd.save``: dense arrays, and ``row_sparse`` ones holding only
        the rows that differ from ``initial``.
    left_out : dict
        ``{name: {"crc32": checksum of the initial values}}`` for the
        ``row_sparse`` ones; goes to the model's description.
    """
    to_save, left_out = {}, {}
    for name, value in arrays.items():
        start = initial.get(name)
        if (start is None or start.shape != value.shape or start.dtype != value.dtype
                or value.ndim < 2 or value.size < _MIN_ELEMENTS):
            to_save[name] = mx.nd.array(value, dtype=value.dtype)
            continue
        rows = value.shape[0]
        changed = np.flatnonzero((_bits(value) != _bits(start)).reshape(rows, -1).any(axis=1))
        # Rows plus their int64 indices, against the whole array: at least halved, or whole.
        if len(changed) * (value.nbytes // rows + 8) > value.nbytes // 2:
            to_save[name] = mx.nd.array(value, dtype=value.dtype)
            continue
        to_save[name] = mx.nd.sparse.row_sparse_array(
            (value[changed], changed.astype(np.int64)), shape=value.shape, dtype=value.dtype)
        left_out[name] = {"crc32": _checksum(start)}
    return to_save, left_out


def expand_param_arrays(loaded, left_out, regenerate, params_path):
    """Whole numpy arrays from what :func:`compact_param_arrays` saved.

    Parameters
    ----------
    loaded : dict of str to NDArray
        What ``mx.nd.load`` gave.
    left_out : dict
        The ``left_out`` description saved with them.
    regenerate : callable
        Returns the initial values ``{name: numpy array}`` (called only if
        something was left out).
    params_path : str
        For messages.

    Raises
    ------
    ValueError
        If a left-out parameter cannot be regenerated as it was at save time.
    """
    initial = regenerate() if left_out else {}
    arrays = {}
    for name, stored in loaded.items():
        if stored.stype != "row_sparse":
            arrays[name] = stored.asnumpy()
            continue
        start = initial.get(name)
        if name not in left_out or start is None or start.shape != stored.shape \
                or _checksum(start) != left_out[name]["crc32"]:
            raise ValueError("%s stores only the trained rows of %r, and its other rows cannot be "
                             "regenerated as they were saved (initial values %s)"
                             % (params_path, name, "unknown" if start is None else
                                "of another shape" if start.shape != stored.shape else
                                "with another checksum"))
        value = start.astype(stored.dtype, copy=False)
        value[stored.indices.asnumpy()] = stored.data.asnumpy()
        arrays[name] = value
    return arrays
