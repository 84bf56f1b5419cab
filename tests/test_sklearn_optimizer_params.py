"""optimizer_params: the optimizer's own hyper-parameters (MLPClassifier's momentum,
beta_1, beta_2, epsilon), against a Gluon Trainer built with them by hand."""
import pickle

import mxnet as mx
import numpy as np
import pytest
import scipy.sparse as sp

from gluon_sparse.sklearn import SparseMLPClassifier, SparseMultiLabelClassifier, load


def _data(seed=0):
    X = sp.random(64, 300, density=0.03, format="csr", random_state=seed, dtype=np.float32)
    sums = np.asarray(X.sum(axis=1)).ravel()
    y = (sums > np.median(sums)).astype(int)
    return X, y


@mx.optimizer.register
class _SGDWithMomentum08(mx.optimizer.SGD):
    """MXNet's SGD whose momentum and clip default to what the test passes as params."""

    def __init__(self, momentum=0.8, clip_gradient=0.01, **kwargs):
        super().__init__(momentum=momentum, clip_gradient=clip_gradient, **kwargs)


@mx.optimizer.register
class _AdamWithBetas(mx.optimizer.Adam):
    def __init__(self, beta1=0.5, beta2=0.9, epsilon=1e-4, **kwargs):
        super().__init__(beta1=beta1, beta2=beta2, epsilon=epsilon, **kwargs)


@pytest.mark.parametrize("optimizer, params, reference", [
    ("sgd", {"momentum": 0.8, "clip_gradient": 0.01}, "_sgdwithmomentum08"),
    ("adam", {"beta1": 0.5, "beta2": 0.9, "epsilon": 1e-4}, "_adamwithbetas"),
])
def test_the_params_train_as_an_optimizer_built_with_them(optimizer, params, reference):
    """The reference: an optimizer class whose constructor defaults are the params."""
    X, y = _data()
    kwargs = dict(hidden_layer_sizes=(8,), alpha=1e-4, random_state=0, batch_size=16,
                  max_iter=3, learning_rate_init=0.01)
    with_params = SparseMLPClassifier(optimizer=optimizer, optimizer_params=params,
                                      **kwargs).fit(X, y)
    expected = SparseMLPClassifier(optimizer=reference, **kwargs).fit(X, y)
    without = SparseMLPClassifier(optimizer=optimizer, **kwargs).fit(X, y)
    for name, value in params.items():
        assert getattr(with_params._trainer.optimizer, name) == value
    np.testing.assert_array_equal(with_params.predict_proba(X), expected.predict_proba(X))
    assert not np.array_equal(with_params.predict_proba(X), without.predict_proba(X))


def test_sgd_momentum_with_the_deferred_family_equals_mxnets_own():
    """'sparsesgd' with momentum (deferred, exact) trains as MXNet's standard SGD with it,
    which the estimators ask for (lazy_update=False) unless optimizer_params say otherwise:
    MXNet's default lazy update stops the momentum of absent rows."""
    X, y = _data(3)
    kwargs = dict(hidden_layer_sizes=(8,), alpha=1e-4, random_state=0, batch_size=16,
                  max_iter=3, learning_rate_init=0.01)
    ours = SparseMLPClassifier(optimizer="sparsesgd", optimizer_params={"momentum": 0.9},
                               **kwargs).fit(X, y)
    standard = SparseMLPClassifier(optimizer="sgd", optimizer_params={"momentum": 0.9},
                                   **kwargs).fit(X, y)
    lazy = SparseMLPClassifier(optimizer="sgd", optimizer_params={
        "momentum": 0.9, "lazy_update": True}, **kwargs).fit(X, y)
    np.testing.assert_allclose(ours.predict_proba(X), standard.predict_proba(X), rtol=1e-5,
                               atol=1e-6)
    assert not np.allclose(ours.predict_proba(X), lazy.predict_proba(X), rtol=1e-5, atol=1e-6)


def test_unknown_reserved_and_unsaveable_params_are_refused_before_training():
    X, y = _data()
    for params, message in (({"momentun": 0.9}, r"'momentun' is not a parameter of optimizer "
                                                 r"'sparsesgd' \(it takes .*momentum"),
                            ({"learning_rate": 0.1}, "use learning_rate_init"),
                            ({"wd": 0.1}, "use alpha"),
                            ({"momentum": "0.9"}, r"'momentum' must be a number"),
                            ({"momentum": [0.9]}, "what a saved model can keep"),
                            # Refused by the optimizer as the estimator builds it (deferred).
                            ({"lazy_update": True}, "refuses them: deferred=True")):
        clf = SparseMLPClassifier(hidden_layer_sizes=(4,), optimizer="sparsesgd",
                                  optimizer_params=params, max_iter=1)
        with pytest.raises(ValueError, match=message):
            clf.fit(X, y)
        assert not hasattr(clf, "n_iter_")  # nothing half fitted
    with pytest.raises(ValueError, match="optimizer_params"):
        SparseMLPClassifier(optimizer_params=[("momentum", 0.9)]).fit(X, y)


def test_the_params_survive_save_load_and_pickle(tmp_path):
    X, y = _data(1)
    clf = SparseMLPClassifier(hidden_layer_sizes=(4,), optimizer="sparsenag",
                              optimizer_params={"momentum": 0.7}, max_iter=2,
                              random_state=0).fit(X, y)
    clf.save(tmp_path / "m")
    for copy in (load(tmp_path / "m"), pickle.loads(pickle.dumps(clf))):
        assert copy.get_params()["optimizer_params"] == {"momentum": 0.7}
        copy.partial_fit(X, y)
        assert copy._trainer.optimizer.momentum == 0.7


def test_the_multilabel_estimator_takes_them_too():
    X, _ = _data(2)
    Y = sp.csr_matrix((np.asarray(X[:, :5].todense()) > 0).astype(int) | np.eye(64, 5, dtype=int))
    clf = SparseMultiLabelClassifier(hidden_layer_sizes=(4,), optimizer="sparsesgd",
                                     optimizer_params={"momentum": 0.9}, max_iter=1,
                                     random_state=0).fit(X, Y)
    assert clf._trainer.optimizer.momentum == 0.9
