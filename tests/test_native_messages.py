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
