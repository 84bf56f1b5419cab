"""The base class of every estimator: parameters, input, fitted state, pickling, saving.

:class:`BaseSparseNet` puts the pieces together; each lives in its own module:

- :mod:`._hyperparams`: the shared hyper-parameters and the one ``__init__``;
- :mod:`._training`: ``fit``, the epoch loop, early stopping;
- :mod:`._prediction`: the fitted block and its forward pass (thread-safe);
- :mod:`._tasks`: classifier / regressor mixins (targets, loss, outputs);
- :mod:`._persistence`: model directories (``save`` / ``load``);
- :mod:`._params`: a block's parameters as numpy arrays.

A network family (mlp.py, net.py) subclasses :class:`BaseSparseNet` with
``_build_module(n_outputs)`` (and optionally ``_initialize_module``), sets
``__init__ = estimator_init(<its own parameters>)`` and extends
``_parameter_constraints``; a public estimator is a task mixin plus a family.
"""
import threading
from abc import ABCMeta, abstractmethod

import mxnet as mx
import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils.validation import validate_data

from . import _persistence
from .._compact import row_blocks
from ..data import LibSVMDataset, csr_to_ndarray
from ..data._model_width import to_model_width
from ._context import available_context
from ._data import is_libsvm_source, libsvm_paths, load_libsvm_source, warn_if_base_guessed
from ._hyperparams import COMMON_CONSTRAINTS
from ._optimizer_state import trainer_states
from ._params import module_param_arrays
from ._prediction import PredictionMixin
from ._training import TrainingMixin

__all__ = ["BaseSparseNet"]


