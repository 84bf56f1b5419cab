"""Multi-layer perceptrons for sparse input with scikit-learn's MLP interface.

The first layer is :class:`gluon_sparse.nn.FullyConnectedSparse`: a batch
touches only the weight rows of its features and the weight gradient is
``row_sparse``, so the cost of a step follows the number of non-zeros, not the
number of features. The layers after it are ordinary ``gluon.nn.Dense``.
"""
from numbers import Integral

import numpy as np
from mxnet import gluon
from sklearn.utils._param_validation import Interval, StrOptions

from .._compact import block_rows
from ..nn import FullyConnectedSparse
from ._base import BaseSparseNet
from ._class_output import (OUTPUT_CONSTRAINTS, OUTPUT_PARAMETERS, SAMPLED_OUTPUT_MIN_CLASSES,
                            ClassOutputMixin)
from ._hyperparams import estimator_init
from ._params import set_module_params
from ._tasks import SparseClassifierMixin, SparseRegressorMixin

__all__ = ["SparseMLPClassifier", "SparseMLPRegressor"]

# scikit-learn's activation names -> MXNet's act_type (None: no activation).
_ACTIVATIONS = {"identity": None, "logistic": "sigmoid", "tanh": "tanh", "relu": "relu"}


class _BaseSparseMLP(BaseSparseNet):
    """Network construction shared by the MLP classifier and regressor."""

    __init__ = estimator_init(hidden_layer_sizes=(100,), activation="relu")

    _parameter_constraints = {
        **BaseSparseNet._parameter_constraints,
        "hidden_layer_sizes": ["array-like", Interval(Integral, 1, None, closed="left")],
        "activation": [StrOptions(set(_ACTIVATIONS))],
    }

    def _architecture(self):
        return tuple(self._hidden_sizes()), self.activation

    def _hidden_sizes(self):
        sizes = self.hidden_layer_sizes
        sizes = [sizes] if isinstance(sizes, Integral) else list(sizes)
        if any(not isinstance(size, Integral) or size < 1 for size in sizes):
            raise ValueError("hidden_layer_sizes must be positive integers, got %r"
                             % (self.hidden_layer_sizes,))
        return [int(size) for size in sizes]

    def _initial_rows(self, module, seed):
        """The initial parameters of ``module``, as ``(structural name, first row, rows)`` blocks.

        MLPClassifier's initialisation (Glorot & Bengio, 2010): every weight
        and bias of a layer uniform in +-sqrt(factor / (fan_in + fan_out)),
        factor 2 for the logistic activation and 6 otherwise. Drawn in float32
        by numpy's Generator: for the wide first layer several times faster
        than MXNet's single-threaded uniform initializer (or MLPClassifier's
        float64 RandomState), and the same numbers on any ctx and machine.
        The Generator draws in sequence, so drawing a block of rows at a time
        gives the same numbers as drawing a whole array at once (tested): a
        saved model's initial rows are compared and checked a block at a
        time, never held whole (see :mod:`gluon_sparse._compact`).
        """
        rng = np.random.default_rng(seed)
        factor = 2.0 if self.activation == "logistic" else 6.0
        for prefix, layer in self._named_layers(module):
            # Both layouts, (in, out) and Dense's (out, in), sum to fan_in + fan_out.
            bound = np.sqrt(factor / sum(layer.weight.shape))
            for kind, param in (("weight", layer.weight), ("bias", layer.bias)):
                shape = param.shape
                step = block_rows(shape, np.float32)
                for start in range(0, shape[0], step):
                    drawn = rng.random((min(step, shape[0] - start),) + shape[1:],
                                       dtype=np.float32)
                    drawn *= np.float32(2 * bound)
                    drawn -= np.float32(bound)
                    yield "%s.%s" % (prefix, kind), start, drawn

    def _named_layers(self, module):
        """``(structural name, layer)`` of each layer of ``module``, input first."""
        return [(str(index), layer) for index, layer in enumerate(module)]

    def _initial_values(self, module, seed):
        """``{structural name: numpy array}``: the initial parameters of ``module`` (see above)."""
        params, values = module._collect_params_with_prefix(), {}
        for name, start, rows in self._initial_rows(module, seed):
            if name not in values:
                values[name] = np.empty(params[name].shape, dtype=np.float32)
            values[name][start:start + len(rows)] = rows
        return values

    def _initialize_module(self, module, seed, ctx):
        set_module_params(module, self._initial_values(module, seed), ctx)

    def _initial_param_rows(self):
        # Blocks straight from the Generator: no network initialised, no whole copy.
        seed = getattr(self, "_init_seed", None)
        if seed is None:
            return iter(())
        return self._initial_rows(self._build_module(self.n_outputs_), seed)

    def _build_module(self, n_outputs):
        """The network: the hidden layers and ``Dense(n_outputs)``; only the hidden
        layers when ``n_outputs`` is None (another output layer follows them)."""
        act = _ACTIVATIONS[self.activation]
        sizes = self._hidden_sizes()
        module = gluon.nn.HybridSequential()
        with module.name_scope():
            if not sizes:
                module.add(FullyConnectedSparse(n_outputs, in_units=self.n_features_in_))
            else:
                module.add(FullyConnectedSparse(sizes[0], activation=act,
                                                in_units=self.n_features_in_))
                for previous, size in zip(sizes, sizes[1:]):
                    module.add(gluon.nn.Dense(size, activation=act, in_units=previous))
                if n_outputs is not None:
                    module.add(gluon.nn.Dense(n_outputs, in_units=sizes[-1]))
        # One cached graph per batch shape: removes most of the per-operator
        # Python overhead that dominates small batches.
        module.hybridize(static_alloc=True)
        return module


