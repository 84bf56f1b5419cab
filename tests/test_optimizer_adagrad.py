"""SparseAdaGrad against MXNet's own AdaGrad given the dense gradients (its standard update),
eager and deferred: bitwise in float32 over MXNet 1.9.1's test grid (eps, clip, rescale) with
wd = 0 and wd > 0, float64 within the float rounding of the scalars, lr schedules, long gaps,
never-touched rows, lazy == standard at wd = 0, reads through forward and flush,
save/load/resume, the registry and gluon.Trainer by name."""

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from gluon_sparse.optimizer import SparseAdaGrad
from optimizer_rule_runs import (MXNetReference, assert_bitwise, batch, check_replay_hook,
                                 gap_schedule, last_step_marks, make_net, odd_history, run,
                                 train_step, trained_arrays)
from covering import pairwise

# MXNet 1.9.1 tests/python/unittest/test_optimizer.py, test_adagrad (which only has wd = 0;
# wd > 0 added: the case MXNet's row_sparse adagrad_update rejects).
MXNET_GRID = [dict(e + c + r + w) for e, c, r, w in pairwise(
    [(), (("eps", 1e-8),)], [(), (("clip_gradient", 0.4),), (("clip_gradient", 0.5),)],
    [(), (("rescale_grad", 0.14),), (("rescale_grad", 0.8),)], [(), (("wd", 0.05),)])]


def _init(rows, cols, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, cols)).astype(dtype)


def _schedule():
    return mx.lr_scheduler.FactorScheduler(step=7, factor=0.8, base_lr=0.1)


def _runs(kwargs, dtype, deferred, plan, rows=40, cols=3, seed=0):
    init = _init(rows, cols, dtype, seed)
    ref = MXNetReference(mx.optimizer.AdaGrad(**kwargs), init, dtype, 1)
    net, trainer = run(SparseAdaGrad(deferred=deferred, **kwargs), ref, init, dtype, plan, seed)
    return trained_arrays(net, trainer), ref.arrays()


@pytest.mark.parametrize("deferred", [False, True])
@pytest.mark.parametrize("kwargs", MXNET_GRID, ids=str)
def test_mxnet_grid_float32_bitwise(kwargs, deferred):
    got, want = _runs(dict(kwargs, learning_rate=0.1), "float32", deferred,
                      gap_schedule(40, 40, seed=1))
    assert_bitwise(got, want, str(kwargs))


@pytest.mark.parametrize("deferred", [False, True])
def test_float64_bitwise_when_scalars_are_floats(deferred):
    """In float64 MXNet multiplies by the Python doubles, the operators by the C floats the
    history records: equal bit for bit when the scalars are exact floats..."""
    kwargs = dict(learning_rate=0.125, eps=2.0 ** -20, wd=2.0 ** -5, rescale_grad=0.75,
                  clip_gradient=0.5)
    got, want = _runs(kwargs, "float64", deferred, gap_schedule(40, 60, seed=2))
    assert_bitwise(got, want)


@pytest.mark.parametrize("deferred", [False, True])
@pytest.mark.parametrize("kwargs", [
    {"eps": 1e-8, "clip_gradient": 0.5, "rescale_grad": 0.8, "wd": 0.05},
    {"clip_gradient": 0.4, "rescale_grad": 0.14, "wd": 0.05}], ids=str)
def test_float64_within_scalar_rounding(kwargs, deferred):
    """... and otherwise within their float rounding (relative 2**-24 on each step's terms)."""
    got, want = _runs(dict(kwargs, learning_rate=0.1), "float64", deferred,
                      gap_schedule(40, 60, seed=3))
    steps_scale = 0.1 * 60  # |weight change| <= lr per step
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7 * steps_scale)


@pytest.mark.parametrize("deferred", [False, True])
@pytest.mark.parametrize("wd", [0.0, 0.02])
def test_lr_schedule_and_long_gaps_bitwise(wd, deferred):
    """Row 0 moves at steps 1 and 400 only; with wd > 0 the catch-up replays 398 steps."""
    kwargs = dict(wd=wd, clip_gradient=0.5, lr_scheduler=_schedule())
    got, want = _runs(kwargs, "float32", deferred, gap_schedule(40, 400, seed=4))
    assert_bitwise(got, want)


@pytest.mark.parametrize("kwargs", [{}, {"eps": 1e-8, "clip_gradient": 0.4, "rescale_grad": 0.8},
                                    {"clip_gradient": 0.5, "rescale_grad": 0.14}], ids=str)
