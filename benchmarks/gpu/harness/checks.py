"""Correctness checks of the CUDA kernels against the NumPy references, and their asserts.

The asserts (``assert_bitwise``, ``assert_only_rows_changed``,
``expect_rejections``) take NumPy arrays or PyTorch tensors on any device, so
``tests/test_gpu_harness.py`` checks on a machine without a GPU that a wrong
result is reported at its first differing position. The ``check_*`` drivers
need the CUDA library (``bindings.load_library``) and a CUDA device (``device``
is there for tests that drive them with a host stand-in of the library).
"""
import numpy as np

from .bindings import DeferredAdamKernels
from .cases import DEFERRED_CASES, EAGER_CASES, lr_schedule
from .reference import BETA1, BETA2, NumpyDeferredAdam, numpy_step


def bits(array):
    """The bytes of an array as integers of its width (bitwise comparisons, NaN and -0 included)."""
    return array.view({4: np.int32, 8: np.int64}[array.dtype.itemsize])


def tensor_bits(torch, tensor):
    """``bits`` of a PyTorch tensor, on its device."""
    return tensor.view({4: torch.int32, 8: torch.int64}[tensor.element_size()])


def assert_bitwise(what, got, want):
    """Raise AssertionError unless ``got`` has the bits of ``want`` (NumPy).

    Every bit counts (signed zeros, the last ulp) except a NaN's sign and
    payload: a NaN matches any NaN. IEEE 754 leaves those to the hardware, and
    an invalid operation (0 / 0, inf - inf) gives 0xFFC00000 on x86 (where the
    references run) and 0x7FFFFFFF on an NVIDIA GPU.

    The message names ``what``, how many elements differ and the first one:
    its position and both values. ``got`` may be a tensor on any device.
    """
    got = got.cpu().numpy() if hasattr(got, "cpu") else np.asarray(got)
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError("%s: got %s %s, expected %s %s" % (what, got.dtype, got.shape,
                                                                 want.dtype, want.shape))
    differ = bits(got) != bits(want)
    if got.dtype.kind == "f":
        differ &= ~(np.isnan(got) & np.isnan(want))
    if differ.any():
        bad = np.argwhere(differ)
        first = tuple(int(i) for i in bad[0])
        raise AssertionError("%s: %d elements differ, first at %s (%r vs %r)"
                             % (what, len(bad), first, got[first], want[first]))


def assert_only_rows_changed(torch, what, before, after, touched):
    """Raise AssertionError if a row outside ``touched`` differs between ``before`` and ``after``.

    Parameters
    ----------
    what : str
        Names the step and the array in the message.
    before : torch.Tensor
        The array's contents before the step (its ``tensor_bits`` for floats).
    after : torch.Tensor
        The array after the step (floats are compared by their bits).
    touched : torch.Tensor
        bool, one per row: the rows the step may change.
    """
    after = tensor_bits(torch, after) if after.is_floating_point() else after
    changed = (before != after).reshape(len(touched), -1).any(dim=1) & ~touched
    if bool(changed.any()):
        rows = torch.nonzero(changed).flatten()
        raise AssertionError("%s changed %d row(s) not in its gradient, first row %d"
                             % (what, len(rows), int(rows[0])))


def expect_rejections(attempts):
    """Every ``(expected text, call)`` must raise ValueError whose message holds the text."""
    for expected, attempt in attempts:
        try:
            attempt()
        except ValueError as err:
            if expected not in str(err):
                raise AssertionError("a call was rejected with %r, expected a message with %r"
                                     % (str(err), expected)) from err
        else:
            raise AssertionError("the kernels accepted a call that must fail (%s)" % expected)


