"""SparseMultiLabelClassifier: fit on indicator / label lists / 1-D labels, exact
top-k prediction, predict's indicator, precision@1 score, pickling, save/load,
scikit-learn conventions and errors."""
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import accuracy_score

from gluon_sparse.nn.topk import precision_at_k
from gluon_sparse.data import LibSVMDataset
from gluon_sparse.sklearn import SparseMultiLabelClassifier, load

from estimator_checks import parametrize_estimator_checks


def _planted(rows=1500, features=800, labels=60, seed=0):
    """Each label owns 6 features; a row shows 4 of each of its 1-2 labels' plus 2 noise."""
    rng = np.random.default_rng(seed)
    owners = rng.integers(0, features, size=(labels, 6))
    popularity = 1.0 / np.arange(1, labels + 1)
    popularity /= popularity.sum()
    Y, xr, xc = [], [], []
    for i in range(rows):
        ys = rng.choice(labels, rng.integers(1, 3), replace=False, p=popularity)
        Y.append(sorted(ys.tolist()))
        cols = np.unique(np.concatenate([rng.choice(owners[y], 4, replace=False) for y in ys]
                                        + [rng.integers(0, features, 2)]))
        xr.append(np.full(cols.size, i))
        xc.append(cols)
    X = sp.csr_matrix((np.ones(sum(c.size for c in xc), np.float32),
                       (np.concatenate(xr), np.concatenate(xc))), shape=(rows, features))
    return X, Y


FAST = dict(hidden_layer_sizes=(32,), num_sampled=16, max_iter=8, random_state=0)


@pytest.fixture(scope="module")
def data():
    X, Y = _planted()
    return X[:1200], Y[:1200], X[1200:], Y[1200:]


@pytest.fixture(scope="module")
def fitted(data):
    X, Y, _, _ = data
    names = [["tag%02d" % y for y in row] for row in Y]  # labels of any hashable type
    return SparseMultiLabelClassifier(**FAST).fit(X, names)


def _indicator(Y, num_labels=60):
    indptr = np.cumsum([0] + [len(r) for r in Y])
    return sp.csr_matrix((np.ones(indptr[-1]), np.concatenate(Y), indptr),
                         shape=(len(Y), num_labels))


def test_learns_planted_labels_and_beats_popularity(fitted, data):
    _, Y, Xt, Yt = data
    labels, scores = fitted.predict_top_k(Xt, k=5)
    assert labels.shape == scores.shape == (Xt.shape[0], 5)
    assert set(labels.ravel()) <= set(fitted.classes_)
    assert np.all(np.diff(scores, axis=1) <= 0)  # best first
    truth = [{"tag%02d" % y for y in row} for row in Yt]
    p1 = np.mean([labels[i, 0] in truth[i] for i in range(len(truth))])
    counts = np.bincount(np.concatenate(Y), minlength=60)
    popular = np.mean([int(np.argmax(counts)) in row for row in Yt])
    assert p1 > popular + 0.3
    assert fitted.score(Xt, [["tag%02d" % y for y in row] for row in Yt]) == pytest.approx(p1)


def test_top_k_is_exact_over_all_labels(fitted, data):
    _, _, Xt, _ = data
    module = fitted.module_
    h = module.hidden(__import__("gluon_sparse").data.csr_to_ndarray(Xt, np.float32))
    full = module.output.scores(h).asnumpy()
    labels, scores = fitted.predict_top_k(Xt, k=7)
    order = np.argsort(-full, axis=1, kind="stable")[:, :7]
    ref = fitted.classes_[np.asarray(fitted.label_order_)[order]]
    np.testing.assert_array_equal(labels, ref)
    np.testing.assert_allclose(scores, np.take_along_axis(full, order, axis=1), rtol=1e-5)


