"""SparseAdamax (rule ``adamax``) against MXNet 1.9.1's own Adamax on dense gradients.

MXNet's grid (tests/python/unittest/test_optimizer.py::test_adamax: clip,
rescale, wd; float32 and float64), with an lr schedule, rows absent for long
gaps and rows never touched, eager and deferred, through gluon.Trainer and
FullyConnectedSparse; save/load/resume; the registry. float32 is bitwise
(the rule repeats MXNet's NDArray operations one by one); float64 within
float32 rounding of the scalars (MXNet keeps them in double for float64).
"""
import copy
import logging

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

import adam_variant_checks as checks
from gluon_sparse.optimizer import SparseAdamax
from covering import pairwise

GRID = list(pairwise(["float32", "float64"], [None, 0.4, 0.5], [1.0, 0.14, 0.8],
                              [0.0, 0.03, 0.05, 0.07]))
# float32-rounded scalars (MXNet: double) in float64 arithmetic: ~1e-7 relative per step
# in the step size, so ~1e-8 absolute on weights after 14 steps of lr 0.01.
F64_RTOL, F64_ATOL = 1e-6, 5e-8
MXNetDense = checks.dense_reference(mx.optimizer.Adamax)


def _kwargs(clip, rescale, wd, lr=0.01, **extra):
    kw = {"lr_scheduler": checks.schedule(lr), "learning_rate": lr, "wd": wd,
          "rescale_grad": rescale}
    if clip is not None:
        kw["clip_gradient"] = clip
    kw.update(extra)
    return kw


@pytest.mark.parametrize("dtype, clip, rescale, wd", GRID)
def test_grid_matches_mxnet_dense_update(dtype, clip, rescale, wd, caplog):
    nets, trainers = checks.triple(SparseAdamax, MXNetDense, _kwargs(clip, rescale, wd),
                                   dtype=dtype)
    data = checks.batches(14, dtype)
    outs = [checks.train(n, t, data) for n, t in zip(nets, trainers)]
    checks.assert_deferred(trainers[0])
    got = [checks.weights(n) + checks.states(t) for n, t in zip(nets, trainers)]
    # deferred == eager, bit for bit, in every read (forward outputs included)
    checks.assert_same(got[0], got[1])
    checks.assert_same(outs[0], outs[1])
    tol = {} if dtype == "float32" else {"rtol": F64_RTOL, "atol": F64_ATOL}
    checks.assert_same(got[0], got[2], **tol)
    checks.assert_same(outs[0], outs[2], **tol)
    never = checks.NEVER
    if wd == 0:  # MXNet's 0 / 0 in rows no gradient reached (epsilon = 0)
        assert np.isnan(got[2][0][never]).all() and np.isnan(got[0][0][never]).all()
        assert "become NaN" in caplog.text
    else:
        assert np.isfinite(got[0][0][never]).all()


@pytest.mark.parametrize("beta1", [0.5, 0.6])
@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_long_gaps_bitwise(wd, beta1):
    """Rows absent for up to 200 steps. With wd = 0 and beta1 = 0.5 the mean halves to 0
    through denormals (step-by-step replay); with beta1 = 0.6 it never reaches 0, and
    the frozen replay (frozen_replay.h) takes the rows once their weights stop moving."""
    kw = _kwargs(None, 1.0, wd, lr=0.002, beta1=beta1, beta2=0.9)
    nets, trainers = checks.triple(SparseAdamax, MXNetDense, kw)
    data = checks.batches(202)
    for n, t in zip(nets, trainers):
        checks.train(n, t, data)
    got = [checks.weights(n) + checks.states(t) for n, t in zip(nets, trainers)]
    checks.assert_same(got[0], got[1])
    checks.assert_same(got[0], got[2])


def _numpy_adamax(w, grads, lr, wd, epsilon, beta1=0.9, beta2=0.999):
    """AdaMax with m / (u + epsilon), in float32, operation by operation (independent reference)."""
    f = np.float32
    m, u = np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(grads, 1):
        x = g * f(1.0) + w * f(wd)
        m = m * f(beta1) + x * f(1. - beta1)
        a, b = u * f(beta2), np.abs(x)
        u = np.where(np.isnan(a), a, np.where(a > b, a, b))
        w = w - (m * f(lr / (1. - beta1 ** t))) / (u + f(epsilon))
    return w, m, u


