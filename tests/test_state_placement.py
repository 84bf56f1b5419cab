"""Placement of the deferred optimizers' state arrays against their weight's address
(optimizer/_state_memory.py, "Placement"): the contract on the addresses, on every path
that makes or loads a state, and that a placed state holds what it should and commits
no memory for its padding."""
import os

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from gluon_sparse.nn import FullyConnectedSparse
from gluon_sparse.optimizer import _registry, _state_memory

FEATURES, UNITS = 8192, 128  # 4 MB a state array: placed (_PLACE_MIN_BYTES is 2 MB)
WINDOW = 1 << _state_memory._PLACE_BITS


def _low_bits(array):
    return _registry.data_pointer(array) % WINDOW


def assert_placed(weight, states):
    """The module doc's contract: each state 64-byte aligned, equal to the weight in bits
    14-27, and different from the weight and from every other state in bits 12-13 (the
    L1 way predictor's tag on AMD Zen) and in bits 10-11 (1 KB apart within a page)."""
    lows = [_low_bits(weight)] + [_low_bits(a) for a in states]
    for low in lows[1:]:
        assert low % 64 == 0
        assert (low ^ lows[0]) >> 14 == 0, "bits 14-27 differ: %x vs %x" % (low, lows[0])
    for i in range(len(lows)):
        for j in range(i + 1, len(lows)):
            assert (lows[i] ^ lows[j]) & 0x3000, "bits 12-13 equal: %x, %x" % (lows[i], lows[j])
            assert (lows[i] ^ lows[j]) & 0x0c00, "bits 10-11 equal: %x, %x" % (lows[i], lows[j])


def _train(optimizer, params, steps=3, after_step=None):
    """A FullyConnectedSparse trained ``steps`` steps on fixed batches; ``after_step(i,
    trainer)`` runs after step ``i``."""
    mx.random.seed(0)
    layer = FullyConnectedSparse(UNITS, in_units=FEATURES)
    layer.initialize(mx.init.Uniform(0.1))
    trainer = gluon.Trainer(layer.collect_params(), optimizer, dict(params, deferred=True))
    rng = np.random.RandomState(0)
    for step in range(steps):
        rows = np.sort(rng.choice(FEATURES, 16, replace=False))
        x = mx.nd.sparse.csr_matrix((np.ones(16, "f"), rows, np.arange(17)),
                                    shape=(16, FEATURES))
        with autograd.record():
            loss = layer(x).sum()
        loss.backward()
        trainer.step(16)
        if after_step is not None:
            after_step(step, trainer)
    mx.nd.waitall()
    return layer, trainer


def _row_states(trainer, layer):
    index = next(i for i, p in enumerate(trainer._params) if p is layer.weight)
    state = trainer._updaters[0].states[index]
    state.flush()  # rows the last batches missed, brought up to date
    return list(state.states) if hasattr(state, "states") else [state.mean, state.var]


@pytest.mark.parametrize("optimizer, params, count", [
    ("sparseadam", {"learning_rate": 0.01}, 2),
    ("sparseadam", {"learning_rate": 0.01, "wd": 1e-3}, 2),  # committed zeros
    ("sparsermsprop", {"learning_rate": 0.01, "centered": True}, 3),
    ("sparsesgd", {"learning_rate": 0.01, "momentum": 0.9, "wd": 1e-3}, 1),
])
def test_deferred_states_are_placed_against_their_weight(optimizer, params, count):
    layer, trainer = _train(optimizer, params)
    states = _row_states(trainer, layer)
    assert len(states) == count
    assert_placed(layer.weight.data(), states)


@pytest.mark.parametrize("optimizer", ["sparseadam", "sparsermsprop"])
def test_states_loaded_by_load_states_are_placed_and_train_on_bitwise(tmp_path, optimizer):
    """Trainer.load_states gives back MXNet's arrays; the next step binds them, moved to
    placed memory, and training goes on exactly as without the save and load."""
    params = {"learning_rate": 0.01, "centered": True} if optimizer == "sparsermsprop" else {
        "learning_rate": 0.01}
    path = str(tmp_path / "t.states")

    def save_and_load(step, trainer):
        if step == 2:
            trainer.save_states(path)
            trainer.load_states(path)

    layer, trainer = _train(optimizer, params, steps=5, after_step=save_and_load)
    reference, reference_trainer = _train(optimizer, params, steps=5)
    states = _row_states(trainer, layer)
    assert_placed(layer.weight.data(), states)
    for got, want in zip(states, _row_states(reference_trainer, reference)):
        np.testing.assert_array_equal(got.asnumpy(), want.asnumpy())
    np.testing.assert_array_equal(layer.weight.data().asnumpy(),
                                  reference.weight.data().asnumpy())


def test_small_and_unplaced_arrays_are_left_as_they_are():
    small = mx.nd.ones((4, 4))
    assert _state_memory.place([small], 12345 * 4096)[0] is small
    host = _state_memory._host_zeros((4, 4), np.float32, near=12345 * 4096)
    assert host.base is None  # plain numpy zeros, no padding


def _resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads Linux's /proc")
def test_placed_lazy_zeros_are_zeros_and_commit_no_padding():
    shape = (1 << 14, 1024)  # 64 MB, with 256 MB of padding
    before = _resident_bytes()
    arrays = [_state_memory.lazy_zeros(shape, mx.cpu(), np.float32, near=0x7f0012345040, slot=k)
              for k in range(3)]
    for array in arrays:
        array[7:9] = 1.0
        mx.nd.waitall()
    assert _resident_bytes() - before < 32 << 20
    for array in arrays:
        total = array.sum().asscalar()
        assert total == 2 * 1024


def test_no_address_space_for_padding_gives_an_unplaced_array(monkeypatch):
    """Under an address-space limit the padded allocation fails: the state is made
    without padding rather than not at all."""
    real_zeros = np.zeros

    def zeros_without_room(shape, dtype=float):
        if isinstance(shape, int) and shape > _state_memory._PLACE_MIN_BYTES + (WINDOW >> 1):
            raise MemoryError("no room")
        return real_zeros(shape, dtype=dtype)

    monkeypatch.setattr(_state_memory.np, "zeros", zeros_without_room)
    host = _state_memory._host_zeros((1 << 12, 1024), np.float32, near=0x7f0012345040)
    assert host.shape == (1 << 12, 1024) and host.base is None and not host.any()
