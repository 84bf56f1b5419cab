"""SparseAdam(decoupled_wd=True) (rule ``adamw``) against MXNet 1.9.1's ``adamw_update``.

The reference is MXNet's contrib operator on the dense gradient, called as
MXNet's AdamW optimizers call it (``lr=1``, ``eta`` = bias-corrected lr,
``rescale_grad`` an NDArray); the grid is MXNet's test_contrib_optimizer
(clip, rescale, wd, rescale_grad 0 / NaN / inf skipping the update) crossed
with Adam's, float32 and float64 (both bitwise: the kernel's scalars are C
floats), with an lr schedule, long gaps, never-touched rows, eager and
deferred, save/load/resume, float16 master copies (``mp_adamw_update``) and
the registry.
"""
import copy
import math

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

import adam_variant_checks as checks
from gluon_sparse.optimizer import SparseAdam
from covering import pairwise


class MXNetAdamW(mx.optimizer.Optimizer):
    """MXNet 2.0's AdamW (correct_bias=True) on MXNet 1.9.1's adamw_update / mp_adamw_update."""

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon

    def create_state(self, index, weight):
        return (mx.nd.zeros(weight.shape, weight.context, dtype=weight.dtype),
                mx.nd.zeros(weight.shape, weight.context, dtype=weight.dtype))

    def _arguments(self, index, weight):
        self._update_count(index)
        t = self._index_update_count[index]
        lr = self._get_lr(index)
        kw = {"lr": 1, "eta": lr * math.sqrt(1. - self.beta2 ** t) / (1. - self.beta1 ** t),
              "wd": self._get_wd(index), "beta1": self.beta1, "beta2": self.beta2,
              "epsilon": self.epsilon}
        if self.clip_gradient:
            kw["clip_gradient"] = self.clip_gradient
        return mx.nd.full((1,), self.rescale_grad, ctx=weight.context), kw

    def update(self, index, weight, grad, state):
        rescale, kw = self._arguments(index, weight)
        mx.nd.contrib.adamw_update(weight, grad.tostype("default").copy(), *state, rescale,
                                   out=weight, **kw)

    def update_multi_precision(self, index, weight, grad, state):
        if not (self.multi_precision and weight.dtype == np.float16):
            return self.update(index, weight, grad, state)
        rescale, kw = self._arguments(index, weight)
        weight32, (mean, var) = state
        mx.nd.contrib.mp_adamw_update(weight, grad.tostype("default").copy(), mean, var,
                                      weight32, rescale, out=weight, **kw)


def _adamw(**kwargs):
    return SparseAdam(decoupled_wd=True, **kwargs)


GRID = list(pairwise(["float32", "float64"], [None, 0.4, 10.0], [1.0, 0.14, 0.8],
                              [0.0, 0.03, 0.1]))


def _kwargs(clip, rescale, wd, lr=0.01, **extra):
    kw = {"lr_scheduler": checks.schedule(lr), "learning_rate": lr, "wd": wd,
          "rescale_grad": rescale}
    if clip is not None:
        kw["clip_gradient"] = clip
    kw.update(extra)
    return kw


def _run(kwargs, steps, dtype="float32", between=None):
    nets, trainers = checks.triple(_adamw, MXNetAdamW, kwargs, dtype=dtype)
    data = checks.batches(steps, dtype)
    outs = [checks.train(n, t, data) for n, t in zip(nets, trainers)]
    checks.assert_deferred(trainers[0])
    got = [checks.weights(n) + checks.states(t) for n, t in zip(nets, trainers)]
    return got, outs


@pytest.mark.parametrize("dtype, clip, rescale, wd", GRID)
def test_grid_matches_mxnet_adamw_update(dtype, clip, rescale, wd):
    got, outs = _run(_kwargs(clip, rescale, wd), 14, dtype)
    checks.assert_same(got[0], got[1])
    checks.assert_same(outs[0], outs[1])
    checks.assert_same(got[0], got[2])
    checks.assert_same(outs[0], outs[2])


@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_long_gaps_and_small_lr_bitwise(wd):
    """200 steps absent; lr below 1e-4, where MXNet's float parse is not strtof's."""
    got, _ = _run(_kwargs(None, 1.0, wd, lr=3.7e-5, beta1=0.5, beta2=0.9), 202)
    checks.assert_same(got[0], got[1])
    checks.assert_same(got[0], got[2])


