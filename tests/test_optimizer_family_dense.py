"""The family's dense weights in one operator call (``gluon_sparse_<rule>_multi_update``).

Every optimizer of the family, trained through gluon.Trainer on a dense network
(every weight fused into one call a step), against MXNet's own optimizer of the
same class and hyper-parameters, bitwise: weights and states, with learning-rate
schedules, lr_mult / wd_mult, weight decay, clipping and rescale_grad. A mixed
network (a row_sparse weight among the dense ones) checks that the fused and
the one-by-one updates of one call give what one-by-one updates give.
"""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from gluon_sparse import _native
from gluon_sparse.nn import FullyConnectedSparse
from gluon_sparse.optimizer import _family, deferred

# (family name, hyper-parameters): every rule, with the options that change its maths.
CONFIGS = [
    ("sparseadagrad", {"learning_rate": 0.05}),
    ("sparseadamax", {"learning_rate": 0.02}),
    ("sparseftrl", {"learning_rate": 0.1, "lamda1": 0.01}),
    ("sparsenadam", {"learning_rate": 0.02}),
    ("sparsenag", {"learning_rate": 0.05, "momentum": 0.9}),
    ("sparsermsprop", {"learning_rate": 0.01}),
    ("sparsermsprop", {"learning_rate": 0.01, "centered": True, "clip_weights": 0.6}),
    ("sparsesgd", {"learning_rate": 0.05, "momentum": 0.9}),
    ("sparsesgd", {"learning_rate": 0.05}),
]
IDS = ["%s-%d" % (name, i) for i, (name, _) in enumerate(CONFIGS)]
# Options MXNet's own class lacks: compared with the one-by-one update only
# (SparseAdamax's epsilon: MXNet's AdaMax NDArray operations dividing by u + epsilon).
# SparseAdam's decoupled_wd (AdamW): the family's adamw rule, MXNet's adamw_update.
MORE_CONFIGS = CONFIGS + [("sparseadamax", {"learning_rate": 0.02, "epsilon": 1e-3}),
                          ("sparseadam", {"learning_rate": 0.02, "decoupled_wd": True})]
MORE_IDS = IDS + ["sparseadamax-epsilon", "sparseadam-decoupled_wd"]


@pytest.fixture
def fused_calls(monkeypatch):
    """Count the calls of the rules' multi-update (vs MXNet's own update)."""
    calls = []
    real = _family.fused_dense_update

    def counting(optimizer, rule, group):
        calls.append(len(group))
        return real(optimizer, rule, group)
    monkeypatch.setattr(_family, "fused_dense_update", counting)
    return calls


def _dense_net():
    mx.random.seed(3)
    # One prefix for every net: Trainer orders parameters by name, and Nadam's
    # momentum schedule (shared by the weights) by that order.
    net = gluon.nn.HybridSequential(prefix="dense_net_")
    with net.name_scope():
        net.add(gluon.nn.Dense(6, activation="tanh", in_units=5), gluon.nn.Dense(3, in_units=6),
                gluon.nn.Dense(1, use_bias=False, in_units=3))
    net.initialize(mx.init.Xavier())
    net[0].weight.lr_mult = 0.5
    net[1].bias.wd_mult = 0.0
    return net


def _train(net, optimizer, steps=12, batch=4, x_of=None, dtype="float32"):
    trainer = gluon.Trainer(net.collect_params(), optimizer)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        x = mx.nd.array(rng.standard_normal((batch, 5)), dtype=dtype)
        if x_of is not None:
            x = x_of(rng)
        y = mx.nd.array(rng.standard_normal((batch, 1)), dtype=dtype)
        with autograd.record():
            loss = ((net(x) - y) ** 2).sum()
        loss.backward()
        trainer.step(batch)  # rescale_grad = 1 / batch
    return trainer


