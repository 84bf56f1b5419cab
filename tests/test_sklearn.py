"""Behaviour of the scikit-learn estimators against NumPy, scipy and scikit-learn references."""
import json
import pickle
import warnings

import joblib
import mxnet as mx
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.datasets import load_svmlight_file, make_blobs
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

from gluon_sparse.data import LibSVMDataset
from gluon_sparse.nn import FactorizationMachine, FullyConnectedSparse
from gluon_sparse.sklearn import (SparseMLPClassifier, SparseMLPRegressor, SparseNetClassifier,
                                  SparseNetRegressor, load)
from gluon_sparse.sklearn._context import parse_context

HEART_SCALE = "/work/shared/data/heart_scale"


@pytest.fixture(autouse=True)
def _quiet_convergence_warnings():
    # Most fits here stop at a small max_iter on purpose.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)
        yield


def sparse_blobs(n_samples=200, n_features=300, n_classes=3, seed=0):
    """Blob clusters scattered over a wide, mostly empty feature space."""
    X, y = make_blobs(n_samples, n_features=8, centers=n_classes, random_state=seed)
    rng = np.random.RandomState(seed)
    columns = rng.choice(n_features, 8, replace=False)
    wide = sp.csr_matrix((X.ravel(), (np.repeat(np.arange(n_samples), 8), np.tile(columns, n_samples))),
                         shape=(n_samples, n_features), dtype=np.float32)
    return wide, y


def fm_module(n_outputs):
    """A module-level factory (importable, so the estimator can be saved)."""
    return FactorizationMachine(factor_size=4)


def numpy_forward(estimator, X):
    """The MLP's outputs recomputed with NumPy from its parameters."""
    layers = list(estimator.module_)
    act = {"relu": lambda z: np.maximum(z, 0), "tanh": np.tanh, "identity": lambda z: z,
           "logistic": lambda z: 1 / (1 + np.exp(-z))}[estimator.activation]
    out = X @ layers[0].weight.data().asnumpy() + layers[0].bias.data().asnumpy()
    for layer in layers[1:]:  # gluon.nn.Dense stores (units, in_units)
        out = act(out) @ layer.weight.data().asnumpy().T + layer.bias.data().asnumpy()
    return out


def test_mlp_outputs_match_numpy_forward_pass():
    X, y = sparse_blobs()
    clf = SparseMLPClassifier(hidden_layer_sizes=(16, 8), activation="tanh", max_iter=5,
                              random_state=0).fit(X, y)
    logits = numpy_forward(clf, X.toarray())
    np.testing.assert_allclose(clf.decision_function(X), logits, rtol=1e-4, atol=1e-5)
    expected = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(clf.predict_proba(X), expected / expected.sum(axis=1, keepdims=True),
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(clf.predict(X), clf.classes_[logits.argmax(axis=1)])


def test_binary_uses_one_sigmoid_output_and_any_label_type():
    X, y = sparse_blobs(n_classes=2)
    labels = np.array(["spam", "ham"])[y]
    clf = SparseMLPClassifier(hidden_layer_sizes=(8,), max_iter=30, learning_rate_init=0.01,
                              random_state=0).fit(X, labels)
    assert clf.n_outputs_ == 1
    np.testing.assert_array_equal(clf.classes_, ["ham", "spam"])
    logit = clf.decision_function(X)
    assert logit.shape == (X.shape[0],)
    np.testing.assert_allclose(clf.predict_proba(X)[:, 1], 1 / (1 + np.exp(-logit)), rtol=1e-6)
    np.testing.assert_array_equal(clf.predict(X), np.where(logit > 0, "spam", "ham"))
    assert clf.score(X, labels) > 0.95


def test_accuracy_matches_sklearn_mlp_on_heart_scale():
    X, y = load_svmlight_file(HEART_SCALE, dtype=np.float32)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0,
                                                        stratify=y)
    ours = SparseMLPClassifier(hidden_layer_sizes=(32,), max_iter=100, random_state=0)
    reference = MLPClassifier(hidden_layer_sizes=(32,), max_iter=100, random_state=0)
    ours_score = ours.fit(X_train, y_train).score(X_test, y_test)
    reference_score = reference.fit(X_train, y_train).score(X_test, y_test)
    assert ours_score > 0.75
    assert ours_score >= reference_score - 0.06
    np.testing.assert_array_equal(ours.classes_, [-1.0, 1.0])


def test_sgd_step_equals_numpy_gradient_with_weights_and_alpha():
    # One full-batch SGD step of the linear regressor, against the gradient of
    # MLPRegressor's objective: weighted mean of (1/2)(Xw + b - y)^2 plus
    # alpha/2 ||w||^2, both divided by the weight sum.
    rng = np.random.RandomState(0)
    X = sp.random(40, 25, density=0.2, format="csr", random_state=0, dtype=np.float32)
    y = rng.randn(40).astype(np.float32)
    weight = rng.randint(0, 4, 40).astype(np.float32)
    reg = SparseNetRegressor(optimizer="sgd", learning_rate_init=0.1, alpha=0.5, batch_size=40,
                             max_iter=1, shuffle=False, random_state=0).fit(X, y)
    w0 = reg.module_.weight.data().asnumpy()[:, 0].astype(np.float64)
    b0 = float(reg.module_.bias.data().asnumpy()[0])
    reg.set_params(warm_start=True).fit(X, y, sample_weight=weight)
    dense = X.toarray().astype(np.float64)
    residual = weight * (dense @ w0 + b0 - y)
    w_expected = w0 - 0.1 * (dense.T @ residual + 0.5 * w0) / weight.sum()
    b_expected = b0 - 0.1 * residual.sum() / weight.sum()
    np.testing.assert_allclose(reg.module_.weight.data().asnumpy()[:, 0], w_expected, rtol=1e-4,
                               atol=1e-6)
    np.testing.assert_allclose(reg.module_.bias.data().asnumpy()[0], b_expected, rtol=1e-4)


def test_integer_weights_equal_repeated_samples():
    X, y = sparse_blobs(n_samples=60)
    weight = np.random.RandomState(1).randint(0, 3, X.shape[0])
    params = dict(hidden_layer_sizes=(8,), batch_size=500, max_iter=20, random_state=0,
                  learning_rate_init=0.01)
    weighted = SparseMLPClassifier(**params).fit(X, y, sample_weight=weight)
    repeated = SparseMLPClassifier(**params).fit(X[np.repeat(np.arange(60), weight)],
                                                 np.repeat(y, weight))
    np.testing.assert_allclose(weighted.predict_proba(X), repeated.predict_proba(X), rtol=1e-4,
                               atol=1e-5)


@pytest.mark.parametrize("convert", [sp.csr_matrix, sp.csc_matrix, sp.coo_matrix, sp.csr_array,
                                     lambda X: X.toarray()],
                         ids=["csr", "csc", "coo", "csr_array", "dense"])
def test_input_formats_give_identical_models(convert):
    X, y = sparse_blobs()
    params = dict(hidden_layer_sizes=(8,), max_iter=5, random_state=3)
    reference = SparseMLPClassifier(**params).fit(X, y)
    other = SparseMLPClassifier(**params).fit(convert(X), y)
    np.testing.assert_array_equal(other.predict_proba(convert(X)), reference.predict_proba(X))