def check_eager_correctness(kernels, torch, device="cuda"):
    """Eager kernels, 50 steps per case of ``EAGER_CASES``, bitwise equal to ``numpy_step``."""
    rng = np.random.default_rng(0)
    for dtype, cols, params in EAGER_CASES:
        rows = 1000
        w = rng.standard_normal((rows, cols)).astype(dtype)
        m, v = np.zeros_like(w), np.zeros_like(w)
        tw, tm, tv = (torch.from_numpy(a.copy()).to(device) for a in (w, m, v))
        for step in range(50):
            n = 0 if step % 9 == 4 else int(rng.integers(1, rows))
            indices = np.sort(rng.choice(rows, n, replace=False)).astype(np.int64)
            values = rng.standard_normal((n, cols)).astype(dtype)
            lr = 0.01 * np.sqrt(1 - BETA2 ** (step + 1)) / (1 - BETA1 ** (step + 1))
            numpy_step(w, m, v, values, indices, lr, **params)
            kernels.step(tw, tm, tv, torch.from_numpy(values).to(device),
                         torch.from_numpy(indices).to(device), lr, **params)
        label = "%s cols=%d %s" % (np.dtype(dtype).name, cols, params)
        for name, got, want in (("weight", tw, w), ("mean", tm, m), ("var", tv, v)):
            assert_bitwise("%s vs numpy_step (%s)" % (name, label), got, want)
        print("ok  bitwise equal to NumPy: %s, %d x %d, %s, 50 steps"
              % (np.dtype(dtype).name, rows, cols, params))
    z = torch.zeros((10, 4), device=device)
    expect_rejections(
        (expected, lambda bad=bad: kernels.step(
            z, z.clone(), z.clone(), torch.ones((len(bad), 4), device=device),
            torch.tensor(bad, dtype=torch.int64, device=device), 0.1))
        for bad, expected in (([3, 10], "out of range"), ([-1], "out of range"),
                              ([5, 2], "sorted and unique"), ([2, 2], "sorted and unique")))
    print("ok  bad indices rejected before any write")


def _deferred_step(deferred, torch, t, t_values, t_indices, lr, wd, params, device):
    """Step ``t`` of the deferred kernels, catching up one way or the other by parity."""
    if t % 2:
        # As a forward pass: bring the rows the batch reads (each as often as
        # the batch holds it, in batch order) to t - 1, then the update checks them.
        read = t_indices.repeat(3)[torch.randperm(3 * len(t_indices), device=device)]
        deferred.catch_up(read, t - 1)
        deferred.update(t_values, t_indices, t, lr, wd=wd, **params)
    else:
        deferred.update(t_values, t_indices, t, lr, wd=wd, catch_up=True, **params)


