"""make_reference_dataset: the same X under both label rules, labels that say what they claim."""
import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

from gluon_sparse.data import make_reference_dataset


@pytest.fixture(scope="module")
def both_rules():
    return make_reference_dataset(), make_reference_dataset(label_rule="row_sum")


def test_shape_density_and_same_matrix_under_both_rules(both_rules):
    (X, y), (X_sum, y_sum) = both_rules
    assert X.shape == (1000, 1_000_000) and X.nnz == 10_000 and X.has_sorted_indices
    assert (X != X_sum).nnz == 0 and X.dtype == np.float32
    assert set(np.unique(y)) == {0, 1} and y.dtype == np.int64
    row_sums = np.asarray(X.sum(axis=1), dtype=np.float64).ravel()
    np.testing.assert_array_equal(y_sum, row_sums > row_sums.mean())
    assert y.mean() == 0.5  # split at the median score
    X2, y2 = make_reference_dataset()
    assert (X2 != X).nnz == 0 and np.array_equal(y2, y)


def test_planted_signal_is_learnable_from_a_thousand_rows(both_rules):
    # scikit-learn's logistic regression as the independent learner: the
    # planted labels generalise to held-out rows, the 0.1 rule barely does.
    scores = {}
    for name, (X, y) in zip(("linear", "row_sum"), both_rules):
        # Columns that never occur get weight 0 under L2 anyway: dropping them
        # gives the same model and makes the fit fast.
        X = X[:, np.unique(X.indices)]
        X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=0,
                                                            stratify=y)
        model = LogisticRegression(C=10, max_iter=2000).fit(X_train, y_train)
        scores[name] = model.score(X_test, y_test)
    assert scores["linear"] >= 0.8 and scores["linear"] > scores["row_sum"] + 0.05, scores


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="label_rule"):
        make_reference_dataset(n_samples=10, n_features=100, label_rule="sum")
    with pytest.raises(ValueError, match="n_informative"):
        make_reference_dataset(n_samples=10, n_features=100, n_informative=0)


@pytest.mark.parametrize("kwargs", [dict(feature_skew=0),
                                    dict(feature_skew=0, n_features=10000, density=1e-4),
                                    dict(density=2e-6)])
def test_linear_labels_stay_balanced_when_many_rows_tie_at_the_median(kwargs):
    """Rows without an informative feature all score 0; they were all labelled 0 (0.8% of
    positives with uniform columns)."""
    _, y = make_reference_dataset(**kwargs)
    assert y.sum() == len(y) // 2


def test_a_full_matrix_is_drawn_quickly_and_exactly():
    """Skewed draws near density 1 hit chosen cells almost only (10 x 1000 took a minute)."""
    X, _ = make_reference_dataset(10, 1000, density=1.0, random_state=3)
    assert X.nnz == 10000 and (X.toarray() > 0).all()
    again, _ = make_reference_dataset(10, 1000, density=1.0, random_state=3)
    assert (X != again).nnz == 0
    X, _ = make_reference_dataset(20, 500, density=0.97)
    assert X.nnz == round(20 * 500 * 0.97) and X.has_canonical_format
