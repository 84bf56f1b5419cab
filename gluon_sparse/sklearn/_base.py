"""The training loop, prediction and persistence shared by every estimator.

:class:`BaseSparseNet` owns everything that does not depend on what the
network is (the subclasses' ``_build_module``) or what the task is (the
classifier and regressor mixins' target encoding, loss and outputs): input
validation, mini-batch Adam over CSR batches, sample weights, early stopping,
the convergence bookkeeping of scikit-learn's ``MLPClassifier``
(``loss_curve_``, ``best_loss_``, ``validation_scores_``, ``n_iter_``), and
pickling of the fitted Gluon block as plain numpy arrays.
"""
import logging
from abc import ABCMeta, abstractmethod
import warnings
from numbers import Integral, Real

import mxnet as mx
import numpy as np
import scipy.sparse as sp
from mxnet import autograd, gluon
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, _fit_context
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.metrics import accuracy_score, r2_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data
from tqdm.auto import tqdm

from ._context import available_context, parse_context
from ..data import CSRDataset, SparseDataLoader
from ..optimizer import flush as flush_deferred
from ._data import is_libsvm_source, load_libsvm_source, padded_csr_batches

logger = logging.getLogger(__name__)

__all__ = ["BaseSparseNet", "SparseClassifierMixin", "SparseRegressorMixin"]


def _registered_optimizer(name):
    """Check that ``name`` is an MXNet optimizer, importing gluon-sparse's own first."""
    if name.lower() == "sparseadam":
        # Registers 'sparseadam' with MXNet; imported here so that importing the
        # estimators does not load the operator library.
        from .. import optimizer  # noqa: F401
    known = mx.optimizer.Optimizer.opt_registry
    if name.lower() not in known:
        raise ValueError("optimizer=%r is not a registered MXNet optimizer; known: %s"
                         % (name, ", ".join(sorted(known))))
    return name.lower()


def module_param_arrays(module):
    """The parameters of a Gluon block as ``{structural name: numpy array}``.

    The names are the ones :meth:`mxnet.gluon.Block.save_parameters` writes
    (``'0.weight'``, ...): they depend on the block's structure only, not on
    the global name counters, so a rebuilt block accepts them.
    """
    params = module._collect_params_with_prefix()
    flush_deferred(params.values())  # rows whose Adam updates are still deferred
    return {name: param.data().asnumpy() for name, param in params.items()}


def initialize_param(param, values, ctx):
    """Initialise the uninitialised ``param`` on ``ctx`` with the numpy array ``values``.

    ``values`` is handed to MXNet without a copy (and made read-only); its
    shape fills the dimensions a deferred-initialisation block leaves unknown.
    """
    values = np.ascontiguousarray(values, dtype=param.dtype)
    # Parameter.initialize would first fill a new CPU array with the
    # initializer and then copy it to ctx; _load_init (what load_parameters
    # uses) copies ours straight to ctx. For a 10^6 x 32 weight that saves a
    # 128 MB first-touch allocation, a large part of a short fit's time.
    param._load_init(mx.nd.from_numpy(values, zero_copy=True), [ctx])


def set_module_params(module, arrays, ctx):
    """Initialise ``module``'s parameters on ``ctx`` from :func:`module_param_arrays` output."""
    params = module._collect_params_with_prefix()
    missing, extra = set(params) - set(arrays), set(arrays) - set(params)
    if missing or extra:
        raise ValueError("the stored parameters do not fit the network: missing %s, unexpected %s"
                         % (sorted(missing), sorted(extra)))
    for name, param in params.items():
        initialize_param(param, arrays[name], ctx)


def expected_failed_checks(estimator):
    """scikit-learn estimator checks that cannot pass, with the reason.

    For :func:`sklearn.utils.estimator_checks.parametrize_with_checks` /
    ``check_estimator``'s ``expected_failed_checks`` argument.
    """
    # Weighted and repeated samples give the same full-batch objective, but the
    # float32 sums run in a different order, and the check compares predictions
    # at rtol=1e-7 (float64 round-off): the fits agree to ~1e-6 instead.
    # tests/test_sklearn.py checks the equivalence at a float32 tolerance.
    reason = ("float32 training: fits with integer sample weights and with repeated samples "
              "agree to float32 round-off (~1e-6), not to the check's rtol=1e-7")
    return {"check_sample_weight_equivalence_on_dense_data": reason,
            "check_sample_weight_equivalence_on_sparse_data": reason}


