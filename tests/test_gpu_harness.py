"""The standalone GPU harness (benchmarks/gpu/) on a machine without a GPU.

Its CUDA build must compile (when nvcc is installed) and export the entry
points run_harness.py binds, and its NumPy references, against which a GPU
run compares the CUDA kernels bitwise, must themselves be bitwise equal to
the CPU operators: ``numpy_step`` to ``gs_adam_update`` and
``NumpyDeferredAdam`` to ``gs_adam_deferred_update`` / ``_flush`` over 300
steps with a learning-rate schedule, weight decay, clipping, rows deferred for
~250 steps and rows never touched.
"""
import copy
import ctypes
import importlib.util
import os
import shutil
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest

import gluon_sparse  # noqa: F401  (loads the operator library)

HARNESS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "benchmarks",
                           "gpu")


def _load_harness():
    spec = importlib.util.spec_from_file_location(
        "run_harness", os.path.join(HARNESS_DIR, "run_harness.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


harness = _load_harness()


def _bits(array):
    return array.view({4: np.int32, 8: np.int64}[array.dtype.itemsize])


def _assert_bitwise(got, want, what):
    assert got.dtype == want.dtype, what
    np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=what)


@pytest.fixture(scope="module")
def built_library(tmp_path_factory):
    """The harness built by build.sh with its default architectures (about 10 s)."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH: the CUDA harness cannot be compiled on this machine")
    out = tmp_path_factory.mktemp("gpu_harness") / "libadam_harness.so"
    subprocess.run(["sh", os.path.join(HARNESS_DIR, "build.sh"), str(out)], check=True,
                   capture_output=True)
    return str(out)


@pytest.mark.slow
def test_harness_compiles_and_binds(built_library):
    lib = harness.load_library(path=built_library)
    for name in ("gs_harness_adam_update_f32", "gs_harness_adam_update_f64",
                 "gs_harness_adam_deferred_update_f32", "gs_harness_adam_deferred_update_f64",
                 "gs_harness_adam_deferred_catch_up_f32", "gs_harness_adam_deferred_catch_up_f64"):
        assert getattr(lib, name).restype is ctypes.c_int


@pytest.mark.slow
def test_entry_points_report_errors_as_text(built_library):
    """Without a GPU, checks before any launch and failed launches come back as messages."""
    lib = harness.load_library(path=built_library)
    error = ctypes.create_string_buffer(512)
    history = np.zeros((4, 3), np.float32)
    # weight, mean, var, last_step, history, capacity, num_rows, cols, rows, n, step,
    # beta1, beta2, epsilon, stream, error, error_len
    args = [None] * 4 + [history.ctypes.data, 4, 1, 8, None, 1]
    rc = lib.gs_harness_adam_deferred_catch_up_f32(*args, 9, 0.9, 0.999, 1e-8, None, error,
                                                   len(error))
    assert rc == 1 and b"step 9 does not fit a history of 4 records" in error.value
    rc = lib.gs_harness_adam_deferred_catch_up_f32(*args, 3, 0.9, 0.999, 1e-8, None, error,
                                                   len(error))
    assert rc == 1 and error.value.startswith(b"CUDA error: "), error.value
    rc = lib.gs_harness_adam_deferred_update_f64(
        *([None] * 4), history.ctypes.data, 4, None, None, 0, 1, 8, 0, *([0.1] * 7), 0, 1, None,
        None, error, len(error))
    assert rc == 1 and b"step 0 is not a positive integer" in error.value


def test_help_explains_every_option():
    out = subprocess.run([sys.executable, os.path.join(HARNESS_DIR, "run_harness.py"), "--help"],
                         check=True, capture_output=True, text=True).stdout
    for text in ("--quick", "--gaps", "--grad-rows", "--skip-correctness", "bitwise",
                 "adam_deferred_kernels.cu", "SparseAdam", "flush"):
        assert text in out


@pytest.mark.parametrize("dtype, cols, clip", [("float32", 5, -1.0), ("float64", 3, 0.3)])
def test_numpy_step_is_the_eager_cpu_operator(dtype, cols, clip):
    rng = np.random.default_rng(11)
    rows = 30
    w = rng.standard_normal((rows, cols)).astype(dtype)
    m, v = np.zeros_like(w), np.zeros_like(w)
    nd = [mx.nd.array(a, dtype=dtype) for a in (w, m, v)]
    for t in range(1, 41):
        indices = np.sort(rng.choice(rows, 4, replace=False)).astype(np.int64)
        values = rng.standard_normal((4, cols)).astype(dtype)
        lr, wd = harness.lr_schedule(t), 0.01
        harness.numpy_step(w, m, v, values, indices, lr, wd=wd, rescale_grad=0.5,
                           clip_gradient=clip)
        grad = mx.nd.sparse.row_sparse_array((values, indices), shape=(rows, cols), dtype=dtype)
        mx.nd.gs_adam_update(nd[0], grad, nd[1], nd[2], out=nd[0], lr=lr, wd=wd,
                             rescale_grad=0.5, clip_gradient=clip)
    for got, want, name in zip(nd, (w, m, v), ("weight", "mean", "var")):
        _assert_bitwise(got.asnumpy(), want, name)


# (dtype, rows, cols: 16 takes the CPU operator's vector path, 5 and 3 its scalar
#  tail, steps, gradient rows of a step, wd of step t, clip_gradient)
DEFERRED_CASES = {
    "f32-wd0": ("float32", 80, 16, 300, harness.deferred_rows_of_step, lambda t: 0.0, -1.0),
    "f32-wd-from-step-100-clip": ("float32", 80, 5, 300, harness.deferred_rows_of_step,
                                  lambda t: 0.0 if t < 100 else 0.01, 0.05),
    "f64-wd-clip": ("float64", 80, 3, 300, harness.deferred_rows_of_step, lambda t: 0.02, 0.3),
    "f32-denormal-means": ("float32", 16, 5, 1000, harness.long_absence_rows_of_step,
                           lambda t: 0.0, 0.5),
}


@pytest.mark.parametrize("case", list(DEFERRED_CASES))
def test_numpy_deferred_reference_is_the_cpu_operator(case):
    dtype, rows, cols, steps, rows_of_step, wd_of, clip = DEFERRED_CASES[case]
    rng = np.random.default_rng(5)
    init = rng.standard_normal((rows, cols)).astype(dtype)
    init[-1, :2] = [0.0, -0.0]
    reference = harness.NumpyDeferredAdam(init)
    w_eager, m_eager, v_eager = init.copy(), np.zeros_like(init), np.zeros_like(init)
    weight = mx.nd.array(init, dtype=dtype)
    mean, var = mx.nd.zeros((rows, cols), dtype=dtype), mx.nd.zeros((rows, cols), dtype=dtype)
    last_step = mx.nd.zeros((rows,), dtype=np.int64)
    history = mx.nd.zeros((steps + 1, 3), dtype=np.float32)
    longest_absence = 0
    for t in range(1, steps + 1):
        indices = rows_of_step(rng, rows, t, steps)
        values = rng.standard_normal((len(indices), cols)).astype(dtype)
        lr, wd = harness.lr_schedule(t), wd_of(t)
        if case == "f32-denormal-means" and t == steps:
            # Rows 0-3 come back after ~1000 steps: their replayed means are denormals.
            probe = copy.deepcopy(reference)
            probe.catch_up(indices, t - 1)
            assert (np.abs(probe.mean[indices]) < np.finfo(np.float32).tiny).all()
        if len(indices):
            longest_absence = max(longest_absence,
                                  int((t - 1 - reference.last_step[indices]).max()))
        reference.update(values, indices, t, lr, wd=wd, clip_gradient=clip)
        harness.numpy_step(w_eager, m_eager, v_eager, values, indices, lr, wd=wd,
                           clip_gradient=clip)
        grad = mx.nd.sparse.row_sparse_array((values, indices), shape=(rows, cols), dtype=dtype)
        mx.nd.gs_adam_deferred_update(weight, grad, mean, var, last_step, history, out=weight,
                                      lr=lr, step=t, wd=wd, clip_gradient=clip, catch_up=1)
        if t % 25 == 0:
            _assert_bitwise(weight.asnumpy()[indices], reference.weight[indices],
                            "gradient rows at step %d" % t)
    np.testing.assert_array_equal(last_step.asnumpy(), reference.last_step)
    assert (reference.last_step[rows * 9 // 10:] == 0).all()  # never touched
    assert longest_absence >= 240  # rows deferred for hundreds of steps
    mx.nd.gs_adam_deferred_flush(weight, mean, var, last_step, history, out=weight, step=steps)
    reference.flush()
    for got, want, eager, name in zip((weight, mean, var),
                                      (reference.weight, reference.mean, reference.var),
                                      (w_eager, m_eager, v_eager), ("weight", "mean", "var")):
        _assert_bitwise(got.asnumpy(), want, name + " vs the CPU operator")
        _assert_bitwise(want, eager, name + " vs numpy_step on every row")
    assert (last_step.asnumpy() == steps).all()
