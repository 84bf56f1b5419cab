"""Multi-label (and huge multi-class) classification with a sampled output layer.

:class:`SparseMultiLabelClassifier` is a :class:`~gluon_sparse.nn.FullyConnectedSparse`
network whose output is a :class:`~gluon_sparse.nn.SampledOutput`: a training
step scores the batch's positive labels and ``num_sampled`` sampled negatives
only, and prediction ranks all labels exactly (:func:`~gluon_sparse.nn.top_k_scores`).
Internally labels are numbered by decreasing training frequency, which is the
order the default log-uniform sampler assumes; ``classes_`` keeps the labels
as given, sorted. Checking and encoding the targets and learning that order is
:mod:`gluon_sparse.sklearn._multilabel_targets`'s; the network, training and
prediction are here.
"""
import logging
import warnings
from numbers import Integral

import mxnet as mx
import numpy as np
import scipy.sparse as sp
from mxnet import autograd, gluon
from sklearn.base import ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import _check_sample_weight, check_is_fitted
from tqdm.auto import tqdm

from .._interrupt import check as check_interrupt, interruptible
from ..data import LibSVMDataset, csr_to_ndarray, load_multilabel
from ..data.multilabel import labels_to_indicator
from ..nn import FullyConnectedSparse, SampledOutput, top_k_scores
from ._base import BaseSparseNet
from ._class_output import SampledNet
from ._context import parse_context
from ._data import (check_training_batch, existing_libsvm_paths, is_libsvm_source,
                    padded_csr_batches)
from ._hyperparams import estimator_init
from ._multilabel_targets import MultiLabelTargetsMixin
from ._optimizer_params import checked_optimizer_params
from ._training import (check_partial_fit_params, check_weight_total, fit_trainer,
                        raise_if_diverged, registered_optimizer, unchanged_if_refused,
                        weighted_step)

__all__ = ["SparseMultiLabelClassifier"]

logger = logging.getLogger(__name__)

_ACTIVATIONS = {"identity": None, "logistic": "sigmoid", "tanh": "tanh", "relu": "relu"}
# Rows per forward pass at prediction (the top-k merges its own label blocks).
_PREDICT_ROWS = 1024
_BLOCK_SCORES = 1 << 22
_MIN_BLOCK_ROWS = 64


