"""SparseFtrl against MXNet's own Ftrl given the dense gradients (its standard update),
eager and deferred, bitwise: MXNet 1.9.1's test grid (clip, rescale, wd, lamda1), float32
and float64, lr schedules, long gaps, never-touched rows, reads through forward and flush,
save/load/resume, the registry and gluon.Trainer by name."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from gluon_sparse.optimizer import SparseFtrl
from optimizer_rule_runs import (MXNetReference, assert_bitwise, batch, check_replay_hook,
                                 gap_schedule, last_step_marks, make_net, odd_history, run,
                                 state_arrays, train_step, trained_arrays)

# MXNet 1.9.1 tests/python/unittest/test_optimizer.py, test_ftrl.
MXNET_GRID = [{}, {"clip_gradient": 0.5}, {"clip_gradient": 0.4, "rescale_grad": 0.14},
              {"rescale_grad": 0.8}, {"clip_gradient": 0.5, "wd": 0.07},
              {"clip_gradient": 0.4, "rescale_grad": 0.14, "wd": 0.03},
              {"rescale_grad": 0.8, "wd": 0.05}, {"rescale_grad": 0.8, "wd": 0.05, "lamda1": 0.01},
              {"clip_gradient": 0.5, "wd": 0.07, "lamda1": 1.0}]


def _schedule():
    return mx.lr_scheduler.FactorScheduler(step=7, factor=0.8, base_lr=0.1)


def _init(rows, cols, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, cols)).astype(dtype)


def _compare(kwargs, dtype, deferred, plan, rows=40, cols=3, seed=0):
    init = _init(rows, cols, dtype, seed)
    ref = MXNetReference(mx.optimizer.Ftrl(**kwargs), init, dtype, 2)
    ours = SparseFtrl(deferred=deferred, **kwargs)
    net, trainer = run(ours, ref, init, dtype, plan, seed)
    assert_bitwise(trained_arrays(net, trainer), ref.arrays(), str(kwargs))
    return net, trainer


@pytest.mark.parametrize("deferred", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kwargs", MXNET_GRID)
def test_mxnet_grid_bitwise(kwargs, dtype, deferred):
    _compare(kwargs, dtype, deferred, gap_schedule(40, 40, seed=1))


@pytest.mark.parametrize("deferred", [False, True])
@pytest.mark.parametrize("kwargs", [{"wd": 0.01}, {"wd": 0.0, "lamda1": 0.0, "beta": 0.5},
                                    {"clip_gradient": 0.3, "wd": 0.1, "rescale_grad": 2.0}])
def test_lr_schedule_and_long_gaps_bitwise(kwargs, deferred):
    """Row 0 moves at steps 1 and 400 only: the O(1) catch-up equals the 398 steps."""
    _compare(dict(kwargs, lr_scheduler=_schedule()), "float32", deferred,
             gap_schedule(40, 400, seed=2))


class _ListSchedule:
    """lr per update from a list (MXNet calls lr_scheduler(num_update))."""

    def __init__(self, lrs):
        self.lrs, self.base_lr = list(lrs), lrs[0]

    def __call__(self, num_update):
        return self.lrs[min(num_update, len(self.lrs)) - 1]


@pytest.mark.parametrize("deferred", [False, True])
@pytest.mark.parametrize("odd_lr", [0.0, 1e-30, 3e30])
def test_degenerate_lr_follows_mxnet(odd_lr, deferred):
    """An lr of 0 turns z into NaN (0/0) and a huge or tiny one overflows w: the
    O(1) catch-up must then give way to the step-by-step replay, NaNs and all."""
    lrs = [0.1] * 100
    lrs[57] = odd_lr
    kwargs = dict(wd=0.01, lr_scheduler=_ListSchedule(lrs))
    net, _ = _compare(kwargs, "float32", deferred, gap_schedule(40, 100, seed=6))
    if odd_lr == 0.0:  # MXNet's FTRL divides by lr: every z, hence every weight, is NaN
        assert np.isnan(net.weight.data().asnumpy()).all()


def test_never_touched_rows_become_zero_lazy_keeps_them():
    """The first standard step sets rows without z to 0; MXNet's lazy FTRL (row_sparse
    weight and states) leaves them at their initial value."""
    init = _init(10, 3, "float32") + 2.0  # no zeros
    plan = [np.array([2, 5])] * 3
    net, trainer = run(SparseFtrl(deferred=True), None, init, "float32", plan)
    weight = net.weight.data().asnumpy()
    untouched = np.setdiff1d(np.arange(10), [2, 5])
    assert (weight[untouched] == 0).all()
    assert (weight[[2, 5]] != init[[2, 5]]).all()

    grad = mx.nd.sparse.row_sparse_array((np.ones((2, 3), "f"), [2, 5]), shape=(10, 3))
    lazy = []
    for opt in (mx.optimizer.Ftrl(), SparseFtrl(lazy_update=True)):
        w = mx.nd.array(init).tostype("row_sparse")  # MXNet's lazy FTRL needs row_sparse
        opt.update(0, w, grad, opt.create_state(0, w))
        lazy.append(w.asnumpy())
        np.testing.assert_array_equal(lazy[-1][untouched], init[untouched])
    assert_bitwise(lazy[1:], lazy[:1], "SparseFtrl(lazy_update=True) vs MXNet's lazy update")


def test_untouched_weight_follows_lr_from_z_and_n():
    """A row absent for many steps has w = f(z, n, last lr, last wd), computed here in NumPy."""
    init, dtype = _init(20, 4, "float64"), "float64"
    wd, lamda1, beta = 0.02, 0.01, 1.0
    plan = [np.arange(20)] * 3 + [np.array([19])] * 30
    opt = SparseFtrl(deferred=True, wd=wd, lamda1=lamda1, beta=beta, lr_scheduler=_schedule())
    net, trainer = run(opt, None, init, dtype, plan)
    weight = net.weight.data().asnumpy()
    z, n = state_arrays(trainer)
    # FtrlParam holds C floats, which the kernel casts to the weight's double.
    lr, wd, lamda1 = (np.float64(np.float32(v)) for v in (opt._get_lr(0), wd, lamda1))
    want = ((np.sign(z) * lamda1 - z) / ((beta + np.sqrt(n)) / lr + wd)
            * (np.abs(z) > lamda1))
    np.testing.assert_array_equal(weight[:19], want[:19])
    assert opt._get_lr(0) < 0.1 * 0.8 ** 3  # the schedule did move lr


def test_forward_reads_caught_up_rows():
    """FullyConnectedSparse's forward on rows deferred for a long time sees the standard weights."""
    init = _init(40, 3, "float32")
    plan = gap_schedule(40, 60, seed=3)
    outs = []
    for deferred in (True, False):
        net, trainer = run(SparseFtrl(deferred=deferred, wd=0.01), None, init, "float32", plan)
        x, _ = batch(np.random.default_rng(9), np.arange(40), 40, 3, "float32")
        outs.append(net(x).asnumpy())
    assert_bitwise([outs[0]], [outs[1]])


