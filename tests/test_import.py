"""Import-time checks: a wrong platform gives an ImportError that names the fix."""
import ctypes
import sys

import mxnet as mx
import numpy as np
import pytest

from gluon_sparse import _compat, _native


def test_numpy_too_new_names_the_pin(monkeypatch):
    monkeypatch.setattr(np, "__version__", "1.26.4")
    with pytest.raises(ImportError, match=r"numpy 1\.26\.4.*numpy>=1\.21,<1\.24"):
        _compat.import_mxnet()


def test_missing_mxnet_names_both_wheels(monkeypatch):
    monkeypatch.setitem(sys.modules, "mxnet", None)
    with pytest.raises(ImportError, match=r"mxnet==1\.9\.1.*mxnet-cu112==1\.9\.1"):
        _compat.import_mxnet()


def test_wrong_mxnet_version_is_refused(monkeypatch):
    monkeypatch.setattr(mx, "__version__", "2.0.0")
    with pytest.raises(ImportError, match=r"MXNet 1\.9\.x, found 2\.0\.0"):
        _compat.import_mxnet()


def test_missing_operator_library_says_how_to_build(monkeypatch, tmp_path):
    monkeypatch.setattr(_native, "OPS_LIBRARY", str(tmp_path / "libgluon_sparse_ops.so"))
    monkeypatch.setattr(_native, "_ops_loaded", False)
    with pytest.raises(ImportError, match=r"missing.*build_ext --inplace"):
        _native.load_ops()


def test_library_built_for_another_mxnet_is_not_loaded(monkeypatch):
    monkeypatch.setattr(_native, "_ops_loaded", False)
    monkeypatch.setattr(mx, "__version__", "1.9.0")
    with pytest.raises(ImportError, match=r"built for MXNet 1\.9\.1 but MXNet 1\.9\.0"):
        _native.load_ops()


def test_library_initialize_rejects_other_mxnet_versions():
    """The C++ entry point itself refuses an MXNet it was not compiled against."""
    lib = ctypes.CDLL(_native.OPS_LIBRARY)
    assert _native.build_info()["mxnet_version"] == mx.__version__
    assert lib.initialize(10800) == 0  # MX_FAIL
    major, minor, patch = (int(p) for p in mx.__version__.split("."))
    assert lib.initialize(major * 10000 + minor * 100 + patch) == 1  # MX_SUCCESS


def test_operator_library_loads_into_mxnet():
    _native.load_ops()
    _native.load_ops()  # idempotent
    assert _native._ops_loaded


@pytest.mark.parametrize("env, expected", [
    ({"MXNET_OMP_MAX_THREADS": "3", "OMP_NUM_THREADS": "2"}, 3),
    ({"OMP_NUM_THREADS": "5"}, 5),
    ({}, None),  # every CPU of the affinity mask
])
def test_operators_choose_their_openmp_team(env, expected):
    """MXNet gives its engine workers nprocs/2 threads on x86; the operators ask for their own."""
    import os
    import subprocess
    clean = {k: v for k, v in os.environ.items()
             if k not in ("MXNET_OMP_MAX_THREADS", "OMP_NUM_THREADS")}
    code = "from gluon_sparse import _native; print(_native.build_info()['omp_threads'])"
    out = subprocess.run([sys.executable, "-c", code], env=dict(clean, **env), check=True,
                         capture_output=True, text=True).stdout
    assert int(out) == (len(os.sched_getaffinity(0)) if expected is None else expected)
