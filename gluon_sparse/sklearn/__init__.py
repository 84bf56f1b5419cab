"""scikit-learn estimators whose training stays sparse from input to optimizer.

``SparseMLPClassifier`` / ``SparseMLPRegressor`` follow
:class:`sklearn.neural_network.MLPClassifier`'s interface with a
:class:`~gluon_sparse.nn.FullyConnectedSparse` first layer;
``SparseNetClassifier`` / ``SparseNetRegressor`` train any Gluon block.
All accept scipy sparse matrices, dense arrays, LibSVM paths and
:class:`~gluon_sparse.data.LibSVMDataset` inputs, pickle as plain numpy arrays,
and save to / load from a model directory with :meth:`save` and :func:`load`.

The package's layout (one module per concern, and where a new estimator
goes) is described in ``gluon_sparse/sklearn/_base.py`` and the user guide.
"""
from ._context import parse_context
from ._persistence import check_model_dir_writable, is_model_dir, load, save
from .mlp import SparseMLPClassifier, SparseMLPRegressor
from .multilabel import SparseMultiLabelClassifier
from .net import SparseNetClassifier, SparseNetRegressor

__all__ = ["SparseMLPClassifier", "SparseMLPRegressor", "SparseNetClassifier",
           "SparseNetRegressor", "SparseMultiLabelClassifier", "load", "save", "is_model_dir",
           "check_model_dir_writable", "parse_context"]
