"""SparseRMSProp (plain and centered), eager and deferred, against MXNet 1.9.1's own
mx.optimizer.RMSProp.update given the dense gradient (rows absent from the batch are
zeros): the standard update, computed there by one C++ kernel (rmsprop_update /
rmspropalex_update) whose operation order the rule copies, so every comparison is
bitwise (float32 and float64).

MXNet's RMSProp creates float32 states whatever the weight's dtype, which its own
operator then rejects for float64 weights; the float64 reference is the same
RMSProp.update with states in the weight's dtype (what SparseRMSProp creates).

The grid is MXNet's own test_rms grid (tests/python/unittest/test_optimizer.py at
1.9.1: centered, clip_weights, clip_gradient, rescale_grad, wd; float16 only with
multi_precision, which SparseRMSProp hands to MXNet) with float64 added, under a
learning-rate schedule, with rows untouched for long gaps and rows never touched.

MXNet parses float parameters with dmlc::stof, which is not correctly rounded (about 1
value in 6 of a 0.8-factor schedule lands one float32 ulp away from strtof's); the
library's operators parse them the same way, and the schedule here hits such values.
"""

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from gluon_sparse.nn import FullyConnectedSparse
from gluon_sparse.optimizer import SparseRMSProp, flush
from covering import pairwise
from optimizer_rule_runs import assert_bitwise, check_replay_hook

ROWS, UNITS = 24, 3


class _DecayCycle(mx.lr_scheduler.LRScheduler):
    """lr = base_lr * 0.8 ** (7 * update % 25): another lr at every step, among them (at
    base_lr 0.01, update 3 and every 25th after) values MXNet's dmlc::stof does not round
    correctly (see test_lr_parsed_as_mxnet_parses_it)."""

    def __call__(self, num_update):
        return self.base_lr * 0.8 ** (7 * num_update % 25)


def _schedule():
    return _DecayCycle()


def _reference(weight, **kwargs):
    """MXNet's RMSProp and its state for ``weight`` (a copy), in the weight's dtype."""
    opt = mx.optimizer.RMSProp(lr_scheduler=_schedule(), **kwargs)
    state = tuple(mx.nd.zeros(weight.shape, dtype=weight.dtype)
                  for _ in range(3 if opt.centered else 1))
    return opt, weight.copy(), state


def _net(dtype, seed=0):
    mx.random.seed(seed)
    net = FullyConnectedSparse(UNITS, use_bias=False, in_units=ROWS, dtype=dtype)
    net.initialize(mx.init.Uniform(0.5))
    return net


def _trainer(net, deferred, **kwargs):
    opt = SparseRMSProp(deferred=deferred, lr_scheduler=_schedule(), **kwargs)
    return gluon.Trainer(net.collect_params(), opt)


def _one_hot(rows, dtype):
    """A CSR batch whose row i reads weight row rows[i] with value 1 (so out = W[rows])."""
    rows = np.asarray(rows, dtype=np.int64)
    return mx.nd.sparse.csr_matrix((np.ones(len(rows), dtype), rows, np.arange(len(rows) + 1)),
                                   shape=(len(rows), ROWS), dtype=dtype)


def _state_arrays(trainer):
    """The optimizer state of the only weight, as NumPy arrays in MXNet's layout."""
    state = trainer._updaters[0].states[0]
    arrays = state if isinstance(state, (tuple, list)) else state.states
    return [a.asnumpy() for a in arrays]


def _assert_bitwise(got, want, what):
    assert_bitwise([got], [want], what)


class _Run:
    """One net trained by SparseRMSProp next to MXNet's update of a copy of its weight."""

    def __init__(self, deferred, dtype, **kwargs):
        self.net = _net(dtype)
        self.trainer = _trainer(self.net, deferred, **kwargs)
        self.ref_opt, self.ref_w, self.ref_state = _reference(self.net.weight.data(), **kwargs)
        self.dtype = dtype
        self.rng = np.random.default_rng(5)

    def step(self, rows):
        """Train on a batch reading ``rows``; its outputs must be the reference's rows."""
        x = _one_hot(rows, self.dtype)
        target = mx.nd.array(self.rng.standard_normal((len(rows), UNITS)), dtype=self.dtype)
        with autograd.record():
            out = self.net(x)
            loss = ((out - target) ** 2).sum()
        loss.backward()
        # The forward read the rows through the product op: caught up, bitwise.
        np.testing.assert_array_equal(out.asnumpy(), self.ref_w.asnumpy()[rows])
        grad = self.net.weight.grad().tostype("default")
        self.trainer.step(1)
        self.ref_opt.rescale_grad = self.trainer._optimizer.rescale_grad
        self.ref_opt.update(0, self.ref_w, grad, self.ref_state)

    def check(self, what=""):
        _assert_bitwise(self.net.weight.data().asnumpy(), self.ref_w.asnumpy(), "weight " + what)
        for k, (got, want) in enumerate(zip(_state_arrays(self.trainer), self.ref_state)):
            _assert_bitwise(got, want.asnumpy(), "state %d %s" % (k, what))


