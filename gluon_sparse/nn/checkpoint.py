"""Compact checkpoints of a Gluon network: ``save_parameters`` without the untouched rows.

:meth:`mxnet.gluon.Block.save_parameters` writes every row of a wide sparse
layer, although a training run moves only the rows of the features its
batches hold: a 10^7 x 128 weight is a 5 GB file whatever was learned.
:func:`save_compact_parameters` writes the rows that differ from the values
the network started from, and :func:`load_compact_parameters` puts them back
over those values, bit for bit. The start values are not stored: they come
from a network initialised the way the trained one was (same structure, same
seed and initializers), and a CRC-32 of them, saved with the rows, is checked
at load, so a network initialised differently is an error, never a different
model. The file stays MXNet's ``nd.save`` format (see
:mod:`gluon_sparse._compact`), with one extra entry that makes a plain
``load_parameters`` refuse it rather than load zeros for the absent rows.
"""
import json
import os
import zlib

import mxnet as mx
import numpy as np
from mxnet import gluon

from .. import _compact, _fileio
from ..optimizer import flush as flush_deferred

__all__ = ["save_compact_parameters", "load_compact_parameters"]

# The entry holding the description of the file (JSON bytes as a uint8 array).
_DESCRIPTION_KEY = "__gluon_sparse_compact__"
_FORMAT = 1
# A trailer after MXNet's bytes (which MXNet's readers ignore): this magic and the
# CRC-32 of everything before it, little-endian. MXNet's format has no checksum: a
# flipped bit loaded as other values, or, in an array count, made MXNet allocate
# what the bytes after it said.
_CRC_TRAILER_MAGIC = b"GSCRC32\0"
_CRC_TRAILER_BYTES = len(_CRC_TRAILER_MAGIC) + 4


def _block_of(initial, role):
    """The network ``initial`` names: a Block, or a callable returning one."""
    block = initial() if callable(initial) and not isinstance(initial, gluon.Block) else initial
    if not isinstance(block, gluon.Block):
        raise TypeError("%s must be a gluon Block initialised as the trained network was, or a "
                        "function returning one; got %r" % (role, type(block).__name__))
    return block


def _dense_params(block):
    """``{structural name: Parameter}`` of ``block`` with every deferred row brought up to date."""
    params = block._collect_params_with_prefix()
    flush_deferred(params.values())
    return params


def _initial_rows(params, names):
    """``(name, first row, rows)`` blocks of the initialised parameters among ``names``."""
    for name in names:
        param = params.get(name)
        if param is None or param._data is None or param._stype != "default":
            continue  # unknown start values: the parameter is stored whole
        yield from ((name, start, rows) for start, rows in _compact.row_blocks(param.data()))


def save_compact_parameters(net, filename, initial):
    """Save ``net``'s parameters like ``net.save_parameters``, leaving out the rows never changed.

    Parameters
    ----------
    net : mxnet.gluon.Block
        The trained network. Rows still owed steps by a deferred optimizer
        are brought up to date first.
    filename : str or os.PathLike
        Destination; replaced atomically (a reader or a crash sees the old
        file or the new one).
    initial : mxnet.gluon.Block or callable
        A network of the same structure holding the values ``net`` started
        from, or a function returning one: typically the function that built
        and initialised ``net`` with a fixed seed (``mx.random.seed(s)`` then
        ``initialize``). Its rows are read a block at a time; it must exist
        whole while saving, so the save needs a second copy of the network
        (pass a function so that the copy is freed afterwards).

    Notes
    -----
    A parameter of two or more dimensions and at least 4096 values is stored
    as the ``row_sparse`` array of its rows that differ from ``initial``'s
    (compared bit for bit) when that at least halves it; the others are
    stored whole, as ``save_parameters`` would. Load the file with
    :func:`load_compact_parameters`. The file ends with a CRC-32 of what
    precedes it, which MXNet's own readers ignore and
    :func:`load_compact_parameters` checks before it reads an array.
    """
    filename = os.path.abspath(os.fspath(filename))
    params = _dense_params(net)
    arrays = {}
    for name, param in params.items():
        if param._data is None:
            raise RuntimeError("cannot save %s: parameter %r of the network is not initialised"
                               % (filename, name))
        arrays[name] = param.data() if param._stype == "default" else param._reduce()
    start = _dense_params(_block_of(initial, "initial"))
    to_save, left_out = _compact.compact_param_arrays(arrays, _initial_rows(start, arrays))
    del start
    description = json.dumps({"format": _FORMAT, "rows_left_to_initialiser": left_out})
    to_save[_DESCRIPTION_KEY] = mx.nd.array(np.frombuffer(description.encode(), dtype=np.uint8),
                                            dtype=np.uint8)
    # nd.save writes the temporary file that replaces filename (flushed, renamed).
    with _fileio.atomic_path(filename) as tmp:
        _fileio.save_ndarrays(tmp, to_save)
        _append_crc_trailer(tmp)


def _append_crc_trailer(path):
    crc = _fileio.file_crc32(path)
    with open(path, "ab") as f:
        f.write(_CRC_TRAILER_MAGIC + crc.to_bytes(4, "little"))


