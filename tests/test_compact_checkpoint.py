"""save_compact_parameters / load_compact_parameters against save_parameters / load_parameters."""
import os
import struct

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from gluon_sparse import _compact
from gluon_sparse.nn import FullyConnectedSparse, load_compact_parameters, save_compact_parameters
from gluon_sparse.optimizer import SparseAdam

IN_UNITS, UNITS = 20000, 16


def _net(seed=0, in_units=IN_UNITS, initialize=True):
    """The user's network: built and initialised with a fixed seed (the factory)."""
    net = gluon.nn.HybridSequential()
    net.add(FullyConnectedSparse(UNITS, activation="relu", in_units=in_units),
            gluon.nn.Dense(2, in_units=UNITS))
    if initialize:
        mx.random.seed(seed)
        net.initialize(mx.init.Xavier())
    return net


def _batches(count, seed=1, features=200):
    rng = np.random.default_rng(seed)
    used = rng.choice(IN_UNITS, features, replace=False)
    for _ in range(count):
        rows, nnz = 8, 5
        indices = np.sort(rng.choice(used, (rows, nnz)), axis=1)
        x = mx.nd.sparse.csr_matrix((rng.random(rows * nnz).astype(np.float32),
                                     indices.ravel(), np.arange(0, rows * nnz + 1, nnz)),
                                    shape=(rows, IN_UNITS))
        yield x, mx.nd.array(rng.integers(0, 2, rows))


def _train(net, steps=20, **optimizer):
    trainer = gluon.Trainer(net.collect_params(), SparseAdam(learning_rate=0.01, **optimizer))
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    for x, y in _batches(steps):
        with autograd.record():
            out = loss(net(x), y)
        out.backward()
        trainer.step(x.shape[0])
    return trainer


def _params(net):
    return {name: param.data().asnumpy() for name, param in
            net._collect_params_with_prefix().items()}


def _assert_same(net, reference):
    got, want = _params(net), _params(reference)
    assert got.keys() == want.keys()
    for name in want:
        assert got[name].tobytes() == want[name].tobytes(), name
    x, _ = next(_batches(1, seed=9))
    assert net(x).asnumpy().tobytes() == reference(x).asnumpy().tobytes()


@pytest.mark.parametrize("optimizer", [{}, {"deferred": True}], ids=["adam", "deferred-adam"])
def test_round_trip_equals_save_parameters_bit_for_bit_and_is_small(tmp_path, optimizer):
    net = _net()
    _train(net, **optimizer)
    compact, full = str(tmp_path / "net.compact"), str(tmp_path / "net.params")
    save_compact_parameters(net, compact, initial=lambda: _net(seed=0))
    net.save_parameters(full)
    # Into a fresh net initialised as the trained one was (initial=None: its own values).
    restored = _net(seed=0)
    load_compact_parameters(restored, compact)
    reference = _net(seed=5)
    reference.load_parameters(full)
    _assert_same(restored, reference)
    _assert_same(restored, net)
    # Size: the touched rows (at most the 200 features the batches use) and the small layers.
    weight = mx.nd.load(compact)["0.weight"]
    assert weight.stype == "row_sparse" and 0 < weight.indices.shape[0] <= 200
    row_bytes = UNITS * 4 + 8
    assert os.path.getsize(compact) < 200 * row_bytes + 2 * UNITS * 4 * 2 + 4096
    assert os.path.getsize(compact) * 20 < os.path.getsize(full)


def test_rollback_into_the_trained_net_and_into_an_uninitialised_one(tmp_path):
    net = _net()
    _train(net, steps=10)
    path = str(tmp_path / "ckpt")
    save_compact_parameters(net, path, initial=_net(seed=0))
    checkpoint = _net(seed=7)
    checkpoint.load_parameters(_save_full(net, tmp_path))
    _train(net, steps=10)  # moves on, then goes back to the checkpoint
    load_compact_parameters(net, path, initial=lambda: _net(seed=0))
    _assert_same(net, checkpoint)
    fresh = _net(initialize=False)
    load_compact_parameters(fresh, path, initial=lambda: _net(seed=0), ctx=mx.cpu())
    _assert_same(fresh, checkpoint)


def _save_full(net, tmp_path):
    path = str(tmp_path / "full.params")
    net.save_parameters(path)
    return path


