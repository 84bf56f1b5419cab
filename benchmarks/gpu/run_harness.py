"""Standalone GPU harness for gluon-sparse's standard-Adam CUDA kernels, eager and deferred.

Drives the CUDA kernels the operator library compiles, on PyTorch CUDA tensors
through the C entry points of ``adam_harness.cu`` and ``adam_deferred_harness.cu``
(no MXNet needed):

- ``gluon_sparse/csrc/ops/adam_kernels.cu``: the eager standard-Adam update of
  ``gs_adam_update`` (every row, every step);
- ``gluon_sparse/csrc/ops/adam_deferred_kernels.cu``: deferred standard Adam of
  ``gs_adam_deferred_update`` / ``gs_adam_deferred_flush`` (the gradient's rows
  only; rows left behind replay the steps they missed when they are next read,
  or at the flush).

What it checks, in this order:

1. eager correctness: 50 steps on 1000-row weights (128 columns, the 16-byte
   vector path; 37 and 7, the scalar path), float32 and float64, clipping on and
   off, weight decay, rescaling, empty gradients, *bitwise* equal to
   ``numpy_step`` (the kernels' IEEE operations in their order); bad indices are
   rejected;
2. deferred correctness: 300 steps with a learning-rate schedule, wd = 0,
   wd > 0 and a wd that starts at 0, clipping on and off, float32 and float64,
   rows untouched for ~250 steps, rows never touched and empty gradients, and
   1000 steps in which rows wait until their means are float32 denormals. After
   every step the rows the step changed must be the gradient's rows only (the
   bytes of every other row of weight, mean, var and last_step unchanged) and
   equal the eager CUDA kernels' rows; after the final flush weight, mean and var
   must be *bitwise* equal to the eager CUDA kernels run step by step and to
   ``numpy_step``. Rows are brought up to date both ways the operator does it: a
   catch-up of the rows a batch reads (repeats included) followed by the update
   with its stale-row check, and the update's own ``catch_up`` mode. Stale rows,
   bad indices and a too-short history must be rejected before any write;
3. speed on a ``--rows x --cols`` float32 weight (default 1,000,000 x 128) with
   a ``--grad-rows`` gradient (default 640): the deferred step (catch-up of the
   gradient's rows + their update) with the rows behind by each of ``--gaps``
   steps, the eager step, ``torch.optim.Adam(fused=True)`` (dense gradient),
   ``torch.optim.SparseAdam`` (lazy Adam: another algorithm, the cost floor), and
   the flush with every row up to date or behind by a few steps. Printed as a
   markdown table (device, CUDA and PyTorch versions in its title) for
   ``benchmarks/RESULTS.md``.

Run: ``python benchmarks/gpu/run_harness.py`` (builds ``build/libadam_harness.so``
with build.sh when missing; ``--rebuild`` forces it). Needs a CUDA GPU (sm_75 or
newer with the default build), PyTorch with CUDA, nvcc and NumPy.
``--quick`` keeps every correctness check but times a 100,000-row weight with
fewer repeats (about a minute in all).

The NumPy references (``numpy_step`` and ``NumpyDeferredAdam``) import no GPU
package; tests/test_gpu_harness.py checks them bitwise against the CPU
operators on any machine, so a GPU run compares the kernels with a reference
that is itself proven exact.
"""
import argparse
import ctypes
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = os.path.join(HERE, "build", "libadam_harness.so")
BYTES_PER_ELEMENT = 24
BETA1, BETA2, EPSILON = 0.9, 0.999, 1e-8