def test_indicator_and_lists_give_the_same_model(data):
    X, Y, Xt, _ = data
    by_list = SparseMultiLabelClassifier(**FAST).fit(X, Y)
    by_indicator = SparseMultiLabelClassifier(**FAST).fit(X, _indicator(Y))
    np.testing.assert_array_equal(by_list.classes_, np.arange(60))
    np.testing.assert_array_equal(by_indicator.classes_, np.arange(60))
    np.testing.assert_array_equal(by_list.predict_top_k(Xt, 3)[0],
                                  by_indicator.predict_top_k(Xt, 3)[0])
    ids = by_indicator.predict_top_k(Xt, 5)[0]
    Yt = _indicator(data[3])
    assert by_indicator.score(Xt, Yt) == pytest.approx(precision_at_k(Yt, ids, 1))


def test_predict_returns_an_indicator_of_predict_k_labels(fitted, data):
    _, _, Xt, _ = data
    Y = fitted.predict(Xt)
    assert sp.issparse(Y) and Y.shape == (Xt.shape[0], len(fitted.classes_))
    k = max(1, int(round(fitted.labels_per_row_)))
    np.testing.assert_array_equal(np.diff(Y.indptr), k)
    top = fitted.predict_top_k(Xt, k)[0]
    for i in range(5):
        assert set(fitted.classes_[Y[i].indices]) == set(top[i])
    assert np.all(np.diff(clone(fitted).set_params(predict_k=3).fit(
        data[0], [["tag%02d" % y for y in r] for r in data[1]]).predict(Xt).indptr) == 3)


def test_multiclass_labels(data):
    X, Y, Xt, Yt = data
    y = np.array([row[0] for row in Y])
    clf = SparseMultiLabelClassifier(**FAST).fit(X, y)
    assert not clf.multilabel_
    pred = clf.predict(Xt)
    assert pred.shape == (Xt.shape[0],)
    yt = np.array([row[0] for row in Yt])
    assert clf.score(Xt, yt) == pytest.approx(accuracy_score(yt, pred))
    assert clf._get_module().output._loss == "softmax"  # output_loss='auto', multi-class


def test_auto_output_loss_is_bce_for_multilabel_targets(fitted):
    assert fitted.output_loss == "auto" and fitted._get_module().output._loss == "bce"
    explicit = SparseMultiLabelClassifier(output_loss="softmax", max_iter=1, num_sampled=4,
                                          hidden_layer_sizes=(4,)).fit(*_planted(rows=50)[:2])
    assert explicit._get_module().output._loss == "softmax"


def test_pickle_and_save_load_predict_the_same(fitted, data, tmp_path):
    Xt = data[2]
    expected = fitted.predict_top_k(Xt, 5)
    copy = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_array_equal(copy.predict_top_k(Xt, 5)[0], expected[0])
    np.testing.assert_allclose(copy.predict_top_k(Xt, 5)[1], expected[1], rtol=1e-6)
    fitted.save(tmp_path / "model")
    loaded = load(tmp_path / "model")
    assert isinstance(loaded, SparseMultiLabelClassifier)
    np.testing.assert_array_equal(loaded.classes_, fitted.classes_)
    np.testing.assert_array_equal(loaded.predict_top_k(Xt, 5)[0], expected[0])
    np.testing.assert_allclose(loaded.predict_top_k(Xt, 5)[1], expected[1], rtol=1e-6)


def test_sklearn_conventions_and_errors(fitted, data):
    X, Y, Xt, _ = data
    params = fitted.get_params()
    assert params["hidden_layer_sizes"] == (32,) and params["max_iter"] == 8
    assert SparseMultiLabelClassifier().get_params()["alpha"] == 0.0
    assert clone(fitted).get_params() == params
    with pytest.raises(ValueError, match=r"k must be an int in \[1, 60\]"):
        fitted.predict_top_k(Xt, k=61)
    top = fitted.predict_top_k(Xt[:2], 1)[0][:, 0]
    # A label unknown at fit can never be predicted: a miss, not an error.
    assert fitted.score(Xt[:2], [[top[0]], ["nope"]]) == 0.5
    with pytest.raises(ValueError, match="not among the classes seen at fit"):
        SparseMultiLabelClassifier(**FAST).fit(X, Y).partial_fit(Xt[:1], [[999]])
    with pytest.raises(ValueError, match="Y has 3 rows but X has 1200"):
        SparseMultiLabelClassifier(**FAST).fit(X, sp.csr_matrix((3, 5)))
    # Unit weights are the unweighted fit (same batches, same candidates).
    weighted = SparseMultiLabelClassifier(**FAST).fit(X, Y, sample_weight=np.ones(X.shape[0]))
    plain = SparseMultiLabelClassifier(**FAST).fit(X, Y)
    np.testing.assert_array_equal(weighted.predict_top_k(Xt, 3)[0], plain.predict_top_k(Xt, 3)[0])
    with pytest.raises(ValueError, match="num_sampled"):
        SparseMultiLabelClassifier(num_sampled=-1).fit(X, Y)


