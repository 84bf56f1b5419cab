"""The estimators inside scikit-learn's tooling: Pipeline, GridSearchCV (processes), cross_val_score, clone."""
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_val_score
from sklearn.pipeline import make_pipeline

from gluon_sparse.sklearn import SparseMLPClassifier, SparseNetClassifier

POSITIVE = ["great", "love", "excellent", "happy", "wonderful", "fantastic", "good", "nice"]
NEGATIVE = ["awful", "hate", "terrible", "sad", "horrible", "boring", "bad", "poor"]
FILLER = ["the", "movie", "car", "food", "service", "was", "really", "today", "very", "it"]


def make_corpus(n_docs=240, seed=0):
    """Short documents whose sentiment words decide the label (string labels)."""
    rng = np.random.RandomState(seed)
    docs, labels = [], []
    for i in range(n_docs):
        positive = i % 2 == 0
        words = list(rng.choice(FILLER, 6))
        words += list(rng.choice(POSITIVE if positive else NEGATIVE, 2))
        rng.shuffle(words)
        docs.append(" ".join(words))
        labels.append("pos" if positive else "neg")
    return np.array(docs), np.array(labels)


@pytest.fixture(autouse=True)
def _quiet_convergence_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)
        yield


def test_tfidf_pipeline_matches_logistic_regression():
    docs, labels = make_corpus()
    ours = make_pipeline(TfidfVectorizer(), SparseMLPClassifier(hidden_layer_sizes=(16,),
                                                                learning_rate_init=0.01,
                                                                max_iter=30, random_state=0))
    reference = make_pipeline(TfidfVectorizer(), LogisticRegression())
    ours.fit(docs[:180], labels[:180])
    reference.fit(docs[:180], labels[:180])
    ours_score = ours.score(docs[180:], labels[180:])
    assert ours_score >= reference.score(docs[180:], labels[180:]) - 0.05
    assert ours_score > 0.9
    assert set(ours.predict(["love it, wonderful"])) <= {"pos", "neg"}


def test_cross_val_score_and_clone():
    docs, labels = make_corpus()
    pipeline = make_pipeline(TfidfVectorizer(), SparseNetClassifier(max_iter=30,
                                                                     learning_rate_init=0.05,
                                                                     random_state=0))
    scores = cross_val_score(pipeline, docs, labels, cv=StratifiedKFold(3))
    assert scores.shape == (3,) and scores.min() > 0.85
    fitted = pipeline.fit(docs, labels)
    copy = clone(fitted)
    assert not hasattr(copy[-1], "classes_")
    assert copy.get_params()["sparsenetclassifier__max_iter"] == 30


@pytest.mark.slow
def test_grid_search_in_two_processes():
    # n_jobs=2 runs the fits in loky worker processes: the estimator is
    # pickled there and back, and MXNet runs in the children.
    docs, labels = make_corpus()
    pipeline = make_pipeline(TfidfVectorizer(), SparseMLPClassifier(max_iter=20, random_state=0))
    search = GridSearchCV(pipeline, {"sparsemlpclassifier__hidden_layer_sizes": [(4,), (16,)],
                                     "sparsemlpclassifier__learning_rate_init": [1e-3, 1e-2]},
                          cv=2, n_jobs=2)
    search.fit(docs, labels)
    assert len(search.cv_results_["mean_test_score"]) == 4
    assert search.best_score_ > 0.8
    best = search.best_estimator_[-1]
    assert best.get_params()["learning_rate_init"] == search.best_params_[
        "sparsemlpclassifier__learning_rate_init"]
    sequential = GridSearchCV(pipeline, search.param_grid, cv=2, n_jobs=1).fit(docs, labels)
    # Same random_state in every fit: processes or not, the scores are the same.
    np.testing.assert_allclose(search.cv_results_["mean_test_score"],
                               sequential.cv_results_["mean_test_score"])
