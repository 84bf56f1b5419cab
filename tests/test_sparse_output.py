"""SampledOutput: the sampled losses and their row_sparse gradients against a NumPy
reference, the full losses (sampler='all') against MXNet's own losses, the
samplers' proposals, training with SparseAdam (deferred == eager, bitwise) and
with Gluon's Trainer, hybridization and bad input."""
import mxnet as mx
import numpy as np
import pytest
import scipy.sparse as sp
from mxnet import autograd, gluon

from gluon_sparse.nn import SampledOutput
from gluon_sparse.nn.samplers import (FrequencySampler, LogUniformSampler, UniformSampler,
                                      make_sampler)
from gluon_sparse.optimizer import deferred

L, H, B = 300, 6, 8


def _multilabel(rng, batch, num_labels, max_pos=4, empty_row=True):
    rows = []
    for i in range(batch):
        n = 0 if (empty_row and i == 1) else rng.integers(1, max_pos + 1)
        rows.append(rng.choice(num_labels, n, replace=False))
    indptr = np.cumsum([0] + [len(r) for r in rows])
    ids = np.concatenate(rows).astype(np.int64)
    return sp.csr_matrix((np.ones(ids.size), ids, indptr), shape=(batch, num_labels))


def _block(loss, sampler, dtype="float64", seed=3, **kwargs):
    out = SampledOutput(L, num_sampled=40, sampler=sampler, loss=loss, dtype=dtype, seed=seed,
                        weight_initializer=mx.init.Normal(0.5),
                        bias_initializer=mx.init.Normal(0.5), **kwargs)
    out.initialize()
    return out


def _reference(out, h, labels, seed):
    """Loss and gradients of the sampled loss in NumPy, for the candidates the block drew."""
    out._rng = np.random.default_rng(seed)
    ids, target, corr = out.candidates(labels, h.shape[0])
    W = out.weight.data().asnumpy()[ids]
    b = out.bias.data().asnumpy()[ids, 0]
    x = h @ W.T + b
    if out._loss == "softmax":
        z = x - corr
        z = z - z.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        loss = -(target * logp).sum(axis=1)
        g = np.exp(logp) * target.sum(axis=1, keepdims=True) - target
    else:
        # Sampled sigmoid cross-entropy: unweighted, logits corrected by log p.
        z = x - corr
        loss = (np.logaddexp(0, z) - z * target).sum(axis=1)
        g = 1 / (1 + np.exp(-z)) - target
    return ids, loss, g.T @ h, g.sum(axis=0), g @ W


def _run(out, h, labels, seed):
    out._rng = np.random.default_rng(seed)
    hx = mx.nd.array(h, dtype=out.weight.dtype)
    hx.attach_grad()
    with autograd.record():
        loss = out(hx, labels)
    loss.backward()
    return loss.asnumpy(), out.weight.grad(), out.bias.grad(), hx.grad.asnumpy()


