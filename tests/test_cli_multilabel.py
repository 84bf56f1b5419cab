"""gluon-sparse train --multilabel, predict --top-k, evaluate (P@k, nDCG@k) in process."""
import numpy as np
import pytest
import scipy.sparse as sp

from gluon_sparse import cli
from gluon_sparse.nn.topk import ndcg_at_k, precision_at_k
from gluon_sparse.sklearn import SparseMultiLabelClassifier, load
from test_multilabel_estimator import _indicator, _planted


def _write(path, X, Y, header=None):
    with open(path, "w") as f:
        if header:
            f.write("%d %d %d\n" % header)
        for i in range(X.shape[0]):
            row = X[i]
            f.write(",".join(map(str, Y[i])) + " " +
                    " ".join("%d:%g" % (c, v) for c, v in zip(row.indices, row.data)) + "\n")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("ml")
    X, Y = _planted(1000)
    _write(d / "train.txt", X[:800], Y[:800], header=(800, X.shape[1], 60))
    _write(d / "test.txt", X[800:], Y[800:])
    model_dir = d / "model"
    assert cli.main(["train", "--multilabel", str(d / "train.txt"), "--test", str(d / "test.txt"),
                     "--model-dir", str(model_dir), "--epochs", "3", "--hidden", "32",
                     "--num-sampled", "16", "--batch-size", "128", "--lr", "0.01",
                     "--quiet"]) == 0
    return d, X[800:], Y[800:], model_dir


def test_train_writes_a_multilabel_model(files, capsys):
    _, _, _, model_dir = files
    model = load(model_dir)
    assert isinstance(model, SparseMultiLabelClassifier) and model.multilabel_
    assert model.n_outputs_ == 60 and model.n_iter_ == 3


def test_batch_size_clipping_is_said(files, tmp_path, caplog):
    """As without --multilabel: a batch larger than the data is one batch, with a warning
    (it was clipped without one)."""
    d, _, _, _ = files
    with caplog.at_level("WARNING", logger="gluon_sparse.cli"):
        assert cli.main(["train", "--multilabel", str(d / "test.txt"), "--model-dir",
                         str(tmp_path / "m"), "--epochs", "1", "--hidden", "4", "--num-sampled",
                         "2", "--batch-size", "5000", "--validation-fraction", "0",
                         "--quiet"]) == 0
    assert any("--batch-size 5000 is larger than the 200 training samples" in r.getMessage()
               for r in caplog.records)
    assert load(tmp_path / "m").batch_size == 200


