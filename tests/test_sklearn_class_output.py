"""SparseMLPClassifier's output choice: the sampled softmax for many classes (issue 19 item 4)."""
import pickle
import warnings

import mxnet as mx
import numpy as np
import pytest
import scipy.sparse as sp

from gluon_sparse.nn import SampledOutput
from gluon_sparse.sklearn import SparseMLPClassifier, load
from gluon_sparse.sklearn import _class_output


@pytest.fixture(autouse=True)
def _quiet_convergence_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)
        yield


def planted_classes(rows, num_features, num_classes, seed=0):
    """Each class owns 8 features; a row shows 5 of its class's and 3 random ones."""
    rng = np.random.default_rng(seed)
    owners = rng.integers(0, num_features, size=(num_classes, 8))
    y = rng.integers(0, num_classes, size=rows)
    cols = np.concatenate([rng.permuted(owners[y], axis=1)[:, :5],
                           rng.integers(0, num_features, size=(rows, 3))], axis=1)
    X = sp.csr_matrix((np.ones(cols.size, np.float32), cols.ravel(),
                       np.arange(0, cols.size + 1, cols.shape[1])), shape=(rows, num_features))
    X.sum_duplicates()
    return X, y


def numpy_scores(clf, X):
    """Scores of every class recomputed with NumPy from the sampled network's parameters."""
    params = {name: p.data().asnumpy() for name, p in
              clf.module_._collect_params_with_prefix().items()}
    h = np.maximum(X.toarray() @ params["hidden.0.weight"] + params["hidden.0.bias"], 0)
    return h @ params["output.weight"].T + params["output.bias"].ravel()


def test_sampled_output_accuracy_within_two_points_of_dense_on_planted_classes():
    X, y = planted_classes(8000, 20000, 1000)
    X_train, X_test, y_train, y_test = X[:6000], X[6000:], y[:6000], y[6000:]
    scores = {}
    for output in ("dense", "sampled"):
        clf = SparseMLPClassifier(hidden_layer_sizes=(64,), output=output, num_sampled=64,
                                  batch_size=100, learning_rate_init=0.01, max_iter=5,
                                  random_state=0).fit(X_train, y_train)
        assert clf.sampled_output_ == (output == "sampled")
        scores[output] = clf.score(X_test, y_test)
    chance = 1 / 1000
    assert scores["dense"] > 0.8 and scores["sampled"] > 0.8, (scores, chance)
    assert scores["sampled"] >= scores["dense"] - 0.02, scores


