"""GPU checks and timings of the optimizer family's CUDA kernels, against recorded CPU runs.

The fixtures (``make_family_fixtures.py``: one ``<rule>_<dtype>.npz`` per
case, written where MXNet is installed) hold a multi-step run of each rule's
CPU operator: its inputs (initial weight, gradient rows and values of each
step, the step scalars exactly as the operator parsed them) and its outputs.
For each fixture ``check_family_case``:

(a) runs the eager kernel step by step and requires the weight and every state
    **bitwise** equal to the CPU operator's: the rules' arithmetic is written
    with never-fused, correctly rounded helpers (``__fmul_rn``... in CUDA; the
    host build has no FMA), in the same order on both sides;
(b) runs the deferred kernels next to it, bringing rows up to date both ways
    the operators do (a catch-up of the rows a batch reads, then the update
    with its stale-row check; the update's own catch-up), and after every step
    requires that only the gradient's rows changed (weight, states, last_step)
    and that they equal the eager kernel's bitwise; after the flush every array
    must be bitwise the eager kernel's (and the CPU operator's), and a second
    flush must change nothing;
(c) compares with MXNet's own dense update where it is recorded (float64: no
    farther from it than the CPU operator is).

``check_vector_path`` (d) requires the eager kernel's 16-byte path (rows a
multiple of 16 bytes wide, aligned arrays) to equal its one-element path bit
for bit. ``check_family_rejections`` requires stale rows, rows ahead of the update,
bad indices, a step beyond the history and a bad last_step at the flush to be
rejected before any write. ``benchmark_family`` times, per rule, the deferred
step (catch-up + update of a 640-row gradient) against the eager step.
"""
import glob
import os

import numpy as np

from .checks import assert_bitwise, assert_only_rows_changed, expect_rejections, tensor_bits
from .family_bindings import DeferredRuleKernels, RuleKernels

# Beside the prebuilt libraries (build/ is not committed): a device run carries both.
FIXTURE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build",
                           "fixtures")


def fixture_paths(directory=FIXTURE_DIR):
    """The fixture files of ``directory``, sorted; raises if there are none."""
    paths = sorted(glob.glob(os.path.join(directory, "*.npz")))
    if not paths:
        raise FileNotFoundError("no fixtures in %s: run benchmarks/gpu/make_family_fixtures.py "
                                "where MXNet is installed" % directory)
    return paths


class Fixture:
    """One recorded CPU run (see ``make_family_fixtures.py`` for its arrays)."""

    def __init__(self, path):
        with np.load(path) as z:
            self.arrays = {k: z[k] for k in z.files}
        a = self.arrays
        self.rule, self.dtype = str(a["rule"]), np.dtype(str(a["dtype"]))
        self.steps, self.num_states = int(a["steps"]), int(a["num_states"])
        self.fixed, self.rescale_grad = a["fixed"], float(a["rescale_grad"])
        self.label = "%s %s" % (self.rule, self.dtype.name)

    def gradient(self, t):
        """Step ``t``'s gradient: (sorted row indices, values)."""
        lo, hi = self.arrays["grad_offsets"][t - 1], self.arrays["grad_offsets"][t]
        return self.arrays["grad_indices"][lo:hi], self.arrays["grad_values"][lo:hi]

    def scalars(self, t):
        """Step ``t``'s step scalars (float32, as the operator parsed them)."""
        return self.arrays["step_scalars"][t]

    def expected(self):
        """The CPU operator's weight and states after the run."""
        return [self.arrays["weight"]] + [self.arrays["state%d" % k]
                                          for k in range(self.num_states)]


def _deferred_step(deferred, torch, t, values, indices, scalars, rescale_grad, device):
    """Step ``t`` of the deferred kernels, catching up one way or the other by parity."""
    if t % 2:
        # As a forward pass: the rows the batch reads (repeats, batch order) to t - 1,
        # then the update with its stale-row check.
        read = indices.repeat(3)[torch.randperm(3 * len(indices), device=device)]
        deferred.catch_up(read, t - 1)
        deferred.update(values, indices, t, scalars, rescale_grad)
    else:
        deferred.update(values, indices, t, scalars, rescale_grad, catch_up=True)