def test_plain_save_parameters_files_load_too(tmp_path):
    net = _net()
    _train(net, steps=3)
    restored = _net(seed=3)
    load_compact_parameters(restored, _save_full(net, tmp_path))
    _assert_same(restored, net)


def test_other_initial_values_are_refused_and_the_net_is_left_as_it_was(tmp_path):
    net = _net()
    _train(net, steps=5)
    path = str(tmp_path / "ckpt")
    save_compact_parameters(net, path, initial=lambda: _net(seed=0))
    other = _net(seed=1)  # another seed: the absent rows would be other numbers
    before = _params(other)
    with pytest.raises(ValueError, match=r"ckpt .*'0.weight'.*cannot be regenerated"):
        load_compact_parameters(other, path)
    assert all(before[name].tobytes() == value.tobytes() for name, value in _params(other).items())
    trained_since = _net(seed=0)
    _train(trained_since, steps=2)  # no longer its initial values
    with pytest.raises(ValueError, match="cannot be regenerated"):
        load_compact_parameters(trained_since, path)
    with pytest.raises(ValueError, match=r"'0.weight'.*unknown.*the network must hold"):
        load_compact_parameters(_net(initialize=False), path)  # no initial values to use


def test_a_checkpoint_of_another_shape_names_the_parameter_and_both_shapes(tmp_path):
    net = _net()
    path = str(tmp_path / "ckpt")
    save_compact_parameters(net, path, initial=lambda: _net(seed=0))
    wider = _net(in_units=IN_UNITS + 1)
    with pytest.raises(ValueError) as info:
        load_compact_parameters(wider, path)
    message = str(info.value)
    assert "'0.weight'" in message and "(20000, 16)" in message and "(20001, 16)" in message
    assert path in message
    other = gluon.nn.HybridSequential()
    other.add(FullyConnectedSparse(UNITS, in_units=IN_UNITS))
    other.initialize()
    with pytest.raises(ValueError, match=r"missing from the file \[\].*network \['1.bias', "
                                         r"'1.weight'\]"):
        load_compact_parameters(other, path)


def test_damaged_files_and_plain_load_parameters_are_clear_errors(tmp_path):
    net = _net()
    _train(net, steps=3)
    path = tmp_path / "ckpt"
    save_compact_parameters(net, str(path), initial=lambda: _net(seed=0))
    # load_parameters would give zeros for the absent rows: it must refuse the file.
    with pytest.raises(Exception, match="__gluon_sparse_compact__"):
        _net(seed=0).load_parameters(str(path))
    path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])
    with pytest.raises(ValueError) as info:
        load_compact_parameters(_net(seed=0), str(path))
    assert "truncated" in str(info.value) and str(path) in str(info.value)
    assert "\n" not in str(info.value)
    with pytest.raises(TypeError, match="initial must be a gluon Block"):
        save_compact_parameters(net, str(tmp_path / "x"), initial=0)


def _without_crc_trailer(data):
    """A compact file as earlier versions wrote it, without the CRC trailer that now
    refuses any damage first: what the parsers behind it meet."""
    assert data[-12:-4] == b"GSCRC32\0"
    return data[:-12]


