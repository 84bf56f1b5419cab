"""Compact parameter files: the shared block-by-block compaction and the estimators' use of it."""
import tracemalloc

import mxnet as mx
import numpy as np
import pytest
import scipy.sparse as sp

from gluon_sparse import _compact
from gluon_sparse.sklearn import SparseMLPClassifier, load


def _blocks(name, array, rows):
    for start in range(0, len(array), rows):
        yield name, start, array[start:start + rows]


def _trained(rng, shape=(3000, 16), touched=40):
    initial = rng.standard_normal(shape).astype(np.float32)
    trained = initial.copy()
    rows = np.sort(rng.choice(shape[0], touched, replace=False))
    trained[rows] += rng.standard_normal((touched,) + shape[1:]).astype(np.float32)
    return initial, trained, rows


@pytest.mark.parametrize("block", [1, 7, 1000, 3000])
def test_blocks_of_any_size_store_the_changed_rows_and_expand_bit_for_bit(block):
    rng = np.random.default_rng(0)
    initial, trained, rows = _trained(rng)
    trained[rows[0], 3] = -0.0 if initial[rows[0], 3] == 0 else np.nan  # bits, not values
    bias = rng.standard_normal(16).astype(np.float32)
    to_save, left_out = _compact.compact_param_arrays(
        {"w": trained, "b": bias}, _blocks("w", initial, block))
    assert to_save["w"].stype == "row_sparse" and to_save["b"].stype == "default"
    np.testing.assert_array_equal(to_save["w"].indices.asnumpy(), rows)
    expanded = _compact.expand_param_arrays(to_save, left_out,
                                            lambda: _blocks("w", initial, 3000 - block + 1), "f")
    assert expanded["w"].tobytes() == trained.tobytes()
    assert expanded["b"].tobytes() == bias.tobytes()


def test_a_block_size_does_not_change_what_is_saved():
    rng = np.random.default_rng(1)
    initial, trained, _ = _trained(rng)
    saved = [_compact.compact_param_arrays({"w": trained}, _blocks("w", initial, block))[1]
             for block in (1, 13, 3000)]
    assert saved[0] == saved[1] == saved[2]
    assert saved[0]["w"]["crc32"] == __import__("zlib").crc32(initial.tobytes())


def test_other_initial_values_are_an_error_naming_the_file_and_parameter():
    rng = np.random.default_rng(2)
    initial, trained, _ = _trained(rng)
    to_save, left_out = _compact.compact_param_arrays({"w": trained}, _blocks("w", initial, 100))
    other = initial.copy()
    other[-1, -1] += 1
    with pytest.raises(ValueError, match=r"net.params .*'w'.*another checksum"):
        _compact.expand_param_arrays(to_save, left_out, lambda: _blocks("w", other, 100),
                                     "net.params")
    with pytest.raises(ValueError, match=r"'w'.*another shape"):
        _compact.expand_param_arrays(to_save, left_out, lambda: _blocks("w", initial[:-1], 100),
                                     "net.params")
    with pytest.raises(ValueError, match=r"'w'.*unknown"):
        _compact.expand_param_arrays(to_save, left_out, lambda: iter(()), "net.params")


def test_a_parameter_moved_everywhere_or_without_initial_values_is_stored_whole():
    rng = np.random.default_rng(3)
    initial, trained, _ = _trained(rng, touched=2000)
    to_save, left_out = _compact.compact_param_arrays(
        {"w": trained, "v": trained}, _blocks("w", initial, 64))
    assert left_out == {} and to_save["w"].stype == to_save["v"].stype == "default"
    np.testing.assert_array_equal(to_save["w"].asnumpy(), trained)