@pytest.mark.parametrize("loss", ["softmax", "bce"])
@pytest.mark.parametrize("sampler", ["uniform", "log_uniform", "frequency", "in_batch"])
@pytest.mark.parametrize("multilabel", [False, True])
def test_loss_and_gradients_match_numpy(loss, sampler, multilabel):
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 50, size=L) if sampler == "frequency" else None
    out = _block(loss, sampler, label_counts=counts)
    h = rng.standard_normal((B, H))
    labels = _multilabel(rng, B, L) if multilabel else rng.integers(0, L, size=B)
    got_loss, gw, gb, gh = _run(out, h, labels, seed=11)
    ids, loss_ref, gw_ref, gb_ref, gh_ref = _reference(out, h, labels, seed=11)
    if sampler != "in_batch":
        assert ids.size > len(np.unique(labels.indices if multilabel else labels))
    np.testing.assert_allclose(got_loss, loss_ref, rtol=1e-10, atol=1e-12)
    assert gw.stype == "row_sparse" and gb.stype == "row_sparse"
    np.testing.assert_array_equal(gw.indices.asnumpy(), ids)
    np.testing.assert_array_equal(gb.indices.asnumpy(), ids)
    np.testing.assert_allclose(gw.data.asnumpy(), gw_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gb.data.asnumpy()[:, 0], gb_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gh, gh_ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("loss", ["softmax", "bce"])
def test_candidates_and_corrections_follow_the_sampler(loss):
    """The candidates are the positives joined with the draws; the correction is
    log(1 - (1 - q) ** K) (computed naively here) for drawn labels, 0 for positives."""
    rng = np.random.default_rng(7)
    out = _block(loss, "log_uniform")
    labels = _multilabel(rng, B, L)
    out._rng = np.random.default_rng(21)
    ids, target, corr = out.candidates(labels, B)
    drawn = out.sampler.sample(np.random.default_rng(21), 40)
    np.testing.assert_array_equal(ids, np.union1d(labels.indices, drawn))
    q = np.log1p(1 / (ids + 1.0)) / np.log1p(L)
    positive = np.isin(ids, labels.indices)
    np.testing.assert_allclose(corr[~positive], np.log(1 - (1 - q[~positive]) ** 40), rtol=1e-9)
    assert np.all(corr[positive] == 0) and np.all(corr[~positive] < 0)
    dense = labels.toarray()[:, ids] > 0
    if loss == "bce":
        np.testing.assert_array_equal(target, dense.astype(float))
    else:
        counts = np.maximum(dense.sum(axis=1, keepdims=True), 1)
        np.testing.assert_allclose(target, dense / counts)


def test_unique_draws_distinct_negatives_corrected_by_their_tries():
    """unique=True: draws until num_sampled distinct non-positive labels have come up;
    each is corrected with log(1 - (1 - q) ** tries), tries the draws it took (replayed
    here from the same random stream)."""
    rng = np.random.default_rng(7)
    out = _block("softmax", "log_uniform", unique=True)
    labels = _multilabel(rng, B, L)
    positives = np.unique(labels.indices)
    out._rng = np.random.default_rng(21)
    ids, _, corr = out.candidates(labels, B)
    stream = np.random.default_rng(21).random(100_000)
    draws = np.clip(np.floor(np.expm1(stream * np.log1p(L))).astype(np.int64), 0, L - 1)
    seen = []
    for tries, label in enumerate(draws, start=1):
        if label not in positives and label not in seen:
            seen.append(label)
            if len(seen) == 40:
                break
    np.testing.assert_array_equal(ids, np.union1d(positives, seen))
    negative = ~np.isin(ids, positives)
    q = np.log1p(1 / (ids[negative] + 1.0)) / np.log1p(L)
    np.testing.assert_allclose(corr[negative], np.log(1 - (1 - q) ** tries), rtol=1e-9)
    assert np.all(corr[~negative] == 0)


@pytest.mark.parametrize("sampler", ["uniform", "log_uniform", "frequency", "in_batch"])
def test_unique_draws_with_every_sampler(sampler):
    """unique=True ends with every sampler ('in_batch' draws nothing: no negatives)."""
    rng = np.random.default_rng(4)
    labels = rng.integers(0, L, size=B)
    out = _block("softmax", sampler, unique=True, label_counts=np.arange(L) % 7)
    ids, _, corr = out.candidates(labels, B)
    negatives = np.setdiff1d(ids, labels)
    assert negatives.size == (0 if sampler == "in_batch" else 40)
    assert np.all(corr[np.isin(ids, labels)] == 0)


def test_unique_covering_every_label_is_the_exact_loss():
    """unique=True with num_sampled >= the non-positive labels: every label, no correction."""
    rng = np.random.default_rng(2)
    labels = rng.integers(0, L, size=B)
    out = SampledOutput(L, num_sampled=L, unique=True, seed=0)
    out.initialize()
    ids, target, corr = out.candidates(labels, B)
    np.testing.assert_array_equal(ids, np.arange(L))
    assert not corr.any()
    np.testing.assert_array_equal(target.argmax(axis=1), labels)


def test_bce_bias_starts_at_the_prior_logit():
    out = SampledOutput(1001, in_units=4, loss="bce")
    out.initialize()
    np.testing.assert_allclose(out.bias.data().asnumpy(), -np.log(1000.0), rtol=1e-6)
    out = SampledOutput(1001, in_units=4, loss="softmax")
    out.initialize()
    assert np.all(out.bias.data().asnumpy() == 0)


def _dense_logits(out, h):
    W = mx.nd.array(out.weight.data().asnumpy())
    b = mx.nd.array(out.bias.data().asnumpy()[:, 0])
    W.attach_grad()
    b.attach_grad()
    return W, b


@pytest.mark.parametrize("kind", ["multiclass", "multilabel", "bce"])
def test_all_labels_equal_mxnet_full_losses(kind):
    rng = np.random.default_rng(1)
    loss = "bce" if kind == "bce" else "softmax"
    out = _block(loss, "all", dtype="float32")
    h = rng.standard_normal((B, H)).astype(np.float32)
    if kind == "multiclass":
        labels = rng.integers(0, L, size=B)
    else:
        labels = _multilabel(rng, B, L, empty_row=False)
    got, gw, gb, _ = _run(out, h, labels, seed=0)
    W, b = _dense_logits(out, h)
    with autograd.record():
        logits = mx.nd.FullyConnected(mx.nd.array(h), W, b, num_hidden=L)
        if kind == "multiclass":
            ref = gluon.loss.SoftmaxCrossEntropyLoss()(logits, mx.nd.array(labels))
        elif kind == "multilabel":
            dense = labels.toarray()
            target = dense / dense.sum(axis=1, keepdims=True)
            ref = gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=False)(
                logits, mx.nd.array(target))
        else:
            ref = gluon.loss.SigmoidBinaryCrossEntropyLoss()(
                logits, mx.nd.array(labels.toarray())) * L
    ref.backward()
    np.testing.assert_allclose(got, ref.asnumpy(), rtol=2e-5, atol=1e-5)
    np.testing.assert_array_equal(gw.indices.asnumpy(), np.arange(L))
    np.testing.assert_allclose(gw.data.asnumpy(), W.grad.asnumpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gb.data.asnumpy()[:, 0], b.grad.asnumpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("sampler", [UniformSampler(1000), LogUniformSampler(1000),
                                     FrequencySampler(np.arange(1000) % 17, alpha=0.5)])
def test_sampler_draws_follow_its_probabilities(sampler):
    q = sampler.probability(np.arange(1000))
    assert abs(q.sum() - 1) < 1e-9
    draws = sampler.sample(np.random.default_rng(0), 400000)
    freq = np.bincount(draws, minlength=1000) / draws.size
    # 5 standard deviations of a binomial proportion.
    assert np.all(np.abs(freq - q) <= 5 * np.sqrt(q * (1 - q) / draws.size) + 1e-6)
    # Inclusion in 30 draws, against its closed form computed naively.
    np.testing.assert_allclose(np.exp(sampler.log_inclusion(np.arange(1000), 30)),
                               1 - (1 - q) ** 30, rtol=1e-9)


def _net(seed, **kwargs):
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(H, activation="relu", in_units=12))
    net.add(SampledOutput(L, in_units=H, num_sampled=20, seed=seed, **kwargs))
    net.initialize(mx.init.Normal(0.3))
    return net


