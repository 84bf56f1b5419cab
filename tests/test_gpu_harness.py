"""The standalone GPU harness (benchmarks/gpu/harness) on a machine without a GPU.

- its NumPy references, against which a GPU run compares the CUDA kernels
  bitwise, are themselves bitwise equal to the CPU operators: ``numpy_step`` to
  ``gluon_sparse_adam_update`` and ``NumpyDeferredAdam`` to ``gluon_sparse_adam_deferred_update`` /
  ``_flush`` over 300 steps with a learning-rate schedule, weight decay,
  clipping, rows deferred for ~250 steps and rows never touched;
- its checks report a wrong result at its first differing position;
- its correctness drivers run end to end on a host stand-in of the CUDA
  library (NumPy behind the same entry points) and catch a wrong kernel;
- its command line parses and refuses bad sizes through the real parser;
- its CUDA build compiles (when nvcc is installed), exports the entry points
  the bindings declare, and returns errors as text without a GPU.
"""
import copy
import ctypes
import os
import shutil
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest

import gluon_sparse  # noqa: F401  (loads the operator library)
from benchmarks.gpu.harness import (bindings, cases, checks, cli, host_standin, reference,
                                    timing)


def _bits(array):
    return array.view({4: np.int32, 8: np.int64}[array.dtype.itemsize])


def _assert_bitwise(got, want, what):
    assert got.dtype == want.dtype, what
    np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=what)


@pytest.fixture
def torch():
    """PyTorch (CPU is enough), or the test is skipped."""
    return pytest.importorskip("torch")


