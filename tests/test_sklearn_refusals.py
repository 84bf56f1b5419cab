"""Fits and scores the estimators refuse: the estimator is left as it was, and the error
names the problem (scikit-learn's MLPClassifier is the reference where it has the case)."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import dump_svmlight_file, make_blobs
from sklearn.neural_network import MLPClassifier

from gluon_sparse.sklearn import SparseMLPClassifier, SparseMultiLabelClassifier


@pytest.fixture(autouse=True)
def _quiet_convergence_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)
        yield


def blobs(n_features=30, classes=("a", "b", "c"), seed=0):
    X, y = make_blobs(90, n_features=n_features, centers=len(classes), random_state=seed)
    return sp.csr_matrix(np.abs(X).astype(np.float32)), np.asarray(classes)[y]


def fitted_classifier():
    X, y = blobs()
    return SparseMLPClassifier(hidden_layer_sizes=(8,), max_iter=3, random_state=0).fit(X, y), X


def fitted_state(clf, X):
    return (clf.classes_.tolist(), clf.n_features_in_, clf.predict(X).tolist(),
            clf.predict_proba(X).tolist())


@pytest.mark.parametrize("refit", [
    # A mistyped optimizer is found after the labels were read.
    lambda clf, X, y: clf.set_params(optimizer="no-such-optimizer").fit(X, np.char.upper(y)),
    # One class in y is found after the width was read.
    lambda clf, X, y: clf.fit(sp.hstack([X, X]).tocsr(), np.full(X.shape[0], "x")),
    lambda clf, X, y: clf.set_params(optimizer_params={"no_such_option": 1}).fit(X, y),
])
def test_a_refused_fit_leaves_the_fitted_estimator_as_it_was(refit):
    clf, X = fitted_classifier()
    before = fitted_state(clf, X)
    params = clf.get_params()
    with pytest.raises(ValueError):
        refit(clf, X, blobs()[1])
    clf.set_params(**params)
    assert fitted_state(clf, X) == before
    # and it still trains on, from where it was
    clf.set_params(warm_start=True, max_iter=1).fit(X, blobs()[1])


def test_a_refused_multilabel_fit_leaves_the_estimator_as_it_was():
    X, _ = blobs()
    Y = [[i % 5, (i + 1) % 5] for i in range(X.shape[0])]
    clf = SparseMultiLabelClassifier(hidden_layer_sizes=(8,), max_iter=2, random_state=0,
                                     num_sampled=4).fit(X, Y)
    labels, scores = clf.predict_top_k(X, k=2)
    wide = sp.hstack([X, X]).tocsr()
    with pytest.raises(ValueError, match="no positive label"):
        clf.fit(wide, sp.csr_matrix((X.shape[0], 5)))
    assert clf.n_features_in_ == X.shape[1]
    assert clf.classes_.tolist() == list(range(5))
    again = clf.predict_top_k(X, k=2)
    np.testing.assert_array_equal(again[0], labels)
    np.testing.assert_array_equal(again[1], scores)


def test_a_warm_start_needs_the_classes_of_the_first_fit_as_mlpclassifier():
    X, y = blobs(classes=(0, 1, 2))
    two = y < 2
    dense = X.toarray()
    reference = MLPClassifier(hidden_layer_sizes=(4,), max_iter=2, warm_start=True).fit(dense, y)
    with pytest.raises(ValueError, match="warm_start can only be used") as expected:
        reference.fit(dense[two], y[two])
    clf = SparseMLPClassifier(hidden_layer_sizes=(4,), max_iter=2, warm_start=True).fit(X, y)
    with pytest.raises(ValueError, match="warm_start can only be used"):
        clf.fit(X[two], y[two])
    assert "warm_start" in str(expected.value)
    # partial_fit may see a batch of some classes
    clf.partial_fit(X[two], y[two])
    assert clf.classes_.tolist() == [0, 1, 2]


def test_scoring_a_libsvm_file_whose_labels_are_not_the_models_classes(tmp_path):
    X, y = blobs(classes=("neg", "pos"))
    clf = SparseMLPClassifier(hidden_layer_sizes=(8,), max_iter=3, random_state=0).fit(X, y)
    path = str(tmp_path / "test.svm")
    dump_svmlight_file(X, (y == "pos").astype(int), path)
    with pytest.raises(ValueError, match=r"none of them is a class"):
        clf.score(path)
    # A file with some labels of the model's: scored, with a warning for the others.
    numeric = SparseMLPClassifier(hidden_layer_sizes=(8,), max_iter=3, random_state=0).fit(
        X, (y == "pos").astype(int))
    dump_svmlight_file(X, np.where(y == "pos", 1, -1), path)
    with pytest.warns(UserWarning, match="not among the model's classes"):
        score = numeric.score(path)
    expected = np.mean(numeric.predict(X) == np.where(y == "pos", 1, -1))
    assert score == pytest.approx(expected)


def test_text_given_without_a_vectorizer_is_an_error_that_says_so():
    clf, _ = fitted_classifier()
    with pytest.raises(FileNotFoundError, match="vectorizer") as error:
        clf.predict(["the cat sat", "on the mat"])
    assert error.value.filename == "the cat sat"
    with pytest.raises(FileNotFoundError, match="vectorizer"):
        SparseMultiLabelClassifier().fit(["the cat sat"], [[1]])


def test_a_classifier_given_an_indicator_points_to_the_multilabel_estimator():
    X, _ = blobs()
    indicator = np.eye(3, dtype=int)[np.arange(X.shape[0]) % 3][:, :2]
    for y in (indicator, sp.csr_matrix(indicator)):
        with pytest.raises(ValueError, match="SparseMultiLabelClassifier"):
            SparseMLPClassifier(max_iter=1).fit(X, y)


def test_label_lists_of_two_ids_are_label_lists_not_an_indicator():
    X, _ = blobs()
    Y = [[3, 7] if i % 2 else [7, 3] for i in range(X.shape[0])]
    clf = SparseMultiLabelClassifier(hidden_layer_sizes=(8,), max_iter=1, random_state=0,
                                     num_sampled=2).fit(X, Y)
    assert clf.classes_.tolist() == [3, 7]
    indicator = [[0, 1] if i % 2 else [1, 0] for i in range(X.shape[0])]
    assert SparseMultiLabelClassifier(hidden_layer_sizes=(8,), max_iter=1, random_state=0,
                                      num_sampled=2).fit(X, indicator).classes_.tolist() == [0, 1]
    with pytest.raises(ValueError, match="list of label lists"):
        SparseMultiLabelClassifier(max_iter=1).fit(X, np.array([["a", "b"]] * X.shape[0]))
