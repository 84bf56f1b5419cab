"""Pickling keeps the optimizer's state, as scikit-learn's MLPs do: partial_fit on an
unpickled estimator goes on bit for bit as the original would have."""
import copy
import pickle

import numpy as np
import pytest
import scipy.sparse as sp

from gluon_sparse.sklearn import (SparseMLPClassifier, SparseMLPRegressor,
                                  SparseMultiLabelClassifier)


def _data(seed=0):
    rng = np.random.RandomState(seed)
    X = sp.random(120, 500, density=0.02, format="csr", random_state=rng, dtype=np.float32)
    y = (np.asarray(X.sum(axis=1)).ravel() > np.median(np.asarray(X.sum(axis=1)))).astype(int)
    return X, y


def _weights(estimator):
    return [p.data().asnumpy() for p in estimator.module_.collect_params().values()]


def _assert_same_weights(a, b):
    for left, right in zip(_weights(a), _weights(b)):
        np.testing.assert_array_equal(left, right)


@pytest.mark.parametrize("optimizer", ["sparseadam", "adam", "sparseadagrad", "sparsermsprop"])
@pytest.mark.parametrize("restore", [lambda e: pickle.loads(pickle.dumps(e)), copy.deepcopy],
                         ids=["pickle", "deepcopy"])
def test_partial_fit_after_unpickling_goes_on_as_the_original(optimizer, restore):
    X, y = _data()
    clf = SparseMLPClassifier(hidden_layer_sizes=(8,), optimizer=optimizer, alpha=1e-4,
                              random_state=0, batch_size=16)
    for _ in range(2):
        clf.partial_fit(X, y, classes=[0, 1])
    resumed = restore(clf)
    clf.partial_fit(X, y)
    resumed.partial_fit(X, y)
    _assert_same_weights(resumed, clf)
    assert resumed.loss_curve_ == clf.loss_curve_


def _multilabel_targets(X):
    # Label j for rows whose feature sum over a block of columns is above its median.
    blocks = np.stack([np.asarray(X[:, 100 * j:100 * (j + 1)].sum(axis=1)).ravel()
                       for j in range(5)], axis=1)
    Y = (blocks > np.median(blocks, axis=0)).astype(np.int64)
    Y[Y.sum(axis=1) == 0, 0] = 1
    return sp.csr_matrix(Y)


@pytest.mark.parametrize("kind", ["regressor", "multilabel"])
def test_other_estimators_go_on_after_unpickling_too(kind):
    X, y = _data(1)
    if kind == "regressor":
        est, target = SparseMLPRegressor(hidden_layer_sizes=(8,), random_state=0,
                                         batch_size=16), y.astype(np.float64)
    else:
        est, target = SparseMultiLabelClassifier(hidden_layer_sizes=(8,), random_state=0,
                                                 batch_size=16), _multilabel_targets(X)
    est.partial_fit(X, target)
    # A copy of a copy that never trained passes the state on.
    resumed = pickle.loads(pickle.dumps(pickle.loads(pickle.dumps(est))))
    est.partial_fit(X, target)
    resumed.partial_fit(X, target)
    _assert_same_weights(resumed, est)


def test_fit_after_unpickling_starts_afresh_as_the_original_does():
    """A (warm-started or not) fit builds a new optimizer on the original; the copy's
    saved state must not leak into it."""
    X, y = _data(2)
    for warm_start in (False, True):
        clf = SparseMLPClassifier(hidden_layer_sizes=(8,), random_state=0, batch_size=16,
                                  max_iter=2, warm_start=warm_start)
        clf.partial_fit(X, y, classes=[0, 1])
        copy_ = pickle.loads(pickle.dumps(clf))
        clf.fit(X, y)
        copy_.fit(X, y)
        _assert_same_weights(copy_, clf)


def test_a_changed_architecture_restarts_the_optimizer_on_the_copy_as_on_the_original():
    X, y = _data(3)
    clf = SparseMLPClassifier(hidden_layer_sizes=(8,), random_state=0, batch_size=16)
    clf.partial_fit(X, y, classes=[0, 1])
    clf.set_params(activation="tanh")
    copy_ = pickle.loads(pickle.dumps(clf))
    clf.partial_fit(X, y)
    copy_.partial_fit(X, y)
    _assert_same_weights(copy_, clf)


def test_model_directories_keep_no_optimizer_state(tmp_path):
    """save/load is the format that executes no code when read: it keeps the weights, and
    partial_fit after a load starts the optimizer afresh (documented)."""
    from gluon_sparse.sklearn import load
    X, y = _data(4)
    clf = SparseMLPClassifier(hidden_layer_sizes=(8,), random_state=0, batch_size=16)
    clf.partial_fit(X, y, classes=[0, 1])
    clf.save(tmp_path / "m")
    version = tmp_path / "m" / (tmp_path / "m" / "CURRENT").read_text().strip()
    assert sorted(p.name for p in version.iterdir()) == ["estimator.json", "network.params"]
    loaded = load(tmp_path / "m")
    assert not hasattr(loaded, "_pending_optimizer_states")
    np.testing.assert_array_equal(loaded.predict_proba(X), clf.predict_proba(X))