def test_a_flipped_bit_anywhere_is_refused_by_the_crc(tmp_path):
    # MXNet's format has no checksum: a flipped bit of the data loaded as other values,
    # one of the array count made MXNet allocate what the bytes after it said.
    net = _net()
    _train(net, steps=3)
    path = tmp_path / "ckpt"
    save_compact_parameters(net, str(path), initial=lambda: _net(seed=0))
    data = path.read_bytes()
    assert mx.nd.load(str(path)).keys()  # MXNet's readers ignore the trailer
    for position in (16, len(data) // 3, len(data) // 2, len(data) - 14, len(data) - 1):
        damaged = bytearray(data)
        damaged[position] ^= 0x04
        path.write_bytes(bytes(damaged))
        fresh = _net(seed=0)
        with pytest.raises(ValueError, match=r"ckpt is damaged: its CRC-32 is [0-9a-f]{8}, and "
                                             r"the file recorded [0-9a-f]{8}"):
            load_compact_parameters(fresh, str(path))


@pytest.mark.parametrize("damage", ["dimension past 2^31 elements", "negative dimension",
                                    "row index"])
def test_a_damaged_shape_or_row_index_is_a_one_line_error(tmp_path, damage):
    """Such files once escaped as a raw MXNet traceback or a bare IndexError."""
    small = lambda: _net(seed=0, in_units=300)  # noqa: E731
    net = small()
    trainer = gluon.Trainer(net.collect_params(), SparseAdam(learning_rate=0.01))
    x = mx.nd.sparse.csr_matrix((np.ones(6, np.float32), np.array([3, 9, 40, 7, 200, 299]),
                                 np.array([0, 3, 6])), shape=(2, 300))
    with autograd.record():
        loss = net(x).sum()
    loss.backward()
    trainer.step(2)
    path, bad = tmp_path / "ckpt", tmp_path / "bad"
    save_compact_parameters(net, str(path), initial=small)
    if damage == "row index":
        arrays = mx.nd.load(str(path))
        name = next(k for k, v in arrays.items() if v.stype == "row_sparse")
        indices = arrays[name].indices.asnumpy().copy()
        indices[-1] |= 1 << 40
        arrays[name] = mx.nd.sparse.row_sparse_array((arrays[name].data, indices),
                                                     shape=arrays[name].shape)
        mx.nd.save(str(bad), arrays)
        match = r"is damaged: .* stores row 1099511\d+ of a weight of 300 rows"
    else:
        # The weight's shape as MXNet writes it: ndim (int32), then int64 dimensions.
        data = _without_crc_trailer(path.read_bytes())
        field = struct.pack("<iqq", 2, 300, UNITS)
        assert data.count(field) == 1
        where = data.index(field) + 4
        value = 300 | 1 << 40 if damage.startswith("dimension") else -300
        bad.write_bytes(data[:where] + struct.pack("<q", value) + data[where + 8:])
        match = "is damaged: the shape of .* cannot be read|could not be read"
    fresh = small()
    before = _params(fresh)
    with pytest.raises(ValueError, match=match) as info:
        load_compact_parameters(fresh, str(bad), initial=small)
    assert "\n" not in str(info.value) and str(bad) in str(info.value)
    after = _params(fresh)
    assert all(after[k].tobytes() == before[k].tobytes() for k in before)


def test_a_failed_save_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    net = _net()
    path = tmp_path / "ckpt"
    save_compact_parameters(net, str(path), initial=lambda: _net(seed=0))
    before = path.read_bytes()
    _train(net, steps=3)

    def crash(*args):
        raise OSError("disk full")

    monkeypatch.setattr(mx.nd, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        save_compact_parameters(net, str(path), initial=lambda: _net(seed=0))
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]  # no temporary left behind


def test_blocks_of_a_few_rows_give_the_same_file(tmp_path, monkeypatch):
    net = _net()
    _train(net, steps=5)
    save_compact_parameters(net, str(tmp_path / "a"), initial=lambda: _net(seed=0))
    monkeypatch.setattr(_compact, "BLOCK_BYTES", 640)  # 10 rows of the sparse layer
    save_compact_parameters(net, str(tmp_path / "b"), initial=lambda: _net(seed=0))
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()
    restored = _net(seed=0)
    load_compact_parameters(restored, str(tmp_path / "b"))
    _assert_same(restored, net)


def test_loading_into_a_net_trained_with_deferred_adam_continues_like_standard_adam(tmp_path):
    # Deferred Adam owes the rows absent from recent batches their steps; a
    # load must settle them before writing, so the next steps equal standard Adam's.
    nets, trainers = [], []
    for deferred in (False, True):
        net = _net()
        trainer = _train(net, steps=10, deferred=deferred)
        save_compact_parameters(net, str(tmp_path / str(deferred)), initial=lambda: _net(seed=0))
        nets.append(net)
        trainers.append(trainer)
    loss = gluon.loss.SoftmaxCrossEntropyLoss()

    def steps(net, trainer, seed):
        for x, y in _batches(4, seed=seed, features=20):
            with autograd.record():
                out = loss(net(x), y)
            out.backward()
            trainer.step(x.shape[0])

    for net, trainer, deferred in zip(nets, trainers, (False, True)):
        steps(net, trainer, seed=10)  # rows left behind by deferred Adam
        load_compact_parameters(net, str(tmp_path / str(deferred)), initial=lambda: _net(seed=0))
        steps(net, trainer, seed=11)
    from gluon_sparse.optimizer import flush
    flush(trainers[1])
    _assert_same(nets[1], nets[0])


@pytest.mark.parametrize("kind", ["compact", "plain"])
def test_a_row_sparse_weight_layer_round_trips(tmp_path, kind):
    """FullyConnectedSparseRowSparseWeight's weight is row_sparse itself: stored whole, it
    was refused at load as a compacted weight whose left-out rows were not described."""
    from gluon_sparse.nn.row_sparse_weight import FullyConnectedSparseRowSparseWeight

    def make():
        net = gluon.nn.Sequential()
        net.add(FullyConnectedSparseRowSparseWeight(8, in_units=5000),
                gluon.nn.Dense(2, in_units=8))
        mx.random.seed(1)
        net.initialize(mx.init.Xavier())
        return net

    def weights(net):
        gluon.Trainer(net.collect_params(), "sgd", kvstore="local")
        first = net[0].weight.row_sparse_data(mx.nd.arange(5000)).asnumpy()
        return [first] + [p.data().asnumpy() for p in net[1].collect_params().values()]

    net = make()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                            kvstore="local")
    x = mx.nd.sparse.csr_matrix((np.ones(4, np.float32), np.array([1, 7, 9, 11]),
                                 np.array([0, 2, 4])), shape=(2, 5000))
    with autograd.record():
        loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x), mx.nd.array([0, 1]))
    loss.backward()
    trainer.step(2)
    path = str(tmp_path / "net.params")
    if kind == "compact":
        save_compact_parameters(net, path, initial=make)
    else:
        net.save_parameters(path)
    expected = [net[0].weight.row_sparse_data(mx.nd.arange(5000)).asnumpy()] + [
        p.data().asnumpy() for p in net[1].collect_params().values()]
    restored = make()
    load_compact_parameters(restored, path)
    for got, want in zip(weights(restored), expected):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("damage, message", [
    ((b'"crc32"', b'"crc22"'), "the description of the rows of '0.weight' left to the "
                               "initialiser reads"),
    ((b"0.weight", b"0.w\x9eight"), "a parameter name is not text"),
])
def test_a_damaged_description_or_name_is_a_one_line_error_naming_the_file(tmp_path, damage,
                                                                            message):
    """They escaped as a bare KeyError('crc32') and a UnicodeDecodeError from MXNet."""
    net = _net()
    _train(net, steps=3)
    path = tmp_path / "ckpt"
    save_compact_parameters(net, str(path), initial=lambda: _net(seed=0))
    data = _without_crc_trailer(path.read_bytes())
    assert data.count(damage[0]) >= 1
    path.write_bytes(data.replace(*damage))
    with pytest.raises(ValueError) as info:
        load_compact_parameters(_net(seed=0), str(path))
    assert str(path) in str(info.value) and message in str(info.value), str(info.value)


