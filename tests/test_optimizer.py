"""SparseAdam against mx.optimizer.Adam(lazy_update=False) and a NumPy reference,
alone and inside gluon.Trainer (one and two contexts, kvstores) and the Module API."""
import itertools
import math

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

import gluon_sparse.optimizer
from gluon_sparse.nn import FullyConnectedSparse
from gluon_sparse.optimizer import SparseAdam
from gluon_sparse.optimizer import sparse_adam

RTOL, ATOL = 1e-4, 2e-5


def _count_calls(monkeypatch, getter):
    """Count the calls of sparse_adam's operator getter ``getter`` (a function name)."""
    calls = []
    real = getattr(sparse_adam, getter)

    def counting():
        calls.append(1)
        return real()
    monkeypatch.setattr(sparse_adam, getter, counting)
    return calls


@pytest.fixture
def op_calls(monkeypatch):
    """Count the calls that reach gluon-sparse's operator (vs MXNet's adam_update)."""
    return _count_calls(monkeypatch, "_adam_op")


def _flatten(state):
    if isinstance(state, (tuple, list)):
        return [leaf for item in state for leaf in _flatten(item)]
    return [] if state is None else [state]


def _assert_close(got, want, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(got.asnumpy().astype(np.float64),
                               want.asnumpy().astype(np.float64), rtol=rtol, atol=atol)


def _run_both(kwargs, dtype, weight_stype, steps=30, shape=(50, 8), rows=6, seed=0):
    """Apply the same row_sparse gradients with SparseAdam and MXNet's standard Adam."""
    rng = np.random.RandomState(seed)
    initial = rng.randn(*shape)
    optimizers = [SparseAdam(**kwargs), mx.optimizer.Adam(lazy_update=False, **kwargs)]
    weights = [mx.nd.array(initial, dtype=dtype).tostype(weight_stype) for _ in optimizers]
    states = [opt.create_state_multi_precision(0, w) for opt, w in zip(optimizers, weights)]
    for step in range(steps):
        # Every few steps an empty gradient: the whole update is then decay.
        n = 0 if step % 7 == 3 else rows
        indices = np.sort(rng.choice(shape[0], n, replace=False))
        grad = mx.nd.sparse.row_sparse_array((rng.randn(n, *shape[1:]).astype(dtype), indices),
                                             shape=shape, dtype=dtype)
        for opt, weight, state in zip(optimizers, weights, states):
            opt.update_multi_precision(0, weight, grad, state)
    return weights, states


def test_registered_and_defaults():
    opt = mx.optimizer.create("sparseadam", learning_rate=0.01)
    assert isinstance(opt, SparseAdam)
    assert opt.lazy_update is False
    assert (opt.beta1, opt.beta2, opt.epsilon) == (0.9, 0.999, 1e-8)
    assert opt.deferred is False
    # Every optimizer of the family is exported (the rule branches add theirs).
    assert {"SparseAdam", "SparseSGD", "flush", "deferred",
            "supports_deferred"} <= set(gluon_sparse.optimizer.__all__)
    assert gluon_sparse.optimizer.flush is gluon_sparse.optimizer.deferred.flush


GRID = list(itertools.product(
    [{}, {"clip_gradient": 0.4}, {"clip_gradient": 0.5}],
    [{}, {"rescale_grad": 0.14}, {"rescale_grad": 0.8}],
    [{}, {"wd": 0.03}, {"wd": 0.07}]))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("weight_stype", ["default", "row_sparse"])
def test_matches_mxnet_adam_over_option_grid(dtype, weight_stype, op_calls):
    # The option grid of MXNet's own tests/python/unittest/test_optimizer.py::test_adam.
    for i, (cg, rg, wd) in enumerate(GRID):
        kwargs = dict(learning_rate=0.01, **cg, **rg, **wd)
        weights, states = _run_both(kwargs, dtype, weight_stype, seed=i)
        assert weights[0].stype == weight_stype
        _assert_close(weights[0], weights[1])
        for ours, theirs in zip(_flatten(states[0]), _flatten(states[1])):
            _assert_close(ours, theirs)
    assert len(op_calls) == 30 * len(GRID)


def test_float16_with_multi_precision(op_calls):
    kwargs = dict(learning_rate=0.01, wd=0.03, clip_gradient=0.5, multi_precision=True)
    weights, states = _run_both(kwargs, "float16", "default", steps=40)
    assert weights[0].dtype == np.float16
    master, (mean, var) = states[0]
    assert master.dtype == mean.dtype == np.float32
    np.testing.assert_array_equal(weights[0].asnumpy(), weights[1].asnumpy())
    for ours, theirs in zip(_flatten(states[0]), _flatten(states[1])):
        _assert_close(ours, theirs)
    assert len(op_calls) == 40


def test_float16_without_multi_precision_follows_mxnet(op_calls):
    with pytest.warns(UserWarning):
        weights, _ = _run_both(dict(learning_rate=0.01), "float16", "default", steps=5)
    np.testing.assert_array_equal(weights[0].asnumpy(), weights[1].asnumpy())
    assert not op_calls


def test_matches_numpy_reference_with_lr_schedule():
    shape, steps, lr, wd, clip = (20, 5), 60, 0.02, 0.01, 0.3
    scheduler = mx.lr_scheduler.FactorScheduler(step=10, factor=0.7, base_lr=lr)
    opt = SparseAdam(learning_rate=lr, wd=wd, clip_gradient=clip, lr_scheduler=scheduler)
    rng = np.random.RandomState(5)
    w = rng.randn(*shape)
    m, v = np.zeros(shape), np.zeros(shape)
    weight = mx.nd.array(w, dtype="float64")
    state = opt.create_state(0, weight)
    for t in range(1, steps + 1):
        indices = np.sort(rng.choice(shape[0], 4, replace=False))
        rows = rng.randn(4, shape[1])
        opt.update(0, weight, mx.nd.sparse.row_sparse_array((rows, indices), shape=shape,
                                                            dtype="float64"), state)
        # mx.lr_scheduler.FactorScheduler: lr * factor**(num_update // step), float32 scalars.
        lr_t = lr * 0.7 ** ((t - 1) // 10) * math.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
        grad = np.zeros(shape)
        grad[indices] = rows
        g = np.clip(grad + wd * w, -clip, clip)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        w = w - lr_t * m / (np.sqrt(v) + 1e-8)
    # Exact maths in float64; MXNet (and so SparseAdam) rounds the scalars
    # (betas, lr, wd) to float32, which accounts for the remaining ~1e-5.
    np.testing.assert_allclose(weight.asnumpy(), w, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(state[0].asnumpy(), m, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(state[1].asnumpy(), v, rtol=RTOL, atol=1e-8)


def test_dense_and_lazy_updates_use_mxnet(op_calls):
    rng = np.random.RandomState(6)
    shape = (10, 3)
    for lazy, grad in [(False, mx.nd.array(rng.randn(*shape))),
                       (True, mx.nd.sparse.row_sparse_array((rng.randn(2, 3), [1, 7]), dtype="float32",
                                                            shape=shape))]:
        ours, theirs = SparseAdam(lazy_update=lazy, wd=0.1), mx.optimizer.Adam(lazy_update=lazy,
                                                                               wd=0.1)
        weights = [mx.nd.array(rng.randn(*shape)) for _ in range(2)]
        weights[1] = weights[0].copy()
        states = [ours.create_state(0, weights[0]), theirs.create_state(0, weights[1])]
        ours.update(0, weights[0], grad, states[0])
        theirs.update(0, weights[1], grad, states[1])
        np.testing.assert_array_equal(weights[0].asnumpy(), weights[1].asnumpy())
        # Lazy Adam leaves rows outside the gradient untouched.
        if lazy:
            np.testing.assert_array_equal(states[0][0].asnumpy()[0], 0)
    assert not op_calls


# ------------------------------------------------------------------ training APIs

def _sparse_net(in_units, ctx):
    net = gluon.nn.HybridSequential()
    net.add(FullyConnectedSparse(8, activation="sigmoid", in_units=in_units))
    net.add(gluon.nn.Dense(1, in_units=8))
    net.initialize(mx.init.Xavier(), ctx=ctx)
    return net


def _train(optimizer, optimizer_params, ctx, kvstore="device", update_on_kvstore=None, steps=8,
           in_units=200, seed=0):
    """Train a FullyConnectedSparse net on random CSR batches; return its parameters."""
    mx.random.seed(seed)
    np.random.seed(seed)
    ctx = ctx if isinstance(ctx, list) else [ctx]
    net = _sparse_net(in_units, ctx)
    trainer = gluon.Trainer(net.collect_params(), optimizer, optimizer_params, kvstore=kvstore,
                            update_on_kvstore=update_on_kvstore)
    loss_fn = gluon.loss.SigmoidBinaryCrossEntropyLoss()
    rng = np.random.RandomState(seed)
    for _ in range(steps):
        x = mx.nd.array(rng.rand(4 * len(ctx), in_units) * (rng.rand(4 * len(ctx), in_units) < 0.03))
        y = mx.nd.array(rng.randint(0, 2, size=(4 * len(ctx), 1)))
        xs = gluon.utils.split_and_load(x.tostype("csr"), ctx)
        ys = gluon.utils.split_and_load(y, ctx)
        with autograd.record():
            losses = [loss_fn(net(xi), yi) for xi, yi in zip(xs, ys)]
        autograd.backward(losses)
        trainer.step(x.shape[0])
    return {name: p.data(ctx[0]).asnumpy() for name, p in net.collect_params().items()}, net


def _assert_same_params(got, want):
    assert len(got) == len(want)
    for (name, a), b in zip(sorted(got.items()), [v for _, v in sorted(want.items())]):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=name)


@pytest.mark.parametrize("ctx, kvstore, update_on_kvstore", [
    (mx.cpu(), "device", None),
    ([mx.cpu(0), mx.cpu(1)], "device", False),
    ([mx.cpu(0), mx.cpu(1)], "local", True),
    ([mx.cpu(0), mx.cpu(1)], "device", True),
], ids=["one-ctx", "two-ctx", "two-ctx-local-kvstore", "two-ctx-device-kvstore"])
def test_gluon_trainer_matches_mxnet_adam(ctx, kvstore, update_on_kvstore, op_calls):
    params = {"learning_rate": 0.05, "wd": 0.01, "clip_gradient": 1.0}
    ours, net = _train("sparseadam", params, ctx, kvstore, update_on_kvstore)
    theirs, _ = _train("adam", dict(params, lazy_update=False), ctx, kvstore, update_on_kvstore)
    _assert_same_params(ours, theirs)
    assert op_calls, "the row_sparse weight gradient did not reach the operator"
    weight = net[0].weight
    # Every context holds the same weight after the step.
    for c in weight.list_ctx():
        np.testing.assert_array_equal(weight.data(c).asnumpy(), ours[weight.name])


def test_module_api_matches_mxnet_adam(op_calls):
    rows, cols, batch = 60, 4, 5
    data = mx.sym.Variable("data")
    embed = mx.sym.Embedding(data, input_dim=rows, output_dim=cols, sparse_grad=True, name="embed")
    out = mx.sym.LinearRegressionOutput(mx.sym.sum(embed, axis=1), name="out")
    rng = np.random.RandomState(7)
    x = rng.randint(0, rows, size=(40, 3)).astype("float32")
    y = rng.randn(40, cols).astype("float32")
    results = []
    for optimizer, params in [("sparseadam", {}), ("adam", {"lazy_update": False})]:
        mod = mx.mod.Module(out, data_names=["data"], label_names=["out_label"])
        mod.bind(data_shapes=[("data", (batch, 3))], label_shapes=[("out_label", (batch, cols))])
        mod.init_params(mx.init.Uniform(0.5), force_init=True)
        arg, aux = mod.get_params()
        if results:
            mod.set_params(results[0][1], aux)
        mod.init_optimizer(optimizer=optimizer,
                           optimizer_params=dict(learning_rate=0.05, wd=0.02, **params))
        initial = {k: v.copy() for k, v in mod.get_params()[0].items()}
        for batch_data in mx.io.NDArrayIter(x, y, batch_size=batch, label_name="out_label"):
            mod.forward_backward(batch_data)
            mod.update()
        results.append((mod.get_params()[0], initial))
    assert op_calls
    np.testing.assert_allclose(results[0][0]["embed_weight"].asnumpy(),
                               results[1][0]["embed_weight"].asnumpy(), rtol=RTOL, atol=ATOL)


def test_larger_weight_matches_mxnet_adam():
    kwargs = dict(learning_rate=0.01, wd=0.02, clip_gradient=1.0, rescale_grad=0.5)
    weights, states = _run_both(kwargs, "float32", "default", steps=5, shape=(20000, 16), rows=500)
    _assert_close(weights[0], weights[1])
    for ours, theirs in zip(_flatten(states[0]), _flatten(states[1])):
        _assert_close(ours, theirs)


def test_flush_denormals_is_passed_to_the_operator_and_stays_within_tolerance():
    # SparseAdam(flush_denormals=True) against MXNet's Adam on the same gradients.
    kwargs = dict(learning_rate=0.01, wd=0.0)
    rng = np.random.RandomState(9)
    shape = (30, 4)
    ours = SparseAdam(flush_denormals=True, **kwargs)
    theirs = mx.optimizer.Adam(lazy_update=False, **kwargs)
    w = [mx.nd.array(rng.randn(*shape)) for _ in range(2)]
    w[1] = w[0].copy()
    s = [ours.create_state(0, w[0]), theirs.create_state(0, w[1])]
    tiny = np.finfo(np.float32).tiny
    for state in s:  # means already in the denormal range
        state[0][:] = mx.nd.array(np.full(shape, tiny / 3))
    for _ in range(3):
        grad = mx.nd.sparse.row_sparse_array((rng.randn(2, 4).astype("float32"), [3, 17]),
                                             shape=shape)
        ours.update(0, w[0], grad, s[0])
        theirs.update(0, w[1], grad, s[1])
    mean = s[0][0].asnumpy()
    assert not ((mean != 0) & (np.abs(mean) < tiny)).any()
    assert ((s[1][0].asnumpy() != 0) & (np.abs(s[1][0].asnumpy()) < tiny)).any()
    _assert_close(w[0], w[1])
    _assert_close(s[0][1], s[1][1])


# ------------------------------------------------------------------ aggregated dense updates

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_aggregated_dense_update_is_bitwise_mxnet_adam(dtype, monkeypatch):
    """Trainer hands every parameter to update_multi_precision at once: the dense
    ones go to gluon_sparse_adam_multi_update in one call, bitwise MXNet's Adam,
    with a learning-rate schedule, per-parameter lr_mult / wd_mult and clipping."""
    fused = _count_calls(monkeypatch, "_adam_multi_op")

    def train(optimizer):
        mx.random.seed(3)
        net = gluon.nn.HybridSequential()
        net.add(gluon.nn.Dense(6, activation="tanh", in_units=5), gluon.nn.Dense(3, in_units=6),
                gluon.nn.Dense(1, use_bias=False, in_units=3))
        net.initialize(mx.init.Xavier())
        net.cast(dtype)
        net[0].weight.lr_mult = 0.5
        net[1].bias.wd_mult = 0.0
        trainer = gluon.Trainer(net.collect_params(), optimizer)
        rng = np.random.RandomState(0)
        for _ in range(12):
            x = mx.nd.array(rng.randn(4, 5), dtype=dtype)
            with autograd.record():
                loss = (net(x) ** 2).sum()
            loss.backward()
            trainer.step(4)
        return [p.data().asnumpy() for p in net.collect_params().values()]

    def options():
        return dict(learning_rate=0.01, wd=0.02, clip_gradient=0.5,
                    lr_scheduler=mx.lr_scheduler.FactorScheduler(step=3, factor=0.7))
    ours = train(SparseAdam(**options()))
    theirs = train(mx.optimizer.Adam(**options()))
    assert len(fused) == 12, "the dense weights were not updated in one call a step"
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)


def test_multi_update_operator_checks_its_arguments():
    from gluon_sparse import _native
    _native.load_ops()
    op = mx.nd.gluon_sparse_adam_multi_update
    w, g, m, v = (mx.nd.ones((3, 2)) for _ in range(4))
    cases = [
        (dict(num_weights=1, lrs="0.1,0.2", wds="0"), "lrs holds 2 values"),
        (dict(num_weights=1, lrs="0.1", wds="x"), "is not a float32 number"),
        (dict(num_weights=1, lrs="0.1"), "num_weights, lrs and wds are required"),
        (dict(num_weights=1, lrs="0.1", wds="0", momentum=0.9), "unknown parameter 'momentum'"),
    ]
    for kwargs, expected in cases:
        with pytest.raises(mx.base.MXNetError, match=expected):
            op(w, g, m, v, out=[w], **kwargs)
            w.wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="var of weight 0 has shape"):
        op(w, g, m, mx.nd.ones((2, 3)), out=[w], num_weights=1, lrs="0.1", wds="0")
    with pytest.raises(mx.base.MXNetError, match="every tensor must share one dtype"):
        op(w, g.astype("float64"), m, v, out=[w], num_weights=1, lrs="0.1", wds="0")
    with pytest.raises(mx.base.MXNetError, match="must be dense"):
        op(w, g.tostype("row_sparse"), m, v, out=[w], num_weights=1, lrs="0.1", wds="0")
    with pytest.raises(mx.base.MXNetError, match="in place"):
        op(w, g, m, v, out=[mx.nd.zeros((3, 2))], num_weights=1, lrs="0.1", wds="0")
        mx.nd.waitall()
    np.testing.assert_array_equal(w.asnumpy(), 1)  # nothing was written


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("clip", [None, 0.3])
@pytest.mark.parametrize("parallel", [False, True])
def test_multi_update_operator_is_bitwise_adam_update(dtype, clip, parallel):
    """From zero state over several steps (where the variance term's rounding
    shows), shapes of one element to several blocks, serial and on two threads."""
    from gluon_sparse import _native
    _native.load_ops()
    if parallel:
        _native._set_parallelism(1, 2)
    try:
        rng = np.random.default_rng(5)
        shapes = [(1,), (7,), (3, 5), (9000,), (70, 130)]
        ours = [[mx.nd.array(rng.standard_normal(s), dtype=dtype)] + [mx.nd.zeros(s, dtype=dtype)
                                                                       for _ in range(3)]
                for s in shapes]
        theirs = [[x.copy() for x in t] for t in ours]
        wds = ["0.0", "0.0001", "0.01", "0.0", "0.5"]
        kwargs = {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "rescale_grad": 0.125}
        if clip:
            kwargs["clip_gradient"] = clip
        for step in range(1, 5):
            lrs = [str(0.001 * step * (i + 1) / 3) for i in range(len(shapes))]
            for a, b in zip(ours, theirs):
                a[1][:] = b[1][:] = mx.nd.array(rng.standard_normal(a[0].shape), dtype=dtype)
            mx.nd.gluon_sparse_adam_multi_update(*[x for t in ours for x in t],
                                                 out=[t[0] for t in ours], num_weights=len(ours),
                                                 lrs=",".join(lrs), wds=",".join(wds), **kwargs)
            for t, lr, wd in zip(theirs, lrs, wds):
                mx.nd.adam_update(t[0], t[1], t[2], t[3], out=t[0], lr=float(lr), wd=float(wd),
                                  **kwargs)
            for a, b in zip(ours, theirs):
                for x, y in zip(a, b):
                    np.testing.assert_array_equal(x.asnumpy(), y.asnumpy())
    finally:
        _native._set_parallelism(0, 0)
