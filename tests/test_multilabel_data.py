"""Multi-label LibSVM and extreme-classification files against scikit-learn's
load_svmlight_file(multilabel=True); errors naming file and line; the loader."""
import gzip

import mxnet as mx
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file
from sklearn.preprocessing import MultiLabelBinarizer

from gluon_sparse.data import MultiLabelDataset, MultiLabelLoader, load_multilabel
from gluon_sparse.data.multilabel import labels_to_indicator

LIBSVM = b"""3,17,204 1:0.5 4:2
0 2:1.5
# a comment
5,1 3:1 7:-2
204 1:1
"""


def _indicator(label_tuples, num_labels):
    mlb = MultiLabelBinarizer(classes=list(range(num_labels)))
    return sp.csr_matrix(mlb.fit_transform([[int(v) for v in t] for t in label_tuples]))


def _random_file(tmp_path, rng, rows=200, features=50, labels=30, header=False, name="d.txt"):
    lines = []
    for _ in range(rows):
        ys = sorted(rng.choice(labels, rng.integers(1, 5), replace=False))
        fs = sorted(rng.choice(features, rng.integers(1, 8), replace=False))
        lines.append(",".join(map(str, ys)) + " " +
                     " ".join("%d:%.3f" % (f, rng.standard_normal()) for f in fs))
    text = "\n".join(lines) + "\n"
    if header:
        text = "%d %d %d\n" % (rows, features, labels) + text
    path = tmp_path / name
    path.write_text(text)
    return path, text


@pytest.mark.parametrize("zero_based", ["auto", True, False])
def test_libsvm_matches_sklearn(tmp_path, zero_based):
    path = tmp_path / "ml.txt"
    path.write_bytes(LIBSVM)
    X, Y = load_multilabel(str(path), zero_based=zero_based)
    X_ref, y_ref = load_svmlight_file(str(path), multilabel=True, zero_based=zero_based)
    assert X.shape == X_ref.shape
    np.testing.assert_array_equal(X.toarray(), X_ref.toarray())
    assert Y.shape == (4, 205)
    np.testing.assert_array_equal(Y.toarray(), _indicator(y_ref, 205).toarray())


def test_random_xc_file_matches_sklearn_and_header(tmp_path):
    rng = np.random.default_rng(0)
    path, text = _random_file(tmp_path, rng, header=True)
    X, Y = load_multilabel(str(path))
    body = tmp_path / "body.txt"
    body.write_text(text.split("\n", 1)[1])
    X_ref, y_ref = load_svmlight_file(str(body), multilabel=True, zero_based=True,
                                      n_features=50)
    assert X.shape == (200, 50) and Y.shape == (200, 30)
    np.testing.assert_allclose(X.toarray(), X_ref.toarray(), rtol=1e-6)
    np.testing.assert_array_equal(Y.toarray(), _indicator(y_ref, 30).toarray())
    # gzip gives the same, and format='xc' insists on the header.
    gz = tmp_path / "d.txt.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    X2, Y2 = load_multilabel(str(gz), format="xc")
    assert (X2 != X).nnz == 0 and (Y2 != Y).nnz == 0
    with pytest.raises(ValueError, match=r"body.txt, line 1: expected the extreme-classification"):
        load_multilabel(str(body), format="xc")


