"""The training loop: mini-batch steps over CSR batches, sample weights, early stopping.

:class:`TrainingMixin` is the ``fit`` side of :class:`~._base.BaseSparseNet`:
validated input in, a trained ``self._module`` out, with scikit-learn
``MLPClassifier``'s bookkeeping (``loss_``, ``loss_curve_``, ``best_loss_``,
``validation_scores_``, ``best_validation_score_``, ``n_iter_``, ``t_``).

What it needs from the rest of the estimator:

- ``_build_module(n_outputs)`` / ``_initialize_module(module, seed, ctx)``: the
  network family (mlp.py, net.py);
- the task hooks of :mod:`._tasks` (``_encode_targets``, ``_loss``,
  ``_score_encoded``, ``_validation_stratify``, ``_multi_output_targets``,
  ``_numeric_targets``);
- ``_validate_training_data`` and ``_reset_fitted_state`` of the base.
"""
import contextlib
import logging
import warnings

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from sklearn.base import _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.utils.validation import _check_sample_weight
from tqdm.auto import tqdm

from .._interrupt import check as check_interrupt, interruptible
from ..data import CSRDataset, SparseDataLoader
from ..optimizer.deferred import flush
from ._context import parse_context
from ._data import check_training_batch
from ._optimizer_params import checked_optimizer_params
from ._optimizer_state import restore_trainer_states
from ._params import first_nonfinite_param

logger = logging.getLogger(__name__)

__all__ = ["TrainingMixin", "registered_optimizer", "raise_if_diverged",
           "check_partial_fit_params", "check_weight_total", "fit_trainer", "unchanged_if_refused"]


#: Registered MXNet optimizers that cannot train these networks, and why.
UNUSABLE_OPTIMIZERS = {
    "test": "it is the optimizer of MXNet's own unit tests",
    "groupadagrad": "MXNet's GroupAdaGrad takes 2-D weights only, and every layer has a bias",
}


#: MXNet optimizers whose row_sparse update is lazy, with no option to make it standard,
#: and the gluon-sparse optimizer with the standard update.
_LAZY_ONLY = {"nag": "sparsenag", "lbsgd": "sparsesgd"}


def registered_optimizer(name, alpha=0.0):
    """``name`` lower-cased, if it is a registered MXNet optimizer ('sparseadam' is, by this
    import) that can train these networks with L2 penalty ``alpha``; else a ValueError."""
    known = mx.optimizer.Optimizer.opt_registry
    lowered = name.lower()
    if lowered not in known:
        raise ValueError("optimizer=%r is not a registered MXNet optimizer; known: %s"
                         % (name, ", ".join(sorted(known))))
    if lowered in UNUSABLE_OPTIMIZERS:
        raise ValueError("optimizer=%r cannot train these networks: %s; choose another, e.g. "
                         "'sparseadam'" % (name, UNUSABLE_OPTIMIZERS[lowered]))
    if lowered in _LAZY_ONLY and alpha > 0:
        # Their row_sparse update has no standard form to ask for (lazy_update=False,
        # which the estimators pass to 'adam' and 'sgd', optimizer_params.py).
        raise ValueError("optimizer=%r with alpha=%g: MXNet's %s updates the sparse first "
                         "layer's row_sparse gradient lazily, so the rows of features absent "
                         "from a batch would get no L2 penalty; use optimizer=%r (the standard "
                         "update, exact) or alpha=0" % (name, alpha, name, _LAZY_ONLY[lowered]))
    if lowered == "adagrad" and alpha > 0:
        # MXNet fails inside the first step, with a storage-type error naming no option.
        raise ValueError("optimizer='adagrad' with alpha=%g: MXNet's AdaGrad has no weight decay "
                         "for the row_sparse gradient of the sparse first layer; use "
                         "optimizer='sparseadagrad' (AdaGrad with weight decay, exact) or "
                         "alpha=0" % alpha)
    return lowered


@contextlib.contextmanager
def unchanged_if_refused(estimator):
    """Give the estimator back its attributes as they were if the block raises.

    A fit first checks its inputs, and the checks set fitted attributes as they
    go (``validate_data(reset=True)`` sets ``n_features_in_``, the labels set
    ``classes_``). A fit refused halfway (unknown optimizer, one class, bad
    targets) must not leave the earlier network beside the refused call's
    classes or width, which would predict the new labels with the old network.
    The attributes are replaced, not mutated, before training starts, so a
    shallow copy of them is enough.
    """
    saved = dict(vars(estimator))
    try:
        yield
    except BaseException:
        vars(estimator).clear()
        vars(estimator).update(saved)
        raise


