"""Training runs shared by the AdaGrad and FTRL tests: one FullyConnectedSparse
weight trained through gluon.Trainer by a Sparse<Class> optimizer, next to MXNet's
own optimizer applied to the same gradients made dense (its standard update).
And the host harness of the rules' replay_row hooks (tests/rule_replay_harness.cc),
shared by every test of a hook.

The loss is ``sum(net(x) * c)``: the weight's gradient ``x^T c`` does not depend
on the weight, so every run sees the same gradients and any difference in the
weights or states comes from the update alone. ``x`` has one entry per row
touched by the step, so the caller chooses which rows move and for how long
rows stay absent.
"""
import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import gluon_sparse.optimizer as gs_optimizer
from gluon_sparse.nn import FullyConnectedSparse

OPS = Path(__file__).resolve().parent.parent / "gluon_sparse" / "csrc" / "ops"


def make_net(init, dtype):
    """A bias-free FullyConnectedSparse whose (in_units, units) weight is ``init``."""
    net = FullyConnectedSparse(init.shape[1], in_units=init.shape[0], use_bias=False,
                               dtype=dtype)
    net.initialize()
    net.weight.set_data(mx.nd.array(init, dtype=dtype))
    return net


def batch(rng, rows, num_rows, cols, dtype):
    """CSR ``x`` with one entry (of either sign) per row in ``rows``, and ``c``.

    No rows: one empty example, so the step's gradient holds no row.
    """
    rows = np.asarray(rows, dtype=np.int64)
    values = (rng.uniform(0.5, 1.5, len(rows)) * rng.choice([-1, 1], len(rows))).astype(dtype)
    if len(rows):
        indptr = np.arange(len(rows) + 1)
    else:
        indptr = np.zeros(2, dtype=np.int64)
    x = mx.nd.sparse.csr_matrix((values, rows, indptr), shape=(len(indptr) - 1, num_rows),
                                dtype=dtype)
    c = mx.nd.array(rng.standard_normal((len(indptr) - 1, cols)), dtype=dtype)
    return x, c


def train_step(net, trainer, x, c):
    """One forward/backward/step; returns the weight's (row_sparse) gradient."""
    with autograd.record():
        loss = (net(x) * c).sum()
    loss.backward()
    grad = net.weight.grad().copy()
    trainer.step(1)
    return grad


class MXNetReference:
    """MXNet's own optimizer on a copy of the weight, given the dense gradients.

    States are created in the weight's dtype (MXNet's AdaGrad and Ftrl make
    float32 states whatever the weight, so they cannot run float64 otherwise;
    their update ops take any float type).
    """

    def __init__(self, optimizer, init, dtype, num_states):
        self.optimizer = optimizer
        self.weight = mx.nd.array(init, dtype=dtype)
        states = [mx.nd.zeros(init.shape, dtype=dtype) for _ in range(num_states)]
        self.state = states[0] if num_states == 1 else tuple(states)

    def step(self, grad):
        self.optimizer.update(0, self.weight, grad.tostype("default"), self.state)

    def arrays(self):
        """Weight, then the states, as NumPy arrays."""
        states = [self.state] if isinstance(self.state, mx.nd.NDArray) else list(self.state)
        return [a.asnumpy() for a in [self.weight] + states]


def state_arrays(trainer, index=0):
    """The optimizer states of parameter ``index`` in MXNet's layout order, caught up."""
    gs_optimizer.flush(trainer)
    state = trainer._updaters[0].states[index]
    if isinstance(state, mx.nd.NDArray):
        arrays = [state]
    elif isinstance(state, (tuple, list)):
        arrays = list(state)
    else:
        arrays = list(state.states)
    return [a.asnumpy() for a in arrays]


def trained_arrays(net, trainer):
    """Weight (read through Gluon, which catches it up), then the states."""
    return [net.weight.data().asnumpy()] + state_arrays(trainer)


def assert_bitwise(got, want, what=""):
    """Lists of arrays equal bit for bit (signs of zeros included), except that any NaN
    equals any NaN in the same place: NaN payloads and signs are not reproducible (the
    compiler may swap the operands of + and *)."""
    assert len(got) == len(want), (what, len(got), len(want))
    for k, (a, b) in enumerate(zip(got, want)):
        a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
        assert a.dtype == b.dtype, (what, k, a.dtype, b.dtype)
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg="%s array %d: NaNs"
                                      % (what, k))
        kind = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
        np.testing.assert_array_equal(a[~np.isnan(a)].view(kind), b[~np.isnan(b)].view(kind),
                                      err_msg="%s array %d" % (what, k))


def gap_schedule(num_rows, steps, seed, never=0.2):
    """Rows touched at each step 1..steps: row 0 at the first and last steps only,
    a fraction ``never`` of the rows never, the rest in small random batches, and
    every 13th step no row at all."""
    rng = np.random.default_rng(seed)
    active = np.arange(1, num_rows - int(num_rows * never))
    plan = []
    for t in range(1, steps + 1):
        if t in (1, steps):
            plan.append(np.array([0]))
        elif t % 13 == 0:
            plan.append(np.array([], dtype=np.int64))
        else:
            plan.append(np.sort(rng.choice(active, min(5, len(active)), replace=False)))
    return plan