@pytest.mark.parametrize("text, kwargs, message", [
    (b"3 5 3\n0 1:1\n1,2 0:1\n4 2:1\n", {}, r"x.txt, line 4: label 4 is out of range for num_labels=3"),
    (b"3 5 3\n0 1:1\n1,2 0:1\n", {}, r"x.txt, line 1: the header declares 3 rows but the file has 2"),
    (b"2 5 3\n0 1:1\n1,2 5:1\n", {}, r"x.txt, line 3: feature index 5 is out of range for num_features=5"),
    (b"0 1:1\n1.5 2:1\n", {}, r"x.txt, line 2: label 1.5 is not a label id"),
    (b"0 1:1\n-1 2:1\n", {}, r"x.txt, line 2: label -1.0 is not a label id"),
    (b"0 1:1\n\n 2:1\n", {}, r"x.txt, line 3: the row has no label"),
    (b"0 1:1\n7 2:1\n", {"num_labels": 5}, r"x.txt, line 2: label 7 is out of range for num_labels=5"),
    # A size given larger than the header's: the header's is the limit, and is named.
    (b"2 10 5\n0 1:1\n1 12:1\n", {"num_features": 100},
     r"x.txt, line 3: feature index 12 is out of range for num_features=10 declared by the "
     r"header \(line 1\)"),
    (b"2 10 5\n0 1:1\n6 2:1\n", {"num_labels": 50},
     r"x.txt, line 3: label 6 is out of range for num_labels=5 declared by the header"),
    (b"0 1:1\n1 2:x\n", {}, r"x.txt, line 2: invalid feature value"),
    (b"2 0 3\n0 1:1\n", {}, r"x.txt, line 1: the header .* must be positive"),
    # Past int64 scipy raised a bare OverflowError; 2^53 bounds label ids already.
    (b"2 99999999999999999999 10\n0 1:1\n", {}, r"x.txt, line 1: the header .* above 2\^53"),
    (b"2 5 9007199254740993\n0 1:1\n", {}, r"x.txt, line 1: the header .* above 2\^53"),
    # Labels that are no ids are reported before any size is taken from them.
    (b"0 1:1\ninf 2:1\n", {}, r"x.txt, line 2: label inf is not a label id"),
    (b"0 1:1\nnan 2:1\n", {"num_labels": 5}, r"x.txt, line 2: label nan is not a label id"),
    (b"0 1:1\n1e20 2:1\n", {}, r"x.txt, line 2: label 1e\+20 is not a label id"),
    (b"1 5 3\n1e20 2:1\n", {}, r"x.txt, line 2: label 1e\+20 is not a label id"),
    # One-based indices: feature 0 is an error, as load_libsvm's (it was column -1).
    (b"0,2 1:1 3:2\n1 0:1\n", {"zero_based": False}, r"x.txt, line 2: invalid feature index "
                                                     r"in '0:1': index 0 with zero_based=False"),
    (b"0 1:1\n1 2:nan\n", {"allow_nonfinite": False},
     r"x.txt, line 2: non-finite value nan of feature 2"),
    (b"2 5 3\n0 1:1\n1 2:inf\n", {"allow_nonfinite": False},
     r"x.txt, line 3: non-finite value inf of feature 2"),
    (b"0 1:1\n", {"num_features": True}, r"num_features must be a positive integer"),
    (b"0 1:1\n", {"num_labels": 0}, r"num_labels must be a positive integer"),
])
def test_bad_input_names_file_and_line(tmp_path, text, kwargs, message):
    path = tmp_path / "x.txt"
    path.write_bytes(text)
    with pytest.raises(ValueError, match=message):
        load_multilabel(str(path), **kwargs)


def test_sizes_may_be_numpy_integers_and_nonfinite_values_are_kept_by_default(tmp_path):
    path = tmp_path / "n.txt"
    path.write_bytes(b"0 1:nan\n1 2:1\n")
    X, Y = load_multilabel(str(path), num_features=np.int64(4), num_labels=np.int32(3))
    assert X.shape == (2, 4) and Y.shape == (2, 3) and np.isnan(X[0, 0])


def test_allow_empty_keeps_rows_without_labels(tmp_path):
    path = tmp_path / "e.txt"
    path.write_bytes(b"0 1:1\n 2:1\n2 0:1\n")
    X, Y = load_multilabel(str(path), allow_empty=True)
    np.testing.assert_array_equal(Y.toarray(), [[1, 0, 0], [0, 0, 0], [0, 0, 1]])


def test_labels_to_indicator_and_dataset():
    Y = labels_to_indicator([[2, 0], [], [1, 1]], num_labels=4)
    np.testing.assert_array_equal(Y.toarray(), [[1, 0, 1, 0], [0, 0, 0, 0], [0, 1, 0, 0]])
    with pytest.raises(ValueError, match="label id 4 is out of range"):
        labels_to_indicator([[4]], num_labels=4)
    ds = MultiLabelDataset(sp.eye(3, format="csr"), [[2, 0], [], [1]])
    assert ds.num_labels == 3 and len(ds) == 3
    row, label = ds[0]
    np.testing.assert_array_equal(label.toarray(), [[1, 0, 1]])
    with pytest.raises(ValueError, match="2 rows but data has 3"):
        MultiLabelDataset(sp.eye(3, format="csr"), sp.eye(2, 3, format="csr"))


@pytest.mark.parametrize("lists, bad", [([[1], [], [2.7]], "row 2: label 2.7"),
                                         ([[0.5]], "row 0: label 0.5"),
                                         ([[-0.5]], "row 0: label -0.5"),
                                         ([[1, "a"]], "row 0: label 'a'"),
                                         ([[np.nan]], "row 0: label nan")])
def test_label_lists_of_other_than_whole_numbers_are_refused(lists, bad):
    # int() made 2.7 label 2, and -0.5 label 0, which passed the >= 0 check.
    with pytest.raises(ValueError, match=bad + " is not a label id"):
        labels_to_indicator(lists)
    with pytest.raises(ValueError, match=bad + " is not a label id"):
        MultiLabelDataset(sp.eye(len(lists), format="csr"), lists)
    # Whole numbers of any numeric type are ids.
    np.testing.assert_array_equal(labels_to_indicator([[2.0, np.int32(0)], [np.float32(1)]])
                                  .toarray(), [[1, 0, 1], [0, 1, 0]])