def test_predict_top_k_lines_match_the_model(files, tmp_path):
    d, Xt, _, model_dir = files
    out = tmp_path / "pred.txt"
    assert cli.main(["predict", str(d / "test.txt"), "--model-dir", str(model_dir),
                     "--top-k", "4", "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == Xt.shape[0]
    labels, scores = load(model_dir).predict_top_k(Xt, 4)
    for line, row_labels, row_scores in zip(lines[:20], labels, scores):
        pairs = [token.split(":") for token in line.split()]
        assert [int(p[0]) for p in pairs] == row_labels.tolist()
        np.testing.assert_allclose([float(p[1]) for p in pairs], row_scores, rtol=1e-5)


def test_evaluate_prints_precision_and_ndcg(files, capsys):
    d, Xt, Yt, model_dir = files
    capsys.readouterr()
    assert cli.main(["evaluate", str(d / "test.txt"), "--model-dir", str(model_dir)]) == 0
    printed = capsys.readouterr().out
    values = dict(zip(printed.split()[3::2], map(float, printed.split()[4::2])))
    ids, _ = load(model_dir).predict_top_k(Xt, 5)
    Y = _indicator(Yt)
    for k in (1, 3, 5):
        assert values["P@%d" % k] == pytest.approx(precision_at_k(Y, ids, k), abs=1e-4)
        assert values["nDCG@%d" % k] == pytest.approx(ndcg_at_k(Y, ids, k), abs=1e-4)
    assert values["P@1"] > 0.5


def test_bad_multilabel_input_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("3 10 5\n0,1 1:1\n7 2:1\n1 3:1\n")
    code = cli.main(["train", "--multilabel", str(bad), "--model-dir", str(tmp_path / "m")])
    assert code != 0
    assert "bad.txt, line 3: label 7 is out of range for num_labels=5" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_predict_defaults_to_at_most_the_models_labels_and_refuses_proba(tmp_path, capsys):
    X, Y = _planted(60)
    Y = [[label % 3] for label, *_ in Y]
    _write(tmp_path / "few.txt", X, Y)
    model_dir = tmp_path / "few"
    assert cli.main(["train", "--multilabel", str(tmp_path / "few.txt"), "--model-dir",
                     str(model_dir), "--epochs", "1", "--hidden", "4", "--num-sampled", "2",
                     "--quiet"]) == 0
    out = tmp_path / "pred.txt"
    assert cli.main(["predict", str(tmp_path / "few.txt"), "--model-dir", str(model_dir),
                     "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 60 and all(len(line.split()) == 3 for line in lines)
    capsys.readouterr()
    assert cli.main(["predict", str(tmp_path / "few.txt"), "--model-dir", str(model_dir),
                     "--out", str(out), "--proba"]) == 2
    assert "--proba is for single-label classifiers" in capsys.readouterr().err
    before = (tmp_path / "few.txt").read_bytes()
    assert cli.main(["predict", str(tmp_path / "few.txt"), "--model-dir", str(model_dir),
                     "--out", str(tmp_path / "few.txt")]) == 2
    assert "is the input file" in capsys.readouterr().err
    assert (tmp_path / "few.txt").read_bytes() == before


@pytest.mark.parametrize("text, message", [
    ("0,1 1:1\n2 2:nan\n", "line 2: non-finite value nan of feature 2"),
    ("0,1 1:1\n2 2:1\n1 0:1\n", "line 3: invalid feature index in '0:1'"),
])
def test_multilabel_files_are_checked_like_single_label_ones(tmp_path, capsys, text, message):
    bad = tmp_path / "bad.txt"
    bad.write_text(text)
    assert cli.main(["train", "--multilabel", str(bad), "--zero-based", "false", "--model-dir",
                     str(tmp_path / "m")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_evaluate_keeps_unseen_labels_and_maps_python_label_ids(files, tmp_path, capsys):
    """Labels the model never saw are positives no prediction hits (nDCG's ideal ranking
    counts them); a model trained in Python with label ids other than 0..L-1 is scored
    by its labels (every score was 0: the file's ids were read as column numbers)."""
    d, Xt, Yt, model_dir = files
    unseen = [row + [60, 61] for row in Yt]
    _write(tmp_path / "unseen.txt", Xt, unseen)
    capsys.readouterr()
    assert cli.main(["evaluate", str(tmp_path / "unseen.txt"), "--model-dir",
                     str(model_dir)]) == 0
    printed = capsys.readouterr().out
    values = dict(zip(printed.split()[3::2], map(float, printed.split()[4::2])))
    ids, _ = load(model_dir).predict_top_k(Xt, 5)
    Y = _indicator(unseen, num_labels=62)
    for k in (1, 3, 5):
        assert values["nDCG@%d" % k] == pytest.approx(ndcg_at_k(Y, ids, k), abs=1e-4)
    X, Ytrain = _planted(1000)
    shifted = [[label + 100 for label in row] for row in Ytrain[:800]]
    model = SparseMultiLabelClassifier(hidden_layer_sizes=(32,), num_sampled=16, max_iter=2,
                                       random_state=0).fit(X[:800], shifted)
    model.zero_based_ = True  # the files below are zero-based, as X's columns
    model.save(tmp_path / "python_model")
    test_shifted = [[label + 100 for label in row] for row in Yt]
    _write(tmp_path / "shifted.txt", Xt, test_shifted)
    assert cli.main(["evaluate", str(tmp_path / "shifted.txt"), "--model-dir",
                     str(tmp_path / "python_model")]) == 0
    printed = capsys.readouterr().out
    values = dict(zip(printed.split()[3::2], map(float, printed.split()[4::2])))
    assert values["P@1"] == pytest.approx(model.score(Xt, test_shifted), abs=1e-4)
    assert values["P@1"] > 0.3


def test_early_stopping_keeps_the_epoch_of_best_precision(files, tmp_path, capsys):
    d, Xt, Yt, _ = files
    assert cli.main(["train", "--multilabel", str(d / "train.txt"), "--test", str(d / "test.txt"),
                     "--model-dir", str(tmp_path / "m"), "--epochs", "8", "--hidden", "32",
                     "--num-sampled", "16", "--batch-size", "32", "--lr", "0.05",
                     "--early-stopping", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    p1 = [float(line.split("P@1 ")[1].split()[0]) for line in out.splitlines()
          if line.startswith("epoch ")]
    best = int(np.argmax(p1))
    assert len(p1) in (8, best + 2), p1  # ran out of epochs, or stopped one after the best
    model = load(tmp_path / "m")
    labels, _ = model.predict_top_k(Xt, 1)
    assert precision_at_k(_indicator(Yt, 60), labels.astype(np.int64), 1) == pytest.approx(
        p1[best], abs=1e-4)


def test_evaluate_refuses_a_file_without_labels(files, tmp_path, capsys):
    """Every P@k and nDCG@k was printed as 0.0000, with status 0."""
    d, _, _, model_dir = files
    rows = [line.split(" ", 1)[1] for line in (d / "test.txt").read_text().splitlines()]
    (tmp_path / "unlabelled.txt").write_text("".join(" " + row + "\n" for row in rows))
    assert cli.main(["evaluate", str(tmp_path / "unlabelled.txt"), "--model-dir",
                     str(model_dir)]) == 2
    assert "no row has a label" in capsys.readouterr().err


def test_train_refuses_a_test_file_without_labels_before_training(files, tmp_path, capsys):
    """Every epoch printed P@1 0.0000 and early stopping kept epoch 1 on it."""
    d, _, _, _ = files
    rows = [line.split(" ", 1)[1] for line in (d / "test.txt").read_text().splitlines()]
    (tmp_path / "unlabelled.txt").write_text("".join(" " + row + "\n" for row in rows))
    assert cli.main(["train", "--multilabel", str(d / "train.txt"), "--test",
                     str(tmp_path / "unlabelled.txt"), "--model-dir", str(tmp_path / "m"),
                     "--epochs", "1", "--hidden", "4", "--num-sampled", "2", "--quiet"]) == 2
    assert "no row has a label; --test needs" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_evaluate_notes_rows_without_labels_and_labels_never_seen(files, tmp_path, capsys):
    """What counts as a miss is said, as single-label evaluate says it (it was silent)."""
    d, Xt, Yt, model_dir = files
    rows = [([] if i % 2 else [label + 100 for label in row] if i % 3 == 0 else row)
            for i, row in enumerate(Yt)]
    _write(tmp_path / "mixed.txt", Xt, rows)
    capsys.readouterr()
    assert cli.main(["evaluate", str(tmp_path / "mixed.txt"), "--model-dir",
                     str(model_dir)]) == 0
    err = capsys.readouterr().err
    empty = sum(1 for row in rows if not row)
    unseen = sum(1 for row in rows if row and min(row) >= 100)
    assert "note: %d of %d samples have no label and count as 0" % (empty, len(rows)) in err
    assert "note: %d of %d samples have labels the model never saw" % (unseen, len(rows)) in err


def test_predict_top_k_refuses_labels_its_lines_cannot_hold(files, tmp_path, capsys):
    d, Xt, Yt, _ = files
    names = [["sci fi" if label == 0 else "l%d" % label for label in row] for row in Yt]
    model = SparseMultiLabelClassifier(hidden_layer_sizes=(4,), num_sampled=2, max_iter=1,
                                       random_state=0).fit(Xt, names)
    model.zero_based_ = True
    model.save(tmp_path / "named")
    assert cli.main(["predict", str(d / "test.txt"), "--model-dir", str(tmp_path / "named"),
                     "--top-k", "2", "--out", str(tmp_path / "p.txt")]) == 2
    assert "'sci fi' cannot be written" in capsys.readouterr().err
    assert not (tmp_path / "p.txt").exists()


def test_the_model_line_says_what_the_metrics_are_computed_on(files, tmp_path, capsys):
    """As single-label train does (it said nothing, so P@k could be read as training P@k)."""
    d, _, _, _ = files
    assert cli.main(["train", "--multilabel", str(d / "test.txt"), "--model-dir",
                     str(tmp_path / "m"), "--epochs", "1", "--hidden", "4", "--num-sampled",
                     "2", "--quiet"]) == 0
    assert "; metrics on 40 held-out training samples" in capsys.readouterr().out


def test_predict_top_k_does_not_read_the_files_labels(files, tmp_path):
    # Single-label predict ignores labels; --top-k refused a -1/+1 test file.
    d, _, _, model_dir = files
    rows = (d / "test.txt").read_text().splitlines()
    signs = tmp_path / "signs.txt"
    signs.write_text("".join("%s %s\n" % ("-1" if i % 2 else "+1", row.split(" ", 1)[1])
                             for i, row in enumerate(rows)))
    out_a, out_b = tmp_path / "a.txt", tmp_path / "b.txt"
    assert cli.main(["predict", "--model-dir", str(model_dir), str(d / "test.txt"), "--top-k",
                     "3", "--out", str(out_a)]) == 0
    assert cli.main(["predict", "--model-dir", str(model_dir), str(signs), "--top-k", "3",
                     "--out", str(out_b)]) == 0
    assert out_a.read_text() == out_b.read_text() != ""


def test_predict_and_evaluate_take_the_index_base_of_a_python_model(files, tmp_path, capsys):
    """As single-label: --zero-based for a model that records no base, an error where it
    contradicts the model's (the files model read its XC files zero-based)."""
    d, Xt, _, model_dir = files
    assert cli.main(["evaluate", str(d / "test.txt"), "--model-dir", str(model_dir),
                     "--zero-based", "false"]) == 2
    assert "--zero-based false contradicts the model" in capsys.readouterr().err
    X = Xt.tolil()
    X[:, 0] = 0
    X = X.tocsr()
    X.eliminate_zeros()
    Y = [[i % 3] for i in range(X.shape[0])]
    model = SparseMultiLabelClassifier(hidden_layer_sizes=(4,), num_sampled=2, max_iter=1,
                                       random_state=0).fit(X, Y)
    model.save(tmp_path / "m")
    _write(tmp_path / "t.txt", X, Y)  # zero-based, without feature 0
    out = tmp_path / "p.txt"
    assert cli.main(["predict", str(tmp_path / "t.txt"), "--model-dir", str(tmp_path / "m"),
                     "--top-k", "2", "--out", str(out), "--zero-based", "true"]) == 0
    labels, _ = model.predict_top_k(X, 2)
    assert [[int(p.split(":")[0]) for p in line.split()]
            for line in out.read_text().splitlines()] == labels.tolist()


def test_features_beyond_the_models_width_are_ignored_with_one_warning(files, tmp_path, capsys,
                                                                       caplog):
    """As single-label: a test file's features past the model's width (never seen in
    training) are dropped with a warning; predictions and metrics are those without them.
    Label ids beyond the model's are a different matter (a miss, as before)."""
    d, Xt, Yt, model_dir = files
    model = load(model_dir)
    width = model.n_features_in_
    rows = (d / "test.txt").read_text().splitlines()
    wide = tmp_path / "wide.txt"
    wide.write_text("".join(row + (" %d:1\n" % (width + 5) if i < 10 else "\n")
                            for i, row in enumerate(rows)))
    out = tmp_path / "top.txt"
    with caplog.at_level("WARNING"):
        assert cli.main(["predict", str(wide), "--model-dir", str(model_dir), "--top-k", "3",
                         "--out", str(out)]) == 0
        assert cli.main(["evaluate", str(wide), "--model-dir", str(model_dir)]) == 0
        assert cli.main(["train", "--multilabel", str(d / "train.txt"), "--test", str(wide),
                         "--model-dir", str(tmp_path / "m"), "--epochs", "1", "--hidden", "4",
                         "--num-sampled", "2", "--quiet"]) == 0
    said = [r.getMessage() for r in caplog.records if "beyond the model's" in r.getMessage()]
    assert len(said) == 3, said
    assert ("wide.txt: 10 values in 10 of %d rows have feature indices beyond the model's %d "
            "features (zero-based indices 0..%d; the largest here is %d)"
            % (len(rows), width, width - 1, width + 5)) in said[0]
    labels, _ = model.predict_top_k(Xt, 3)
    assert [[int(p.split(":")[0]) for p in line.split()]
            for line in out.read_text().splitlines()] == labels.tolist()
    capsys.readouterr()
    assert cli.main(["evaluate", str(d / "test.txt"), "--model-dir", str(model_dir)]) == 0
    same = capsys.readouterr().out.split("samples")[1]
    assert cli.main(["evaluate", str(wide), "--model-dir", str(model_dir)]) == 0
    assert capsys.readouterr().out.split("samples")[1] == same
