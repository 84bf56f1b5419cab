"""Shared checks for the Adam variants' tests (test_optimizer_adamax/_nadam/_adamw).

Every check trains three copies of one small net on the same batches: one with
the optimizer under test deferred, one eager, and one with the reference
(MXNet's own optimizer, given the *dense* gradient: its standard update). The
batches touch every row but a few at step 1, then a small set of rows only,
except row 0, which comes back at the last step: most rows are absent for
long gaps after they moved and some are never touched.
"""
import copy

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from gluon_sparse.distributed.split import split_and_load_batch
from gluon_sparse.nn import FullyConnectedSparse

ROWS, UNITS = 64, 3
NEVER = np.arange(ROWS - 4, ROWS)  # rows no batch reads
BUSY = np.arange(1, 9)             # rows read at every step after the first


def schedule(base_lr=0.01):
    """An lr that changes every few steps (exercises per-step records)."""
    return mx.lr_scheduler.FactorScheduler(step=3, factor=0.8, base_lr=base_lr)


def dense_reference(cls):
    """``cls`` (an MXNet optimizer class) fed the dense form of every gradient."""
    class DenseGradient(cls):
        def update(self, index, weight, grad, state):
            if grad.stype != "default":
                grad = grad.tostype("default")
            super().update(index, weight, grad, state)

        def update_multi_precision(self, index, weight, grad, state):
            if grad.stype != "default":
                grad = grad.tostype("default")
            super().update_multi_precision(index, weight, grad, state)

    DenseGradient.__name__ = "Dense" + cls.__name__
    return DenseGradient


def make_net(dtype="float32", seed=0, zero_rows=()):
    """A FullyConnectedSparse layer (row_sparse weight gradient, dense bias gradient)."""
    mx.random.seed(seed)
    net = FullyConnectedSparse(UNITS, activation="tanh", in_units=ROWS, dtype=dtype)
    net.initialize(mx.init.Uniform(0.5))
    if len(zero_rows):  # rows of +0 weights, the first of -0
        w = net.weight.data().asnumpy()
        w[np.asarray(zero_rows)] = 0.0
        w[zero_rows[0]] = -0.0
        net.weight.set_data(mx.nd.array(w, dtype=dtype))
    return net


def batches(num, dtype="float32", seed=1, samples=1):
    """CSR batches: all rows but NEVER at step 1, then BUSY rows, row 0 again at the end."""
    rng = np.random.default_rng(seed)
    out = []
    for step in range(1, num + 1):
        parts = []
        for _ in range(samples):
            if step == 1:
                rows = np.setdiff1d(np.arange(ROWS), NEVER)
            elif step == num:
                rows = np.array([0, 2])
            else:
                rows = np.sort(rng.choice(BUSY, 3, replace=False))
            parts.append(rows.astype(np.int64))
        indices = np.concatenate(parts)
        indptr = np.concatenate([[0], np.cumsum([len(p) for p in parts])])
        x = mx.nd.sparse.csr_matrix(
            (rng.uniform(0.5, 1.5, len(indices)).astype(dtype), indices, indptr),
            shape=(samples, ROWS), dtype=dtype)
        out.append((x, mx.nd.array(rng.uniform(-1, 1, (samples, UNITS)), dtype=dtype)))
    return out


def train(net, trainer, data, batch_size=1):
    """Steps of a squared loss; returns the outputs of every step (numpy)."""
    outputs = []
    for x, y in data:
        with autograd.record():
            out = net(x)
            loss = ((out - y) ** 2).sum()
        loss.backward()
        trainer.step(batch_size)
        outputs.append(out.asnumpy())
    return outputs


def triple(optimizer, reference, kwargs, dtype="float32", zero_rows=()):
    """Nets and Trainers: (deferred, eager, reference) with the same initial weights."""
    nets = [make_net(dtype, zero_rows=zero_rows) for _ in range(3)]
    # Each optimizer its own copy: lr schedulers are stateful.
    opts = [optimizer(deferred=True, **copy.deepcopy(kwargs)),
            optimizer(deferred=False, **copy.deepcopy(kwargs)),
            reference(**copy.deepcopy(kwargs))]
    return nets, [gluon.Trainer(n.collect_params(), o) for n, o in zip(nets, opts)]


def train_triple(optimizer, reference, kwargs, steps, zero_rows=()):
    """Train :func:`triple` on ``steps`` batches; each net's weights and states."""
    nets, trainers = triple(optimizer, reference, kwargs, zero_rows=zero_rows)
    data = batches(steps)
    for net, trainer in zip(nets, trainers):
        train(net, trainer, data)
    return [weights(n) + states(t) for n, t in zip(nets, trainers)]