def _steps(net, trainer, steps):
    """``steps`` training steps of ``net`` on batches of one generator; their losses."""
    rng = np.random.default_rng(5)
    losses = []
    for _ in range(steps):
        x = mx.nd.array(rng.standard_normal((B, 12)))
        labels = _multilabel(rng, B, L)
        with autograd.record():
            loss = net[1](net[0](x), labels)
        loss.backward()
        trainer.step(B)
        losses.append(loss.asnumpy())
    return losses


def _train(net, optimizer, opt_args, steps=30, hybridize=False):
    out = net[1]
    if hybridize:
        net[0].hybridize()
        out.hybridize()
    trainer = gluon.Trainer(net.collect_params(), optimizer, opt_args)
    losses = _steps(net, trainer, steps)
    if opt_args.get("deferred"):
        # The output layer's weight and bias are the deferred ones (the Dense has dense grads).
        states = trainer._updaters[0].states.values()
        assert sum(isinstance(s, deferred.DeferredAdamState) for s in states) == 2
    deferred.flush(trainer)
    return np.array(losses), {k[len(net.prefix):]: v.data().asnumpy()
                              for k, v in net.collect_params().items()}


@pytest.mark.parametrize("loss", ["softmax", "bce"])
def test_deferred_sparseadam_equals_eager_bitwise(loss):
    args = {"learning_rate": 0.05, "wd": 0.01}
    losses_e, eager = _train(_net(2, loss=loss), "sparseadam", dict(args, deferred=False))
    losses_d, defer = _train(_net(2, loss=loss), "sparseadam", dict(args, deferred=True))
    np.testing.assert_array_equal(losses_d, losses_e)
    for name in eager:
        np.testing.assert_array_equal(defer[name], eager[name], err_msg=name)


