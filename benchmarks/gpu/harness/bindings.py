"""ctypes bindings of ``build/libadam_harness.so`` and their Python faces on CUDA tensors.

The library holds the operator library's own CUDA kernels
(``gluon_sparse/csrc/ops/adam_kernels.cu``, ``adam_deferred_kernels.cu``) behind
the ``extern "C"`` entry points of ``adam_harness.cu`` and
``adam_deferred_harness.cu``; every entry point returns 0, or 1 with the error
as text (index checks, stale rows, a failed launch), which the classes here
raise as ValueError.
"""
import ctypes
import os
import subprocess

from .reference import BETA1, BETA2, EPSILON

GPU_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD_SCRIPT = os.path.join(GPU_DIR, "build.sh")
LIBRARY = os.path.join(GPU_DIR, "build", "libadam_harness.so")
ERROR_BUFFER_BYTES = 512

EAGER_ENTRY_POINTS = ("gluon_sparse_harness_adam_update_f32",
                      "gluon_sparse_harness_adam_update_f64")
DEFERRED_ENTRY_POINTS = tuple("gluon_sparse_harness_adam_deferred_%s_%s" % (kind, suffix)
                              for kind in ("update", "catch_up") for suffix in ("f32", "f64"))


def stream_of(torch, device):
    """The ``cudaStream_t`` the entry points launch on: PyTorch's current stream (None off CUDA)."""
    device = torch.device(device)
    return torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else None


def open_library(path, target, rebuild=False):
    """``ctypes.CDLL`` of ``path``, built first with ``TARGET=<target> build.sh`` when it is
    missing (or ``rebuild``)."""
    if rebuild or not os.path.exists(path):
        subprocess.check_call(["sh", BUILD_SCRIPT, path], env=dict(os.environ, TARGET=target))
    return ctypes.CDLL(path)


def call_entry(fn, *args):
    """Call an entry point with an error buffer; raise ValueError with its text on failure."""
    error = ctypes.create_string_buffer(ERROR_BUFFER_BYTES)
    if fn(*args, error, len(error)) != 0:
        raise ValueError(error.value.decode())


def load_library(rebuild=False, path=LIBRARY):
    """Build (if needed, with build.sh) and load the harness library at ``path``.

    Returns
    -------
    ctypes.CDLL
        With the argument and result types of every entry point set.
    """
    lib = open_library(path, "adam", rebuild)
    p, i64, f32, i32, text = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int, \
        ctypes.c_char_p
    for name in EAGER_ENTRY_POINTS:
        fn = getattr(lib, name)
        # weight, mean, var, grad values, indices, nnz, num_rows, cols, lr, beta1, beta2,
        # epsilon, wd, rescale_grad, clip_gradient, validate, workspace, stream, error, error_len
        fn.argtypes = [p, p, p, p, p, i64, i64, i64] + [f32] * 7 + [i32, p, p, text, i32]
        fn.restype = i32
    for suffix in ("f32", "f64"):
        fn = getattr(lib, "gluon_sparse_harness_adam_deferred_update_" + suffix)
        # weight, mean, var, last_step, history, capacity, grad, indices, nnz, num_rows, cols,
        # step, lr, beta1, beta2, epsilon, wd, rescale_grad, clip_gradient, catch_up_rows,
        # validate, workspace, stream, error, error_len
        fn.argtypes = [p] * 5 + [i64, p, p, i64, i64, i64, i64] + [f32] * 7 + \
            [i32, i32, p, p, text, i32]
        fn.restype = i32
        fn = getattr(lib, "gluon_sparse_harness_adam_deferred_catch_up_" + suffix)
        # weight, mean, var, last_step, history, capacity, num_rows, cols, rows, n, step,
        # beta1, beta2, epsilon, stream, error, error_len
        fn.argtypes = [p] * 5 + [i64, i64, i64, p, i64, i64] + [f32] * 3 + [p, text, i32]
        fn.restype = i32
    return lib


