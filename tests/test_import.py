"""Importing gluon-sparse: a wrong platform gives an ImportError that names the fix, and a
right one registers an operator library that computes what MXNet's own operators compute.

The platform cases run ``import gluon_sparse`` in a fresh interpreter (numpy or
MXNet replaced before the import, or a copy of the package without its built
libraries), as a user's process would meet them.
"""
import ctypes
import json
import os
import shutil
import subprocess
import sys
import textwrap

import mxnet as mx
import numpy as np
import pytest

import gluon_sparse
from gluon_sparse import _native

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(gluon_sparse.__file__)))


def import_in_subprocess(prelude="", path=CHECKOUT):
    """Run ``prelude`` then ``import gluon_sparse`` in a fresh interpreter with ``path`` first.

    Returns
    -------
    (str or None, list of str)
        The ImportError's message (None if the import succeeded) and the
        modules among mxnet, gluon_sparse.nn that were imported by then.
    """
    code = textwrap.dedent("""
        import json, sys
        %s
        try:
            import gluon_sparse
            error = None
        except ImportError as err:
            error = str(err)
        print(json.dumps([error, sorted(m for m in ("mxnet", "gluon_sparse.nn")
                                        if sys.modules.get(m) is not None)]))
    """) % textwrap.dedent(prelude)
    env = dict(os.environ, PYTHONPATH=path)
    # (in the first directory of ``path``: ``-c`` puts the working directory first on sys.path)
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=path.split(os.pathsep)[0],
                         check=True, capture_output=True, text=True).stdout
    return tuple(json.loads(out.strip().splitlines()[-1]))


def test_numpy_too_new_names_the_pin_before_mxnet_is_imported():
    error, imported = import_in_subprocess("import numpy; numpy.__version__ = '1.26.4'")
    assert error == ("gluon-sparse needs MXNet 1.9.1, which cannot be imported with numpy 1.26.4 "
                     "(numpy >= 1.24 removed aliases MXNet uses). "
                     "Fix: pip install 'numpy>=1.21,<1.24'")
    assert imported == []  # refused before MXNet's own confusing AttributeError


def test_missing_mxnet_names_both_wheels():
    error, _ = import_in_subprocess("import sys; sys.modules['mxnet'] = None")
    assert error.startswith("gluon-sparse needs MXNet 1.9.1, which is not installed. Fix: ")
    assert "'gluon-sparse[cpu]' (CPU, mxnet==1.9.1)" in error
    assert "'gluon-sparse[cu112]' (CUDA 11.2, mxnet-cu112==1.9.1)" in error


def test_wrong_mxnet_version_is_refused(tmp_path):
    fake = tmp_path / "mxnet"
    fake.mkdir()
    (fake / "__init__.py").write_text("__version__ = '2.0.0'\n")
    error, imported = import_in_subprocess(path=os.pathsep.join([str(tmp_path), CHECKOUT]))
    assert error.startswith("gluon-sparse is built for MXNet 1.9.x, found 2.0.0. Fix: pip install")
    assert "gluon_sparse.nn" not in imported


def test_missing_operator_library_says_how_to_build(tmp_path):
    """A source checkout that was never built: the package without lib/*.so."""
    shutil.copytree(os.path.join(CHECKOUT, "gluon_sparse"), tmp_path / "gluon_sparse",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__", "csrc"))
    error, _ = import_in_subprocess(path=str(tmp_path))
    library = str(tmp_path / "gluon_sparse" / "lib" / "libgluon_sparse_ops.so")
    assert error.startswith("gluon-sparse's native library %s is missing: it was not built."
                            % library)
    assert "python setup.py build_ext --inplace" in error


def test_library_built_for_another_mxnet_is_not_loaded():
    error, _ = import_in_subprocess("import mxnet; mxnet.__version__ = '1.9.0'")
    assert error.startswith("gluon-sparse's operator library was built for MXNet 1.9.1 but "
                            "MXNet 1.9.0 is installed. Rebuild it:")


def test_library_initialize_rejects_other_mxnet_versions():
    """The C++ entry point itself refuses an MXNet it was not compiled against."""
    lib = ctypes.CDLL(_native.OPS_LIBRARY)
    assert _native.build_info()["mxnet_version"] == mx.__version__
    assert lib.initialize(10800) == 0  # MX_FAIL
    major, minor, patch = (int(p) for p in mx.__version__.split("."))
    assert lib.initialize(major * 10000 + minor * 100 + patch) == 1  # MX_SUCCESS


OPERATORS = ("gluon_sparse_adam_update", "gluon_sparse_adam_deferred_update",
             "gluon_sparse_adam_deferred_flush", "gluon_sparse_dot")


def test_import_registers_the_operators_with_mxnet():
    code = textwrap.dedent("""
        import json
        import mxnet as mx
        names = %r
        before = [hasattr(mx.nd, n) or hasattr(mx.sym, n) for n in names]
        import gluon_sparse
        print(json.dumps([before, [hasattr(mx.nd, n) and hasattr(mx.sym, n) for n in names]]))
    """) % (OPERATORS,)
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=CHECKOUT),
                         check=True, capture_output=True, text=True).stdout
    before, after = json.loads(out.strip().splitlines()[-1])
    assert before == [False] * len(OPERATORS) and after == [True] * len(OPERATORS)