def test_deferred_moves_unsampled_rows_like_standard_adam():
    args = {"learning_rate": 0.05, "wd": 0.01}
    net = _net(4)
    init = net[1].weight.data().asnumpy().copy()
    _train(net, "sparseadam", dict(args, deferred=True), steps=5)
    weight = net[1].weight.data().asnumpy()
    moved = np.abs(weight - init).max(axis=1) > 0
    assert moved.all()  # weight decay reaches every row, sampled or not


def test_trains_with_plain_trainer_and_hybridized_equals_imperative():
    losses_i, imp = _train(_net(3), "adam", {"learning_rate": 0.01}, steps=10)
    losses_h, hyb = _train(_net(3), "adam", {"learning_rate": 0.01}, steps=10, hybridize=True)
    np.testing.assert_allclose(losses_h, losses_i, rtol=1e-5)
    for name in imp:
        np.testing.assert_allclose(hyb[name], imp[name], rtol=1e-4, atol=1e-6)
    assert losses_i[-3:].mean() < losses_i[:3].mean()


def test_top_k_reads_deferred_rows_up_to_date():
    net = _net(6)
    _train(net, "sparseadam", {"learning_rate": 0.05, "wd": 0.01, "deferred": True}, steps=4)
    out = net[1]
    h = mx.nd.array(np.random.default_rng(0).standard_normal((5, H)))
    ids, scores = out.top_k(h, 7, label_chunk=64)
    full = out.scores(h).asnumpy()
    ref = np.argsort(-full, axis=1, kind="stable")[:, :7]
    np.testing.assert_array_equal(ids, ref)
    np.testing.assert_allclose(scores, np.take_along_axis(full, ref, axis=1), rtol=1e-5)


def test_bad_input_is_named():
    out = _block("softmax", "uniform")
    h = mx.nd.ones((3, H), dtype="float64")
    with pytest.raises(ValueError, match=r"label 300 of example 2 is outside \[0, 300\)"):
        out(h, np.array([0, 1, 300]))
    with pytest.raises(ValueError, match="label indicator has shape"):
        out(h, sp.csr_matrix((3, L + 1)))
    # An MXNet CSR indicator is not checked against its shape (a one-based id would be
    # a candidate past the weight's end), and its values must be 0 or 1.
    beyond = mx.nd.sparse.csr_matrix((np.ones(2, np.float32), np.array([4, L]),
                                      np.array([0, 1, 1, 2])), shape=(3, L))
    with pytest.raises(ValueError, match=r"label 300 of example 2 is outside \[0, 300\)"):
        out(h, beyond)
    with pytest.raises(ValueError, match="holds 0 and 1; example 1 has 0.5 for label 7"):
        out(h, sp.csr_matrix((np.array([1.0, 0.5]), np.array([4, 7]), np.array([0, 1, 2, 2])),
                             shape=(3, L)))
    with pytest.raises(TypeError, match="float64 parameters but h is float32"):
        out(mx.nd.ones((3, H)), np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="1-D array of 3 label ids"):
        out(h, np.array([0, 1]))
    with pytest.raises(ValueError, match="inputs of width 6"):
        out(mx.nd.ones((3, H + 1), dtype="float64"), np.array([0, 1, 2]))
    with pytest.raises(TypeError, match="float64 parameters but h is float32"):
        out.scores(mx.nd.ones((3, H)))
    with pytest.raises(ValueError, match="needs label_counts"):
        make_sampler("frequency", 10)
    with pytest.raises(ValueError, match="loss must be"):
        SampledOutput(10, loss="hinge")