def run(optimizer, reference, init, dtype, plan, seed=0):
    """Train ``optimizer`` (a Sparse<Class> instance) over ``plan`` and, if given,
    ``reference`` (an MXNetReference) on the same gradients; returns (net, trainer)."""
    rng = np.random.default_rng(seed)
    net = make_net(init, dtype)
    trainer = gluon.Trainer(net.collect_params(), optimizer, update_on_kvstore=False)
    for rows in plan:
        grad = train_step(net, trainer, *batch(rng, rows, init.shape[0], init.shape[1], dtype))
        if reference is not None:
            reference.step(grad)
    return net, trainer


# ------------------------------------------------------- replay_row hooks, host C++
def compile_driver(source_path, out_path):
    """``source_path`` (C++) compiled into the shared object ``out_path`` the way the
    library builds its sources (-O3, C++17), with the host SIMD dispatch (host_simd.cc)
    and the geometric decay (geometric_decay.cc) linked in, and loaded with ctypes;
    None without a C++ compiler.

    ``gluon_sparse_force_simd_path(int)`` is typed; the caller types its own entry points.
    """
    compiler = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")
    if compiler is None:
        return None
    built = subprocess.run([compiler, "-O3", "-std=c++17", "-fPIC", "-shared", "-I", str(OPS),
                            str(source_path), str(OPS / "host_simd.cc"),
                            str(OPS / "geometric_decay.cc"), "-o", str(out_path)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    lib = ctypes.CDLL(str(out_path))
    lib.gluon_sparse_force_simd_path.argtypes = [ctypes.c_int]
    return lib


def build_replay_harness(out_dir):
    """tests/rule_replay_harness.cc compiled by :func:`compile_driver`; None without a
    compiler. The tests take it from the session fixture ``rule_replay_harness``
    (tests/conftest.py)."""
    return compile_driver(Path(__file__).with_name("rule_replay_harness.cc"),
                          Path(out_dir) / "rule_replay_harness.so")


def _replay(lib, rule, weight, states, history, fixed, start, end, hook):
    suffix = "f32" if weight.dtype == np.float32 else "f64"
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    return getattr(lib, "%s_replay_%s" % (rule, suffix))(
        ctypes.c_int64(weight.size), ptr(weight), ptr(states), ptr(history),
        ptr(np.asarray(fixed, np.float32)), ctypes.c_int64(start), ctypes.c_int64(end),
        ctypes.c_int(hook))


def check_replay_hook(lib, rule, cases, simd_paths=(None,)):
    """Every case replayed by the rule's replay_row hook equals the step-by-step replay
    bit for bit (:func:`assert_bitwise`), and a refused case is left untouched.
    Returns how many cases the hook took (on the last SIMD path).

    ``cases`` yields (weight row, states (k, cols), history (steps, kNumStep) float32,
    fixed scalars, from, to); ``simd_paths`` the host SIMD builds to run the hook on
    (``gluon_sparse_force_simd_path``: 0 baseline, 1 AVX2; None: the machine's).
    """
    taken = 0
    try:
        for case, (weight, states, history, fixed, start, end) in enumerate(cases):
            want_w, want_s = weight.copy(), states.copy()
            _replay(lib, rule, want_w, want_s, history, fixed, start, end, 0)
            for path in simd_paths:
                lib.gluon_sparse_force_simd_path(-1 if path is None else path)
                got_w, got_s = weight.copy(), states.copy()
                took = _replay(lib, rule, got_w, got_s, history, fixed, start, end, 1)
                what = "%s case %d, replay %d..%d, %s x %d, fixed %s, SIMD path %s" % (
                    rule, case, start, end, weight.dtype, weight.size, list(fixed), path)
                if took:
                    assert_bitwise([got_w, got_s], [want_w, want_s], what)
                else:
                    assert_bitwise([got_w, got_s], [weight, states], "refused " + what)
            taken += took
    finally:
        lib.gluon_sparse_force_simd_path(-1)
    return taken


def odd_history(rng, steps, odd_lrs, odd_wds):
    """Float32 ``(lr, wd)`` of steps 0..steps (0 unused, as in the framework): decaying lrs,
    wd mostly 0, and now and then one odd lr or wd."""
    lrs = rng.choice([0.1, 0.05, 1e-3, 2.0], steps + 1) * (rng.random(steps + 1) ** 2 + 0.01)
    wds = rng.choice([0.0, 0.0, 0.01, 0.1], steps + 1)
    if rng.random() < 0.3:
        lrs[rng.integers(1, steps + 1)] = rng.choice(odd_lrs)
    if rng.random() < 0.2:
        wds[rng.integers(1, steps + 1)] = rng.choice(odd_wds)
    return lrs.astype(np.float32), wds.astype(np.float32)


def last_step_marks(flags):
    """Per step, the last step <= it whose flag is set (0: none), as optimizer/_replay_marks
    writes into the records."""
    steps = np.where(flags, np.arange(len(flags)), 0)
    steps[0] = 0
    return np.maximum.accumulate(steps).astype(np.float32)