def _with_defaults(init, **defaults):
    """``init`` (from :func:`estimator_init`) with other defaults for some common parameters."""
    signature = init.__signature__
    signature = signature.replace(parameters=[
        p.replace(default=defaults.get(p.name, p.default)) for p in signature.parameters.values()])

    def __init__(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        for name, value in list(bound.arguments.items())[1:]:
            setattr(self, name, value)

    __init__.__signature__ = signature
    return __init__


def _widened_to_classes(Y, classes):
    """A file's label indicator (column j: label id j, up to the file's largest id) with
    as many columns as ``classes`` names ids, where ``classes`` is ids 0..L-1: the first
    ``partial_fit`` of part files names every id there will be, and the first part need
    not hold the largest."""
    if classes is None or not sp.issparse(Y):
        return Y
    ids = np.asarray(list(classes))
    if (ids.ndim == 1 and classes_are_label_ids(ids) and ids.size >= Y.shape[1]
            and np.array_equal(ids, np.arange(ids.size))):
        Y = sp.csr_matrix(Y)
        Y.resize((Y.shape[0], ids.size))
    return Y


def classes_are_label_ids(classes):
    """Whether a model's ``classes_`` are integer label ids, what a multi-label file's
    labels are (a model fitted on other labels cannot be compared with a file's)."""
    classes = np.asarray(classes)
    return classes.dtype.kind in "iu" or (
        classes.dtype.kind == "f" and bool(np.all(classes == np.floor(classes))))


def _label_ids(labels, dataset):
    """The rows' label ids (ints) of a multi-label LibSVMDataset's label tuples; a label
    that is not a whole number >= 0 is named by file and line."""
    rows = []
    for row, values in enumerate(labels):
        for value in values:
            if not (np.isfinite(value) and value >= 0 and value == int(value)):
                path, line = dataset.locate(row)
                raise ValueError("%s, line %d: label %r is not a label id (a whole number >= 0)"
                                 % (path, line, value))
        rows.append([int(value) for value in values])
    return rows


class SparseMultiLabelClassifier(ClassifierMixin, MultiLabelTargetsMixin, BaseSparseNet):
    """Multi-label classifier for sparse input and huge label sets.

    ``fit(X, Y)`` takes ``Y`` as a scipy sparse indicator matrix ``(n, L)``
    (labels are the column indices), label lists (a list of lists, or a 1-D
    object array of them, as ``LibSVMDataset(multilabel=True).label``; labels
    are numbers or strings), or a 1-D array (multi-class: one label a row).
    Rows of one length holding only 0 and 1 are an indicator, as
    scikit-learn reads them (``type_of_target``), not label lists.
    ``X`` may also be the path of a multi-label LibSVM or extreme-classification
    file, or a list of them (:func:`~gluon_sparse.data.load_multilabel`): its
    labels are ``Y`` when none is given, and the index base of the training
    files (``zero_based_``) is the base of every file read later.
    Training is sampled (:class:`~gluon_sparse.nn.SampledOutput`): a step
    costs what the batch's candidates cost, not ``L``.

    Parameters
    ----------
    hidden_layer_sizes : array-like of int, default (256,)
        Units of the hidden layers; the first is a FullyConnectedSparse layer.
    activation : {'identity', 'logistic', 'tanh', 'relu'}, default 'relu'
    num_sampled : int, default 1024
        Negative draws per batch.
    sampler : {'log_uniform', 'uniform', 'frequency', 'in_batch', 'all'}, default 'log_uniform'
        See :class:`~gluon_sparse.nn.SampledOutput` (labels are numbered by
        decreasing training frequency, so 'log_uniform' follows popularity).
    output_loss : {'auto', 'softmax', 'bce'}, default 'auto'
        Sampled softmax (target uniform over a row's labels) or sampled
        binary cross-entropy. 'auto': 'bce' for multi-label targets, 'softmax'
        for a 1-D ``y`` (multi-class). On real multi-label text (Mulan's
        Bibtex and Delicious, benchmarks/bench_multilabel_real.py) sampled BCE
        gave a precision@1 2-7 points above sampled softmax, which overfits
        rows with many labels.
    predict_k : int or None, default None
        Labels per row that :meth:`predict` returns; None: the average number
        of labels of a training row, rounded (at least 1).
    alpha : float, default 0.0
        L2 penalty on the weights (not biases). Default 0: with a penalty every
        label row moves every step, which deferred Adam must then replay.
    batch_size : int or 'auto', default 256
    learning_rate_init : float, default 1e-2
    max_iter : int, default 5
        Epochs (on Bibtex and Delicious, 10 epochs gained at most 0.6 points of
        precision@1 over 5, at twice the time).
    shuffle, random_state, tol, verbose, warm_start : as SparseMLPClassifier
    early_stopping : bool, default False
        Hold out ``validation_fraction`` and stop when its precision@1 has not
        improved by ``tol`` for ``n_iter_no_change`` epochs (the last weights
        are kept).
    validation_fraction : float, default 0.1
    n_iter_no_change : int, default 2
    optimizer : str, default 'sparseadam'
        With 'sparseadam' (or any optimizer of gluon-sparse's family, e.g.
        'sparsesgd'), exact deferred updates (rows not sampled follow the
        standard update exactly, at a cost proportional to the rows read).
    optimizer_params : dict, optional
        As SparseMLPClassifier: the optimizer's other hyper-parameters
        (``{'momentum': 0.9}``, ``{'beta1': 0.8}``), under MXNet's names.
    ctx : str or mxnet.Context, default 'cpu'

    Attributes
    ----------
    classes_ : ndarray of shape (n_labels,)
        The labels, sorted (column indices for an indicator ``Y``).
    multilabel_ : bool
        False when fitted on a 1-D ``y``: :meth:`predict` then returns labels.
    label_order_ : ndarray of int
        Index into ``classes_`` of each output row (most frequent label first).
    n_outputs_ : int
        Number of labels.
    loss_, loss_curve_, best_loss_, n_iter_, t_, n_features_in_ : as SparseMLPClassifier
    validation_scores_, best_validation_score_ : precision@1 on the held-out rows

    Notes
    -----
    :meth:`score` is **precision@1**: the share of rows whose best label is
    one of their labels (accuracy, for multi-class ``y``).

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> from gluon_sparse.sklearn import SparseMultiLabelClassifier
    >>> X = sp.random(200, 1000, density=0.01, format="csr", random_state=0)
    >>> Y = [[i % 7, (i * 3) % 11] for i in range(200)]
    >>> clf = SparseMultiLabelClassifier(hidden_layer_sizes=(16,), num_sampled=8,
    ...                                  max_iter=2, random_state=0).fit(X, Y)
    >>> labels, scores = clf.predict_top_k(X[:3], k=2)
    >>> labels.shape
    (3, 2)
    """

    __init__ = _with_defaults(
        estimator_init(hidden_layer_sizes=(256,), activation="relu", num_sampled=1024,
                       sampler="log_uniform", output_loss="auto", predict_k=None),
        alpha=0.0, batch_size=256, learning_rate_init=1e-2, max_iter=5, n_iter_no_change=2)

    _parameter_constraints = {
        **BaseSparseNet._parameter_constraints,
        "hidden_layer_sizes": ["array-like", Interval(Integral, 1, None, closed="left")],
        "activation": [StrOptions(set(_ACTIVATIONS))],
        "num_sampled": [Interval(Integral, 0, None, closed="left")],
        "sampler": [StrOptions({"log_uniform", "uniform", "frequency", "in_batch", "all"})],
        "output_loss": [StrOptions({"auto", "softmax", "bce"})],
        "predict_k": [Interval(Integral, 1, None, closed="left"), None],
    }
    _saved_fitted_attributes = ("multilabel_", "label_order_", "label_counts_",
                                "labels_per_row_")

    # ------------------------------------------------------------------ network
    def _architecture(self):
        # The output layer draws its negatives as built: a change rebuilds it too.
        return (tuple(self._hidden_sizes()), self.activation, self.num_sampled, self.sampler,
                self.output_loss)

    def _hidden_sizes(self):
        sizes = self.hidden_layer_sizes
        sizes = [sizes] if isinstance(sizes, Integral) else list(sizes)
        if not sizes or any(not isinstance(s, Integral) or s < 1 for s in sizes):
            raise ValueError("hidden_layer_sizes must be one or more positive integers, got %r"
                             % (self.hidden_layer_sizes,))
        return [int(s) for s in sizes]

    def _output_loss(self):
        if self.output_loss != "auto":
            return self.output_loss
        return "bce" if self.multilabel_ else "softmax"

    def _build_module(self, n_outputs):
        act = _ACTIVATIONS[self.activation]
        sizes = self._hidden_sizes()
        hidden = gluon.nn.HybridSequential(prefix="hidden_")
        with hidden.name_scope():
            hidden.add(FullyConnectedSparse(sizes[0], activation=act, in_units=self.n_features_in_))
            for previous, size in zip(sizes, sizes[1:]):
                hidden.add(gluon.nn.Dense(size, activation=act, in_units=previous))
        counts = np.asarray(self.label_counts_)[np.asarray(self.label_order_)]
        output = SampledOutput(n_outputs, in_units=sizes[-1], num_sampled=self.num_sampled,
                               sampler=self.sampler, loss=self._output_loss(), label_counts=counts,
                               seed=getattr(self, "_init_seed", None), prefix="output_")
        hidden.hybridize()
        output.hybridize()
        return SampledNet(hidden, output)

    # ------------------------------------------------------------------ input
    def _read_libsvm(self, X, training, reset=False, labels=True):
        """Read multi-label LibSVM input as ``(X, labels)`` with the index base of the
        training files (see :meth:`BaseSparseNet._read_libsvm`).

        A file's labels are ids, read alike from paths and from a
        ``LibSVMDataset(multilabel=True)``: a new fit gets an indicator whose
        column j is label id j (``classes_`` 0..largest id, as the XC format's
        header counts labels); a fitted model gets each row's list of ids, which
        it maps to its own labels, so that a file's own largest id does not
        matter (``partial_fit`` over part files, ``score``). With ``labels=False``
        (prediction) the labels are not read: a test file may be labelled ``-1``/``+1``.
        Rows without labels are kept (for training too, as ``fit(X, Y)`` keeps them).
        Features of a file read for prediction or scoring that lie beyond the model's
        width are dropped with a warning, as :meth:`BaseSparseNet._read_libsvm` drops them.
        """
        labels_wanted = labels
        if isinstance(X, LibSVMDataset):
            dataset = X
            X, labels = super()._read_libsvm(dataset, training, reset)
            if labels.dtype != object or not labels_wanted:
                return X, labels  # a single-label file: one label a row
            Y = labels_to_indicator(_label_ids(labels, dataset))
        else:
            source, paths = X, existing_libsvm_paths(X)
            X, Y, zero_based = load_multilabel(
                paths, num_features=self._read_width(training, reset),
                zero_based=getattr(self, "zero_based_", "auto"), allow_empty=True,
                return_zero_based=True, check_labels=labels_wanted)
            X = self._settle_read(X, zero_based, source, paths, training, reset)
        if reset or Y is None:
            return X, Y
        return X, [Y.indices[Y.indptr[i]:Y.indptr[i + 1]].tolist() for i in range(Y.shape[0])]

    # ------------------------------------------------------------------ training
    def _fit(self, X, y, sample_weight=None, incremental=False, classes=None):
        check_partial_fit_params(self, incremental)
        first_pass = not self._is_fitted() or not (self.warm_start or incremental)
        with unchanged_if_refused(self):
            if first_pass and hasattr(self, "zero_based_"):
                del self.zero_based_  # a new fit: the base of earlier files no longer applies
            if is_libsvm_source(X):
                X, file_labels = self._read_libsvm(X, training=True, reset=first_pass)
                if y is None:
                    y = _widened_to_classes(file_labels, classes)
            X = self._validate_X(X, reset=first_pass)
            Y = self._encode_labels(y, first_pass, X.shape[0], classes=classes)
            if sample_weight is not None:
                sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float32)
            optimizer = registered_optimizer(self.optimizer, self.alpha)
            options = checked_optimizer_params(optimizer, self.optimizer_params)
        if first_pass:
            self._learn_label_order(Y, sample_weight)
            self._reset_fitted_state(parse_context(self.ctx),
                                     fitted=self._new_fit_attributes(len(self.classes_)))
            self._module = self._new_module(len(self.classes_))
        fit_trainer(self, self._get_module(), optimizer, incremental, options)
        self._train(X, self._internal(Y), sample_weight, incremental)
        return self

    @interruptible
    def _train(self, X, Y, sample_weight, incremental):
        X_val = Y_val = weight_val = None
        if self.early_stopping and not incremental:
            self._start_validation_record()
            order = self._random_state.permutation(X.shape[0])
            n_val = int(round(self.validation_fraction * X.shape[0]))
            if n_val < 2:  # one row's P@1 is 0 or 1: no score to stop on (MLPClassifier's rule)
                raise ValueError("early_stopping needs at least 2 validation samples; "
                                 "validation_fraction=%g of %d samples gives %d"
                                 % (self.validation_fraction, X.shape[0], n_val))
            if n_val >= X.shape[0]:
                raise ValueError("early_stopping could not hold out validation_fraction=%g of "
                                 "%d samples: %d validation rows leave none to train on"
                                 % (self.validation_fraction, X.shape[0], n_val))
            X_val, Y_val = X[order[:n_val]], Y[order[:n_val]]
            X, Y = X[order[n_val:]], Y[order[n_val:]]
            if sample_weight is not None:
                weight_val = sample_weight[order[:n_val]]
                if not weight_val.sum() > 0:
                    weight_val = None  # held-out rows of weight 0 only: score them alike
                sample_weight = sample_weight[order[n_val:]]
        weight_total = check_weight_total(X.shape[0], sample_weight)
        module, trainer, ctx = self._get_module(), self._trainer, self._ctx
        self.n_iter_ = 0  # epochs of this call, as MLPClassifier counts them
        n = X.shape[0]
        batch = min(n, 256 if self.batch_size == "auto" else self.batch_size)
        check_training_batch(batch, X.shape[1], owner=self)
        epochs = 1 if incremental else self.max_iter
        for _ in tqdm(range(epochs), desc=type(self).__name__, unit="epoch",
                      disable=not self.verbose, leave=False):
            order = self._random_state.permutation(n) if self.shuffle else np.arange(n)
            total = mx.nd.zeros((1,), ctx=ctx)
            n_steps = 0
            for start in range(0, n, batch):
                check_interrupt()
                rows = np.sort(order[start:start + batch])
                x = csr_to_ndarray(X[rows], np.float32, ctx)
                weight_sum = len(rows)
                with autograd.record():
                    losses = module(x, Y[rows])
                    if sample_weight is not None:
                        weight_sum = float(sample_weight[rows].sum())
                        losses = losses * mx.nd.array(sample_weight[rows], ctx=ctx)
                if weight_sum <= 0:
                    continue  # every row of the batch has weight 0
                losses.backward()
                weighted_step(trainer, self.alpha, weight_sum)
                total += losses.sum()
                n_steps += 1
            self.n_iter_ += 1
            self.t_ += n
            # SparseMLPClassifier's definitions: the L2 term in loss_, scikit-learn's
            # stopping rule (an equal value counts as no improvement only past tol).
            self.loss_ = self._epoch_loss(total, n_steps, weight_total)
            self.loss_curve_.append(self.loss_)
            if X_val is not None:
                self.validation_scores_.append(self._precision_at_1(X_val, Y_val, weight_val))
            self._update_no_improvement_count(X_val is not None)
            logger.debug("%s epoch %d: loss %.5f", type(self).__name__, self.n_iter_, self.loss_)
            raise_if_diverged(self, module, always=False)
            if self._no_improvement_count > self.n_iter_no_change:
                break
        else:
            if not incremental:
                warnings.warn("Stochastic Optimizer: Maximum iterations (%d) reached and the "
                              "optimization hasn't converged yet." % self.max_iter,
                              ConvergenceWarning)
        raise_if_diverged(self, module, always=not incremental)

    # ------------------------------------------------------------------ prediction
    def _top_k_internal(self, X, k):
        module = self._get_module()
        # Blocks of one fixed height, the last padded with empty rows: every product has
        # the same shape, so a row's scores do not depend on the rows predicted with it
        # (BLAS picks its kernel by shape). Fewer rows for more labels bound the work of
        # a one-row prediction to about _BLOCK_SCORES scores, but never fewer than
        # _MIN_BLOCK_ROWS: each block streams the whole output weight, which 64 rows
        # use for ~32 flops a byte, enough to keep the product compute-bound.
        rows = max(_MIN_BLOCK_ROWS, min(_PREDICT_ROWS, _BLOCK_SCORES // len(self.classes_)))
        with self._module_lock:
            output = module.output  # its reads (data()) bring deferred rows up to date
            ids, scores = [], []
            for batch, real in padded_csr_batches(X, self._ctx, rows=rows):
                batch_ids, batch_scores = output.top_k(module.hidden(batch), k)
                ids.append(batch_ids[:real])
                scores.append(batch_scores[:real])
        return np.concatenate(ids), np.concatenate(scores).astype(np.float64)

    def _precision_at_1(self, X, Y_internal, sample_weight=None):
        best, _ = self._top_k_internal(X, 1)
        hits = np.array([Y_internal[i, best[i, 0]] != 0 for i in range(X.shape[0])],
                        dtype=np.float64)
        return float(np.average(hits, weights=sample_weight))

    def predict_top_k(self, X, k=5):
        """The ``k`` best labels of each row and their scores, best first.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        k : int, default 5
            ``1 <= k <= n_labels``.

        Returns
        -------
        labels : ndarray of shape (n_samples, k)
            Labels from ``classes_``; equal scores rank the more frequent
            training label first.
        scores : ndarray of shape (n_samples, k)
            The output layer's scores (logits).

        Notes
        -----
        Rows are scored in blocks of one height that depends only on the
        number of labels (1024 rows up to 4,096 labels, down to 64 rows from
        65,536 labels on), the last block padded: a row's scores are the same
        bits whichever rows are predicted with it. A single row therefore costs
        what a block costs.
        """
        check_is_fitted(self, "n_outputs_")
        if not isinstance(k, (Integral, np.integer)) or not 1 <= k <= self.n_outputs_:
            raise ValueError("k must be an int in [1, %d] (the number of labels), got %r"
                             % (self.n_outputs_, k))
        X = self._validate_X(X, reset=False)
        ids, scores = self._top_k_internal(X, int(k))
        return self.classes_[np.asarray(self.label_order_)[ids]], scores

    def predict(self, X):
        """Predicted labels.

        Multi-label fit: a scipy CSR indicator ``(n_samples, n_labels)``
        (columns follow ``classes_``) of each row's ``predict_k`` best labels.
        Multi-class fit (1-D ``y``): the best label of each row.
        """
        check_is_fitted(self, "n_outputs_")
        if not self.multilabel_:
            return self.predict_top_k(X, 1)[0][:, 0]
        k = self.predict_k or max(1, int(round(self.labels_per_row_)))
        k = min(k, self.n_outputs_)
        X = self._validate_X(X, reset=False)
        ids, _ = self._top_k_internal(X, k)
        cols = np.asarray(self.label_order_)[ids].ravel()
        indicator = sp.csr_matrix((np.ones(cols.size, dtype=np.int64), cols,
                                   np.arange(0, cols.size + 1, k)),
                                  shape=(X.shape[0], self.n_outputs_))
        indicator.sort_indices()
        return indicator

    def score(self, X, y=None, sample_weight=None):
        """Precision@1: the share of rows whose best predicted label is one of their labels.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), or LibSVM path(s)
        y : indicator matrix, list of label lists, or 1-D labels (as at fit)
            Labels not seen at fit count as not found. None: the labels of the
            LibSVM file ``X``, as ``fit`` reads them.
        sample_weight : array-like of shape (n_samples,), optional
        """
        check_is_fitted(self, "n_outputs_")
        if y is None and is_libsvm_source(X) and not classes_are_label_ids(self.classes_):
            # Every file label would be unknown to the model: P@1 would be 0.
            raise ValueError("score(X as a LibSVM file) reads the file's labels as integer ids, "
                             "but the model's labels are not ids (e.g. %r): pass y, the rows' "
                             "labels as the model knows them" % (self.classes_[0],))
        X, y = self._scoring_data(X, y)
        X = self._validate_X(X, reset=False)
        Y = self._internal(self._encode_labels(y, False, X.shape[0], drop_unknown=True))
        return self._precision_at_1(X, Y, sample_weight)

    def partial_fit(self, X, y, classes=None, sample_weight=None):
        """One epoch over ``(X, y)`` from the current weights.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : indicator matrix, list of label lists, or 1-D labels
        classes : array-like, optional
            Every label there will ever be (first call; default: those of ``y``).
        sample_weight : array-like of shape (n_samples,), optional
        """
        return self._check_params_and_fit(X, y, sample_weight, incremental=True,
                                          classes=classes)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