def test_in_batch_negatives_stay_in_batch_with_unique():
    """num_sampled is moot for in-batch negatives; with unique=True it once made the
    candidates every label (num_sampled >= L - positives)."""
    for unique in (False, True):
        out = SampledOutput(1000, in_units=4, sampler="in_batch", num_sampled=1024,
                            unique=unique, seed=0)
        ids, _, correction = out.candidates(np.array([3, 17, 42, 3]), 4)
        assert ids.tolist() == [3, 17, 42] and not correction.any()


def _planted(rng, rows, num_labels, num_features=600, owned=6, shown=4):
    """Rows with 1-3 labels (popularity ~ Zipf), each showing `shown` of its labels' features."""
    owners = rng.integers(0, num_features, size=(num_labels, owned))
    X = np.zeros((rows, num_features), dtype=np.float32)
    indptr, ids = [0], []
    for i in range(rows):
        labels = np.unique(np.minimum(rng.zipf(1.3, size=rng.integers(1, 4)) - 1, num_labels - 1))
        for label in labels:
            X[i, rng.choice(owners[label], shown, replace=False)] = 1
        X[i, rng.integers(0, num_features, 3)] = 1
        ids.extend(labels)
        indptr.append(len(ids))
    Y = sp.csr_matrix((np.ones(len(ids)), ids, indptr), shape=(rows, num_labels))
    return X / np.linalg.norm(X, axis=1, keepdims=True), Y


def test_sampled_bce_beats_label_popularity_on_planted_data():
    """Sampled BCE (log-uniform negatives, far fewer than the labels) learns the
    planted labels: precision@1 well above always answering the most popular label."""
    from gluon_sparse.nn.topk import precision_at_k
    rng = np.random.default_rng(0)
    num_labels, rows, test = 500, 3000, 600
    X, Y = _planted(rng, rows + test, num_labels)
    X, Xt, Y, Yt = X[:rows], X[rows:], Y[:rows], Y[rows:]
    mx.random.seed(0)
    hidden = gluon.nn.Dense(64, activation="relu", in_units=X.shape[1])
    out = SampledOutput(num_labels, in_units=64, num_sampled=50, loss="bce", seed=0)
    hidden.initialize()
    out.initialize()
    params = hidden.collect_params()
    params.update(out.collect_params())
    trainer = gluon.Trainer(params, "sparseadam", {"learning_rate": 5e-3, "deferred": True})
    for _ in range(4):
        order = rng.permutation(rows)
        for b in range(0, rows, 64):
            idx = np.sort(order[b:b + 64])
            with autograd.record():
                loss = out(hidden(mx.nd.array(X[idx])), Y[idx])
            loss.backward()
            trainer.step(idx.size)
    ids, _ = out.top_k(hidden(mx.nd.array(Xt)), 1)
    popular = np.argmax(np.asarray(Y.sum(axis=0)).ravel())
    baseline = precision_at_k(Yt, np.full((test, 1), popular), 1)
    p_at_1 = precision_at_k(Yt, ids, 1)
    assert baseline < 0.7
    assert p_at_1 > baseline + 0.2, (p_at_1, baseline)


@pytest.mark.parametrize("loss,multilabel", [("softmax", False), ("softmax", True),
                                             ("bce", True)])