def test_libsvm_path_and_dataset_inputs():
    X, y = load_svmlight_file(HEART_SCALE, dtype=np.float32)
    params = dict(hidden_layer_sizes=(8,), max_iter=5, random_state=0)
    reference = SparseMLPClassifier(**params).fit(X, y)
    from_path = SparseMLPClassifier(**params).fit(HEART_SCALE)
    from_dataset = SparseMLPClassifier(**params).fit(LibSVMDataset(HEART_SCALE))
    expected = reference.predict_proba(X)
    np.testing.assert_array_equal(from_path.predict_proba(HEART_SCALE), expected)
    np.testing.assert_array_equal(from_dataset.predict_proba(LibSVMDataset(HEART_SCALE)), expected)
    assert from_path.score(HEART_SCALE, y) == reference.score(X, y)
    # As fit(path): score(path) takes the file's labels (it failed: 'missing y').
    assert from_path.score(HEART_SCALE) == reference.score(X, y)
    regressor = SparseMLPRegressor(**params).fit(HEART_SCALE)
    assert regressor.score(HEART_SCALE) == regressor.score(X, y)
    with pytest.raises(ValueError, match=r"score needs y, the true targets of X \(or X as a "
                                         r"LibSVM path"):
        reference.score(X)


def test_a_list_of_paths_is_read_as_one_file(tmp_path):
    """The guide's "(or a list of paths)": the files read row-wise, as one."""
    lines = open(HEART_SCALE).read().splitlines(keepends=True)
    first, second = tmp_path / "a.svm", tmp_path / "b.svm"
    first.write_text("".join(lines[:150]))
    second.write_text("".join(lines[150:]))
    params = dict(hidden_layer_sizes=(8,), max_iter=3, random_state=0)
    whole = SparseMLPClassifier(**params).fit(HEART_SCALE)
    parts = SparseMLPClassifier(**params).fit([str(first), second])
    np.testing.assert_array_equal(parts.predict_proba((str(first), str(second))),
                                  whole.predict_proba(HEART_SCALE))


@pytest.mark.parametrize("estimator, target", [
    (SparseMLPRegressor(optimizer="sparsesgd", learning_rate_init=10.0, max_iter=20,
                        random_state=0), "regression"),
    (SparseMLPClassifier(optimizer="sparsesgd", learning_rate_init=1e12, max_iter=20,
                         random_state=0), "classes")])
def test_a_diverged_fit_raises_instead_of_returning_nan_weights(estimator, target):
    """As scikit-learn's MLPs do: a model of NaN weights predicts NaN (or one class)."""
    X = sp.random(300, 30, density=0.3, format="csr", random_state=0)
    s = np.asarray(X[:, :5].sum(axis=1)).ravel()
    y = s * 1e3 if target == "regression" else np.where(s > np.median(s), "pos", "neg")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="non-finite weights .* diverged"):
            estimator.fit(X, y)
        # partial_fit checks too (when its epoch's loss is not finite)
        with pytest.raises(ValueError, match="non-finite weights"):
            for _ in range(20):
                estimator.partial_fit(X, y, **({"classes": ["neg", "pos"]}
                                               if target == "classes" else {}))