def test_a_rows_top_k_does_not_depend_on_the_rows_predicted_with_it(fitted, data):
    _, _, Xt, _ = data
    labels, scores = fitted.predict_top_k(Xt, 3)
    for i in (0, 7, Xt.shape[0] - 1):
        alone = fitted.predict_top_k(Xt[i:i + 1], 3)
        np.testing.assert_array_equal(alone[0], labels[i:i + 1])
        np.testing.assert_array_equal(alone[1], scores[i:i + 1])


def test_label_lists_as_an_object_array_fit_as_the_list(data):
    """A pandas Series or LibSVMDataset(multilabel=True).label: a 1-D object array of rows."""
    X, Y, Xt, _ = data
    rows = np.empty(len(Y), dtype=object)
    rows[:] = [tuple(row) for row in Y]
    fast = dict(FAST, max_iter=2)
    from_array = SparseMultiLabelClassifier(**fast).fit(X, rows)
    from_list = SparseMultiLabelClassifier(**fast).fit(X, Y)
    np.testing.assert_array_equal(from_array.classes_, from_list.classes_)
    np.testing.assert_array_equal(from_array.predict_top_k(Xt, 3)[1],
                                  from_list.predict_top_k(Xt, 3)[1])


def test_targets_it_cannot_learn_are_named(data):
    X, Y, _, _ = data
    X = X[:20]
    with pytest.raises(ValueError, match="no positive label in any row"):
        SparseMultiLabelClassifier(**FAST).fit(X, [[] for _ in range(20)])
    with pytest.raises(ValueError, match="no positive label in any row"):
        SparseMultiLabelClassifier(**FAST).fit(X, sp.csr_matrix((20, 4)))
    with pytest.raises(ValueError, match=r"labels must be numbers or strings; got the tuple"):
        SparseMultiLabelClassifier(**FAST).fit(X, [[("a", 1)]] * 20)
    with pytest.raises(ValueError, match=r"labels must be numbers or strings; got the tuple"):
        SparseMultiLabelClassifier(**FAST).fit(X, [[1, (2, 3)]] * 20)
    with pytest.raises(ValueError, match=r"all numbers or all strings; .* int, str"):
        SparseMultiLabelClassifier(**FAST).fit(X, [[1, "a"]] * 20)
    with pytest.raises(ValueError, match="leave none to train on"):
        SparseMultiLabelClassifier(**dict(FAST, early_stopping=True, validation_fraction=0.99)
                                   ).fit(X, Y[:20])
    # partial_fit's classes: an indicator's are its column indices; later calls repeat them.
    with pytest.raises(ValueError, match="classes are its column indices 0..3"):
        SparseMultiLabelClassifier(**FAST).partial_fit(X, sp.eye(20, 4, format="csr"),
                                                       classes=["a", "b", "c", "d"])
    model = SparseMultiLabelClassifier(**FAST).partial_fit(X, [[1]] * 20, classes=[1, 2])
    model.partial_fit(X, [[2]] * 20, classes=[2, 1])
    with pytest.raises(ValueError, match=r"classes=\[7, 8\] is not the same as on the first"):
        model.partial_fit(X, [[1]] * 20, classes=[7, 8])


@pytest.mark.parametrize("dtype", [np.float64, np.int64, bool])
def test_the_callers_indicator_is_left_as_given(data, dtype):
    """fit and score drop stored zeros on their own copy: csr_matrix(Y, dtype=float32)
    shared the caller's indices and indptr, which eliminate_zeros compacted under the
    caller's data, moving or deleting the caller's positives."""
    X, Y, _, _ = data
    Y = _indicator(Y[:100]).astype(dtype)
    Y.data[::3] = 0  # stored zeros
    arrays = [a.copy() for a in (Y.data, Y.indices, Y.indptr)]
    model = SparseMultiLabelClassifier(**dict(FAST, max_iter=1)).fit(X[:100], Y)
    model.score(X[:100], Y)
    for before, after in zip(arrays, (Y.data, Y.indices, Y.indptr)):
        np.testing.assert_array_equal(after, before)


