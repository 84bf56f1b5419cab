"""The output layer of :class:`~gluon_sparse.sklearn.SparseMLPClassifier`: dense or sampled.

With a few classes the network ends in ``Dense(n_classes)`` trained on the
full softmax (one sigmoid output for two classes). With many classes that
layer costs ``batch x hidden x n_classes`` a step and dominates the fit; the
network then ends in a :class:`~gluon_sparse.nn.SampledOutput`, trained with
sampled softmax (the batch's classes plus ``num_sampled`` draws, logQ
corrected), whose step does not grow with the number of classes.

Prediction stays exact over all classes:

* ``predict``: the argmax of the scores through the chunked top-k
  (:func:`~gluon_sparse.nn.top_k_scores`), never ``n x n_classes`` scores
  beyond one block;
* ``predict_proba`` / ``decision_function``: the full softmax / scores, one
  block of rows at a time, into the ``(n_samples, n_classes)`` result.

:class:`ClassOutputMixin` sits before
:class:`~gluon_sparse.sklearn._tasks.SparseClassifierMixin` in the bases and
overrides its hooks only when the fitted network is sampled (``sampled_output_``).
The choice is made once, at the first fit (``output='auto'``: sampled from
:data:`SAMPLED_OUTPUT_MIN_CLASSES` classes on, a threshold measured by
``benchmarks/bench_mlp_output.py``); later ``warm_start`` / ``partial_fit``
calls and loaded models keep it.
"""
from numbers import Integral

import numpy as np
from mxnet import gluon
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.metrics import accuracy_score

from ..nn import SampledOutput
from ._data import PREDICT_BATCH_ROWS, padded_csr_batches

__all__ = ["ClassOutputMixin", "SampledNet", "SAMPLED_OUTPUT_MIN_CLASSES",
           "OUTPUT_PARAMETERS", "OUTPUT_CONSTRAINTS"]

#: ``output='auto'`` trains a sampled output from this many classes on. Measured with
#: benchmarks/bench_mlp_output.py (time per epoch, estimator defaults, 10,000 rows):
#: dense / sampled 0.67x at 1,000 classes, 2.3x at 2,000, 1.0-2.0x from 5,000 to
#: 20,000 (benchmarks/RESULTS.md, "SparseMLPClassifier with many classes").
SAMPLED_OUTPUT_MIN_CLASSES = 2000

#: The classifier's own keyword-only parameters (name -> default), for estimator_init.
OUTPUT_PARAMETERS = {"output": "auto", "num_sampled": 1024}
OUTPUT_CONSTRAINTS = {
    "output": [StrOptions({"auto", "dense", "sampled"})],
    "num_sampled": [Interval(Integral, 1, None, closed="left")],
}
# Scores per block of predict_proba / decision_function (float32 on the device).
_BLOCK_SCORES = 1 << 22


