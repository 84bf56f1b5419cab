"""Every deferred optimizer of the family on every Gluon path that reads or writes a weight.

Each test runs, for every configuration in ``OPTIMIZERS``, the same sequence
with the optimizer's ``deferred=True`` and with its eager form (the reference)
and compares weights, and the optimizer states where reachable, bitwise: reads outside a forward pass see caught-up
rows, writes (set_data, load_parameters, force_reinit, kvstore pull,
load_states, a replaced Trainer) apply as if every row were up to date, nets
pickle. The batches leave most rows absent for many steps after they moved,
so a stale row shows.
"""
import gc
import logging
import pickle

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from gluon_sparse import _native
from gluon_sparse.nn import FactorizationMachine, FullyConnectedSparse
from gluon_sparse.optimizer import deferred
from gluon_sparse.optimizer._family import _as_list

IN_UNITS = 300
KINDS = ["fc", "fm"]

# One line per optimizer configuration of the family, sorted by name: every
# branch that adds an optimizer adds its line here.
OPTIMIZERS = [
    ("sparseadagrad", {"learning_rate": 0.05}),
    ("sparseadam", {"decoupled_wd": True, "learning_rate": 0.05}),
    ("sparseadam", {"learning_rate": 0.05}),
    ("sparseadamax", {"epsilon": 1e-8, "learning_rate": 0.05}),
    ("sparseftrl", {"learning_rate": 0.05}),
    ("sparsenadam", {"learning_rate": 0.05}),
    ("sparsenag", {"learning_rate": 0.05, "momentum": 0.9}),
    ("sparsermsprop", {"learning_rate": 0.01}),
    ("sparsermsprop", {"learning_rate": 0.05, "centered": True, "clip_weights": 0.6}),
    ("sparsesgd", {"learning_rate": 0.05, "momentum": 0.9}),
]


@pytest.fixture(params=OPTIMIZERS, ids=[name for name, _ in OPTIMIZERS])
def optimizer(request):
    """An optimizer configuration ``(name, kwargs)`` of the family."""
    return request.param


def _net(kind, hybrid, seed=0):
    mx.random.seed(seed)
    if kind == "fc":
        net = gluon.nn.HybridSequential()
        net.add(FullyConnectedSparse(5, activation="tanh", in_units=IN_UNITS),
                gluon.nn.Dense(1, in_units=5))
    else:
        net = FactorizationMachine(3, in_units=IN_UNITS)
    net.initialize(mx.init.Uniform(0.5))
    if hybrid:
        net.hybridize()
    return net


def _batches(num, seed, features):
    rng = np.random.default_rng(seed)
    features = np.asarray(features)
    out = []
    for _ in range(num):
        indices = np.concatenate([np.sort(rng.choice(features, 3, replace=False))
                                  for _ in range(4)]).astype(np.int64)
        x = mx.nd.sparse.csr_matrix((rng.random(len(indices)).astype("f"), indices,
                                     np.arange(0, len(indices) + 1, 3)), shape=(4, IN_UNITS))
        out.append((x, mx.nd.array(rng.random((4, 1)))))
    return out