def load_library(rebuild=False, path=LIBRARY):
    """Build (if needed) and load the harness library at ``path`` with its C signatures."""
    if rebuild or not os.path.exists(path):
        subprocess.check_call(["sh", os.path.join(HERE, "build.sh"), path])
    lib = ctypes.CDLL(path)
    p, i64, f32, i32, text = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int, \
        ctypes.c_char_p
    for name in ("gs_harness_adam_update_f32", "gs_harness_adam_update_f64"):
        fn = getattr(lib, name)
        fn.argtypes = [p, p, p, p, p, i64, i64, i64] + [f32] * 7 + [i32, p, p, text, i32]
        fn.restype = i32
    for suffix in ("f32", "f64"):
        fn = getattr(lib, "gs_harness_adam_deferred_update_" + suffix)
        # weight, mean, var, last_step, history, capacity, grad, indices, nnz, num_rows, cols,
        # step, lr, beta1, beta2, epsilon, wd, rescale_grad, clip_gradient, catch_up_rows,
        # validate, workspace, stream, error, error_len
        fn.argtypes = [p] * 5 + [i64, p, p, i64, i64, i64, i64] + [f32] * 7 + \
            [i32, i32, p, p, text, i32]
        fn.restype = i32
        fn = getattr(lib, "gs_harness_adam_deferred_catch_up_" + suffix)
        # weight, mean, var, last_step, history, capacity, num_rows, cols, rows, n, step,
        # beta1, beta2, epsilon, stream, error, error_len
        fn.argtypes = [p] * 5 + [i64, i64, i64, p, i64, i64] + [f32] * 3 + [p, text, i32]
        fn.restype = i32
    return lib


class AdamKernels:
    """Python face of the eager kernels: one standard Adam step on CUDA tensors, in place."""

    def __init__(self, lib, torch):
        self.lib = lib
        self.torch = torch
        self.workspace = torch.empty(1, dtype=torch.int64, device="cuda")

    def step(self, weight, mean, var, grad_values, indices, lr, beta1=BETA1, beta2=BETA2,
             epsilon=EPSILON, wd=0.0, rescale_grad=1.0, clip_gradient=-1.0, validate=True):
        """Update every row of ``weight`` (and its ``mean``, ``var``) by one step."""
        torch = self.torch
        fn = {torch.float32: self.lib.gs_harness_adam_update_f32,
              torch.float64: self.lib.gs_harness_adam_update_f64}[weight.dtype]
        for t in (weight, mean, var, grad_values):
            assert t.is_cuda and t.is_contiguous() and t.dtype == weight.dtype
        assert indices.dtype == torch.int64 and indices.is_contiguous()
        rows, cols = weight.shape[0], weight[0].numel()
        error = ctypes.create_string_buffer(512)
        stream = torch.cuda.current_stream().cuda_stream
        rc = fn(weight.data_ptr(), mean.data_ptr(), var.data_ptr(), grad_values.data_ptr(),
                indices.data_ptr(), indices.numel(), rows, cols, lr, beta1, beta2, epsilon, wd,
                rescale_grad, clip_gradient, int(validate), self.workspace.data_ptr(), stream,
                error, len(error))
        if rc != 0:
            raise ValueError(error.value.decode())


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
        error = ctypes.create_string_buffer(512)
        fn = getattr(self.lib, "gs_harness_adam_deferred_%s_%s" % (name, self.suffix))
        if fn(*args, self.torch.cuda.current_stream().cuda_stream, error, len(error)) != 0:
            raise ValueError(error.value.decode())

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


def numpy_step(w, m, v, grad_values, indices, lr, beta1=BETA1, beta2=BETA2, epsilon=EPSILON,
               wd=0.0, rescale_grad=1.0, clip_gradient=-1.0):
    """The kernel's operations, in its order and precision (scalars rounded to float32 first)."""
    dt = w.dtype.type
    c = {k: dt(np.float32(x)) for k, x in dict(lr=lr, beta1=beta1, beta2=beta2, epsilon=epsilon,
                                                 wd=wd, rescale=rescale_grad,
                                                 clip=clip_gradient).items()}
    g = w * c["wd"]
    g[indices] = grad_values * c["rescale"] + w[indices] * c["wd"]
    if clip_gradient >= 0:
        g = np.where(g > c["clip"], c["clip"], np.where(g < -c["clip"], -c["clip"], g))
    m[...] = c["beta1"] * m + (dt(1) - c["beta1"]) * g
    v[...] = c["beta2"] * v + (dt(1) - c["beta2"]) * (g * g)
    w[...] = w - (c["lr"] * m) / (np.sqrt(v) + c["epsilon"])