def test_a_positive_stored_twice_is_one_positive(data):
    """A non-canonical CSR indicator with a (row, label) entry stored twice: one positive,
    as SampledOutput and the metrics read it (the counts used to double, and predict
    returned twice the labels a row has)."""
    X, Y, _, _ = data
    canonical = _indicator(Y[:100])
    twice = sp.csr_matrix((np.repeat(canonical.data, 2), np.repeat(canonical.indices, 2),
                           canonical.indptr * 2), shape=canonical.shape)
    fits = [SparseMultiLabelClassifier(**dict(FAST, max_iter=1)).fit(X[:100], Y_)
            for Y_ in (canonical, twice)]
    assert fits[1].label_counts_ == fits[0].label_counts_
    assert fits[1].labels_per_row_ == fits[0].labels_per_row_
    assert (fits[1].predict(X[:100]) != fits[0].predict(X[:100])).nnz == 0
    with pytest.raises(ValueError, match="holds only 0 and 1; row 3 has 2.0 for label 5"):
        SparseMultiLabelClassifier(**FAST).fit(X[:5], sp.csr_matrix(
            (np.array([1.0, 2.0]), np.array([1, 5]), np.array([0, 1, 1, 1, 2, 2])), shape=(5, 8)))


def test_batches_without_candidates_train(data):
    """In-batch negatives (or no draws) and a batch whose rows have no label: no
    candidate at all. Those examples' loss is 0; MXNet failed to infer shapes."""
    X, Y, _, _ = data
    Y = [row if i % 10 == 0 else [] for i, row in enumerate(Y[:200])]
    for extra in (dict(sampler="in_batch"), dict(num_sampled=0)):
        model = SparseMultiLabelClassifier(**dict(FAST, max_iter=2, batch_size=4, **extra))
        model.fit(X[:200], Y)
        assert np.isfinite(model.loss_)


def test_a_nested_list_of_0_1_rows_is_an_indicator(data):
    """scikit-learn reads rows of one length holding 0 and 1 as an indicator
    (type_of_target); they were read as label lists, a model of labels 0 and 1."""
    X, Y, _, _ = data
    indicator = _indicator(Y[:200])
    from_matrix = SparseMultiLabelClassifier(**dict(FAST, max_iter=1)).fit(X[:200], indicator)
    from_lists = SparseMultiLabelClassifier(**dict(FAST, max_iter=1)).fit(
        X[:200], indicator.toarray().astype(int).tolist())
    np.testing.assert_array_equal(from_lists.classes_, from_matrix.classes_)
    assert (from_lists.predict(X[:200]) != from_matrix.predict(X[:200])).nnz == 0
    # Rows of different lengths, or ids other than 0 and 1, stay label lists.
    lists = SparseMultiLabelClassifier(**dict(FAST, max_iter=1)).fit(X[:3], [[0, 1], [1, 2], [0, 2]])
    np.testing.assert_array_equal(lists.classes_, [0, 1, 2])


def _write_multilabel(path, X, Y):
    """Zero-based multi-label LibSVM: 'l1,l2 i:v ...'."""
    with open(path, "w") as out:
        for i in range(X.shape[0]):
            row = X[i]
            out.write("%s %s\n" % (",".join(map(str, Y[i])), " ".join(
                "%d:%g" % (j, v) for j, v in zip(row.indices, row.data))))


