"""SampledOutputRowSparseWeight: weight and bias in the kvstore, only the candidates' rows moved.

The reference is the plain SampledOutput on one device, no kvstore, given each
whole global batch; two contexts sharing a 'device' kvstore (and, in
test_distributed_sampled_output_dist.py, two dist_sync workers) must train to
the same weights up to float32 rounding of the summed gradients.
"""
import mxnet as mx
import numpy as np
import pytest
import scipy.sparse as sp
from mxnet import autograd, gluon

import gluon_sparse.optimizer  # noqa: F401 - registers 'sparseadam'
from gluon_sparse.distributed import KVStoreTraffic, check_dist_params, part_sizes
from gluon_sparse.nn import SampledOutput, SampledOutputRowSparseWeight
from gluon_sparse.nn.row_sparse_output import Candidates

NUM_LABELS, IN_UNITS, BATCH, STEPS = 300, 6, 10, 5
CONTEXTS = [mx.cpu(0), mx.cpu(1)]
OPTIMIZERS = {
    "sgd": lambda: mx.optimizer.SGD(learning_rate=0.5, wd=0.01, rescale_grad=1.0 / BATCH),
    "sparseadam": lambda: mx.optimizer.create("sparseadam", learning_rate=0.05, wd=0.01,
                                              rescale_grad=1.0 / BATCH),
    "sparseadam-deferred": lambda: mx.optimizer.create("sparseadam", learning_rate=0.05,
                                                       wd=0.01, deferred=True,
                                                       rescale_grad=1.0 / BATCH),
}


