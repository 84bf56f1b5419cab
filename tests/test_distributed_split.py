"""Splitting CSR batches across devices, and multi-device training vs one device."""
import itertools

import mxnet as mx
import numpy as np
import pytest
import scipy.sparse as sp
from mxnet import autograd, gluon

from gluon_sparse.data import CSRDataset, SparseDataLoader
from gluon_sparse.distributed import part_sizes, split_and_load_batch, steps_per_epoch
from gluon_sparse.nn import FullyConnectedSparse
from gluon_sparse.nn.row_sparse_weight import FullyConnectedSparseRowSparseWeight

CONTEXTS = [mx.cpu(0), mx.cpu(1)]


def random_csr(rows, cols, density, seed):
    rng = np.random.default_rng(seed)
    x = sp.random(rows, cols, density=density, format="csr", dtype=np.float32, random_state=rng)
    # Values on a 1/8 grid: sums of them are exact, so the comparisons below
    # measure the training path, not data rounding.
    x.data = rng.integers(1, 9, size=x.nnz).astype(np.float32) / 8
    return x


@pytest.mark.parametrize("rows, parts", [(10, 3), (9, 3), (2, 5), (0, 2), (7, 1)])
def test_part_sizes_match_numpy_array_split(rows, parts):
    expected = [len(a) for a in np.array_split(np.arange(rows), parts)]
    assert part_sizes(rows, parts) == expected


def test_part_sizes_rejects_bad_arguments():
    with pytest.raises(ValueError, match="num_parts must be at least 1"):
        part_sizes(5, 0)
    with pytest.raises(ValueError, match="num_rows must be non-negative"):
        part_sizes(-1, 2)


@pytest.mark.parametrize("as_scipy", [False, True])
def test_split_keeps_csr_and_splits_unevenly_with_labels(as_scipy):
    x = random_csr(5, 40, 0.2, seed=1)
    y = np.arange(5, dtype=np.float32)
    data = x if as_scipy else mx.nd.sparse.csr_matrix(x)
    data_parts, label_parts = split_and_load_batch(data, y, CONTEXTS)
    assert [p.shape[0] for p in data_parts] == [3, 2]
    assert [p.stype for p in data_parts] == ["csr", "csr"]
    assert [p.context for p in data_parts] == CONTEXTS
    assert [p.context for p in label_parts] == CONTEXTS
    np.testing.assert_array_equal(np.vstack([p.asnumpy() for p in data_parts]), x.toarray())
    np.testing.assert_array_equal(np.concatenate([p.asnumpy() for p in label_parts]), y)


def test_split_without_labels_and_on_one_context():
    x = mx.nd.sparse.csr_matrix(random_csr(4, 10, 0.3, seed=2))
    data_parts, label_parts = split_and_load_batch(x, None, [mx.cpu(0)])
    assert label_parts is None
    assert len(data_parts) == 1 and data_parts[0].stype == "csr"


def test_split_errors_name_the_problem():
    x = mx.nd.sparse.csr_matrix(random_csr(3, 10, 0.3, seed=3))
    with pytest.raises(ValueError, match="data has 3 rows but label has 2"):
        split_and_load_batch(x, np.zeros(2), CONTEXTS)
    with pytest.raises(ValueError, match="a batch of 1 rows cannot be split across 2 contexts"):
        split_and_load_batch(x[0:1], np.zeros(1), CONTEXTS)
    with pytest.raises(ValueError, match=r"2-D .* got shape \(3,\)"):
        split_and_load_batch(mx.nd.zeros(3), None, CONTEXTS)
    with pytest.raises(ValueError, match="ctx_list is empty"):
        split_and_load_batch(x, None, [])


def small_model(first_layer, in_units):
    net = gluon.nn.Sequential()
    with net.name_scope():
        net.add(first_layer, gluon.nn.Dense(1, in_units=16))
    return net