def _states(trainer):
    out = []
    for index in sorted(trainer._updaters[0].states):
        state = trainer._updaters[0].states[index]
        arrays = state.states if isinstance(state, deferred.RegisteredState) else state
        out += [s.asnumpy() for s in _family._as_list(arrays)]
    return out


def _assert_same(nets, trainers):
    for (name, a), b in zip(nets[0].collect_params().items(), nets[1].collect_params().values()):
        np.testing.assert_array_equal(a.data().asnumpy(), b.data().asnumpy(), err_msg=name)
    got, want = _states(trainers[0]), _states(trainers[1])
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(a, b, err_msg="state array %d" % i)


@pytest.mark.parametrize("wd, clip", [(0.0, None), (0.01, 0.3)])
@pytest.mark.parametrize("name, kwargs", CONFIGS, ids=IDS)
def test_fused_dense_update_equals_mxnets_own(name, kwargs, wd, clip, fused_calls):
    def create(optimizer_name):
        schedule = mx.lr_scheduler.FactorScheduler(step=4, factor=0.7,
                                                   base_lr=kwargs["learning_rate"])
        return mx.optimizer.create(optimizer_name, wd=wd, clip_gradient=clip,
                                   lr_scheduler=schedule, **kwargs)

    nets = [_dense_net(), _dense_net()]
    trainers = [_train(nets[0], create(name)), _train(nets[1], create(name[len("sparse"):]))]
    _assert_same(nets, trainers)
    assert fused_calls == [5] * 12  # every weight of every step in one call


@pytest.mark.parametrize("name, kwargs", MORE_CONFIGS, ids=MORE_IDS)
def test_fused_and_single_updates_in_one_call(name, kwargs, fused_calls):
    """A row_sparse weight (eager or deferred) among dense ones: aggregated as one-by-one."""
    def mixed_net():
        mx.random.seed(4)
        net = gluon.nn.HybridSequential(prefix="mixed_net_")
        with net.name_scope():
            net.add(FullyConnectedSparse(6, activation="tanh", in_units=40),
                    gluon.nn.Dense(1, in_units=6))
        net.initialize(mx.init.Xavier())
        return net

    def x_of(rng):
        ids = np.sort(rng.choice(40, 12, replace=False)).astype(np.int64)
        return mx.nd.sparse.csr_matrix((rng.random(12).astype("f"), ids, [0, 3, 6, 9, 12]),
                                       shape=(4, 40))

    for deferred in (False, True):
        nets = [mixed_net(), mixed_net()]
        one_by_one = mx.optimizer.create(name, wd=0.01, deferred=deferred, **kwargs)
        one_by_one.aggregate_num = 0
        trainers = [_train(nets[0], mx.optimizer.create(name, wd=0.01, deferred=deferred,
                                                        **kwargs), x_of=x_of),
                    _train(nets[1], one_by_one, x_of=x_of)]
        for trainer in trainers:
            trainer._optimizer.flush()
        _assert_same(nets, trainers)
    assert fused_calls == [3] * 24  # the dense weights; the sparse one alone


def test_float64_keeps_mxnets_update(fused_calls):
    nets = [_dense_net(), _dense_net()]
    for net in nets:
        net.cast("float64")
    trainers = [_train(nets[0], mx.optimizer.create("sparsenadam"), dtype="float64"),
                _train(nets[1], mx.optimizer.create("nadam"), dtype="float64")]
    _assert_same(nets, trainers)
    assert not fused_calls


def test_float16_master_copies_keep_mxnets_update(fused_calls):
    """multi_precision float16 weights in an aggregated call: MXNet's update, as one by one."""
    rng = np.random.default_rng(2)
    initial = [rng.standard_normal((4, 3)) for _ in range(3)]
    weights = [[mx.nd.array(w, dtype="float16") for w in initial] for _ in range(2)]
    optimizers = [mx.optimizer.create("sparsermsprop", multi_precision=True, learning_rate=0.1),
                  mx.optimizer.create("rmsprop", multi_precision=True, learning_rate=0.1)]
    states = [[opt.create_state_multi_precision(i, w) for i, w in enumerate(ws)]
              for opt, ws in zip(optimizers, weights)]
    for _ in range(3):
        grads = [mx.nd.array(rng.standard_normal((4, 3)), dtype="float16") for _ in range(3)]
        optimizers[0].update_multi_precision([0, 1, 2], weights[0], grads, states[0])
        for i in range(3):
            optimizers[1].update_multi_precision(i, weights[1][i], grads[i], states[1][i])
    for a, b in zip(*weights):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())
    assert not fused_calls