def test_float32_paths_match_numpy(loss, multilabel):
    # float32 takes MXNet's oneDNN kernels (FullyConnected, softrelu): float32 round-off.
    rng = np.random.default_rng(1)
    out = _block(loss, "log_uniform", dtype="float32")
    h = rng.standard_normal((B, H)).astype(np.float32)
    labels = _multilabel(rng, B, L) if multilabel else rng.integers(0, L, size=B)
    got_loss, gw, gb, gh = _run(out, h, labels, seed=4)
    ids, loss_ref, gw_ref, gb_ref, gh_ref = _reference(out, h.astype(np.float64), labels, seed=4)
    np.testing.assert_allclose(got_loss, loss_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(gw.indices.asnumpy(), ids)
    np.testing.assert_allclose(gw.data.asnumpy(), gw_ref, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(gb.data.asnumpy()[:, 0], gb_ref, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(gh, gh_ref, rtol=1e-3, atol=1e-4)


def test_one_label_rows_give_the_same_loss_as_ids_or_as_an_indicator():
    # Multi-class ids take the picked-column path, an indicator the target matrix.
    rng = np.random.default_rng(2)
    h = rng.standard_normal((B, H))
    ids = rng.integers(0, L, size=B)
    indicator = sp.csr_matrix((np.ones(B), ids, np.arange(B + 1)), shape=(B, L))
    out = _block("softmax", "uniform")
    results = [_run(out, h, labels, seed=9) for labels in (ids, indicator)]
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1].data.asnumpy(), results[1][1].data.asnumpy())
    np.testing.assert_array_equal(results[0][3], results[1][3])


@pytest.mark.parametrize("loss", ["softmax", "bce"])
def test_symbolic_graph_equals_the_imperative_loss(loss):
    # hybridize() leaves the layer imperative; a symbol (export) still builds the graph.
    rng = np.random.default_rng(3)
    out = _block(loss, "uniform")
    out.hybridize()
    h = rng.standard_normal((B, H))
    labels = _multilabel(rng, B, L)
    got, _, _, _ = _run(out, h, labels, seed=2)
    out._rng = np.random.default_rng(2)
    cand, target, corr = out.candidates(labels, B)
    selector = sp.csr_matrix((np.ones(cand.size), cand, np.arange(cand.size + 1)),
                             shape=(cand.size, L))
    names = ("h", "selector", "target", "correction")
    graph = out(*[mx.sym.var(name) for name in names])
    values = dict(zip(names, (mx.nd.array(h, dtype="float64"),
                              mx.nd.sparse.csr_matrix(selector, dtype="float64"),
                              mx.nd.array(target, dtype="float64"),
                              mx.nd.array(corr, dtype="float64"))))
    values.update({p.name: p.data() for p in out.collect_params().values()})
    np.testing.assert_allclose(graph.eval(mx.cpu(), **values)[0].asnumpy(), got, rtol=1e-10)


def test_the_callers_label_matrix_is_left_as_given():
    """The layer drops stored zeros and merges repeated ids on its own copy: it used to
    rewrite the caller's arrays, and the next epoch over the same matrix then failed."""
    layer = SampledOutput(10, in_units=3, num_sampled=4, sampler="uniform", seed=0)
    layer.initialize()
    h = mx.nd.ones((2, 3))
    Y = sp.csr_matrix((np.array([1.0, 1.0, 0.0, 1.0]), np.array([4, 4, 2, 7]),
                       np.array([0, 3, 4])), shape=(2, 10))
    arrays = [a.copy() for a in (Y.data, Y.indices, Y.indptr)]
    first = layer(h, Y).asnumpy()
    for before, after in zip(arrays, (Y.data, Y.indices, Y.indptr)):
        np.testing.assert_array_equal(after, before)
    layer(h, Y)  # a second pass over the same batch
    canonical = sp.csr_matrix((np.array([1.0, 1.0]), np.array([4, 7]), np.array([0, 1, 2])),
                              shape=(2, 10))
    fresh = SampledOutput(10, in_units=3, num_sampled=4, sampler="uniform", seed=0)
    fresh.initialize()
    fresh.weight.set_data(layer.weight.data())
    np.testing.assert_array_equal(fresh(h, canonical).asnumpy(), first)


def test_an_empty_batch_is_named():
    layer = SampledOutput(10, in_units=3, num_sampled=4, sampler="uniform", seed=0)
    layer.initialize()
    with pytest.raises(ValueError, match=r"the batch has no rows \(h has shape \(0, 3\)\)"):
        layer(mx.nd.array(np.zeros((0, 3), np.float32)), np.zeros(0, np.int64))


@pytest.mark.parametrize("layer", ["dense", "row_sparse"])
@pytest.mark.parametrize("loss", ["softmax", "bce"])
@pytest.mark.parametrize("draws", [dict(sampler="in_batch"), dict(num_sampled=0)])
def test_a_batch_without_candidates_has_loss_and_gradient_zero(layer, loss, draws):
    """No positive in the batch and nothing drawn: every example contributes 0. One
    stand-in candidate keeps MXNet's shapes non-empty (they failed to infer), and gives no
    row a gradient: MXNet's lazy Adam, given label 0's zero row, stepped it."""
    from gluon_sparse.nn import SampledOutputRowSparseWeight
    cls = SampledOutput if layer == "dense" else SampledOutputRowSparseWeight
    out = cls(10, in_units=3, loss=loss, seed=0, **draws)
    out.initialize(mx.init.Normal(1.0))
    trainer = gluon.Trainer(out.collect_params(), "adam", {"learning_rate": 0.1})
    rng = np.random.default_rng(0)
    h = mx.nd.array(rng.normal(size=(2, 3)))
    # A first batch with labels 0 and 2: their rows have Adam state (momentum) now.
    with autograd.record():
        losses = out(h, sp.csr_matrix(([1.0, 1.0], [0, 2], [0, 1, 2]), shape=(2, 10)))
    losses.backward()
    trainer.step(2)
    before = [p.asnumpy() for p in out._dense_params(mx.cpu()) if p is not None]
    h.attach_grad()
    with autograd.record():
        losses = out(h, sp.csr_matrix((2, 10)))
    losses.backward()
    np.testing.assert_array_equal(losses.asnumpy(), [0.0, 0.0])
    np.testing.assert_array_equal(h.grad.asnumpy(), np.zeros((2, 3)))
    trainer.step(2)
    after = [p.asnumpy() for p in out._dense_params(mx.cpu()) if p is not None]
    for b, a in zip(before, after):
        np.testing.assert_array_equal(a, b)


class _ScoresInForward(gluon.Block):
    """An inference branch: all-label scores computed inside a forward pass."""

    def __init__(self, output):
        super().__init__()
        self.output = output

    def forward(self, h):
        return self.output.scores(h)


def test_scores_inside_a_forward_pass_read_caught_up_rows():
    # data() does not flush inside a forward pass: scores() and top_k() read rows the
    # deferred optimizer still owed steps (3930 of 4000 scores differed).
    def run(is_deferred):
        net = _net(7)
        trainer = gluon.Trainer(net.collect_params(), "sparseadam",
                                {"learning_rate": 0.05, "wd": 0.01, "deferred": is_deferred})
        _steps(net, trainer, 6)  # and no flush
        h = mx.nd.array(np.random.default_rng(0).standard_normal((5, H)))
        return _ScoresInForward(net[1])(h).asnumpy()
    np.testing.assert_array_equal(run(True), run(False))


def test_label_counts_as_an_mxnet_array_draw_as_numpy_counts():
    counts = np.arange(L) % 7
    draws = []
    for given in (counts, mx.nd.array(counts)):
        out = _block("softmax", "frequency", label_counts=given)
        out._rng = np.random.default_rng(0)
        draws.append(out.candidates(np.array([0, 1, 2]), 3)[0])
    np.testing.assert_array_equal(draws[0], draws[1])