_MLP_PARAMETERS_DOC = """
    Parameters
    ----------
    hidden_layer_sizes : array-like of int, default (100,)
        Units of the hidden layers; the first is a FullyConnectedSparse layer.
        ``()`` gives a linear model.
    activation : {'identity', 'logistic', 'tanh', 'relu'}, default 'relu'
        Activation of the hidden layers.
    alpha : float, default 1e-4
        L2 penalty on the weights (not the biases), as MLPClassifier's: each
        step adds ``0.5 * alpha * ||W||^2 / batch size`` to the batch's mean loss.
    batch_size : int or 'auto', default 'auto'
        Samples per mini-batch; 'auto' is ``min(200, n_samples)``.
    learning_rate_init : float, default 1e-3
        Step size of the optimizer.
    max_iter : int, default 200
        Maximum number of epochs.
    shuffle : bool, default True
        Reshuffle the samples every epoch.
    random_state : int, RandomState or None, default None
        Seeds the initial weights, the shuffling and the validation split; the
        same value gives the same predictions.
    tol : float, default 1e-4
        Minimum improvement of the loss (or validation score) that counts.
    verbose : bool, default False
        Show a tqdm progress bar with the loss and validation score per epoch.
    warm_start : bool, default False
        Continue from the previous fit's weights.
    early_stopping : bool, default False
        Hold out ``validation_fraction`` of the data, stop when its score has
        not improved by ``tol`` for ``n_iter_no_change`` epochs and keep the
        best weights.
    validation_fraction : float, default 0.1
        Share of the training data held out for early stopping.
    n_iter_no_change : int, default 10
        Epochs without improvement before stopping.
    optimizer : str, default 'sparseadam'
        Name of a registered MXNet optimizer. gluon-sparse's optimizers
        ('sparseadam', 'sparsesgd', 'sparsenag', 'sparseadamax', 'sparsenadam',
        'sparsermsprop', 'sparseadagrad', 'sparseftrl') run with exact deferred
        updates (``deferred=True``): the standard, non-lazy update at a cost
        proportional to the batch's rows.
    optimizer_params : dict, optional
        The optimizer's other hyper-parameters, under MXNet's names: e.g.
        ``{'momentum': 0.9}`` with 'sparsesgd' (MLPClassifier's ``momentum``),
        ``{'beta1': 0.9, 'beta2': 0.999, 'epsilon': 1e-8}`` with Adam
        (``beta_1``, ``beta_2``, ``epsilon``), ``clip_gradient``. Numbers,
        strings and booleans (a saved model keeps them); the rate, weight decay
        and gradient scale come from ``learning_rate_init``, ``alpha`` and the
        batch, and are refused here. Checked against the optimizer when a fit
        starts.
    ctx : str or mxnet.Context, default 'cpu'
        Device: 'cpu', 'gpu', 'gpu:N' or a context.
"""