class SampledNet(gluon.Block):
    """Hidden layers (``hidden``) and a sampled output layer (``output``).

    ``net(x)`` is the last hidden layer's output; ``net(x, labels)`` the
    per-sample sampled losses. The network of both estimators with a
    :class:`~gluon_sparse.nn.SampledOutput` (this one and
    :class:`~gluon_sparse.sklearn.SparseMultiLabelClassifier`).
    """

    def __init__(self, hidden, output, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.hidden = hidden
            self.output = output

    def forward(self, x, labels=None):
        h = self.hidden(x)
        return h if labels is None else self.output(h, labels)


class ClassOutputMixin:
    """Dense or sampled softmax output for a classifier of the MLP family.

    Fitted attributes it adds: ``sampled_output_`` (bool) and, when sampled,
    ``class_counts_`` (training count of each class, what the sampler draws by).
    """

    _saved_fitted_attributes = ("sampled_output_", "class_counts_")

    def _is_sampled(self):
        return bool(getattr(self, "sampled_output_", False))

    def _architecture(self):
        # A sampled output layer draws num_sampled negatives as built.
        return super()._architecture() + ((self.num_sampled,) if self._is_sampled() else ())

    # ------------------------------------------------------------------ fit hooks
    def _encode_targets(self, y, first_pass, classes, sample_weight=None, warm_start=False):
        encoded, n_outputs = super()._encode_targets(y, first_pass, classes, sample_weight,
                                                     warm_start)
        if first_pass:
            n_classes = len(self.classes_)
            has_hidden = bool(self._hidden_sizes())
            if self.output == "sampled" and not has_hidden:
                raise ValueError("output='sampled' needs a hidden layer (the sampled output "
                                 "takes dense inputs); hidden_layer_sizes=%r has none"
                                 % (self.hidden_layer_sizes,))
            self.sampled_output_ = has_hidden and (
                self.output == "sampled"
                or self.output == "auto" and n_classes >= SAMPLED_OUTPUT_MIN_CLASSES)
            if self.sampled_output_:
                # Weighted: a row of weight 0 counts as a row left out (scikit-learn's
                # sample_weight); integers without weights, as before.
                counts = np.bincount(encoded.astype(np.int64), minlength=n_classes,
                                     weights=sample_weight)
                counts = np.maximum(counts, 0)  # a class of net negative weight: never seen
                self.class_counts_ = counts.tolist()  # a list: the model directory's JSON
            elif hasattr(self, "class_counts_"):
                del self.class_counts_
        # A sampled output has a row per class, two classes included.
        return encoded, (len(self.classes_) if self._is_sampled() else n_outputs)

    def _network_losses(self, module, loss_fn, x, target):
        if not self._is_sampled():
            return super()._network_losses(module, loss_fn, x, target)
        return module(x, target)

    def _build_module(self, n_outputs):
        if not self._is_sampled():
            return super()._build_module(n_outputs)
        hidden = super()._build_module(None)
        # 'frequency' ((counts + 1) ** 0.75, word2vec's): the popular classes, the
        # hard negatives of most rows, are drawn most; classes_ stay sorted.
        output = SampledOutput(n_outputs, in_units=self._hidden_sizes()[-1],
                               num_sampled=self.num_sampled, sampler="frequency",
                               label_counts=self.class_counts_,
                               seed=getattr(self, "_init_seed", None))
        return SampledNet(hidden, output)

    def _named_layers(self, module):
        if not self._is_sampled():
            return super()._named_layers(module)
        return [("hidden." + name, layer) for name, layer in
                super()._named_layers(module.hidden)] + [("output", module.output)]

    # ------------------------------------------------------------------ prediction
    def _hidden_blocks(self, X, rows=PREDICT_BATCH_ROWS):
        """``(first row, real rows, h)`` for blocks of ``rows`` rows of validated ``X``.

        ``h`` always has ``rows`` rows (the last block padded with empty rows):
        every product then has the same shape, so a row's scores do not depend
        on the rows predicted with it (BLAS picks its kernel by shape).
        Call under the lock.
        """
        module = self._get_module()
        start = 0
        for batch, real in padded_csr_batches(X, self._ctx, rows=rows):
            yield start, real, module.hidden(batch)
            start += real

    def _sampled_argmax(self, X):
        """Index into ``classes_`` of each row's best class, exactly, through the top-k."""
        output = self._get_module().output
        best = np.empty(X.shape[0], dtype=np.int64)
        with self._module_lock:
            for start, real, h in self._hidden_blocks(X):
                best[start:start + real] = output.top_k(h, 1)[0][:real, 0]
        return best

    def _sampled_scores(self, X, softmax):
        """Scores (or softmax) of every class, ``(n_samples, n_classes)`` float64, by blocks."""
        output = self._get_module().output
        result = np.empty((X.shape[0], output.num_labels), dtype=np.float64)
        rows = max(1, min(PREDICT_BATCH_ROWS, _BLOCK_SCORES // output.num_labels))
        with self._module_lock:
            for start, real, h in self._hidden_blocks(X, rows):
                block = result[start:start + real]
                block[:] = output.scores(h).asnumpy()[:real]
                if softmax:  # in float64, as the dense output's predict_proba
                    block -= block.max(axis=1, keepdims=True)
                    np.exp(block, out=block)
                    block /= block.sum(axis=1, keepdims=True)
        return result

    def _score_encoded(self, X, encoded, sample_weight):
        if not self._is_sampled():
            return super()._score_encoded(X, encoded, sample_weight)
        return accuracy_score(encoded, self._sampled_argmax(X), sample_weight=sample_weight)

    def _sampled_input(self, X):
        self._get_module()  # NotFittedError first
        return self._validate_X(X, reset=False)

    def predict(self, X):
        """Predict class labels.

        Sampled output: the exact argmax over all classes, taken by the
        chunked top-k (ties to the first class, as ``argmax``).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), path or LibSVMDataset

        Returns
        -------
        ndarray of shape (n_samples,)
            Labels from ``classes_``.
        """
        if not self._is_sampled():
            return super().predict(X)
        return self.classes_[self._sampled_argmax(self._sampled_input(X))]

    def predict_proba(self, X):
        """Class probabilities.

        Sampled output: the exact softmax over all classes, computed a block
        of rows at a time into the ``(n_samples, n_classes)`` result.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), path or LibSVMDataset

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
            Columns follow ``classes_``; rows sum to 1.
        """
        if not self._is_sampled():
            return super().predict_proba(X)
        return self._sampled_scores(self._sampled_input(X), softmax=True)

    def decision_function(self, X):
        """Network outputs before the sigmoid / softmax.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), path or LibSVMDataset

        Returns
        -------
        ndarray of shape (n_samples,) for binary problems, else (n_samples, n_classes)
            Positive values mean ``classes_[1]`` in the binary case (a sampled
            output's: the difference of the two classes' scores).
        """
        if not self._is_sampled():
            return super().decision_function(X)
        scores = self._sampled_scores(self._sampled_input(X), softmax=False)
        return scores[:, 1] - scores[:, 0] if scores.shape[1] == 2 else scores