def test_save_load_resume_bitwise(tmp_path):
    """Stop mid-run (save_parameters + save_states), resume in a new net and Trainer."""
    init, dtype = _init(40, 3, "float32"), "float32"
    plan = gap_schedule(40, 60, seed=4)
    kwargs = dict(wd=0.01, lr_scheduler=_schedule())
    ref = MXNetReference(mx.optimizer.Ftrl(**kwargs), init, dtype, 2)
    net, trainer = run(SparseFtrl(deferred=True, **kwargs), ref, init, dtype, plan[:30], seed=4)
    net.save_parameters(str(tmp_path / "w.params"))
    trainer.save_states(str(tmp_path / "t.states"))
    resumed = make_net(np.zeros_like(init), dtype)
    resumed.load_parameters(str(tmp_path / "w.params"))
    trainer2 = gluon.Trainer(resumed.collect_params(), SparseFtrl(deferred=True, **kwargs),
                             update_on_kvstore=False)
    trainer2.load_states(str(tmp_path / "t.states"))
    rng = np.random.default_rng(5)
    for rows in plan[30:]:
        ref.step(train_step(resumed, trainer2, *batch(rng, rows, 40, 3, dtype)))
    assert_bitwise(trained_arrays(resumed, trainer2), ref.arrays())


def test_registry_and_trainer_by_name():
    opt = mx.optimizer.create("sparseftrl", deferred=True, lamda1=0.02, beta=0.5,
                              learning_rate=0.3, wd=0.01, clip_gradient=1.0)
    assert isinstance(opt, SparseFtrl) and opt.deferred
    assert (opt.lamda1, opt.beta, opt.lr, opt.wd, opt.clip_gradient) == (0.02, 0.5, 0.3, 0.01, 1.0)
    net = make_net(_init(10, 2, "float32"), "float32")
    trainer = gluon.Trainer(net.collect_params(), "sparseftrl",
                            {"deferred": True, "learning_rate": 0.3}, update_on_kvstore=False)
    assert isinstance(trainer._optimizer, SparseFtrl)
    train_step(net, trainer, *batch(np.random.default_rng(0), [1, 4], 10, 2, "float32"))
    weight = net.weight.data().asnumpy()
    assert (weight[[0, 2, 3]] == 0).all() and np.isfinite(weight).all()