class AdamKernels:
    """Python face of the eager kernels: one standard Adam step on CUDA tensors, in place."""

    def __init__(self, lib, torch, device="cuda"):
        self.lib = lib
        self.torch = torch
        self.device = torch.device(device)
        self.workspace = torch.empty(1, dtype=torch.int64, device=device)

    def step(self, weight, mean, var, grad_values, indices, lr, beta1=BETA1, beta2=BETA2,
             epsilon=EPSILON, wd=0.0, rescale_grad=1.0, clip_gradient=-1.0, validate=True):
        """Update every row of ``weight`` (and its ``mean``, ``var``) by one step."""
        torch = self.torch
        fn = {torch.float32: self.lib.gluon_sparse_harness_adam_update_f32,
              torch.float64: self.lib.gluon_sparse_harness_adam_update_f64}[weight.dtype]
        for t in (weight, mean, var, grad_values):
            assert t.device == weight.device and t.is_contiguous() and t.dtype == weight.dtype
        assert weight.device.type == self.device.type, "weight on %s" % weight.device
        assert indices.dtype == torch.int64 and indices.is_contiguous()
        rows, cols = weight.shape[0], weight[0].numel()
        call_entry(fn, weight.data_ptr(), mean.data_ptr(), var.data_ptr(), grad_values.data_ptr(),
                   indices.data_ptr(), indices.numel(), rows, cols, lr, beta1, beta2, epsilon,
                   wd, rescale_grad, clip_gradient, int(validate), self.workspace.data_ptr(),
                   stream_of(torch, weight.device))


class DeferredAdamKernels:
    """Python face of the deferred kernels: one weight's deferred state on CUDA tensors.

    Holds ``weight`` (updated in place), ``mean``, ``var``, ``last_step`` (int64,
    the step each row is up to date with) and ``history`` (float32
    ``(capacity, 3)``: lr, wd and clip_gradient of each step), laid out as
    gluon_sparse.optimizer.deferred.DeferredAdamState lays them out.
    """

    def __init__(self, lib, torch, weight, capacity, beta1=BETA1, beta2=BETA2, epsilon=EPSILON):
        self.lib, self.torch = lib, torch
        self.weight = weight
        self.mean = torch.zeros_like(weight)
        self.var = torch.zeros_like(weight)
        self.last_step = torch.zeros(weight.shape[0], dtype=torch.int64, device=weight.device)
        self.history = torch.zeros((capacity, 3), dtype=torch.float32, device=weight.device)
        self.fixed = (beta1, beta2, epsilon)
        self.workspace = torch.empty(1, dtype=torch.int64, device=weight.device)
        self.suffix = {torch.float32: "f32", torch.float64: "f64"}[weight.dtype]

    def _call(self, name, *args):
        call_entry(getattr(self.lib, "gluon_sparse_harness_adam_deferred_%s_%s"
                           % (name, self.suffix)), *args, stream_of(self.torch, self.weight.device))

    def _state(self):
        return (self.weight.data_ptr(), self.mean.data_ptr(), self.var.data_ptr(),
                self.last_step.data_ptr(), self.history.data_ptr(), self.history.shape[0])

    def update(self, grad_values, indices, step, lr, wd=0.0, rescale_grad=1.0,
               clip_gradient=-1.0, catch_up=False, validate=True):
        """Update ``step``: the gradient's rows only (sorted unique ``indices``).

        With ``catch_up`` the rows are first brought to step - 1; otherwise (and
        with ``validate``) a row behind step - 1 that the missed steps would
        change is rejected, as the operator rejects a row read stale.
        """
        assert grad_values.dtype == self.weight.dtype and grad_values.is_contiguous()
        assert indices.dtype == self.torch.int64 and indices.is_contiguous()
        rows, cols = self.weight.shape[0], self.weight[0].numel()
        self._call("update", *self._state(), grad_values.data_ptr(), indices.data_ptr(),
                   indices.numel(), rows, cols, step, lr, *self.fixed, wd, rescale_grad,
                   clip_gradient, int(catch_up), int(validate), self.workspace.data_ptr())

    def catch_up(self, rows, step):
        """Bring ``rows`` (any order, repeats allowed; None: every row) up to ``step``."""
        num_rows, cols = self.weight.shape[0], self.weight[0].numel()
        if rows is not None and rows.numel() == 0:
            return  # (an empty tensor's data pointer may be null, which means every row)
        pointer, n = (None, num_rows) if rows is None else (rows.data_ptr(), rows.numel())
        self._call("catch_up", *self._state(), num_rows, cols, pointer, n, step, *self.fixed)

    def flush(self, step):
        """Bring every row up to ``step`` (before the weights are read as a whole)."""
        self.catch_up(None, step)