def fit_trainer(estimator, module, optimizer, incremental, optimizer_options):
    """The Trainer of a fit, set as ``estimator._trainer``.

    ``partial_fit`` goes on with the one it has, or on an unpickled copy with
    the state the pickle kept (:mod:`._optimizer_state`). ``fit`` builds a new
    one, as MLPClassifier builds a new optimizer at every ``fit``: a
    warm-started fit reads ``optimizer``, ``optimizer_params`` and
    ``learning_rate_init`` again and starts the optimizer's state afresh
    (Adam's moments and bias correction). ``optimizer_options``: the Trainer's
    options but the rate (:func:`~._optimizer_params.checked_optimizer_params`).
    """
    pending = estimator.__dict__.pop("_pending_optimizer_states", None)
    if estimator._trainer is not None:
        if incremental:
            return estimator._trainer
        flush(estimator._trainer)  # rows a deferred optimizer left behind, caught up first
    params = module.collect_params()
    for name, param in params.items():
        if name.endswith("bias"):
            param.wd_mult = 0.0  # alpha penalises weights only, as in MLPClassifier
    if estimator.learning_rate_init < _MIN_LEARNING_RATE:
        raise ValueError("learning_rate_init=%g is too small for float32 training (at least "
                         "%g): MXNet's optimizers refuse a step's rate below %g, which Adam's "
                         "bias correction brings it under (nothing would move anyway)"
                         % (estimator.learning_rate_init, _MIN_LEARNING_RATE, _FLT_MIN))
    options = dict(optimizer_options, learning_rate=estimator.learning_rate_init)
    trainer = gluon.Trainer(params, optimizer, options, kvstore=None)
    if incremental and pending is not None:
        restore_trainer_states(trainer, pending)
    estimator._trainer = trainer
    return trainer


def check_partial_fit_params(estimator, incremental):
    """Refuse ``early_stopping=True`` in ``partial_fit``, as scikit-learn's MLPs do (it
    was ignored: one epoch holds out nothing)."""
    if incremental and estimator.early_stopping:
        raise ValueError("partial_fit does not support early_stopping=True")


def raise_if_diverged(estimator, module, always):
    """Raise a ValueError if training left a NaN or infinite weight in ``module``.

    As scikit-learn's MLPs do after every fit, rather than return a model
    that predicts NaN (or one class for every sample). Reading every weight
    costs a pass over the model, so with ``always=False`` (after an epoch, and
    after ``partial_fit``) the weights are read only when the epoch's loss is
    not finite, which a non-finite weight makes it as soon as the weight is used.
    """
    if not always and np.isfinite(estimator.loss_):
        return
    name = first_nonfinite_param(module)
    if name is None:
        return
    if "adamax" in str(estimator.optimizer).lower():
        cause = ("Adamax divides by its state u, which stays 0 for a weight whose gradient "
                 "is always 0 (MXNet's Adamax has no epsilon): choose another optimizer")
    else:
        cause = ("the training diverged. Try a smaller learning_rate_init (now %g; --lr on the "
                 "command line), or scale the input and targets" % estimator.learning_rate_init)
    # loss_curve_: every epoch the weights went through (n_iter_ counts this call's only).
    raise ValueError("%s: the solver produced non-finite weights (parameter %r) after %d "
                     "epochs: %s" % (type(estimator).__name__, name, len(estimator.loss_curve_),
                                     cause))


# MXNet's operators refuse a float32 scalar below the least normal float (dmlc's
# parser: "Out of range value for wd"), a limit of theirs, not of the maths.
_FLT_MIN = float(np.finfo(np.float32).tiny)
_FLT_MAX = float(np.finfo(np.float32).max)
# The bias-corrected rate of Adam's first step is 0.32 x the rate: a margin of 100.
_MIN_LEARNING_RATE = 100 * _FLT_MIN


def weighted_step(trainer, alpha, weight_sum):
    """One optimizer step of a batch whose sample weights sum to ``weight_sum``:
    MLPClassifier's objective, the weighted mean loss + alpha/2 ||W||^2 / weight sum.

    A wd below float32's normal range is 0: its term wd * w is below the float32
    resolution of any gradient it is added to. A weight sum whose inverse (the
    step's rescale_grad) is not a normal float32 is refused, naming sample_weight.
    """
    if not _FLT_MIN <= 1.0 / weight_sum <= _FLT_MAX:
        raise ValueError("the sample weights of a batch sum to %g: float32 training cannot scale "
                         "the gradient by its inverse (%g, outside [%g, %g]); scale sample_weight"
                         % (weight_sum, 1.0 / weight_sum, _FLT_MIN, _FLT_MAX))
    wd = alpha / weight_sum
    trainer.optimizer.wd = wd if wd >= _FLT_MIN else 0.0
    trainer.step(weight_sum)


def check_weight_total(n_samples, sample_weight):
    """The weights' sum; refused if 0 or less: no batch would train (every one skipped)."""
    total = float(n_samples if sample_weight is None else sample_weight.sum())
    if not total > 0:
        raise ValueError("sample_weight sums to %g; at least one sample needs a positive weight"
                         % total)
    return total