def test_libsvm_paths_fit_with_the_files_labels_and_index_base(data, tmp_path):
    """fit(path) takes the file's labels and records its index base: a later file read
    with another base would have its columns shifted against the model's."""
    X, Y, Xt, Yt = data
    X = X.tolil()
    X[:, 0] = 0  # the training file never uses feature 0 ...
    X = X.tocsr()
    X.eliminate_zeros()
    Xt = Xt.tolil()
    Xt[0, 0] = 1.0  # ... and the test file does
    Xt = Xt.tocsr()
    train, test = tmp_path / "train.txt", tmp_path / "test.txt"
    _write_multilabel(train, X, Y)
    _write_multilabel(test, Xt, Yt)
    params = dict(FAST, max_iter=2)
    from_path = SparseMultiLabelClassifier(**params).fit(str(train))
    assert from_path.zero_based_ is False  # ... so 'auto' read it one-based
    reference = SparseMultiLabelClassifier(**params).fit(X[:, 1:], Y)
    np.testing.assert_array_equal(from_path.predict_top_k(str(train), k=3)[1],
                                  reference.predict_top_k(X[:, 1:], k=3)[1])
    with pytest.raises(ValueError, match="test.txt, line 1: .*index 0 with zero_based=False"):
        from_path.predict(str(test))  # refused, not read with its columns shifted
    # score(path) takes the file's labels, as fit(path) does.
    assert from_path.score(str(train)) == from_path.score(str(train), Y)
    _write_multilabel(tmp_path / "unseen.txt", X[:5], [[99]] * 5)  # a label the model lacks
    assert from_path.score(str(tmp_path / "unseen.txt")) == 0.0
    with pytest.warns(ConvergenceWarning):
        SparseMultiLabelClassifier(**dict(FAST, max_iter=1)).fit([train], Y)


def test_a_diverged_fit_raises(data):
    X, Y, _, _ = data
    with pytest.raises(ValueError, match="non-finite weights"):
        SparseMultiLabelClassifier(**dict(FAST, learning_rate_init=1e30, optimizer="sparsesgd",
                                          max_iter=3)).fit(X * 1e30, Y)


def test_loss_and_stopping_follow_sparse_mlp_classifiers_definitions(data):
    """loss_ holds the L2 term (it left it out) and an unchanged validation score with
    tol=0 is no reason to stop (scikit-learn's rule; it stopped)."""
    X, Y, _, _ = data
    X, Y = X[:300], Y[:300]
    frozen = dict(FAST, optimizer="sparsesgd", learning_rate_init=1e-12, batch_size=100)
    with_l2 = SparseMultiLabelClassifier(**dict(frozen, alpha=1.0, max_iter=1)).fit(X, Y)
    without = SparseMultiLabelClassifier(**dict(frozen, alpha=0.0, max_iter=1)).fit(X, Y)
    squares = sum(float((p.data().asnumpy().astype(np.float64) ** 2).sum())
                  for name, p in with_l2.module_.collect_params().items()
                  if not name.endswith("bias"))
    assert with_l2.loss_ - without.loss_ == pytest.approx(0.5 * 3 * squares / 300, rel=1e-4)
    patient = SparseMultiLabelClassifier(**dict(frozen, max_iter=6, early_stopping=True, tol=0.0,
                                                n_iter_no_change=2)).fit(X, Y)
    assert len(set(patient.validation_scores_)) == 1 and patient.n_iter_ == 6


# scikit-learn's sample-weight equivalence checks failed while label counts ignored the
# weights (a row of weight 0 still set the output rows' order); every check passes now.
@parametrize_estimator_checks([SparseMultiLabelClassifier(hidden_layer_sizes=(16,), num_sampled=8,
                                                          max_iter=5, learning_rate_init=0.05,
                                                          random_state=0)])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_a_matrix_fitted_model_says_when_a_files_index_base_is_a_guess(data, tmp_path):
    X, Y, _, _ = data
    model = SparseMultiLabelClassifier(hidden_layer_sizes=(8,), max_iter=1, num_sampled=4,
                                       random_state=0).fit(X, Y)
    last = X.shape[1] - 1
    rows = [i for i in range(X.shape[0]) if 0 not in X[i].indices and last not in X[i].indices]
    with open(tmp_path / "guess.txt", "w") as f:
        for i in rows[:20]:
            f.write(",".join(map(str, Y[i])) + " " + " ".join(
                "%d:%g" % (c, v) for c, v in zip(X[i].indices, X[i].data)) + "\n")
    with pytest.warns(UserWarning, match="index base is unknown"):
        model.predict_top_k(str(tmp_path / "guess.txt"), 3)


