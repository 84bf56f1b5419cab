"""SparseNadam (rule ``nadam``) against MXNet 1.9.1's own Nadam on dense gradients.

MXNet tests Nadam only by convergence (test_optimizer.py::test_nadam); the
grid here is its Adam grid (clip, rescale, wd; float32 and float64), with an
lr schedule, rows absent for long gaps and never touched, eager and deferred,
through gluon.Trainer and FullyConnectedSparse, save/load/resume and the
registry. The momentum schedule is MXNet's: one ``m_schedule`` per optimizer,
advanced at every update of any weight (here weight and bias alternate).
float32 is bitwise; float64 within float32 rounding of the scalars.
"""
import copy

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

import adam_variant_checks as checks
from gluon_sparse.optimizer import SparseNadam
from covering import pairwise

GRID = list(pairwise(["float32", "float64"], [None, 0.4, 0.5], [1.0, 0.14, 0.8],
                              [0.0, 0.03, 0.05, 0.07]))
# float32-rounded scalars (MXNet: double) in float64 arithmetic: ~1e-7 relative per step
# in the step size, so ~1e-8 absolute on weights after 14 steps of lr 0.01.
F64_RTOL, F64_ATOL = 1e-6, 5e-8
MXNetDense = checks.dense_reference(mx.optimizer.Nadam)


def _kwargs(clip, rescale, wd, lr=0.01, **extra):
    kw = {"lr_scheduler": checks.schedule(lr), "learning_rate": lr, "wd": wd,
          "rescale_grad": rescale}
    if clip is not None:
        kw["clip_gradient"] = clip
    kw.update(extra)
    return kw


def _run(kwargs, steps, dtype="float32"):
    nets, trainers = checks.triple(SparseNadam, MXNetDense, kwargs, dtype=dtype)
    data = checks.batches(steps, dtype)
    outs = [checks.train(n, t, data) for n, t in zip(nets, trainers)]
    checks.assert_deferred(trainers[0])
    got = [checks.weights(n) + checks.states(t) for n, t in zip(nets, trainers)]
    return got, outs, [t._optimizer for t in trainers]


@pytest.mark.parametrize("dtype, clip, rescale, wd", GRID)
def test_grid_matches_mxnet_dense_update(dtype, clip, rescale, wd):
    got, outs, opts = _run(_kwargs(clip, rescale, wd), 14, dtype)
    checks.assert_same(got[0], got[1])
    checks.assert_same(outs[0], outs[1])
    tol = {} if dtype == "float32" else {"rtol": F64_RTOL, "atol": F64_ATOL}
    checks.assert_same(got[0], got[2], **tol)
    checks.assert_same(outs[0], outs[2], **tol)
    # one schedule for both weights: advanced twice a step, as MXNet's
    assert opts[0].m_schedule == opts[1].m_schedule == opts[2].m_schedule


@pytest.mark.parametrize("extra", [{"schedule_decay": 0.1, "beta1": 0.8},
                                   {"beta2": 0.99, "epsilon": 1e-4}])
def test_other_hyper_parameters(extra):
    got, _, _ = _run(_kwargs(0.5, 1.0, 0.02, **extra), 12)
    checks.assert_same(got[0], got[1])
    checks.assert_same(got[0], got[2])


@pytest.mark.parametrize("beta1", [0.5, 0.6])
@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_long_gaps_bitwise(wd, beta1):
    """Rows absent for up to 200 steps. With wd = 0 and beta1 = 0.5 the mean halves to 0
    through denormals (step-by-step replay); with beta1 = 0.6 it never reaches 0, and
    the frozen replay (frozen_replay.h) takes the rows once their weights stop moving."""
    got, _, _ = _run(_kwargs(None, 1.0, wd, lr=0.002, beta1=beta1, beta2=0.9), 202)
    checks.assert_same(got[0], got[1])
    checks.assert_same(got[0], got[2])


@pytest.mark.parametrize("wd", [0.0, 0.03])
def test_zero_weight_rows_never_touched(wd):
    """Rows of +0 and -0 weights that no batch reads: signed zeros kept, bit for bit."""
    checks.assert_all_same(checks.train_triple(SparseNadam, MXNetDense, _kwargs(0.5, 1.0, wd), 10,
                                               zero_rows=checks.NEVER[:3]))


def test_small_lr_on_zero_weights_bitwise():
    """lr below 1e-4 on weights of its order: MXNet casts _mul_scalar's double to float
    (correctly rounded), where dmlc's float parse would be one float off now and then."""
    checks.assert_all_same(checks.train_triple(SparseNadam, MXNetDense,
                                               _kwargs(None, 1.0, 0.01, lr=3.7e-5), 40,
                                               zero_rows=np.arange(checks.ROWS)))


def test_reads_through_forward_before_flush():
    kw = _kwargs(0.5, 1.0, 0.05)
    nets, trainers = checks.triple(SparseNadam, MXNetDense, kw)
    data = checks.batches(30)
    for n, t in zip(nets, trainers):
        checks.train(n, t, data)
    x = mx.nd.sparse.csr_matrix(mx.nd.ones((1, checks.ROWS)).asnumpy())
    outs = [n(x).asnumpy() for n in nets]  # the deferred net reads every row, unflushed
    checks.assert_same(outs[:1], outs[1:2])
    checks.assert_same(outs[:1], outs[2:])


