"""The optimizer family at extreme but legal settings, against MXNet's own optimizers.

A learning rate decayed below float32's smallest normal number (a schedule
without a floor) is what MXNet's element-wise operators take; non-finite
scalars, which deferred updates cannot replay as MXNet computes them, are
refused by name.
"""
import mxnet as mx
import numpy as np
import pytest

import gluon_sparse.optimizer as gso

ROWS, COLS = 30, 4


def _grad(dense=False):
    g = mx.nd.sparse.row_sparse_array((np.ones((1, COLS), np.float32), np.array([3])),
                                      shape=(ROWS, COLS))
    return g.tostype("default") if dense else g


@pytest.mark.parametrize("ours, theirs, kwargs", [
    (gso.SparseSGD, mx.optimizer.SGD, dict(momentum=0.9)),
    (gso.SparseSGD, mx.optimizer.SGD, {}),
    (gso.SparseNadam, mx.optimizer.Nadam, {}),
    (gso.SparseAdamax, mx.optimizer.Adamax, {}),
    (gso.SparseAdaGrad, mx.optimizer.AdaGrad, {}),
], ids=["sgd_mom", "sgd", "nadam", "adamax", "adagrad"])
def test_a_learning_rate_decayed_below_float32s_normals_trains_as_mxnet(ours, theirs, kwargs):
    """The step's scalars went to the operator as text, where an underflowing value was
    refused ('is not a float32 number') at update 124; MXNet's operators take it."""
    w0 = np.random.default_rng(0).standard_normal((ROWS, COLS)).astype(np.float32)
    weights = []
    for cls, grad in ((theirs, _grad(dense=True)), (ours, _grad())):
        schedule = mx.lr_scheduler.FactorScheduler(step=1, factor=0.5, stop_factor_lr=0.0,
                                                   base_lr=0.1)
        optimizer = cls(learning_rate=0.1, lr_scheduler=schedule, **kwargs)
        w = mx.nd.array(w0)
        state = optimizer.create_state(0, w)
        for _ in range(160):
            optimizer.update(0, w, grad, state)
        assert optimizer._get_lr(0) < np.finfo(np.float32).tiny
        weights.append(w.asnumpy())
    np.testing.assert_allclose(weights[1], weights[0], rtol=1e-6)


@pytest.mark.parametrize("make", [
    lambda: gso.SparseAdam(learning_rate=float("inf"), deferred=True),
    lambda: gso.SparseSGD(learning_rate=0.1, momentum=0.9, rescale_grad=float("nan"),
                          deferred=True),
    lambda: gso.SparseRMSProp(learning_rate=0.1, rescale_grad=float("inf"), deferred=True),
], ids=["adam_lr_inf", "sgd_rescale_nan", "rmsprop_rescale_inf"])
def test_deferred_refuses_non_finite_scalars_by_name(make):
    """The rows a batch misses were replayed as finite numbers (or, with a zero state, not
    at all), where the eager update, as MXNet's, makes them NaN."""
    from mxnet import autograd, gluon
    from gluon_sparse.nn import FullyConnectedSparse
    net = FullyConnectedSparse(COLS, in_units=ROWS, use_bias=False)  # the weight alone
    net.initialize()
    trainer = gluon.Trainer(net.collect_params(), make(), kvstore=None)
    x = mx.nd.sparse.csr_matrix(([1.0], [3], [0, 1]), shape=(1, ROWS))
    with autograd.record():
        loss = net(x).sum()
    loss.backward()
    with pytest.raises(ValueError, match=r"deferred=True\): the (learning rate|rescale_grad) "
                                         r"\((inf|nan)\) of weight 0 must be finite"):
        trainer.step(1)
    # A refused step is no step: the counts (Adam's bias correction, the schedule) stay.
    assert trainer._optimizer.num_update == 0
    assert set(trainer._optimizer._index_update_count.values()) <= {0}


def test_a_nan_learning_rate_is_named_as_such():
    """NaN marks a scalar not given: the message said only that lr was required."""
    optimizer = gso.SparseRMSProp(learning_rate=float("nan"))
    w = mx.nd.array(np.ones((ROWS, COLS), np.float32))
    state = optimizer.create_state(0, w)
    with pytest.raises(mx.base.MXNetError, match=r"lr is required \(not given, or NaN\)"):
        optimizer.update(0, w, _grad(), state)
        w.wait_to_read()