class NumpyDeferredAdam:
    """Deferred standard Adam in NumPy: the reference of the deferred kernels.

    Applies each step to the gradient's rows only and replays the steps a row
    missed, with ``numpy_step`` and the step's recorded (lr, wd, clip_gradient),
    when the row is next updated or at ``flush``. It takes no shortcut (the
    kernels skip fixed-point steps, which changes no bit), so it is bitwise
    equal to ``numpy_step`` applied to every row every step.

    Parameters
    ----------
    weight : numpy.ndarray
        (rows, cols) float32 or float64; copied.
    beta1, beta2, epsilon : float
        Adam's fixed scalars.
    """

    def __init__(self, weight, beta1=BETA1, beta2=BETA2, epsilon=EPSILON):
        self.weight = np.array(weight)
        self.mean = np.zeros_like(self.weight)
        self.var = np.zeros_like(self.weight)
        self.last_step = np.zeros(len(self.weight), dtype=np.int64)
        self.history = {}  # step -> (lr, wd, clip_gradient)
        self.fixed = dict(beta1=beta1, beta2=beta2, epsilon=epsilon)
        self.step = 0

    def catch_up(self, rows, step):
        """Replay steps last_step + 1 .. ``step`` of ``rows`` (repeats allowed)."""
        rows = np.unique(np.asarray(rows, dtype=np.int64))
        behind = rows[self.last_step[rows] < step]
        if len(behind) == 0:
            return
        no_grad = np.empty((0,) + self.weight.shape[1:], self.weight.dtype)
        no_rows = np.empty(0, np.int64)
        for s in range(int(self.last_step[behind].min()) + 1, step + 1):
            active = behind[self.last_step[behind] < s]
            w, m, v = self.weight[active], self.mean[active], self.var[active]
            lr, wd, clip = self.history[s]
            numpy_step(w, m, v, no_grad, no_rows, lr, wd=wd, clip_gradient=clip, **self.fixed)
            self.weight[active], self.mean[active], self.var[active] = w, m, v
        self.last_step[behind] = step

    def update(self, grad_values, indices, step, lr, wd=0.0, rescale_grad=1.0,
               clip_gradient=-1.0):
        """Update ``step`` (1-based, consecutive) with a row-sparse gradient."""
        if step != self.step + 1:
            raise ValueError("update %d follows step %d" % (step, self.step))
        indices = np.asarray(indices, dtype=np.int64)
        self.catch_up(indices, step - 1)
        self.history[step] = (lr, wd, clip_gradient)
        w, m, v = self.weight[indices], self.mean[indices], self.var[indices]
        numpy_step(w, m, v, grad_values, np.arange(len(indices)), lr, wd=wd,
                   rescale_grad=rescale_grad, clip_gradient=clip_gradient, **self.fixed)
        self.weight[indices], self.mean[indices], self.var[indices] = w, m, v
        self.last_step[indices] = step
        self.step = step

    def flush(self):
        """Bring every row up to the last step."""
        self.catch_up(np.arange(len(self.weight)), self.step)