def test_multi_update_operator_checks_its_arguments():
    _native.load_ops()
    op = mx.nd.gluon_sparse_sgd_mom_multi_update
    w, g, mom = (mx.nd.ones((3, 2)) for _ in range(3))
    cases = [
        (dict(num_weights=1, lr="0.1,0.2"), "lr holds 2 values"),
        (dict(num_weights=1, lr="x"), "lr"),
        (dict(num_weights=1), "parameter lr \\(one value per weight\\) is required"),
        (dict(num_weights=1, lr="0.1", beta1=0.9), "unknown parameter 'beta1'"),
        (dict(num_weights=0, lr="0.1"), "num_weights"),
    ]
    for kwargs, expected in cases:
        with pytest.raises(mx.base.MXNetError, match=expected):
            op(w, g, mom, out=[w], **kwargs)
            w.wait_to_read()
    with pytest.raises(mx.base.MXNetError, match="mom of weight 0 has shape"):
        op(w, g, mx.nd.ones((2, 3)), out=[w], num_weights=1, lr="0.1")
    with pytest.raises(mx.base.MXNetError, match="every tensor must share one dtype"):
        op(w, g.astype("float64"), mom, out=[w], num_weights=1, lr="0.1")
    with pytest.raises(mx.base.MXNetError, match="must be dense"):
        op(w, g.tostype("row_sparse"), mom, out=[w], num_weights=1, lr="0.1")
    with pytest.raises(mx.base.MXNetError, match="in place"):
        op(w, g, mom, out=[mx.nd.zeros((3, 2))], num_weights=1, lr="0.1")
        mx.nd.waitall()
    np.testing.assert_array_equal(w.asnumpy(), 1)  # nothing was written


def test_multi_update_equals_eager_update_per_weight():
    """N weights in one call == the eager operator on each with every row in its gradient."""
    _native.load_ops()
    rng = np.random.default_rng(5)
    shapes = [(7, 3), (5,), (4100, 2)]  # the last spans blocks of 4096 elements
    lrs, wds = [0.1, 0.05, 0.2], [0.0, 0.01, 0.003]

    def arrays():
        rng_local = np.random.default_rng(9)
        return [[mx.nd.array(rng_local.standard_normal(s)) for _ in range(3)] for s in shapes]

    fused, single = arrays(), arrays()
    inputs = [a for triple in fused for a in triple]
    mx.nd.gluon_sparse_sgd_mom_multi_update(
        *inputs, out=[t[0] for t in fused], num_weights=3, lr=",".join(map(str, lrs)),
        wd=",".join(map(str, wds)), momentum=0.9, rescale_grad=0.5, clip_gradient="0.7,-1,0.7")
    for (w, g, mom), lr, wd, clip in zip(single, lrs, wds, [0.7, -1, 0.7]):
        rows = w.shape[0]
        flat = (rows, -1) if w.ndim > 1 else (rows, 1)
        w2, g2, m2 = w.reshape(flat), g.reshape(flat), mom.reshape(flat)
        grad = mx.nd.sparse.row_sparse_array((g2.asnumpy(), np.arange(rows)), shape=w2.shape)
        mx.nd.gluon_sparse_sgd_mom_update(w2, grad, m2, out=w2, lr=lr, wd=wd, momentum=0.9,
                                          rescale_grad=0.5, clip_gradient=clip)
    for got, want in zip(fused, single):
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())
    del rng