@pytest.mark.parametrize("deferred", [True, False])
def test_epsilon_keeps_untouched_rows_finite(deferred):
    """epsilon > 0 (gluon-sparse's addition): m / (u + epsilon), checked against NumPy."""
    rows, cols = 12, 3
    rng = np.random.default_rng(4)
    init = rng.uniform(-1, 1, (rows, cols)).astype("float32")
    param = gluon.Parameter("w", shape=(rows, cols), grad_stype="row_sparse")
    param.initialize(mx.init.Constant(0))
    param.set_data(mx.nd.array(init))
    trainer = gluon.Trainer([param], SparseAdamax(learning_rate=0.01, epsilon=1e-3,
                                                  deferred=deferred))
    dense = []
    for _ in range(6):
        idx = np.sort(rng.choice(rows // 2, 2, replace=False))
        g = np.zeros((rows, cols), "float32")
        g[idx] = rng.uniform(-1, 1, (2, cols))
        dense.append(g)
        rsp = mx.nd.sparse.row_sparse_array((g[idx], idx), shape=(rows, cols))
        checks.set_row_sparse_grad(param, rsp)
        trainer.step(1)
    want = _numpy_adamax(init, dense, 0.01, 0.0, 1e-3)
    got = [param.data().asnumpy()] + checks.states(trainer)
    checks.assert_same(got, list(want))
    np.testing.assert_array_equal(got[0][rows // 2:], init[rows // 2:])  # never touched


@pytest.mark.parametrize("wd", [0.0, 0.03])
def test_zero_weight_rows_never_touched(wd):
    """Rows of +0 and -0 weights that no batch reads: signed zeros kept, bit for bit."""
    checks.assert_all_same(checks.train_triple(SparseAdamax, MXNetDense, _kwargs(0.5, 1.0, wd), 10,
                                               zero_rows=checks.NEVER[:3]))


def test_small_lr_on_zero_weights_bitwise():
    """lr below 1e-4 on weights of its order: MXNet casts _mul_scalar's double to float
    (correctly rounded), where dmlc's float parse would be one float off now and then."""
    checks.assert_all_same(checks.train_triple(SparseAdamax, MXNetDense,
                                               _kwargs(None, 1.0, 0.01, lr=3.7e-5), 40,
                                               zero_rows=np.arange(checks.ROWS)))


def test_reads_through_forward_before_flush():
    """A forward pass of the deferred net reads caught-up rows (never-trained ones too)."""
    kw = _kwargs(0.5, 1.0, 0.05)
    nets, trainers = checks.triple(SparseAdamax, MXNetDense, kw)
    data = checks.batches(30)
    for n, t in zip(nets, trainers):
        checks.train(n, t, data)
    x = mx.nd.sparse.csr_matrix(np.ones((1, checks.ROWS), "float32"))
    outs = [n(x).asnumpy() for n in nets]  # the deferred net reads every row, unflushed
    checks.assert_same(outs[:1], outs[1:2])
    checks.assert_same(outs[:1], outs[2:])


def test_two_devices_bitwise():
    got = checks.two_devices(SparseAdamax, MXNetDense, _kwargs(0.5, 1.0, 0.03))
    checks.assert_same(got[0], got[1])
    checks.assert_same(got[0], got[2])


def test_save_load_resume_matches_uninterrupted(tmp_path):
    resumed, uninterrupted = checks.resume_from_files(
        SparseAdamax, MXNetDense, _kwargs(None, 1.0, 0.03), tmp_path)
    checks.assert_same(resumed, uninterrupted)


def test_registry_and_trainer_by_name():
    opt = mx.optimizer.create("sparseadamax", deferred=True, learning_rate=0.003, wd=0.01)
    assert isinstance(opt, SparseAdamax) and opt.deferred and opt.lr == 0.003
    kw = _kwargs(0.4, 0.8, 0.03)
    net, ref = checks.make_net(), checks.make_net()
    params = dict(copy.deepcopy(kw), deferred=True)
    trainers = [gluon.Trainer(net.collect_params(), "sparseadamax", params),
                gluon.Trainer(ref.collect_params(), MXNetDense(**kw))]
    data = checks.batches(8)
    checks.train(net, trainers[0], data)
    checks.train(ref, trainers[1], data)
    assert isinstance(trainers[0]._optimizer, SparseAdamax)
    checks.assert_same(checks.weights(net), checks.weights(ref))


def test_bad_arguments():
    with pytest.raises(ValueError, match="clip_gradient"):
        SparseAdamax(clip_gradient=-1.0)
    with pytest.raises(ValueError, match="epsilon"):
        SparseAdamax(epsilon=-1e-8)


def test_zero_division_warning_only_for_sparse_gradients(caplog):
    caplog.set_level(logging.WARNING)
    net = gluon.nn.Dense(2, in_units=3)
    net.initialize()
    trainer = gluon.Trainer(net.collect_params(), SparseAdamax())
    with mx.autograd.record():
        loss = net(mx.nd.ones((1, 3))).sum()
    loss.backward()
    trainer.step(1)
    assert "become NaN" not in caplog.text