def test_architecture_changed_after_fit_predicts_alike_live_and_unpickled():
    """set_params(activation=...) after fit: the estimator and its pickled copy both use
    the new activation with the trained weights, as MLPClassifier does (the live network
    kept the old one until a pickle rebuilt it)."""
    X, y = sparse_blobs()
    clf = SparseMLPClassifier(hidden_layer_sizes=(8,), max_iter=5, random_state=0).fit(X, y)
    relu = clf.predict_proba(X)
    clf.set_params(activation="tanh")
    tanh = clf.predict_proba(X)
    assert not np.array_equal(tanh, relu)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(clf)).predict_proba(X), tanh)
    clf.set_params(activation="relu")
    np.testing.assert_array_equal(clf.predict_proba(X), relu)
    clf.set_params(warm_start=True, activation="tanh", max_iter=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(X, y)  # trains on with the rebuilt network
    clf.set_params(hidden_layer_sizes=(16,))
    for estimator in (clf, pickle.loads(pickle.dumps(clf))):
        with pytest.raises(ValueError, match=r"do not fit the network .*\(16,\)"):
            estimator.predict(X)


def test_a_warm_started_fit_builds_a_new_optimizer_as_mlpclassifier():
    """fit reads learning_rate_init and optimizer again, and n_iter_ counts the call's
    epochs, as MLPClassifier's fit does (the first fit's Trainer was reused: a new
    learning rate was ignored until the model happened to be pickled)."""
    X, y = sparse_blobs()
    params = dict(hidden_layer_sizes=(8,), max_iter=4, random_state=0, warm_start=True)
    ours = SparseMLPClassifier(**params)
    theirs = MLPClassifier(**params)
    counts = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model in (ours, theirs):
            model.fit(X, y)
            weights = _first_weights(model)
            model.set_params(learning_rate_init=1e-12).fit(X, y)
            assert np.abs(_first_weights(model) - weights).max() < 1e-8
            model.partial_fit(X, y)
            counts.append((model.n_iter_, len(model.loss_curve_)))
        assert counts[0] == counts[1] == (1, 9)
        ours.set_params(optimizer="sparsesgd").fit(X, y)
    assert type(ours._trainer.optimizer).__name__ == "SparseSGD"
    assert ours._trainer.learning_rate == 1e-12


def _first_weights(model):
    if isinstance(model, MLPClassifier):
        return model.coefs_[0].copy()
    params = model.module_.collect_params()
    return params[[name for name in params if name.endswith("weight")][0]].data().asnumpy()


def test_a_loaded_model_checks_dataframe_column_names(tmp_path):
    """feature_names_in_ is saved: the loaded model refuses reordered columns as the fitted
    one does (it predicted on them, and warned it had been fitted without names)."""
    pd = pytest.importorskip("pandas")
    X, y = sparse_blobs(n_features=12)
    frame = pd.DataFrame(X.toarray(), columns=["f%d" % i for i in range(12)])
    model = SparseMLPClassifier(hidden_layer_sizes=(8,), max_iter=2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(frame, y)
    model.save(tmp_path / "m")
    loaded = load(tmp_path / "m")
    np.testing.assert_array_equal(loaded.feature_names_in_, model.feature_names_in_)
    np.testing.assert_array_equal(loaded.predict(frame), model.predict(frame))
    reordered = frame[frame.columns[::-1]]
    for fitted in (model, loaded):
        with pytest.raises(ValueError, match="same order as they were in fit"):
            fitted.predict(reordered)


def test_early_stopping_switched_on_for_a_warm_started_fit():
    """validation_scores_ was None from the first fit; the second failed on it (as
    scikit-learn 1.7's MLPClassifier still does)."""
    X, y = sparse_blobs()
    clf = SparseMLPClassifier(hidden_layer_sizes=(8,), max_iter=3, warm_start=True,
                              random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(X, y)
        assert clf.validation_scores_ is None
        clf.set_params(early_stopping=True).fit(X, y)
    # n_iter_ counts the call's epochs, as MLPClassifier's does (scikit-learn >= 1.3).
    assert len(clf.validation_scores_) == clf.n_iter_ > 0 and len(clf.loss_curve_) > clf.n_iter_
    assert clf.best_validation_score_ == max(clf.validation_scores_)


class MaskedLinear(mx.gluon.HybridBlock):
    """A linear model whose last class is masked out by a constant logit of -inf."""

    def __init__(self, n_outputs):
        super().__init__()
        with self.name_scope():
            self.fc = FullyConnectedSparse(n_outputs)
            mask = np.zeros((1, n_outputs), np.float32)
            mask[0, -1] = -np.inf
            self.mask = self.params.get_constant("mask", mx.nd.array(mask))

    def hybrid_forward(self, F, x, mask):
        return F.broadcast_add(self.fc(x), mask)


def test_an_untrained_constant_of_inf_is_not_a_divergence():
    """The finite-weights check reads trained parameters only (a mask of -inf is legitimate,
    and makes the loss of the masked class's rows infinite)."""
    rng = np.random.RandomState(0)
    X = sp.random(200, 30, density=0.2, format="csr", random_state=rng)
    y = rng.randint(0, 3, size=200)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = SparseNetClassifier(module=MaskedLinear, max_iter=3, random_state=0).fit(X, y)
    assert not np.isfinite(clf.loss_)
    assert set(clf.predict(X)) <= {0, 1}


@pytest.mark.parametrize("outputs", [1, 3])
def test_a_regressors_step_is_mlpregressors_for_any_number_of_outputs(outputs):
    """MLPRegressor steps along the gradient of the squared error summed over the outputs
    and reports its mean; with k outputs the step was 1/k of its (and alpha k times as
    strong). One SGD epoch of a linear model on one batch is one step, checked by hand."""
    rng = np.random.RandomState(0)
    X = sp.random(40, 6, density=0.5, format="csr", random_state=rng, dtype=np.float32)
    Y = rng.randn(40, outputs).astype(np.float32)
    y = Y[:, 0] if outputs == 1 else Y
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = SparseMLPRegressor(hidden_layer_sizes=(), optimizer="sparsesgd",
                                 learning_rate_init=0.1, alpha=0.0, batch_size=40, max_iter=1,
                                 random_state=0).fit(X, y)
    before = {k: v.data().asnumpy() for k, v in est.module_._collect_params_with_prefix().items()}
    residual = est.predict(X).reshape(40, outputs) - Y
    est.partial_fit(X, y)
    after = {k: v.data().asnumpy() for k, v in est.module_._collect_params_with_prefix().items()}
    np.testing.assert_allclose(after["0.weight"] - before["0.weight"],
                               -0.1 * X.T.toarray() @ residual / 40, atol=1e-6)
    np.testing.assert_allclose(after["0.bias"] - before["0.bias"], -0.1 * residual.mean(axis=0),
                               atol=1e-6)
    assert est.loss_ == pytest.approx(0.5 * (residual ** 2).mean(), rel=1e-5)


def test_early_stopping_bookkeeping_is_mlpclassifiers():
    """best_loss_ is None with early stopping (it was inf), and partial_fit refuses
    early_stopping=True (it was ignored), as in scikit-learn."""
    X, y = sparse_blobs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = SparseMLPClassifier(hidden_layer_sizes=(8,), max_iter=3, early_stopping=True,
                                  random_state=0).fit(X, y)
        assert clf.best_loss_ is None
        reference = MLPClassifier(hidden_layer_sizes=(8,), max_iter=3, early_stopping=True,
                                  random_state=0).fit(X.toarray(), y)
        assert reference.best_loss_ is None
        with pytest.raises(ValueError, match="partial_fit does not support early_stopping"):
            clf.partial_fit(X, y)
        clf.set_params(early_stopping=False, warm_start=True).fit(X, y)
    assert clf.best_loss_ == min(clf.loss_curve_[3:])


def test_a_files_features_beyond_the_width_are_dropped_but_a_wider_matrix_refused(tmp_path,
                                                                                   caplog):
    """A test file (or LibSVMDataset) with features the training never saw (indices past
    the model's width) was refused; as LIBLINEAR's predict, their values are dropped, with
    one warning a file.
    A matrix of another width is refused, as scikit-learn refuses it; so is a training file
    (partial_fit) past the width."""
    from gluon_sparse.sklearn import SparseMultiLabelClassifier
    clf = SparseMLPClassifier(hidden_layer_sizes=(4,), max_iter=2).fit(HEART_SCALE)
    lines = open(HEART_SCALE).read().splitlines(keepends=True)
    (tmp_path / "head.svm").write_text("".join(lines[:100]))
    wide = tmp_path / "wide.svm"
    wide.write_text("".join(line.rstrip("\n") + (" 20:1 31:2\n" if i < 7 else "\n")
                            for i, line in enumerate(lines[100:])))
    X, y = load_svmlight_file(HEART_SCALE, dtype=np.float32)
    with caplog.at_level("WARNING", logger="gluon_sparse"):
        np.testing.assert_array_equal(clf.predict_proba(str(wide)), clf.predict_proba(X[100:]))
        assert clf.score(str(wide)) == clf.score(X[100:], y[100:])
        both = clf.predict_proba([str(tmp_path / "head.svm"), str(wide)])
    np.testing.assert_array_equal(both, clf.predict_proba(X))
    said = [r.getMessage() for r in caplog.records if "beyond the model's" in r.getMessage()]
    # One a call, naming only the file with such features (not head.svm).
    assert len(said) == 3 and all(message.startswith(str(wide)) for message in said), said
    assert said[0] == ("%s: 14 values in 7 of 170 rows have feature indices beyond the model's "
                       "13 features (one-based indices 1..13; the largest here is 31): they "
                       "are ignored, as features the training never saw" % wide)
    with pytest.raises(ValueError, match="13 features"):
        clf.predict(np.zeros((2, 20)))
    with pytest.raises(ValueError, match=r"wide\.svm, line 1: feature index 20 is out of range"):
        clf.partial_fit(str(wide), y[100:])
    # A LibSVMDataset read at its own (wider) width: the same, as the path gives.
    dataset = LibSVMDataset(str(wide))
    assert dataset.num_features == 31
    caplog.clear()
    with caplog.at_level("WARNING", logger="gluon_sparse"):
        np.testing.assert_array_equal(clf.predict_proba(dataset), clf.predict_proba(X[100:]))
    assert [r.getMessage() for r in caplog.records if "beyond the model's" in r.getMessage()] \
        == said[:1]
    with pytest.raises(ValueError, match="31 features, but the model was fitted with 13"):
        clf.partial_fit(dataset, y[100:])
    multilabel = SparseMultiLabelClassifier(hidden_layer_sizes=(4,), num_sampled=1, max_iter=1,
                                            random_state=0).fit(X, y)
    caplog.clear()
    with caplog.at_level("WARNING", logger="gluon_sparse"):
        np.testing.assert_array_equal(multilabel.predict_top_k(str(wide), 1)[1],
                                      multilabel.predict_top_k(X[100:], 1)[1])
    assert len([r for r in caplog.records if "beyond the model's" in r.getMessage()]) == 1
    with pytest.raises(ValueError, match="13 features"):
        multilabel.predict(np.zeros((2, 20)))


def test_a_file_within_the_models_width_is_not_copied():
    """Read at its own width and given the model's: the arrays the parser filled, kept."""
    from gluon_sparse.data import load_libsvm
    from gluon_sparse.data._model_width import to_model_width
    X, _ = load_libsvm(HEART_SCALE)
    for width in (13, 20):
        fitted = to_model_width(X, width, [HEART_SCALE], False)
        assert fitted.shape == (270, width)
        for name in ("data", "indices", "indptr"):
            assert np.shares_memory(getattr(fitted, name), getattr(X, name)), name


def test_same_random_state_same_predictions_different_differs():
    X, y = sparse_blobs()
    a = SparseMLPClassifier(hidden_layer_sizes=(8,), max_iter=5, random_state=7).fit(X, y)
    b = SparseMLPClassifier(hidden_layer_sizes=(8,), max_iter=5, random_state=7).fit(X, y)
    c = SparseMLPClassifier(hidden_layer_sizes=(8,), max_iter=5, random_state=8).fit(X, y)
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    assert not np.array_equal(a.predict_proba(X), c.predict_proba(X))


def test_partial_fit_epochs_equal_fit_epochs():
    X, y = sparse_blobs()
    params = dict(hidden_layer_sizes=(8,), shuffle=False, random_state=0, tol=0,
                  n_iter_no_change=100)
    fitted = SparseMLPClassifier(max_iter=3, **params).fit(X, y)
    incremental = SparseMLPClassifier(**params)
    with pytest.raises(ValueError, match="classes must be passed"):
        incremental.partial_fit(X, y)
    for _ in range(3):
        incremental.partial_fit(X, y, classes=np.unique(y))
    # As MLPClassifier: n_iter_ counts this call's epochs, loss_curve_ every epoch.
    assert incremental.n_iter_ == 1 and len(incremental.loss_curve_) == 3
    np.testing.assert_allclose(incremental.loss_curve_, fitted.loss_curve_, rtol=1e-6)
    np.testing.assert_allclose(incremental.predict_proba(X), fitted.predict_proba(X), rtol=1e-5)
    with pytest.raises(ValueError, match="not among the classes"):
        incremental.partial_fit(X, y + 10)


def test_convergence_bookkeeping_like_mlpclassifier():
    X, y = sparse_blobs()
    clf = SparseMLPClassifier(hidden_layer_sizes=(8,), max_iter=300, learning_rate_init=0.05,
                              tol=1e-3, n_iter_no_change=3, random_state=0).fit(X, y)
    assert clf.n_iter_ < 300 and len(clf.loss_curve_) == clf.n_iter_
    assert clf.best_loss_ == min(clf.loss_curve_)
    assert clf.validation_scores_ is None and clf.t_ == clf.n_iter_ * X.shape[0]


def test_early_stopping_keeps_best_validation_weights():
    X, y = sparse_blobs(n_samples=300)
    clf = SparseMLPClassifier(hidden_layer_sizes=(8,), max_iter=200, early_stopping=True,
                              validation_fraction=0.2, n_iter_no_change=3, learning_rate_init=0.05,
                              random_state=0).fit(X, y)
    assert len(clf.validation_scores_) == clf.n_iter_ < 200
    assert clf.best_validation_score_ == max(clf.validation_scores_)


def test_unseen_features_keep_their_initial_weights():
    # Standard Adam moves a row only through its gradient (0 for a feature
    # that never occurs) and weight decay, so with alpha=0 the rows of unseen
    # features stay exactly at their initial values.
    X, y = sparse_blobs(n_features=300)
    seen = np.unique(X.indices)
    unseen = np.setdiff1d(np.arange(300), seen)
    a = SparseMLPClassifier(hidden_layer_sizes=(8,), alpha=0, max_iter=1, random_state=0).fit(X, y)
    b = SparseMLPClassifier(hidden_layer_sizes=(8,), alpha=0, max_iter=4, random_state=0).fit(X, y)
    weight_a = a.module_[0].weight.data().asnumpy()
    weight_b = b.module_[0].weight.data().asnumpy()
    np.testing.assert_array_equal(weight_a[unseen], weight_b[unseen])
    assert not np.allclose(weight_a[seen], weight_b[seen])
    assert b.module_[0].weight.grad().stype == "row_sparse"


def test_regressor_multi_output():
    X, _ = sparse_blobs()
    coef = np.random.RandomState(0).randn(X.shape[1], 2)
    Y = X @ coef + [1.0, -2.0]
    reg = SparseNetRegressor(max_iter=300, learning_rate_init=0.05, alpha=0, random_state=0)
    reg.fit(X, Y)
    assert reg.predict(X).shape == Y.shape and reg.n_outputs_ == 2
    assert reg.score(X, Y) > 0.9
    mlp = SparseMLPRegressor(hidden_layer_sizes=(4,), max_iter=2, random_state=0).fit(X, Y)
    assert mlp.predict(X).shape == Y.shape
    assert SparseMLPRegressor(hidden_layer_sizes=(4,), max_iter=2).fit(X, Y[:, 0]).predict(X).ndim == 1


def test_factorization_machine_module():
    X, y = sparse_blobs(n_classes=2)
    clf = SparseNetClassifier(module=fm_module, max_iter=30, learning_rate_init=0.02,
                              random_state=0).fit(X, y)
    assert isinstance(clf.module_, FactorizationMachine)
    assert clf.score(X, y) > 0.9
    with pytest.raises(TypeError, match="not be a Block instance"):
        SparseNetClassifier(module=FullyConnectedSparse(2)).fit(X, y)


def test_a_module_of_the_wrong_width_is_refused():
    """A network that ignores n_outputs: a 1-column output for 3 classes was read as binary."""
    X, y = sparse_blobs(n_classes=3)
    with pytest.raises(ValueError, match=r"module\(3\) built a network whose output has shape "
                                         r"\(\d+, 1\) \(1 column\(s\)\).*needs 3"):
        SparseNetClassifier(module=fm_module, max_iter=2).fit(X, y)
    with pytest.raises(ValueError, match=r"needs 2 \(one per column of y\)"):
        SparseNetRegressor(module=fm_module, max_iter=2).fit(X, np.column_stack([y, y]) * 1.0)


def test_a_regression_target_beyond_float32_is_refused():
    """Finite in float64 (scikit-learn's check passes), infinite in float32: the fit ran
    and returned a model of NaNs."""
    X, y = sparse_blobs()
    y = y.astype(float)
    y[3] = 1e39
    with pytest.raises(ValueError, match="beyond float32's range"):
        SparseMLPRegressor(hidden_layer_sizes=(4,), max_iter=2).fit(X, y)


def test_a_cpu_device_other_than_cpu0_fits_and_predicts():
    X, y = sparse_blobs()
    kw = dict(hidden_layer_sizes=(8,), max_iter=3, random_state=0)
    on_cpu1 = SparseMLPClassifier(ctx="cpu:1", **kw).fit(X, y)
    np.testing.assert_array_equal(on_cpu1.predict_proba(X),
                                  SparseMLPClassifier(**kw).fit(X, y).predict_proba(X))


def test_hidden_layer_sizes_as_an_array_saves_and_loads(tmp_path):
    X, y = sparse_blobs()
    clf = SparseMLPClassifier(hidden_layer_sizes=np.array([6, 4]), max_iter=2,
                              random_state=0).fit(X, y)
    clf.save(tmp_path / "m")
    loaded = load(tmp_path / "m")
    np.testing.assert_array_equal(loaded.hidden_layer_sizes, [6, 4])
    np.testing.assert_array_equal(loaded.predict_proba(X), clf.predict_proba(X))


@pytest.mark.parametrize("dump, restore", [(pickle.dumps, pickle.loads),
                                           (None, None)], ids=["pickle", "joblib"])
def test_pickle_round_trip_identical_predictions(tmp_path, dump, restore):
    X, y = sparse_blobs()
    clf = SparseMLPClassifier(hidden_layer_sizes=(8,), max_iter=5, random_state=0).fit(X, y)
    expected = clf.predict_proba(X)
    # As if trained on a GPU: the pickle holds numpy arrays and the copy
    # falls back to the CPU when the GPU is not there.
    clf.set_params(ctx="gpu:0")
    if dump is None:
        joblib.dump(clf, tmp_path / "model.joblib")
        copy = joblib.load(tmp_path / "model.joblib")
    else:
        state = clf.__getstate__()
        assert all(isinstance(v, np.ndarray) for v in state["_module_params"].values())
        copy = restore(dump(clf))
    np.testing.assert_array_equal(copy.predict_proba(X), expected)
    np.testing.assert_array_equal(clf.predict_proba(X), expected)  # the original still works
    copy.set_params(ctx="cpu", warm_start=True, max_iter=1).fit(X, y)  # and trains on


def test_save_load_round_trip(tmp_path):
    X, y = sparse_blobs()
    labels = np.array(["a", "b", "c"])[y]
    for estimator in (SparseMLPClassifier(hidden_layer_sizes=(8, 4), max_iter=5, random_state=0),
                      SparseNetClassifier(module=FullyConnectedSparse, max_iter=3, random_state=0),
                      SparseMLPRegressor(hidden_layer_sizes=(4,), max_iter=3, random_state=0)):
        target = labels if hasattr(estimator, "predict_proba") else y.astype(float)
        # ctx="gpu:0" as if trained on a GPU: without one, load() falls back to the CPU.
        estimator.fit(X, target).set_params(ctx="gpu:0" if mx.context.num_gpus() == 0 else "cpu")
        path = tmp_path / type(estimator).__name__
        estimator.save(path)
        version = path / (path / "CURRENT").read_text().strip()
        assert sorted(p.name for p in version.iterdir()) == ["estimator.json", "network.params"]
        loaded = type(estimator).load(path)
        np.testing.assert_array_equal(loaded.predict(X), estimator.predict(X))
        assert loaded.get_params() == estimator.get_params()
        assert loaded.loss_curve_ == estimator.loss_curve_
        # MXNet's own format: a plain nd.load reads the parameters.
        assert set(mx.nd.load(str(version / "network.params"))) == set(
            estimator.module_._collect_params_with_prefix())
    with pytest.raises(TypeError, match="holds a SparseMLPRegressor"):
        SparseMLPClassifier.load(path)
    np.testing.assert_array_equal(load(tmp_path / "SparseMLPClassifier").classes_, ["a", "b", "c"])


def test_save_custom_loss_needs_it_at_load(tmp_path):
    X, y = sparse_blobs()
    loss = mx.gluon.loss.L1Loss()
    reg = SparseNetRegressor(loss=loss, max_iter=2, random_state=0).fit(X, y.astype(float))
    reg.save(tmp_path / "m")
    with pytest.raises(ValueError, match="pass it to load"):
        load(tmp_path / "m")
    np.testing.assert_array_equal(load(tmp_path / "m", loss=loss).predict(X), reg.predict(X))


def test_interrupted_save_leaves_previous_model(tmp_path, monkeypatch):
    X, y = sparse_blobs()
    clf = SparseMLPClassifier(hidden_layer_sizes=(4,), max_iter=2, random_state=0).fit(X, y)
    clf.save(tmp_path / "m")
    before = load(tmp_path / "m").predict_proba(X)

    def interrupted(filename, data):
        with open(filename, "wb") as f:
            f.write(b"half")
        raise KeyboardInterrupt

    retrained = clone(clf).set_params(random_state=1).fit(X, y)
    monkeypatch.setattr(mx.nd, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        retrained.save(tmp_path / "m")
    assert [p.name for p in tmp_path.iterdir()] == ["m"]
    np.testing.assert_array_equal(load(tmp_path / "m").predict_proba(X), before)
    with pytest.raises(KeyboardInterrupt):
        retrained.save(tmp_path / "new")
    assert [p.name for p in tmp_path.iterdir()] == ["m"]


def test_save_refuses_to_replace_other_directories(tmp_path):
    X, y = sparse_blobs()
    clf = SparseMLPClassifier(hidden_layer_sizes=(4,), max_iter=1).fit(X, y)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError, match="not a gluon-sparse model"):
        clf.save(tmp_path / "data")
    with pytest.raises(FileNotFoundError, match="not a gluon-sparse model directory"):
        load(tmp_path / "data")


def test_unfitted_and_bad_parameters():
    X, y = sparse_blobs()
    with pytest.raises(NotFittedError):
        SparseMLPClassifier().predict(X)
    with pytest.raises(NotFittedError):
        SparseMLPClassifier().module_
    with pytest.raises(ValueError, match="not a registered MXNet optimizer"):
        SparseMLPClassifier(optimizer="nope", max_iter=1).fit(X, y)
    with pytest.raises(ValueError, match="hidden_layer_sizes"):
        SparseMLPClassifier(hidden_layer_sizes=(4, 0), max_iter=1).fit(X, y)
    with pytest.raises(ValueError, match="at least 2 classes"):
        SparseMLPClassifier(max_iter=1).fit(X, np.zeros(X.shape[0]))


def test_context_parsing():
    assert parse_context("cpu") == mx.cpu()
    assert parse_context(mx.cpu()) == mx.cpu()
    with pytest.raises(ValueError, match="'cpu', 'gpu' or 'gpu:N'"):
        parse_context("tpu")
    if mx.context.num_gpus() == 0:
        with pytest.raises(ValueError, match="MXNet sees 0 GPU"):
            parse_context("gpu:1")
        with pytest.raises(ValueError, match="MXNet sees 0 GPU"):
            SparseMLPClassifier(ctx="gpu", max_iter=1).fit(*sparse_blobs())


def test_verbose_shows_progress_with_loss_and_validation_score(capsys):
    X, y = sparse_blobs()
    SparseMLPClassifier(hidden_layer_sizes=(4,), max_iter=3, verbose=True, early_stopping=True,
                        random_state=0).fit(X, y)
    err = capsys.readouterr().err
    assert "loss=" in err and "val_score=" in err and "epoch" in err


def test_default_optimizer_is_deferred_standard_adam_and_pickle_sees_flushed_weights():
    """'sparseadam' trains with exact deferred updates; pickling flushes them first."""
    from gluon_sparse.optimizer import SparseAdam

    rng = np.random.RandomState(0)
    X = sp.random(60, 500, density=0.02, format="csr", random_state=rng, dtype=np.float64)
    row_sums = np.asarray(X.sum(axis=1)).ravel()
    y = (row_sums > np.median(row_sums)).astype(int)
    model = SparseMLPClassifier(hidden_layer_sizes=(8,), max_iter=3, batch_size=10,
                                alpha=1e-3, random_state=0).fit(X, y)
    optimizer = model._trainer.optimizer
    assert isinstance(optimizer, SparseAdam) and optimizer.deferred
    restored = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(restored.predict_proba(X), model.predict_proba(X))


def test_libsvm_paths_at_predict_time_use_the_training_index_base(tmp_path):
    # The failing case: a zero-based training file that never uses feature 0 is
    # read as one-based by 'auto'; a test file that uses feature 0 would be read
    # as zero-based, its columns silently shifted against the model's.
    from sklearn.datasets import dump_svmlight_file
    rng = np.random.RandomState(0)
    X = rng.rand(60, 6) * (rng.rand(60, 6) < 0.5)
    X[:, 0] = 0
    y = (X[:, 1] > X[:, 2]).astype(int)
    dump_svmlight_file(X, y, str(tmp_path / "train.svm"), zero_based=True)
    with_zero = X[:10, 1:].copy()
    with_zero[:, 0] += 1
    dump_svmlight_file(with_zero, y[:10], str(tmp_path / "with_0.svm"), zero_based=True)
    dump_svmlight_file(X[:10], y[:10], str(tmp_path / "without_0.svm"), zero_based=True)
    clf = SparseMLPClassifier(hidden_layer_sizes=(4,), max_iter=3, random_state=0)
    clf.fit(str(tmp_path / "train.svm"))
    assert clf.zero_based_ is False and clf.n_features_in_ == 5
    with pytest.raises(ValueError, match=r"with_0\.svm, line 1.*index 0"):
        clf.predict(str(tmp_path / "with_0.svm"))
    with pytest.raises(ValueError, match="zero_based=False"):
        clf.predict(LibSVMDataset(str(tmp_path / "with_0.svm")))  # 'auto' chose zero-based
    aligned, _ = load_svmlight_file(str(tmp_path / "without_0.svm"), zero_based=False,
                                    n_features=5)
    expected = clf.predict_proba(aligned)
    np.testing.assert_array_equal(clf.predict_proba(str(tmp_path / "without_0.svm")), expected)
    with pytest.raises(ValueError, match=r"with_0\.svm, line 1"):
        clf.partial_fit(str(tmp_path / "with_0.svm"), y[:10])  # training keeps the base too
    # The base survives save/load and pickling, and a fit on a matrix forgets it.
    clf.save(tmp_path / "model")
    for copy in (load(tmp_path / "model"), pickle.loads(pickle.dumps(clf))):
        assert copy.zero_based_ is False
        np.testing.assert_array_equal(copy.predict_proba(str(tmp_path / "without_0.svm")),
                                      expected)
    assert not hasattr(clone(clf).fit(aligned, y[:10]), "zero_based_")
    assert not hasattr(clf.fit(aligned, y[:10]), "zero_based_")


def test_mlp_initialisation_is_mlpclassifiers_glorot_uniform():
    # Weights and biases of each layer uniform in +-sqrt(6 / (fan_in + fan_out))
    # (2 for the logistic activation), as MLPClassifier._init_coef. A learning
    # rate of 1e-30 leaves the initial values in place.
    from scipy import stats
    X = sp.random(50, 4000, density=0.01, format="csr", random_state=0, dtype=np.float32)
    y = np.arange(50) % 3
    for activation, factor in (("relu", 6.0), ("logistic", 2.0)):
        clf = SparseMLPClassifier(hidden_layer_sizes=(64, 16), activation=activation,
                                  learning_rate_init=1e-30, alpha=0, max_iter=1,
                                  random_state=0).fit(X, y)
        for layer, (fan_in, fan_out) in zip(clf.module_, [(4000, 64), (64, 16), (16, 3)]):
            bound = np.sqrt(factor / (fan_in + fan_out))
            for values in (layer.weight.data().asnumpy(), layer.bias.data().asnumpy()):
                assert np.abs(values).max() <= bound
                if values.size > 1000:
                    assert stats.kstest(values.ravel(), stats.uniform(-bound, 2 * bound).cdf
                                        ).pvalue > 1e-3
        reference = MLPClassifier(hidden_layer_sizes=(64, 16), activation=activation,
                                  max_iter=1, learning_rate_init=1e-30, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reference.fit(X, y)
        assert np.abs(reference.coefs_[0]).max() <= np.sqrt(factor / 4064)
        assert clf.module_[0].weight.shape == reference.coefs_[0].shape


def test_loss_is_mlpclassifiers_mean_loss_plus_per_step_l2_term():
    # With a vanishing learning rate the weights stay put, and MLPClassifier's
    # epoch loss is exact: mean log-loss plus 0.5 * alpha * ||W||^2 / batch size
    # for each batch, weighted by the batch's share of the samples.
    X = sp.random(250, 300, density=0.05, format="csr", random_state=1, dtype=np.float32)
    y = np.arange(250) % 2
    alpha, batch = 0.5, 100  # three batches: 100, 100, 50
    clf = SparseMLPClassifier(hidden_layer_sizes=(8,), alpha=alpha, batch_size=batch,
                              learning_rate_init=1e-30, max_iter=1, random_state=0).fit(X, y)
    logit = numpy_forward(clf, X.toarray().astype(np.float64))[:, 0]
    data_loss = np.mean(np.logaddexp(0, logit) - y * logit)
    squares = sum(float((layer.weight.data().asnumpy().astype(np.float64) ** 2).sum())
                  for layer in clf.module_)
    expected = data_loss + 0.5 * alpha * squares * 3 / 250
    assert clf.loss_ == pytest.approx(expected, rel=1e-5)
    assert clf.loss_curve_ == [clf.loss_]
    # The same formula reproduces MLPClassifier's own loss_ from its weights.
    reference = MLPClassifier(hidden_layer_sizes=(8,), alpha=alpha, batch_size=batch,
                              learning_rate_init=1e-30, max_iter=1, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference.fit(X.astype(np.float64), y)
    hidden = np.maximum(X @ reference.coefs_[0] + reference.intercepts_[0], 0)
    logit = (hidden @ reference.coefs_[1] + reference.intercepts_[1])[:, 0]
    squares = sum(float((coef ** 2).sum()) for coef in reference.coefs_)
    assert reference.loss_ == pytest.approx(
        np.mean(np.logaddexp(0, logit) - y * logit) + 0.5 * alpha * squares * 3 / 250, rel=1e-9)


def test_early_stopping_restores_best_weights_for_good():
    # The restored weights must not be moved later by deferred Adam's replay of
    # the steps their rows skipped after the best epoch (alpha=0: no epoch-end
    # flush, so rows of rare features are behind when the fit ends).
    from gluon_sparse.optimizer import flush
    X = sp.random(400, 3000, density=0.004, format="csr", random_state=0, dtype=np.float32)
    y = (X @ np.random.RandomState(1).randn(3000) > 0).astype(int)
    clf = SparseMLPClassifier(hidden_layer_sizes=(8,), alpha=0, max_iter=30, early_stopping=True,
                              n_iter_no_change=2, batch_size=20, learning_rate_init=0.2,
                              random_state=0).fit(X, y)
    assert clf.validation_scores_[-1] < clf.best_validation_score_  # an earlier epoch was best
    restored = clf.module_[0].weight.data().asnumpy()
    flush(clf._trainer)
    np.testing.assert_array_equal(clf.module_[0].weight.data().asnumpy(), restored)


def test_stopping_at_max_iter_warns_like_mlpclassifier():
    """Unconverged fits warn with sklearn's ConvergenceWarning; converged ones do not."""
    from sklearn.exceptions import ConvergenceWarning
    X, y = sparse_blobs()
    with pytest.warns(ConvergenceWarning, match="Maximum iterations \\(2\\)"):
        SparseMLPClassifier(hidden_layer_sizes=(8,), max_iter=2, tol=0, random_state=0).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        # A huge tol: no improvement counts, so training stops early, converged.
        model = SparseMLPClassifier(hidden_layer_sizes=(8,), max_iter=50, tol=1e9,
                                    n_iter_no_change=2, random_state=0).fit(X, y)
    assert model.n_iter_ < 50


def test_first_predictions_of_an_unpickled_estimator_from_many_threads():
    # The network is rebuilt on first use after unpickling; threads that all
    # predict first at once (released together by the barrier) must neither
    # fail nor get different numbers.
    import threading
    X, y = sparse_blobs()
    clf = SparseMLPClassifier(hidden_layer_sizes=(8,), max_iter=3, random_state=0).fit(X, y)
    expected = clf.predict_proba(X)
    for _ in range(3):
        copy = pickle.loads(pickle.dumps(clf))
        barrier = threading.Barrier(6)
        results, errors = [None] * 6, []

        def predict(i):
            barrier.wait()
            try:
                results[i] = copy.predict_proba(X)
            except Exception as err:  # noqa: BLE001 -- reported below
                errors.append(repr(err))

        threads = [threading.Thread(target=predict, args=(i,)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        for result in results:
            np.testing.assert_array_equal(result, expected)


@pytest.mark.parametrize("damage, cause", [(lambda data: data[:len(data) // 2], "truncated"),
                                           (lambda data: data[:5], "truncated"),
                                           (lambda data: b"", "truncated"),
                                           (lambda data: b"#" * len(data), "not an MXNet")],
                         ids=["half", "5 bytes", "empty", "garbage"])
def test_damaged_network_params_is_one_line_naming_file_and_cause(tmp_path, damage, cause):
    X, y = sparse_blobs()
    SparseMLPClassifier(hidden_layer_sizes=(4,), max_iter=1).fit(X, y).save(tmp_path / "m")
    params = tmp_path / "m" / (tmp_path / "m" / "CURRENT").read_text().strip() / "network.params"
    params.write_bytes(damage(params.read_bytes()))
    with pytest.raises(ValueError) as info:
        load(tmp_path / "m")
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    assert str(params) in message and cause in message


@pytest.mark.parametrize("make", [
    lambda: SparseMLPClassifier(hidden_layer_sizes=(16, 4), alpha=0, max_iter=3, random_state=0),
    lambda: SparseNetRegressor(module=FullyConnectedSparse, alpha=0, max_iter=3, random_state=0),
], ids=["mlp", "net"])
def test_saved_model_stores_only_trained_rows_and_loads_bit_for_bit(tmp_path, make):
    # 40,000 features of which the samples use ~400: the rows of the others
    # never move (alpha=0) and are left to the initialiser's seed.
    rng = np.random.RandomState(0)
    used = rng.choice(40000, 400, replace=False)
    X = sp.csr_matrix((rng.rand(300 * 4), (np.repeat(np.arange(300), 4), rng.choice(used, 1200))),
                      shape=(300, 40000), dtype=np.float32)
    y = (np.asarray(X.sum(axis=1)).ravel() > 1).astype(int)
    model = make().fit(X, y)
    model.save(tmp_path / "m")
    version = tmp_path / "m" / (tmp_path / "m" / "CURRENT").read_text().strip()
    first = next(iter(model.module_.collect_params().values())).data().asnumpy()  # (40000, units)
    assert first.shape[0] == 40000
    assert (version / "network.params").stat().st_size < first.nbytes / 20
    stored = mx.nd.load(str(version / "network.params"))  # MXNet's own format still
    sparse = [array for array in stored.values() if array.stype == "row_sparse"]
    assert len(sparse) == 1 and set(sparse[0].indices.asnumpy()) <= set(used)
    loaded = load(tmp_path / "m")
    for (name, param), (_, restored) in zip(model.module_._collect_params_with_prefix().items(),
                                            loaded.module_._collect_params_with_prefix().items()):
        np.testing.assert_array_equal(restored.data().asnumpy(), param.data().asnumpy(), name)
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    # The initialiser's values are checked: other values are an error, not another model.
    meta_path = version / "estimator.json"
    meta = json.loads(meta_path.read_text())
    name = next(iter(meta["rows_left_to_initialiser"]))
    meta["rows_left_to_initialiser"][name]["crc32"] += 1
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="cannot be regenerated"):
        load(tmp_path / "m")


def test_weight_decay_moves_every_row_and_the_model_is_stored_whole(tmp_path):
    X, y = sparse_blobs(n_features=20000)
    model = SparseMLPClassifier(hidden_layer_sizes=(8,), alpha=1e-2, max_iter=2,
                                random_state=0).fit(X, y)
    model.save(tmp_path / "m")
    version = tmp_path / "m" / (tmp_path / "m" / "CURRENT").read_text().strip()
    assert all(array.stype == "default"
               for array in mx.nd.load(str(version / "network.params")).values())
    np.testing.assert_array_equal(load(tmp_path / "m").predict_proba(X), model.predict_proba(X))


def test_models_wider_than_a_1024_row_block_predict_in_smaller_blocks():
    """A 1,024-row prediction block of 2^24 features is more elements than MXNet takes
    (2^31 - 1): a SparseNetClassifier trained there could not predict. Blocks are now as
    tall as the width allows; a training batch too wide is refused before any step."""
    width = 2 ** 24
    rng = np.random.RandomState(0)
    rows = 300
    X = sp.csr_matrix((np.ones(rows * 3, np.float32),
                       (np.repeat(np.arange(rows), 3), rng.randint(0, width, rows * 3))),
                      shape=(rows, width))
    y = np.arange(rows) % 2
    model = SparseNetClassifier(batch_size=100, max_iter=1, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X, y)
    scores = model.decision_function(X)
    params = model.module_.collect_params()
    weight = params[[n for n in params if n.endswith("weight")][0]].data().asnumpy()
    bias = params[[n for n in params if n.endswith("bias")][0]].data().asnumpy()
    expected = X @ weight.reshape(width, -1)[:, 0].astype(np.float64) + bias[0]
    np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"batch_size=200 with 16777216 features: .* use "
                                         r"batch_size <= 127"):
        SparseNetClassifier(batch_size=200, max_iter=1).fit(X, y)


def test_a_model_fitted_on_a_matrix_says_when_a_files_index_base_is_a_guess(tmp_path):
    """Fitted on a matrix, the model has no base to read a file with: 'auto' reads a
    zero-based file without feature 0 one column off. A warning says so; a file whose
    base is certain (feature 0, or an index equal to the width) reads without one."""
    import warnings
    from sklearn.datasets import dump_svmlight_file
    rng = np.random.RandomState(0)
    X = rng.rand(60, 6) * (rng.rand(60, 6) < 0.6)
    y = (X[:, 1] > X[:, 2]).astype(int)
    clf = SparseMLPClassifier(hidden_layer_sizes=(4,), max_iter=3, random_state=0).fit(X, y)
    expected = clf.predict_proba(X[:10])
    no_zero = X[:10].copy()
    no_zero[:, 0] = 0
    no_zero[:, 5] = 0  # and no last column: nothing in the file tells the base
    dump_svmlight_file(no_zero, y[:10], str(tmp_path / "guess.svm"), zero_based=True)
    with pytest.warns(UserWarning, match=r"guess\.svm: SparseMLPClassifier was fitted on a "
                                         r"matrix, so this file's index base is unknown"):
        clf.predict(str(tmp_path / "guess.svm"))
    full = X[:10].copy()
    full[:, 0] += 1  # feature 0 present: zero-based for certain
    full[:, 5] += 1  # last column present: one-based for certain
    dump_svmlight_file(full, y[:10], str(tmp_path / "zero.svm"), zero_based=True)
    dump_svmlight_file(full, y[:10], str(tmp_path / "one.svm"), zero_based=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in ("zero.svm", "one.svm"):
            np.testing.assert_array_equal(clf.predict_proba(str(tmp_path / name)),
                                          clf.predict_proba(full))
    np.testing.assert_array_equal(clf.predict_proba(X[:10]), expected)


@pytest.mark.parametrize("optimizer, alpha, message", [
    ("groupadagrad", 0.0, "2-D weights only"),
    ("test", 0.0, "unit tests"),
    ("adagrad", 1e-4, "use optimizer='sparseadagrad'"),
    ("nag", 1e-4, "use optimizer='sparsenag'"),
    ("lbsgd", 1e-4, "use optimizer='sparsesgd'"),
])
def test_optimizers_that_cannot_train_these_networks_are_refused_with_the_reason(
        optimizer, alpha, message):
    """They failed inside the first step: an empty AssertionError (GroupAdaGrad), a
    storage-type MXNetError (AdaGrad with weight decay on a row_sparse gradient)."""
    from gluon_sparse.sklearn import SparseMultiLabelClassifier
    X, y = sparse_blobs()
    for model in (SparseMLPClassifier(hidden_layer_sizes=(4,), max_iter=1, optimizer=optimizer,
                                      alpha=alpha),
                  SparseMultiLabelClassifier(hidden_layer_sizes=(4,), max_iter=1,
                                             optimizer=optimizer, alpha=alpha)):
        with pytest.raises(ValueError, match="optimizer=.%s.*%s" % (optimizer, message)):
            model.fit(X, [[label] for label in y] if isinstance(
                model, SparseMultiLabelClassifier) else y)


@pytest.mark.parametrize("mxnet_name, ours", [("adam", "sparseadam"), ("sgd", "sparsesgd")])
def test_mxnets_adam_and_sgd_take_the_standard_update_as_mlpclassifier(mxnet_name, ours):
    """MXNet's lazy update (its default) left the rows of features absent from a batch
    without their L2 penalty: the estimators ask for the standard one, which
    gluon-sparse's optimizers give bitwise."""
    X, y = sparse_blobs()
    X = X.tolil()
    X[:, :50] = 0  # features absent from every batch: only the penalty moves their rows
    X = X.tocsr()
    X.eliminate_zeros()
    params = dict(hidden_layer_sizes=(4,), max_iter=2, alpha=0.5, batch_size=50,
                  shuffle=False, random_state=0)
    theirs = SparseMLPClassifier(optimizer=mxnet_name, **params).fit(X, y)
    exact = SparseMLPClassifier(optimizer=ours, **params).fit(X, y)
    first = [clf.module_[0].weight.data().asnumpy() for clf in (theirs, exact)]
    initial = SparseMLPClassifier(optimizer=ours, learning_rate_init=1e-30,
                                  **params).fit(X, y).module_[0].weight.data().asnumpy()
    assert not np.allclose(first[0][:50], initial[:50])  # the absent rows decayed
    np.testing.assert_allclose(first[0], first[1], rtol=1e-5, atol=1e-7)


def test_the_reported_penalty_is_over_the_trained_weights_only():
    """A BatchNorm's running mean and var have no gradient: alpha does not move them, and
    loss_ charged their squares."""
    from mxnet import gluon
    X, y = sparse_blobs()

    def module(n_outputs):
        net = gluon.nn.HybridSequential()
        net.add(FullyConnectedSparse(6), gluon.nn.BatchNorm(), gluon.nn.Dense(n_outputs))
        return net

    params = dict(module=module, max_iter=1, alpha=2.0, batch_size=len(y), random_state=0)
    still = SparseNetClassifier(learning_rate_init=1e-30, **params).fit(X, y)
    trained = [p.data().asnumpy() for p in still.module_.collect_params().values()
               if not p.name.endswith(("bias", "beta", "running_mean", "running_var"))]
    bn = still.module_[1]
    penalty = 0.5 * 2.0 * sum(float((w.astype(np.float64) ** 2).sum()) for w in trained
                              + [bn.beta.data().asnumpy()])
    data_loss = float(still.loss_) - penalty / len(y)
    fresh = SparseNetClassifier(learning_rate_init=1e-30, **dict(params, alpha=0.0)).fit(X, y)
    assert data_loss == pytest.approx(float(fresh.loss_), rel=1e-5)


def test_adagrad_without_weight_decay_trains():
    X, y = sparse_blobs()
    model = SparseMLPClassifier(hidden_layer_sizes=(4,), max_iter=3, optimizer="adagrad",
                                alpha=0.0, random_state=0).fit(X, y)
    assert np.isfinite(model.predict_proba(X)).all()


def test_sampled_output_class_counts_weigh_the_rows():
    # A row of weight 0 counted in class_counts_, what the sampler draws by.
    rng = np.random.default_rng(0)
    X = sp.random(60, 20, density=0.3, format="csr", random_state=0, dtype=np.float32)
    y = rng.integers(0, 4, 60)
    weights = np.where(y == 3, 0.0, 2.0)
    model = SparseMLPClassifier(hidden_layer_sizes=(4,), output="sampled", max_iter=1,
                                random_state=0).fit(X, y, sample_weight=weights)
    np.testing.assert_allclose(model.class_counts_, [2.0 * np.sum(y == c) for c in range(3)] + [0])


def test_a_weight_decay_below_float32s_normal_range_is_none():
    # alpha / batch weight = 6.7e-40: MXNet's operators refused the wd ("Out of range").
    X = sp.random(60, 20, density=0.3, format="csr", random_state=0, dtype=np.float32)
    y = np.arange(60) % 2
    fits = [SparseMLPClassifier(hidden_layer_sizes=(4,), alpha=alpha, max_iter=2,
                                random_state=0).fit(X, y) for alpha in (1e-37, 0.0)]
    np.testing.assert_array_equal(fits[0].predict_proba(X), fits[1].predict_proba(X))
    with pytest.raises(ValueError, match="learning_rate_init=1e-39 is too small"):
        SparseMLPClassifier(learning_rate_init=1e-39, max_iter=1).fit(X, y)


def test_a_damaged_byte_of_network_params_is_refused_not_loaded_as_another_model(tmp_path):
    # MXNet's format has no checksum: a flipped bit of the array data loaded as another
    # model, and one in the array count made MXNet allocate what the bytes after it said.
    X, y = sparse_blobs()
    SparseMLPClassifier(hidden_layer_sizes=(4,), max_iter=1).fit(X, y).save(tmp_path / "m")
    version = tmp_path / "m" / (tmp_path / "m" / "CURRENT").read_text().strip()
    params = version / "network.params"
    data = params.read_bytes()
    for position in (16, len(data) // 2, len(data) - 3):  # the array count, data, a name
        damaged = bytearray(data)
        damaged[position] ^= 0x10
        params.write_bytes(bytes(damaged))
        with pytest.raises(ValueError, match=r"network.params is damaged: its CRC-32 is [0-9a-f]{8}, "
                                             r"and .*estimator.json recorded [0-9a-f]{8}"):
            load(tmp_path / "m")
    # A model saved before the size and CRC were recorded loads as before.
    params.write_bytes(data)
    meta = json.loads((version / "estimator.json").read_text())
    del meta["network_params_crc32"], meta["network_params_bytes"]
    (version / "estimator.json").write_text(json.dumps(meta))
    assert load(tmp_path / "m").predict(X).shape == y.shape


def _drop(key):
    def edit(meta):
        section, _, name = key.partition(".")
        if name:
            del meta[section][name]
        else:
            del meta[section]
    return edit


def _set(key, value):
    def edit(meta):
        section, _, name = key.partition(".")
        if name:
            meta[section][name] = value
        else:
            meta[section] = value
    return edit


@pytest.mark.parametrize("edit, cause", [
    (_set("params.activation", "Relu"), "'activation' parameter"),
    (_drop("fitted.n_features_in_"), "n_features_in_"),
    (_set("format_version", None), "format_version is None"),
    (_drop("params"), "'params' is missing"),
    (_set("fitted", {}), "n_outputs_"),
    (_set("params", [1, 2]), "params are a list"),
    (_set("network_params_bytes", "752"), "TypeError"),
], ids=["activation", "no n_features_in_", "format_version", "no params", "no fitted", "params",
        "size as text"])
def test_a_damaged_estimator_json_is_one_error_naming_it(tmp_path, edit, cause):
    # KeyError, AttributeError or TypeError, naming neither the file nor the cause (the
    # CLI printed a traceback), some of them only when predicting.
    X, y = sparse_blobs()
    SparseMLPClassifier(hidden_layer_sizes=(4,), max_iter=1).fit(X, y).save(tmp_path / "m")
    meta_path = tmp_path / "m" / (tmp_path / "m" / "CURRENT").read_text().strip() / "estimator.json"
    meta = json.loads(meta_path.read_text())
    edit(meta)
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError) as info:
        load(tmp_path / "m")
    assert str(info.value).startswith(str(meta_path)) and cause in str(info.value), info.value


def test_negative_and_tiny_sample_weights_are_handled_by_name():
    # A class of net negative weight got a negative count, which the sampler refused
    # ("label counts must be finite and >= 0"); a batch weight sum below 1 / FLT_MAX
    # made rescale_grad infinite, an opaque MXNetError.
    rng = np.random.default_rng(0)
    X = sp.random(60, 40, density=0.2, format="csr", random_state=0, dtype=np.float32)
    y = rng.integers(0, 5, 60)
    y[0] = 5
    weights = np.ones(60)
    weights[0] = -3.0
    model = SparseMLPClassifier(hidden_layer_sizes=(4,), max_iter=2, output="sampled",
                                random_state=0).fit(X, y, sample_weight=weights)
    assert model.class_counts_[5] == 0
    with pytest.raises(ValueError, match="sample weights of a batch sum to .*scale sample_weight"):
        SparseMLPClassifier(hidden_layer_sizes=(4,), max_iter=1, batch_size=8).fit(
            X, y, sample_weight=np.full(60, 1e-42))