def assert_all_same(got):
    """The deferred, eager and reference results are bitwise equal."""
    assert_same(got[0], got[1])
    assert_same(got[0], got[2])


def resume_from_files(optimizer, reference, kwargs, tmp_path, on_load=None):
    """Train 10 of 24 steps deferred, save, load into a fresh net and Trainer, train the rest.

    ``on_load(saved, loaded)``, if given, is called with the two Trainers right after the
    states are loaded. Returns the weights and states of the resumed run and of the
    uninterrupted reference run.
    """
    nets, trainers = triple(optimizer, reference, kwargs)
    data = batches(24)
    train(nets[0], trainers[0], data[:10])
    nets[0].save_parameters(str(tmp_path / "w.params"))
    trainers[0].save_states(str(tmp_path / "w.states"))
    net = make_net()
    net.load_parameters(str(tmp_path / "w.params"))
    trainer = gluon.Trainer(net.collect_params(), optimizer(deferred=True, **kwargs))
    trainer.load_states(str(tmp_path / "w.states"))
    if on_load is not None:
        on_load(trainers[0], trainer)
    train(net, trainer, data[10:])
    train(nets[2], trainers[2], data)
    return weights(net) + states(trainer), weights(nets[2]) + states(trainers[2])


def _sparse_index(trainer):
    """Index of the Trainer's parameter with a row_sparse gradient (the deferred one)."""
    found = [i for i, p in enumerate(trainer._params) if p._grad_stype == "row_sparse"]
    assert len(found) == 1, found
    return found[0]


def assert_deferred(trainer):
    """The row_sparse-gradient weight has a deferred state with rows still behind.

    Call before anything reads the weight (reads bring every row up to date).
    """
    state = trainer._updaters[0].states[_sparse_index(trainer)]
    assert type(state).__name__ == "DeferredRuleState", type(state)
    assert state.last_step.asnumpy().min() < state.step


def two_devices(optimizer, reference, kwargs, steps=12):
    """(deferred, eager, reference) trained on two CPU contexts, each a half batch.

    The Trainers sum the gradients across devices (kvstore 'local') and update
    each device's copy: a device's summed gradient holds rows only the other
    device read, which the deferred update catches up first.
    Returns each run's weights and biases on both devices.
    """
    contexts = [mx.cpu(0), mx.cpu(1)]
    nets = [make_net() for _ in range(3)]
    opts = [optimizer(deferred=True, **copy.deepcopy(kwargs)),
            optimizer(deferred=False, **copy.deepcopy(kwargs)), reference(**copy.deepcopy(kwargs))]
    trainers = []
    for net, opt in zip(nets, opts):
        net.collect_params().reset_ctx(contexts)
        trainers.append(gluon.Trainer(net.collect_params(), opt, kvstore="local",
                                      update_on_kvstore=False))
    data = batches(steps, samples=2)
    for net, trainer in zip(nets, trainers):
        for x, y in data:
            xs, ys = split_and_load_batch(x, y, contexts)
            with autograd.record():
                losses = [((net(xp) - yp) ** 2).sum() for xp, yp in zip(xs, ys)]
            autograd.backward(losses)
            trainer.step(1)
    assert_deferred(trainers[0])
    return [[a.asnumpy() for p in (n.weight, n.bias) for a in p.list_data()] for n in nets]


def weights(net):
    """The layer's weight and bias (reads go through the deferred catch-up)."""
    return [net.weight.data().asnumpy(), net.bias.data().asnumpy()]


def states(trainer):
    """Every parameter's optimizer state as numpy arrays, in MXNet's layout, in index order."""
    out = []
    for index in sorted(trainer._updaters[0].states):
        state = trainer._updaters[0].states[index]
        if isinstance(state, mx.nd.NDArray):
            state = [state]
        elif not isinstance(state, (tuple, list)):
            # A deferred state (DeferredRuleState): flush, then its arrays in MXNet's order.
            state.flush()
            state = state.states
        out += [s.asnumpy() for s in state]
    assert out, "no optimizer state yet"
    return out


def assert_same(got, want, rtol=0.0, atol=0.0):
    """Equal lists of arrays: bit for bit (rtol = atol = 0; signed zeros and NaNs
    included) or within tolerance (NaN equal to NaN)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if rtol == 0 and atol == 0:
            bits = np.dtype("u%d" % g.dtype.itemsize)
            np.testing.assert_array_equal(g.view(bits), w.view(bits))
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def set_row_sparse_grad(param, grad):
    """Give ``param`` (one device, row_sparse gradient) the gradient ``grad``, as a backward would.

    ``param.data()`` first brings deferred rows up to date, as the forward pass
    of a sparse block would for the rows of its batch.
    """
    param.data()
    grad.copyto(param.list_grad()[0])
    param.list_data()[0]._fresh_grad = True
