"""Model directories: saving fitted estimators without pickle, and loading them back.

A model directory is a versioned directory (:mod:`gluon_sparse._fileio`)::

    model/
        CURRENT              names the current version, replaced atomically
        v-000002/            the current version (immutable)
            estimator.json   class, hyper-parameters, classes_, bookkeeping (_description.py),
                             and the size and CRC-32 of network.params
            network.params   the parameters, MXNet's nd.save format (gluon_sparse/_compact.py)
        v-000001/            the previous version, removed by the next save

Every reader sees a whole old or a whole new model at every instant and after
a crash at any point of a save; what crashed saves leave is removed by the
next save. A flat directory of the first format (``estimator.json`` and
``network.params`` at the top) still loads, and is replaced by the next save.

Public helpers for other code (the command line): :func:`is_model_dir`,
:func:`check_model_dir_writable`, :func:`save`, :func:`load`.
"""
import json
import os
import zlib

import mxnet as mx

from .. import _fileio
from .._compact import compact_param_arrays, expand_param_arrays, ndarrays_from_bytes
from ._context import available_context
from ._description import damaged_description, describe, estimator_from_description
from ._params import module_param_ndarrays

__all__ = ["save", "load", "is_model_dir", "check_model_dir_writable", "PARAMS_FILE",
           "META_FILE"]

PARAMS_FILE = "network.params"
META_FILE = "estimator.json"
_FILES = (META_FILE, PARAMS_FILE)  # META_FILE first: it marks a flat (format 1) model


def is_model_dir(path):
    """Whether ``path`` is a gluon-sparse model directory (versioned, or flat of format 1)."""
    return _fileio.versioned_directory_state(path, _FILES) in ("versioned", "legacy")