def test_scalars_as_mxnet_parses_them():
    """MXNet parses operator arguments with dmlc's ParseFloat, not correctly rounded: the
    float32 it uses is not always np.float32(value). _mxnet_scalars reproduces it."""
    from gluon_sparse.optimizer._mxnet_scalars import param_float, scalar_float32
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.random(1500) * 0.1, 10.0 ** rng.uniform(-20, 20, 1500)])
    zero, minus_one = mx.nd.zeros(1), mx.nd.array([-1.0])
    # sgd_update(w=0, grad=-1) returns its float parameter lr; 1 * x returns the scalar.
    parsed = np.array([mx.nd.sgd_update(zero, minus_one, lr=v).asnumpy()[0] for v in values])
    np.testing.assert_array_equal(parsed, [param_float(v) for v in values])
    assert (parsed != values.astype(np.float32)).sum() > 50  # the parse is not strtof's
    scaled = np.array([(mx.nd.ones(1) * v).asnumpy()[0] for v in values[::5]])
    np.testing.assert_array_equal(scaled, [scalar_float32(v) for v in values[::5]])


def _replay_cases(rng, count):
    """Rows of every kind (fresh, trained, odd values) over histories with odd scalars."""
    fixeds = [[0.01, 1.0], [0.0, 0.3], [1.0, 1.0], [0.01, 0.0]]
    for trial in range(count):
        dtype, kind, cols = (np.float32, np.float64)[trial % 2], trial % 4, 5
        steps = int(rng.integers(2, 40))
        lrs, wds = odd_history(rng, steps, [0.0, -0.1, np.inf, np.nan, 1e-38, -0.0, 3e38],
                               [-0.1, np.inf, np.nan])
        odd = ~((lrs > 0) & np.isfinite(lrs) & (wds >= 0) & np.isfinite(wds))
        max_lr = np.fmax.accumulate(np.where(np.arange(steps + 1) > 0, lrs, 0))
        history = np.stack([lrs, wds, np.full(steps + 1, -1, np.float32), max_lr,
                            last_step_marks(odd)], 1).astype(np.float32)
        if trial % 10 == 9:
            history[:, 3 + trial % 2] = np.nan  # marks unknown (the op's defaults)
        weight = (rng.standard_normal(cols) * rng.choice([1, 1e-3, 1e30], cols)).astype(dtype)
        z, n = np.zeros(cols), np.zeros(cols)
        if kind >= 1:
            z = rng.standard_normal(cols) * 3
        if kind >= 2:
            n = np.abs(rng.standard_normal(cols)) * 4
        if kind == 3:
            weight[0] = rng.choice([np.inf, np.nan, -0.0])
            z[1], n[2] = rng.choice([-0.0, np.nan, 1e38]), rng.choice([-0.0, np.inf])
        start = int(rng.integers(0, steps))
        yield (weight, np.stack([z, n]).astype(dtype), history, fixeds[trial % 4], start,
               int(rng.integers(start, steps + 1)))


def test_replay_hook_equals_step_by_step(rule_replay_harness):
    """FtrlRule::replay_row (first missed step, then the last) is bitwise the replay of every
    step, including rows and histories where it must refuse (non-finite z, n or w, lr <= 0)."""
    taken = check_replay_hook(rule_replay_harness, "ftrl",
                              _replay_cases(np.random.default_rng(0), 4000))
    assert taken > 1200  # the O(1) form is the common case