# --- the CUDA build --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def built_library(tmp_path_factory):
    """The harness built by build.sh with its default architectures (about 10 s)."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH: the CUDA harness cannot be compiled on this machine")
    out = tmp_path_factory.mktemp("gpu_harness") / "libadam_harness.so"
    subprocess.run(["sh", bindings.BUILD_SCRIPT, str(out)], check=True, capture_output=True)
    return str(out)


@pytest.mark.slow
def test_harness_compiles_and_binds(built_library):
    lib = bindings.load_library(path=built_library)
    names = bindings.EAGER_ENTRY_POINTS + bindings.DEFERRED_ENTRY_POINTS
    assert len(set(names)) == 6
    for name in names:
        fn = getattr(lib, name)
        assert fn.restype is ctypes.c_int
        # error, error_len come last in every entry point
        assert fn.argtypes[-2:] == [ctypes.c_char_p, ctypes.c_int]


@pytest.mark.slow
def test_entry_points_report_errors_as_text(built_library):
    """Without a GPU, checks before any launch and failed launches come back as messages."""
    lib = bindings.load_library(path=built_library)
    error = ctypes.create_string_buffer(bindings.ERROR_BUFFER_BYTES)
    history = np.zeros((4, 3), np.float32)
    # weight, mean, var, last_step, history, capacity, num_rows, cols, rows, n, step,
    # beta1, beta2, epsilon, stream, error, error_len
    args = [None] * 4 + [history.ctypes.data, 4, 1, 8, None, 1]
    rc = lib.gluon_sparse_harness_adam_deferred_catch_up_f32(*args, 9, 0.9, 0.999, 1e-8, None,
                                                             error, len(error))
    assert rc == 1 and b"step 9 does not fit a history of 4 records" in error.value
    rc = lib.gluon_sparse_harness_adam_deferred_catch_up_f32(*args, 3, 0.9, 0.999, 1e-8, None,
                                                             error, len(error))
    assert rc == 1 and error.value.startswith(b"CUDA error: "), error.value
    rc = lib.gluon_sparse_harness_adam_deferred_update_f64(
        *([None] * 4), history.ctypes.data, 4, None, None, 0, 1, 8, 0, *([0.1] * 7), 0, 1, None,
        None, error, len(error))
    assert rc == 1 and b"step 0 is not a positive integer" in error.value


# --- the command line ------------------------------------------------------------------------

def test_defaults_time_a_million_rows_at_every_gap():
    args = cli.parse_args([])
    assert (args.rows, args.cols, args.grad_rows, args.repeat) == (1_000_000, 128, 640, 50)
    assert args.gaps == [0, 1, 10, 100, 1000]
    assert not (args.quick or args.skip_correctness or args.skip_benchmark or args.rebuild)


def test_quick_caps_the_sizes_but_keeps_explicit_gaps():
    args = cli.parse_args(["--quick"])
    assert (args.rows, args.repeat, args.gaps) == (100_000, 10, [0, 100])
    args = cli.parse_args(["--quick", "--rows", "20000", "--repeat", "99", "--gaps", "3", "7"])
    assert (args.rows, args.repeat, args.gaps) == (20_000, 10, [3, 7])


@pytest.mark.parametrize("argv, message", [
    (["--rows", "0"], "argument --rows: '0' is not a positive integer"),
    (["--grad-rows", "-5"], "argument --grad-rows: '-5' is not a positive integer"),
    (["--gaps", "1", "-1"], "argument --gaps: '-1' is not a non-negative integer"),
    (["--repeat", "ten"], "argument --repeat: invalid"),
    (["--rows", "1000"], "need (repeat + 2) x grad-rows = 33280 distinct rows, more than "
                         "--rows 1000"),
    (["--rows", "10000", "--grad-rows", "1000", "--repeat", "9"], "= 11000 distinct rows"),
])
def test_bad_sizes_are_refused_before_any_work(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_small_weights_are_accepted_when_nothing_is_timed():
    args = cli.parse_args(["--rows", "1000", "--skip-benchmark"])
    assert args.rows == 1000 and args.skip_benchmark


def test_help_explains_every_option_and_check():
    text = cli.build_parser().format_help()
    for action in cli.build_parser()._actions:
        for option in action.option_strings:
            assert option in text
    for subject in ("bitwise", "adam_deferred_kernels.cu", "SparseAdam", "flush", "denormals"):
        assert subject in text


def test_main_without_a_gpu_exits_with_the_reason(torch):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: main would run the whole harness")
    with pytest.raises(SystemExit, match="needs a CUDA GPU and PyTorch built with CUDA"):
        cli.main(["--quick"])


def test_a_failing_part_does_not_stop_the_ones_after_it(capsys):
    ran = []

    def fails():
        ran.append("second")
        raise AssertionError("weight differs at (3, 1)")
    failed = cli.run_each([("first", lambda: ran.append("first")), ("second", fails),
                           ("third", lambda: ran.append("third"))])
    assert ran == ["first", "second", "third"]
    assert failed == ["second"]
    captured = capsys.readouterr()
    assert "weight differs at (3, 1)" in captured.err  # the traceback
    assert "FAILED  second" in captured.out


# --- the checks' failure messages ------------------------------------------------------------

def test_assert_bitwise_reports_the_first_difference():
    want = np.arange(24, dtype=np.float32).reshape(4, 6)
    got = want.copy()
    got[3, 1] += 1
    got[2, 4] = np.nextafter(got[2, 4], np.float32(np.inf))  # one ulp
    with pytest.raises(AssertionError, match=r"^weight: 2 elements differ, first at \(2, 4\) "
                                             r"\(16\.000002 vs 16\.0\)$"):
        checks.assert_bitwise("weight", got, want)
    checks.assert_bitwise("weight", want.copy(), want)


def test_assert_bitwise_compares_bits_not_values():
    want = np.array([0.0, np.nan, 1.0])
    checks.assert_bitwise("same NaN", want.copy(), want)  # NaN == NaN bit for bit
    # x86's NaN of 0/0 (sign set) against CUDA's (0x7FFFFFFF): any NaN matches any NaN.
    x86_nan, cuda_nan = np.array([0xFFC00000, 0x7FFFFFFF], np.uint32).view(np.float32)
    checks.assert_bitwise("NaN payloads", np.array([cuda_nan, 1.0], np.float32),
                          np.array([x86_nan, 1.0], np.float32))
    with pytest.raises(AssertionError, match=r"1 elements differ, first at \(2,\) \(nan vs 1"):
        checks.assert_bitwise("NaN for a number", np.array([0.0, np.nan, np.nan]), want)
    with pytest.raises(AssertionError, match=r"1 elements differ, first at \(0,\)"):
        checks.assert_bitwise("signed zero", np.array([-0.0, np.nan, 1.0]), want)
    with pytest.raises(AssertionError, match="got float32 .*expected float64"):
        checks.assert_bitwise("dtype", want.astype(np.float32), want)
    with pytest.raises(AssertionError, match=r"got int64 \(2,\), expected int64 \(3,\)"):
        checks.assert_bitwise("last_step", np.zeros(2, np.int64), np.zeros(3, np.int64))


def test_assert_bitwise_accepts_tensors(torch):
    want = np.ones((3, 2), np.float64)
    got = torch.ones((3, 2), dtype=torch.float64)
    got[1, 1] = 2.0
    with pytest.raises(AssertionError, match=r"first at \(1, 1\) \(2\.0 vs 1\.0\)"):
        checks.assert_bitwise("mean", got, want)


def test_assert_only_rows_changed_names_the_first_foreign_row(torch):
    old = torch.zeros((10, 3))
    before = checks.tensor_bits(torch, old).clone()
    new = old.clone()
    new[2, 0] = 1.0  # in the gradient
    new[7, 2] = -0.0  # outside it: equal as a value, not as bits
    new[9, 1] = 5.0
    touched = torch.zeros(10, dtype=torch.bool)
    touched[2] = True
    with pytest.raises(AssertionError, match=r"^step 4, var: changed 2 row\(s\) not in its "
                                             r"gradient, first row 7$"):
        checks.assert_only_rows_changed(torch, "step 4, var:", before, new, touched)
    new[7, 2], new[9, 1] = 0.0, 0.0
    checks.assert_only_rows_changed(torch, "step 4, var:", before, new, touched)
    last_step = torch.zeros(10, dtype=torch.int64)
    moved = last_step.clone()
    moved[[2, 5]] = 4
    with pytest.raises(AssertionError, match="first row 5"):
        checks.assert_only_rows_changed(torch, "step 4, last_step:", last_step, moved, touched)


def test_expect_rejections_needs_the_right_error():
    def reject(message):
        def call():
            raise ValueError(message)
        return call
    checks.expect_rejections([("out of range", reject("index 10 is out of range [0, 10)"))])
    with pytest.raises(AssertionError, match=r"accepted a call that must fail \(read stale\)"):
        checks.expect_rejections([("out of range", reject("out of range")),
                                  ("read stale", lambda: None)])
    with pytest.raises(AssertionError, match="rejected with 'bad step', expected a message "
                                             "with 'does not fit'"):
        checks.expect_rejections([("does not fit", reject("bad step"))])
    with pytest.raises(TypeError):  # any other failure propagates as itself
        checks.expect_rejections([("out of range", lambda: None + 1)])


# --- the correctness drivers on a host stand-in of the library -----------------------------

SMALL_CASE = (np.float32, 100, 4, 60, cases.deferred_rows_of_step, lambda t: 0.01,
              {"clip_gradient": 0.5})


@pytest.mark.slow
def test_correctness_drivers_pass_on_the_host_standin(torch, capsys):
    """Every check of a GPU run, on PyTorch CPU tensors and NumPy behind the entry points."""
    lib = host_standin.HostStandIn()
    kernels = bindings.AdamKernels(lib, torch, device="cpu")
    checks.check_eager_correctness(kernels, torch, device="cpu")
    checks.check_deferred_correctness(lib, kernels, torch, device="cpu")
    report = capsys.readouterr().out.splitlines()
    assert len(report) == len(cases.EAGER_CASES) + 1 + len(cases.DEFERRED_CASES) + 1
    assert all(line.startswith("ok  ") for line in report)


class WritesAForeignRow(host_standin.HostStandIn):
    """A deferred update that also writes the last row (never in a gradient)."""

    @staticmethod
    def _deferred_update(dtype, weight, *args):
        rc = host_standin.HostStandIn._deferred_update(dtype, weight, *args)
        num_rows, cols = args[8], args[9]
        host_standin._view(weight, num_rows * cols, dtype)[-1] += 1
        return rc


class FlushForgetsRows(host_standin.HostStandIn):
    """A flush (catch-up of every row) that marks the rows up to date without replaying them."""

    @staticmethod
    def _catch_up(dtype, weight, mean, var, last_step, history, capacity, num_rows, cols, rows,
                  n, step, *args):
        if rows is None:
            host_standin._view(last_step, num_rows, np.int64)[:] = step
            return 0
        return host_standin.HostStandIn._catch_up(dtype, weight, mean, var, last_step, history,
                                                  capacity, num_rows, cols, rows, n, step,
                                                  *args)


class AcceptsUnsortedRows(host_standin.HostStandIn):
    @staticmethod
    def _eager(dtype, weight, mean, var, grad, indices, nnz, *args):
        rows = host_standin._view(indices, nnz, np.int64)
        if len(rows) > 1 and (np.diff(rows) < 0).any():
            return 0
        return host_standin.HostStandIn._eager(dtype, weight, mean, var, grad, indices, nnz,
                                               *args)


@pytest.mark.parametrize("lib, message", [
    (host_standin.HostStandIn(), None),
    (WritesAForeignRow(),
     r"^step 1, weight: changed 1 row\(s\) not in its gradient, first row 99$"),
    (FlushForgetsRows(), r"^weight after the flush vs the eager kernels \(float32, 100 x 4, "
                         r"wd 0.01..0.01, \{'clip_gradient': 0.5\}\): \d+ elements differ, "
                         r"first at \(\d+, 0\)"),
])
def test_deferred_check_catches_a_wrong_kernel(torch, lib, message, capsys):
    kernels = bindings.AdamKernels(host_standin.HostStandIn(), torch, device="cpu")
    if message is None:
        checks.check_deferred_case(lib, kernels, torch, 0, *SMALL_CASE, device="cpu")
        assert capsys.readouterr().out.startswith("ok  deferred bitwise equal")
    else:
        with pytest.raises(AssertionError, match=message):
            checks.check_deferred_case(lib, kernels, torch, 0, *SMALL_CASE, device="cpu")


def test_eager_check_catches_unsorted_indices_accepted(torch):
    kernels = bindings.AdamKernels(AcceptsUnsortedRows(), torch, device="cpu")
    with pytest.raises(AssertionError, match=r"accepted a call that must fail \(sorted and "
                                             r"unique\)"):
        checks.check_eager_correctness(kernels, torch, device="cpu")


# --- the timing tables -----------------------------------------------------------------------

def test_eager_table_reports_bandwidth_against_the_copy():
    lines = timing.eager_table("title", [("copy", 0.5), ("kernel", 2.0)], 1_000_000, 0.5)
    assert lines[:3] == ["", "title", ""]
    # 24 bytes x 10^6 elements in 2 ms = 12 GB/s; the copy took a quarter of the time
    assert lines[-2:] == ["| copy | 0.500 ms | 48 | 100% |", "| kernel | 2.000 ms | 12 | 25% |"]


def test_deferred_table_reports_the_eager_step_over_each_time():
    lines = timing.deferred_table("t", [("eager", 3.0), ("deferred", 0.25)], 3.0)
    assert lines[-2:] == ["| eager | 3.000 ms | 1.0x |", "| deferred | 0.250 ms | 12.0x |"]


# --- the NumPy references against the CPU operators ------------------------------------------

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
        lr, wd = cases.lr_schedule(t), 0.01
        reference.numpy_step(w, m, v, values, indices, lr, wd=wd, rescale_grad=0.5,
                             clip_gradient=clip)
        grad = mx.nd.sparse.row_sparse_array((values, indices), shape=(rows, cols), dtype=dtype)
        mx.nd.gluon_sparse_adam_update(nd[0], grad, nd[1], nd[2], out=nd[0], lr=lr, wd=wd,
                                       rescale_grad=0.5, clip_gradient=clip)
    for got, want, name in zip(nd, (w, m, v), ("weight", "mean", "var")):
        _assert_bitwise(got.asnumpy(), want, name)


# (dtype, rows, cols: 16 takes the CPU operator's vector path, 5 and 3 its scalar
#  tail, steps, gradient rows of a step, wd of step t, clip_gradient)
DEFERRED_CASES = {
    "f32-wd0": ("float32", 80, 16, 300, cases.deferred_rows_of_step, lambda t: 0.0, -1.0),
    "f32-wd-from-step-100-clip": ("float32", 80, 5, 300, cases.deferred_rows_of_step,
                                  lambda t: 0.0 if t < 100 else 0.01, 0.05),
    "f64-wd-clip": ("float64", 80, 3, 300, cases.deferred_rows_of_step, lambda t: 0.02, 0.3),
    "f32-denormal-means": ("float32", 16, 5, 1000, cases.long_absence_rows_of_step,
                           lambda t: 0.0, 0.5),
}


@pytest.mark.parametrize("case", list(DEFERRED_CASES))
def test_numpy_deferred_reference_is_the_cpu_operator(case):
    dtype, rows, cols, steps, rows_of_step, wd_of, clip = DEFERRED_CASES[case]
    rng = np.random.default_rng(5)
    init = rng.standard_normal((rows, cols)).astype(dtype)
    init[-1, :2] = [0.0, -0.0]
    ref = reference.NumpyDeferredAdam(init)
    w_eager, m_eager, v_eager = init.copy(), np.zeros_like(init), np.zeros_like(init)
    weight = mx.nd.array(init, dtype=dtype)
    mean, var = mx.nd.zeros((rows, cols), dtype=dtype), mx.nd.zeros((rows, cols), dtype=dtype)
    last_step = mx.nd.zeros((rows,), dtype=np.int64)
    history = mx.nd.zeros((steps + 1, 3), dtype=np.float32)
    longest_absence = 0
    for t in range(1, steps + 1):
        indices = rows_of_step(rng, rows, t, steps)
        values = rng.standard_normal((len(indices), cols)).astype(dtype)
        lr, wd = cases.lr_schedule(t), wd_of(t)
        if case == "f32-denormal-means" and t == steps:
            # Rows 0-3 come back after ~1000 steps: their replayed means are denormals.
            probe = copy.deepcopy(ref)
            probe.catch_up(indices, t - 1)
            assert (np.abs(probe.mean[indices]) < np.finfo(np.float32).tiny).all()
        if len(indices):
            longest_absence = max(longest_absence, int((t - 1 - ref.last_step[indices]).max()))
        ref.update(values, indices, t, lr, wd=wd, clip_gradient=clip)
        reference.numpy_step(w_eager, m_eager, v_eager, values, indices, lr, wd=wd,
                             clip_gradient=clip)
        grad = mx.nd.sparse.row_sparse_array((values, indices), shape=(rows, cols), dtype=dtype)
        mx.nd.gluon_sparse_adam_deferred_update(weight, grad, mean, var, last_step, history,
                                                out=weight, lr=lr, step=t, wd=wd,
                                                clip_gradient=clip, catch_up=1)
        if t % 25 == 0:
            _assert_bitwise(weight.asnumpy()[indices], ref.weight[indices],
                            "gradient rows at step %d" % t)
    np.testing.assert_array_equal(last_step.asnumpy(), ref.last_step)
    assert (ref.last_step[rows * 9 // 10:] == 0).all()  # never touched
    assert longest_absence >= 240  # rows deferred for hundreds of steps
    mx.nd.gluon_sparse_adam_deferred_flush(weight, mean, var, last_step, history, out=weight,
                                           step=steps)
    ref.flush()
    for got, want, eager, name in zip((weight, mean, var), (ref.weight, ref.mean, ref.var),
                                      (w_eager, m_eager, v_eager), ("weight", "mean", "var")):
        _assert_bitwise(got.asnumpy(), want, name + " vs the CPU operator")
        _assert_bitwise(want, eager, name + " vs numpy_step on every row")
    assert (last_step.asnumpy() == steps).all()


def test_numpy_deferred_reference_refuses_a_skipped_step():
    ref = reference.NumpyDeferredAdam(np.ones((3, 2), np.float32))
    ref.update(np.ones((1, 2), np.float32), [1], 1, 0.1)
    with pytest.raises(ValueError, match="update 3 follows step 1"):
        ref.update(np.ones((1, 2), np.float32), [1], 3, 0.1)


def test_the_references_import_no_gpu_package():
    code = ("import sys; from benchmarks.gpu.harness import reference, cases, checks, cli; "
            "print(sorted(m for m in ('torch', 'mxnet', 'gluon_sparse') if m in sys.modules))")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], cwd=root, check=True,
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=root))
    assert out.stdout.strip() == "[]"
