"""Fault injection for the data cache, the parser's inputs and the launcher.

Faults are injected, not simulated: writers are SIGKILLed at random points of
a save, bytes of cache entries are flipped, readers race writers, launchers
are SIGKILLed at random points of a job's life, compressed files are cut at
random offsets. Each test bounds its own time; together they run in well
under a minute. (Model directories: tests/test_faults_model_dir.py.)
"""
import gzip
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import numpy as np
import pytest
import scipy.sparse as sp

from gluon_sparse.data import LibSVMDataset, LibSVMStream, load_libsvm
from gluon_sparse.data import cache as data_cache

PYTHON = sys.executable
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_env(**extra):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(extra)
    return env


# ------------------------------------------------------------------ data cache

MATRIX_SOURCE = textwrap.dedent("""
    def reference_matrix(rows=40000, seed=0):
        \"\"\"A matrix big enough that saving it takes a while (several MB per array).\"\"\"
        rng = np.random.default_rng(seed)
        X = sp.random(rows, 5000, density=4e-3, format="csr", dtype=np.float32,
                      random_state=rng)
        X.sort_indices()
        y = rng.integers(0, 2, size=rows).astype(np.float64)
        return X, y
""")
exec(MATRIX_SOURCE)  # the writer processes build the same matrix from the same source


def assert_whole_or_none(loaded, X, y):
    """A cache load gives the entry exactly, or nothing: never other arrays."""
    if loaded is None:
        return False
    X_loaded, y_loaded, zero_based = loaded
    assert X_loaded.shape == X.shape and zero_based is True
    np.testing.assert_array_equal(X_loaded.indptr, X.indptr)
    np.testing.assert_array_equal(X_loaded.indices, X.indices)
    np.testing.assert_array_equal(X_loaded.data, X.data)
    np.testing.assert_array_equal(y_loaded, y)
    return True


# One process imports gluon-sparse once and forks a writer for each command, so
# that a writer can be SIGKILLed many times without paying MXNet's import each time.
WRITER = textwrap.dedent("""
    import os, sys, time
    import numpy as np, scipy.sparse as sp
    from gluon_sparse.data import cache
""") + MATRIX_SOURCE + textwrap.dedent("""
    X, y = reference_matrix()
    cache_dir = sys.argv[1]
    print("ready", flush=True)
    child = None
    for line in sys.stdin:
        if child is not None:
            os.waitpid(child, 0)  # killed by the test: reap it, so its pid reads as dead
        mode = line.strip()
        child = os.fork()
        if child == 0:
            try:
                i = 0
                while True:
                    if mode == "rewrite":  # one entry, replaced again and again
                        cache._discard(os.path.join(cache_dir, "entry"), "rewritten by the test")
                        cache.save_cached("entry", cache_dir, X, y, True, ["x"])
                        time.sleep(0.02)  # let readers find the entry whole, sometimes
                    else:
                        cache.save_cached("k%d-%d" % (os.getpid(), i), cache_dir, X, y, True,
                                          ["x"])
                    i += 1
            finally:
                os._exit(0)
        print(child, flush=True)
    if child is not None:
        os.waitpid(child, 0)
""")


class Writers:
    """The forking writer: ``start(mode)`` returns the pid of a new writer."""

    def __init__(self, cache_dir):
        self.process = subprocess.Popen([PYTHON, "-c", WRITER, cache_dir], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=child_env())
        assert self.process.stdout.readline().strip() == "ready"

    def start(self, mode):
        self.process.stdin.write(mode + "\n")
        self.process.stdin.flush()
        return int(self.process.stdout.readline())

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=60)


@pytest.mark.slow
def test_sigkilled_cache_writers_leave_whole_entries_and_removable_staging(tmp_path):
    X, y = reference_matrix()
    cache_dir = str(tmp_path / "cache")
    os.makedirs(cache_dir)
    rng = random.Random(0)
    writers = Writers(cache_dir)
    checked = set()

    def staging():
        return [n for n in os.listdir(cache_dir) if n.startswith(".staging-")]

    try:
        # Eight writers killed, and more until the last kill lands mid-save: a writer's
        # first save removes the staging its killed predecessor left, so only the last
        # kill's can show that kills hit saves, and give the cleanup below work.
        kills = 0
        while kills < 8 or not staging():
            assert kills < 40, "no kill of 40 landed inside a save"
            pid = writers.start("new")
            time.sleep(rng.uniform(0.05, 0.5))  # anywhere in a save (the writer saves non-stop)
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)  # the kill has landed: a save it cut stays cut
            kills += 1
            for name in set(os.listdir(cache_dir)) - checked:
                if not name.startswith("."):
                    assert assert_whole_or_none(data_cache.load_cached(name, cache_dir), X, y)
                    checked.add(name)
    finally:
        writers.close()
    assert staging()  # the last kill cut a save
    # The next save removes every dead writer's staging directory.
    data_cache.save_cached("last", cache_dir, X[:10], y[:10], True, ["x"])
    assert [n for n in os.listdir(cache_dir) if n.startswith(".")] == []


@pytest.mark.slow
def test_a_reader_racing_a_rewriting_writer_never_gets_a_mix(tmp_path):
    X, y = reference_matrix()
    cache_dir = str(tmp_path / "cache")
    os.makedirs(cache_dir)
    writers = Writers(cache_dir)
    pid = writers.start("rewrite")
    hits = misses = 0
    try:
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            if assert_whole_or_none(data_cache.load_cached("entry", cache_dir), X, y):
                hits += 1
            else:
                misses += 1
    finally:
        os.kill(pid, signal.SIGKILL)
        writers.close()
    assert hits > 0  # the race was run, not avoided
    assert hits + misses > 10


def test_random_byte_flips_in_a_cache_entry_are_always_caught(tmp_path):
    path = tmp_path / "train.libsvm"
    rng = np.random.default_rng(3)
    path.write_text("".join("%d %s\n" % (i % 3, " ".join(
        "%d:%.4f" % (j, rng.random()) for j in sorted(rng.choice(300, 6, replace=False)) if j))
        for i in range(500)))
    cache_dir = str(tmp_path / "cache")
    reference = LibSVMDataset(str(path), cache=cache_dir)
    (key,) = os.listdir(cache_dir)
    entry = os.path.join(cache_dir, key)
    X, y, zero_based = data_cache.load_cached(key, cache_dir)
    pristine = {name: open(os.path.join(entry, name), "rb").read() for name in os.listdir(entry)}
    for trial in range(60):
        name = sorted(pristine)[trial % len(pristine)]
        raw = bytearray(pristine[name])
        for at in rng.integers(0, len(raw), size=int(rng.integers(1, 4))):
            raw[at] ^= int(rng.integers(1, 256))
        os.makedirs(entry, exist_ok=True)
        for other, content in pristine.items():
            with open(os.path.join(entry, other), "wb") as f:
                f.write(bytes(raw) if other == name else content)
        assert data_cache.load_cached(key, cache_dir) is None, (name, trial)
        ds = LibSVMDataset(str(path), cache=cache_dir)  # parsed again and re-cached
        assert (ds.data != reference.data).nnz == 0
        np.testing.assert_array_equal(ds.label, reference.label)


# ------------------------------------------------------------------ parser inputs

def test_gz_cut_at_random_offsets_is_always_a_named_error(tmp_path):
    text = b"".join(b"%d 1:%d 7:0.25\n" % (i % 2, i) for i in range(20000))
    compressed = gzip.compress(text)
    rng = random.Random(1)
    for cut in sorted(rng.sample(range(1, len(compressed)), 12)) + [len(compressed) - 1]:
        path = tmp_path / ("cut%d.libsvm.gz" % cut)
        path.write_bytes(compressed[:cut])
        with pytest.raises(ValueError, match=r"cut%d\.libsvm\.gz, line \d+: compressed data"
                                             % cut):
            load_libsvm(str(path))
        stream = LibSVMStream(str(path), batch_size=512, num_features=8, chunk_bytes=8192,
                              prefetch=1)
        rows = 0
        with pytest.raises(ValueError, match=r"cut%d\.libsvm\.gz, line \d+: compressed" % cut):
            for data, _ in stream:
                rows += data.shape[0]
        assert rows < 20000


# ------------------------------------------------------------------ launcher

def processes_with(token):
    """Pids of live processes whose environment holds ``token`` (the job's marker)."""
    found = []
    needle = token.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as f:
                if needle not in f.read():
                    continue
            with open("/proc/%s/stat" % entry) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        found.append(int(entry))
    return found


WORKER = ("import subprocess, sys, time\n"
          "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
          "print('ready', flush=True)\n"
          "time.sleep(120)\n")


@pytest.mark.slow
def test_sigkill_loop_on_the_launcher_leaves_nothing_running():
    # Killed at random points: while starting processes, while the scheduler and
    # server import MXNet, while the job runs. Every process of the job (marked by
    # a variable in its environment, which children and grandchildren inherit)
    # must be gone afterwards, the watchdog included.
    rng = random.Random(2)
    for delay in [rng.uniform(0.0, 0.3), rng.uniform(0.3, 1.5), rng.uniform(1.5, 4.0)]:
        token = "GLUON_SPARSE_FAULT_TOKEN=%s" % uuid.uuid4().hex
        name, value = token.split("=")
        launch = subprocess.Popen(
            [PYTHON, "-m", "gluon_sparse.distributed.launcher", "-n", "2", "-s", "1",
             "--grace-period", "1", "--", PYTHON, "-c", WORKER],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=child_env(**{name: value}), start_new_session=True)
        try:
            time.sleep(delay)
            launch.kill()
            launch.wait()
            deadline = time.monotonic() + 40
            left = processes_with(token)
            while left and time.monotonic() < deadline:
                time.sleep(0.1)
                left = processes_with(token)
            assert left == [], "left running after SIGKILL at %.2f s: %s" % (delay, left)
        finally:
            for pid in processes_with(token):
                os.kill(pid, signal.SIGKILL)