class TrainingMixin:
    """``fit``, the epoch loop and early stopping, shared by every estimator."""

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
        return self._check_params_and_fit(X, y, sample_weight)

    @_fit_context(prefer_skip_nested_validation=True)
    def _check_params_and_fit(self, X, y, sample_weight=None, incremental=False, classes=None):
        """:meth:`_fit` after scikit-learn has checked the hyper-parameters against
        ``_parameter_constraints`` (what ``_fit_context`` does); ``fit`` and
        ``partial_fit`` enter training here."""
        return self._fit(X, y, sample_weight, incremental=incremental, classes=classes)

    def _fit(self, X, y, sample_weight=None, incremental=False, classes=None):
        check_partial_fit_params(self, incremental)
        first_pass = not self._is_fitted() or (not self.warm_start and not incremental)
        with unchanged_if_refused(self):
            X, y = self._validate_training_data(X, y, reset=first_pass)
            if sample_weight is not None:
                sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float32)
            targets, n_outputs = self._encode_targets(y, first_pass, classes, sample_weight,
                                                      warm_start=not (first_pass or incremental))
            optimizer = registered_optimizer(self.optimizer, self.alpha)
            options = checked_optimizer_params(optimizer, self.optimizer_params)
        if first_pass:
            self._reset_fitted_state(parse_context(self.ctx),
                                     fitted=self._new_fit_attributes(n_outputs))
            self._module = self._new_module(n_outputs)
        fit_trainer(self, self._get_module(), optimizer, incremental, options)
        self._fit_stochastic(X, targets, sample_weight, incremental)
        return self

    def _new_fit_attributes(self, n_outputs):
        """The fitted attributes of a fit that starts from scratch."""
        # As MLPClassifier: best_loss_ is None where early stopping tracks a score instead.
        return {"n_outputs_": n_outputs, "loss_curve_": [], "t_": 0, "n_iter_": 0,
                "best_loss_": None if self.early_stopping else np.inf,
                "validation_scores_": [] if self.early_stopping else None,
                "best_validation_score_": -np.inf if self.early_stopping else None}

    def _start_validation_record(self):
        """Early stopping switched on for a warm-started fit whose first fit had none:
        start its validation record (it was None, and the first epoch failed on it)."""
        if self.validation_scores_ is None:
            self.validation_scores_ = []
            self.best_validation_score_ = -np.inf

    def _new_module(self, n_outputs):
        # Same random_state -> same seed -> same initial weights. The seed is
        # kept: a saved model leaves the rows still at their initial values to it.
        self._init_seed = int(self._random_state.randint(np.iinfo(np.int32).max))
        module = self._build_module(n_outputs)
        self._initialize_module(module, self._init_seed, self._ctx)
        self._module_architecture = self._architecture()
        return module

    def _batch_size(self, n_samples):
        if self.batch_size == "auto":
            batch_size = min(200, n_samples)
        else:
            if self.batch_size > n_samples:
                warnings.warn("Got `batch_size` larger than the number of samples (%d); it is "
                              "clipped to %d" % (n_samples, n_samples))
            batch_size = min(self.batch_size, n_samples)
        check_training_batch(batch_size, self.n_features_in_, owner=self)
        return batch_size

    @interruptible
    def _fit_stochastic(self, X, targets, sample_weight, incremental):
        early_stopping = self.early_stopping and not incremental
        if early_stopping:
            self._start_validation_record()
            X, X_val, targets, targets_val, sample_weight, sample_weight_val = self._split_validation(
                X, targets, sample_weight)
        n_samples = X.shape[0]
        weight_total = check_weight_total(n_samples, sample_weight)
        module, trainer, ctx = self._get_module(), self._trainer, self._ctx
        self.n_iter_ = 0  # epochs of this call, as MLPClassifier counts them
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
        best_params = None  # early stopping: copies of the best epoch's parameters
        for _ in progress:
            epoch_loss = mx.nd.zeros((1,), ctx=ctx)
            n_steps = 0
            for x, label in loader:
                check_interrupt()
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
                    losses = self._network_losses(module, loss_fn, x, target)
                    if batch_weight is not None:
                        losses = losses * batch_weight
                losses.backward()
                weighted_step(trainer, self.alpha, weight_sum)
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
            if not early_stopping:  # else the best epoch's weights may still be restored
                raise_if_diverged(self, module, always=False)
            if self._update_no_improvement_count(early_stopping):
                best_params = self._copy_params()
            if self._no_improvement_count > self.n_iter_no_change:
                converged = True
                logger.info("%s: %s did not improve more than tol=%g for %d consecutive epochs; "
                            "stopping", type(self).__name__,
                            "validation score" if early_stopping else "training loss",
                            self.tol, self.n_iter_no_change)
                break
        progress.close()
        if best_params is not None:
            self._restore_params(best_params)
        raise_if_diverged(self, module, always=not incremental)
        if not converged and not incremental:
            warnings.warn("Stochastic Optimizer: Maximum iterations (%d) reached and the "
                          "optimization hasn't converged yet." % self.max_iter, ConvergenceWarning)

    def _network_losses(self, module, loss_fn, x, target):
        """Per-sample losses of a batch (a network with its own loss, e.g. a sampled
        output layer, overrides this to take the targets itself)."""
        return loss_fn(module(x), target)

    def _split_validation(self, X, targets, sample_weight):
        arrays = [X, targets] + ([] if sample_weight is None else [sample_weight])
        try:
            parts = train_test_split(*arrays, test_size=self.validation_fraction,
                                     random_state=self._random_state,
                                     stratify=self._validation_stratify(targets))
        except ValueError as err:
            raise ValueError("early_stopping could not hold out validation_fraction=%g of %d "
                             "samples: %s" % (self.validation_fraction, X.shape[0], err)) from err
        if sample_weight is None:
            parts += [None, None]
        if parts[1].shape[0] < 2:
            raise ValueError("early_stopping needs at least 2 validation samples; "
                             "validation_fraction=%g of %d samples gives %d"
                             % (self.validation_fraction, X.shape[0], parts[1].shape[0]))
        return parts

    def _epoch_loss(self, data_loss, n_steps, weight_total):
        """MLPClassifier's ``loss_`` of an epoch.

        Each step minimises its batch's weighted mean loss plus
        ``0.5 * alpha * ||W||^2 / (batch weight)``; the epoch's loss is the
        average of those objectives weighted by the batches' weights: the
        summed weighted loss plus ``0.5 * alpha * ||W||^2`` per step, over the
        total weight. As MLPClassifier's without sample weights (with them,
        MLPClassifier weighs each batch by its rows, not its weight), except
        that ``||W||`` is taken once, at the end of the epoch, rather than before every step:
        under a deferred optimizer that needs every row up to date, a replay of all
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
        data_loss = data_loss * self._reported_loss_scale()
        if self.alpha and n_steps:
            data_loss = data_loss + 0.5 * self.alpha * n_steps * self._squared_weight_norm()
        # The only wait of an epoch for the engine: its steps and this sum.
        return float(data_loss.asscalar()) / weight_total

    def _reported_loss_scale(self):
        """Factor from the trained data loss to the one ``loss_`` reports (1; see the
        regressor's)."""
        return 1.0

    def _squared_weight_norm(self):
        """``||W||^2`` over every penalised parameter, as an NDArray: those the optimizer
        decays (``fit_trainer`` leaves the biases out), and trains (a BatchNorm's running
        mean and var have no gradient: no penalty moves them)."""
        params = [param for param in self._get_module().collect_params().values()
                  if param.wd_mult != 0 and param.grad_req != "null"]
        squares = [mx.nd.zeros((1,), ctx=self._ctx)]
        for param in params:
            flat = param.data().reshape((-1,))
            # A BLAS dot: 10x faster than nd.norm on a wide layer's weight,
            # whose float32 reduction also saturates past 2**24.
            squares.append(mx.nd.dot(flat, flat))
        return mx.nd.add_n(*squares)

    def _update_no_improvement_count(self, early_stopping):
        """Count the epochs without improvement; True when the validation score is a new best."""
        if early_stopping:
            score = self.validation_scores_[-1]
            self._no_improvement_count = (self._no_improvement_count + 1
                                          if score < self.best_validation_score_ + self.tol else 0)
            if score > self.best_validation_score_:
                self.best_validation_score_ = score
                return True
        else:
            if self.best_loss_ is None:  # early stopping switched off for a warm start
                self.best_loss_ = np.inf
            self._no_improvement_count = (self._no_improvement_count + 1
                                          if self.loss_curve_[-1] > self.best_loss_ - self.tol else 0)
            if self.loss_curve_[-1] < self.best_loss_:
                self.best_loss_ = self.loss_curve_[-1]
        return False

    def _copy_params(self):
        """Copies of every parameter, up to date, on the device (asynchronous, no host trip)."""
        params = self._get_module()._collect_params_with_prefix()
        # data() brings deferred rows up to date first (optimizer/_parameter_hooks.py).
        return {name: param.data().copy() for name, param in params.items()}

    def _restore_params(self, copies):
        """Put :meth:`_copy_params`' copies back."""
        params = self._get_module()._collect_params_with_prefix()
        # set_data brings every deferred row up to date before it writes (a row
        # left behind would have the steps it skipped replayed onto the copy).
        for name, param in params.items():
            param.set_data(copies[name])