@pytest.mark.parametrize("kind", ["compact", "save_parameters"])
def test_a_row_sparse_weight_layers_file_loads_into_the_plain_layer(tmp_path, kind):
    """As load_parameters does (SampledOutputRowSparseWeight's docstring recommends it for
    prediction); the file was refused as storing 'only some rows' while it stores them all."""
    from gluon_sparse.nn.row_sparse_weight import FullyConnectedSparseRowSparseWeight
    def make():
        mx.random.seed(2)
        layer = FullyConnectedSparseRowSparseWeight(4, in_units=100)
        layer.initialize(mx.init.Normal(1))
        return layer
    rsw = make()
    gluon.Trainer(rsw.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="local")
    path = str(tmp_path / "rsw.params")
    if kind == "compact":
        save_compact_parameters(rsw, path, initial=make)
    else:
        rsw.save_parameters(path)
    reference = FullyConnectedSparse(4, in_units=100)
    reference.load_parameters(path) if kind != "compact" else None
    plain = FullyConnectedSparse(4, in_units=100)
    load_compact_parameters(plain, path)
    expected = rsw.weight.row_sparse_data(mx.nd.arange(100)).asnumpy()
    np.testing.assert_array_equal(plain.weight.data().asnumpy(), expected)
    np.testing.assert_array_equal(plain.bias.data().asnumpy(), rsw.bias.data().asnumpy())
    if kind != "compact":
        np.testing.assert_array_equal(reference.weight.data().asnumpy(), expected)