def check_family_case(lib, torch, path, device="cuda"):
    """Checks (a), (b) and (c) of the module's doc on the fixture at ``path``."""
    fx = Fixture(path)
    kernels = RuleKernels(lib, torch, fx.rule, device)
    if kernels.num_states != fx.num_states:
        raise AssertionError("%s: the library's rule has %d states, the fixture %d"
                             % (fx.label, kernels.num_states, fx.num_states))
    w0 = fx.arrays["weight0"]
    rows = w0.shape[0]
    eager = [torch.from_numpy(w0.copy()).to(device)] + [
        torch.zeros(w0.shape, dtype=eager_dtype(torch, fx.dtype), device=device)
        for _ in range(fx.num_states)]
    deferred = DeferredRuleKernels(lib, torch, fx.rule, torch.from_numpy(w0.copy()).to(device),
                                   fx.steps + 1, fx.fixed)
    state = [deferred.weight] + deferred.states + [deferred.last_step]
    names = ["weight"] + ["state%d" % k for k in range(fx.num_states)] + ["last_step"]
    last_step = np.zeros(rows, np.int64)
    for t in range(1, fx.steps + 1):
        indices, values = fx.gradient(t)
        t_indices = torch.from_numpy(indices.copy()).to(device)
        t_values = torch.from_numpy(values.copy()).to(device)
        kernels.step(eager[0], eager[1:], t_values, t_indices, fx.scalars(t), fx.fixed,
                     fx.rescale_grad)
        before = [tensor_bits(torch, a).clone() if a.is_floating_point() else a.clone()
                  for a in state]
        _deferred_step(deferred, torch, t, t_values, t_indices, fx.scalars(t), fx.rescale_grad,
                       device)
        touched = torch.zeros(rows, dtype=torch.bool, device=device)
        touched[t_indices] = True
        for name, old, new in zip(names, before, state):
            assert_only_rows_changed(torch, "%s step %d, %s:" % (fx.label, t, name), old, new,
                                     touched)
        for name, got, want in zip(names, state, eager):
            assert_bitwise("%s step %d, %s of the gradient rows vs the eager kernel"
                           % (fx.label, t, name), got[t_indices], want[t_indices].cpu().numpy())
        last_step[indices] = t
    assert_bitwise("%s last_step before the flush" % fx.label, deferred.last_step, last_step)
    if (last_step < fx.steps).sum() <= rows // 10:
        raise AssertionError("%s: too few rows deferred to the flush" % fx.label)

    for name, got, want in zip(names, eager, fx.expected()):
        assert_bitwise("%s: eager kernel's %s vs the CPU operator's" % (fx.label, name), got,
                       want)
    deferred.flush(fx.steps)
    assert_bitwise("%s last_step after the flush" % fx.label, deferred.last_step,
                   np.full(rows, fx.steps, np.int64))
    for name, got, want in zip(names, state, eager):
        assert_bitwise("%s: %s after the flush vs the eager kernel" % (fx.label, name), got,
                       want.cpu().numpy())
    flushed = [a.clone() for a in state]
    deferred.flush(fx.steps)
    for name, old, new in zip(names, flushed, state):
        assert_bitwise("%s: %s after a second flush" % (fx.label, name), new, old.cpu().numpy())
    print("ok  %s: eager kernel bitwise equal to the CPU operator after %d steps; deferred "
          "(only the gradient's rows written each step) bitwise equal to it after the flush%s"
          % (fx.label, fx.steps, compare_with_mxnet(fx, [a.cpu().numpy() for a in eager])))


def _misaligned_copy(torch, tensor):
    """A copy of ``tensor`` one element into a fresh buffer: its address is not a
    multiple of 16, so the eager kernel takes its one-element-a-thread path."""
    buffer = torch.empty(tensor.numel() + 1, dtype=tensor.dtype, device=tensor.device)
    copy = buffer[1:].view(tensor.shape)
    copy.copy_(tensor)
    assert copy.data_ptr() % 16 != 0
    return copy