@pytest.mark.parametrize("wd", [0.0, 0.03])
def test_zero_weight_rows_never_touched(wd):
    """Rows of +0 and -0 weights that no batch reads: signed zeros kept, bit for bit."""
    checks.assert_all_same(checks.train_triple(_adamw, MXNetAdamW, _kwargs(0.5, 1.0, wd), 10,
                                               zero_rows=checks.NEVER[:3]))


@pytest.mark.parametrize("bad", [0.0, float("nan"), float("inf")])
def test_rescale_grad_zero_nan_inf_skip_the_update(bad):
    """adamw_update leaves weights and states untouched; deferred rows skip the step too."""
    nets, trainers = checks.triple(_adamw, MXNetAdamW, _kwargs(0.4, 1.0, 0.05))
    data = checks.batches(12)
    for n, t in zip(nets, trainers):
        checks.train(n, t, data[:5])
        before = checks.weights(n) + checks.states(t)
        t._scale = bad  # Trainer.step sets rescale_grad = _scale / batch_size
        checks.train(n, t, data[5:7])
        checks.assert_same(checks.weights(n) + checks.states(t), before)
        t._scale = 1.0
        checks.train(n, t, data[7:])
    got = [checks.weights(n) + checks.states(t) for n, t in zip(nets, trainers)]
    checks.assert_same(got[0], got[1])
    checks.assert_same(got[0], got[2])


@pytest.mark.parametrize("grad_stype", ["default", "row_sparse"])
def test_float16_master_copy_matches_mp_adamw_update(grad_stype):
    """multi_precision=True: a float32 master copy, as mp_adamw_update keeps."""
    kw = dict(_kwargs(0.4, 0.5, 0.05), multi_precision=True)
    rows, cols = 10, 4
    rng = np.random.default_rng(0)
    init = rng.uniform(-1, 1, (rows, cols)).astype("float16")
    params, trainers = [], []
    for opt in (_adamw(deferred=True, **copy.deepcopy(kw)), MXNetAdamW(**copy.deepcopy(kw))):
        param = gluon.Parameter("w", shape=(rows, cols), dtype="float16", grad_stype=grad_stype)
        param.initialize(mx.init.Constant(0))
        param.set_data(mx.nd.array(init, dtype="float16"))
        params.append(param)
        trainers.append(gluon.Trainer([param], opt))
    for _ in range(6):
        idx = np.sort(rng.choice(rows, 3, replace=False))
        values = rng.uniform(-1, 1, (3, cols)).astype("float16")
        for param, trainer in zip(params, trainers):
            if grad_stype == "row_sparse":
                checks.set_row_sparse_grad(param, mx.nd.sparse.row_sparse_array(
                    (values, idx), shape=(rows, cols), dtype="float16"))
            else:
                dense = np.zeros((rows, cols), "float16")
                dense[idx] = values
                param.list_grad()[0][:] = dense
                param.list_data()[0]._fresh_grad = True
            trainer.step(1)
    got = [p.data().asnumpy() for p in params]
    checks.assert_same(got[:1], got[1:])
    assert not np.array_equal(got[0], init)


def test_two_devices_bitwise():
    got = checks.two_devices(_adamw, MXNetAdamW, _kwargs(0.5, 1.0, 0.03))
    checks.assert_same(got[0], got[1])
    checks.assert_same(got[0], got[2])


def test_save_load_resume_matches_uninterrupted(tmp_path):
    resumed, uninterrupted = checks.resume_from_files(
        _adamw, MXNetAdamW, _kwargs(None, 1.0, 0.03), tmp_path)
    checks.assert_same(resumed, uninterrupted)


def test_registry_and_trainer_by_name():
    opt = mx.optimizer.create("sparseadam", decoupled_wd=True, deferred=True, wd=0.01)
    assert isinstance(opt, SparseAdam) and opt.decoupled_wd and opt.deferred
    kw = _kwargs(0.4, 0.8, 0.03)
    net, ref = checks.make_net(), checks.make_net()
    trainers = [gluon.Trainer(net.collect_params(), "sparseadam",
                              dict(copy.deepcopy(kw), deferred=True, decoupled_wd=True)),
                gluon.Trainer(ref.collect_params(), MXNetAdamW(**kw))]
    data = checks.batches(8)
    checks.train(net, trainers[0], data)
    checks.train(ref, trainers[1], data)
    checks.assert_same(checks.weights(net), checks.weights(ref))


def test_bad_combinations():
    with pytest.raises(ValueError, match="lazy_update"):
        SparseAdam(decoupled_wd=True, lazy_update=True)
    with pytest.raises(ValueError, match="flush_denormals"):
        SparseAdam(decoupled_wd=True, flush_denormals=True)