def train(net, contexts, batches, optimizer, init_file, batch_size_of):
    """Train from the parameters in init_file; each global batch split over contexts."""
    net.load_parameters(init_file, ctx=contexts)
    trainer = gluon.Trainer(net.collect_params(), optimizer, {"learning_rate": 0.05})
    loss_fn = gluon.loss.SigmoidBinaryCrossEntropyLoss()
    for x, y in batches:
        data_parts, label_parts = split_and_load_batch(x, y, contexts)
        with autograd.record():
            losses = [loss_fn(net(d), l).sum() for d, l in zip(data_parts, label_parts)]
        autograd.backward(losses)
        trainer.step(batch_size_of(x))
    return {name: p.data(contexts[0]).asnumpy() if p._stype == "default"
            else p.row_sparse_data(mx.nd.arange(p.shape[0], ctx=contexts[0])).asnumpy()
            for name, p in net._collect_params_with_prefix().items()}


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("row_sparse_weight", [False, True])
def test_two_devices_equal_one_device_on_the_same_global_batches(tmp_path, optimizer,
                                                                  row_sparse_weight):
    in_units = 300
    # Uneven global batches (7 rows: 4 + 3 on two devices) test the uneven split.
    x = random_csr(35, in_units, 0.02, seed=4)
    y = (np.random.default_rng(5).random(35) < 0.5).astype(np.float32)
    batches = [(mx.nd.sparse.csr_matrix(x[i:i + 7]), y[i:i + 7]) for i in range(0, 35, 7)]

    mx.random.seed(6)
    reference_net = small_model(FullyConnectedSparse(16, activation="sigmoid",
                                                     in_units=in_units), in_units)
    reference_net.initialize(mx.init.Xavier())
    init_file = str(tmp_path / "init.params")
    reference_net.save_parameters(init_file)
    expected = train(reference_net, [mx.cpu(0)], batches, optimizer, init_file,
                     lambda b: b.shape[0])

    layer_cls = FullyConnectedSparseRowSparseWeight if row_sparse_weight else FullyConnectedSparse
    multi_net = small_model(layer_cls(16, activation="sigmoid", in_units=in_units), in_units)
    got = train(multi_net, CONTEXTS, batches, optimizer, init_file, lambda b: b.shape[0])

    assert got.keys() == expected.keys()
    for name in expected:
        # Only the order of float32 sums differs (per-device partial sums, then
        # the kvstore's reduction): a few ulps per step.
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    # Training moved the weights: the comparison is not between two initial states.
    initial = mx.nd.load(init_file)
    assert not np.allclose(initial["0.weight"].asnumpy(), expected["0.weight"])


def test_labels_and_features_that_float32_would_change_or_mxnet_cannot_slice():
    """Integer class ids past 2^24 came back changed (float32), a bool or int64 CSR batch
    failed later with 'Unknown type enum 7', and one Context was 'not iterable'."""
    contexts = [mx.cpu(0), mx.cpu(1)]
    x = sp.random(4, 6, density=0.5, format="csr", random_state=0)
    with pytest.raises(ValueError, match="label holds the integer 16777217"):
        split_and_load_batch(x, np.array([16777217, 1, 2, 3]), contexts)
    for dtype in (bool, np.int64):
        parts, _ = split_and_load_batch(x.astype(dtype), None, contexts)
        np.testing.assert_array_equal(np.concatenate([p.asnumpy() for p in parts]),
                                      x.astype(dtype).astype(np.float32).toarray())
    parts, labels = split_and_load_batch(x, [0, 1, 0, 1], mx.cpu(0))
    assert len(parts) == 1 and labels[0].asnumpy().tolist() == [0, 1, 0, 1]
    with pytest.raises(ValueError, match="scalar"):
        split_and_load_batch(x, 3, contexts)
    with pytest.raises(TypeError, match="part_sizes takes integers"):
        part_sizes(10.0, 3)


@pytest.mark.parametrize("rows, global_batch, workers", [
    (90, 9, 2), (90, 10, 2), (100, 7, 3), (17, 5, 4), (1000, 33, 5), (8, 8, 8)])
def test_steps_per_epoch_is_a_count_of_full_batches_every_worker_has(rows, global_batch,
                                                                      workers):
    """The sharding recipe of the distributed guide: with local batches of part_sizes and
    steps_per_epoch steps, every worker runs the same number of steps (dist_sync waits for
    each), all of them full local batches that add up to the global batch, as many as
    possible (one more step leaves some worker short)."""
    X = sp.csr_matrix(np.arange(rows, dtype=np.float32)[:, None] + 1)
    steps = steps_per_epoch(rows, global_batch, workers)
    locals_ = part_sizes(global_batch, workers)
    counts = []
    for rank in range(workers):
        loader = SparseDataLoader(CSRDataset(X, np.zeros(rows)), batch_size=locals_[rank],
                                  num_parts=workers, part_index=rank)
        batches = [data.shape[0] for data, _ in itertools.islice(loader, steps)]
        assert batches == [locals_[rank]] * steps
        counts.append(sum(1 for data, _ in loader if data.shape[0] == locals_[rank]))
    assert min(counts) == steps  # the most steps every worker can run with full batches


def test_steps_per_epoch_refuses_a_global_batch_smaller_than_the_workers():
    with pytest.raises(ValueError, match="global batch of 2 rows leaves some of the 3 workers"):
        steps_per_epoch(100, 2, 3)
