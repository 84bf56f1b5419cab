"""Saving fitted estimators to a directory without pickle, and loading them back.

A model directory holds two files:

``network.params``
    The network's parameters in MXNet's own format
    (:meth:`mxnet.gluon.Block.save_parameters`), readable by any MXNet.
``estimator.json``
    The estimator class, its hyper-parameters, ``classes_`` and the fitted
    bookkeeping (``loss_curve_``, ``n_iter_``, ...).

The directory is written next to its destination under a temporary name and
renamed into place, so an interrupted save never leaves a half-written model.
"""
import importlib
import json
import logging
import os
import shutil
import sys
import tempfile

import mxnet as mx
import numpy as np
from sklearn.base import BaseEstimator

from .._version import __version__
from ._context import available_context
from ._params import module_param_arrays

logger = logging.getLogger(__name__)

__all__ = ["save", "load", "PARAMS_FILE", "META_FILE"]

PARAMS_FILE = "network.params"
META_FILE = "estimator.json"
FORMAT = "gluon-sparse-estimator"
FORMAT_VERSION = 2  # 2: the estimator named by import path

# Fitted attributes stored verbatim in the JSON (numbers, booleans or lists of numbers).
_FITTED_NUMBERS = ("n_features_in_", "n_outputs_", "n_iter_", "t_", "loss_", "loss_curve_",
                   "best_loss_", "validation_scores_", "best_validation_score_", "zero_based_")


# Format 1 named the estimator by its bare class name, one of these public ones.
_LEGACY_ESTIMATOR_NAMES = {"SparseMLPClassifier", "SparseMLPRegressor", "SparseNetClassifier",
                           "SparseNetRegressor"}