@pytest.mark.parametrize("weights", [0.0, -1.0])
def test_sample_weights_summing_to_zero_or_less_are_refused(data, weights):
    """As SparseMLPClassifier: every batch would be skipped, leaving the initial weights
    with a loss curve of zeros."""
    X, Y, _, _ = data
    model = SparseMultiLabelClassifier(hidden_layer_sizes=(8,), max_iter=2, num_sampled=4)
    with pytest.raises(ValueError, match="sample_weight sums to"):
        model.fit(X[:50], Y[:50], sample_weight=np.full(50, weights))


def _write_one_based(path, X, label_rows):
    """One-based multi-label LibSVM; returns the path as a str."""
    with open(path, "w") as f:
        for i, labels in enumerate(label_rows):
            row = X[i]
            f.write(",".join(map(str, labels)) + " " + " ".join(
                "%d:%g" % (c + 1, v) for c, v in zip(row.indices, row.data)) + "\n")
    return str(path)


def test_a_path_and_a_multilabel_libsvm_dataset_read_the_same_labels(tmp_path):
    """Label ids in both: the dataset route took them as label values (float classes_ of the
    labels present), the path route as indicator columns."""
    X = sp.random(60, 10, density=0.3, format="csr", random_state=0)
    path = _write_one_based(tmp_path / "a.svm", X, [[3, 9] if i % 2 else [3] for i in range(60)])

    def model():
        return SparseMultiLabelClassifier(hidden_layer_sizes=(4,), num_sampled=2, max_iter=2,
                                          random_state=0)
    from_path = model().fit(path)
    from_dataset = model().fit(LibSVMDataset(path, multilabel=True))
    np.testing.assert_array_equal(from_path.classes_, np.arange(10))
    np.testing.assert_array_equal(from_dataset.classes_, from_path.classes_)
    for a, b in zip(from_path.predict_top_k(path, 3), from_dataset.predict_top_k(path, 3)):
        np.testing.assert_array_equal(a, b)


def test_partial_fit_over_files_of_different_largest_label_ids(tmp_path):
    """Each part file's indicator was as wide as its own largest id: 'Y has 5 columns but the
    model was fitted with 10 labels'."""
    X = sp.random(60, 10, density=0.3, format="csr", random_state=0)
    first = _write_one_based(tmp_path / "a.svm", X, [[i % 7, 9] for i in range(60)])
    second = _write_one_based(tmp_path / "b.svm", X, [[i % 5] for i in range(60)])
    model = SparseMultiLabelClassifier(hidden_layer_sizes=(4,), num_sampled=2, max_iter=1,
                                       random_state=0).fit(first)
    model.partial_fit(second, None)
    model.partial_fit(LibSVMDataset(second, multilabel=True), None)
    assert model.n_outputs_ == 10
    unseen = _write_one_based(tmp_path / "c.svm", X, [[20] for _ in range(60)])
    with pytest.raises(ValueError, match=r"\[20\]"):
        model.partial_fit(unseen, None)
    assert model.score(unseen) == 0.0  # unseen labels count as misses


def test_the_first_partial_fit_of_part_files_names_every_label_id(tmp_path):
    """classes=range(L) was refused ('the classes are its column indices 0..2') when the
    first part did not hold the largest id, and the later part's id was then refused."""
    X = sp.random(60, 10, density=0.3, format="csr", random_state=0)
    X.data = np.ceil(X.data * 8) / 8  # values that the file's '%g' writes exactly
    first = _write_one_based(tmp_path / "a.svm", X, [[i % 3] for i in range(60)])
    second = _write_one_based(tmp_path / "b.svm", X, [[3, i % 2] for i in range(60)])
    params = dict(hidden_layer_sizes=(4,), num_sampled=2, random_state=0)
    model = SparseMultiLabelClassifier(**params).partial_fit(first, None, classes=range(5))
    assert model.classes_.tolist() == [0, 1, 2, 3, 4]
    model.partial_fit(second, None)
    reference = SparseMultiLabelClassifier(**params).partial_fit(
        X, [[i % 3] for i in range(60)], classes=range(5))
    reference.partial_fit(X, [[3, i % 2] for i in range(60)])
    for a, b in zip(model.predict_top_k(X, 3), reference.predict_top_k(X, 3)):
        np.testing.assert_array_equal(a, b)
    without = SparseMultiLabelClassifier(**params).partial_fit(first, None)
    with pytest.raises(ValueError, match="classes=range"):
        without.partial_fit(second, None)