def check_model_dir_writable(path):
    """Check, before any training, that :func:`save` may write to ``path``.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    bool
        True if ``path`` holds a model that a save will replace, False if
        the save will create it (missing, empty, or left by a crashed save).

    Raises
    ------
    FileExistsError
        If ``path`` is a file or a directory with other content.
    PermissionError
        If the directory (or the one it would be created in) is not writable.
    ValueError
        If its ``CURRENT`` pointer is corrupt (the save would fail at its end).
    """
    path = os.path.abspath(os.fspath(path))
    state = _fileio.versioned_directory_state(path, _FILES)
    if state == "other":
        raise FileExistsError("refusing to replace %s: it exists and is not a gluon-sparse model "
                              "directory" % path)
    if state == "versioned":
        _fileio.check_versioned_replaceable(path, _FILES)
    existing = path if state != "missing" else os.path.dirname(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise FileExistsError("cannot create %s: %s is not a directory" % (path, existing))
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError("cannot write %s: %s is not writable" % (path, existing))
    return state in ("versioned", "legacy")


def save(estimator, path):
    """Write a fitted estimator to the model directory ``path`` (replaced if it holds a model).

    Parameters
    ----------
    estimator : BaseSparseNet
        A fitted gluon_sparse.sklearn estimator.
    path : str or os.PathLike
        Model directory.

    Raises
    ------
    FileExistsError
        If ``path`` exists and is not a model directory (nothing is written).
    """
    check_model_dir_writable(path)
    # The live arrays (module_ raises NotFittedError first), read a block of
    # rows at a time against the initial rows: no second copy of the model.
    arrays = module_param_ndarrays(estimator.module_)
    to_save, left_out = compact_param_arrays(arrays, estimator._initial_param_rows())
    del arrays
    meta = describe(estimator, extra={"rows_left_to_initialiser": left_out})

    def write(directory):
        params_path = os.path.join(directory, PARAMS_FILE)
        _fileio.save_ndarrays(params_path, to_save)
        with open(os.path.join(directory, META_FILE), "w") as f:
            json.dump(dict(meta, **{_CRC_KEY: _fileio.file_crc32(params_path),
                                    _SIZE_KEY: os.path.getsize(params_path)}),
                      f, indent=1, default=float)

    try:
        _fileio.write_versioned_directory(path, write, legacy_files=_FILES)
    except FileExistsError as err:  # became something else since the check
        raise FileExistsError("refusing to replace %s: it exists and is not a gluon-sparse model "
                              "directory" % os.fspath(path)) from err


# The size and CRC-32 of network.params, in estimator.json: a damaged byte of the
# array data loaded as another model without an error (MXNet's format has no
# checksum), and one in its header could make MXNet allocate what the damaged sizes
# say. Checked before MXNet parses the file.
_CRC_KEY = "network_params_crc32"
_SIZE_KEY = "network_params_bytes"
# The first 8 bytes of every MXNet parameter file (kMXAPINDArrayListMagic, little-endian).
_MXNET_LIST_MAGIC = (0x112).to_bytes(8, "little")


def _check_recorded(meta, data, params_path, meta_path):
    """Refuse ``data`` that is not the network.params ``estimator.json`` describes, naming
    the cause: not MXNet's format, truncated (or grown), or damaged. Models saved before
    size and CRC were recorded have none to check."""
    expected_crc, expected_size = meta.get(_CRC_KEY), meta.get(_SIZE_KEY)
    if expected_crc is None and expected_size is None:
        return
    if data[:8] != _MXNET_LIST_MAGIC[:len(data)]:  # (a shorter file is truncated, below)
        raise ValueError("%s could not be read: not an MXNet parameter file (its header is not "
                         "MXNet's)" % params_path)
    if expected_size is not None and len(data) != expected_size:
        raise ValueError("%s could not be read: the file is %s (%d bytes; %s recorded %s)"
                         % (params_path, "truncated" if len(data) < expected_size else
                            "longer than written", len(data), meta_path, expected_size))
    found = zlib.crc32(data) if expected_crc is not None else None
    if found != expected_crc:
        raise ValueError("%s is damaged: its CRC-32 is %08x, and %s recorded %s for it"
                         % (params_path, found, meta_path,
                            "%08x" % expected_crc if isinstance(expected_crc, int)
                            else repr(expected_crc)))


def load(path, **params):
    """Read an estimator written by ``save``.

    Parameters
    ----------
    path : str or os.PathLike
        Model directory.
    **params
        Hyper-parameters to use instead of the saved ones: required for those
        that JSON cannot hold (a custom loss object, a lambda ``module``);
        ``ctx='cpu'`` loads a GPU-trained model on the CPU (a missing GPU
        falls back to the CPU anyway).

    Returns
    -------
    BaseSparseNet
        The fitted estimator, ready to predict (and to continue training
        with ``partial_fit`` or ``warm_start``; the optimizer state restarts:
        a pickle keeps it, a model directory does not).

    Raises
    ------
    FileNotFoundError
        If ``path`` is not a model directory.
    ValueError
        If the files are not a gluon-sparse model, or are damaged (the
        message names the file and the cause).
    """
    path = os.fspath(path)
    try:
        directory, contents = _fileio.read_versioned_directory(path, _FILES, legacy_files=_FILES)
    except FileNotFoundError as err:
        if is_model_dir(path):
            raise
        raise FileNotFoundError("%s is not a gluon-sparse model directory" % path) from err
    meta_path = os.path.join(directory, META_FILE)
    params_path = os.path.join(directory, PARAMS_FILE)
    try:
        meta = json.loads(contents[META_FILE].decode("utf-8"))
    except ValueError as err:  # UnicodeDecodeError is one
        raise ValueError("%s is not valid JSON: %s" % (meta_path, err)) from err
    estimator, fitted = estimator_from_description(meta, meta_path, params)
    with damaged_description(meta_path):  # a recorded size or CRC that is not a number
        _check_recorded(meta, contents[PARAMS_FILE], params_path, meta_path)
    loaded = ndarrays_from_bytes(contents[PARAMS_FILE], params_path)
    del contents
    with damaged_description(meta_path):  # fitted attributes missing or of the wrong type
        estimator._reset_fitted_state(available_context(estimator.ctx), fitted=fitted)
        arrays = expand_param_arrays(loaded, meta.get("rows_left_to_initialiser", {}),
                                     estimator._initial_param_rows, params_path)
        del loaded
        try:
            estimator._install_params(arrays)  # now, so that a mismatch is reported by load
        except (ValueError, AssertionError, mx.base.MXNetError) as err:
            raise ValueError("%s does not hold the parameters of this %s: %s"
                             % (params_path, type(estimator).__name__, err)) from err
    return estimator