def check_deferred_case(lib, kernels, torch, case, dtype, rows, cols, steps, rows_of_step, wd_of,
                        params, device="cuda"):
    """One of ``DEFERRED_CASES``: every step and the final flush (see the package's doc)."""
    rng = np.random.default_rng(case)
    w = rng.standard_normal((rows, cols)).astype(dtype)
    w[-1, :2] = [0.0, -0.0]  # signed zeros in a row never touched
    m, v = np.zeros_like(w), np.zeros_like(w)
    reference = NumpyDeferredAdam(w)
    eager = [torch.from_numpy(a.copy()).to(device) for a in (w, m, v)]
    deferred = DeferredAdamKernels(lib, torch, torch.from_numpy(w.copy()).to(device),
                                   steps + 1)
    state = (deferred.weight, deferred.mean, deferred.var, deferred.last_step)
    names = ("weight", "mean", "var", "last_step")
    for t in range(1, steps + 1):
        indices = rows_of_step(rng, rows, t, steps)
        values = rng.standard_normal((len(indices), cols)).astype(dtype)
        lr, wd = lr_schedule(t), wd_of(t)
        numpy_step(w, m, v, values, indices, lr, wd=wd, **params)
        reference.update(values, indices, t, lr, wd=wd, **params)
        t_values = torch.from_numpy(values).to(device)
        t_indices = torch.from_numpy(indices).to(device)
        kernels.step(*eager, t_values, t_indices, lr, wd=wd, **params)

        before = [tensor_bits(torch, a).clone() if a.is_floating_point() else a.clone()
                  for a in state]
        _deferred_step(deferred, torch, t, t_values, t_indices, lr, wd, params, device)
        touched = torch.zeros(rows, dtype=torch.bool, device=device)
        touched[t_indices] = True
        for name, old, new in zip(names, before, state):
            assert_only_rows_changed(torch, "step %d, %s:" % (t, name), old, new, touched)
        for name, got, want in zip(names, state, eager):
            assert_bitwise("step %d, %s of the gradient rows vs the eager kernels" % (t, name),
                           got[t_indices], want[t_indices].cpu().numpy())
        assert_bitwise("step %d, last_step vs NumpyDeferredAdam's" % t, deferred.last_step,
                       reference.last_step)

    last = deferred.last_step.cpu().numpy()
    if not (last[rows * 9 // 10:] == 0).all():
        raise AssertionError("never-touched rows were replayed")
    if (last < steps).sum() <= rows // 10:
        raise AssertionError("too few rows deferred to the final flush")
    deferred.flush(steps)
    reference.flush()
    assert_bitwise("last_step after the flush", deferred.last_step,
                   np.full(rows, steps, np.int64))
    label = "%s, %d x %d, wd %s..%s, %s" % (np.dtype(dtype).name, rows, cols, wd_of(1),
                                           wd_of(steps), params)
    for name, got, want_gpu, want_np, want_replay in zip(
            names, state, eager, (w, m, v), (reference.weight, reference.mean, reference.var)):
        got = got.cpu().numpy()
        assert_bitwise("%s after the flush vs the eager kernels (%s)" % (name, label), got,
                       want_gpu.cpu().numpy())
        assert_bitwise("%s after the flush vs numpy_step (%s)" % (name, label), got, want_np)
        assert_bitwise("%s after the flush vs NumpyDeferredAdam (%s)" % (name, label), got,
                       want_replay)
    flushed = [a.clone() for a in state]
    deferred.flush(steps)
    for name, old, new in zip(names, flushed, state):
        assert_bitwise("%s after a second flush" % name, new, old.cpu().numpy())
    print("ok  deferred bitwise equal to the eager kernels, numpy_step and "
          "NumpyDeferredAdam after the flush, only the gradient's rows written each step: "
          "%s, %d steps" % (label, steps))


def check_deferred_correctness(lib, kernels, torch, device="cuda"):
    """Deferred kernels against the eager kernels and NumPy, every case, then the rejections."""
    for case, spec in enumerate(DEFERRED_CASES):
        check_deferred_case(lib, kernels, torch, case, *spec, device=device)
    check_deferred_rejections(lib, torch, device)


def check_deferred_rejections(lib, torch, device="cuda"):
    """Stale rows, bad indices and a short history are rejected before any write."""
    deferred = DeferredAdamKernels(lib, torch, torch.randn(10, 4, device=device), 8)
    ones = torch.ones((1, 4), device=device)
    for t, row in ((1, 0), (2, 1)):
        deferred.update(ones, torch.tensor([row], device=device), t, 0.1)
    snapshot = [a.clone() for a in (deferred.weight, deferred.mean, deferred.var,
                                    deferred.last_step, deferred.history)]

    def rows(*indices):
        return torch.tensor(indices, dtype=torch.int64, device=device)
    # Row 0 is at step 1 with a non-zero state: step 2 would change it, so a
    # gradient for it at step 3 means it was read without being brought up to date.
    expect_rejections([
        ("read stale", lambda: deferred.update(ones, rows(0), 3, 0.1)),
        ("out of range", lambda: deferred.update(ones, rows(10), 3, 0.1)),
        ("out of range", lambda: deferred.update(ones, rows(-1), 3, 0.1)),
        ("sorted and unique", lambda: deferred.update(ones.repeat(2, 1), rows(2, 2), 3, 0.1)),
        ("does not fit", lambda: deferred.update(ones, rows(1), 8, 0.1)),
        ("does not fit", lambda: deferred.flush(8)),
    ])
    for name, old, new in zip(("weight", "mean", "var", "last_step", "history"), snapshot,
                              (deferred.weight, deferred.mean, deferred.var,
                               deferred.last_step, deferred.history)):
        assert_bitwise("%s after the rejected calls" % name, new, old.cpu().numpy())
    # The same row with catch-up is accepted.
    deferred.update(ones, rows(0), 3, 0.1, catch_up=True)
    print("ok  deferred: stale rows, bad indices and a short history rejected before any write")