def test_score_takes_an_indicator_of_another_width_as_label_lists(fitted_ids):
    """An indicator read from a test file is as wide as that file's largest id: 'Y has 6
    columns but the model was fitted with 3 labels'. Ids past the model's are misses."""
    model, X, rows = fitted_ids
    L = len(model.classes_)
    wider = [row + [L + 2] for row in rows]
    assert model.score(X, _indicator(wider, L + 3)) == model.score(X, wider)
    narrow = [[label for label in row if label < L - 1] for row in rows]
    assert model.score(X, _indicator(narrow, L - 1)) == model.score(X, narrow)


@pytest.fixture(scope="module")
def fitted_ids():
    X, Y = _planted(300)
    model = SparseMultiLabelClassifier(hidden_layer_sizes=(16,), num_sampled=8, max_iter=3,
                                       random_state=0).fit(X, _indicator(Y))
    return model, X, Y


def test_a_multilabel_dataset_label_that_is_not_an_id_is_named(tmp_path):
    X = sp.random(3, 10, density=0.3, format="csr", random_state=0)
    path = _write_one_based(tmp_path / "a.svm", X, [[1], [2.5], [3]])
    with pytest.raises(ValueError, match=r"a\.svm, line 2: label 2\.5 is not a label id"):
        SparseMultiLabelClassifier(max_iter=1).fit(LibSVMDataset(path, multilabel=True))


