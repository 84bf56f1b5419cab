"""The gluon-sparse command line, in process (main([...])) and as `python -m gluon_sparse`."""
import bz2
import gzip
import os
import subprocess
import sys

import numpy as np
import pytest
from sklearn.datasets import load_svmlight_file
from sklearn.metrics import accuracy_score, roc_auc_score

from gluon_sparse import cli
from gluon_sparse.sklearn import SparseMLPClassifier, is_model_dir, load

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
    # One closing line: time, the held-out numbers of the last epoch, the model's path.
    last = out.strip().splitlines()[-1]
    assert last.startswith("summary: 3 epochs in ") and " s; held-out accuracy " in last
    assert last.endswith("model written to %s" % (tmp_path / "m"))
    assert out.count("model written to") == 1
    assert is_model_dir(tmp_path / "m")
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


def _epoch_metrics(stdout):
    """[{name: value}] of the 'epoch i/n  name value ...' lines."""
    rows = []
    for line in stdout.splitlines():
        if line.startswith("epoch "):
            words = line.split("(")[0].split()[2:]
            rows.append({name: float(value) for name, value in zip(words[::2], words[1::2])})
    return rows


@pytest.mark.slow
def test_default_job_learns_and_ends_with_one_summary_line(tmp_path):
    """The README's main job, every default: held-out numbers that improve, one closing line."""
    from gluon_sparse.data import make_reference_dataset
    from sklearn.metrics import log_loss
    from sklearn.model_selection import train_test_split

    result = _run_module("train", "--model-dir", "model", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "reference dataset" in out and "1000 samples x 1000000 features" in out
    epochs = _epoch_metrics(out)
    assert len(epochs) >= 3
    losses = [epoch["log_loss"] for epoch in epochs]
    # Learning, not overfitting: no epoch after the first is worse on held-out
    # data than the first, and the last is clearly better (gluon-sparse 0.1
    # went 0.57 -> 1.01 from its second epoch on).
    assert max(losses[1:]) <= losses[0] and losses[-1] < losses[0] - 0.05, losses
    assert epochs[-1]["accuracy"] >= 0.7 and epochs[-1]["auc"] >= 0.8, epochs[-1]
    # The printed numbers are those of the saved model on the held-out 20%
    # (scikit-learn's split and metrics, recomputed here).
    X, y = make_reference_dataset(random_state=0)
    _, X_test, _, y_test = train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)
    model = load(tmp_path / "model")
    assert epochs[-1]["accuracy"] == pytest.approx(
        accuracy_score(y_test, model.predict(X_test)), abs=1e-4)
    assert losses[-1] == pytest.approx(log_loss(y_test, model.predict_proba(X_test)), abs=1e-4)
    last = out.strip().splitlines()[-1]
    assert last.startswith("summary: %d epochs in " % len(epochs))
    assert "held-out accuracy %.4f" % epochs[-1]["accuracy"] in last
    assert last.endswith("model written to %s" % (tmp_path / "model"))
    assert out.count("model written to") == 1
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no temporary directory left


