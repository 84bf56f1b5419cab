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
"""
import itertools

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from gluon_sparse.nn import FullyConnectedSparse
from gluon_sparse.optimizer import SparseRMSProp, flush

ROWS, UNITS = 24, 3


def _schedule():
    return mx.lr_scheduler.FactorScheduler(step=3, factor=0.8)


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


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


def _assert_bitwise(got, want, what):
    np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=what)


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


# MXNet's test_rms grid (clip_weights 0.01 clips every weight: 0.6 is added, which
# clips some), float64 added; each case eager and deferred.
GRID = list(itertools.product([False, True], [None, 0.01, 0.6], [None, 0.4, 0.5],
                              [1.0, 0.14, 0.8], [0.0, 0.03, 0.05, 0.07]))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("centered, clip_weights, clip_gradient, rescale_grad, wd", GRID)
def test_matches_mxnet_rmsprop_bitwise(centered, clip_weights, clip_gradient, rescale_grad, wd,
                                       dtype):
    kwargs = dict(learning_rate=0.02, centered=centered, clip_weights=clip_weights,
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


@pytest.mark.parametrize("dtype, multi_precision", [("float32", False), ("float16", True)])
def test_dense_gradients_take_mxnets_update(dtype, multi_precision):
    """A Dense layer's dense gradient (and float16) go to MXNet's own operator."""
    kwargs = dict(learning_rate=0.01, centered=True, wd=0.01, multi_precision=multi_precision)
    mx.random.seed(3)
    net = gluon.nn.Dense(4, in_units=5, dtype=dtype)
    net.initialize(mx.init.Uniform(0.5))
    trainer = gluon.Trainer(net.collect_params(), SparseRMSProp(deferred=True, **kwargs))
    ref = mx.optimizer.RMSProp(**kwargs)
    ref_w = net.weight.data().copy()
    ref_state = ref.create_state_multi_precision(0, ref_w)
    x = mx.nd.array(np.random.default_rng(0).standard_normal((6, 5)), dtype=dtype)
    for _ in range(5):
        with autograd.record():
            loss = (net(x) ** 2).sum()
        loss.backward()
        grad = net.weight.grad().copy()
        trainer.step(1)
        ref.update_multi_precision(0, ref_w, grad, ref_state)
    np.testing.assert_array_equal(net.weight.data().asnumpy(), ref_w.asnumpy())


def test_zero_clip_means_off_as_in_mxnet():
    """MXNet's RMSProp passes clip_gradient / clip_weights only when truthy: 0 is off."""
    run = _Run(False, "float32", learning_rate=0.5, clip_gradient=0, clip_weights=0)
    for step in range(1, 4):
        run.step([0, 1, 2])
    assert np.abs(run.ref_w.asnumpy()).max() > 0  # not clipped to [0, 0]
    run.check()