def test_sampled_predictions_are_the_exact_full_softmax_of_numpy():
    X, y = planted_classes(600, 3000, 40, seed=1)
    labels = np.array(["c%02d" % c for c in range(40)])[y]
    clf = SparseMLPClassifier(hidden_layer_sizes=(16,), output="sampled", num_sampled=8,
                              max_iter=3, random_state=0).fit(X, labels)
    assert isinstance(clf.module_.output, SampledOutput) and clf.n_outputs_ == 40
    scores = numpy_scores(clf, X)
    np.testing.assert_allclose(clf.decision_function(X), scores, rtol=1e-4, atol=1e-5)
    expected = np.exp(scores - scores.max(axis=1, keepdims=True))
    expected /= expected.sum(axis=1, keepdims=True)
    proba = clf.predict_proba(X)
    assert proba.shape == (600, 40) and proba.dtype == np.float64
    np.testing.assert_allclose(proba, expected, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(proba.sum(axis=1), 1, rtol=1e-12)
    np.testing.assert_array_equal(clf.predict(X), clf.classes_[scores.argmax(axis=1)])
    assert clf.score(X, labels) == np.mean(clf.predict(X) == labels)


def test_predict_never_scores_all_classes_and_predict_proba_goes_by_blocks(monkeypatch):
    X, y = planted_classes(300, 2000, 30, seed=2)
    clf = SparseMLPClassifier(hidden_layer_sizes=(8,), output="sampled", num_sampled=8,
                              max_iter=2, random_state=0).fit(X, y)
    expected_proba, expected = clf.predict_proba(X), clf.predict(X)

    def refuse(self, h):
        raise AssertionError("predict computed the full score matrix")
    with monkeypatch.context() as patch:
        patch.setattr(SampledOutput, "scores", refuse)
        np.testing.assert_array_equal(clf.predict(X), expected)
    seen = []
    original = SampledOutput.scores

    def record(self, h):
        seen.append(h.shape[0])
        return original(self, h)
    monkeypatch.setattr(SampledOutput, "scores", record)
    monkeypatch.setattr(_class_output, "_BLOCK_SCORES", 30 * 64)  # 64 rows a block
    np.testing.assert_allclose(clf.predict_proba(X), expected_proba, rtol=1e-6, atol=1e-9)
    assert seen == [64] * 5  # 300 rows: four blocks and a padded fifth


def test_binary_sampled_decision_function_is_the_log_odds():
    X, y = planted_classes(300, 2000, 2, seed=3)
    clf = SparseMLPClassifier(hidden_layer_sizes=(8,), output="sampled", max_iter=3,
                              random_state=0).fit(X, y)
    scores = numpy_scores(clf, X)
    decision = clf.decision_function(X)
    assert decision.shape == (300,)
    np.testing.assert_allclose(decision, scores[:, 1] - scores[:, 0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(clf.predict_proba(X)[:, 1], 1 / (1 + np.exp(-decision)),
                               rtol=1e-5)
    np.testing.assert_array_equal(clf.predict(X), clf.classes_[(decision > 0).astype(int)])


def test_auto_output_switches_at_the_class_threshold(monkeypatch):
    monkeypatch.setattr(_class_output, "SAMPLED_OUTPUT_MIN_CLASSES", 20)
    X, y = planted_classes(300, 2000, 20, seed=4)
    few = y % 19  # 19 classes
    assert not SparseMLPClassifier(max_iter=1, hidden_layer_sizes=(4,)).fit(X, few).sampled_output_
    auto = SparseMLPClassifier(max_iter=1, hidden_layer_sizes=(4,)).fit(X, y)
    assert auto.sampled_output_ and isinstance(auto.module_.output, SampledOutput)
    assert auto.class_counts_ == np.bincount(y, minlength=20).tolist()
    dense = SparseMLPClassifier(output="dense", max_iter=1, hidden_layer_sizes=(4,)).fit(X, y)
    assert not dense.sampled_output_ and not hasattr(dense, "class_counts_")
    # No hidden layer: the sampled output has no dense input to take.
    assert not SparseMLPClassifier(max_iter=1, hidden_layer_sizes=()).fit(X, y).sampled_output_
    with pytest.raises(ValueError, match="output='sampled' needs a hidden layer"):
        SparseMLPClassifier(output="sampled", hidden_layer_sizes=()).fit(X, y)
    with pytest.raises(ValueError, match="output"):
        SparseMLPClassifier(output="huge").fit(X, y)


def test_sampled_initial_weights_are_the_dense_outputs():
    # Same seed, same Glorot draws: only the training of the output differs.
    X, y = planted_classes(200, 1000, 12, seed=5)
    make = dict(hidden_layer_sizes=(8,), random_state=0)
    dense = SparseMLPClassifier(output="dense", **make).fit(X, y)
    sampled = SparseMLPClassifier(output="sampled", **make).fit(X, y)
    initial = {name: rows for name, _, rows in dense._initial_param_rows()}
    renamed = {"hidden.0.weight": "0.weight", "hidden.0.bias": "0.bias",
               "output.weight": "1.weight", "output.bias": "1.bias"}
    for name, _, rows in sampled._initial_param_rows():
        np.testing.assert_array_equal(rows.reshape(initial[renamed[name]].shape),
                                      initial[renamed[name]], name)


def test_partial_fit_warm_start_pickle_and_save_load(tmp_path):
    X, y = planted_classes(400, 30000, 50, seed=6)
    clf = SparseMLPClassifier(hidden_layer_sizes=(8,), output="sampled", num_sampled=8,
                              alpha=0, random_state=0)
    first = y < 40  # classes 40..49 are only announced on the first call
    clf.partial_fit(X[first], y[first], classes=np.arange(50))
    assert clf.sampled_output_ and clf.n_outputs_ == 50 and clf.class_counts_[45] == 0
    clf.partial_fit(X, y)
    assert clf.n_iter_ == 1 and len(clf.loss_curve_) == 2
    clf.set_params(warm_start=True, max_iter=2, output="dense").fit(X, y)
    assert clf.n_iter_ == 2 and len(clf.loss_curve_) == 4 and clf.sampled_output_  # the network is kept
    expected = clf.predict_proba(X)
    copy = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(copy.predict_proba(X), expected)
    clf.save(tmp_path / "m")
    loaded = load(tmp_path / "m")
    assert loaded.sampled_output_ and loaded.class_counts_ == clf.class_counts_
    np.testing.assert_array_equal(loaded.predict_proba(X), expected)
    np.testing.assert_array_equal(loaded.predict(X), clf.predict(X))
    for (name, param), (_, restored) in zip(clf.module_._collect_params_with_prefix().items(),
                                            loaded.module_._collect_params_with_prefix().items()):
        np.testing.assert_array_equal(restored.data().asnumpy(), param.data().asnumpy(), name)
    # The first layer's untouched rows were left to the initialiser (compact file).
    version = tmp_path / "m" / (tmp_path / "m" / "CURRENT").read_text().strip()
    stored = mx.nd.load(str(version / "network.params"))
    assert stored["hidden.0.weight"].stype == "row_sparse"
    loaded.partial_fit(X, y)  # and trains on
    assert loaded.n_iter_ == 1 and len(loaded.loss_curve_) == 5
    # A new fit decides again.
    assert not clf.set_params(warm_start=False, max_iter=1).fit(X, y).sampled_output_