@pytest.mark.parametrize("args, message", [
    (["train", "missing.svm", "--model-dir", "m"], "missing.svm"),
    (["train", "bad.svm", "--model-dir", "m"], "bad.svm"),
    (["train", "--model-dir", "m", "--epochs", "0"], "--epochs"),
    (["train", "--model-dir", "m", "--hidden", "8,x"], "--hidden"),
    (["train", "--model-dir", "m", "--ctx", "tpu"], "--ctx"),
    (["train", "--model-dir", "m", "--alpha", "-1"], "--alpha"),
    (["train", "--model-dir", "m", "--bogus"], "--bogus"),
    (["train", HEART_SCALE], "--model-dir"),
    (["predict", HEART_SCALE, "--model-dir", "nowhere", "--out", "p.txt"], "nowhere"),
    (["frobnicate"], "frobnicate"),
    # Flags that passed the parser once and failed after the data was read.
    (["train", "--model-dir", "m", "--seed", "-1"], "--seed"),
    (["train", "--model-dir", "m", "--seed", "4294967296"], "--seed"),
    (["train", "--model-dir", "m", "--lr", "inf"], "--lr"),
    (["train", "--model-dir", "m", "--alpha", "inf"], "--alpha"),
    # Labels: named by file and line (a bare "Input y contains NaN." before).
    (["train", "nanlabel.svm", "--model-dir", "m"], "nanlabel.svm, line 2: label nan"),
    (["train", "biglabel.svm", "--model-dir", "m", "--task", "regression"],
     "biglabel.svm, line 2: label 1e+39"),
    (["evaluate", "nanlabel.svm", "--model-dir", "model"], "nanlabel.svm, line 2: label nan"),
    (["train", "floatlabel.svm", "--model-dir", "m"], "--task regression"),
    (["train", HEART_SCALE, "--model-dir", "m", "--validation-fraction", "0.999"],
     "leaves none to train on"),
    (["train", HEART_SCALE, "--model-dir", "m", "--optimizer", "groupadagrad"],
     # contrib's: 2-D weights only (a traceback)
     "'groupadagrad' cannot train these networks: MXNet's GroupAdaGrad"),
    (["train", "multilabel.svm", "--model-dir", "m"], "train --multilabel"),
    (["train", "--multilabel", "multilabel.svm", "--model-dir", "m", "--hidden", "linear"],
     "needs a hidden layer"),
    (["train", "--multilabel", "multilabel.svm", "--model-dir", "m", "--task", "regression"],
     "--task regression does not apply"),
    (["train", "--multilabel", "multilabel.svm", "--model-dir", "m", "--validation-fraction",
      "0.999"], "leaves none to train on"),
    # MXNet's Adamax: 0 / 0 for a weight whose gradient is always 0 (a NaN model was saved;
    # then the run was refused only after its last epoch).
    (["train", HEART_SCALE, "--model-dir", "m", "--optimizer", "adamax", "--epochs", "1"],
     "'adamax' cannot train these networks: MXNet's Adamax divides by its state u"),
    (["train", "--multilabel", "multilabel.svm", "--model-dir", "m", "--optimizer",
      "sparseadamax"], "--optimizer sparseadamax needs --optimizer-param epsilon=1e-8"),
    # A flag of the other mode: it was accepted and ignored.
    (["train", HEART_SCALE, "--model-dir", "m", "--num-sampled", "8"],
     "--num-sampled applies to --multilabel training"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, monkeypatch, capsys, args, message):
    (tmp_path / "bad.svm").write_text("1 1:0.5 2:0.25\n+1 3:oops\n")
    (tmp_path / "nanlabel.svm").write_text("1 1:0.5\nnan 2:1\n-1 3:1\n")
    (tmp_path / "biglabel.svm").write_text("1 1:0.5\n1e39 2:1\n-1 3:1\n")
    (tmp_path / "floatlabel.svm").write_text("1 1:0.5\n2.25 2:1\n-1 3:1\n")
    (tmp_path / "multilabel.svm").write_text("1,2 1:0.5\n0 2:1\n2 3:1\n")
    assert cli.main(["train", HEART_SCALE, "--model-dir", str(tmp_path / "model")] + FAST) == 0
    capsys.readouterr()
    monkeypatch.chdir(tmp_path)
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert message in err[0] and "error" in err[0]


def test_predict_ignores_labels_and_keeps_links_and_devices(trained, tmp_path, capsys):
    """predict does not use labels (a placeholder nan is fine); --out through a symbolic
    link writes its target, and a FIFO or device is written to, never replaced."""
    X, _ = load_svmlight_file(HEART_SCALE)
    lines = open(HEART_SCALE).read().splitlines()
    unlabelled = tmp_path / "unlabelled.svm"
    unlabelled.write_text("".join("nan" + line[line.index(" "):] + "\n" for line in lines))
    target, link = tmp_path / "target.txt", tmp_path / "link.txt"
    target.write_text("old\n")
    link.symlink_to(target)
    assert cli.main(["predict", str(unlabelled), "--model-dir", str(trained), "--out",
                     str(link)]) == 0
    assert link.is_symlink()
    np.testing.assert_array_equal(np.array(target.read_text().split(), dtype=float),
                                  load(trained).predict(X))
    import os
    import threading
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(open(fifo).read()), daemon=True)
    reader.start()
    assert cli.main(["predict", HEART_SCALE, "--model-dir", str(trained), "--out",
                     str(fifo)]) == 0
    reader.join(timeout=60)
    assert len(received[0].splitlines()) == 270 and not os.path.isfile(fifo)
    assert cli.main(["predict", HEART_SCALE, "--model-dir", str(trained), "--out",
                     os.devnull]) == 0
    assert not os.path.isfile(os.devnull)


def test_predict_out_dev_stdout_appends_to_a_redirected_log(trained, tmp_path):
    """--out /dev/stdout with stdout appended to a log: the log keeps its lines (the file
    behind /dev/stdout was replaced by rename, and its earlier lines lost)."""
    log = tmp_path / "log.txt"
    log.write_text("earlier line\n")
    with open(log, "a") as out:
        subprocess.run([sys.executable, "-m", "gluon_sparse", "predict", HEART_SCALE,
                        "--model-dir", str(trained), "--out", "/dev/stdout"], stdout=out,
                       check=True, timeout=300)
    lines = log.read_text().splitlines()
    assert lines[0] == "earlier line" and len(lines) == 271
    assert set(lines[1:]) <= {"-1", "1"}


def test_evaluate_names_labels_the_model_never_saw(trained, tmp_path, capsys):
    relabelled = tmp_path / "zero_one.svm"
    relabelled.write_text(open(HEART_SCALE).read().replace("-1 ", "0 "))
    capsys.readouterr()
    assert cli.main(["evaluate", str(relabelled), "--model-dir", str(trained)]) == 0
    out = capsys.readouterr().out
    assert "have labels the model never saw (e.g. 0; its classes: -1, 1)" in out


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


@pytest.mark.parametrize("stage", ["version-renamed", "pointer-replaced", "cleaned"])
def test_ctrl_c_during_the_save_says_whether_the_model_was_written(tmp_path, monkeypatch,
                                                                   capsys, stage):
    """After the pointer moved, the new model is the current one: the message said
    'nothing was written'."""
    from gluon_sparse import _fileio
    model_dir = tmp_path / "m"
    assert cli.main(["train", HEART_SCALE, "--model-dir", str(model_dir)] + FAST) == 0
    capsys.readouterr()

    def interrupt_at(name):
        if name == stage:
            raise KeyboardInterrupt

    monkeypatch.setattr(_fileio, "_fault_hook", interrupt_at)
    code = cli.main(["train", HEART_SCALE, "--model-dir", str(model_dir)] + FAST)
    err = capsys.readouterr().err
    assert code == 130
    written = _fileio._read_pointer(str(model_dir)) == "v-000002"
    assert written == (stage != "version-renamed")
    assert ("interrupted after the model was written to" in err) == written
    assert ("nothing was written" in err) == (not written)


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


# ------------------------------------------------ issue 16: what a new user hits, through the real CLI
def _write(path, data):
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def _one_error_line(result):
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert len(lines) == 1 and "error" in lines[0] and "Traceback" not in result.stderr, lines
    return lines[0]


@pytest.mark.parametrize("existing", ["folder", "file"])
def test_model_dir_that_is_not_a_model_fails_before_training(tmp_path, existing):
    target = tmp_path / "notes"
    if existing == "folder":
        target.mkdir()
        _write(target / "todo.txt", "keep me\n")
    else:
        _write(target, "keep me\n")
    result = _run_module("train", HEART_SCALE, "--model-dir", "notes", *FAST, cwd=tmp_path)
    line = _one_error_line(result)
    assert "notes" in line and "--model-dir" in line
    # Refused at once: no data read, no epoch run, and what was there is untouched.
    assert "epoch" not in result.stdout and "data:" not in result.stdout
    kept = target / "todo.txt" if existing == "folder" else target
    assert kept.read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]