class BaseSparseNet(BaseEstimator, metaclass=ABCMeta):
    """Base class of the estimators: fit loop, prediction and pickling.

    Not for direct use: see :class:`~gluon_sparse.sklearn.SparseMLPClassifier`
    and :class:`~gluon_sparse.sklearn.SparseNetClassifier`. Subclasses define
    ``__init__`` (scikit-learn reads the parameters from its signature) and
    ``_build_module(n_outputs)``; a task mixin defines the targets and outputs.
    """

    _parameter_constraints = {
        "alpha": [Interval(Real, 0, None, closed="left")],
        "batch_size": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")],
        "learning_rate_init": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "shuffle": ["boolean"],
        "random_state": ["random_state"],
        "tol": [Interval(Real, 0, None, closed="left")],
        "verbose": ["verbose"],
        "warm_start": ["boolean"],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="left")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "optimizer": [str],
        "ctx": [str, mx.Context],
    }

    # ------------------------------------------------------------------ hooks
    @abstractmethod
    def _build_module(self, n_outputs):
        """Return a new, uninitialised Gluon block with ``n_outputs`` outputs."""

    def _initialize_module(self, module, seed):
        """Initialise the parameters of the new ``module`` on ``self._ctx``.

        ``seed`` (an int drawn from ``random_state``) makes the result
        reproducible. This default runs MXNet's initializers: the ones the
        block's parameters name, Glorot uniform for the others.
        """
        # MXNet's CPU initializers are deterministic given the context's seed.
        mx.random.seed(seed, ctx=self._ctx)
        module.initialize(mx.init.Xavier(rnd_type="uniform", factor_type="avg", magnitude=3),
                          ctx=self._ctx)

    # ------------------------------------------------------------------ input
    def _read_libsvm(self, X, training, reset=False):
        """Read a LibSVM source with the index base of the training files.

        Training on LibSVM input records the base its files resolved to as
        ``zero_based_``; every later file (prediction, partial_fit, warm_start)
        is read with it, so that column j means the same feature. ('auto'
        alone decides per file: a zero-based training file without feature 0
        would be read as one-based, a test file with feature 0 as zero-based.)
        """
        X, y, zero_based = load_libsvm_source(
            X, n_features=None if reset else self.n_features_in_,
            zero_based=getattr(self, "zero_based_", "auto"))
        if training:
            self.zero_based_ = zero_based
        return X, y

    def _validate_X(self, X, reset):
        """Validate ``X`` for prediction; returns float32 CSR."""
        if is_libsvm_source(X):
            X, _ = self._read_libsvm(X, training=False, reset=reset)
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

    # ------------------------------------------------------------------ fitting
    def fit(self, X, y=None, sample_weight=None):
        """Train the network from scratch (or from the current weights with ``warm_start``).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), path or LibSVMDataset
            Training samples: any scipy sparse format, a dense array, a LibSVM
            file path or a :class:`gluon_sparse.data.LibSVMDataset`.
        y : array-like of shape (n_samples,) or (n_samples, n_outputs), optional
            Targets; taken from the file when ``X`` is LibSVM and ``y`` is None.
        sample_weight : array-like of shape (n_samples,), optional
            Per-sample loss weights; each mini-batch minimises the weighted mean loss.

        Returns
        -------
        self
        """
        return self._fit_with_validation(X, y, sample_weight)

    @_fit_context(prefer_skip_nested_validation=True)
    def _fit_with_validation(self, X, y, sample_weight=None, incremental=False, classes=None):
        return self._fit(X, y, sample_weight, incremental=incremental, classes=classes)

    def _is_fitted(self):
        return hasattr(self, "n_outputs_")

    def _fit(self, X, y, sample_weight=None, incremental=False, classes=None):
        first_pass = not self._is_fitted() or (not self.warm_start and not incremental)
        X, y = self._validate_training_data(X, y, reset=first_pass)
        if sample_weight is not None:
            sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float32)
        targets, n_outputs = self._encode_targets(y, first_pass, classes)
        optimizer = _registered_optimizer(self.optimizer)
        if first_pass:
            self._random_state = check_random_state(self.random_state)
            self._ctx = parse_context(self.ctx)
            self.n_outputs_ = n_outputs
            self._module = self._new_module(n_outputs)
            self._trainer = None
            self.loss_curve_ = []
            self._no_improvement_count = 0
            self.t_ = 0
            self.n_iter_ = 0
            self.best_loss_ = np.inf
            self.validation_scores_ = [] if self.early_stopping else None
            self.best_validation_score_ = -np.inf if self.early_stopping else None
        module = self._get_module()
        if getattr(self, "_trainer", None) is None:
            for name, param in module.collect_params().items():
                if name.endswith("bias"):
                    param.wd_mult = 0.0  # alpha penalises weights only, as in MLPClassifier
            optimizer_params = {"learning_rate": self.learning_rate_init}
            if optimizer == "sparseadam":
                # Standard Adam at lazy-Adam cost: updates of rows absent from a
                # batch are replayed exactly when the rows are next read.
                optimizer_params["deferred"] = True
            self._trainer = gluon.Trainer(module.collect_params(), optimizer, optimizer_params,
                                          kvstore=None)
        self._fit_stochastic(X, targets, sample_weight, incremental)
        return self

    def _new_module(self, n_outputs):
        # Same random_state -> same seed -> same initial weights.
        seed = int(self._random_state.randint(np.iinfo(np.int32).max))
        module = self._build_module(n_outputs)
        self._initialize_module(module, seed)
        return module

    def _get_module(self):
        """The fitted block, rebuilt on first use after unpickling."""
        if getattr(self, "_module", None) is None:
            if not self._is_fitted():
                raise NotFittedError("This %s instance is not fitted yet. Call 'fit' first."
                                     % type(self).__name__)
            module = self._build_module(self.n_outputs_)
            set_module_params(module, self._module_params, self._ctx)
            self._module = module
            del self._module_params
        return self._module

    @property
    def module_(self):
        """The fitted :class:`mxnet.gluon.Block`."""
        return self._get_module()

    def _batch_size(self, n_samples):
        if self.batch_size == "auto":
            return min(200, n_samples)
        if self.batch_size > n_samples:
            warnings.warn("Got `batch_size` larger than the number of samples (%d); it is "
                          "clipped to %d" % (n_samples, n_samples))
        return min(self.batch_size, n_samples)

    def _fit_stochastic(self, X, targets, sample_weight, incremental):
        early_stopping = self.early_stopping and not incremental
        if early_stopping:
            X, X_val, targets, targets_val, sample_weight, sample_weight_val = self._split_validation(
                X, targets, sample_weight)
        n_samples = X.shape[0]
        weight_total = float(n_samples if sample_weight is None else sample_weight.sum())
        if weight_total <= 0:
            raise ValueError("sample_weight sums to %g; at least one sample needs a positive weight"
                             % weight_total)
        module, trainer, ctx = self._get_module(), self._trainer, self._ctx
        loss_fn = self._loss()
        n_targets = 1 if targets.ndim == 1 else targets.shape[1]
        # The weights travel as the label's last column, so that one loader
        # (order, CSR assembly, background prefetch) serves both.
        labels = targets.reshape(n_samples, n_targets)
        if sample_weight is not None:
            labels = np.column_stack([labels, sample_weight])
        batch_size = self._batch_size(n_samples)
        # Building batches in a background thread pays off over many batches; for
        # an epoch of a few the thread's start costs more than it hides.
        prefetch = 2 if n_samples > 4 * batch_size else 0
        loader = SparseDataLoader(CSRDataset(X, labels), batch_size=batch_size,
                                  shuffle=self.shuffle, ctx=ctx, dtype=np.float32, prefetch=prefetch,
                                  seed=int(self._random_state.randint(np.iinfo(np.int32).max)))
        epochs = 1 if incremental else self.max_iter
        progress = tqdm(range(epochs), desc=type(self).__name__, unit="epoch",
                        disable=not self.verbose, leave=False)
        converged = False
        for _ in progress:
            epoch_loss = mx.nd.zeros((1,), ctx=ctx)
            n_steps = 0
            for x, label in loader:
                if sample_weight is None:
                    weight_sum, batch_weight = x.shape[0], None
                else:
                    batch_weight = label[:, n_targets]
                    # A host copy of a label batch: it waits for no computation.
                    weight_sum = float(batch_weight.asnumpy().sum())
                    if weight_sum <= 0:
                        continue  # every sample of this batch has weight 0: nothing to learn
                target = label[:, 0] if n_targets == 1 else label[:, :n_targets]
                with autograd.record():
                    losses = loss_fn(module(x), target)
                    if batch_weight is not None:
                        losses = losses * batch_weight
                losses.backward()
                # MLPClassifier's objective: weighted mean loss + alpha/2 ||W||^2 / weight sum.
                trainer.optimizer.wd = self.alpha / weight_sum
                trainer.step(weight_sum)
                epoch_loss += losses.sum()
                n_steps += 1
            self.n_iter_ += 1
            self.t_ += n_samples
            self.loss_ = self._epoch_loss(epoch_loss, n_steps, weight_total)
            self.loss_curve_.append(self.loss_)
            postfix = {"loss": "%.5f" % self.loss_}
            if early_stopping:
                score = self._score_encoded(X_val, targets_val, sample_weight_val)
                self.validation_scores_.append(score)
                postfix["val_score"] = "%.5f" % score
            progress.set_postfix(postfix)
            logger.debug("%s epoch %d: %s", type(self).__name__, self.n_iter_, postfix)
            self._update_no_improvement_count(early_stopping)
            if self._no_improvement_count > self.n_iter_no_change:
                converged = True
                logger.info("%s: %s did not improve more than tol=%g for %d consecutive epochs; "
                            "stopping", type(self).__name__,
                            "validation score" if early_stopping else "training loss",
                            self.tol, self.n_iter_no_change)
                break
        progress.close()
        if early_stopping and self._best_params is not None:
            params = module._collect_params_with_prefix()
            # Every row up to date first: a row left behind would have the
            # steps it skipped since the best epoch replayed onto the restored
            # weights when next read.
            flush_deferred(params.values())
            for name, param in params.items():
                param.set_data(self._best_params[name])
        self._best_params = None
        if not converged and not incremental:
            warnings.warn("Stochastic Optimizer: Maximum iterations (%d) reached and the "
                          "optimization hasn't converged yet." % self.max_iter, ConvergenceWarning)

    def _split_validation(self, X, targets, sample_weight):
        stratify = targets if isinstance(self, ClassifierMixin) else None
        arrays = [X, targets] + ([] if sample_weight is None else [sample_weight])
        try:
            parts = train_test_split(*arrays, test_size=self.validation_fraction,
                                     random_state=self._random_state, stratify=stratify)
        except ValueError as err:
            raise ValueError("early_stopping could not hold out validation_fraction=%g of %d "
                             "samples: %s" % (self.validation_fraction, X.shape[0], err)) from err
        if sample_weight is None:
            parts += [None, None]
        if parts[1].shape[0] < 2:
            raise ValueError("early_stopping needs at least 2 validation samples; "
                             "validation_fraction=%g of %d samples gives %d"
                             % (self.validation_fraction, X.shape[0], parts[1].shape[0]))
        self._best_params = None
        return parts

    def _epoch_loss(self, data_loss, n_steps, weight_total):
        """MLPClassifier's ``loss_`` of an epoch.

        Each step minimises its batch's weighted mean loss plus
        ``0.5 * alpha * ||W||^2 / (batch weight)``; the epoch's loss is the
        average of those objectives weighted by the batches' weights: the
        summed weighted loss plus ``0.5 * alpha * ||W||^2`` per step, over the
        total weight. As MLPClassifier's (unweighted), except that ``||W||``
        is taken once, at the end of the epoch, rather than before every step:
        under deferred Adam that needs every row up to date, a replay of all
        the epoch's skipped steps, and it is paid once per epoch.

        Parameters
        ----------
        data_loss : NDArray of shape (1,)
            The epoch's summed (weighted) per-sample losses.
        n_steps : int
            Optimizer steps taken in the epoch.
        weight_total : float
            Number of samples, or sum of their weights.
        """
        if self.alpha and n_steps:
            data_loss = data_loss + 0.5 * self.alpha * n_steps * self._squared_weight_norm()
        # The only wait of an epoch for the engine: its steps and this sum.
        return float(data_loss.asscalar()) / weight_total

    def _squared_weight_norm(self):
        """``||W||^2`` over every penalised parameter (all but the biases), as an NDArray."""
        params = [param for name, param in self._get_module().collect_params().items()
                  if not name.endswith("bias")]
        flush_deferred(params)
        squares = [mx.nd.zeros((1,), ctx=self._ctx)]
        for param in params:
            flat = param.data().reshape((-1,))
            # A BLAS dot: 10x faster than nd.norm on a wide layer's weight,
            # whose float32 reduction also saturates past 2**24.
            squares.append(mx.nd.dot(flat, flat))
        return mx.nd.add_n(*squares)

    def _update_no_improvement_count(self, early_stopping):
        if early_stopping:
            score = self.validation_scores_[-1]
            self._no_improvement_count = (self._no_improvement_count + 1
                                          if score < self.best_validation_score_ + self.tol else 0)
            if score > self.best_validation_score_:
                self.best_validation_score_ = score
                params = self._get_module()._collect_params_with_prefix()
                flush_deferred(params.values())
                # Copies on the device: asynchronous, no round trip through the host.
                self._best_params = {name: param.data().copy() for name, param in params.items()}
        else:
            self._no_improvement_count = (self._no_improvement_count + 1
                                          if self.loss_curve_[-1] > self.best_loss_ - self.tol else 0)
            if self.loss_curve_[-1] < self.best_loss_:
                self.best_loss_ = self.loss_curve_[-1]

    # ------------------------------------------------------------------ prediction
    def _forward(self, X):
        """Network outputs for validated CSR ``X``, as float64 ``(n_samples, n_outputs)``."""
        module = self._get_module()
        outputs = [module(batch).asnumpy()[:rows] for batch, rows in padded_csr_batches(X, self._ctx)]
        return np.concatenate(outputs).astype(np.float64).reshape(X.shape[0], -1)

    def _raw_predict(self, X):
        check_is_fitted(self, "n_outputs_")
        return self._forward(self._validate_X(X, reset=False))

    # ------------------------------------------------------------------ persistence
    def save(self, path):
        """Write the fitted estimator to the directory ``path``, without pickle.

        The network's parameters go to ``network.params`` (MXNet's format),
        the hyper-parameters and ``classes_`` to ``estimator.json``. The
        directory is written under a temporary name and renamed into place.

        Parameters
        ----------
        path : str or os.PathLike
            Model directory (replaced if it already holds a model).
        """
        from ._io import save
        save(self, path)

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
        from ._io import load
        estimator = load(path, **params)
        if not isinstance(estimator, cls):
            raise TypeError("%s holds a %s, not a %s" % (path, type(estimator).__name__,
                                                         cls.__name__))
        return estimator

    # ------------------------------------------------------------------ pickling
    def __getstate__(self):
        # A copy: on Python 3.11+ BaseEstimator may hand back the live __dict__.
        state = dict(super().__getstate__())
        module = state.pop("_module", None)
        state.pop("_trainer", None)
        state.pop("_ctx", None)
        if module is not None:
            # Plain numpy arrays: the pickle does not depend on the device the
            # model was trained on, and loads on a CPU-only machine.
            state["_module_params"] = module_param_arrays(module)
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        self._module = None
        self._trainer = None
        if self._is_fitted():
            self._ctx = available_context(self.ctx)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