def test_compaction_and_expansion_hold_one_block_not_a_second_model(monkeypatch):
    # 64 MB of weights; the initial values come 1 MB at a time, as a
    # Generator draws them. The comparison must not build whole-size
    # temporaries (bit views, masks, copies) of its own.
    monkeypatch.setattr(_compact, "BLOCK_BYTES", 1 << 20)
    shape, seed = (131072, 128), 7

    def initial_rows():
        rng = np.random.default_rng(seed)
        step = _compact.block_rows(shape, np.float32)
        for start in range(0, shape[0], step):
            yield "w", start, rng.random((min(step, shape[0] - start), shape[1]),
                                         dtype=np.float32)

    trained = np.random.default_rng(seed).random(shape, dtype=np.float32)
    trained[::1000] += 1
    tracemalloc.start()
    try:
        to_save, left_out = _compact.compact_param_arrays({"w": trained}, initial_rows())
        saving = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        expanded = _compact.expand_param_arrays(to_save, left_out, initial_rows, "f")["w"]
        loading = tracemalloc.get_traced_memory()[1] - expanded.nbytes
    finally:
        tracemalloc.stop()
    assert to_save["w"].indices.shape[0] == len(range(0, shape[0], 1000))
    assert saving < 8 << 20, saving  # a whole initial array would be 64 MB
    assert loading < 8 << 20, loading
    assert expanded.tobytes() == trained.tobytes()


def test_mlp_initial_rows_in_blocks_equal_one_draw_of_each_whole_array(monkeypatch):
    # The reference: what the estimator drew before blocks, one rng.random per array.
    monkeypatch.setattr(_compact, "BLOCK_BYTES", 1000)  # 1000 / (16 x 4) -> 15-row blocks
    model = SparseMLPClassifier(hidden_layer_sizes=(16, 3), activation="tanh")
    model.n_features_in_ = 1001
    module = model._build_module(2)
    rng = np.random.default_rng(42)
    expected = {}
    for index, layer in enumerate(module):
        bound = np.sqrt(6.0 / sum(layer.weight.shape))
        for kind, param in (("weight", layer.weight), ("bias", layer.bias)):
            drawn = rng.random(param.shape, dtype=np.float32)
            drawn *= np.float32(2 * bound)
            drawn -= np.float32(bound)
            expected["%d.%s" % (index, kind)] = drawn
    blocks = list(model._initial_rows(module, 42))
    assert sum(name == "0.weight" for name, _, _ in blocks) == -(-1001 // 15)
    values = model._initial_values(module, 42)
    assert values.keys() == expected.keys()
    for name in expected:
        assert values[name].tobytes() == expected[name].tobytes(), name


def test_estimator_saves_and_loads_in_small_blocks_bit_for_bit(tmp_path, monkeypatch):
    rng = np.random.RandomState(0)
    X = sp.random(200, 30000, density=2e-4, format="csr", random_state=rng, dtype=np.float32)
    y = rng.randint(0, 2, 200)
    model = SparseMLPClassifier(hidden_layer_sizes=(8,), alpha=0, max_iter=2,
                                random_state=0).fit(X, y)
    model.save(tmp_path / "whole")  # the default block: the whole 30000 x 8 weight at once
    monkeypatch.setattr(_compact, "BLOCK_BYTES", 3200)  # 100 rows
    model.save(tmp_path / "blocks")
    read = [(path / (path / "CURRENT").read_text().strip() / "network.params").read_bytes()
            for path in (tmp_path / "whole", tmp_path / "blocks")]
    assert read[0] == read[1]  # same rows, same file
    assert len(read[1]) < 30000 * 8 * 4 / 10
    loaded = load(tmp_path / "blocks")
    for param, restored in zip(model.module_.collect_params().values(),
                               loaded.module_.collect_params().values()):
        assert restored.data().asnumpy().tobytes() == param.data().asnumpy().tobytes()
    np.testing.assert_array_equal(loaded.predict_proba(X), model.predict_proba(X))


def test_row_blocks_reads_ndarrays_and_numpy_alike(monkeypatch):
    monkeypatch.setattr(_compact, "BLOCK_BYTES", 40)  # 10 float32 per block: 2 rows of 5
    array = np.arange(35, dtype=np.float32).reshape(7, 5)
    for source in (array, mx.nd.array(array)):
        blocks = list(_compact.row_blocks(source))
        assert [start for start, _ in blocks] == [0, 2, 4, 6]
        np.testing.assert_array_equal(np.concatenate([rows for _, rows in blocks]), array)