def test_existing_model_dir_is_replaced_and_said_so_once(tmp_path, trained):
    import shutil
    shutil.copytree(trained, tmp_path / "model")
    before = load(tmp_path / "model")
    result = _run_module("train", HEART_SCALE, "--model-dir", "model", "--hidden", "4",
                         "--epochs", "1", "--quiet", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stdout.splitlines() if "replaced" in line]
    assert len(said) == 1 and "model" in said[0]
    assert result.stdout.index(said[0]) < result.stdout.index("epoch 1/1")  # before training
    after = load(tmp_path / "model")
    assert before.hidden_layer_sizes == (8,) and after.hidden_layer_sizes == (4,)


def test_unknown_optimizer_is_rejected_before_the_data_is_read(tmp_path):
    # The data file is missing too: the optimizer is what the error must name.
    result = _run_module("train", "missing.svm", "--model-dir", "m", "--optimizer", "nosuch",
                         cwd=tmp_path)
    line = _one_error_line(result)
    assert "--optimizer" in line and "nosuch" in line and "missing.svm" not in line
    offered = line.split("choose from")[1].split("(see")[0].replace(",", " ").split()
    assert "sparseadam" in offered and "adam" in offered and "sgd" in offered
    assert "test" not in offered  # MXNet's internal test optimizer is no choice
    assert _run_module("train", HEART_SCALE, "--model-dir", "m", "--optimizer", "test",
                       cwd=tmp_path).returncode == 2


def test_test_file_and_validation_fraction_together_are_refused(tmp_path):
    result = _run_module("train", HEART_SCALE, "--model-dir", "m", "--test", HEART_SCALE,
                         "--validation-fraction", "0.3", *FAST, cwd=tmp_path)
    line = _one_error_line(result)
    assert "--validation-fraction" in line and "--test" in line
    assert "data:" not in result.stdout and not (tmp_path / "m").exists()


@pytest.mark.parametrize("flag", ["data", "--test"])
def test_unreadable_file_fails_before_the_data_is_read(tmp_path, flag):
    (tmp_path / "folder.svm").mkdir()
    args = (["folder.svm"] if flag == "data" else [HEART_SCALE, "--test", "folder.svm"])
    result = _run_module("train", *args, "--model-dir", "m", *FAST, cwd=tmp_path)
    line = _one_error_line(result)
    assert "folder.svm" in line and "directory" in line
    assert "data:" not in result.stdout


def test_file_of_labels_only_is_an_error(tmp_path):
    _write(tmp_path / "labels.svm", "1\n0\n1\n0\n")
    result = _run_module("train", "labels.svm", "--model-dir", "m", *FAST, cwd=tmp_path)
    line = _one_error_line(result)
    assert "labels.svm" in line and "0 non-zeros" in line
    assert not (tmp_path / "m").exists()


def _large_heart_scale(directory, copies=100):
    """heart_scale repeated: --proba output far beyond a pipe's 64 KiB buffer."""
    with open(HEART_SCALE) as f:
        text = f.read()
    return _write(directory / "big.svm", text * copies)


def test_predict_to_a_closed_pipe_exits_0_quietly(tmp_path, trained):
    _large_heart_scale(tmp_path)
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c",
         '"%s" -m gluon_sparse predict big.svm --model-dir "%s" --out - --proba | head -1'
         % (sys.executable, trained)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr  # pipefail: gluon-sparse's own status
    # Nothing but --proba's note of the columns (no BrokenPipeError, no traceback).
    assert result.stderr.splitlines() == [
        "INFO gluon_sparse.cli: columns of stdout: probabilities of classes -1, 1"]
    assert len(result.stdout.splitlines()) == 1 and len(result.stdout.split()) == 2


@pytest.mark.parametrize("suffix, compress", [("", bytes), (".gz", gzip.compress),
                                              (".bz2", bz2.compress)])
def test_nan_in_a_predict_file_names_the_file_and_line(tmp_path, trained, suffix, compress):
    """Compressed too: the line was looked for in the compressed bytes, and not found."""
    name = "nan.svm" + suffix
    _write(tmp_path / name, compress(b"1 1:0.5 2:0.25\n-1 1:0.1 3:nan\n"))
    result = _run_module("predict", name, "--model-dir", str(trained), "--out", "p.txt",
                         cwd=tmp_path)
    line = _one_error_line(result)
    assert name + ", line 2" in line and "3:nan" in line
    assert not (tmp_path / "p.txt").exists()


def test_a_pipe_is_refused_by_name(tmp_path):
    """A pipe (bash's <(...), a FIFO) read as a file of size 0: 'holds no samples'."""
    fifo = tmp_path / "data.fifo"
    os.mkfifo(fifo)
    result = _run_module("train", str(fifo), "--model-dir", "m", *FAST, cwd=tmp_path)
    assert "data.fifo is a pipe, not a regular file" in _one_error_line(result)
    assert not (tmp_path / "m").exists()


def test_invalid_bytes_are_shown_escaped_once(tmp_path):
    _write(tmp_path / "bytes.svm", b"1 1:0.5\n0 2:0.\xfc5\n")
    result = _run_module("train", "bytes.svm", "--model-dir", "m", *FAST, cwd=tmp_path)
    line = _one_error_line(result)
    assert "bytes.svm, line 2" in line
    assert "'2:0.\\xfc5'" in line and "\\\\x" not in line, line