def check_vector_path(lib, torch, path, device="cuda", rows=64, cols=128, steps=40):
    """(d) The eager kernel's 16-byte path equals its one-element path bitwise.

    The fixtures' rows are 37 wide, which only the one-element path takes; here
    a ``rows x cols`` weight (cols a multiple of 4) with the fixture's scalars
    steps ``steps`` times with random gradients, once 16-byte aligned (the
    vector path) and once one element off (the other), and every array must end
    equal bit for bit.
    """
    fx = Fixture(path)
    kernels = RuleKernels(lib, torch, fx.rule, device)
    rng = np.random.default_rng(len(fx.label))
    dtype = eager_dtype(torch, fx.dtype)
    weight = torch.from_numpy(rng.standard_normal((rows, cols)).astype(fx.dtype)).to(device)
    vector = [weight.clone()] + [torch.zeros_like(weight) for _ in range(fx.num_states)]
    scalar = [_misaligned_copy(torch, a) for a in vector]
    if any(a.data_ptr() % 16 for a in vector):
        raise AssertionError("%s: the vector path's arrays are not 16-byte aligned" % fx.label)
    for t in range(1, steps + 1):
        indices = np.sort(rng.choice(rows, int(rng.integers(0, rows // 2)), replace=False))
        values = rng.standard_normal((len(indices), cols)).astype(fx.dtype)
        t_indices = torch.from_numpy(indices.astype(np.int64)).to(device)
        t_values = torch.from_numpy(values).to(device=device, dtype=dtype)
        scalars = fx.scalars(min(t, fx.steps))
        for arrays in (vector, scalar):
            kernels.step(arrays[0], arrays[1:], t_values, t_indices, scalars, fx.fixed,
                         fx.rescale_grad)
    names = ["weight"] + ["state%d" % k for k in range(fx.num_states)]
    for name, got, want in zip(names, vector, scalar):
        assert_bitwise("%s: %s of the 16-byte path vs the one-element path" % (fx.label, name),
                       got, want.cpu().numpy())
    print("ok  %s: the eager kernel's 16-byte path bitwise equal to its one-element path "
          "(%d x %d, %d steps)" % (fx.label, rows, cols, steps))


def eager_dtype(torch, dtype):
    """The torch dtype of a NumPy float dtype."""
    return {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}[dtype]


def compare_with_mxnet(fx, got):
    """Check (c): ``got`` (weight, states) against MXNet's dense update; a note for the log."""
    a = fx.arrays
    if not str(a["mxnet_class"]):
        return "; MXNet 1.9 has no %s optimizer to compare with" % fx.rule
    if bool(a["mxnet_bitwise"]):
        return "; MXNet's dense %s is bitwise the CPU operator, so the kernels' too" % (
            a["mxnet_class"])
    from_cpu = float(a["mxnet_cpu_max_abs"])
    worst = max(max_abs_difference(g, a["mxnet_%d" % k]) for k, g in enumerate(got))
    if worst > from_cpu:
        raise AssertionError("%s: %g from MXNet's dense update, farther than the CPU "
                             "operator's %g" % (fx.label, worst, from_cpu))
    within = all(np.allclose(g, a["mxnet_%d" % k], rtol=float(a["mxnet_rtol"]),
                             atol=float(a["mxnet_atol"]), equal_nan=True)
                 for k, g in enumerate(got))
    return ("; %s MXNet's dense update (rtol %g, atol %g; max |diff| %g, the CPU operator's %g)"
            % ("within" if within else "as the CPU operator, outside", float(a["mxnet_rtol"]),
               float(a["mxnet_atol"]), worst, from_cpu))


def max_abs_difference(got, want):
    """Largest |got - want|; NaN in one array only counts as inf, in both as 0."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    both = np.isnan(got) & np.isnan(want)
    with np.errstate(invalid="ignore"):
        diff = np.where(both, 0.0, np.abs(got - want))
    diff[np.isnan(diff)] = np.inf
    return float(diff.max()) if diff.size else 0.0


def check_family_rejections(lib, torch, path, device="cuda"):
    """Stale rows, bad indices, a short history and a bad last_step: rejected before any write.

    Uses the fixture's last step scalars (weight decay on in every case then, so a
    missed step moves any row, even at zero state).
    """
    fx = Fixture(path)
    scalars = fx.scalars(fx.steps)
    dtype = eager_dtype(torch, fx.dtype)
    deferred = DeferredRuleKernels(lib, torch, fx.rule,
                                   torch.randn(10, 4, dtype=dtype, device=device) + 2.0, 8,
                                   fx.fixed)
    ones = torch.ones((1, 4), dtype=dtype, device=device)

    def rows(*indices):
        return torch.tensor(indices, dtype=torch.int64, device=device)
    for t, row in ((1, 0), (2, 1)):  # row 0 at step 1, row 1 at step 2
        deferred.update(ones, rows(row), t, scalars, catch_up=True)
    arrays = [deferred.weight] + deferred.states + [deferred.last_step, deferred.history]
    snapshot = [a.clone() for a in arrays]
    expect_rejections([
        # row 0 is at step 1 and step 2 moves it: a gradient for it at step 3 read it stale
        ("read stale", lambda: deferred.update(ones, rows(0), 3, scalars)),
        ("not before", lambda: deferred.update(ones, rows(1), 2, scalars)),
        ("out of range", lambda: deferred.update(ones, rows(10), 3, scalars)),
        ("out of range", lambda: deferred.update(ones, rows(-1), 3, scalars)),
        ("sorted and unique", lambda: deferred.update(ones.repeat(2, 1), rows(3, 2), 3, scalars)),
        ("sorted and unique", lambda: deferred.update(ones.repeat(2, 1), rows(2, 2), 3, scalars)),
        ("does not fit", lambda: deferred.update(ones, rows(1), 8, scalars)),
        ("does not fit", lambda: deferred.flush(8)),
        ("outside [0, 1]", lambda: deferred.flush(1)),
    ])
    for name, old, new in zip(["weight"] + ["state"] * fx.num_states + ["last_step", "history"],
                              snapshot, arrays):
        assert_bitwise("%s: %s after the rejected calls" % (fx.label, name), new,
                       old.cpu().numpy())
    eager = RuleKernels(lib, torch, fx.rule, device)
    w = torch.zeros((10, 4), dtype=dtype, device=device)
    states = [torch.zeros_like(w) for _ in range(fx.num_states)]
    expect_rejections(
        (expected, lambda bad=bad: eager.step(
            w, states, torch.ones((len(bad), 4), dtype=dtype, device=device),
            rows(*bad), scalars, fx.fixed))
        for bad, expected in (([3, 10], "out of range"), ([-1], "out of range"),
                              ([5, 2], "sorted and unique"), ([2, 2], "sorted and unique")))
    if bool((tensor_bits(torch, w) != 0).any()):
        raise AssertionError("%s: a rejected eager step wrote the weight" % fx.label)
    deferred.update(ones, rows(0), 3, scalars, catch_up=True)  # accepted with catch-up
    print("ok  %s: stale rows, bad indices, a short history and a bad last_step rejected "
          "before any write" % fx.label)


def benchmark_family(lib, torch, paths, rows, cols, grad_rows, repeat):
    """Per rule: the deferred step (catch-up of ``grad_rows`` rows 1 step behind + update)
    vs the eager step over every row, float32 ``rows x cols``; prints a markdown table."""
    from .timing import cuda_time, versions
    float32 = [Fixture(p) for p in paths if p.endswith("_float32.npz")]
    weight = torch.randn(rows, cols, device="cuda")
    states = [torch.rand(rows, cols, device="cuda") * 1e-3 for _ in range(3)]
    calls = repeat + 2  # cuda_time's two warm-ups + repeat
    if calls * grad_rows > rows:
        raise ValueError("the timed deferred steps need (repeat + 2) x grad_rows = %d rows"
                         % (calls * grad_rows))
    order = torch.randperm(rows, device="cuda")
    index_sets = [torch.sort(order[i * grad_rows:(i + 1) * grad_rows]).values
                  for i in range(calls)]
    values = torch.randn(grad_rows, cols, device="cuda")
    lines = ["", "#### Optimizer family on %s: %d x %d float32, %d-row gradient (%s)"
             % (torch.cuda.get_device_name(), rows, cols, grad_rows, versions(torch)), "",
             "| rule | eager step (every row) | deferred step (catch-up 1 step + update) | "
             "eager / deferred |", "|---|---|---|---|"]
    for fx in float32:
        scalars = fx.scalars(fx.steps)
        eager = RuleKernels(lib, torch, fx.rule)
        n = fx.num_states
        eager_ms = cuda_time(torch, lambda: eager.step(
            weight, states[:n], values, index_sets[0], scalars, fx.fixed, fx.rescale_grad),
            repeat)
        deferred = DeferredRuleKernels(lib, torch, fx.rule, weight, 4 + calls, fx.fixed)
        deferred.states = states[:n]  # timing only: a non-zero state, no zero-state shortcut
        deferred.history[:] = torch.from_numpy(scalars.copy()).to("cuda")
        base = 2
        deferred.last_step.fill_(base - 1)
        for i, indices in enumerate(index_sets):
            deferred.last_step[indices] = base + i - 2  # one missed step each
        call = iter(range(calls))

        def one_step():
            i = next(call)
            deferred.update(values, index_sets[i], base + i, scalars, fx.rescale_grad,
                            catch_up=True)
        deferred_ms = cuda_time(torch, one_step, repeat)
        lines.append("| %s | %.3f ms | %.3f ms | %.0fx |" % (fx.rule, eager_ms, deferred_ms,
                                                           eager_ms / deferred_ms))
    print("\n".join(lines))
