"""scikit-learn estimators around any Gluon block (in the spirit of skorch's NeuralNet).

The block's first layer should consume CSR batches (e.g.
:class:`gluon_sparse.nn.FullyConnectedSparse` or
:class:`gluon_sparse.nn.FactorizationMachine`); the estimator supplies the
training loop, the label handling and everything scikit-learn expects.
"""
import numpy as np
from mxnet import gluon

from ..nn import FullyConnectedSparse
from ._base import BaseSparseNet
from ._hyperparams import estimator_init
from ._tasks import SparseClassifierMixin, SparseRegressorMixin

__all__ = ["SparseNetClassifier", "SparseNetRegressor"]


class _BaseSparseNetWrapper(BaseSparseNet):
    """Builds the network from the user's ``module`` factory."""

    __init__ = estimator_init(module=None, loss=None)

    _parameter_constraints = {
        **BaseSparseNet._parameter_constraints,
        "module": [callable, None],
        "loss": [gluon.loss.Loss, None],
    }

    def _architecture(self):
        return (self.module,)

    def _build_module(self, n_outputs):
        if self.module is None:
            return FullyConnectedSparse(n_outputs, in_units=self.n_features_in_)
        if isinstance(self.module, gluon.Block):
            raise TypeError("module must build a new network when called with the number of "
                            "outputs (a Block class or a factory function), not be a Block "
                            "instance: got %r" % (self.module,))
        module = self.module(n_outputs)
        if not isinstance(module, gluon.Block):
            raise TypeError("module(%d) must return an mxnet.gluon.Block, got %s"
                            % (n_outputs, type(module).__name__))
        return module

    def _network_losses(self, module, loss_fn, x, target):
        output = module(x)
        # A user's network may ignore n_outputs; trained anyway, a one-column output
        # of a 3-class problem would be read as a binary one, silently.
        width = 1 if output.ndim == 1 else int(np.prod(output.shape[1:]))
        if width != self.n_outputs_:
            raise ValueError("module(%d) built a network whose output has shape %s (%d "
                             "column(s)) for a batch of %d; this estimator needs %d (%s)"
                             % (self.n_outputs_, output.shape, width, x.shape[0],
                                self.n_outputs_, self._output_meaning()))
        return loss_fn(output, target)


_NET_PARAMETERS_DOC = """
    Parameters
    ----------
    module : callable, optional
        Called as ``module(n_outputs)`` to build a new, uninitialised
        :class:`mxnet.gluon.Block` whose output has ``n_outputs`` columns: a
        Block class whose first argument is the output size (for instance
        ``FullyConnectedSparse``) or a factory function. Use a class or a
        module-level function for estimators that are pickled or saved.
        Default: a linear model, ``FullyConnectedSparse(n_outputs)``.
    loss : mxnet.gluon.loss.Loss, optional
        Per-sample training loss ``loss(output, target)``. Default: see above.
    alpha : float, default 1e-4
        L2 penalty on every parameter whose name does not end in 'bias'.
    batch_size : int or 'auto', default 'auto'
        Samples per mini-batch; 'auto' is ``min(200, n_samples)``.
    learning_rate_init : float, default 1e-3
        Step size of the optimizer.
    max_iter : int, default 200
        Maximum number of epochs.
    shuffle : bool, default True
        Reshuffle the samples every epoch.
    random_state : int, RandomState or None, default None
        Seeds MXNet's initializers on ``ctx``, the shuffling and the validation split.
    tol : float, default 1e-4
        Minimum improvement of the loss (or validation score) that counts.
    verbose : bool, default False
        Show a tqdm progress bar with the loss and validation score per epoch.
    warm_start : bool, default False
        Continue from the previous fit's weights.
    early_stopping : bool, default False
        Stop when the score on ``validation_fraction`` held-out samples stops improving.
    validation_fraction : float, default 0.1
        Share of the training data held out for early stopping.
    n_iter_no_change : int, default 10
        Epochs without improvement before stopping.
    optimizer : str, default 'sparseadam'
        Name of a registered MXNet optimizer. gluon-sparse's ('sparseadam',
        'sparsesgd', 'sparsenag', ...: see
        :func:`gluon_sparse.optimizer.supports_deferred`) run with exact
        deferred updates (``deferred=True``).
    optimizer_params : dict, optional
        As SparseMLPClassifier: the optimizer's other hyper-parameters
        (``{'momentum': 0.9}``, ``{'beta1': 0.8}``), under MXNet's names.
    ctx : str or mxnet.Context, default 'cpu'
        Device: 'cpu', 'gpu', 'gpu:N' or a context.

    Attributes
    ----------
    module_ : mxnet.gluon.Block
        The trained network.
    loss_curve_, best_loss_, validation_scores_, best_validation_score_, n_iter_, t_
        As in :class:`~gluon_sparse.sklearn.SparseMLPClassifier`.
    n_features_in_ : int
        Number of features seen during fit.
    n_outputs_ : int
        Number of network outputs.
    zero_based_ : bool
        Only after fitting on LibSVM input: the index base its files were
        read with; later LibSVM inputs are read with it.
"""


class SparseNetClassifier(SparseClassifierMixin, _BaseSparseNetWrapper):
    __doc__ = """Classifier that trains any Gluon block on sparse input.

    The network's outputs are logits: one column for binary problems (trained
    with ``SigmoidBinaryCrossEntropyLoss`` unless ``loss`` says otherwise), one
    per class for multiclass problems (``SoftmaxCrossEntropyLoss``).
    """ + _NET_PARAMETERS_DOC + """
    classes_ : ndarray of shape (n_classes,)
        Class labels.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from gluon_sparse.nn import FactorizationMachine
    >>> from gluon_sparse.sklearn import SparseNetClassifier
    >>> X = sp.random(100, 10000, density=0.001, format="csr", random_state=0)
    >>> row_sums = X.sum(axis=1).A1
    >>> y = (row_sums > np.median(row_sums)).astype(int)  # two balanced classes
    >>> np.bincount(y)
    array([50, 50])
    >>> def fm(n_outputs):
    ...     return FactorizationMachine(factor_size=4)
    >>> clf = SparseNetClassifier(module=fm, max_iter=3, random_state=0).fit(X, y)
    >>> clf.predict_proba(X[:2]).shape
    (2, 2)
    """

    def _output_meaning(self):
        return "one logit for 2 classes, one per class for more; y has %d" % len(self.classes_)


class SparseNetRegressor(SparseRegressorMixin, _BaseSparseNetWrapper):
    __doc__ = """Regressor that trains any Gluon block on sparse input.

    The default loss is ``L2Loss`` (half the squared error); ``y`` may have
    several columns.
    """ + _NET_PARAMETERS_DOC + """
    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from gluon_sparse.sklearn import SparseNetRegressor
    >>> X = sp.random(100, 10000, density=0.001, format="csr", random_state=0)
    >>> reg = SparseNetRegressor(max_iter=3, random_state=0)
    >>> reg.fit(X, np.asarray(X.sum(axis=1)).ravel()).predict(X[:2]).shape
    (2,)
    """

    def _output_meaning(self):
        return "one per column of y"