def batches(multilabel, seed=0):
    """STEPS global batches of (h, labels): class ids, or a CSR indicator with 0-3 labels a row."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(STEPS):
        h = rng.standard_normal((BATCH, IN_UNITS)).astype(np.float32)
        if multilabel:
            y = sp.random(BATCH, NUM_LABELS, density=0.006, format="csr", random_state=rng)
            y.data[:] = 1
        else:
            y = rng.integers(0, NUM_LABELS, BATCH)
        out.append((h, y))
    return out


def make(block, ctx, loss, **kwargs):
    mx.random.seed(7)
    out = block(NUM_LABELS, in_units=IN_UNITS, num_sampled=20, loss=loss, seed=3, **kwargs)
    out.initialize(mx.init.Uniform(0.5), ctx=ctx)
    return out


def dense_weights(out):
    """Weight and bias as NumPy, pulled from the kvstore for the row_sparse block."""
    return [p.tostype("default").asnumpy() for p in (out._dense_params(mx.cpu()))]


def train_one_device(optimizer, loss, data):
    out = make(SampledOutput, mx.cpu(0), loss)
    trainer = gluon.Trainer(out.collect_params(), OPTIMIZERS[optimizer]())
    for h, y in data:
        with autograd.record():
            total = out(mx.nd.array(h), y).sum()
        total.backward()
        trainer.step(1)
    return out


def train_two_contexts(optimizer, loss, data, share_candidates=True, traffic_steps=0):
    out = make(SampledOutputRowSparseWeight, CONTEXTS, loss)
    kv = mx.kv.create("device")
    params = out.collect_params()
    trainer = gluon.Trainer(params, OPTIMIZERS[optimizer](), kvstore=kv)
    sizes = part_sizes(BATCH, len(CONTEXTS))
    bounds = np.cumsum([0] + sizes)
    traffic, draws = None, []
    for step, (h, y) in enumerate(data):
        if step == len(data) - traffic_steps:
            traffic = KVStoreTraffic(kv, names=params)
        if share_candidates:
            draw = out.draw_candidates(y)
            draws.append(draw)
            labels = draw.split(sizes)
        else:  # each device draws its own candidates: not the one-device loss
            labels = [y[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        with autograd.record():
            losses = [out(mx.nd.array(h[a:b], ctx=ctx), label).sum()
                      for a, b, ctx, label in zip(bounds[:-1], bounds[1:], CONTEXTS, labels)]
        autograd.backward(losses)
        trainer.step(1)
    return out, traffic, draws


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("loss, multilabel", [("softmax", True), ("bce", False)])
def test_two_contexts_equal_one_device(optimizer, loss, multilabel):
    data = batches(multilabel)
    expected = dense_weights(train_one_device(optimizer, loss, data))
    got = dense_weights(train_two_contexts(optimizer, loss, data)[0])
    initial = dense_weights(make(SampledOutput, mx.cpu(0), loss))
    for name, e, g, i in zip(("weight", "bias"), expected, got, initial):
        # Same candidates and updates; only the float32 sum of the two devices'
        # gradients differs from the one-device gradient (a few ulps a step).
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=2e-6, err_msg=name)
        assert not np.allclose(i, e), name  # training moved the parameters


def test_devices_drawing_their_own_candidates_differ():
    # Shows that the shared draw is what makes the two devices equal one.
    data = batches(multilabel=False)
    expected = dense_weights(train_one_device("sgd", "softmax", data))[0]
    got = dense_weights(train_two_contexts("sgd", "softmax", data, share_candidates=False)[0])[0]
    assert not np.allclose(got, expected, rtol=1e-5, atol=2e-6)


def test_bytes_per_step_are_the_candidates_rows():
    data = batches(multilabel=False)
    out, traffic, draws = train_two_contexts("sparseadam", "softmax", data, traffic_steps=1)
    weight, bias = out.weight.name, out.bias.name
    rows = draws[-1].ids.size  # every candidate row gets a gradient on each device
    devices = len(CONTEXTS)
    # Push: each device's gradient rows (values + an 8-byte key a row).
    assert traffic.pushed == {weight: devices * rows * (IN_UNITS * 4 + 8),
                              bias: devices * rows * (4 + 8)}
    # Pull: the same rows to each device, plus the 8-byte id of each row requested.
    assert traffic.pulled == {weight: devices * rows * (IN_UNITS * 4 + 16),
                              bias: devices * rows * (4 + 16)}
    assert rows < NUM_LABELS / 2  # far from the whole weight
    for held in out.weight._data + out.bias._data:  # each device holds just those rows
        assert held.stype == "row_sparse"
        np.testing.assert_array_equal(held.indices.asnumpy(), draws[-1].ids)


def test_prediction_pulls_every_row_and_matches_the_plain_block(tmp_path):
    data = batches(multilabel=True)
    out = train_two_contexts("sparseadam", "softmax", data)[0]
    path = str(tmp_path / "out.params")
    out.save_parameters(path)
    plain = SampledOutput(NUM_LABELS, in_units=IN_UNITS, num_sampled=20, seed=3)
    plain.load_parameters(path)  # a kvstore-free block predicts from the saved rows
    h = mx.nd.array(data[0][0])
    ids, scores = out.top_k(h, 4)
    plain_ids, plain_scores = plain.top_k(h, 4)
    np.testing.assert_array_equal(ids, plain_ids)
    np.testing.assert_allclose(scores, plain_scores, rtol=1e-6)
    weight, bias = dense_weights(out)
    np.testing.assert_allclose(out.scores(h).asnumpy(), data[0][0] @ weight.T + bias.T,
                               rtol=1e-5, atol=1e-5)


def test_candidates_parts_and_errors():
    out = make(SampledOutputRowSparseWeight, mx.cpu(0), "softmax")
    draw = out.draw_candidates(np.array([3, 17, 3, 250]))
    assert {3, 17, 250} <= set(draw.ids.tolist())
    left, right = draw.split([3, 1])
    np.testing.assert_array_equal(np.vstack([left.target, right.target]), draw.target)
    assert left.ids is draw.ids and right.correction is draw.correction
    with pytest.raises(ValueError, match=r"part sizes \[3, 2\] do not split the 4 rows"):
        draw.split([3, 2])
    with pytest.raises(ValueError, match="rows 2:9 are outside the 4 rows"):
        draw.rows(2, 9)
    with pytest.raises(RuntimeError, match="create the gluon.Trainer"):
        out(mx.nd.ones((4, IN_UNITS)), draw)
    gluon.Trainer(out.collect_params(), "sgd", {"learning_rate": 0.1})
    with pytest.raises(ValueError, match="targets for 3 rows but the batch has 4 rows"):
        out(mx.nd.ones((4, IN_UNITS)), left)
    with pytest.raises(ValueError, match="in_units must be a positive int"):
        SampledOutputRowSparseWeight(NUM_LABELS, in_units=0)
    with pytest.raises(TypeError, match="cannot be hybridized"):
        out(mx.sym.var("h"), draw)
    assert isinstance(left, Candidates) and "3 rows" in repr(left)


def test_check_dist_params_names_the_row_sparse_output():
    plain = SampledOutput(NUM_LABELS, in_units=IN_UNITS)
    with pytest.raises(ValueError, match="SampledOutputRowSparseWeight for SampledOutput"):
        check_dist_params(plain.collect_params(), "dist_sync")
    check_dist_params(SampledOutputRowSparseWeight(NUM_LABELS, in_units=IN_UNITS)
                      .collect_params(), "dist_sync")


def test_kvstore_traffic_counts_payload_bytes():
    kv = mx.kv.create("local")
    traffic = KVStoreTraffic(kv, names=["dense", "rows"])
    kv.init(0, mx.nd.zeros((5, 3)))
    kv.init(1, mx.nd.ones((100, 4)).tostype("row_sparse"))  # 100 stored rows
    assert traffic.initialized == {"dense": 60, "rows": 100 * (16 + 8)}
    kv.push(0, [mx.nd.ones((5, 3)), mx.nd.ones((5, 3))])
    grad = mx.nd.sparse.row_sparse_array((np.ones((2, 4), np.float32), [7, 40]), shape=(100, 4),
                                          dtype=np.float32)
    kv.push(1, grad)
    out = mx.nd.zeros((5, 3))
    kv.pull(0, out=out)
    rows = mx.nd.sparse.zeros("row_sparse", (100, 4))
    kv.row_sparse_pull(1, out=rows, row_ids=mx.nd.array([40, 7, 40, 9], dtype="int64"))
    # Three distinct rows come back: 16 bytes of values and an 8-byte key each,
    # plus the request's 8-byte id per distinct row.
    assert traffic.pushed == {"dense": 120, "rows": 2 * (16 + 8)}
    assert traffic.pulled == {"dense": 60, "rows": 3 * (16 + 8) + 3 * 8}
    assert traffic.total == 120 + 48 + 60 + 96
    np.testing.assert_array_equal(np.sort(rows.indices.asnumpy()), [7, 9, 40])
    traffic.close()
    kv.push(0, mx.nd.ones((5, 3)))
    assert traffic.pushed["dense"] == 120  # no longer counted


def test_parameters_loaded_from_the_plain_block_keep_their_zero_rows(tmp_path):
    # The plain block's softmax bias starts at 0: converted to row_sparse on
    # load, it would store no row at all, and the kvstore's eager Adam (or a
    # dist server) refuses a weight missing rows.
    data = batches(multilabel=False)
    plain = make(SampledOutput, mx.cpu(0), "softmax")
    path = str(tmp_path / "plain.params")
    plain.save_parameters(path)
    out = SampledOutputRowSparseWeight(NUM_LABELS, in_units=IN_UNITS, num_sampled=20, seed=3)
    out.load_parameters(path, ctx=CONTEXTS)
    trainer = gluon.Trainer(out.collect_params(), OPTIMIZERS["sparseadam"](), kvstore="device")
    reference = train_one_device("sparseadam", "softmax", data[:1])
    parts = out.draw_candidates(data[0][1]).split([5, 5])
    with autograd.record():
        losses = [out(mx.nd.array(data[0][0][a:a + 5], ctx=ctx), part).sum()
                  for a, ctx, part in zip((0, 5), CONTEXTS, parts)]
    autograd.backward(losses)
    trainer.step(1)
    for got, expected in zip(dense_weights(out), dense_weights(reference)):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("optimizer", ["sgd", "sparseadam-deferred"])
def test_candidates_in_blocks_give_the_same_training(monkeypatch, optimizer):
    """Past MXNet's 2^31-element input limit (C candidates x L labels) the selector is cut
    into blocks of rows; blocks of 7 candidates train bit for bit as one block, on one
    device and with the weight in the kvstore."""
    from gluon_sparse.nn import sparse_output
    data = batches(multilabel=True)
    runs = []
    for limit in (sparse_output._MAX_INPUT_ELEMENTS, NUM_LABELS * 7 + 1):
        monkeypatch.setattr(sparse_output, "_MAX_INPUT_ELEMENTS", limit)
        runs.append(dense_weights(train_one_device(optimizer, "softmax", data))
                    + dense_weights(train_two_contexts(optimizer, "bce", data)[0]))
    for name, a, b in zip(("weight", "bias", "kvstore weight", "kvstore bias"), *runs):
        np.testing.assert_array_equal(a, b, err_msg=name)


def test_more_candidates_than_one_mxnet_input_holds():
    """10^6 labels, 256 rows of 10 labels and 1,024 draws: ~3,500 candidates, a selector of
    3.5e9 elements, which MXNet refused as one array."""
    num_labels, batch = 10 ** 6, 256
    out = SampledOutput(num_labels, in_units=4, num_sampled=1024, loss="bce", seed=3)
    out.initialize(mx.init.Uniform(0.3))
    trainer = gluon.Trainer(out.collect_params(), "sparseadam", {"deferred": True})
    rng = np.random.default_rng(1)
    ids = rng.integers(0, num_labels, (batch, 10))
    y = sp.csr_matrix((np.ones(ids.size, np.float32), ids.ravel(),
                       np.arange(0, ids.size + 1, 10)), shape=(batch, num_labels))
    y.sum_duplicates()
    assert out.candidates(y, batch)[0].size * num_labels > 2 ** 31
    with autograd.record():
        loss = out(mx.nd.array(rng.standard_normal((batch, 4))), y)
    loss.backward()
    trainer.step(batch)
    assert np.isfinite(loss.asnumpy()).all()
    grad_rows = out.weight.grad().indices.asnumpy()
    np.testing.assert_array_equal(np.unique(grad_rows), grad_rows)


def test_an_empty_part_is_named_as_sampled_outputs_empty_batch_is():
    """A split of fewer rows than parts leaves an empty part: oneDNN's 'could not construct
    a memory descriptor' named none of it."""
    out = SampledOutputRowSparseWeight(100, in_units=4, num_sampled=8, seed=0)
    out.initialize()
    gluon.Trainer(out.collect_params(), "sgd", {"learning_rate": 0.1})
    parts = out.draw_candidates(np.array([3])).split(part_sizes(1, 2))
    assert [p.num_rows for p in parts] == [1, 0]
    with pytest.raises(ValueError, match=r"the batch has no rows \(h has shape \(0, 4\)\)"):
        out(mx.nd.array(np.zeros((0, 4), np.float32)), parts[1])
