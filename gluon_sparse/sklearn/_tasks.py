"""Task mixins: what the targets are, the loss, the outputs and the score.

A task mixin comes first in an estimator's bases (``class
SparseMLPClassifier(SparseClassifierMixin, _BaseSparseMLP)``) and gives the
training loop and prediction these hooks:

``_encode_targets(y, first_pass, classes, sample_weight=None, warm_start=False)``
    ``(targets, n_outputs)``: validated ``y`` as the float32 array the loss
    takes (first pass: also learn the fitted label state, e.g. ``classes_``,
    and what is counted of it, with the sample weights; ``warm_start``: a
    warm-started ``fit``, not the first pass nor ``partial_fit``).
``_loss()``
    The per-sample Gluon loss (``self.loss`` when the estimator has one).
``_score_encoded(X, targets, sample_weight)``
    The early-stopping score on held-out, already encoded data.
``_validation_stratify(targets)``
    What ``train_test_split`` stratifies the early-stopping split by, or None.
``_multi_output_targets()`` / ``_numeric_targets()``
    How scikit-learn's ``validate_data`` checks ``y``.

plus the public ``predict`` / ``partial_fit`` / ``score`` (scikit-learn's
``ClassifierMixin`` / ``RegressorMixin``). A new task (multi-label
classification) is a new mixin with these hooks in its own module.
"""
import warnings

import numpy as np
from mxnet import gluon
from scipy.special import expit
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.metrics import accuracy_score, r2_score
from sklearn.preprocessing import LabelEncoder
from sklearn.utils.multiclass import check_classification_targets, type_of_target

__all__ = ["SparseClassifierMixin", "SparseRegressorMixin"]


class SparseClassifierMixin(ClassifierMixin):
    """Classification part: label encoding, sigmoid / softmax outputs, predict_proba.

    Binary problems use one sigmoid output (``SigmoidBinaryCrossEntropyLoss``),
    multiclass problems one output per class (``SoftmaxCrossEntropyLoss``).
    Labels may be of any type scikit-learn classifies (strings too).
    """

    def score(self, X, y=None, sample_weight=None):
        """Mean accuracy on ``X`` against ``y`` (scikit-learn's ``ClassifierMixin.score``).

        ``X`` may be a LibSVM path, as in ``fit``: with ``y=None`` the file's labels
        are the true ones.
        """
        labels_from_file = y is None
        X, y = self._scoring_data(X, y)
        if labels_from_file:
            self._check_file_labels(y)
        return super().score(X, y, sample_weight)

    def _check_file_labels(self, y):
        """A LibSVM file's labels are numbers: refuse to score a model whose classes are
        none of them (fitted on names, or on 0/1 for a file of -1/+1), which would count
        every row as a miss; warn where some rows' labels are not among the classes."""
        classes = set(self.classes_.tolist())  # names and numbers never equal: no sorting of both
        labels = np.unique(y).tolist()
        seen = [label for label in labels if label in classes]
        unknown = [label for label in labels if label not in classes]
        if not seen:
            raise ValueError("%s.score(X as a LibSVM file) compares the file's labels, %r, with "
                             "the model's classes %r, and none of them is a class; pass y= the "
                             "true labels in the model's terms"
                             % (type(self).__name__, labels[:10], self.classes_.tolist()[:10]))
        if unknown:
            warnings.warn("%d of the %d rows of the LibSVM file have labels that are not among "
                          "the model's classes (%r); they count as misses"
                          % (len(y) - int(np.isin(y, seen).sum()), len(y), unknown[:10]))

    def _validate_training_data(self, X, y, reset):
        try:
            kind = type_of_target(y)
        except (ValueError, TypeError):  # label lists, ragged rows: validate_data says why
            kind = None
        if kind == "multilabel-indicator":
            # MLPClassifier fits an indicator with one sigmoid a label; here that is the
            # multi-label estimator, made for many labels (scikit-learn's error names none).
            raise ValueError("%s takes one label per sample (y of shape (n_samples,)); this y is "
                             "a multi-label indicator of shape %r: use "
                             "gluon_sparse.sklearn.SparseMultiLabelClassifier"
                             % (type(self).__name__,
                                tuple(y.shape if hasattr(y, "shape") else np.shape(y))))
        return super()._validate_training_data(X, y, reset)

    def _multi_output_targets(self):
        return False

    def _validation_stratify(self, targets):
        return targets  # every class in the early-stopping split

    def _numeric_targets(self):
        return False

    def _encode_targets(self, y, first_pass, classes, sample_weight=None, warm_start=False):
        check_classification_targets(y)
        if first_pass:
            encoder = LabelEncoder().fit(y if classes is None else classes)
            if len(encoder.classes_) < 2:
                raise ValueError("%s needs samples of at least 2 classes, got 1 class: %r"
                                 % (type(self).__name__, encoder.classes_[0]))
            self.classes_ = encoder.classes_
        if warm_start and not np.array_equal(np.unique(y), self.classes_):
            # MLPClassifier's rule: a warm start goes on with the classes of the first fit,
            # all of them (partial_fit is the way to train on batches of some classes).
            raise ValueError("warm_start can only be used where y has the same classes as in "
                             "the previous call to fit. Previously got %r, y has %r"
                             % (self.classes_.tolist(), np.unique(y).tolist()))
        unknown = np.setdiff1d(y, self.classes_)
        if len(unknown):
            raise ValueError("y has labels %r that are not among the classes %r %s"
                             % (unknown.tolist()[:10], self.classes_.tolist(),
                                "the model was first fitted with (a warm start or "
                                "partial_fit cannot add classes)" if classes is None
                                else "passed as classes"))
        encoder = LabelEncoder()
        encoder.classes_ = self.classes_  # the fitted state is classes_ alone
        encoded = encoder.transform(y).astype(np.float32)
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
            positive = expit(raw[:, 0])  # 1 / (1 + exp(-x)) without overflow warnings
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
            return self._check_params_and_fit(X, y, sample_weight, incremental=True,
                                             classes=classes)
        if classes is not None and not np.array_equal(np.unique(classes), self.classes_):
            raise ValueError("classes=%r is not the same as on the first partial_fit call (%r)"
                             % (np.unique(classes).tolist(), self.classes_.tolist()))
        return self._check_params_and_fit(X, y, sample_weight, incremental=True)