def test_loading_again_does_not_reload_the_library(monkeypatch):
    def reload(*args, **kwargs):
        raise AssertionError("mx.library.load called a second time")
    monkeypatch.setattr(mx.library, "load", reload)
    _native.load_ops()  # the import loaded it already


@pytest.mark.parametrize("wd, clip", [(0.0, -1.0), (0.01, 0.05)])
def test_adam_operator_computes_mxnet_standard_adam(wd, clip):
    """gluon_sparse_adam_update = MXNet's adam_update with the dense gradient (standard Adam)."""
    rng = np.random.default_rng(3)
    rows, cols = 20, 6
    ours = [mx.nd.array(rng.standard_normal((rows, cols))), mx.nd.zeros((rows, cols)),
            mx.nd.zeros((rows, cols))]
    theirs = [a.copy() for a in ours]
    lazy = [a.copy() for a in ours]
    absent = np.ones(rows, bool)
    for step in range(1, 11):
        indices = np.sort(rng.choice(rows, 5, replace=False))
        absent[indices] = False
        values = rng.standard_normal((5, cols)).astype(np.float32)
        grad = mx.nd.sparse.row_sparse_array((values, indices), shape=(rows, cols))
        scalars = dict(lr=0.01, wd=wd, rescale_grad=0.5, clip_gradient=clip)
        mx.nd.gluon_sparse_adam_update(ours[0], grad, ours[1], ours[2], out=ours[0], **scalars)
        mx.nd.adam_update(theirs[0], grad.tostype("default"), theirs[1], theirs[2],
                          out=theirs[0], **scalars)
        mx.nd.adam_update(lazy[0], grad, lazy[1], lazy[2], out=lazy[0], lazy_update=True,
                          **scalars)
    for got, want in zip(ours, theirs):
        np.testing.assert_allclose(got.asnumpy(), want.asnumpy(), rtol=1e-5, atol=1e-7)
    never = np.flatnonzero(absent)
    assert len(never)  # rows no step touched
    moved = np.abs(ours[0].asnumpy()[never] - lazy[0].asnumpy()[never]).max()
    if wd > 0:
        assert moved > 1e-4  # standard Adam decays absent rows; lazy Adam leaves them
    else:
        assert moved == 0.0  # zero gradient, zero state: no move either way


def test_sparse_dot_operator_computes_mxnet_sparse_dot():
    rng = np.random.default_rng(4)
    dense = rng.standard_normal((7, 50)).astype(np.float32) * (rng.random((7, 50)) < 0.1)
    x = mx.nd.array(dense).tostype("csr")
    weight = mx.nd.array(rng.standard_normal((50, 4)))
    got = mx.nd.gluon_sparse_dot(x, weight).asnumpy()
    np.testing.assert_allclose(got, mx.nd.sparse.dot(x, weight).asnumpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, dense @ weight.asnumpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("env, expected", [
    ({"MXNET_OMP_MAX_THREADS": "3", "OMP_NUM_THREADS": "2"}, 3),
    ({"OMP_NUM_THREADS": "5"}, 5),
    ({}, None),  # every CPU of the affinity mask
])
def test_operators_choose_their_openmp_team(env, expected):
    """MXNet gives its engine workers nprocs/2 threads on x86; the operators ask for their own."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("MXNET_OMP_MAX_THREADS", "OMP_NUM_THREADS")}
    code = "from gluon_sparse import _native; print(_native.build_info()['omp_threads'])"
    out = subprocess.run([sys.executable, "-c", code], env=dict(clean, PYTHONPATH=CHECKOUT, **env),
                         check=True, capture_output=True, text=True).stdout
    assert int(out) == (len(os.sched_getaffinity(0)) if expected is None else expected)
