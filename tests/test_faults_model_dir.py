"""Model directories under faults: SIGKILL of a saving process, readers racing a writer.

A process saving a model is killed at random points and right after each
commit point of a save (via ``gluon_sparse._fileio._fault_hook``); after each
kill ``load`` must give one of the two models whole, and the next save must
remove what the killed one left. A reader loading in a loop while another
process saves two different models alternately must never fail nor see one
model's classes with the other's weights. The saving processes run
tests/model_dir_worker.py.
"""
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from gluon_sparse.sklearn import SparseMLPClassifier, is_model_dir, load

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "model_dir_worker.py"
X = sp.random(150, 20000, density=0.002, format="csr", random_state=0, dtype=np.float32)


def _worker(*args, **kwargs):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, str(WORKER)] + [str(a) for a in args], env=env,
                            stdout=subprocess.PIPE, text=True, **kwargs)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Two models of the same shape, told apart by their classes: ``{classes: (pickle, proba)}``."""
    directory = tmp_path_factory.mktemp("models")
    y = np.arange(X.shape[0]) % 3
    found = {}
    for name, labels, seed in (("a", ["a", "b", "c"], 0), ("b", ["x", "y", "z"], 1)):
        model = SparseMLPClassifier(hidden_layer_sizes=(16,), max_iter=2, random_state=seed)
        model.fit(X, np.array(labels)[y])
        path = directory / (name + ".pkl")
        path.write_bytes(pickle.dumps(model))
        found[tuple(labels)] = (path, model.predict_proba(X), model)
    return found


def assert_whole_model(path, models):
    """``load(path)`` is one of the two models, classes and weights from the same one."""
    model = load(path)
    classes = tuple(model.classes_)
    assert classes in models, classes
    np.testing.assert_array_equal(model.predict_proba(X), models[classes][1])
    return classes


def assert_no_leftovers(path):
    """Only the pointer, the writers' lock, the current and the previous version remain."""
    entries = sorted(os.listdir(path))
    versions = [name for name in entries if name.startswith("v-")]
    assert set(entries) - set(versions) <= {"CURRENT", ".lock"}, entries
    assert 1 <= len(versions) <= 2, entries  # the current one, and at most the previous
    current = (path / "CURRENT").read_text().strip()
    assert current in versions, (current, entries)  # the pointer names a version that is there
    assert not [name for name in os.listdir(path.parent) if name.startswith("." + path.name)]


def test_sigkill_at_random_points_and_at_each_commit_point(tmp_path, models):
    (a_pickle, _, model_a), (b_pickle, _, _) = models[("a", "b", "c")], models[("x", "y", "z")]
    entries, expected = [], {}
    for i in range(6):  # random points of a loop of saves of B, A, B, ...
        entries.append({"dir": str(tmp_path / ("random%d" % i)), "stage": None, "max_delay": 0.8})
    for stage, after in (("version-renamed", ("a", "b", "c")),
                         ("pointer-replaced", ("x", "y", "z")),
                         ("cleaned", ("x", "y", "z"))):  # replacing A by B, killed at `stage`
        entries.append({"dir": str(tmp_path / ("replace-" + stage)), "stage": stage})
        expected[entries[-1]["dir"]] = after
    for entry in entries:
        model_a.save(entry["dir"])
    for stage in ("pointer-replaced", "cleaned"):  # the first save of a new directory
        entries.append({"dir": str(tmp_path / ("first-" + stage)), "stage": stage})
        expected[entries[-1]["dir"]] = ("x", "y", "z")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"a": str(a_pickle), "b": str(b_pickle), "seed": 0,
                                "entries": entries}))
    worker = _worker("kill", plan)
    out, _ = worker.communicate(timeout=300)
    assert worker.returncode == 0
    ends = [json.loads(line) for line in out.splitlines()]
    assert [end["end"] for end in ends] == ["killed"] * len(entries)
    # What a kill can leave at points too short to hit at random: a half-written
    # pointer's temporary file, a half-written version, a version never named.
    (Path(entries[0]["dir"]) / ".CURRENT.tmp-x1").write_text("v-0")
    (Path(entries[0]["dir"]) / ".tmp-x2").mkdir()
    (Path(entries[0]["dir"]) / "v-000999").mkdir()
    for entry in entries:
        path = Path(entry["dir"])
        classes = assert_whole_model(path, models)
        if entry["dir"] in expected:
            assert classes == expected[entry["dir"]], entry
        model_a.save(path)  # cleans what the killed save left
        assert_no_leftovers(path)
        assert assert_whole_model(path, models) == ("a", "b", "c")


def test_reader_never_sees_a_failed_or_mixed_model_while_another_process_saves(tmp_path, models):
    (a_pickle, _, _), (b_pickle, _, _) = models[("a", "b", "c")], models[("x", "y", "z")]
    path = tmp_path / "model"
    writer = _worker("alternate", a_pickle, b_pickle, path)
    try:
        assert writer.stdout.readline().strip() == "ready"
        first_version = int((path / "CURRENT").read_text().strip()[2:])
        loads, failures, seen = 0, [], set()
        # Until the writer has replaced the model many times during the reads.
        while loads < 40 or int((path / "CURRENT").read_text().strip()[2:]) < first_version + 10:
            assert loads < 3000 and writer.poll() is None, "the writer stalled or died"
            try:
                seen.add(assert_whole_model(path, models))
            except Exception as err:  # noqa: BLE001 -- every failure counts
                failures.append(repr(err))
            loads += 1
    finally:
        writer.kill()
        writer.wait()
    assert failures == []
    assert seen == set(models)  # both models were read


def test_flat_model_directory_of_format_1_loads_and_is_replaced(tmp_path, models):
    (_, proba_a, model_a), (_, _, model_b) = models[("a", "b", "c")], models[("x", "y", "z")]
    path = tmp_path / "flat"
    model_a.save(path)
    version = path / (path / "CURRENT").read_text().strip()
    meta = json.loads((version / "estimator.json").read_text())
    meta.update(format_version=1, estimator="SparseMLPClassifier")
    (path / "estimator.json").write_text(json.dumps(meta))
    os.replace(version / "network.params", path / "network.params")
    os.remove(version / "estimator.json")
    os.rmdir(version)
    os.remove(path / "CURRENT")
    # A hidden copy that the flat format's saves could leave behind when killed.
    (tmp_path / ".flat.old-x1" / "model").mkdir(parents=True)
    assert is_model_dir(path)
    np.testing.assert_array_equal(load(path).predict_proba(X), proba_a)
    model_b.save(path)
    # The flat files stay as the previous version until the next save.
    assert (path / "estimator.json").exists()
    assert assert_whole_model(path, models) == ("x", "y", "z")
    model_b.save(path)
    assert_no_leftovers(path)
    assert not (path / "estimator.json").exists()


def test_save_refuses_files_and_foreign_directories_before_writing(tmp_path, models):
    model = models[("a", "b", "c")][2]
    (tmp_path / "file").write_text("x")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("keep me")
    for target in ("file", "notes"):
        assert not is_model_dir(tmp_path / target)
        with pytest.raises(FileExistsError, match="not a gluon-sparse model directory"):
            model.save(tmp_path / target)
    assert (tmp_path / "notes" / "todo.txt").read_text() == "keep me"
    assert sorted(os.listdir(tmp_path / "notes")) == ["todo.txt"]