class SparseRegressorMixin(RegressorMixin):
    """Regression part: float targets (one or several columns), squared loss."""

    def score(self, X, y=None, sample_weight=None):
        """R^2 of the predictions on ``X`` against ``y`` (scikit-learn's
        ``RegressorMixin.score``).

        ``X`` may be a LibSVM path, as in ``fit``: with ``y=None`` the file's
        labels are the true targets.
        """
        X, y = self._scoring_data(X, y)
        return super().score(X, y, sample_weight)

    def _multi_output_targets(self):
        return True

    def _validation_stratify(self, targets):
        return None

    def _numeric_targets(self):
        return True

    def _encode_targets(self, y, first_pass, classes, sample_weight=None, warm_start=False):
        finite = np.isfinite(np.asarray(y, dtype=np.float64))
        y = np.asarray(y, dtype=np.float32)
        if not np.isfinite(y)[finite].all():
            # Finite in float64 (scikit-learn's check passes) but past float32's range,
            # the network's precision: the loss would be inf and every weight NaN.
            raise ValueError("y holds values beyond float32's range (|y| > %.4g), in which the "
                             "network computes: %r; scale the target"
                             % (np.finfo(np.float32).max,
                                float(np.asarray(y, dtype=np.float64)[finite &
                                                                      ~np.isfinite(y)][0])))
        if y.ndim == 1:
            y = y.reshape(-1, 1)
        if not first_pass and y.shape[1] != self.n_outputs_:
            raise ValueError("y has %d columns but the model was fitted with %d outputs"
                             % (y.shape[1], self.n_outputs_))
        return y, y.shape[1]

    def _loss(self):
        if getattr(self, "loss", None) is not None:
            return self.loss
        # MLPRegressor's gradient is that of 0.5 * the squared error summed over the
        # outputs (its reported loss_ averages them): L2Loss averages, so weight it by
        # the number of outputs, or k outputs would step 1/k as far and alpha act k
        # times as strongly.
        return gluon.loss.L2Loss(weight=float(self.n_outputs_))

    def _reported_loss_scale(self):
        """``loss_`` averages the squared error over the outputs, as MLPRegressor's does."""
        if getattr(self, "loss", None) is not None:
            return 1.0
        return 1.0 / self.n_outputs_

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
        return self._check_params_and_fit(X, y, sample_weight, incremental=True)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags
