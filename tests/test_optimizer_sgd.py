"""SparseSGD and SparseNAG (momentum and plain) against MXNet's own dense-gradient update.

The reference is ``mx.optimizer.SGD.update`` / ``mx.optimizer.NAG.update``
given the *dense* gradient (rows absent from the sparse gradient are zeros):
MXNet's standard update, which moves every row every step. MXNet computes it
in one C++ kernel (multi_sgd_mom_update / multi_sgd_update, nag_mom_update /
sgd_update), whose operation order the rules copy, so eager and deferred
results are compared bitwise on CPU, on the grid of MXNet's own test_sgd and
test_nag (dtypes, wd, clip_gradient, rescale_grad, momentum), with a
learning-rate schedule, long gaps between a row's touches and rows never
touched.
"""
import pickle

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from gluon_sparse.nn import FullyConnectedSparse
from gluon_sparse.optimizer import SparseNAG, SparseSGD, deferred, supports_deferred
from gluon_sparse.optimizer._family_state import DeferredRuleState
from gluon_sparse.optimizer.sparse_sgd import SGD, SGD_MOM
from covering import pairwise

ROWS, COLS = 60, 5

# MXNet 1.9.1 tests/python/unittest/test_optimizer.py::test_sgd grid (momentum, wd,
# clip_gradient, rescale_grad), crossed with float32/float64.
GRID = [dict(momentum=m, wd=wd, clip_gradient=c, rescale_grad=r)
        for m, wd, c, r in pairwise((0.0, 0.9), (0.0, 0.03), (None, 0.5), (1.0, 0.7))]
DTYPES = ["float32", "float64"]
# (ours, MXNet's reference class)
CLASSES = pytest.mark.parametrize("ours, theirs", [(SparseSGD, mx.optimizer.SGD),
                                                   (SparseNAG, mx.optimizer.NAG)],
                                  ids=["sgd", "nag"])


def _kwargs(cfg, lr=0.1):
    kw = {k: v for k, v in cfg.items() if v is not None}
    # A schedule, so lr changes from step to step and the history must record it.
    kw["lr_scheduler"] = mx.lr_scheduler.FactorScheduler(step=3, factor=0.9, base_lr=lr)
    return kw


def _grad(rng, rows, dtype):
    return mx.nd.sparse.row_sparse_array(
        (rng.standard_normal((len(rows), COLS)).astype(dtype), np.sort(rows).astype(np.int64)),
        shape=(ROWS, COLS), dtype=dtype)


def _schedule(rng, steps):
    """Rows 0..9 every step, rows 10..39 at steps 0..2 then rarely (long gaps); 40.. never."""
    out = []
    for t in range(steps):
        rows = set(range(10))
        if t < 3:
            rows |= set(range(10, 40))
        elif t % 37 == 0:
            rows |= set(rng.choice(np.arange(10, 40), 4, replace=False).tolist())
        out.append(np.array(sorted(rows)))
    return out


def _assert_equal(got, want, what):
    np.testing.assert_array_equal(got.asnumpy(), want.asnumpy(), err_msg=what)


# --------------------------------------------------------------------- eager
@CLASSES
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cfg", GRID)
def test_eager_equals_mxnet_dense_update(cfg, dtype, ours, theirs):
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((ROWS, COLS)).astype(dtype)
    ours, ref = ours(**_kwargs(cfg)), theirs(**_kwargs(cfg))
    w, w_ref = mx.nd.array(w0, dtype=dtype), mx.nd.array(w0, dtype=dtype)
    s, s_ref = ours.create_state(0, w), ref.create_state(0, w_ref)
    for rows in _schedule(rng, 40):
        g = _grad(rng, rows, dtype)
        ours.update(0, w, g, s)
        ref.update(0, w_ref, g.tostype("default"), s_ref)
    _assert_equal(w, w_ref, "weight")
    if cfg["momentum"]:
        _assert_equal(s, s_ref, "momentum")


@CLASSES
def test_eager_momentum_set_to_zero_midway_goes_on_as_mxnet(ours, theirs):
    """A momentum schedule that ends at 0: MXNet goes on with its momentum operators at
    momentum 0; the plain rule was given the momentum state too and failed ('expects 2
    inputs, but got 3')."""
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((ROWS, COLS)).astype("float32")
    ours, ref = ours(learning_rate=0.1, momentum=0.9, wd=0.01), theirs(learning_rate=0.1,
                                                                        momentum=0.9, wd=0.01)
    w, w_ref = mx.nd.array(w0), mx.nd.array(w0)
    s, s_ref = ours.create_state(0, w), ref.create_state(0, w_ref)
    for step, rows in enumerate(_schedule(rng, 12)):
        if step == 6:
            ours.momentum = ref.momentum = 0.0
        g = _grad(rng, rows, "float32")
        ours.update(0, w, g, s)
        ref.update(0, w_ref, g.tostype("default"), s_ref)
        _assert_equal(w, w_ref, "weight after step %d" % step)


# ------------------------------------------------------------------ deferred
def _deferred_run(cfg, dtype, steps, flush_every, ours=SparseSGD, theirs=mx.optimizer.SGD):
    """Deferred rule state driven directly; returns (weight, state, reference weight, state)."""
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((ROWS, COLS)).astype(dtype)
    ref = theirs(**_kwargs(cfg))
    opt = ours(**_kwargs(cfg))
    rule = opt._rule()
    w, w_ref = mx.nd.array(w0, dtype=dtype), mx.nd.array(w0, dtype=dtype)
    states = [mx.nd.zeros((ROWS, COLS), dtype=dtype) for _ in rule.state_names]
    state = DeferredRuleState(w, rule, rule.fixed(opt), states)
    s_ref = ref.create_state(0, w_ref)
    for t, rows in enumerate(_schedule(rng, steps)):
        g = _grad(rng, rows, dtype)
        if t and t % flush_every == 0:
            state.flush()
        opt._update_count(0)
        # No forward pass here: catch_up brings the gradient's rows up to date first.
        state.update(w, g, opt._index_update_count[0], rule.step(opt, 0), opt.rescale_grad,
                     catch_up=True)
        ref.update(0, w_ref, g.tostype("default"), s_ref)
    return w, state, w_ref, s_ref


@CLASSES
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cfg", GRID)
def test_deferred_equals_mxnet_dense_update(cfg, dtype, ours, theirs):
    w, state, w_ref, s_ref = _deferred_run(cfg, dtype, 120, 50, ours, theirs)
    assert (state.last_step.asnumpy() < 120).any()  # rows are still behind before the flush
    state.flush()
    assert (state.last_step.asnumpy() == 120).all()
    _assert_equal(w, w_ref, "weight")
    if cfg["momentum"]:
        _assert_equal(state.mom, s_ref, "momentum")


@CLASSES
def test_zero_state_rows_are_skipped_without_weight_decay(ours, theirs):
    """momentum 0.9, wd 0: never-touched rows stay exactly as initialised, unwritten."""
    cfg = dict(momentum=0.9, wd=0.0, clip_gradient=None, rescale_grad=1.0)
    w, state, w_ref, _ = _deferred_run(cfg, "float32", 60, 1000, ours, theirs)
    before = w.asnumpy()[40:].copy()
    state.flush()
    np.testing.assert_array_equal(w.asnumpy()[40:], before)
    _assert_equal(w, w_ref, "weight")


def test_plain_sgd_without_weight_decay_lazy_equals_standard():
    """momentum 0 and wd 0: absent rows do not move, so MXNet's lazy update is the standard one."""
    rng = np.random.default_rng(2)
    w0 = rng.standard_normal((ROWS, COLS)).astype("f")
    lazy, std = mx.optimizer.SGD(learning_rate=0.1, lazy_update=True), SparseSGD(learning_rate=0.1)
    w_lazy, w_std = mx.nd.array(w0), mx.nd.array(w0)
    for rows in _schedule(rng, 20):
        g = _grad(rng, rows, "f")
        lazy.update(0, w_lazy, g, None)
        std.update(0, w_std, g, None)
    _assert_equal(w_std, w_lazy, "weight")


# ------------------------------------------------------------ through Gluon
def _net(seed=0):
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential()
    net.add(FullyConnectedSparse(4, activation="tanh", in_units=ROWS), gluon.nn.Dense(1, in_units=4))
    net.initialize(mx.init.Uniform(0.5))
    return net


def _batches(n, seed):
    rng = np.random.default_rng(seed)
    out = []
    for t in range(n):
        pool = np.arange(ROWS) if t < 3 else np.arange(8)
        idx = np.concatenate([np.sort(rng.choice(pool, 3, replace=False)) for _ in range(4)])
        x = mx.nd.sparse.csr_matrix((rng.random(12).astype("f"), idx.astype(np.int64),
                                     np.arange(0, 13, 3)), shape=(4, ROWS))
        out.append((x, mx.nd.array(rng.random((4, 1)))))
    return out


def _train(net, trainer, batches):
    for x, y in batches:
        with autograd.record():
            loss = ((net(x) - y) ** 2).mean()
        loss.backward()
        trainer.step(1)


@pytest.mark.parametrize("name", ["sparsenag", "sparsesgd"])
@pytest.mark.parametrize("hybrid", [False, True])
@pytest.mark.parametrize("momentum, wd", [(0.9, 0.01), (0.9, 0.0), (0.0, 0.01)])
def test_trainer_deferred_equals_eager(name, hybrid, momentum, wd, tmp_path):
    """Forward refresh in the graph, flush on read, save/load_states/resume: all bitwise."""
    nets = [_net(), _net()]
    if hybrid:
        for net in nets:
            net.hybridize()
    opts = {"learning_rate": 0.05, "momentum": momentum, "wd": wd, "clip_gradient": 1.0}
    trainers = [gluon.Trainer(nets[0].collect_params(), name, dict(opts, deferred=True)),
                gluon.Trainer(nets[1].collect_params(), name, opts)]
    for net, trainer in zip(nets, trainers):
        _train(net, trainer, _batches(30, 3))
    assert deferred.state_bytes(trainers[0]) > 0
    for pa, pb in zip(nets[0].collect_params().values(), nets[1].collect_params().values()):
        np.testing.assert_array_equal(pa.data().asnumpy(), pb.data().asnumpy())
    # save, train on, restore, resume: the restored run must match the eager one's.
    for i, trainer in enumerate(trainers):
        trainer.save_states(str(tmp_path / ("t%d.states" % i)))
        nets[i].save_parameters(str(tmp_path / ("n%d.params" % i)))
        _train(nets[i], trainer, _batches(10, 4))
        trainer.load_states(str(tmp_path / ("t%d.states" % i)))
        nets[i].load_parameters(str(tmp_path / ("n%d.params" % i)))
        _train(nets[i], trainer, _batches(20, 5))
    # (A hybridized net holds its cached graph's handles: MXNet cannot pickle it.)
    params = pickle.loads(pickle.dumps(nets[0].collect_params()))
    for pa, pb in zip(params.values(), nets[1].collect_params().values()):
        np.testing.assert_array_equal(pa._data[0].asnumpy(), pb.data().asnumpy())


# ---------------------------------------------------------- options, errors
def test_registered_and_deferred_options():
    opt = mx.optimizer.create("sparsesgd", learning_rate=0.1, momentum=0.9, deferred=True)
    assert isinstance(opt, SparseSGD) and opt.deferred and not opt.lazy_update
    assert supports_deferred("sparsesgd") and supports_deferred("SparseAdam")
    assert not supports_deferred("sgd")
    assert opt._rule() is SGD_MOM and SparseSGD()._rule() is SGD
    assert supports_deferred("sparsenag") and SparseNAG(momentum=0.9).deferred is False
    with pytest.raises(ValueError, match="lazy_update"):
        SparseSGD(lazy_update=True, deferred=True)
    with pytest.raises(ValueError, match="momentum"):
        SparseSGD(momentum=-0.5)


def test_lazy_update_and_dense_gradient_take_mxnet_update():
    rng = np.random.default_rng(4)
    w0 = rng.standard_normal((ROWS, COLS)).astype("f")
    for lazy in (True, False):
        ours = SparseSGD(learning_rate=0.1, momentum=0.9, wd=0.01, lazy_update=lazy)
        ref = mx.optimizer.SGD(learning_rate=0.1, momentum=0.9, wd=0.01, lazy_update=lazy)
        w, w_ref = mx.nd.array(w0), mx.nd.array(w0)
        s, s_ref = ours.create_state(0, w), ref.create_state(0, w_ref)
        for rows in _schedule(rng, 10):
            g = _grad(rng, rows, "f")
            g = g if lazy else g.tostype("default")
            ours.update(0, w, g, s)
            ref.update(0, w_ref, g, s_ref)
        _assert_equal(w, w_ref, "weight (lazy_update=%s)" % lazy)


def test_float16_multi_precision_matches_mxnet():
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal((ROWS, COLS)).astype("float16")
    ours = SparseSGD(learning_rate=0.1, momentum=0.9, multi_precision=True)
    ref = mx.optimizer.SGD(learning_rate=0.1, momentum=0.9, multi_precision=True)
    w, w_ref = mx.nd.array(w0, dtype="float16"), mx.nd.array(w0, dtype="float16")
    s, s_ref = ours.create_state_multi_precision(0, w), ref.create_state_multi_precision(0, w_ref)
    for rows in _schedule(rng, 5):
        g = _grad(rng, rows, "float16").tostype("default")
        ours.update_multi_precision(0, w, g, s)
        ref.update_multi_precision(0, w_ref, g, s_ref)
    _assert_equal(w, w_ref, "weight")


def _op_inputs(dtype="float32", rows=(1, 3)):
    w = mx.nd.ones((ROWS, COLS), dtype=dtype)
    g = mx.nd.sparse.row_sparse_array((np.ones((len(rows), COLS), dtype), list(rows)),
                                      shape=(ROWS, COLS), dtype=dtype)
    return w, g, mx.nd.zeros((ROWS, COLS), dtype=dtype)


@pytest.mark.parametrize("rows, message", [((3, ROWS), "out of range"),
                                           ((4, 2), "sorted and unique")])
def test_bad_row_indices_are_refused_before_any_write(rows, message):
    w, _, mom = _op_inputs()
    g = mx.nd.sparse.row_sparse_array((mx.nd.ones((2, COLS)), mx.nd.array(rows, dtype="int64")),
                                      shape=(ROWS, COLS))
    with pytest.raises(mx.base.MXNetError, match=message):
        mx.nd.gluon_sparse_sgd_mom_update(w, g, mom, out=w, lr=0.1, momentum=0.9).wait_to_read()
    assert (w.asnumpy() == 1).all() and (mom.asnumpy() == 0).all()


def test_op_input_errors():
    w, g, mom = _op_inputs()
    with pytest.raises(mx.base.MXNetError, match="lr is required"):
        mx.nd.gluon_sparse_sgd_mom_update(w, g, mom, out=w, momentum=0.9).wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="unknown parameter 'beta1'"):
        mx.nd.gluon_sparse_sgd_mom_update(w, g, mom, out=w, lr=0.1, beta1=0.9).wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="mom has shape"):
        mx.nd.gluon_sparse_sgd_mom_update(w, g, mx.nd.zeros((ROWS, 2)), out=w,
                                          lr=0.1).wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="mom has dtype"):
        mx.nd.gluon_sparse_sgd_mom_update(w, g, mom.astype("float64"), out=w,
                                          lr=0.1).wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="in place"):
        mx.nd.gluon_sparse_sgd_mom_update(w, g, mom, out=mx.nd.zeros_like(w),
                                          lr=0.1).wait_to_read()
    last = mx.nd.zeros((ROWS,), dtype="int64")
    with pytest.raises(mx.base.MXNetError, match=r"history must have shape \(capacity, 3\)"):
        mx.nd.gluon_sparse_sgd_mom_deferred_update(w, g, mom, last, mx.nd.zeros((8, 2)), out=w,
                                                   lr=0.1, step=1).wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="does not fit a history of 8"):
        mx.nd.gluon_sparse_sgd_mom_deferred_update(w, g, mom, last, mx.nd.zeros((8, 3)), out=w,
                                                   lr=0.1, step=8).wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="last_step must be int64"):
        mx.nd.gluon_sparse_sgd_mom_deferred_flush(w, mom, last.astype("f"), mx.nd.zeros((8, 3)),
                                                  out=w, step=1).wait_to_read()


def test_stale_gradient_row_is_an_error():
    """A gradient row behind by a step that moves it was read stale: refused, nothing written."""
    w, g, mom = _op_inputs()
    last, history = mx.nd.zeros((ROWS,), dtype="int64"), mx.nd.zeros((8, 3))
    kw = dict(lr=0.1, wd=0.01, momentum=0.9)
    mx.nd.gluon_sparse_sgd_mom_deferred_update(w, g, mom, last, history, out=w, step=1, **kw)
    g2 = mx.nd.sparse.row_sparse_array((np.ones((1, COLS), "f"), [1]), shape=(ROWS, COLS))
    mx.nd.gluon_sparse_sgd_mom_deferred_update(w, g2, mom, last, history, out=w, step=2, **kw)
    before = w.asnumpy()
    with pytest.raises(mx.base.MXNetError, match="row 3 of the weight is at step 1"):
        mx.nd.gluon_sparse_sgd_mom_deferred_update(w, g, mom, last, history, out=w, step=3,
                                                   **kw).wait_to_read()
    np.testing.assert_array_equal(w.asnumpy(), before)
    with pytest.raises(mx.base.MXNetError, match="not before this update's step"):
        mx.nd.gluon_sparse_sgd_mom_deferred_update(w, g2, mom, last, history, out=w, step=2,
                                                   **kw).wait_to_read()


@pytest.mark.parametrize("name", ["sparsenag", "sparsesgd"])
def test_estimator_trains_family_optimizer_deferred(name):
    """The estimators run every optimizer of the family deferred, and predict caught-up rows."""
    import scipy.sparse as sp

    from gluon_sparse.sklearn import SparseMLPClassifier

    rng = np.random.default_rng(6)
    X = sp.random(60, 200, density=0.03, format="csr", random_state=6, dtype=np.float32)
    y = rng.integers(0, 2, 60)
    est = SparseMLPClassifier(hidden_layer_sizes=(4,), optimizer=name, max_iter=3, batch_size=10,
                              alpha=1e-3, random_state=0).fit(X, y)
    optimizer = est._trainer._optimizer
    assert type(optimizer).__name__.lower() == name and optimizer.deferred
    assert deferred.state_bytes(est._trainer) > 0
    proba = est.predict_proba(X)
    assert proba.shape == (60, 2) and np.isfinite(proba).all()


@pytest.mark.parametrize("ours", [SparseNAG, SparseSGD])
def test_serial_equals_parallel(ours):
    """The generic CPU paths give each element to one thread: any team, the same bits."""
    from gluon_sparse import _native

    cfg = dict(momentum=0.9, wd=0.03, clip_gradient=0.5, rescale_grad=0.7)
    runs = []
    try:
        for grain, threads in ((1 << 60, 1), (1, 2)):  # serial, then parallel everywhere
            _native._set_parallelism(grain, threads)
            w_eager = mx.nd.array(np.random.default_rng(8).standard_normal((ROWS, COLS)))
            opt = ours(**_kwargs(cfg))
            s = opt.create_state(0, w_eager)
            w, state, _, _ = _deferred_run(cfg, "float32", 80, 30, ours, mx.optimizer.SGD)
            state.flush()
            for rows in _schedule(np.random.default_rng(9), 20):
                opt.update(0, w_eager, _grad(np.random.default_rng(len(rows)), rows, "float32"), s)
            runs.append([w.asnumpy(), state.mom.asnumpy(), w_eager.asnumpy()])
    finally:
        _native._set_parallelism(0, 0)
    for serial, parallel in zip(*runs):
        np.testing.assert_array_equal(serial.view(np.int32), parallel.view(np.int32))