def test_two_devices_bitwise():
    got = checks.two_devices(SparseNadam, MXNetDense, _kwargs(0.5, 1.0, 0.03))
    checks.assert_same(got[0], got[1])
    checks.assert_same(got[0], got[2])


def test_save_load_resume_matches_uninterrupted(tmp_path):
    """The optimizer (with its m_schedule) and the deferred states travel in save_states."""
    def same_schedule(saved, loaded):
        assert loaded._optimizer.m_schedule == saved._optimizer.m_schedule != 1.0

    resumed, uninterrupted = checks.resume_from_files(
        SparseNadam, MXNetDense, _kwargs(None, 1.0, 0.03), tmp_path, on_load=same_schedule)
    checks.assert_same(resumed, uninterrupted)


@pytest.mark.parametrize("odd_dtype, deferred", [("float64", True), ("float16", False)])
def test_mixed_dtypes_keep_the_trainers_order(odd_dtype, deferred):
    """The shared momentum schedule advances weight by weight in the Trainer's order.
    MXNet's aggregation groups weights by dtype (here weight, bias, odd instead of weight,
    odd, bias), which once gave the bias and the odd weight other schedules (4e-3 off)."""
    kw = _kwargs(None, 1.0, 0.03, multi_precision=odd_dtype == "float16")
    runs = []
    for opt in (SparseNadam(deferred=deferred, **copy.deepcopy(kw)), MXNetDense(**kw)):
        net = checks.make_net()
        odd = gluon.Parameter("odd", shape=(5,), dtype=odd_dtype)
        odd.initialize(mx.init.Constant(0.25))
        trainer = gluon.Trainer([net.weight, odd, net.bias], opt)
        rng = np.random.default_rng(3)
        for x, y in checks.batches(10):
            scale = mx.nd.array(rng.standard_normal(5), dtype=odd_dtype)
            with mx.autograd.record():
                losses = [((net(x) - y) ** 2).sum(), (odd.data() * scale).sum()]
            mx.autograd.backward(losses)
            trainer.step(1)
        runs.append(checks.weights(net) + [odd.data().asnumpy()])
    checks.assert_same(runs[0], runs[1])


def test_registry_and_trainer_by_name():
    opt = mx.optimizer.create("sparsenadam", deferred=True, learning_rate=0.003,
                              schedule_decay=0.01)
    assert isinstance(opt, SparseNadam) and opt.deferred and opt.schedule_decay == 0.01
    kw = _kwargs(0.4, 0.8, 0.03)
    net, ref = checks.make_net(), checks.make_net()
    trainers = [gluon.Trainer(net.collect_params(), "sparsenadam",
                              dict(copy.deepcopy(kw), deferred=True)),
                gluon.Trainer(ref.collect_params(), MXNetDense(**kw))]
    data = checks.batches(8)
    checks.train(net, trainers[0], data)
    checks.train(ref, trainers[1], data)
    assert isinstance(trainers[0]._optimizer, SparseNadam)
    checks.assert_same(checks.weights(net), checks.weights(ref))


def test_bad_arguments():
    with pytest.raises(ValueError, match="clip_gradient"):
        SparseNadam(clip_gradient=-0.5)


def test_an_updater_outside_a_trainer_keeps_the_order_of_mixed_dtypes():
    """Without a Trainer's param_dict, SparseNadam aggregated and MXNet's Updater grouped the
    weights by dtype, reordering the updates that Nadam's shared momentum schedule follows."""
    rng = np.random.default_rng(0)
    dtypes = ["float32", "float64", "float32"]
    start = [rng.standard_normal((5, 3)).astype(d) for d in dtypes]
    grads = [[rng.standard_normal((5, 3)).astype(d) for d in dtypes] for _ in range(10)]
    results = {}
    for name in ("nadam", "sparsenadam"):
        updater = mx.optimizer.get_updater(mx.optimizer.create(name, learning_rate=0.05))
        weights = [mx.nd.array(w, dtype=w.dtype) for w in start]
        for step in grads:
            updater([0, 1, 2], [mx.nd.array(g, dtype=g.dtype) for g in step], weights)
        results[name] = [w.asnumpy() for w in weights]
    for ours, theirs in zip(results["sparsenadam"], results["nadam"]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name, options", [("sparsenadam", {"beta2": 0.5}),
                                           ("sparseadamax", {"beta1": 0.5})])
def test_a_scalar_on_a_float32_midpoint_rounds_as_mxnet_rounds_it(name, options):
    """1 - 0.5 ** 25 lies halfway between two float32 values: MXNet's scalar op parses the
    double and casts it (to 1.0), the rule parsed the decimal text straight to float32
    (0.99999994), and the weights parted from update 25 on."""
    rng = np.random.default_rng(0)
    start = rng.standard_normal((30, 4)).astype("f")
    ours = mx.optimizer.create(name, learning_rate=0.01, **options)
    theirs = mx.optimizer.create(name.replace("sparse", ""), learning_rate=0.01, **options)
    w_ours, w_theirs = mx.nd.array(start), mx.nd.array(start)
    s_ours, s_theirs = ours.create_state(0, w_ours), theirs.create_state(0, w_theirs)
    for _ in range(30):
        grad = mx.nd.array(rng.standard_normal((30, 4)).astype("f"))
        ours.update(0, w_ours, grad.tostype("row_sparse"), s_ours)
        theirs.update(0, w_theirs, grad, s_theirs)
        # After every update: a difference of one rounding can heal a few steps later.
        np.testing.assert_array_equal(w_ours.asnumpy(), w_theirs.asnumpy())