def test_wd0_lazy_equals_standard(kwargs):
    """With wd = 0 a step without gradient changes nothing: MXNet's lazy row_sparse
    adagrad_update, MXNet's dense update and deferred SparseAdaGrad agree bit for bit."""
    init, dtype = _init(40, 3, "float32"), "float32"
    plan = gap_schedule(40, 80, seed=5)
    ref = MXNetReference(mx.optimizer.AdaGrad(**kwargs), init, dtype, 1)
    net, trainer = run(SparseAdaGrad(deferred=True, **kwargs), ref, init, dtype, plan)
    for lazy_opt in (mx.optimizer.AdaGrad(**kwargs), SparseAdaGrad(lazy_update=True, **kwargs)):
        lazy_net, lazy_trainer = run(lazy_opt, None, init, dtype, plan)
        lazy = [lazy_net.weight.data().asnumpy(), lazy_trainer._updaters[0].states[0].asnumpy()]
        assert_bitwise(lazy, ref.arrays(), "lazy (%s) vs standard" % type(lazy_opt).__name__)
    assert_bitwise(trained_arrays(net, trainer), ref.arrays(), "deferred vs standard")
    never = np.arange(40 - 8, 40)  # gap_schedule leaves the last 20% untouched
    np.testing.assert_array_equal(lazy[0][never], init[never])


@pytest.mark.parametrize("deferred", [False, True])
def test_eps_zero_follows_mxnet(deferred):
    """eps = 0: MXNet's dense update computes 0 / sqrt(0) = NaN for every row that never
    had a gradient; the replay must not skip those steps as no-ops."""
    got, want = _runs(dict(eps=0.0), "float32", deferred, gap_schedule(40, 30, seed=10))
    assert_bitwise(got, want)
    assert np.isnan(got[0][-8:]).all() and np.isfinite(got[0][0]).all()


def test_never_touched_rows_decay_with_wd():
    """Rows without gradient: history stays 0, w += (0 + w * wd) * -lr every step (NumPy)."""
    init, dtype, wd = _init(40, 3, "float32"), "float32", 0.03
    plan = gap_schedule(40, 50, seed=6)
    opt = SparseAdaGrad(deferred=True, wd=wd, lr_scheduler=_schedule())
    net, trainer = run(opt, None, init, dtype, plan)
    weight, history = trained_arrays(net, trainer)
    never = np.arange(40 - 8, 40)
    want = init[never].copy()
    for t in range(1, 51):
        lr = np.float32(_schedule()(t))
        want = want + (np.float32(0) + want * np.float32(wd)) * -lr
    np.testing.assert_array_equal(weight[never], want)
    assert (history[never] == 0).all()


def test_forward_reads_caught_up_rows():
    init = _init(40, 3, "float32")
    plan = gap_schedule(40, 60, seed=7)
    outs = []
    for deferred in (True, False):
        net, _ = run(SparseAdaGrad(deferred=deferred, wd=0.01), None, init, "float32", plan)
        x, _ = batch(np.random.default_rng(9), np.arange(40), 40, 3, "float32")
        outs.append(net(x).asnumpy())
    assert_bitwise([outs[0]], [outs[1]])


def test_save_load_resume_bitwise(tmp_path):
    init, dtype = _init(40, 3, "float32"), "float32"
    plan = gap_schedule(40, 60, seed=8)
    kwargs = dict(wd=0.01, lr_scheduler=_schedule())
    ref = MXNetReference(mx.optimizer.AdaGrad(**kwargs), init, dtype, 1)
    net, trainer = run(SparseAdaGrad(deferred=True, **kwargs), ref, init, dtype, plan[:30], 8)
    net.save_parameters(str(tmp_path / "w.params"))
    trainer.save_states(str(tmp_path / "t.states"))
    resumed = make_net(np.zeros_like(init), dtype)
    resumed.load_parameters(str(tmp_path / "w.params"))
    trainer2 = gluon.Trainer(resumed.collect_params(), SparseAdaGrad(deferred=True, **kwargs),
                             update_on_kvstore=False)
    trainer2.load_states(str(tmp_path / "t.states"))
    rng = np.random.default_rng(9)
    for rows in plan[30:]:
        ref.step(train_step(resumed, trainer2, *batch(rng, rows, 40, 3, dtype)))
    assert_bitwise(trained_arrays(resumed, trainer2), ref.arrays())


def test_registry_trainer_by_name_and_bad_arguments():
    opt = mx.optimizer.create("sparseadagrad", deferred=True, eps=1e-6, learning_rate=0.3,
                              wd=0.01, clip_gradient=1.0)
    assert isinstance(opt, SparseAdaGrad) and opt.deferred
    assert (opt.float_stable_eps, opt.lr, opt.wd, opt.clip_gradient) == (1e-6, 0.3, 0.01, 1.0)
    net = make_net(_init(10, 2, "float32"), "float32")
    trainer = gluon.Trainer(net.collect_params(), "sparseadagrad",
                            {"deferred": True, "wd": 0.1}, update_on_kvstore=False)
    assert isinstance(trainer._optimizer, SparseAdaGrad)
    train_step(net, trainer, *batch(np.random.default_rng(0), [1, 4], 10, 2, "float32"))
    assert np.isfinite(net.weight.data().asnumpy()).all()
    with pytest.raises(ValueError, match="clip_gradient"):
        SparseAdaGrad(clip_gradient=-1.0)
    with pytest.raises(ValueError, match="lazy_update"):
        SparseAdaGrad(deferred=True, lazy_update=True)
    with pytest.raises(ValueError, match="does not support wd"):
        SparseAdaGrad(lazy_update=True, wd=0.1)


