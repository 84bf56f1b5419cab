"""scikit-learn's shared estimator checks, run on every estimator of gluon_sparse.sklearn."""
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from gluon_sparse.nn import FullyConnectedSparse
from gluon_sparse.sklearn import (SparseMLPClassifier, SparseMLPRegressor, SparseNetClassifier,
                                  SparseNetRegressor)
from gluon_sparse.sklearn._base import expected_failed_checks

# Small networks, few epochs and a larger step: the checks fit ~150 models on
# toy data, where MXNet's per-call overhead, not arithmetic, is the cost.
FAST = dict(max_iter=15, learning_rate_init=0.05)

# 15 epochs rarely converge on the checks' data; the warning is expected there
# (and tested elsewhere), not worth 230 lines of every CI log.
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

ESTIMATORS = [
    SparseMLPClassifier(hidden_layer_sizes=(16,), **FAST),
    SparseMLPRegressor(hidden_layer_sizes=(16,), **FAST),
    SparseNetClassifier(module=FullyConnectedSparse, **dict(FAST, learning_rate_init=0.1)),
    SparseNetRegressor(**dict(FAST, learning_rate_init=0.1)),
]


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=expected_failed_checks)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)