def _rows_of(step, rng):
    """Row 0 moves at steps 1 and 12 only; the last quarter of the rows never moves."""
    if step in (1, 12):
        return [0]
    return sorted(rng.choice(np.arange(1, 3 * ROWS // 4), 4, replace=False).tolist())


# MXNet's test_rms grid in float32 (its clip_weights 0.01 clips every weight), and in
# float64 and with clip_weights 0.6 (which clips some) on a part of it.
_MXNET_GRID = pairwise([False, True], [None, 0.01], [None, 0.4, 0.5], [1.0, 0.14, 0.8],
                                [0.0, 0.03, 0.05, 0.07], ["float32"])
_MORE = pairwise([False, True], [None, 0.6], [None, 0.5], [1.0, 0.14], [0.0, 0.07],
                          ["float32", "float64"])


@pytest.mark.parametrize("centered, clip_weights, clip_gradient, rescale_grad, wd, dtype",
                         sorted(set(_MXNET_GRID) | set(_MORE), key=str))
def test_matches_mxnet_rmsprop_bitwise(centered, clip_weights, clip_gradient, rescale_grad, wd,
                                       dtype):
    kwargs = dict(learning_rate=0.01, centered=centered, clip_weights=clip_weights,
                  clip_gradient=clip_gradient, rescale_grad=rescale_grad, wd=wd)
    runs = [_Run(deferred, dtype, **kwargs) for deferred in (False, True)]
    rng = np.random.default_rng(1)
    for step in range(1, 13):
        rows = _rows_of(step, rng)
        for run in runs:
            run.step(rows)
    for run, what in zip(runs, ("eager", "deferred")):
        run.check(what)


@pytest.mark.parametrize("centered", [False, True])
@pytest.mark.parametrize("dtype, gamma1, wd", [("float32", 0.9, 0.0), ("float32", 0.5, 0.0),
                                               ("float32", 0.5, 0.01), ("float64", 0.5, 0.01)])
def test_long_gaps_bitwise(centered, dtype, gamma1, wd):
    """Rows absent for ~300 steps; at gamma1 = 0.5 their n decays into denormals and
    settles at its fixed point. Without weight decay too the state moves (n decays;
    centered, the weight moves by delta): a lazy update would differ."""
    kwargs = dict(learning_rate=0.01, gamma1=gamma1, gamma2=0.8, centered=centered, wd=wd,
                  clip_gradient=0.5)
    run = _Run(True, dtype, **kwargs)
    rng = np.random.default_rng(2)
    run.step(list(range(ROWS // 2)))  # rows 0..11 move once
    n_after_touch = run.ref_state[0].asnumpy()[:4].copy()
    for _ in range(300):  # then rows 4..11 keep moving, rows 0..3 wait
        run.step(sorted(rng.choice(np.arange(4, ROWS // 2), 3, replace=False).tolist()))
    assert (run.ref_state[0].asnumpy()[:4] < n_after_touch).all()
    run.check("after the gap, before the rows return")
    run.step([0, 1, 2, 3])
    run.check("after the rows returned")


def test_reads_through_flush_and_data():
    run = _Run(True, "float32", learning_rate=0.01, centered=True, wd=0.01)
    rng = np.random.default_rng(4)
    for step in range(1, 20):
        run.step(_rows_of(step, rng))
    flush(run.trainer)
    raw = run.net.weight._data[0].asnumpy()  # read without the library's hooks
    _assert_bitwise(raw, run.ref_w.asnumpy(), "weight after flush")
    run.check()


@pytest.mark.parametrize("centered", [False, True])
def test_save_load_resume_bitwise(centered, tmp_path):
    kwargs = dict(learning_rate=0.01, centered=centered, wd=0.02, clip_weights=0.6)
    run = _Run(True, "float32", **kwargs)
    rng = np.random.default_rng(6)
    rows = [_rows_of(step, rng) for step in range(1, 25)]
    for r in rows[:12]:
        run.step(r)
    run.net.save_parameters(str(tmp_path / "net.params"))
    run.trainer.save_states(str(tmp_path / "trainer.states"))
    # A new process's view: fresh net and trainer, loaded from the files.
    resumed = _Run(True, "float32", **kwargs)
    resumed.net.load_parameters(str(tmp_path / "net.params"))
    resumed.trainer.load_states(str(tmp_path / "trainer.states"))
    resumed.ref_opt, resumed.ref_w, resumed.ref_state = run.ref_opt, run.ref_w, run.ref_state
    resumed.rng = run.rng
    for r in rows[12:]:
        resumed.step(r)
    resumed.check("after resuming")


def test_create_by_name_and_trainer_by_name():
    opt = mx.optimizer.create("sparsermsprop", deferred=True, learning_rate=0.05, centered=True,
                              gamma1=0.8, gamma2=0.7, epsilon=1e-6, clip_weights=0.5, wd=0.01)
    assert isinstance(opt, SparseRMSProp)
    assert (opt.deferred, opt.centered, opt.gamma1, opt.gamma2, opt.epsilon,
            opt.clip_weights) == (True, True, 0.8, 0.7, 1e-6, 0.5)
    net = _net("float32")
    ref_opt = mx.optimizer.RMSProp(learning_rate=0.05, wd=0.01)
    ref_w = net.weight.data().copy()
    ref_state = (mx.nd.zeros(ref_w.shape),)
    trainer = gluon.Trainer(net.collect_params(), "sparsermsprop",
                            {"learning_rate": 0.05, "wd": 0.01, "deferred": True})
    assert isinstance(trainer._optimizer, SparseRMSProp)
    rng = np.random.default_rng(8)
    for step in range(1, 8):
        rows = _rows_of(step, rng)
        with autograd.record():
            loss = (net(_one_hot(rows, "float32")) ** 2).sum()
        loss.backward()
        grad = net.weight.grad().tostype("default")
        trainer.step(1)
        ref_opt.update(0, ref_w, grad, ref_state)
    _assert_bitwise(net.weight.data().asnumpy(), ref_w.asnumpy(), "weight")


@pytest.mark.parametrize("dtype, multi_precision", [("float32", False), ("float64", False),
                                             ("float16", True)])
def test_dense_gradients_take_mxnets_update(dtype, multi_precision):
    """Dense gradients (and float16 master copies) go to MXNet's own operator."""
    kwargs = dict(learning_rate=0.01, centered=True, wd=0.01, clip_weights=0.4,
                  multi_precision=multi_precision)
    ours, ref = SparseRMSProp(deferred=True, **kwargs), mx.optimizer.RMSProp(**kwargs)
    rng = np.random.default_rng(0)
    weight = mx.nd.array(rng.standard_normal((6, 5)) * 0.3, dtype=dtype)
    ref_w = weight.copy()
    state = ours.create_state_multi_precision(0, weight)
    ref_state = ref.create_state_multi_precision(0, ref_w)
    if dtype == "float64":  # MXNet's own state is float32, which its operator rejects
        ref_state = tuple(mx.nd.zeros(ref_w.shape, dtype=dtype) for _ in ref_state)
    for _ in range(5):
        grad = mx.nd.array(rng.standard_normal((6, 5)), dtype=dtype)
        ours.update_multi_precision(0, weight, grad, state)
        ref.update_multi_precision(0, ref_w, grad, ref_state)
    _assert_bitwise(weight.asnumpy().astype(np.float64), ref_w.asnumpy().astype(np.float64),
                    "weight")


def test_lr_parsed_as_mxnet_parses_it():
    """'9.223372036854788e-05' is 9.223373e-05 to MXNet's dmlc::stof (strtof: 9.223372e-05)."""
    lr = 0.01 * 0.8 ** 21  # a FactorScheduler(factor=0.8) value
    run = _Run(False, "float32", learning_rate=lr, centered=True)  # delta = -lr * ...
    run.trainer._optimizer.lr_scheduler = run.ref_opt.lr_scheduler = None
    run.step([0, 1, 2])
    run.check()


def test_zero_clip_means_off_as_in_mxnet():
    """MXNet's RMSProp passes clip_gradient / clip_weights only when truthy: 0 is off."""
    run = _Run(False, "float32", learning_rate=0.5, clip_gradient=0, clip_weights=0)
    for step in range(1, 4):
        run.step([0, 1, 2])
    assert np.abs(run.ref_w.asnumpy()).max() > 0  # not clipped to [0, 0]
    run.check()


@pytest.mark.parametrize("centered", [False, True])
@pytest.mark.parametrize("clip_weights", [None, 0.3])
def test_first_update_after_begin_num_update(centered, clip_weights):
    """A state whose first update is step 6 (begin_num_update=5): the history's
    records before it were never steps, so no row may replay them (a replay would
    clip the weights to clip_weights before MXNet's first update does)."""
    run = _Run(True, "float32", learning_rate=0.05, centered=centered, wd=0.05,
               clip_weights=clip_weights, begin_num_update=5)
    rng = np.random.default_rng(9)
    for step in range(1, 8):
        run.step(_rows_of(step, rng))
    run.check()


# ------------------------------------------------------------ the replay hook
def _random_replay_case(rng):
    """A row, its states and a history: schedules, wd switching on and off, odd values."""
    dtype = np.float32 if rng.random() < 0.6 else np.float64
    centered = bool(rng.random() < 0.5)
    # the replay's blocks: of 32 columns, and of 128 for wider rows
    cols = int(rng.choice([rng.integers(1, 9), rng.integers(30, 70), rng.integers(128, 170)],
                          p=[0.8, 0.1, 0.1]))
    steps = int(rng.choice([1, 2, 5, 60, 400, 1500]))
    history = np.zeros((steps + 1, 3), np.float32)
    wd_choices = [[0.0], [0.01], [0.0, 0.0, 0.0, 0.02, -0.0]][rng.integers(3)]
    for t in range(1, steps + 1):
        lr = 0.003 * (1 + t % 7) if rng.random() > 0.03 else rng.choice([0.0, -0.0, -0.01,
                                                                          np.inf, np.nan])
        history[t] = (lr, rng.choice(wd_choices), rng.choice([-1.0, 0.5, 0.0, 1e-3]))
    if rng.random() < 0.8:  # usual constants, or odd ones
        gammas, eps = rng.choice([0.9, 0.5, 0.99], 2), rng.choice([1e-8, 1e-3])
        clip_w = rng.choice([-1.0, -1.0, 0.5, 0.0])
    else:
        gammas = [rng.choice([0.0, 1.0, 1.5, -0.3]), rng.choice([0.0, -0.5, 1.2])]
        eps, clip_w = rng.choice([0.0, -1e-8, 1e-8]), rng.choice([-1.0, 0.5, np.nan])
    fixed = np.array([gammas[0], gammas[1], eps, clip_w] if centered else
                     [gammas[0], eps, clip_w], np.float32)
    w = (rng.standard_normal(cols) * rng.choice([1, 1e-3, 10])).astype(dtype)
    if rng.random() < 0.3:
        w[rng.integers(cols)] = rng.choice([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, 1e-42])
    states = (rng.standard_normal((3 if centered else 1, cols))
              * rng.choice([1, 1e-20, 1e-40])).astype(dtype)
    states[0] = np.abs(states[0]) + (states[1] ** 2 if centered else 0)  # n >= g * g
    if rng.random() < 0.3:
        states[:] = rng.choice([0.0, -0.0])  # a decay step takes -0 to +0
    if rng.random() < 0.1:
        states[rng.integers(len(states)), rng.integers(cols)] = rng.choice([np.nan, -1.0, np.inf])
    return centered, dtype, history, fixed, w, states, int(rng.integers(0, max(1, steps // 3)))


def test_replay_hook_equals_step_by_step_replay(rule_replay_harness):
    """The hook (decay steps without sqrt/div, settled rows skipped, runs of wd steps
    through the blocked replay on either SIMD build) bitwise against apply<false> step
    by step, over 600 random rows: denormal decay to the fixed point, lr schedules, wd
    switching, infinite / NaN / -0 weights, odd constants."""
    rng = np.random.default_rng(12)
    taken = 0
    for _ in range(600):
        centered, dtype, history, fixed, w, states, start = _random_replay_case(rng)
        taken += check_replay_hook(rule_replay_harness,
                                   "rmsprop_centered" if centered else "rmsprop",
                                   [(w, states, history, fixed, start, len(history) - 1)],
                                   simd_paths=(0, 1))
    assert taken == 600  # the hook takes every row