class BaseSparseNet(TrainingMixin, PredictionMixin, BaseEstimator, metaclass=ABCMeta):
    """Base class of the estimators: fit loop, prediction, pickling and saving.

    Not for direct use: see :class:`~gluon_sparse.sklearn.SparseMLPClassifier`
    and :class:`~gluon_sparse.sklearn.SparseNetClassifier`. Subclasses define
    ``__init__`` (with :func:`~._hyperparams.estimator_init`) and
    ``_build_module(n_outputs)``; a task mixin defines the targets and outputs.
    """

    _parameter_constraints = dict(COMMON_CONSTRAINTS)

    # ------------------------------------------------------------------ network hooks
    @abstractmethod
    def _build_module(self, n_outputs):
        """Return a new, uninitialised Gluon block with ``n_outputs`` outputs."""

    def _initialize_module(self, module, seed, ctx):
        """Initialise the parameters of the new ``module`` on ``ctx``.

        ``seed`` (an int drawn from ``random_state``) makes the result
        reproducible: the same seed must give the same values bit for bit on
        the CPU, since a saved model leaves the rows never trained to it (see
        :mod:`gluon_sparse._compact`). This default runs MXNet's initializers: the ones
        the block's parameters name, Glorot uniform for the others.
        """
        # MXNet's initializers are deterministic given the seed. MXNet 1.9's
        # Parameter.initialize draws on the CPU and copies to ctx: seed the CPU's
        # generator (and ctx's, for initializers that draw there).
        mx.random.seed(seed, ctx=mx.cpu())
        if ctx.device_type != "cpu":
            mx.random.seed(seed, ctx=ctx)
        module.initialize(mx.init.Xavier(rnd_type="uniform", factor_type="avg", magnitude=3),
                          ctx=ctx)

    def _initial_params(self):
        """The network the fitted one started from, regenerated on the CPU:
        ``{name: Parameter}`` of every parameter whose shape is known before the
        first forward pass, initialised; empty if the seed is unknown (an
        estimator pickled before seeds were kept)."""
        seed = getattr(self, "_init_seed", None)
        if seed is None:
            return {}
        module = self._build_module(self.n_outputs_)
        self._initialize_module(module, seed, mx.cpu())
        params = module._collect_params_with_prefix()
        if any(param._deferred_init for param in params.values()):
            # Shapes known only at the first forward pass, where training
            # initialised them too (nothing random runs in between): one
            # pass over an empty row does it the same way.
            try:
                module(csr_to_ndarray(sp.csr_matrix((1, self.n_features_in_), dtype=np.float32),
                                      np.float32, mx.cpu()))
            except Exception:  # noqa: BLE001 -- a network that takes no such row
                pass  # its deferred parameters are then stored in full
        return {name: param for name, param in params.items() if not param._deferred_init}

    def _initial_param_rows(self):
        """The initial parameters (:meth:`_initial_params`) as ``(name, first row, rows)``
        blocks, each copied out of the network as it is yielded.

        What a save compares the trained parameters with and a load checks
        (:mod:`gluon_sparse._compact`). MXNet's initializers cannot draw part of an
        array as the whole would have it, so this default initialises a whole
        network, but never holds a second copy of it in numpy (a multi-label
        model's save held both: +832 MB for a 256 MB first layer). Subclasses
        whose initialiser can draw in blocks (numpy's Generator) yield them
        straight from it, so that a save never holds a second model.
        """
        for name, param in self._initial_params().items():
            for start, rows in row_blocks(param.data()):
                yield name, start, rows

    # ------------------------------------------------------------------ fitted state
    def _reset_fitted_state(self, ctx, fitted=None, module_params=None):
        """Set up the state of a fitted estimator: the one place that does.

        Called when a fit starts from scratch, when an estimator is unpickled
        and when it is loaded from a model directory.

        Parameters
        ----------
        ctx : mxnet.Context
            Where the network lives.
        fitted : dict, optional
            Public fitted attributes (``n_outputs_``, ``loss_curve_``,
            ``classes_``, ...) to set; given for a new fit and a load, which
            also restart the early-stopping count and the random state from
            ``random_state``. None when unpickling: the pickle restored them.
        module_params : dict of numpy arrays, optional
            The network's parameters (see :func:`~._params.module_param_arrays`);
            the network is built from them on first use. None for a new fit,
            which then sets ``_module`` itself.
        """
        if fitted is not None:
            for name, value in fitted.items():
                setattr(self, name, value)
            self._random_state = check_random_state(self.random_state)
            self._no_improvement_count = 0
            self.__dict__.pop("_pending_optimizer_states", None)  # a new fit, or a load
        self._ctx = ctx
        self._module = None
        self._module_params = module_params
        # The optimizer state restarts after a load; an unpickled copy finds the
        # Trainer's state in _pending_optimizer_states (fit_trainer loads it).
        self._trainer = None
        self._module_lock = threading.RLock()

    # ------------------------------------------------------------------ input
    def _read_libsvm(self, X, training, reset=False, labels=True):
        """Read a LibSVM source with the index base of the training files.

        Training on LibSVM input records the base its files resolved to as
        ``zero_based_``; every later file (prediction, partial_fit, warm_start)
        is read with it, so that column j means the same feature. ('auto'
        alone decides per file: a zero-based training file without feature 0
        would be read as one-based, a test file with feature 0 as zero-based.)
        ``labels=False``: the caller does not use the labels (prediction).

        Files read for prediction or scoring (``training=False``) may have features
        beyond the model's width, which the training never saw: they are dropped, with a
        warning a file (:func:`~gluon_sparse.data._model_width.to_model_width`), as
        LIBLINEAR's predict drops them; so are those of a LibSVMDataset read at a width of
        its own. Training files must fit the width.
        """
        source = X
        X, y, zero_based = load_libsvm_source(source, n_features=self._read_width(training, reset),
                                              zero_based=getattr(self, "zero_based_", "auto"))
        paths = source.paths if isinstance(source, LibSVMDataset) else libsvm_paths(source)
        return self._settle_read(X, zero_based, source, paths, training, reset), y

    def _read_width(self, training, reset):
        """The width to read a LibSVM source at: the model's for training files (an index
        past it is an error naming the line), the source's own for a new fit and for
        prediction (features beyond the model's are dropped after: :meth:`_settle_read`)."""
        return None if reset or not training else self.n_features_in_

    def _settle_read(self, X, zero_based, source, paths, training, reset):
        """``X`` read from ``source`` (the files ``paths``) with ``zero_based``, made ready:
        a warning where its index base is a guess, the features beyond the model's width
        dropped for prediction, the base recorded for training."""
        warn_if_base_guessed(self, X, zero_based, source, reset)
        if not reset and not training:
            X = to_model_width(X, self.n_features_in_, paths, zero_based)
        if training:
            self.zero_based_ = zero_based
        return X

    def _scoring_data(self, X, y):
        """``(X, y)`` for ``score``: a LibSVM source's own labels where ``y`` is None, as
        ``fit`` reads them."""
        if y is None:
            if not is_libsvm_source(X):
                raise ValueError("%s.score needs y, the true targets of X (or X as a LibSVM "
                                 "path, whose labels are then read)" % type(self).__name__)
            X, y = self._read_libsvm(X, training=False)
        return X, y

    def _validate_X(self, X, reset):
        """Validate ``X`` for prediction; returns float32 CSR."""
        if is_libsvm_source(X):
            X, _ = self._read_libsvm(X, training=False, reset=reset, labels=False)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float32, reset=reset)
        return sp.csr_matrix(X)

    def _validate_training_data(self, X, y, reset):
        if reset and hasattr(self, "zero_based_"):
            del self.zero_based_  # a new fit: the base of earlier files no longer applies
        if is_libsvm_source(X):
            X, file_labels = self._read_libsvm(X, training=True, reset=reset)
            if y is None:
                y = file_labels
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float32, reset=reset,
                             multi_output=self._multi_output_targets(),
                             y_numeric=self._numeric_targets())
        return sp.csr_matrix(X), y

    # ------------------------------------------------------------------ persistence
    def save(self, path):
        """Write the fitted estimator to the model directory ``path``, without pickle.

        See :func:`gluon_sparse.sklearn.save`: readers of ``path`` see the old
        model or the new one, whole, at every instant and after any crash.

        Parameters
        ----------
        path : str or os.PathLike
            Model directory (replaced if it already holds a model).
        """
        _persistence.save(self, path)

    @classmethod
    def load(cls, path, **params):
        """Read an estimator of this class written by :meth:`save`.

        Parameters
        ----------
        path : str or os.PathLike
            Model directory.
        **params
            Hyper-parameters replacing the saved ones (see :func:`gluon_sparse.sklearn.load`).

        Returns
        -------
        estimator of this class
        """
        estimator = _persistence.load(path, **params)
        if not isinstance(estimator, cls):
            raise TypeError("%s holds a %s, not a %s" % (path, type(estimator).__name__,
                                                         cls.__name__))
        return estimator

    # ------------------------------------------------------------------ pickling
    def __getstate__(self):
        # A copy: on Python 3.11+ BaseEstimator may hand back the live __dict__.
        state = dict(super().__getstate__())
        for transient in ("_module", "_trainer", "_ctx", "_module_lock", "_module_architecture"):
            state.pop(transient, None)
        if self._is_fitted() and hasattr(self, "_module_lock"):
            # Plain numpy arrays: the pickle does not depend on the device the
            # model was trained on, and loads on a CPU-only machine.
            with self._module_lock:
                state["_module_params"] = (self._module_params if self._module is None
                                           else module_param_arrays(self._module))
                state.pop("_pending_optimizer_states", None)
                states = self._optimizer_states_to_pickle()
                if states is not None:
                    state["_pending_optimizer_states"] = states
        return state

    def _optimizer_states_to_pickle(self):
        """The Trainer's state, for ``partial_fit`` on the copy to go on exactly (as
        MLPClassifier pickles its optimizer); states not yet loaded into a Trainer (a
        copy of a copy) pass on as they are."""
        trainer = getattr(self, "_trainer", None)
        if trainer is None:
            return getattr(self, "_pending_optimizer_states", None)
        if getattr(self, "_module_architecture", None) != self._architecture():
            return None  # set_params changed the network: its next step starts afresh too
        return trainer_states(trainer)

    def __setstate__(self, state):
        super().__setstate__(state)
        if self._is_fitted():
            self._reset_fitted_state(available_context(self.ctx),
                                     module_params=state.get("_module_params"))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags
