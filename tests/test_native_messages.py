"""What the import says when the native libraries are not where Python looks."""
import os
import shutil
import subprocess
import sys

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
    assert "another directory" in message and "build_ext --inplace" in message


def test_missing_library_outside_a_checkout_says_how_to_rebuild(monkeypatch, tmp_path):
    monkeypatch.setattr(_native, "PACKAGE_DIR", str(tmp_path / "site-packages" / "gluon_sparse"))
    monkeypatch.setattr(_native, "OPS_LIBRARY", str(tmp_path / "libgluon_sparse_ops.so"))
    monkeypatch.setattr(_native, "_ops_loaded", False)
    with pytest.raises(ImportError, match=r"was not built.*pip install --force-reinstall"):
        _native.load_ops()


def test_cleared_error_messages_stop_leaking_and_errors_stay_reported():
    """lib_api keeps every reported message and leaks a copy of each one at every later
    call; clear_error_messages() empties the list and the next error is still reported."""
    import mxnet as mx

    def rss_mb():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / 2**20

    def provoke():
        with pytest.raises(mx.base.MXNetError, match="var has shape"):
            mx.nd.gluon_sparse_adam_update(
                mx.nd.ones((2, 2)), mx.nd.ones((2, 2)).tostype("row_sparse"), mx.nd.ones((2, 2)),
                mx.nd.ones((3, 2)), out=mx.nd.ones((2, 2)), lr=0.1)
            mx.nd.waitall()

    def calls_growth():
        w, g, m = (mx.nd.ones((3, 2)) for _ in range(3))
        start = rss_mb()
        for _ in range(4000):
            mx.nd.gluon_sparse_sgd_mom_multi_update(w, g, m, out=[w], num_weights=1, lr="0.1",
                                                    momentum=0.9)
        mx.nd.waitall()
        return rss_mb() - start

    _native.load_ops()
    for _ in range(8):
        provoke()
    assert calls_growth() > 8  # the leak this works around (~1.5 KB a call here)
    mx.nd.waitall()
    assert _native.clear_error_messages() >= 8
    calls_growth()  # the allocator settles
    assert calls_growth() < 2
    provoke()