def _import_name(obj):
    """``'package.module:Qualified.name'`` when ``obj`` can be imported back by name."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not module or not qualname or "<" in qualname or module == "__main__":
        return None
    try:
        found = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return "%s:%s" % (module, qualname) if found is obj else None


def _resolve_import_name(name):
    module, qualname = name.split(":")
    found = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def _estimator_class(name, meta_path):
    """The estimator class that ``estimator.json`` names by import path.

    Only classes of gluon-sparse itself or of modules the program has already
    imported are resolved: reading a model must not import arbitrary code.
    """
    if name in _LEGACY_ESTIMATOR_NAMES:
        name = "gluon_sparse.sklearn:" + name
    module = name.split(":")[0] if isinstance(name, str) and name.count(":") == 1 else None
    if module is None or not (module == "gluon_sparse" or module.startswith("gluon_sparse.")
                              or module in sys.modules):
        raise ValueError("%s names an unknown estimator %r (a gluon-sparse estimator class, or "
                         "one of a module imported before load)" % (meta_path, name))
    try:
        cls = _resolve_import_name(name)
    except (ImportError, AttributeError) as err:
        raise ValueError("%s names an unknown estimator %r: %s" % (meta_path, name, err)) from err
    if not (isinstance(cls, type) and issubclass(cls, BaseEstimator)
            and hasattr(cls, "_reset_fitted_state")):
        raise ValueError("%s names %r, which is not a gluon-sparse estimator" % (meta_path, name))
    return cls


def _encode_param(name, value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    if isinstance(value, (tuple, list)) and all(isinstance(v, (int, np.integer)) for v in value):
        return {type(value).__name__: [int(v) for v in value]}
    if isinstance(value, mx.Context):
        return "%s:%d" % (value.device_type, value.device_id)
    if isinstance(value, np.random.RandomState):
        logger.info("save(): random_state is a RandomState instance, stored as None")
        return None
    if isinstance(value, type) or callable(value) and not isinstance(value, mx.gluon.Block):
        import_name = _import_name(value)
        if import_name is not None:
            return {"import": import_name}
    # Objects that JSON cannot hold (a loss instance, a lambda): load() asks for them.
    return {"unsaved": type(value).__name__}


def _decode_param(name, value, overrides):
    if name in overrides:
        return overrides[name]
    if isinstance(value, dict):
        if "tuple" in value:
            return tuple(value["tuple"])
        if "list" in value:
            return list(value["list"])
        if "import" in value:
            return _resolve_import_name(value["import"])
        raise ValueError("the saved estimator's %r parameter (a %s) could not be stored as JSON; "
                         "pass it to load(): load(path, %s=...)" % (name, value["unsaved"], name))
    return value


def _encode_classes(classes):
    return {"values": classes.tolist(), "dtype": classes.dtype.str if classes.dtype != object
            else "object"}


def _decode_classes(stored):
    dtype = object if stored["dtype"] == "object" else np.dtype(stored["dtype"])
    return np.array(stored["values"], dtype=dtype)


def _write_directory_atomically(path, write):
    """Run ``write(tmp_dir)`` and move the result to ``path`` in one rename."""
    path = os.path.abspath(os.fspath(path))
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    if os.path.exists(path) and (not os.path.isdir(path) or
                                 (os.listdir(path) and
                                  not os.path.exists(os.path.join(path, META_FILE)))):
        raise FileExistsError("refusing to replace %s: it exists and is not a gluon-sparse model "
                              "directory" % path)
    tmp = tempfile.mkdtemp(prefix="." + os.path.basename(path) + ".tmp-", dir=parent)
    try:
        write(tmp)
        if os.path.exists(path):
            # Two renames: a reader sees the old model or the new one, never a mix.
            old = tempfile.mkdtemp(prefix="." + os.path.basename(path) + ".old-", dir=parent)
            os.rename(path, os.path.join(old, "model"))
            os.rename(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def save(estimator, path):
    """Write a fitted estimator to the directory ``path`` (replaced if it holds a model).

    Parameters
    ----------
    estimator : BaseSparseNet
        A fitted gluon_sparse.sklearn estimator.
    path : str or os.PathLike
        Model directory.
    """
    module = estimator.module_  # raises NotFittedError first
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "gluon_sparse_version": __version__,
        "estimator": _import_name(type(estimator)) or type(estimator).__name__,
        "params": {name: _encode_param(name, value)
                   for name, value in estimator.get_params(deep=False).items()},
        "fitted": {name: getattr(estimator, name) for name in _FITTED_NUMBERS
                   if hasattr(estimator, name)},
    }
    if hasattr(estimator, "classes_"):
        meta["classes"] = _encode_classes(estimator.classes_)

    def write(directory):
        module.save_parameters(os.path.join(directory, PARAMS_FILE))
        with open(os.path.join(directory, META_FILE), "w") as f:
            json.dump(meta, f, indent=1, default=float)

    _write_directory_atomically(path, write)


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
        with ``partial_fit`` or ``warm_start``; the optimizer state restarts).

    Raises
    ------
    FileNotFoundError
        If ``path`` is not a model directory.
    ValueError
        If the files are not a gluon-sparse model.
    """
    path = os.fspath(path)
    meta_path = os.path.join(path, META_FILE)
    if not os.path.isfile(meta_path):
        raise FileNotFoundError("%s is not a gluon-sparse model directory (no %s)"
                                % (path, META_FILE))
    try:
        with open(meta_path) as f:
            meta = json.load(f)
    except ValueError as err:
        raise ValueError("%s is not valid JSON: %s" % (meta_path, err)) from err
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError("%s is not a gluon-sparse estimator description" % meta_path)
    if meta.get("format_version", 0) > FORMAT_VERSION:
        raise ValueError("%s was written by a newer gluon-sparse (format %s, this one reads %d)"
                         % (meta_path, meta.get("format_version"), FORMAT_VERSION))
    cls = _estimator_class(meta.get("estimator"), meta_path)
    unknown = set(params) - set(meta["params"])
    if unknown:
        raise TypeError("load() got parameters %s that %s does not have"
                        % (sorted(unknown), cls.__name__))
    estimator = cls(**{name: _decode_param(name, value, params)
                       for name, value in meta["params"].items()})
    fitted = dict(meta["fitted"])
    if "classes" in meta:
        fitted["classes_"] = _decode_classes(meta["classes"])
    params_path = os.path.join(path, PARAMS_FILE)
    arrays = _read_param_arrays(params_path)
    estimator._reset_fitted_state(available_context(estimator.ctx), fitted=fitted,
                                  module_params=arrays)
    try:
        estimator._get_module()  # built now, so that a mismatch is reported by load
    except (ValueError, AssertionError, mx.base.MXNetError) as err:
        raise ValueError("%s does not hold the parameters of this %s: %s"
                         % (params_path, cls.__name__, err)) from err
    return estimator


def _read_param_arrays(params_path):
    """``{name: numpy array}`` from an MXNet ``.params`` file."""
    try:
        loaded = mx.nd.load(params_path)
    except (mx.base.MXNetError, OSError) as err:
        raise ValueError("%s could not be read: %s" % (params_path, err)) from err
    if not isinstance(loaded, dict):
        raise ValueError("%s holds unnamed arrays, not a network's parameters" % params_path)
    return {name: array.asnumpy() for name, array in loaded.items()}
