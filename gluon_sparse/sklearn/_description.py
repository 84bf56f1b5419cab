"""The JSON description of an estimator in a model directory (``estimator.json``).

The estimator's class (by import path), its hyper-parameters, ``classes_`` and
its fitted bookkeeping, as JSON: reading it back executes no stored code
(classes and functions are named, and only gluon-sparse's own modules or
modules the program imported already are looked up).

Extension point: an estimator with more fitted state that JSON can hold lists
it in its ``_saved_fitted_attributes`` (names, numbers or lists of numbers).
"""
import contextlib
import importlib
import logging
import sys

import mxnet as mx
import numpy as np
from sklearn.base import BaseEstimator

from .._version import __version__

logger = logging.getLogger(__name__)

__all__ = ["describe", "estimator_from_description", "FORMAT", "FORMAT_VERSION"]

FORMAT = "gluon-sparse-estimator"
# 1: the estimator named by its bare class name; 2: by import path, and the
# first layer's untouched rows may be left to the initialiser (see gluon_sparse/_compact.py).
FORMAT_VERSION = 2

# Fitted attributes stored verbatim in the JSON (numbers, booleans or lists of numbers).
# _init_seed: the seed of the initial weights (the rows a save leaves to it).
_FITTED_NUMBERS = ("n_features_in_", "n_outputs_", "n_iter_", "t_", "loss_", "loss_curve_",
                   "best_loss_", "validation_scores_", "best_validation_score_", "zero_based_",
                   "_init_seed")


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
    if (isinstance(value, dict) and all(isinstance(k, str) for k in value)
            and all(v is None or isinstance(v, (bool, int, float, str)) for v in value.values())):
        return {"dict": dict(value)}  # optimizer_params
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in "iu":
        return {"ndarray": value.tolist(), "dtype": value.dtype.str}  # hidden_layer_sizes
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
        if "dict" in value:
            return dict(value["dict"])
        if "ndarray" in value:
            return np.array(value["ndarray"], dtype=np.dtype(value["dtype"]))
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


def describe(estimator, extra=None):
    """The JSON-ready description of a fitted ``estimator``."""
    fitted_names = _FITTED_NUMBERS + tuple(getattr(estimator, "_saved_fitted_attributes", ()))
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "gluon_sparse_version": __version__,
        "estimator": _import_name(type(estimator)) or type(estimator).__name__,
        "params": {name: _encode_param(name, value)
                   for name, value in estimator.get_params(deep=False).items()},
        "fitted": {name: getattr(estimator, name) for name in fitted_names
                   if hasattr(estimator, name)},
    }
    if hasattr(estimator, "classes_"):
        meta["classes"] = _encode_classes(estimator.classes_)
    if hasattr(estimator, "feature_names_in_"):
        # The columns of a DataFrame fitted on: a loaded model checks them as the
        # fitted one does (without them, reordered columns went unnoticed).
        meta["feature_names"] = [str(name) for name in estimator.feature_names_in_]
    meta.update(extra or {})
    return meta


def estimator_from_description(meta, meta_path, overrides):
    """``(unfitted estimator with the saved hyper-parameters, its fitted attributes)``.

    Parameters
    ----------
    meta : object
        The parsed JSON.
    meta_path : str
        Where it was read from, for messages.
    overrides : dict
        Hyper-parameters replacing the saved ones.
    """
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError("%s is not a gluon-sparse estimator description" % meta_path)
    version = meta.get("format_version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise ValueError("%s is damaged: its format_version is %r, not a number"
                         % (meta_path, version))
    if version > FORMAT_VERSION:
        raise ValueError("%s was written by a newer gluon-sparse (format %s, this one reads %d)"
                         % (meta_path, version, FORMAT_VERSION))
    cls = _estimator_class(meta.get("estimator"), meta_path)
    with damaged_description(meta_path):
        saved = meta["params"]
        if not isinstance(saved, dict):
            raise TypeError("its params are a %s, not an object" % type(saved).__name__)
    unknown = set(overrides) - set(saved)
    if unknown:
        raise TypeError("load() got parameters %s that %s does not have"
                        % (sorted(unknown), cls.__name__))
    with damaged_description(meta_path):
        estimator = cls(**{name: _decode_param(name, value, overrides)
                           for name, value in saved.items()})
        # Hyper-parameters as fit checks them ("Relu" failed only when predicting).
        estimator._validate_params()
        fitted = dict(meta["fitted"])
        if "classes" in meta:
            fitted["classes_"] = _decode_classes(meta["classes"])
        if "feature_names" in meta:
            fitted["feature_names_in_"] = np.asarray(meta["feature_names"], dtype=object)
    return estimator, fitted


@contextlib.contextmanager
def damaged_description(meta_path):
    """Turn what a damaged or hand-edited description raises while it is read (a missing
    key, a value of the wrong type or out of its range) into a ValueError naming the
    file and the cause."""
    try:
        yield
    except (KeyError, AttributeError, TypeError, IndexError) as err:
        # (TypeError covers scikit-learn's InvalidParameterError: an edited value.)
        if str(err).startswith(meta_path):
            raise  # already names the file
        cause = ("%s is missing" % err if isinstance(err, KeyError)
                 else "%s: %s" % (type(err).__name__, err))
        raise ValueError("%s is damaged or was edited by hand: %s" % (meta_path, cause)) from err