def test_a_file_labelled_as_for_another_model_predicts_and_rows_without_labels_train(tmp_path):
    X = sp.hstack([sp.random(40, 9, density=0.3, random_state=0), np.ones((40, 1))]).tocsr()
    X.data = np.ceil(X.data * 8) / 8  # values that the file's '%g' writes exactly
    label_rows = [[i % 4] if i % 3 else [] for i in range(40)]  # every third row unlabelled
    path = _write_one_based(tmp_path / "a.svm", X, label_rows)
    params = dict(hidden_layer_sizes=(4,), num_sampled=2, max_iter=2, random_state=0)
    # fit(path) refused the unlabelled rows, naming an argument fit() does not have.
    from_path = SparseMultiLabelClassifier(**params).fit(path)
    reference = SparseMultiLabelClassifier(**params).fit(X, label_rows)
    np.testing.assert_array_equal(from_path.predict_top_k(path, 2)[1],
                                  reference.predict_top_k(X, 2)[1])
    # A test file labelled -1/+1: prediction does not read its labels.
    signs = _write_one_based(tmp_path / "s.svm", X, [["-1" if i % 2 else "+1"] for i in range(40)])
    for a, b in zip(from_path.predict_top_k(signs, 2), from_path.predict_top_k(X, 2)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(from_path.predict(signs).toarray(),
                                  from_path.predict(X).toarray())
    with pytest.raises(ValueError, match="label -1.0 is not a label id"):
        from_path.score(signs)  # scoring does read them


def test_score_of_a_file_refuses_a_model_whose_labels_are_not_ids(fitted, data, tmp_path):
    # The file's ids were all unknown to the model: P@1 came back 0.0 without a word.
    _, _, Xt, Yt = data
    path = tmp_path / "t.txt"
    _write_multilabel(path, Xt, Yt)
    with pytest.raises(ValueError, match="model's labels are not ids \\(e.g. 'tag00'\\)"):
        fitted.score(str(path))
    assert fitted.score(Xt, [["tag%02d" % y for y in row] for row in Yt]) > 0.3


def test_rows_of_weight_zero_count_as_rows_left_out(data):
    # Label counts, the output rows' order and labels a row were counted over every
    # row, whatever its weight: 27 of 60 predictions differed from dropping the rows.
    X, Y, Xt, _ = data
    X, Y = X[:300], Y[:300]
    keep = np.arange(300) % 3 != 0
    weights = keep.astype(np.float64)
    noisy = [row if k else [0, 1, 2] for row, k in zip(Y, keep)]  # labels the weights hide
    params = dict(FAST, sampler="all", batch_size=300, shuffle=False, max_iter=3)
    weighted = SparseMultiLabelClassifier(**params).fit(X, noisy, sample_weight=weights)
    dropped = SparseMultiLabelClassifier(**params).fit(X[keep], [r for r, k in zip(Y, keep) if k])
    np.testing.assert_array_equal(weighted.classes_, dropped.classes_)
    assert weighted.label_order_ == dropped.label_order_
    np.testing.assert_allclose(weighted.label_counts_, dropped.label_counts_)
    assert weighted.labels_per_row_ == pytest.approx(dropped.labels_per_row_)
    np.testing.assert_allclose(weighted.predict_top_k(Xt, 3)[1],
                               dropped.predict_top_k(Xt, 3)[1], rtol=1e-4, atol=1e-5)


def test_loss_does_not_depend_on_the_scale_of_the_weights(data):
    # The loss was divided by max(sum of weights, 1e-12).
    X, Y, _, _ = data
    params = dict(FAST, max_iter=2)
    plain = SparseMultiLabelClassifier(**params).fit(X, Y)
    tiny = SparseMultiLabelClassifier(**params).fit(X, Y, sample_weight=np.full(X.shape[0], 1e-17))
    assert tiny.loss_ == pytest.approx(plain.loss_, rel=1e-4)


@pytest.mark.parametrize("fraction", [0.0, 0.001])
def test_early_stopping_refuses_fewer_than_two_validation_rows(data, fraction):
    # One held-out row scored 0 or 1 and stopped training at random.
    X, Y, _, _ = data
    model = SparseMultiLabelClassifier(**dict(FAST, early_stopping=True,
                                              validation_fraction=fraction))
    with pytest.raises(ValueError, match="at least 2 validation samples"):
        model.fit(X, Y)


def test_the_early_stopping_score_weighs_the_held_out_rows(data, monkeypatch):
    # The held-out rows' weights were dropped: rows of weight 0 decided when to stop.
    X, Y, _, _ = data
    weights = 1.0 + np.asarray(X.sum(axis=1)).ravel()  # a function of the row: found again below
    seen = []
    original = SparseMultiLabelClassifier._precision_at_1

    def spy(self, X_val, Y_val, sample_weight=None):
        seen.append((X_val, sample_weight))
        return original(self, X_val, Y_val, sample_weight)

    monkeypatch.setattr(SparseMultiLabelClassifier, "_precision_at_1", spy)
    SparseMultiLabelClassifier(**dict(FAST, max_iter=2, early_stopping=True)).fit(
        X, Y, sample_weight=weights)
    X_val, given = seen[0]
    assert given is not None
    np.testing.assert_allclose(given, 1.0 + np.asarray(X_val.sum(axis=1)).ravel(), rtol=1e-6)


def test_float32_limits_of_the_steps_scalars(data):
    X, Y, _, _ = data
    params = dict(FAST, max_iter=1)
    # alpha / weight sum below float32's normal range: MXNet refused wd='6.7e-40'.
    # As a float32 term it changes nothing: the fit is alpha=0's.
    tiny = SparseMultiLabelClassifier(**dict(params, alpha=1e-37)).fit(X, Y)
    none = SparseMultiLabelClassifier(**dict(params, alpha=0.0)).fit(X, Y)
    np.testing.assert_array_equal(tiny.predict_top_k(X[:20], 3)[1],
                                  none.predict_top_k(X[:20], 3)[1])
    with pytest.raises(ValueError, match="learning_rate_init=1e-39 is too small"):
        SparseMultiLabelClassifier(**dict(params, learning_rate_init=1e-39)).fit(X, Y)
    with pytest.raises(ValueError, match="sum to .*scale sample_weight"):
        SparseMultiLabelClassifier(**params).fit(X, Y, sample_weight=np.full(X.shape[0], 1e36))