class SparseClassifierMixin(ClassifierMixin):
    """Classification part: label encoding, sigmoid / softmax outputs, predict_proba.

    Binary problems use one sigmoid output (``SigmoidBinaryCrossEntropyLoss``),
    multiclass problems one output per class (``SoftmaxCrossEntropyLoss``).
    Labels may be of any type scikit-learn classifies (strings too).
    """

    def _multi_output_targets(self):
        return False

    def _numeric_targets(self):
        return False

    def _encode_targets(self, y, first_pass, classes):
        check_classification_targets(y)
        if first_pass:
            encoder = LabelEncoder().fit(y if classes is None else classes)
            if len(encoder.classes_) < 2:
                raise ValueError("%s needs samples of at least 2 classes, got 1 class: %r"
                                 % (type(self).__name__, encoder.classes_[0]))
            self._label_encoder = encoder
            self.classes_ = encoder.classes_
        unknown = np.setdiff1d(y, self.classes_)
        if len(unknown):
            raise ValueError("y has labels %r that are not among the classes %r %s"
                             % (unknown.tolist()[:10], self.classes_.tolist(),
                                "given on the first partial_fit call" if classes is None
                                else "passed as classes"))
        encoded = self._label_encoder.transform(y).astype(np.float32)
        return encoded, (1 if len(self.classes_) == 2 else len(self.classes_))

    def _loss(self):
        if getattr(self, "loss", None) is not None:
            return self.loss
        if self.n_outputs_ == 1:
            return gluon.loss.SigmoidBinaryCrossEntropyLoss(from_sigmoid=False)
        return gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=True)

    def _score_encoded(self, X, encoded, sample_weight):
        predicted = self._predict_encoded(self._forward(X))
        return accuracy_score(encoded, predicted, sample_weight=sample_weight)

    def _predict_encoded(self, raw):
        if raw.shape[1] == 1:
            return (raw[:, 0] > 0).astype(np.intp)
        return raw.argmax(axis=1)

    def decision_function(self, X):
        """Network outputs before the sigmoid / softmax.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), path or LibSVMDataset

        Returns
        -------
        ndarray of shape (n_samples,) for binary problems, else (n_samples, n_classes)
            Positive values mean ``classes_[1]`` in the binary case.
        """
        raw = self._raw_predict(X)
        return raw[:, 0] if raw.shape[1] == 1 else raw

    def predict(self, X):
        """Predict class labels.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), path or LibSVMDataset

        Returns
        -------
        ndarray of shape (n_samples,)
            Labels from ``classes_``.
        """
        encoded = self._predict_encoded(self._raw_predict(X))
        return self.classes_[encoded]

    def predict_proba(self, X):
        """Class probabilities.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), path or LibSVMDataset

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
            Columns follow ``classes_``; rows sum to 1.
        """
        raw = self._raw_predict(X)
        if raw.shape[1] == 1:
            positive = 1.0 / (1.0 + np.exp(-raw[:, 0]))
            return np.column_stack([1.0 - positive, positive])
        raw = raw - raw.max(axis=1, keepdims=True)
        proba = np.exp(raw)
        return proba / proba.sum(axis=1, keepdims=True)

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), path or LibSVMDataset

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
        """
        return np.log(self.predict_proba(X))

    def partial_fit(self, X, y, classes=None, sample_weight=None):
        """One epoch over ``(X, y)``, continuing from the current weights.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), path or LibSVMDataset
        y : array-like of shape (n_samples,)
        classes : array-like, optional
            Every label that will ever be seen; required on the first call.
        sample_weight : array-like of shape (n_samples,), optional

        Returns
        -------
        self
        """
        if not self._is_fitted():
            if classes is None:
                raise ValueError("classes must be passed on the first call to partial_fit")
            return self._fit_with_validation(X, y, sample_weight, incremental=True,
                                             classes=classes)
        if classes is not None and not np.array_equal(np.unique(classes), self.classes_):
            raise ValueError("classes=%r is not the same as on the first partial_fit call (%r)"
                             % (np.unique(classes).tolist(), self.classes_.tolist()))
        return self._fit_with_validation(X, y, sample_weight, incremental=True)


class SparseRegressorMixin(RegressorMixin):
    """Regression part: float targets (one or several columns), squared loss."""

    def _multi_output_targets(self):
        return True

    def _numeric_targets(self):
        return True

    def _encode_targets(self, y, first_pass, classes):
        y = np.asarray(y, dtype=np.float32)
        if y.ndim == 1:
            y = y.reshape(-1, 1)
        if not first_pass and y.shape[1] != self.n_outputs_:
            raise ValueError("y has %d columns but the model was fitted with %d outputs"
                             % (y.shape[1], self.n_outputs_))
        return y, y.shape[1]

    def _loss(self):
        if getattr(self, "loss", None) is not None:
            return self.loss
        return gluon.loss.L2Loss()

    def _score_encoded(self, X, targets, sample_weight):
        return r2_score(targets, self._forward(X), sample_weight=sample_weight)

    def predict(self, X):
        """Predict targets.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), path or LibSVMDataset

        Returns
        -------
        ndarray of shape (n_samples,) or (n_samples, n_outputs)
        """
        raw = self._raw_predict(X)
        return raw[:, 0] if raw.shape[1] == 1 else raw

    def partial_fit(self, X, y, sample_weight=None):
        """One epoch over ``(X, y)``, continuing from the current weights.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), path or LibSVMDataset
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        sample_weight : array-like of shape (n_samples,), optional

        Returns
        -------
        self
        """
        return self._fit_with_validation(X, y, sample_weight, incremental=True)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags
