"""The native libraries: what the import says when they are not where Python looks, and
how their operators' error messages reach MXNet."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from gluon_sparse import _native

REPO = os.path.dirname(os.path.dirname(os.path.abspath(_native.__file__)))


def test_source_tree_without_built_library_says_what_is_imported(tmp_path):
    """Python started in a checkout whose libraries were never built (e.g. after a
    non-editable ``pip install .``) imports the checkout, not the installed package:
    the error says so, names the tree, and says how to get out of it."""
    checkout = tmp_path / "checkout"
    shutil.copytree(os.path.join(REPO, "gluon_sparse"), checkout / "gluon_sparse",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    shutil.copy(os.path.join(REPO, "setup.py"), checkout / "setup.py")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = "import gluon_sparse._native as n; n.load_ops()"
    proc = subprocess.run([sys.executable, "-c", code], cwd=checkout, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith("ImportError")
    assert "source tree at %s" % (checkout / "gluon_sparse") in message
    assert "keep your scripts, outside" in message and "build_ext --inplace" in message


def test_missing_library_outside_a_checkout_says_how_to_rebuild(monkeypatch, tmp_path):
    monkeypatch.setattr(_native, "PACKAGE_DIR", str(tmp_path / "site-packages" / "gluon_sparse"))
    monkeypatch.setattr(_native, "OPS_LIBRARY", str(tmp_path / "libgluon_sparse_ops.so"))
    monkeypatch.setattr(_native, "_ops_loaded", False)
    with pytest.raises(ImportError, match=r"was not built.*pip install --force-reinstall"):
        _native.load_ops()


def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def _shape_error():
    """An error the library reports from shape inference, on the calling thread."""
    import mxnet as mx
    with pytest.raises(mx.base.MXNetError) as info:
        mx.nd.gluon_sparse_adam_update(
            mx.nd.ones((2, 2)), mx.nd.ones((2, 2)).tostype("row_sparse"), mx.nd.ones((2, 2)),
            mx.nd.ones((3, 2)), out=mx.nd.ones((2, 2)), lr=0.1)
        mx.nd.waitall()
    return str(info.value)


def _compute_error(column):
    """An error the library reports from a compute function, on an engine thread."""
    import mxnet as mx
    x = mx.nd.sparse.csr_matrix((np.array([1.0], "float32"), np.array([column]), np.array([0, 1])),
                                shape=(1, 10))
    with pytest.raises(mx.base.MXNetError) as info:
        mx.nd.gluon_sparse_dot(x, mx.nd.ones((10, 3))).asnumpy()
    return str(info.value)


def test_each_error_reports_its_own_message_once():
    """MXNet 1.9.1's lib_api kept every message for good, so every later error also
    repeated all the earlier ones; the library hands each message to MXNet once."""
    _native.load_ops()
    for column in (10, 11, 12):
        message = _compute_error(column)
        assert message.count("is outside [0, 10)") == 1, message
        assert "column index %d " % column in message
    message = _shape_error()
    assert "var has shape" in message and "is outside" not in message
    assert message.count("Extension Traceback") == 1 and "[1]" not in message


def test_calls_after_errors_do_not_leak():
    """lib_api leaked a copy of every message ever reported at every later operator
    call: 59 MB over these 4000 calls after these eight errors, with the previous build."""
    import mxnet as mx
    _native.load_ops()
    for column in range(10, 14):
        _shape_error()
        _compute_error(column)
    w, g, m = (mx.nd.ones((3, 2)) for _ in range(3))

    def growth():
        start = _rss_mb()
        for _ in range(4000):
            mx.nd.gluon_sparse_sgd_mom_multi_update(w, g, m, out=[w], num_weights=1, lr="0.1",
                                                    momentum=0.9)
        mx.nd.waitall()
        return _rss_mb() - start

    growth()  # the allocator settles
    assert growth() < 2


def test_errors_on_several_threads_keep_their_own_messages():
    """Python threads calling the library at once: each error names its own input."""
    import threading
    _native.load_ops()
    failures = []

    def run(column):
        try:
            for _ in range(20):
                message = _compute_error(column)
                if message.count("is outside") != 1 or "column index %d " % column not in message:
                    failures.append(message)
        except BaseException as error:  # noqa: BLE001 - reported below
            failures.append(repr(error))

    threads = [threading.Thread(target=run, args=(column,)) for column in (10, 20, 30)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures[:2]


def test_operators_report_errors_where_mxnet_reads_them():
    """lib_api's MX_ERROR_MSG writes where the library's _msgSize/_msgGet do not look
    (error_messages.h): an operator using it would fail without saying why."""
    ops = os.path.join(REPO, "gluon_sparse", "csrc", "ops")
    users = [name for name in sorted(os.listdir(ops))
             if not name.startswith("error_messages")
             and "MX_ERROR_MSG" in open(os.path.join(ops, name), errors="replace").read()]
    assert users == []


@pytest.mark.parametrize("name", ["sparseadam", "sparsesgd", "sparsermsprop"])
def test_a_dtype_mismatch_is_named_by_dtype_names(name):
    """The operators said 'grad has dtype code 1 but weight has 0' (MXNet's type flags)."""
    import mxnet as mx

    import gluon_sparse.optimizer  # noqa: F401  registers the optimizers
    options = {"momentum": 0.9} if name == "sparsesgd" else {}
    optimizer = mx.optimizer.create(name, learning_rate=0.1, **options)
    weight = mx.nd.ones((8, 3))
    state = optimizer.create_state(0, weight)
    grad = mx.nd.sparse.row_sparse_array((np.ones((2, 3)), np.array([1, 2], dtype=np.int64)),
                                         shape=(8, 3), dtype="float64")
    with pytest.raises(mx.base.MXNetError, match="grad has dtype float64 but weight has float32"):
        optimizer.update(0, weight, grad, state)
        mx.nd.waitall()