def test_version(tmp_path):
    import gluon_sparse
    result = _run_module("--version", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "gluon-sparse %s" % gluon_sparse.__version__


def test_batch_size_clipping_is_said_once(tmp_path):
    result = _run_module("train", HEART_SCALE, "--model-dir", "m", "--batch-size", "5000",
                         "--epochs", "3", "--hidden", "8", "--quiet", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # not once an epoch
    assert "--batch-size 5000" in result.stderr and "216 training samples" in result.stderr
    assert load(tmp_path / "m").batch_size == 216


def test_a_batch_too_wide_for_mxnet_is_refused_before_training(tmp_path):
    """300 rows of 2^24 features and --batch-size 200: MXNet refuses such a batch (2^31 - 1
    elements); it failed with MXNet's traceback after the data was read and the model
    built, not as one line."""
    _write(tmp_path / "wide.svm", "".join("%d %d:1\n" % (i % 2, 1 + (i * 7919) % 2 ** 24)
                                           for i in range(299)) + "1 16777216:1\n")
    result = _run_module("train", "wide.svm", "--model-dir", "m", "--batch-size", "200",
                         "--epochs", "1", "--quiet", cwd=tmp_path)
    line = _one_error_line(result)
    assert "--batch-size 200 with 16777216 features" in line and "<= 127" in line
    assert not (tmp_path / "m").exists()


def test_undefined_metrics_are_said_not_warned(tmp_path):
    # A held-out file of one class: AUC is not defined on it.
    with open(HEART_SCALE) as f:
        positives = [line for line in f if line.startswith("+1")][:20]
    _write(tmp_path / "one_class.svm", "".join(positives))
    result = _run_module("train", HEART_SCALE, "--model-dir", "m", "--test", "one_class.svm",
                         *FAST, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    assert "auc n/a" in result.stdout
    evaluated = _run_module("evaluate", "one_class.svm", "--model-dir", "m", cwd=tmp_path)
    assert evaluated.returncode == 0 and "Warning" not in evaluated.stderr, evaluated.stderr
    assert "auc n/a" in evaluated.stdout


def test_truncated_parameters_file_is_one_line_naming_it(tmp_path, trained):
    import shutil
    shutil.copytree(trained, tmp_path / "model")
    (params,) = (tmp_path / "model").rglob("network.params")
    params.write_bytes(params.read_bytes()[:100])
    result = _run_module("evaluate", HEART_SCALE, "--model-dir", "model", cwd=tmp_path)
    line = _one_error_line(result)
    assert "network.params" in line and "Traceback" not in line
    assert not line.rstrip().endswith(":"), line  # the cause follows, not a cut-off traceback


def _held_out_split(directory):
    """heart_scale's first 200 lines to train on, the other 70 to score the epochs on."""
    with open(HEART_SCALE) as f:
        lines = f.readlines()
    _write(directory / "train.svm", "".join(lines[:200]))
    _write(directory / "test.svm", "".join(lines[200:]))
    return directory / "train.svm", directory / "test.svm"


# A wide hidden layer and a large step size overfit heart_scale within a few epochs:
# the held-out log loss is lowest after the first or second epoch and rises after it.
OVERFIT = ["--epochs", "12", "--hidden", "64", "--lr", "0.05", "--quiet"]


def _held_out_log_loss(model_dir, test_file):
    from sklearn.metrics import log_loss
    X, y = load_svmlight_file(str(test_file), n_features=13)
    return log_loss(y, load(model_dir).predict_proba(X))


def test_early_stopping_keeps_the_best_epoch(tmp_path, capsys):
    train, test = _held_out_split(tmp_path)
    assert cli.main(["train", str(train), "--test", str(test), "--model-dir",
                     str(tmp_path / "best"), "--early-stopping", "3"] + OVERFIT) == 0
    out = capsys.readouterr().out
    losses = [epoch["log_loss"] for epoch in _epoch_metrics(out)]
    best = int(np.argmin(losses))
    # It stopped 3 epochs after the best one, and saved the best epoch's model:
    # scikit-learn's log loss of the saved model is the best epoch's printed one.
    assert len(losses) == best + 4 < 12, losses
    assert _held_out_log_loss(tmp_path / "best", test) == pytest.approx(losses[best], abs=1e-4)
    assert "keeping epoch %d" % (best + 1) in out
    last = out.strip().splitlines()[-1]
    assert last.startswith("summary: %d epochs (kept epoch %d) in " % (len(losses), best + 1))
    assert "log_loss %.4f" % losses[best] in last
    assert load(tmp_path / "best").n_iter_ == len(losses)


def test_without_early_stopping_the_last_epoch_is_saved_and_a_better_one_named(
        tmp_path, capsys, caplog):
    train, test = _held_out_split(tmp_path)
    with caplog.at_level("WARNING", logger="gluon_sparse.cli"):
        assert cli.main(["train", str(train), "--test", str(test), "--model-dir",
                         str(tmp_path / "last")] + OVERFIT) == 0
    losses = [epoch["log_loss"] for epoch in _epoch_metrics(capsys.readouterr().out)]
    assert len(losses) == 12 and min(losses) < losses[-1]
    assert _held_out_log_loss(tmp_path / "last", test) == pytest.approx(losses[-1], abs=1e-4)
    (warning,) = [r.getMessage() for r in caplog.records if "was best at epoch" in r.getMessage()]
    assert "epoch %d (%.4f;" % (int(np.argmin(losses)) + 1, min(losses)) in warning
    assert "--early-stopping" in warning


def test_early_stopping_on_regression_keeps_the_least_mse(tmp_path, capsys):
    from sklearn.metrics import mean_squared_error
    train, test = _held_out_split(tmp_path)
    assert cli.main(["train", str(train), "--test", str(test), "--model-dir", str(tmp_path / "r"),
                     "--task", "regression", "--early-stopping", "2"] + OVERFIT) == 0
    errors = [epoch["mse"] for epoch in _epoch_metrics(capsys.readouterr().out)]
    X, y = load_svmlight_file(str(test), n_features=13)
    saved = mean_squared_error(y, load(tmp_path / "r").predict(X))
    assert saved == pytest.approx(min(errors), abs=1e-4)


@pytest.mark.parametrize("flags", [["--validation-fraction", "0"], ["--multilabel",
                                                                    "--validation-fraction", "0"]])
def test_early_stopping_without_held_out_data_is_refused_before_training(tmp_path, flags):
    result = _run_module("train", HEART_SCALE, "--model-dir", "m", "--early-stopping", "2",
                         *flags, cwd=tmp_path)
    line = _one_error_line(result)
    assert "--early-stopping 2" in line and "--test" in line
    assert not (tmp_path / "m").exists()


def test_train_piped_into_head_still_saves_its_model(tmp_path):
    """The closed pipe ended train with status 0 at its next epoch line, before the save:
    now the rest of its output goes to /dev/null and the model is written."""
    command = ("%s -m gluon_sparse train %s --model-dir model --hidden 8 --epochs 5 --quiet "
               "| head -1; echo \"status ${PIPESTATUS[0]}\"" % (sys.executable, HEART_SCALE))
    result = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("data: ") and lines[-1] == "status 0", result
    assert "Traceback" not in result.stderr, result.stderr
    assert is_model_dir(tmp_path / "model") and load(tmp_path / "model").n_iter_ == 5


def test_a_multi_class_multilabel_estimator_is_evaluated_and_its_proba_refused(tmp_path, capsys):
    """evaluate died with an AttributeError traceback (no predict_proba), and predict --proba
    said it needed 'a classification model'."""
    from gluon_sparse.sklearn import SparseMultiLabelClassifier
    X, y = load_svmlight_file(HEART_SCALE)
    model = SparseMultiLabelClassifier(hidden_layer_sizes=(8,), num_sampled=1, max_iter=2,
                                       random_state=0).fit(X, y)
    model.save(tmp_path / "m")
    assert cli.main(["evaluate", HEART_SCALE, "--model-dir", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    assert out.split()[-2:] == ["accuracy", "%.4f" % accuracy_score(y, model.predict(X))], out
    for flags, message in ((["--proba"], "needs class probabilities; %s holds a "
                            "SparseMultiLabelClassifier" % (tmp_path / "m")),
                           (["--proba", "--top-k", "2"], "are two kinds of output")):
        assert cli.main(["predict", HEART_SCALE, "--model-dir", str(tmp_path / "m"), "--out",
                         str(tmp_path / "p.txt")] + flags) == 2
        assert message in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["foreign", "corrupt"])
def test_a_directory_with_a_current_file_that_is_no_model_fails_before_training(
        tmp_path, trained, kind):
    """A LevelDB directory (CURRENT, LOCK, MANIFEST-*) was taken for a model, and so was a
    model whose CURRENT is damaged: every epoch trained, then the save failed."""
    import shutil
    target = tmp_path / "store"
    if kind == "foreign":
        target.mkdir()
        _write(target / "CURRENT", "MANIFEST-000001\n")
        _write(target / "MANIFEST-000001", "keep me\n")
        message = "besides a CURRENT file it holds MANIFEST-000001"
    else:
        shutil.copytree(trained, target)
        _write(target / "CURRENT", "not a version\n")
        message = "CURRENT is corrupt"
    before = sorted(p.name for p in target.iterdir())
    result = _run_module("train", HEART_SCALE, "--model-dir", "store", *FAST, cwd=tmp_path)
    line = _one_error_line(result)
    assert message in line, line
    assert "epoch" not in result.stdout and "data:" not in result.stdout
    assert sorted(p.name for p in target.iterdir()) == before


def test_label_and_flag_errors_name_where_and_which(tmp_path):
    # A class label that is not an integer: the file and line, also of a second DATA file.
    _write(tmp_path / "a.svm", "".join("%d %d:1\n" % (i % 2, i % 5 + 1) for i in range(30)))
    _write(tmp_path / "b.svm", "".join("%d %d:1\n" % (i % 2, i % 5 + 1) for i in range(10))
           + "1.5 2:1\n")
    line = _one_error_line(_run_module("train", "a.svm", "b.svm", "--model-dir", "m", *FAST,
                                       cwd=tmp_path))
    assert "b.svm, line 11: label 1.5 is not a class label" in line, line
    # A held-out share that leaves too few samples to train on: the flag is named (it was
    # scikit-learn's "The train_size = 1 should be greater or equal to ...").
    _write(tmp_path / "c.svm", "".join("%d %d:1\n" % (i % 2, i % 5 + 1) for i in range(10)))
    line = _one_error_line(_run_module("train", "c.svm", "--model-dir", "m",
                                       "--validation-fraction", "0.9", *FAST, cwd=tmp_path))
    assert "--validation-fraction 0.9 left 1 of the 10 samples" in line, line
    # --zero-based without DATA was silently ignored (the reference dataset is a matrix).
    line = _one_error_line(_run_module("train", "--model-dir", "m", "--zero-based", "true",
                                       cwd=tmp_path))
    assert "--zero-based applies to LibSVM files" in line, line
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("multilabel", [False, True])
def test_an_index_too_large_for_memory_is_named_before_the_model_is_built(tmp_path, multilabel):
    """A stray feature index or label id sets the model's width: it ended in a MemoryError
    traceback (or the OOM killer) instead of a line naming the file and line."""
    if multilabel:
        text = "".join("%d 1:1 2:0.5\n" % (i % 2) for i in range(20)) + "99999999999 1:1\n"
        flags, message = ["--multilabel"], "line 21: label id 99999999999 makes the model"
    else:
        text = "".join("%d 1:1 2:0.5\n" % (i % 2) for i in range(20)) + "1 99999999999:1\n"
        flags, message = [], "line 21: feature index 99999999999 makes the model"
    _write(tmp_path / "wide.svm", text)
    line = _one_error_line(_run_module("train", "wide.svm", "--model-dir", "m", *flags, *FAST,
                                       cwd=tmp_path))
    assert "wide.svm, " + message in line and "GB of memory are available" in line, line
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("header, message", [
    ("3 5000000000000 4", "line 1: the header '3 5000000000000 4' declares 5000000000000 features"),
    ("3 8 5000000000000", "line 1: the header '3 8 5000000000000' declares 5000000000000 labels"),
    # Past int64: a traceback (scipy's OverflowError) before.
    ("3 99999999999999999999 4", "line 1: the header '3 99999999999999999999 4' declares a size "
                                 "above 2^53")])
def test_an_xc_header_too_wide_is_named_on_its_line(tmp_path, header, message):
    # The width came from the header, but the message blamed a data line's index (on the
    # line before it: the header was counted as a row).
    _write(tmp_path / "wide.xc", header + "\n0 0:1 3:1\n1,2 1:1\n3 2:1\n")
    line = _one_error_line(_run_module("train", "wide.xc", "--model-dir", "m", "--multilabel",
                                       *FAST, cwd=tmp_path))
    assert "wide.xc, " + message in line, line
    assert not (tmp_path / "m").exists()


def test_an_output_in_a_directory_it_cannot_write_is_refused_before_predicting(tmp_path,
                                                                              monkeypatch):
    # The file is replaced by a rename in its directory: a writable file in a read-only
    # directory failed after the whole prediction, naming a temporary file. (Tests run
    # as root, for whom access() says yes: the answer of a read-only directory is given.)
    from gluon_sparse.cli import _errors, _files
    out = tmp_path / "pred.txt"
    out.write_text("")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: (
        False if os.path.realpath(path) == str(tmp_path) else real_access(path, mode)))
    with pytest.raises(_errors.InputError, match="pred.txt: its directory .* is not writable"):
        _files.check_output_file(str(out))


def test_an_output_link_into_a_missing_directory_is_named(tmp_path):
    from gluon_sparse.cli import _errors, _files
    link = tmp_path / "preds.txt"
    os.symlink(str(tmp_path / "missing" / "preds.txt"), str(link))
    with pytest.raises(_errors.InputError, match="it links to .*missing/preds.txt, whose "
                                                 "directory does not exist"):
        _files.check_output_file(str(link))


def test_predict_warns_where_a_python_models_index_base_is_a_guess(tmp_path, caplog):
    # A model trained on a matrix records no index base: 'auto' read a zero-based file
    # without feature 0 as one-based, every column one off, and said nothing (Python's
    # predict(path) warns).
    import scipy.sparse as sp
    from sklearn.datasets import dump_svmlight_file
    from gluon_sparse.sklearn import SparseMLPClassifier
    rng = np.random.default_rng(0)
    X = sp.random(40, 12, density=0.4, format="csr", random_state=0, dtype=np.float32).tolil()
    X[:, 0] = 0
    X = X.tocsr()
    X.eliminate_zeros()
    y = rng.integers(0, 2, 40)
    SparseMLPClassifier(hidden_layer_sizes=(4,), max_iter=1).fit(X, y).save(tmp_path / "m")
    dump_svmlight_file(X, y, str(tmp_path / "t.svm"), zero_based=True)
    with caplog.at_level("WARNING"):
        assert cli.main(["predict", str(tmp_path / "t.svm"), "--model-dir", str(tmp_path / "m"),
                         "--out", str(tmp_path / "p.txt")]) == 0
    assert any("index base is unknown; it was read as one-based" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_a_tie_with_an_earlier_epoch_is_not_reported_as_better(tmp_path, caplog):
    # 'accuracy was best at epoch 1 (0.0000; 0.0000 at epoch 2)': test labels the
    # training never saw score 0 every epoch.
    _write(tmp_path / "train.svm", "".join("%d 1:%d 2:0.5\n" % (i % 2, i % 3) for i in range(40)))
    _write(tmp_path / "test.svm", "".join("%d 1:%d 2:0.5\n" % (5 + i % 2, i % 3)
                                          for i in range(10)))
    with caplog.at_level("WARNING"):
        assert cli.main(["train", str(tmp_path / "train.svm"), "--test", str(tmp_path / "test.svm"),
                         "--model-dir", str(tmp_path / "m"), "--epochs", "2", "--hidden", "4",
                         "--quiet"]) == 0
    assert not any("was best at epoch" in r.getMessage() for r in caplog.records)


def test_train_notes_test_labels_the_training_never_saw(tmp_path, capsys):
    # Epoch lines showed accuracy 0.000 with auc and log_loss n/a, and nothing said why
    # (0..1 in the test file against 5..6 in the training file).
    _write(tmp_path / "train.svm", "".join("%d 1:%d 2:0.5\n" % (5 + i % 2, i % 3)
                                           for i in range(40)))
    _write(tmp_path / "test.svm", "".join("%d 1:%d 2:0.5\n" % (i % 2, i % 3) for i in range(10)))
    assert cli.main(["train", str(tmp_path / "train.svm"), "--test", str(tmp_path / "test.svm"),
                     "--model-dir", str(tmp_path / "m"), "--epochs", "1", "--hidden", "4",
                     "--quiet"]) == 0
    assert "note: 10 of 10 samples have labels the model never saw (e.g. 0; its classes: 5, 6)" \
        in capsys.readouterr().out


# ------------------------------------------------ a new user's real LibSVM data
@pytest.mark.parametrize("compress, kind, suffix", [(gzip.compress, "gzip", ".gz"),
                                                    (bz2.compress, "bzip2", ".bz2")])
def test_a_compressed_file_without_its_suffix_is_named_as_such(tmp_path, trained, capsys,
                                                               compress, kind, suffix):
    """A gzip file named train.txt: the parser called its bytes 'invalid label
    '\\x1f\\x8b...'', which said nothing of compression."""
    _write(tmp_path / "data.txt", compress(open(HEART_SCALE, "rb").read()))
    for command in (["train", str(tmp_path / "data.txt"), "--model-dir", str(tmp_path / "m")],
                    ["predict", str(tmp_path / "data.txt"), "--model-dir", str(trained),
                     "--out", str(tmp_path / "p.txt")],
                    ["evaluate", str(tmp_path / "data.txt"), "--model-dir", str(trained)]):
        assert cli.main(command) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "invalid label" not in err, err
        assert ("data.txt looks %s-compressed" % kind) in err, err
        assert ("rename it to *%s" % suffix) in err, err
    assert not (tmp_path / "m").exists() and not (tmp_path / "p.txt").exists()
    from gluon_sparse.data import LibSVMStream
    with pytest.raises(ValueError, match="data.txt looks %s-compressed" % kind):
        next(iter(LibSVMStream(str(tmp_path / "data.txt"), batch_size=10, num_features=13)))


def test_the_optimizers_offered_are_those_accepted_and_each_trains(tmp_path, capsys):
    """--help and the error listed adamax and sparseadamax, which train then refused."""
    from gluon_sparse.cli import build_parser
    train_help = next(action for action in build_parser()._subparsers._group_actions[0]
                      .choices["train"]._actions if "--optimizer" in action.option_strings)
    offered = train_help.help.split("one of ")[1].split(" (default")[0].split(", ")
    for refused in ("adamax", "test", "groupadagrad"):
        assert refused not in offered
        assert cli.main(["train", HEART_SCALE, "--model-dir", str(tmp_path / "m"),
                         "--optimizer", refused]) == 2
        err = capsys.readouterr().err
        assert "%r cannot train these networks" % refused in err, err
        assert err.split("choose from ")[1].split(" (see")[0].split(", ") == offered
    assert cli.main(["train", HEART_SCALE, "--model-dir", str(tmp_path / "m"), "--optimizer",
                     "nosuch"]) == 2
    assert capsys.readouterr().err.split("choose from ")[1].split(" (see")[0].split(", ") \
        == offered
    assert "sparseadam" in offered and "sgd" in offered and "adagrad" in offered
    for name in offered:
        # sparseadamax only with an epsilon (without one its weights become NaN).
        params = ["--optimizer-param", "epsilon=1e-8"] if name == "sparseadamax" else []
        assert cli.main(["train", HEART_SCALE, "--model-dir", str(tmp_path / name),
                         "--optimizer", name, "--epochs", "1", "--hidden", "4",
                         "--quiet"] + params) == 0
        assert load(tmp_path / name).optimizer == name
    capsys.readouterr()
    assert cli.main(["train", HEART_SCALE, "--model-dir", str(tmp_path / "m"), "--optimizer",
                     "sparseadamax"]) == 2
    out, err = capsys.readouterr()
    assert "data:" not in out and "needs --optimizer-param epsilon=1e-8" in err, err
    # The combinations the estimators refuse: before the data is read, in flags.
    for name, instead in (("adagrad", "sparseadagrad"), ("nag", "sparsenag")):
        assert cli.main(["train", HEART_SCALE, "--model-dir", str(tmp_path / "m"),
                         "--optimizer", name, "--alpha", "0.01"]) == 2
        out, err = capsys.readouterr()
        assert "data:" not in out and "--optimizer %s with --alpha 0.01" % name in err, err
        assert "use --optimizer %s" % instead in err, err


def test_an_xc_file_without_multilabel_says_to_pass_it(tmp_path, trained, capsys):
    """An extreme-classification file given to train without --multilabel: the parser's
    "invalid feature '13'" on line 1 said nothing of the header or of --multilabel."""
    _write(tmp_path / "xc.txt", "3 13 4\n0,1 0:1 3:0.5\n2 1:1\n3 2:1 4:1\n")
    for command in (["train", str(tmp_path / "xc.txt"), "--model-dir", str(tmp_path / "m")],
                    ["evaluate", str(tmp_path / "xc.txt"), "--model-dir", str(trained)]):
        assert cli.main(command) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "xc.txt, line 1: " in err, err
        assert "extreme-classification header" in err and "train --multilabel" in err, err
    assert not (tmp_path / "m").exists()
    # Another parse error on line 1 gets no such hint.
    _write(tmp_path / "bad.txt", "1 3:oops\n")
    assert cli.main(["train", str(tmp_path / "bad.txt"), "--model-dir", str(tmp_path / "m")]) == 2
    assert "--multilabel" not in capsys.readouterr().err
    assert cli.main(["train", "--multilabel", str(tmp_path / "xc.txt"), "--model-dir",
                     str(tmp_path / "m"), "--hidden", "4", "--epochs", "1", "--quiet",
                     "--validation-fraction", "0"]) == 0


def test_predict_proba_says_which_class_each_column_is(tmp_path, trained):
    """--proba wrote one probability a class with nothing saying which class a column is;
    the note goes to stderr, and the output keeps one row of numbers a sample."""
    for out in ("p.txt", "-"):
        result = _run_module("predict", HEART_SCALE, "--model-dir", str(trained), "--out", out,
                             "--proba", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert ("columns of %s: probabilities of classes -1, 1"
                % ("stdout" if out == "-" else out)) in result.stderr
        text = result.stdout if out == "-" else (tmp_path / out).read_text()
        rows = np.array([line.split() for line in text.splitlines()], dtype=float)
        assert rows.shape == (270, 2)
        np.testing.assert_allclose(rows.sum(axis=1), 1, atol=1e-5)
    result = _run_module("predict", HEART_SCALE, "--model-dir", str(trained), "--out", "-",
                         cwd=tmp_path)
    assert result.returncode == 0 and "columns" not in result.stderr


def test_predict_and_evaluate_take_the_index_base_of_a_python_model(tmp_path, trained, capsys,
                                                                    caplog):
    """A model trained on a matrix records no index base: the command line could only
    guess it (and warn), with no flag to say it; a flag that contradicts a recorded base
    is refused by name."""
    import scipy.sparse as sp
    from sklearn.datasets import dump_svmlight_file
    X = sp.random(60, 12, density=0.4, format="csr", random_state=1, dtype=np.float32).tolil()
    X[:, 0] = 0  # a zero-based file without feature 0: 'auto' reads it one column off
    X = X.tocsr()
    X.eliminate_zeros()
    y = np.arange(60) % 2
    model = SparseMLPClassifier(hidden_layer_sizes=(4,), max_iter=2, random_state=0).fit(X, y)
    model.save(tmp_path / "m")
    dump_svmlight_file(X, y, str(tmp_path / "t.svm"), zero_based=True)
    out = tmp_path / "p.txt"
    with caplog.at_level("WARNING"):
        assert cli.main(["predict", str(tmp_path / "t.svm"), "--model-dir", str(tmp_path / "m"),
                         "--out", str(out), "--proba", "--zero-based", "true"]) == 0
        assert cli.main(["evaluate", str(tmp_path / "t.svm"), "--model-dir", str(tmp_path / "m"),
                         "--zero-based", "true"]) == 0
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.records
    np.testing.assert_allclose(np.loadtxt(out), model.predict_proba(X), atol=1e-5)
    printed = capsys.readouterr().out.split()
    assert printed[printed.index("accuracy") + 1] == "%.4f" % model.score(X, y)
    # The CLI's model records one-based (heart_scale): true contradicts it, false agrees.
    for flag, accepted in (("true", False), ("false", True), ("auto", True)):
        for command in (["evaluate", HEART_SCALE], ["predict", HEART_SCALE, "--out", str(out)]):
            code = cli.main(command + ["--model-dir", str(trained), "--zero-based", flag])
            assert code == (0 if accepted else 2)
            if not accepted:
                err = capsys.readouterr().err
                assert ("--zero-based true contradicts the model in %s" % trained) in err, err
                assert "one-based indices (--zero-based false)" in err, err
    assert cli.main(["predict", HEART_SCALE, "--model-dir", str(trained), "--out", str(out),
                     "--zero-based", "maybe"]) == 2
    assert "--zero-based" in capsys.readouterr().err


def _with_unseen_feature(path, lines, index):
    """``lines`` with feature ``index`` appended to every other one (a word training never
    saw): half the rows, one value each."""
    return _write(path, "".join(line + (" %d:1\n" % index if i % 2 else "\n")
                                for i, line in enumerate(lines)))


def _beyond_width_warnings(caplog):
    return [r.getMessage() for r in caplog.records if "beyond the model's" in r.getMessage()]


def test_features_beyond_the_models_width_are_ignored_with_one_warning(tmp_path, trained,
                                                                       capsys, caplog):
    """A test file with a feature index past the training files' ('feature index 20 is out
    of range for num_features=13') could not be predicted on, evaluated or used as --test:
    as LIBLINEAR's predict, such features (never seen in training) are dropped, with one
    warning a file."""
    lines = open(HEART_SCALE).read().splitlines()
    test = _with_unseen_feature(tmp_path / "te.txt", lines[200:], 20)
    X, y = load_svmlight_file(HEART_SCALE)
    model = load(trained)
    expected = ("te.txt: 35 values in 35 of 70 rows have feature indices beyond the model's 13 "
                "features (one-based indices 1..13; the largest here is 20): they are ignored, "
                "as features the training never saw")
    out = tmp_path / "p.txt"
    with caplog.at_level("WARNING"):
        assert cli.main(["predict", str(test), "--model-dir", str(trained), "--out", str(out),
                         "--proba"]) == 0
        assert [w.split("/")[-1] for w in _beyond_width_warnings(caplog)] == [expected]
        np.testing.assert_allclose(np.loadtxt(out), model.predict_proba(X[200:]), atol=1e-5)
        caplog.clear()
        capsys.readouterr()
        assert cli.main(["evaluate", str(test), "--model-dir", str(trained)]) == 0
        assert len(_beyond_width_warnings(caplog)) == 1
        printed = capsys.readouterr().out.split()
        assert printed[printed.index("accuracy") + 1] == "%.4f" % model.score(X[200:], y[200:])
        caplog.clear()
        _write(tmp_path / "tr.txt", "\n".join(lines[:200]) + "\n")
        assert cli.main(["train", str(tmp_path / "tr.txt"), "--test", str(test), "--model-dir",
                         str(tmp_path / "m")] + FAST) == 0
        assert [w.split("/")[-1] for w in _beyond_width_warnings(caplog)] == [expected]
        # A zero-based model names its width and the index as its files write them.
        caplog.clear()
        assert cli.main(["train", HEART_SCALE, "--zero-based", "true", "--model-dir",
                         str(tmp_path / "z")] + FAST) == 0
        assert cli.main(["evaluate", str(test), "--model-dir", str(tmp_path / "z")]) == 0
        assert "beyond the model's 14 features (zero-based indices 0..13; the largest here is " \
               "20)" in _beyond_width_warnings(caplog)[0]
        # A file within the width: no warning.
        caplog.clear()
        assert cli.main(["evaluate", HEART_SCALE, "--model-dir", str(trained)]) == 0
        assert not _beyond_width_warnings(caplog)


def test_optimizer_param_reaches_the_optimizer_and_the_saved_model(tmp_path, capsys):
    """--optimizer-param momentum=0.9: what MLPClassifier's momentum is, under MXNet's name;
    trains as the estimator given optimizer_params does, and a misspelt name is refused
    before the data is read."""
    args = ["train", HEART_SCALE, "--optimizer", "sparsesgd", "--epochs", "2", "--hidden", "4",
            "--lr", "0.05", "--quiet", "--validation-fraction", "0"]
    assert cli.main(args + ["--model-dir", str(tmp_path / "m"), "--optimizer-param",
                            "momentum=0.9", "--optimizer-param", "clip_gradient=5"]) == 0
    model = load(tmp_path / "m")
    assert model.optimizer_params == {"momentum": 0.9, "clip_gradient": 5}
    assert cli.main(args + ["--model-dir", str(tmp_path / "plain")]) == 0
    X, _ = load_svmlight_file(HEART_SCALE)
    assert not np.array_equal(model.predict_proba(X), load(tmp_path / "plain").predict_proba(X))
    capsys.readouterr()
    for bad, message in (("momentun=0.9", "'momentun' is not a parameter of optimizer "
                                          "'sparsesgd'"),
                         ("momentum", "expected NAME=VALUE"),
                         ("wd=0.1", "use alpha"),
                         ("momentum=fast", "'momentum' must be a number")):
        assert cli.main(args + ["--model-dir", str(tmp_path / "x"), "--optimizer-param",
                                bad]) == 2
        out, err = capsys.readouterr()
        assert message in err and "data:" not in out, err
