"""The gluon-sparse command line, in process (main([...])) and as `python -m gluon_sparse`."""
import os
import subprocess
import sys

import numpy as np
import pytest
from sklearn.datasets import load_svmlight_file
from sklearn.metrics import accuracy_score, roc_auc_score

from gluon_sparse import cli
from gluon_sparse.sklearn import SparseMLPClassifier, load

HEART_SCALE = "/work/shared/data/heart_scale"
FAST = ["--epochs", "3", "--hidden", "8", "--quiet"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("cli") / "model"
    assert cli.main(["train", HEART_SCALE, "--model-dir", str(model_dir)] + FAST) == 0
    return model_dir


def test_train_prints_epochs_and_summary_and_writes_model(trained, capsys, tmp_path):
    code = cli.main(["train", HEART_SCALE, "--model-dir", str(tmp_path / "m"), "--test",
                     HEART_SCALE, "--lr", "0.01"] + FAST)
    out = capsys.readouterr().out
    assert code == 0
    assert "270 samples x 13 features" in out
    for epoch in (1, 2, 3):
        assert "epoch %d/3  loss " % epoch in out
    assert "accuracy" in out and "auc" in out
    assert "summary: 3 epochs" in out and "samples/s" in out
    assert sorted(os.listdir(tmp_path / "m")) == ["estimator.json", "network.params"]
    model = load(tmp_path / "m")
    assert isinstance(model, SparseMLPClassifier) and model.n_iter_ == 3
    assert model.hidden_layer_sizes == (8,) and model.optimizer == "sparseadam"


def test_predict_writes_one_label_a_line(trained, tmp_path, capsys):
    out_file = tmp_path / "pred.txt"
    assert cli.main(["predict", HEART_SCALE, "--model-dir", str(trained), "--out",
                     str(out_file)]) == 0
    lines = out_file.read_text().splitlines()
    X, _ = load_svmlight_file(HEART_SCALE)
    expected = load(trained).predict(X)
    assert len(lines) == 270
    np.testing.assert_array_equal(np.array(lines, dtype=float), expected)
    assert set(lines) <= {"-1", "1"}
    assert cli.main(["predict", HEART_SCALE, "--model-dir", str(trained), "--out",
                     str(tmp_path / "proba.txt"), "--proba"]) == 0
    proba = np.loadtxt(tmp_path / "proba.txt")
    np.testing.assert_allclose(proba, load(trained).predict_proba(X), atol=1e-5)


def test_evaluate_reports_sklearn_metrics(trained, capsys):
    assert cli.main(["evaluate", HEART_SCALE, "--model-dir", str(trained)]) == 0
    out = capsys.readouterr().out
    X, y = load_svmlight_file(HEART_SCALE)
    model = load(trained)
    metrics = dict(zip(out.split()[3::2], map(float, out.split()[4::2])))
    assert metrics["accuracy"] == pytest.approx(accuracy_score(y, model.predict(X)), abs=1e-4)
    assert metrics["auc"] == pytest.approx(roc_auc_score(y, model.predict_proba(X)[:, 1]), abs=1e-4)


def test_regression_task(tmp_path, capsys):
    assert cli.main(["train", HEART_SCALE, "--model-dir", str(tmp_path / "r"), "--task",
                     "regression"] + FAST) == 0
    assert "r2" in capsys.readouterr().out
    assert cli.main(["evaluate", HEART_SCALE, "--model-dir", str(tmp_path / "r")]) == 0
    assert "mse" in capsys.readouterr().out


def _run_module(*args, cwd):
    return subprocess.run([sys.executable, "-m", "gluon_sparse"] + list(args), cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_default_dataset_via_python_m(tmp_path):
    result = _run_module("train", "--model-dir", "model", "--epochs", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "reference dataset" in result.stdout and "1000 samples x 1000000 features" in result.stdout
    assert "epoch 1/1" in result.stdout and "auc" in result.stdout
    assert "summary: 1 epochs" in result.stdout
    assert (tmp_path / "model" / "network.params").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no temporary directory left


@pytest.mark.parametrize("args, message", [
    (["train", "missing.svm", "--model-dir", "m"], "missing.svm"),
    (["train", "bad.svm", "--model-dir", "m"], "bad.svm"),
    (["train", "--model-dir", "m", "--epochs", "0"], "--epochs"),
    (["train", "--model-dir", "m", "--hidden", "8,x"], "--hidden"),
    (["train", "--model-dir", "m", "--ctx", "tpu"], "--ctx"),
    (["train", "--model-dir", "m", "--bogus"], "--bogus"),
    (["train", HEART_SCALE], "--model-dir"),
    (["predict", HEART_SCALE, "--model-dir", "nowhere", "--out", "p.txt"], "nowhere"),
    (["evaluate", "wide.svm", "--model-dir", "model"], "wide.svm"),
    (["frobnicate"], "frobnicate"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, monkeypatch, capsys, args, message):
    (tmp_path / "bad.svm").write_text("1 1:0.5 2:0.25\n+1 3:oops\n")
    (tmp_path / "wide.svm").write_text("1 1:0.5 99:1\n")
    assert cli.main(["train", HEART_SCALE, "--model-dir", str(tmp_path / "model")] + FAST) == 0
    capsys.readouterr()
    monkeypatch.chdir(tmp_path)
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert message in err[0] and "error" in err[0]


def test_malformed_file_error_names_the_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "bad.svm").write_text("1 1:0.5 2:0.25\n+1 3:oops\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", "bad.svm", "--model-dir", "m"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "bad.svm, line 2" in err and "3:oops" in err
    assert not (tmp_path / "m").exists()


def test_ctrl_c_during_training_writes_nothing(tmp_path, monkeypatch, capsys):
    calls = []

    def interrupted(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    original = SparseMLPClassifier.partial_fit
    monkeypatch.setattr(SparseMLPClassifier, "partial_fit", interrupted)
    code = cli.main(["train", HEART_SCALE, "--model-dir", str(tmp_path / "m")] + FAST)
    assert code == 130 and "interrupted" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_launch_delegates_to_the_launcher(monkeypatch):
    from gluon_sparse.distributed import launcher
    seen = {}

    def run(args):
        seen.update(vars(args))
        return 7

    monkeypatch.setattr(launcher, "run", run)
    assert cli.main(["launch", "-n", "2", "-s", "1", "--", "python", "train.py"]) == 7
    assert seen["num_workers"] == 2 and seen["command"][-2:] == ["python", "train.py"]


def _write_index_base_files(directory):
    """The failing case of the index-base bug: a zero-based training file that never uses
    feature 0, and test files with and without feature 0 (within the model's 5 columns)."""
    from sklearn.datasets import dump_svmlight_file
    rng = np.random.RandomState(0)
    X = rng.rand(80, 6) * (rng.rand(80, 6) < 0.5)
    X[:, 0] = 0  # feature 0 never occurs: 'auto' takes the file as one-based
    y = (X[:, 1] + X[:, 2] > X[:, 3] + X[:, 4]).astype(int)
    dump_svmlight_file(X, y, str(directory / "train.svm"), zero_based=True)
    with_zero = X[:20, 1:].copy()  # columns 0..4: valid zero-based indices for 5 features
    with_zero[:, 0] += 1  # feature 0 occurs in every row
    dump_svmlight_file(with_zero, y[:20], str(directory / "test_with_0.svm"), zero_based=True)
    dump_svmlight_file(X[:20], y[:20], str(directory / "test_without_0.svm"), zero_based=True)
    return directory / "train.svm"


def test_predict_and_evaluate_read_files_with_the_training_index_base(tmp_path, capsys):
    train = _write_index_base_files(tmp_path)
    model_dir = tmp_path / "model"
    assert cli.main(["train", str(train), "--model-dir", str(model_dir)] + FAST) == 0
    model = load(model_dir)
    assert model.n_features_in_ == 5 and model.zero_based_ is False  # read as one-based
    capsys.readouterr()
    # 'auto' alone would read this file as zero-based: every column shifted by one,
    # silently. Read one-based like the training file, its feature 0 is an error.
    for command in (["evaluate", str(tmp_path / "test_with_0.svm")],
                    ["predict", str(tmp_path / "test_with_0.svm"), "--out",
                     str(tmp_path / "p.txt")]):
        assert cli.main(command + ["--model-dir", str(model_dir)]) == 2
        err = capsys.readouterr().err.strip()
        assert "test_with_0.svm, line 1" in err and "index 0" in err and "\n" not in err
    assert cli.main(["train", str(train), "--model-dir", str(tmp_path / "m2"), "--test",
                     str(tmp_path / "test_with_0.svm")] + FAST) == 2
    assert "test_with_0.svm, line 1" in capsys.readouterr().err
    # A test file without feature 0 is read like the training file: aligned columns.
    out_file = tmp_path / "pred.txt"
    assert cli.main(["predict", str(tmp_path / "test_without_0.svm"), "--model-dir",
                     str(model_dir), "--out", str(out_file)]) == 0
    X_test, _ = load_svmlight_file(str(tmp_path / "test_without_0.svm"), zero_based=False,
                                   n_features=5)
    np.testing.assert_array_equal(np.loadtxt(out_file), model.predict(X_test))


def test_zero_based_flag_is_saved_and_used_at_predict_time(tmp_path, capsys):
    train = _write_index_base_files(tmp_path)
    model_dir = tmp_path / "model"
    assert cli.main(["train", str(train), "--model-dir", str(model_dir), "--zero-based", "true",
                     "--test", str(tmp_path / "test_with_0.svm")] + FAST) == 0
    model = load(model_dir)
    assert model.n_features_in_ == 6 and model.zero_based_ is True
    for name in ("test_with_0.svm", "test_without_0.svm"):
        out_file = tmp_path / (name + ".pred")
        assert cli.main(["predict", str(tmp_path / name), "--model-dir", str(model_dir),
                         "--out", str(out_file)]) == 0
        X_test, _ = load_svmlight_file(str(tmp_path / name), zero_based=True, n_features=6)
        np.testing.assert_array_equal(np.loadtxt(out_file), model.predict(X_test))
    capsys.readouterr()
    assert cli.main(["train", str(train), "--model-dir", "m", "--zero-based", "maybe"]) == 2
    assert "--zero-based" in capsys.readouterr().err