def _read_checked(f, filename):
    """The bytes of a compact file less its CRC trailer, checked (read once: MXNet's
    parser wants ``bytes``, so no copy is made to cut the trailer off); a file without
    one (``save_parameters``'s, compact files of earlier versions) whole."""
    size = f.seek(0, os.SEEK_END)
    trailer = b""
    if size >= _CRC_TRAILER_BYTES:
        f.seek(size - _CRC_TRAILER_BYTES)
        trailer = f.read(_CRC_TRAILER_BYTES)
    f.seek(0)
    if trailer[:-4] != _CRC_TRAILER_MAGIC:
        return f.read()
    body = f.read(size - _CRC_TRAILER_BYTES)
    recorded, found = int.from_bytes(trailer[-4:], "little"), zlib.crc32(body)
    if found != recorded:
        raise _compact.DamagedFile("%s is damaged: its CRC-32 is %08x, and the file recorded "
                                   "%08x" % (filename, found, recorded))
    return body


def _read(filename):
    """``(arrays, left_out)`` of a :func:`save_compact_parameters` or ``save_parameters`` file."""
    with open(filename, "rb") as f:
        data = _read_checked(f, filename)
    loaded = _compact.ndarrays_from_bytes(data, filename)
    del data
    description = loaded.pop(_DESCRIPTION_KEY, None)
    if description is None:
        return loaded, {}  # save_parameters' file: every row is there
    try:
        meta = json.loads(description.asnumpy().tobytes().decode("utf-8"))
        left_out = meta["rows_left_to_initialiser"]
        if meta.get("format") != _FORMAT or not isinstance(left_out, dict):
            raise ValueError("format %r" % meta.get("format"))
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError("%s: the description of its compact parameters is damaged or of a newer "
                         "format (%s)" % (filename, err)) from err
    return loaded, left_out


def _check_fits(params, loaded, filename):
    missing, extra = sorted(set(params) - set(loaded)), sorted(set(loaded) - set(params))
    if missing or extra:
        raise ValueError("%s does not fit the network: parameters missing from the file %s, in "
                         "the file but not in the network %s" % (filename, missing, extra))
    for name, param in params.items():
        stored = tuple(loaded[name].shape)
        known = tuple(param.shape or ())
        if len(known) != len(stored) or any(k not in (0, s) for k, s in zip(known, stored)):
            raise ValueError("%s: parameter %r has shape %s in the file but %s in the network"
                             % (filename, name, stored, known))
        if param.dtype is not None and np.dtype(loaded[name].dtype) != np.dtype(param.dtype):
            raise ValueError("%s: parameter %r is %s in the file but %s in the network"
                             % (filename, name, np.dtype(loaded[name].dtype),
                                np.dtype(param.dtype)))


def load_compact_parameters(net, filename, initial=None, ctx=None):
    """Load a file of :func:`save_compact_parameters` (or ``save_parameters``) into ``net``.

    Parameters
    ----------
    net : mxnet.gluon.Block
        The network to load into, initialised or not (like
        ``load_parameters``). Initialised parameters are written through
        ``Parameter.set_data``, so a deferred optimizer's pending rows are
        settled first.
    filename : str or os.PathLike
    initial : mxnet.gluon.Block or callable, optional
        Where the rows absent from the file come from: a network holding the
        values the saved one started from, or a function returning one (as
        for :func:`save_compact_parameters`). Default: ``net`` itself, which
        must then have been initialised as the saved network was and not
        trained since.
    ctx : Context or list of Context, optional
        Where to initialise parameters of ``net`` that are not initialised yet
        (default: the current context), as ``load_parameters``'s ``ctx``.

    Raises
    ------
    ValueError
        If the file is damaged, does not fit ``net`` (the message names the
        parameter and both shapes), or the absent rows cannot be regenerated
        as they were saved (``initial`` holds other values).
    """
    filename = os.fspath(filename)
    loaded, left_out = _read(filename)
    # Rows a deferred optimizer still owes steps are caught up before they are
    # written over (as set_data does once the deferred hooks are installed):
    # the optimizer then continues from the loaded values as standard Adam would.
    params = _dense_params(net)
    _check_fits(params, loaded, filename)
    if left_out:
        start = params if initial is None else _dense_params(_block_of(initial, "initial"))
        initial_rows = lambda: _initial_rows(start, left_out)  # noqa: E731 -- lazy, once
    else:
        initial_rows = lambda: iter(())  # noqa: E731
    try:
        arrays = _compact.expand_param_arrays(loaded, left_out, initial_rows, filename)
    except _compact.DamagedFile:
        raise
    except ValueError as err:
        raise ValueError("%s; %s must hold the values the saved network was initialised with "
                         "(same structure, seed and initializers, not trained since)"
                         % (err, "the network" if initial is None else "initial")) from err
    del loaded
    for name, param in params.items():
        # load_parameters' own path: set_data into an initialised parameter,
        # initialisation (on ctx) of the others.
        value = mx.nd.from_numpy(np.ascontiguousarray(arrays.pop(name)), zero_copy=True)
        param._load_init(value, ctx)
        # The copy reads the numpy memory asynchronously: release it here, not
        # in an engine thread (at interpreter exit that aborts the process).
        value.wait_to_read()
        for array in param.list_data() if param._stype == "default" else ():
            array.wait_to_read()
        del value