def test_check_labels_false_reads_features_of_any_labels(tmp_path):
    # Prediction does not use the labels: -1/+1 test files read as well as unlabelled ones.
    labelled, bare = tmp_path / "l.txt", tmp_path / "b.txt"
    labelled.write_bytes(b"-1 1:0.5 3:1\n+1 2:2\n2.5 1:1\n")
    bare.write_bytes(b" 1:0.5 3:1\n 2:2\n 1:1\n")
    with pytest.raises(ValueError, match="line 1: label -1.0 is not a label id"):
        load_multilabel(str(labelled))
    X, Y = load_multilabel(str(labelled), num_features=5, check_labels=False)
    expected, _ = load_multilabel(str(bare), num_features=5, allow_empty=True)
    assert Y is None
    np.testing.assert_array_equal(X.toarray(), expected.toarray())


def test_locate_row_skips_an_xc_header(tmp_path):
    from gluon_sparse.data import locate_row
    path = tmp_path / "x.txt"
    path.write_bytes(b"3 5 4\n0 1:1\n# a comment\n1,2 2:1\n3 4:1\n")
    assert [locate_row(str(path), row) for row in range(3)] == [(str(path), 2), (str(path), 4),
                                                                (str(path), 5)]
    with pytest.raises(IndexError):
        locate_row(str(path), 3)


def test_loader_batches_are_csr_and_cover_the_data(tmp_path):
    rng = np.random.default_rng(1)
    path, _ = _random_file(tmp_path, rng, rows=53)
    ds = MultiLabelDataset.from_files(str(path), zero_based=True)
    loader = MultiLabelLoader(ds, batch_size=10, shuffle=True, seed=0)
    xs, ys = [], []
    for x, y in loader:
        assert x.stype == "csr" and y.stype == "csr" and x.shape[0] == y.shape[0]
        xs.append(x.asscipy())
        ys.append(y.asscipy())
    assert len(loader) == 6
    X, Y = sp.vstack(xs).toarray(), sp.vstack(ys).toarray()
    # Same multiset of (x, y) rows as the dataset.
    ref = np.hstack([ds.data.toarray(), ds.label.toarray()])
    got = np.hstack([X, Y])
    np.testing.assert_array_equal(got[np.lexsort(got.T)], ref[np.lexsort(ref.T)])


def test_a_dense_indicator_is_read_as_one():
    """MultiLabelBinarizer's default output (a dense 0/1 array) was read as label-id lists."""
    X = sp.random(3, 5, density=0.5, format="csr", random_state=0, dtype=np.float32)
    Y = MultiLabelBinarizer().fit_transform([[1, 2], [0], [2]])
    dense = MultiLabelDataset(X, Y)
    np.testing.assert_array_equal(dense.label.toarray(), Y)
    np.testing.assert_array_equal(MultiLabelDataset(X, sp.csr_matrix(Y)).label.toarray(), Y)
    np.testing.assert_array_equal(MultiLabelDataset(X, [[1, 2], [0], [2]]).label.toarray(), Y)
    with pytest.raises(ValueError, match="num_labels=4 but the label indicator has 3 columns"):
        MultiLabelDataset(X, Y, num_labels=4)


@pytest.mark.parametrize("sparse", [False, True])
def test_an_indicator_value_other_than_0_or_1_is_named(sparse):
    X = sp.random(3, 5, density=0.5, format="csr", random_state=0, dtype=np.float32)
    Y = np.array([[0, 1, 0], [1, 0, 0], [0, 2, 1]], dtype=np.float32)
    with pytest.raises(ValueError, match="row 2 has 2.0 for label 1"):
        MultiLabelDataset(X, sp.csr_matrix(Y) if sparse else Y)


def test_reading_an_xc_file_as_plain_libsvm_says_what_reads_it(tmp_path):
    """LibSVMDataset(multilabel=True) and load_libsvm said only "invalid feature '6'"."""
    from gluon_sparse.data import LibSVMDataset, load_libsvm
    path = tmp_path / "xc.txt"
    path.write_text("3 6 4\n0,1 0:1 2:0.5\n3 5:1\n2 1:1\n")
    for read in (lambda: LibSVMDataset(str(path), multilabel=True),
                 lambda: load_libsvm(str(path))):
        with pytest.raises(ValueError, match=r"xc\.txt, line 1: .*extreme-classification "
                                             r"header.*load_multilabel"):
            read()
    X, Y = load_multilabel(str(path))
    assert X.shape == (3, 6) and Y.shape == (3, 4)
    # A first line of three numbers is only a header where it fails as data.
    plain = tmp_path / "plain.txt"
    plain.write_text("1 1:2 3:4\n")
    assert load_libsvm(str(plain))[0].shape == (1, 3)