_FITTED_ATTRIBUTES_DOC = """
    loss_ : float
        Loss of the last epoch: the mean (weighted) loss plus every step's L2
        term, as MLPClassifier's, with the weights at the epoch's end (a
        regressor's squared error averaged over the outputs, as MLPRegressor's).
        With sample weights, batches count by their share of the weight, where
        MLPClassifier counts them by their share of the rows.
    loss_curve_ : list of float
        Loss of every epoch.
    best_loss_ : float or None
        Lowest training loss seen; None with ``early_stopping``, as in
        MLPClassifier (the validation score decides then).
    validation_scores_ : list of float or None
        Score on the held-out data after every epoch (early stopping only).
    best_validation_score_ : float or None
        Best of ``validation_scores_``.
    n_iter_ : int
        Number of epochs run by the last ``fit`` (``partial_fit``: 1), as
        scikit-learn counts them; ``loss_curve_`` and ``t_`` go on across
        warm-started fits and ``partial_fit`` calls.
    t_ : int
        Number of training samples seen.
    n_features_in_ : int
        Number of features seen during fit.
    n_outputs_ : int
        Number of network outputs.
    zero_based_ : bool
        Only after fitting on LibSVM input: the index base its files were
        read with; later LibSVM inputs are read with it.
    module_ : mxnet.gluon.HybridBlock
        The trained network.
"""


class SparseMLPClassifier(ClassOutputMixin, SparseClassifierMixin, _BaseSparseMLP):
    __doc__ = """Multi-layer perceptron classifier whose first layer is sparse.

    Same parameter names and fitted attributes as
    :class:`sklearn.neural_network.MLPClassifier` where the meaning is the
    same, but a step costs time in proportion to the non-zeros of the batch.
    Binary problems have one sigmoid output, multiclass problems a softmax;
    with many classes (``output``) the softmax is trained sampled, at a cost
    per step that does not grow with the number of classes, and predicted
    exactly.
    """ + _MLP_PARAMETERS_DOC + """    output : {'auto', 'dense', 'sampled'}, default 'auto'
        The output layer. 'dense': ``Dense(n_classes)`` trained on the full
        softmax (a sigmoid for two classes). 'sampled': a
        :class:`~gluon_sparse.nn.SampledOutput` trained with sampled softmax:
        each step scores the batch's classes plus ``num_sampled`` classes
        drawn in proportion to ``(count + 1) ** 0.75`` of their training counts,
        logQ corrected; needs a hidden layer. 'auto': 'sampled' from %d
        classes on (where it measured faster per epoch, see the user guide),
        else 'dense'. Decided at the first fit; ``warm_start`` and
        ``partial_fit`` keep it. Prediction is exact either way:
        :meth:`predict` is the argmax over all classes, taken by the chunked
        top-k (:func:`~gluon_sparse.nn.top_k_scores`) without ever holding
        ``n_samples x n_classes`` scores, while :meth:`predict_proba` and
        :meth:`decision_function` return the full ``(n_samples, n_classes)``
        float64 array (computed a block of rows at a time: its size is
        yours to afford, 8 bytes a class a row).
    num_sampled : int, default 1024
        Draws of negative classes per step of a sampled output.
""" % SAMPLED_OUTPUT_MIN_CLASSES + """
    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Class labels.""" + _FITTED_ATTRIBUTES_DOC + """    sampled_output_ : bool
        Whether the network ends in a sampled output (see ``output``).
    class_counts_ : list of int
        Sampled output only: training count of each class of the first fit
        (what the sampler draws by).
""" + """
    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from gluon_sparse.sklearn import SparseMLPClassifier
    >>> X = sp.random(100, 10000, density=0.001, format="csr", random_state=0)
    >>> row_sums = X.sum(axis=1).A1
    >>> y = (row_sums > np.median(row_sums)).astype(int)  # two balanced classes
    >>> np.bincount(y)
    array([50, 50])
    >>> clf = SparseMLPClassifier(hidden_layer_sizes=(16,), max_iter=5, random_state=0)
    >>> clf.fit(X, y).predict(X[:3]).shape
    (3,)
    """

    __init__ = estimator_init(hidden_layer_sizes=(100,), activation="relu",
                              keyword_only=OUTPUT_PARAMETERS)

    _parameter_constraints = {**_BaseSparseMLP._parameter_constraints, **OUTPUT_CONSTRAINTS}


class SparseMLPRegressor(SparseRegressorMixin, _BaseSparseMLP):
    __doc__ = """Multi-layer perceptron regressor whose first layer is sparse.

    Squared loss, identity output; ``y`` may have several columns. Same
    parameter names and fitted attributes as
    :class:`sklearn.neural_network.MLPRegressor` where the meaning is the same.
    """ + _MLP_PARAMETERS_DOC + """
    Attributes
    ----------""" + _FITTED_ATTRIBUTES_DOC + """
    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from gluon_sparse.sklearn import SparseMLPRegressor
    >>> X = sp.random(100, 10000, density=0.001, format="csr", random_state=0)
    >>> reg = SparseMLPRegressor(hidden_layer_sizes=(16,), max_iter=5, random_state=0)
    >>> reg.fit(X, np.asarray(X.sum(axis=1)).ravel()).predict(X[:3]).shape
    (3,)
    """