def lr_schedule(step, base_lr=0.01):
    """A step schedule (x0.7 every 40 steps) with Adam's bias correction folded in."""
    return base_lr * 0.7 ** (step // 40) * np.sqrt(1 - BETA2 ** step) / (1 - BETA1 ** step)


def deferred_rows_of_step(rng, rows, step, steps=300):
    """The gradient rows of ``step`` in the deferred checks (sorted, unique).

    The last 10% of the rows are never touched; rows 0-7 get gradients at steps
    1-3 and then wait until the last 50 steps (~250 of 300 steps deferred);
    every 50th step has an empty gradient (a pure decay step); the rest draws
    5% of the rows.
    """
    if step % 50 == 7:
        return np.empty(0, np.int64)
    chosen = rng.choice(np.arange(8, rows * 9 // 10), max(1, rows // 20), replace=False)
    if step <= 3:
        chosen = np.concatenate([chosen, np.arange(8)])
    elif step >= steps - 50 and step % 6 == 0:
        chosen = np.concatenate([chosen, [(step // 6) % 8]])
    return np.sort(chosen).astype(np.int64)


def check_eager_correctness(kernels, torch):
    rng = np.random.default_rng(0)
    cases = [(np.float32, 128, {}), (np.float32, 37, {"wd": 0.01, "clip_gradient": 0.05}),
             (np.float64, 128, {"wd": 0.02, "rescale_grad": 0.5, "clip_gradient": 0.3}),
             (np.float64, 7, {"beta1": 0.8, "beta2": 0.99, "epsilon": 1e-6})]
    for dtype, cols, params in cases:
        rows = 1000
        w = rng.standard_normal((rows, cols)).astype(dtype)
        m, v = np.zeros_like(w), np.zeros_like(w)
        tw, tm, tv = (torch.from_numpy(a.copy()).cuda() for a in (w, m, v))
        for step in range(50):
            n = 0 if step % 9 == 4 else int(rng.integers(1, rows))
            indices = np.sort(rng.choice(rows, n, replace=False)).astype(np.int64)
            values = rng.standard_normal((n, cols)).astype(dtype)
            lr = 0.01 * np.sqrt(1 - 0.999 ** (step + 1)) / (1 - 0.9 ** (step + 1))
            numpy_step(w, m, v, values, indices, lr, **params)
            kernels.step(tw, tm, tv, torch.from_numpy(values).cuda(),
                         torch.from_numpy(indices).cuda(), lr, **params)
        for name, got, want in (("weight", tw, w), ("mean", tm, m), ("var", tv, v)):
            got = got.cpu().numpy()
            if not np.array_equal(got, want):
                raise AssertionError("%s differs from NumPy for %s cols=%d %s: max |diff| %g"
                                     % (name, np.dtype(dtype).name, cols, params,
                                        np.abs(got - want).max()))
        print("ok  bitwise equal to NumPy: %s, %d x %d, %s, 50 steps"
              % (np.dtype(dtype).name, rows, cols, params))
    z = torch.zeros((10, 4), device="cuda")
    for bad, expected in (([3, 10], "out of range"), ([-1], "out of range"),
                          ([5, 2], "sorted and unique"), ([2, 2], "sorted and unique")):
        try:
            kernels.step(z, z.clone(), z.clone(), torch.ones((len(bad), 4), device="cuda"),
                         torch.tensor(bad, dtype=torch.int64, device="cuda"), 0.1)
        except ValueError as err:
            assert expected in str(err), err
        else:
            raise AssertionError("indices %s were accepted" % bad)
    print("ok  bad indices rejected before any write")


def _bits(array):
    """The bytes of an array as integers of its width (bitwise comparisons, NaN and -0 included)."""
    return array.view({4: np.int32, 8: np.int64}[array.dtype.itemsize])


def _tensor_bits(torch, tensor):
    return tensor.view({4: torch.int32, 8: torch.int64}[tensor.element_size()])


def _assert_bitwise(what, got, want):
    got = got.cpu().numpy() if hasattr(got, "cpu") else got
    if not np.array_equal(_bits(got), _bits(want)):
        bad = np.argwhere(_bits(got) != _bits(want))
        raise AssertionError("%s: %d elements differ, first at %s (%r vs %r)"
                             % (what, len(bad), tuple(bad[0]), got[tuple(bad[0])],
                                want[tuple(bad[0])]))


def long_absence_rows_of_step(rng, rows, step, steps=1000):
    """Rows 0-3 get gradients at steps 1-3 and at the last step only (their means
    decay into float32 denormals meanwhile), rows 4-7 take turns, the others wait."""
    if step <= 3:
        return np.arange(8, dtype=np.int64)
    return np.arange(4, dtype=np.int64) if step == steps else np.array([4 + step % 4])


# (dtype, rows, cols, steps, gradient rows of a step, wd of step t, other step parameters)
DEFERRED_CASES = [
    (np.float32, 1000, 128, 300, deferred_rows_of_step, lambda t: 0.0, {}),
    (np.float32, 1000, 128, 300, deferred_rows_of_step, lambda t: 1e-3, {"clip_gradient": 0.05}),
    (np.float32, 1000, 37, 300, deferred_rows_of_step, lambda t: 0.0 if t < 100 else 0.01,
     {"clip_gradient": 0.5}),
    (np.float64, 1000, 128, 300, deferred_rows_of_step, lambda t: 0.02,
     {"rescale_grad": 0.5, "clip_gradient": 0.3}),
    (np.float64, 1000, 7, 300, deferred_rows_of_step, lambda t: 0.0, {}),
    (np.float32, 80, 8, 1000, long_absence_rows_of_step, lambda t: 0.0, {"clip_gradient": 0.5}),
]


def check_deferred_correctness(lib, kernels, torch):
    """Deferred kernels against the eager kernels and NumPy (see the module's doc)."""
    for case, (dtype, rows, cols, steps, rows_of_step, wd_of, params) in \
            enumerate(DEFERRED_CASES):
        rng = np.random.default_rng(case)
        w = rng.standard_normal((rows, cols)).astype(dtype)
        w[-1, :2] = [0.0, -0.0]  # signed zeros in a row never touched
        m, v = np.zeros_like(w), np.zeros_like(w)
        reference = NumpyDeferredAdam(w)
        eager = [torch.from_numpy(a.copy()).cuda() for a in (w, m, v)]
        deferred = DeferredAdamKernels(lib, torch, torch.from_numpy(w.copy()).cuda(), steps + 1)
        state = (deferred.weight, deferred.mean, deferred.var, deferred.last_step)
        for t in range(1, steps + 1):
            indices = rows_of_step(rng, rows, t, steps)
            values = rng.standard_normal((len(indices), cols)).astype(dtype)
            lr, wd = lr_schedule(t), wd_of(t)
            numpy_step(w, m, v, values, indices, lr, wd=wd, **params)
            reference.update(values, indices, t, lr, wd=wd, **params)
            t_values, t_indices = torch.from_numpy(values).cuda(), torch.from_numpy(indices).cuda()
            kernels.step(*eager, t_values, t_indices, lr, wd=wd, **params)

            before = [_tensor_bits(torch, a).clone() if a.is_floating_point() else a.clone()
                      for a in state]
            if t % 2:
                # As a forward pass: bring the rows the batch reads (each as often as
                # the batch holds it, in batch order) to t - 1, then the update checks them.
                read = t_indices.repeat(3)[torch.randperm(3 * len(indices), device="cuda")]
                deferred.catch_up(read, t - 1)
                deferred.update(t_values, t_indices, t, lr, wd=wd, **params)
            else:
                deferred.update(t_values, t_indices, t, lr, wd=wd, catch_up=True, **params)
            touched = torch.zeros(rows, dtype=torch.bool, device="cuda")
            touched[t_indices] = True
            for name, old, new in zip(("weight", "mean", "var", "last_step"), before, state):
                new = _tensor_bits(torch, new) if new.is_floating_point() else new
                changed = (old != new).reshape(rows, -1).any(dim=1)
                if bool((changed & ~touched).any()):
                    raise AssertionError("step %d changed the %s of row %d, not in its gradient"
                                         % (t, name, int(torch.nonzero(changed & ~touched)[0])))
            for name, got, want in zip(("weight", "mean", "var"), state, eager):
                _assert_bitwise("step %d, %s of the gradient rows vs the eager kernels"
                                % (t, name), got[t_indices].cpu().numpy(),
                                want[t_indices].cpu().numpy())
            if not np.array_equal(deferred.last_step.cpu().numpy(), reference.last_step):
                raise AssertionError("step %d: last_step differs from NumpyDeferredAdam's" % t)

        last = deferred.last_step.cpu().numpy()
        assert (last[rows * 9 // 10:] == 0).all(), "never-touched rows were replayed"
        assert (last < steps).sum() > rows // 10, "too few rows deferred to the final flush"
        deferred.flush(steps)
        reference.flush()
        assert (deferred.last_step.cpu().numpy() == steps).all()
        label = "%s, %d x %d, wd %s..%s, %s" % (np.dtype(dtype).name, rows, cols, wd_of(1),
                                               wd_of(steps), params)
        for name, got, want_gpu, want_np, want_replay in zip(
                ("weight", "mean", "var"), state, eager, (w, m, v),
                (reference.weight, reference.mean, reference.var)):
            got = got.cpu().numpy()
            _assert_bitwise("%s after the flush vs the eager kernels (%s)" % (name, label), got,
                            want_gpu.cpu().numpy())
            _assert_bitwise("%s after the flush vs numpy_step (%s)" % (name, label), got, want_np)
            _assert_bitwise("%s after the flush vs NumpyDeferredAdam (%s)" % (name, label), got,
                            want_replay)
        flushed = [a.clone() for a in state]
        deferred.flush(steps)
        for name, old, new in zip(("weight", "mean", "var", "last_step"), flushed, state):
            _assert_bitwise("%s after a second flush" % name, new, old.cpu().numpy())
        print("ok  deferred bitwise equal to the eager kernels, numpy_step and "
              "NumpyDeferredAdam after the flush, only the gradient's rows written each step: "
              "%s, %d steps" % (label, steps))
    check_deferred_rejections(lib, torch)


def check_deferred_rejections(lib, torch):
    """Stale rows, bad indices and a short history are rejected before any write."""
    deferred = DeferredAdamKernels(lib, torch, torch.randn(10, 4, device="cuda"), 8)
    ones = torch.ones((1, 4), device="cuda")
    for t, row in ((1, 0), (2, 1)):
        deferred.update(ones, torch.tensor([row], device="cuda"), t, 0.1)
    snapshot = [a.clone() for a in (deferred.weight, deferred.mean, deferred.var,
                                    deferred.last_step, deferred.history)]
    # Row 0 is at step 1 with a non-zero state: step 2 would change it, so a
    # gradient for it at step 3 means it was read without being brought up to date.
    attempts = [
        ("read stale", lambda: deferred.update(ones, torch.tensor([0], device="cuda"), 3, 0.1)),
        ("out of range", lambda: deferred.update(ones, torch.tensor([10], device="cuda"), 3, 0.1)),
        ("out of range", lambda: deferred.update(ones, torch.tensor([-1], device="cuda"), 3, 0.1)),
        ("sorted and unique", lambda: deferred.update(
            ones.repeat(2, 1), torch.tensor([2, 2], device="cuda"), 3, 0.1)),
        ("does not fit", lambda: deferred.update(ones, torch.tensor([1], device="cuda"), 8, 0.1)),
        ("does not fit", lambda: deferred.flush(8)),
    ]
    for expected, attempt in attempts:
        try:
            attempt()
        except ValueError as err:
            assert expected in str(err), err
        else:
            raise AssertionError("the deferred kernels accepted a call that must fail (%s)"
                                 % expected)
    for old, new in zip(snapshot, (deferred.weight, deferred.mean, deferred.var,
                                   deferred.last_step, deferred.history)):
        assert torch.equal(old, new), "a rejected call wrote to the state"
    # The same row with catch-up is accepted.
    deferred.update(ones, torch.tensor([0], device="cuda"), 3, 0.1, catch_up=True)
    print("ok  deferred: stale rows, bad indices and a short history rejected before any write")


def cuda_time(torch, fn, repeat):
    """Milliseconds per call, from CUDA events, after two warm-up calls."""
    fn()
    fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeat):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / repeat


def benchmark(kernels, torch, rows, cols, repeat):
    elements = rows * cols
    weight = torch.randn(rows, cols, device="cuda")
    mean = torch.randn(rows, cols, device="cuda") * 1e-3
    var = torch.rand(rows, cols, device="cuda") * 1e-6
    src = torch.empty(3 * elements, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = cuda_time(torch, lambda: dst.copy_(src), repeat)
    del src, dst
    results = [("device-to-device copy of 3 x weight bytes", copy_ms)]

    param = torch.nn.Parameter(torch.randn(rows, cols, device="cuda"))
    param.grad = torch.randn(rows, cols, device="cuda")
    fused = torch.optim.Adam([param], lr=1e-3, weight_decay=1e-4, fused=True)
    results.append(("torch.optim.Adam(fused=True), dense grad", cuda_time(torch, fused.step, repeat)))
    del param, fused

    for grad_rows in (640, 100_000):
        indices = torch.sort(torch.randperm(rows, device="cuda")[:grad_rows]).values
        values = torch.randn(grad_rows, cols, device="cuda")
        for validate in (True, False):
            ms = cuda_time(torch, lambda: kernels.step(weight, mean, var, values, indices, 1e-3,
                                                       wd=1e-4, validate=validate), repeat)
            results.append(("gluon-sparse kernels, %d grad rows%s"
                            % (grad_rows, "" if validate else ", without index check"), ms))

    print("\n%s, %d x %d float32 (%s)\n" % (torch.cuda.get_device_name(), rows, cols,
                                             "CUDA %s, PyTorch %s" % (torch.version.cuda,
                                                                      torch.__version__)))
    print("| candidate | time/step | GB/s (24 B/elem) | % of copy bandwidth |")
    print("|---|---|---|---|")
    for name, ms in results:
        print("| %s | %.3f ms | %.0f | %.0f%% |" % (name, ms, BYTES_PER_ELEMENT * elements / ms / 1e6,
                                                  100 * copy_ms / ms))


def _events_ms(torch, setup, fn, repeat):
    """Milliseconds of ``fn`` alone, mean of ``repeat`` calls each after an untimed ``setup``."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    total = 0.0
    for _ in range(repeat):
        setup()
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        total += start.elapsed_time(stop)
    return total / repeat


def benchmark_deferred(lib, kernels, torch, rows, cols, grad_rows, gaps, repeat):
    """Deferred step vs eager step vs torch's Adam, and the flush; prints a markdown table.

    For the deferred step with gap g, call i (update step base + i) gets its own
    random gradient rows (disjoint from the other calls'), set beforehand to step
    base + i - 1 - g: each call
    replays g missed steps for each of its rows, then updates them (gap 0: rows
    updated by the previous step, as the hot rows of CTR data).
    """
    lr, wd = 1e-3, 1e-4  # (about 6 GiB of device memory at 1,000,000 x 128 in all)
    calls = repeat + 2  # cuda_time's two warm-up calls, then the timed ones
    base = max(list(gaps) + [1000]) + 2
    deferred = DeferredAdamKernels(lib, torch, torch.randn(rows, cols, device="cuda"),
                                   base + calls + 1)
    # A non-zero state everywhere: no row is a fixed point, every replayed step is computed.
    deferred.mean.normal_(0.0, 1e-3)
    deferred.var.uniform_(0.0, 1e-6)
    deferred.history[1:] = torch.tensor([lr, wd, -1.0], device="cuda")
    if calls * grad_rows > rows:
        raise ValueError("the timed deferred steps need (repeat + 2) x grad_rows = %d distinct "
                         "rows, more than the weight's %d" % (calls * grad_rows, rows))
    # Disjoint row sets: a row of a later call must not be ahead of an earlier call's step.
    order = torch.randperm(rows, device="cuda")
    index_sets = [torch.sort(order[i * grad_rows:(i + 1) * grad_rows]).values
                  for i in range(calls)]
    values = torch.randn(grad_rows, cols, device="cuda")
    results = []

    def deferred_steps(gap, catch_up_first=False, validate=False):
        deferred.last_step.fill_(base - 1)
        for i, indices in enumerate(index_sets):
            deferred.last_step[indices] = base + i - 1 - gap
        call = iter(range(calls))

        def one_step():
            i = next(call)
            if catch_up_first:
                deferred.catch_up(index_sets[i], base + i - 1)
            deferred.update(values, index_sets[i], base + i, lr, wd=wd,
                            catch_up=not catch_up_first, validate=validate)
        return cuda_time(torch, one_step, repeat)

    eager_state = [deferred.weight.clone(), deferred.mean.clone(), deferred.var.clone()]
    eager_ms = cuda_time(torch, lambda: kernels.step(*eager_state, values, index_sets[0], lr,
                                                     wd=wd), repeat)
    results.append(("eager gs_adam_update kernels (every row), index check", eager_ms))
    for gap in gaps:
        results.append(("deferred step: catch-up of the grad rows (%d missed step%s) + update"
                        % (gap, "" if gap == 1 else "s"), deferred_steps(gap)))
    results.append(("deferred step, 0 missed steps, with the operator's index check",
                    deferred_steps(0, validate=True)))
    results.append(("deferred step as in training: catch-up by the forward pass, update with "
                    "index and stale-row checks, 0 missed steps",
                    deferred_steps(0, catch_up_first=True, validate=True)))

    step = base - 1
    flush_cases = [("flush, every row up to date", lambda: deferred.last_step.fill_(step))]
    for lag in (1, 10):
        flush_cases.append(("flush, every row %d step%s behind" % (lag, "" if lag == 1 else "s"),
                            lambda lag=lag: deferred.last_step.fill_(step - lag)))
    stale = torch.randperm(rows, device="cuda")[:rows // 100]

    def one_percent_behind():
        deferred.last_step.fill_(step)
        deferred.last_step[stale] = step - 1000
    flush_cases.append(("flush, 1% of the rows 1000 steps behind, the rest up to date",
                        one_percent_behind))
    for name, setup in flush_cases:
        results.append((name, _events_ms(torch, setup, lambda: deferred.flush(step),
                                         max(3, repeat // 10))))

    param = torch.nn.Parameter(torch.randn(rows, cols, device="cuda"))
    param.grad = torch.randn(rows, cols, device="cuda")
    fused = torch.optim.Adam([param], lr=lr, weight_decay=wd, fused=True)
    results.append(("torch.optim.Adam(fused=True), dense grad (standard Adam)",
                    cuda_time(torch, fused.step, repeat)))
    param.grad = None
    sparse = torch.optim.SparseAdam([param], lr=lr)

    def sparse_step():
        param.grad = torch.sparse_coo_tensor(index_sets[0][None], values, (rows, cols),
                                             check_invariants=False)
        sparse.step()
    results.append(("torch.optim.SparseAdam, %d-row sparse grad (lazy Adam: another algorithm)"
                    % grad_rows, cuda_time(torch, sparse_step, repeat)))

    print("\n#### Deferred standard Adam: %s, %d x %d float32, %d-row gradient "
          "(CUDA %s, PyTorch %s)\n" % (torch.cuda.get_device_name(), rows, cols, grad_rows,
                                       torch.version.cuda, torch.__version__))
    print("| candidate | time | eager step / time |")
    print("|---|---|---|")
    for name, ms in results:
        print("| %s | %.3f ms | %.1fx |" % (name, ms, eager_ms / ms))


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="run_harness.py", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000,
                        help="rows of the timed weight (default 1,000,000; --quick: 100,000)")
    parser.add_argument("--cols", type=int, default=128, help="its columns (default 128)")
    parser.add_argument("--grad-rows", type=int, default=640,
                        help="gradient rows of the timed deferred steps (default 640)")
    parser.add_argument("--gaps", type=int, nargs="+", default=[0, 1, 10, 100, 1000],
                        help="missed steps the timed deferred steps replay per gradient row "
                             "(default 0 1 10 100 1000; --quick: 0 100)")
    parser.add_argument("--repeat", type=int, default=50,
                        help="timed calls per candidate (default 50; --quick: 10)")
    parser.add_argument("--quick", action="store_true",
                        help="time a 100,000-row weight with fewer repeats and gaps "
                             "(every correctness check still runs)")
    parser.add_argument("--skip-correctness", action="store_true",
                        help="only time the kernels")
    parser.add_argument("--skip-benchmark", action="store_true",
                        help="only run the correctness checks")
    parser.add_argument("--rebuild", action="store_true",
                        help="rebuild build/libadam_harness.so with build.sh first")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows = min(args.rows, 100_000)
        args.repeat = min(args.repeat, 10)
        args.gaps = [0, 100]
    import torch
    if not torch.cuda.is_available():
        sys.exit("run_harness.py needs a CUDA GPU and PyTorch built with CUDA")
    lib = load_library(args.rebuild)
    kernels = AdamKernels(lib, torch)
    if not args.skip_correctness:
        check_eager_correctness(kernels, torch)
        check_deferred_correctness(lib, kernels, torch)
    if not args.skip_benchmark:
        benchmark(kernels, torch, args.rows, args.cols, args.repeat)
        benchmark_deferred(lib, kernels, torch, args.rows, args.cols, args.grad_rows, args.gaps,
                           args.repeat)


if __name__ == "__main__":
    main()