def _schedule(seed=1):
    """A few steps over every feature, then many over a tenth of them: most rows
    moved (non-zero mean) and then stay absent for the rest of the run."""
    return (_batches(4, seed, np.arange(IN_UNITS))
            + _batches(25, seed + 1, np.arange(IN_UNITS // 10)))


def _train(net, trainer, batches):
    losses = []
    for x, y in batches:
        with autograd.record():
            out = net(x)
            loss = ((out.sum(axis=1, keepdims=True) - y) ** 2).mean()
        loss.backward()
        trainer.step(1)
        losses.append(loss.asnumpy())
    return losses


def _create(optimizer, wd, is_deferred):
    name, kwargs = optimizer
    return mx.optimizer.create(name, wd=wd, deferred=is_deferred, **kwargs)


def _trainer(net, is_deferred, wd, optimizer):
    return gluon.Trainer(net.collect_params(), _create(optimizer, wd, is_deferred))


def _pair(kind, hybrid, wd, optimizer):
    nets = [_net(kind, hybrid), _net(kind, hybrid)]
    return nets, [_trainer(nets[0], True, wd, optimizer),
                  _trainer(nets[1], False, wd, optimizer)]


def _train_both(nets, trainers, batches):
    losses = [_train(net, trainer, batches) for net, trainer in zip(nets, trainers)]
    for step, (a, b) in enumerate(zip(*losses)):
        np.testing.assert_array_equal(a, b, err_msg="loss of step %d" % step)


def _raw(param):
    """The weight array as stored, read without the library's hooks."""
    return param._data[0].asnumpy()


def _assert_weights_equal(net_a, net_b, read=_raw):
    for (name, pa), pb in zip(net_a.collect_params().items(), net_b.collect_params().values()):
        np.testing.assert_array_equal(read(pa), read(pb), err_msg=name)


def _mean_var(trainer, index):
    """The optimizer state arrays of parameter ``index`` (deferred or MXNet's layout)."""
    state = trainer._updaters[0].states[index]
    if isinstance(state, deferred.DeferredAdamState):
        arrays = [state.mean, state.var]
    elif isinstance(state, deferred.RegisteredState):
        arrays = state.states
    else:
        arrays = _as_list(state)
    return [a.asnumpy() for a in arrays]


def _assert_all_equal(nets, trainers):
    """Every weight and every optimizer state of the deferred run equal the eager run's."""
    deferred.flush(trainers[0])
    _assert_weights_equal(*nets)
    for index in trainers[1]._updaters[0].states:
        got, want = _mean_var(trainers[0], index), _mean_var(trainers[1], index)
        assert len(got) == len(want)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b, err_msg="state of parameter %d" % index)


def per_optimizer(argnames, cases):
    """Parametrize ``optimizer`` with ``argnames``: each optimizer runs every other case of
    ``cases``, alternately, so every case still runs for half of the optimizers. The
    read/write hooks are the same code for every optimizer; what differs is the states."""
    rows = [(opt, *(case if isinstance(case, tuple) else (case,)))
            for i, opt in enumerate(OPTIMIZERS) for case in cases[i % len(cases)::2] or cases]
    ids = ["-".join(str(v) for v in (row[0][0],) + row[1:]) for row in rows]
    return pytest.mark.parametrize("optimizer, " + argnames, rows, ids=ids)


GRID = per_optimizer("kind, hybrid, wd", [("fc", False, 0.0), ("fc", True, 0.01),
                                          ("fm", True, 0.0), ("fm", False, 0.01)])


def _sparse_params(net):
    return [p for p in net.collect_params().values() if p._grad_stype == "row_sparse"]


# --------------------------------------------------------------------- reads
@GRID
def test_data_and_list_data_read_caught_up_rows(kind, hybrid, wd, optimizer):
    nets, trainers = _pair(kind, hybrid, wd, optimizer)
    _train_both(nets, trainers, _schedule())
    assert deferred.state_bytes(trainers[0]) > 0
    _assert_weights_equal(*nets, read=lambda p: p.data().asnumpy())
    _assert_weights_equal(*nets, read=lambda p: p.list_data()[0].asnumpy())
    # The read brought the optimizer state up to date too.
    for index in trainers[1]._updaters[0].states:
        for got, want in zip(_mean_var(trainers[0], index), _mean_var(trainers[1], index)):
            np.testing.assert_array_equal(got, want)


@per_optimizer("kind", KINDS)
def test_pickled_net_holds_caught_up_weights(kind, optimizer):
    nets, trainers = _pair(kind, False, 0.01, optimizer)
    _train_both(nets, trainers, _schedule())
    copy = pickle.loads(pickle.dumps(nets[0]))
    _assert_weights_equal(copy, nets[1])
    params = pickle.loads(pickle.dumps(nets[0].collect_params()))
    for pa, pb in zip(params.values(), nets[1].collect_params().values()):
        np.testing.assert_array_equal(_raw(pa), _raw(pb))


def test_reads_inside_forward_and_step_do_not_flush(monkeypatch, optimizer):
    """The training step's own reads pay no full catch-up (the forward's op does its rows)."""
    net = _net("fc", True)
    trainer = _trainer(net, True, 0.01, optimizer)
    _train(net, trainer, _schedule()[:3])
    flushes = []
    cls = type(deferred._states_of(trainer)[0])
    original = cls.flush
    monkeypatch.setattr(cls, "flush", lambda self: flushes.append(1) or original(self))
    _train(net, trainer, _schedule()[5:10])
    assert not flushes
    net[0].weight.data()  # outside: one flush, then nothing pending
    net[0].weight.data()
    assert len(flushes) == 2
    # The first read caught every row up; the second found nothing pending.
    assert all(s._synced_step == s.step for s in deferred._states_of(trainer))


# -------------------------------------------------------------------- writes
def _train_past_a_checkpoint(nets, trainers, checkpoint):
    """Train both runs on the schedule, saving the eager net at step 12 to ``checkpoint``;
    return the batches."""
    batches = _schedule()
    _train_both(nets, trainers, batches[:12])
    nets[1].save_parameters(checkpoint)
    _train_both(nets, trainers, batches[12:])
    return batches


@GRID
def test_load_parameters_into_live_net(kind, hybrid, wd, tmp_path, optimizer):
    nets, trainers = _pair(kind, hybrid, wd, optimizer)
    checkpoint = str(tmp_path / "best.params")
    _train_past_a_checkpoint(nets, trainers, checkpoint)
    for net in nets:
        net.load_parameters(checkpoint)  # "restore the best checkpoint"
    _train_both(nets, trainers, _batches(15, 7, np.arange(IN_UNITS // 5)))
    _assert_all_equal(nets, trainers)


@GRID
def test_set_data_into_live_net(kind, hybrid, wd, optimizer):
    nets, trainers = _pair(kind, hybrid, wd, optimizer)
    _train_both(nets, trainers, _schedule())
    rng = np.random.default_rng(3)
    for pa, pb in zip(_sparse_params(nets[0]), _sparse_params(nets[1])):
        values = mx.nd.array(rng.standard_normal(pa.shape))
        pa.set_data(values)
        pb.set_data(values)
    _train_both(nets, trainers, _batches(15, 7, np.arange(IN_UNITS // 5)))
    _assert_all_equal(nets, trainers)


@per_optimizer("kind, hybrid", [("fc", True), ("fm", False)])
def test_frozen_weight_reads_and_writes_as_eager(kind, hybrid, tmp_path, optimizer):
    """Freezing (grad_req='null') replaces a parameter's arrays by detached copies:
    reads of the frozen weight, a checkpoint loaded into it, forward passes and the
    training after unfreezing all follow the eager run (they read stale rows, and
    the next forward replayed the missed steps onto the loaded checkpoint)."""
    nets, trainers = _pair(kind, hybrid, 0.01, optimizer)
    checkpoint = str(tmp_path / "early.params")
    batches = _train_past_a_checkpoint(nets, trainers, checkpoint)
    for net in nets:
        for param in _sparse_params(net):
            param.grad_req = "null"
    _assert_weights_equal(*nets, read=lambda p: p.data().asnumpy())
    for net in nets:
        net.load_parameters(checkpoint)
    x = batches[0][0]
    outputs = [net(x).asnumpy() for net in nets]
    np.testing.assert_array_equal(*outputs)
    _assert_weights_equal(*nets)
    for net in nets:
        for param in _sparse_params(net):
            param.grad_req = "write"
    _train_both(nets, trainers, _batches(10, 7, np.arange(IN_UNITS // 5)))
    _assert_all_equal(nets, trainers)


@per_optimizer("kind, hybrid, wd", [("fc", True, 0.01), ("fm", False, 0.0)])
def test_initialize_force_reinit(kind, hybrid, wd, optimizer):
    nets, trainers = _pair(kind, hybrid, wd, optimizer)
    _train_both(nets, trainers, _schedule())
    for net in nets:
        mx.random.seed(11)
        net.initialize(mx.init.Uniform(0.3), force_reinit=True)
    _train_both(nets, trainers, _batches(15, 7, np.arange(IN_UNITS // 5)))
    _assert_all_equal(nets, trainers)


@per_optimizer("kind, wd", [("fc", 0.01), ("fm", 0.0)])
def test_kvstore_pull_into_weights(kind, wd, optimizer):
    nets, trainers = _pair(kind, True, wd, optimizer)
    # NDArrays taken before training: a pull into them goes through no Parameter method.
    held = [_sparse_params(net)[0]._data[0] for net in nets]
    _train_both(nets, trainers, _schedule())
    kv = mx.kv.create("local")
    values = mx.nd.array(np.random.default_rng(5).standard_normal(held[0].shape))
    kv.init("w", values)
    for array in held:
        kv.pull("w", out=array)
    _train_both(nets, trainers, _batches(10, 7, np.arange(IN_UNITS // 5)))
    for array in held:
        kv.pushpull("w", values * 0.5, out=array)
    _train_both(nets, trainers, _batches(10, 8, np.arange(IN_UNITS // 5)))
    _assert_all_equal(nets, trainers)


@per_optimizer("kind, hybrid, wd", [("fc", True, 0.01), ("fm", True, 0.0)])
def test_load_states_into_live_trainer(kind, hybrid, wd, tmp_path, optimizer):
    nets, trainers = _pair(kind, hybrid, wd, optimizer)
    batches = _schedule()
    _train_both(nets, trainers, batches[:10])
    files = [str(tmp_path / ("%d.states" % i)) for i in range(2)]
    for trainer, path in zip(trainers, files):
        trainer.save_states(path)
    _train_both(nets, trainers, batches[10:])
    for trainer, path in zip(trainers, files):
        trainer.load_states(path)
    # Every row is up to date with the loaded mean and var, as the eager run's.
    _train_both(nets, trainers, _batches(15, 7, np.arange(IN_UNITS // 5)))
    _assert_all_equal(nets, trainers)


@per_optimizer("kind, wd", [("fc", 0.01), ("fm", 0.0)])
def test_replaced_trainer_leaves_weights_caught_up(kind, wd, optimizer):
    nets, trainers = _pair(kind, True, wd, optimizer)
    _train_both(nets, trainers, _schedule())
    del trainers
    gc.collect()
    # A new Trainer (fresh Adam state) on the same, live parameters.
    trainers = [_trainer(nets[0], True, wd, optimizer), _trainer(nets[1], False, wd, optimizer)]
    _train_both(nets, trainers, _batches(15, 7, np.arange(IN_UNITS // 5)))
    _assert_all_equal(nets, trainers)


@per_optimizer("kind, wd", [("fc", 0.01), ("fm", 0.0)])
def test_reads_inside_autograd_record_but_outside_a_forward(kind, wd, optimizer):
    # A user logging a weight's norm inside the record scope: the read flushes
    # (it is outside a Block call), and MXNet refuses in-place writes to a
    # graph's arrays while recording, unless the flush pauses recording.
    nets, trainers = _pair(kind, True, wd, optimizer)
    _train_both(nets, trainers, _schedule()[:10])
    norms = []
    for net, trainer in zip(nets, trainers):
        weight = _sparse_params(net)[0]
        for x, y in _schedule(seed=5)[10:20]:
            with autograd.record():
                out = net(x)
                norms.append(weight.data().norm().asnumpy())
                loss = ((out.sum(axis=1, keepdims=True) - y) ** 2).mean()
            loss.backward()
            trainer.step(1)
    half = len(norms) // 2
    np.testing.assert_array_equal(np.array(norms[:half]), np.array(norms[half:]))
    _assert_all_equal(nets, trainers)


def test_trainer_dropped_inside_autograd_record_leaves_no_stale_registration(optimizer):
    # A deferred state may be dropped inside a record scope (here: a new Trainer
    # takes the parameters over, so the old one, and its states, are freed there):
    # its finalizer flushes (recording paused) and unregisters the weight, so the
    # next steps neither fail nor replay from a freed state.
    gc.collect()
    nets, trainers = _pair("fc", True, 0.01, optimizer)
    _train_both(nets, trainers, _schedule()[:10])
    old = [id(trainer) for trainer in trainers]
    batches = _schedule(seed=9)[:6]
    with autograd.record():
        trainers = [_trainer(nets[0], True, 0.01, optimizer),
                    _trainer(nets[1], False, 0.01, optimizer)]
        gc.collect()
        assert not {id(o) for o in gc.get_objects() if isinstance(o, gluon.Trainer)} & set(old)
        outs = [net(batches[0][0]) for net in nets]
    mx.nd.waitall()
    # The old state let its weights go: none of the net's weights is registered (the
    # new trainer registers them at its first update). Counted by weight, not in all,
    # so that states of earlier tests freed meanwhile do not count.
    from gluon_sparse.optimizer import _registry
    for param in nets[0].collect_params().values():
        assert _registry.library().gluon_sparse_deferred_step(
            _registry.data_pointer(param.data())) == -1, param.name
    np.testing.assert_array_equal(outs[0].asnumpy(), outs[1].asnumpy())
    _train_both(nets, trainers, batches[1:])
    _assert_all_equal(nets, trainers)


def test_save_parameters_and_states_mid_run_change_nothing(tmp_path, optimizer):
    # A regression guard (these paths were right before the hooks): the saves'
    # flushes leave the run on the eager run's trajectory.
    nets, trainers = _pair("fc", True, 0.01, optimizer)
    batches = _schedule()
    _train_both(nets, trainers, batches[:8])
    nets[0].save_parameters(str(tmp_path / "net.params"))
    nets[0].export(str(tmp_path / "net"))
    trainers[0].save_states(str(tmp_path / "net.states"))
    _train_both(nets, trainers, batches[8:])
    _assert_all_equal(nets, trainers)
    loaded = _net("fc", False, seed=5)
    loaded.load_parameters(str(tmp_path / "net.params"))
    assert not np.array_equal(_raw(loaded[0].weight), _raw(nets[1][0].weight))  # older weights


@pytest.mark.parametrize("device", [0, 1])
def test_reset_ctx_keeps_training_exact(optimizer, device):
    """reset_ctx replaces the arrays; the state follows them. On another device id MXNet
    counts the weight's updates from 1 again (the deferred state once refused to go on)."""
    nets, trainers = _pair("fc", False, 0.01, optimizer)
    _train_both(nets, trainers, _schedule())
    for net in nets:
        net.collect_params().reset_ctx(mx.cpu(device))
    batches = [(x.as_in_context(mx.cpu(device)), y.as_in_context(mx.cpu(device)))
               for x, y in _batches(10, 7, np.arange(IN_UNITS // 5))]
    _train_both(nets, trainers, batches)
    _assert_all_equal(nets, trainers)


def test_two_devices_read_and_restore(tmp_path, optimizer):
    """Every device's copy: list_data() caught up, load_parameters exact on both."""
    from gluon_sparse.distributed.split import split_and_load_batch

    contexts = [mx.cpu(0), mx.cpu(1)]
    nets = [_net("fc", True), _net("fc", True)]
    trainers = []
    for net, is_deferred in zip(nets, [True, False]):
        net.collect_params().reset_ctx(contexts)
        trainers.append(gluon.Trainer(net.collect_params(),
                                      _create(optimizer, 0.01, is_deferred),
                                      kvstore="local", update_on_kvstore=False))

    def train(batches):
        for net, trainer in zip(nets, trainers):
            for x, y in batches:
                xs, ys = split_and_load_batch(x, y, contexts)
                with autograd.record():
                    losses = [((net(xp).sum(axis=1, keepdims=True) - yp) ** 2).mean()
                              for xp, yp in zip(xs, ys)]
                autograd.backward(losses)
                trainer.step(1)

    def assert_equal():
        for pa, pb in zip(nets[0].collect_params().values(), nets[1].collect_params().values()):
            for a, b in zip(pa.list_data(), pb.list_data()):
                np.testing.assert_array_equal(a.asnumpy(), b.asnumpy(), err_msg=pa.name)

    batches = _schedule()
    train(batches[:12])
    checkpoint = str(tmp_path / "two.params")
    nets[1].save_parameters(checkpoint)
    train(batches[12:])
    assert_equal()
    for net in nets:
        net.load_parameters(checkpoint, ctx=contexts)
    train(_batches(10, 7, np.arange(IN_UNITS // 5)))
    assert_equal()


@pytest.mark.parametrize("devices", [1, 2])
def test_a_weight_only_other_operators_read_is_refused_on_any_number_of_devices(devices,
                                                                               optimizer):
    """MXNet's Embedding reads a deferred weight without catching rows up: its gradient
    rows were computed from stale values, and the update refuses them, on one device
    and on several (where rows behind are otherwise caught up as another device's
    product operator read them) alike, rather than train on silently wrong."""
    contexts = [mx.cpu(i) for i in range(devices)]
    mx.random.seed(0)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Embedding(40, 4, sparse_grad=True), gluon.nn.Flatten(), gluon.nn.Dense(1))
    net.initialize(mx.init.Uniform(0.5), ctx=contexts)
    trainer = gluon.Trainer(net.collect_params(), _create(optimizer, 0.01, True),
                            kvstore="local", update_on_kvstore=False)
    rng = np.random.default_rng(0)
    with pytest.raises(mx.MXNetError, match="without bringing it up to date"):
        for step in range(6):
            ids = rng.choice(40 if step < 2 else 4, (4 * devices, 2)).astype("f")
            with autograd.record():
                losses = [(net(mx.nd.array(ids[4 * k:4 * k + 4], ctx=c)) ** 2).mean()
                          for k, c in enumerate(contexts)]
            autograd.backward(losses)
            trainer.step(1)
            mx.nd.waitall()


@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_replay_simd_builds_equal_eager(wd, optimizer):
    """The replay's full steps on the baseline and the AVX2 build (host_simd.h), 165
    columns (blocks of 128 and 32 and a tail of 5), both bitwise the eager run."""
    def run(is_deferred, simd_path):
        _native._force_simd_path(simd_path)
        mx.random.seed(3)
        net = gluon.nn.HybridSequential()
        net.add(FullyConnectedSparse(165, activation="tanh", in_units=IN_UNITS),
                gluon.nn.Dense(1, in_units=165))
        net.initialize(mx.init.Uniform(0.5))
        trainer = _trainer(net, is_deferred, wd, optimizer)
        _train(net, trainer, _schedule())
        deferred.flush(trainer)
        return [p.data().asnumpy() for p in net.collect_params().values()], trainer

    try:
        want, eager = run(False, -1)
        for path in (0, 1):
            got, trainer = run(True, path)
            for a, b in zip(got, want):
                np.testing.assert_array_equal(a, b, err_msg="SIMD build %d" % path)
            for index in eager._updaters[0].states:
                for a, b in zip(_mean_var(trainer, index), _mean_var(eager, index)):
                    np.testing.assert_array_equal(a, b, err_msg="state %d, build %d" % (index,
                                                                                        path))
    finally:
        _native._force_simd_path(-1)


@pytest.mark.parametrize("name", ["sparseadam", "sparsesgd"])
def test_a_multi_precision_float16_weight_is_eager_and_the_warning_says_why(name, caplog):
    """The update works on a float32 master copy that no forward pass reads: eager, and the
    warning names that (it once blamed a kvstore, with no kvstore in use)."""
    param = gluon.Parameter("w16", shape=(20, 4), dtype="float16", grad_stype="row_sparse")
    param.initialize(mx.init.Uniform(0.5))
    extra = {"momentum": 0.9} if name == "sparsesgd" else {}
    trainer = gluon.Trainer([param], name, dict(learning_rate=0.1, deferred=True,
                                                multi_precision=True, **extra), kvstore=None)
    grad = mx.nd.sparse.row_sparse_array((np.ones((2, 4), np.float16), np.array([1, 3])),
                                         shape=(20, 4), dtype="float16")
    with caplog.at_level(logging.WARNING, logger="gluon_sparse"):
        trainer._updaters[0](0, grad, param.data())
    (message,) = [r.getMessage() for r in caplog.records if "w16" in r.getMessage()]
    assert "float32 master copy" in message and "kvstore" not in message


@pytest.mark.parametrize("optimizer, options", [
    ("sparseadam", {"learning_rate": 0.05, "wd": 0.01}),
    ("sparsesgd", {"learning_rate": 0.05, "wd": 0.01, "momentum": 0.9})])
def test_a_second_trainer_while_the_first_lives_on_two_devices(optimizer, options):
    """Trainer._init_params broadcasts the first device's weight over the others'
    (KVStore.broadcast): with the first Trainer still holding rows behind, the second
    device's copy lost some rows' steps and got others twice."""
    contexts = [mx.cpu(0), mx.cpu(1)]

    def batch(rng, rows):
        ind = np.concatenate([np.sort(rng.choice(rows, 3, replace=False)) for _ in range(2)])
        return mx.nd.sparse.csr_matrix((rng.random(len(ind)).astype("f"), ind.astype(np.int64),
                                        np.arange(0, len(ind) + 1, 3)), shape=(2, 100))

    def run(is_deferred):
        mx.random.seed(0)
        net = FullyConnectedSparse(3, in_units=100)
        net.initialize(mx.init.Uniform(0.5), ctx=contexts)
        rng = np.random.default_rng(0)

        def train(trainer, steps):
            for t in range(steps):
                xs = [batch(rng, 100 if t == 0 else 10) for _ in contexts]
                with autograd.record():
                    losses = [net(x.as_in_context(c)).sum() for x, c in zip(xs, contexts)]
                for loss in losses:
                    loss.backward()
                trainer.step(4)
        first = gluon.Trainer(net.collect_params(), optimizer,
                              dict(options, deferred=is_deferred), kvstore="device")
        train(first, 10)
        second = gluon.Trainer(net.collect_params(), optimizer,
                               dict(options, deferred=is_deferred), kvstore="device")
        train(second, 5)  # `first` still referenced here
        weights = [a.asnumpy() for a in net.weight.list_data()]
        del first
        return weights
    eager, lazy_cost = run(False), run(True)
    for device in range(2):
        np.testing.assert_array_equal(lazy_cost[device], eager[device])


# ------------------------------------------------- reads of every row in a graph
class _Prelude(gluon.HybridBlock):
    """``sparse(x + shift)``: a parameter before the sparse block, so its input needs a
    gradient. ``shift`` stays 0 (lr_mult 0), so the batch's zeros stay zeros and the
    products read only the batch's rows; its gradient is the input gradient summed
    over the batch: every row of the weight shows in it."""

    def __init__(self, kind):
        super().__init__()
        with self.name_scope():
            self.shift = self.params.get("shift", shape=(1, IN_UNITS), init="zeros", lr_mult=0)
            self.sparse = (FullyConnectedSparse(5, activation="tanh", in_units=IN_UNITS)
                           if kind == "fc" else FactorizationMachine(3, in_units=IN_UNITS))

    def hybrid_forward(self, F, x, shift):
        return self.sparse(F.broadcast_add(x, shift))


@per_optimizer("kind, how", [("fc", "attach_grad"), ("fm", "parent"), ("fc", "parent"),
                             ("fm", "attach_grad")])
def test_an_input_gradient_reads_caught_up_rows(kind, how, optimizer):
    """The input gradient (ograd . W^T) reads every row of the weight: it read rows the
    deferred optimizer still owed steps (3932 of 4000 input gradients differed)."""
    def run(is_deferred):
        mx.random.seed(0)
        if how == "parent":
            net = _Prelude(kind)
            net.initialize(mx.init.Uniform(0.1))
            net.hybridize()
            params = net.collect_params()
        else:  # the sparse block hybridized itself, not inside a hybridized parent
            net = _net(kind, False)
            (net[0] if kind == "fc" else net).hybridize()
            params = net.collect_params()
        trainer = gluon.Trainer(params, _create(optimizer, 0.01, is_deferred))
        input_grads = []
        for step, (x, y) in enumerate(_schedule()):
            dense = x.tostype("default")
            if how == "attach_grad" and step >= 20:
                dense.attach_grad()
            with autograd.record():
                out = net(dense if how == "parent" or step >= 20 else x)
                loss = ((out.sum(axis=1, keepdims=True) - y) ** 2).mean()
            loss.backward()
            if how == "attach_grad" and step >= 20:
                input_grads.append(dense.grad.asnumpy())
            elif how == "parent":
                input_grads.append(net.shift.grad().asnumpy())
            trainer.step(1)
        deferred.flush(trainer)
        return input_grads, [p._data[0].asnumpy() for p in params.values()]
    eager, lazy_cost = run(False), run(True)
    for a, b in zip(eager[0], lazy_cost[0]):
        np.testing.assert_array_equal(b, a)
    for a, b in zip(eager[1], lazy_cost[1]):
        np.testing.assert_array_equal(b, a)


def test_a_second_eager_trainer_while_the_deferred_one_lives():
    """The eager Trainer's steps wrote the weight while the deferred state, still bound,
    owed rows steps that it replayed later on top of them."""
    def run(first_deferred):
        net = _net("fc", True)
        first = gluon.Trainer(net.collect_params(), "sparseadam",
                              {"learning_rate": 0.05, "wd": 0.01, "deferred": first_deferred})
        _train(net, first, _schedule())
        second = gluon.Trainer(net.collect_params(), "sparsesgd",
                               {"learning_rate": 0.05, "momentum": 0.9})  # eager
        _train(net, second, _batches(6, 5, np.arange(IN_UNITS // 10)))
        _train(net, first, _batches(4, 6, np.arange(IN_UNITS // 10)))  # and back again
        _train(net, second, _batches(3, 7, np.arange(IN_UNITS // 10)))
        assert first is not None  # alive to the end
        return [p.data().asnumpy() for p in net.collect_params().values()]
    for a, b in zip(run(False), run(True)):
        np.testing.assert_array_equal(b, a)


def test_the_stale_row_message_names_a_forward_before_the_previous_step():
    net = _net("fc", False)
    trainer = gluon.Trainer(net.collect_params(), "sparseadam",
                            {"learning_rate": 0.05, "deferred": True})
    batches = _schedule()
    _train(net, trainer, batches[:5])
    (x1, y1), (x2, y2) = batches[5], batches[4]
    with autograd.record():
        loss1 = net(x1).sum()
    loss1.backward()
    with autograd.record():
        loss2 = net(x2).sum()  # recorded before the step of batch 1
    trainer.step(1)
    loss2.backward()
    with pytest.raises(mx.MXNetError, match="before the previous update .* Call trainer.step "
                                            "before the next forward"):
        trainer.step(1)
        mx.nd.waitall()


def test_a_thread_reading_the_weights_while_another_trains():
    """A flush from a reading thread could name step S and reach the engine after update
    S + 1: the reader got "row R is at step S + 1" errors and training went on with
    silently different weights (NaN at times)."""
    import threading

    def run(is_deferred, read):
        net = _net("fc", True)
        trainer = _trainer(net, is_deferred, 0.01, ("sparseadam", {"learning_rate": 0.05}))
        stop, errors = threading.Event(), []

        def reader():
            while not stop.is_set():
                try:
                    for param in net.collect_params().values():
                        param.data().asnumpy()
                except mx.MXNetError as err:  # pragma: no cover - the failure shown
                    errors.append(err)
        thread = threading.Thread(target=reader)
        if read:
            thread.start()
        try:
            _train(net, trainer, _schedule() * 2)
        finally:
            stop.set()
            if read:
                thread.join()
        assert not errors, errors[0]
        return [p.data().asnumpy() for p in net.collect_params().values()]
    expected = run(False, read=False)
    for _ in range(2):
        for a, b in zip(run(True, read=True), expected):
            np.testing.assert_array_equal(b, a)


def _shift_grads(parent, is_deferred, before_step=None):
    """``shift.grad()`` of each step of a hybridized ``parent`` (a :class:`_Prelude`) on
    dense batches under SparseAdam (wd 0.01); ``before_step(net, step, x)`` runs first."""
    mx.random.seed(0)
    net = parent("fc")
    net.initialize(mx.init.Uniform(0.1))
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(),
                            _create(("sparseadam", {"learning_rate": 0.05}), 0.01, is_deferred))
    grads = []
    for step, (x, y) in enumerate(_schedule()):
        if before_step is not None:
            before_step(net, step, x)
        with autograd.record():
            loss = ((net(x.tostype("default")).sum(axis=1, keepdims=True) - y) ** 2).mean()
        loss.backward()
        grads.append(net.shift.grad().asnumpy())
        trainer.step(1)
    return grads


def test_a_graph_of_the_block_alone_does_not_undo_its_parents_whole_reads():
    """The block traced on its own without the input gradient (its own hybridize and
    call, as before an export) must not stop the catch-up that its parent's graph,
    which reads every row, still needs."""
    def alone(net, step, x):
        if step == 10:
            net.sparse.hybridize()
            net.sparse(x)  # a graph of the block alone, CSR data: no input gradient
    for a, b in zip(_shift_grads(_Prelude, False, alone), _shift_grads(_Prelude, True, alone)):
        np.testing.assert_array_equal(b, a)


_GC_IN_ENGINE_CALL = r"""
import gc, sys
import mxnet as mx, numpy as np
from mxnet import autograd, gluon
from gluon_sparse.nn import FullyConnectedSparse
from gluon_sparse.optimizer import _engine_calls

def net_and_trainer():
    net = FullyConnectedSparse(3, in_units=50)
    net.initialize()
    return net, gluon.Trainer(net.collect_params(), "sparseadam",
                              {"learning_rate": 0.1, "deferred": True})

X = mx.nd.sparse.csr_matrix((np.ones(2, "f"), np.array([1, 7]), np.array([0, 1, 2])),
                            shape=(2, 50))

def step(net, trainer):
    with autograd.record():
        loss = net(X).sum()
    loss.backward()
    trainer.step(1)

net_a, trainer_a = net_and_trainer()
step(net_a, trainer_a)
step(net_a, trainer_a)
trainer_a.cycle = trainer_a  # dropped in a reference cycle: its state waits for the collector
gc.disable()
del trainer_a, net_a
net_b, trainer_b = net_and_trainer()
trainer_b2 = gluon.Trainer(net_b.collect_params(), "sparseadam",
                           {"learning_rate": 0.1, "deferred": True})
step(net_b, trainer_b)
step(net_b, trainer_b2)  # trainer_b's state is detached: its next update binds again
w = net_b.weight.data()
big = mx.nd.ones((1500, 1500))
w += mx.nd.dot(mx.nd.dot(big, big), big).sum() * 0  # a slow write queued on the weight
_engine_calls.push(lambda: gc.collect(), mx.cpu(), [w], "collect_in_an_engine_call")
step(net_b, trainer_b)  # binding waits for that write
mx.nd.waitall()
print("done")
"""


def test_a_state_collected_in_an_engine_call_does_not_deadlock_an_update():
    """A dropped state's finalizer flushes under the state lock; the collector may run
    it in an engine call that an update was waiting for while it held the lock."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", _GC_IN_ENGINE_CALL], capture_output=True,
                          text=True, timeout=90)  # it hung for good
    assert done.returncode == 0 and "done" in done.stdout, done.stderr[-2000:]


class _TwiceInOneGraph(_Prelude):
    """One sparse layer called twice by a hybridized parent: on an input computed from a
    parameter (its gradient reads every row), then on the raw batch (it does not)."""

    def hybrid_forward(self, F, x, shift):
        return self.sparse(F.broadcast_add(x, shift)) + self.sparse(x)


def test_a_layer_called_twice_in_one_graph_keeps_its_whole_reads():
    # The second call of the tracing un-marked the weight: 27 of 29 input gradients stale.
    for a, b in zip(_shift_grads(_TwiceInOneGraph, False),
                    _shift_grads(_TwiceInOneGraph, True)):
        np.testing.assert_array_equal(b, a)
