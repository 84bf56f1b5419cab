"""Compile a small C++ driver against the operator library's headers, for tests.

The replay hooks of the optimizer rules are header code; a test drives them
next to the step-by-step replay from a shared object built here the way the
library builds its sources (-O3, C++17), with the host SIMD dispatch
(host_simd.cc) and the geometric decay (geometric_decay.cc) linked in.
"""
import ctypes
import os
import shutil
import subprocess

import pytest

OPS = os.path.join(os.path.dirname(__file__), "..", "gluon_sparse", "csrc", "ops")


def compile_driver(source_path, out_path):
    """``source_path`` (C++) compiled into the shared object ``out_path`` and loaded with
    ctypes; None without a C++ compiler.

    ``gluon_sparse_force_simd_path(int)`` is typed; the caller types its own entry points.
    """
    compiler = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")
    if compiler is None:
        return None
    built = subprocess.run([compiler, "-O3", "-std=c++17", "-fPIC", "-shared", "-I", OPS,
                            str(source_path), os.path.join(OPS, "host_simd.cc"),
                            os.path.join(OPS, "geometric_decay.cc"), "-o", str(out_path)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    lib = ctypes.CDLL(str(out_path))
    lib.gluon_sparse_force_simd_path.argtypes = [ctypes.c_int]
    return lib


def build_driver(tmp_path_factory, name, source):
    """``source`` (the text of a driver) compiled by :func:`compile_driver`; skips the test
    without a C++ compiler."""
    out = tmp_path_factory.mktemp(name)
    (out / "driver.cc").write_text(source)
    lib = compile_driver(out / "driver.cc", out / "driver.so")
    if lib is None:
        pytest.skip("no C++ compiler to build the replay driver")
    return lib