def test_python_rule_disagreeing_with_cpp_rule_is_refused():
    from gluon_sparse.optimizer._family import Rule

    class Wrong(Rule):
        name = "sgd_mom"
        state_names = ("mom", "extra")  # the C++ rule has one state
        fixed_names = ("momentum",)
        step_names = ("lr", "wd", "clip_gradient")

        def step(self, optimizer, index):
            return {}

    w = mx.nd.ones((ROWS, COLS))
    with pytest.raises(RuntimeError, match="Python Rule and the C\\+\\+ rule"):
        DeferredRuleState(w, Wrong(), {"momentum": 0.9}, [mx.nd.zeros_like(w)] * 2)
    with pytest.raises(RuntimeError, match="no rule 'nope'"):
        Wrong.name = "nope"
        DeferredRuleState(w, Wrong(), {"momentum": 0.9}, [mx.nd.zeros_like(w)] * 2)


@CLASSES
@pytest.mark.parametrize("dtype", DTYPES)
def test_rows_absent_for_a_thousand_steps_replay_exactly(dtype, ours, theirs):
    """Rows touched at the first step and then only after 1500 steps (momentum and wd decay)."""
    cfg = dict(momentum=0.9, wd=0.01, clip_gradient=None, rescale_grad=1.0)
    rng = np.random.default_rng(10)
    w0 = rng.standard_normal((ROWS, COLS)).astype(dtype)
    opt, ref = ours(**_kwargs(cfg, lr=0.02)), theirs(**_kwargs(cfg, lr=0.02))
    rule = opt._rule()
    w, w_ref = mx.nd.array(w0, dtype=dtype), mx.nd.array(w0, dtype=dtype)
    state = DeferredRuleState(w, rule, rule.fixed(opt),
                              [mx.nd.zeros((ROWS, COLS), dtype=dtype) for _ in rule.state_names])
    s_ref = ref.create_state(0, w_ref)
    for t in range(1501):
        rows = np.arange(0, 20) if t in (0, 1500) else np.array([0])
        g = _grad(rng, rows, dtype)
        opt._update_count(0)
        state.update(w, g, opt._index_update_count[0], rule.step(opt, 0), opt.rescale_grad,
                     catch_up=True)
        ref.update(0, w_ref, g.tostype("default"), s_ref)
    state.flush()
    _assert_equal(w, w_ref, "weight")
    _assert_equal(state.mom, s_ref, "momentum")


@pytest.mark.parametrize("momentum", [0.0, 0.9])
@pytest.mark.parametrize("is_deferred", [False, True])
def test_a_stale_parameter_gets_the_groups_learning_rate_as_in_mxnet(momentum, is_deferred):
    """MXNet's SGD counts a group of updates (aggregate_num, 4) before it computes their
    learning rates; a parameter that missed steps (ignore_stale_grad) and comes first got
    lr(T - 1) from SparseSGD and lr(T) from MXNet at the schedule's steps."""

    class Net(gluon.Block):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            with self.name_scope():
                self.aux = gluon.nn.Dense(1, in_units=3, prefix="aaa_")  # first, 1 step in 3
                self.main = gluon.nn.Dense(1, in_units=3, prefix="main_")

        def forward(self, x, use_aux):
            out = self.main(x)
            return out + self.aux(x) if use_aux else out

    def train(name, options):
        mx.random.seed(0)
        net = Net()
        net.initialize(mx.init.Uniform(0.5))
        schedule = mx.lr_scheduler.FactorScheduler(step=4, factor=0.5, base_lr=0.1)
        trainer = gluon.Trainer(net.collect_params(), name,
                                dict(options, learning_rate=0.1, momentum=momentum,
                                     lr_scheduler=schedule))
        rng = np.random.default_rng(0)
        for t in range(20):
            x = mx.nd.array(rng.standard_normal((4, 3)))
            with autograd.record():
                loss = (net(x, t % 3 == 0) ** 2).sum()
            loss.backward()
            trainer.step(4, ignore_stale_grad=True)
        return [p.data().asnumpy() for p in net.collect_params().values()]
    for theirs, ours in zip(train("sgd", {}), train("sparsesgd", {"deferred": is_deferred})):
        np.testing.assert_array_equal(ours, theirs)