def _replay_cases(rng, count):
    for trial in range(count):
        dtype, cols = (np.float32, np.float64)[trial % 2], (5, 37)[trial % 5 == 4]
        steps = int(rng.integers(2, 40))
        lrs, wds = odd_history(rng, steps, [0.0, -0.1, np.inf, np.nan, -0.0],
                               [-0.1, np.inf, np.nan])
        if trial % 3:
            wds[:] = 0.0  # wd = 0 throughout: nothing moves
        eps = np.full(steps + 1, (1e-7, 1e-8, 0.0)[trial % 3], np.float32)
        if trial % 6 == 3:  # now and then a step whose eps is 0 or NaN: its full step
            eps[rng.integers(1, steps + 1)] = rng.choice([0.0, np.nan, -1e-8])
        clips = rng.choice([-1.0, 0.5, 0.0], steps + 1) if trial % 4 == 1 else -1.0
        moving = ~((wds == 0) & (lrs > 0) & np.isfinite(lrs) & (eps > 0))
        history = np.stack([lrs, wds, np.full(steps + 1, clips, np.float32), eps,
                            last_step_marks(moving)], 1).astype(np.float32)
        if trial % 10 == 9:
            history[:, 4] = np.nan  # mark unknown (the op's default)
        weight = rng.standard_normal(cols).astype(dtype)
        hist = np.abs(rng.standard_normal(cols)) * (trial % 4 != 0)
        if trial % 7 == 0:
            weight[0] = rng.choice([np.inf, np.nan, -0.0, -0.0])
        if trial % 11 == 0:
            hist[1] = rng.choice([-0.0, np.nan])
        start = int(rng.integers(0, steps))
        yield (weight, hist[None].astype(dtype), history, [], start,
               int(rng.integers(start, steps + 1)))


def test_replay_hook_equals_step_by_step(rule_replay_harness):
    """AdaGradRule::replay_row is bitwise the replay of every step: over steps with wd = 0
    nothing moves; over steps with weight decay the history stays and div is +0, so each
    step is w + (+0 + w * wd) * -lr, or the full step where eps is not > 0. It refuses rows
    whose history is -0 or NaN, and identity ranges over a weight that is not finite."""
    cases = list(_replay_cases(np.random.default_rng(0), 4000))
    taken = check_replay_hook(rule_replay_harness, "adagrad", cases)
    moving = sum(1 for _, _, history, _, start, end in cases
                 if (history[start + 1:end + 1, 1] != 0).any())
    assert taken > 2500 and moving > 500


def test_replay_marks_round_up_beyond_float_precision():
    """Marks are float32 records: a step count past 2**24 is rounded up, never down, so
    ``mark <= from`` cannot hide a later moving step."""
    from gluon_sparse.optimizer._replay_marks import last_step_where, running_max
    opt = SparseAdaGrad()
    for count in (5, 2 ** 24 + 1, 2 ** 25 + 3):
        opt._index_update_count[0] = count
        mark = last_step_where(opt, "k", 0, True)
        assert mark >= count and np.float32(mark) == mark and mark - count <= count * 2 ** -23
    opt._index_update_count[0] += 1
    assert last_step_where(opt, "k", 0, False) == mark  # unchanged without the property
    assert [running_max(opt, "m", 0, v) for v in (0.1, float("nan"), 0.05, 0.2)] == [
        0.1, 0.1, 0.1, 0.2]


def test_float16_takes_mxnet_dense_path():
    """Gradients the operators do not take (float16 weights without multi_precision) get
    MXNet's dense-gradient update, the standard one, also with wd > 0 (which MXNet's lazy
    row_sparse adagrad_update refuses)."""
    dtype = "float16"
    init = _init(8, 3, dtype)
    kwargs = dict(wd=0.05, clip_gradient=0.5, learning_rate=0.1)
    ours, theirs = SparseAdaGrad(**kwargs), mx.optimizer.AdaGrad(**kwargs)
    w, w_ref = mx.nd.array(init, dtype=dtype), mx.nd.array(init, dtype=dtype)
    state, state_ref = ours.create_state(0, w), mx.nd.zeros(init.shape, dtype=dtype)
    assert state.dtype == np.dtype(dtype)
    rng = np.random.default_rng(11)
    for rows in ([1, 4], [4], [0, 7]):
        grad = mx.nd.sparse.row_sparse_array(
            (rng.standard_normal((len(rows), 3)).astype(dtype), rows), shape=init.shape,
            dtype=dtype)
        ours.update(0, w, grad, state)
        theirs.update(0, w_ref, grad.tostype("default"), state_ref)
    assert_bitwise([w.asnumpy(), state.asnumpy()], [w_ref.asnumpy(), state_ref.asnumpy()])
    assert (w.asnumpy()[[2, 3, 5, 6]] != init[[2, 3, 5, 6]]).all()  # decayed without gradient
