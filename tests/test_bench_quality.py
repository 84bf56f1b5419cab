"""The data and the summary of benchmarks/bench_quality.py (standard vs lazy Adam AUC)."""
import numpy as np

from benchmarks import bench_quality as bq


def test_ctr_batches_have_40_distinct_zipf_ids_and_planted_labels():
    data = bq.CtrData(features=5000, steps=30, eval_batches=4, seed=7)
    assert len(data.train) == 30 and data.eval_ids.shape == (4 * bq.ROWS, bq.NNZ)
    for ids, labels in data.train:
        assert ids.shape == (bq.ROWS, bq.NNZ) and ids.dtype == np.int64
        assert (np.diff(ids, axis=1) > 0).all()  # sorted, distinct in each row
        assert ids.min() >= 0 and ids.max() < 5000
        assert set(np.unique(labels)) <= {0.0, 1.0}
    counts = np.bincount(np.concatenate([ids.ravel() for ids, _ in data.train]), minlength=5000)
    ranked = np.sort(counts)[::-1]
    # Zipf(1.1): the rank-1000 id is drawn about 10^1.1 = 12.6x less often than the rank-100
    # one (the head saturates instead: a row holds an id at most once, so the top ids are
    # in nearly every row).
    assert 10 < ranked[99] / ranked[999] < 15
    assert ranked[0] > 0.95 * 30 * bq.ROWS
    assert 0.6 < data.bayes_auc < 0.9  # a learnable, not trivial, signal


def test_same_seed_same_bytes():
    a, b = (bq.CtrData(features=2000, steps=3, eval_batches=1, seed=1) for _ in range(2))
    for (ids_a, y_a), (ids_b, y_b) in zip(a.train, b.train):
        np.testing.assert_array_equal(ids_a, ids_b)
        np.testing.assert_array_equal(y_a, y_b)
    c = bq.CtrData(features=2000, steps=3, eval_batches=1, seed=2)
    assert not np.array_equal(a.train[0][0], c.train[0][0])


def test_initial_weights_have_the_framework_layouts():
    shapes = [w.shape for w in bq.initial_weights("mlp", 300, 0)]
    assert shapes == [(300, bq.HIDDEN), (bq.HIDDEN,), (8, bq.HIDDEN), (8,), (1, 8), (1,)]
    assert [w.shape for w in bq.initial_weights("logistic", 300, 0)] == [(300, 1), (1,)]


def test_summary_pairs_each_seed_with_standard_adam():
    aucs = {(0.0, bq.STANDARD, 0): 0.70, (0.0, bq.STANDARD, 1): 0.72,
            (0.0, bq.MX_LAZY, 0): 0.69, (0.0, bq.MX_LAZY, 1): 0.70}
    rows = bq.summarize(aucs, [bq.STANDARD, bq.MX_LAZY], [0.0], [0, 1])
    assert rows[0]["held-out AUC (mean +- std)"] == "0.7100 +- 0.0100"
    assert rows[1]["standard - this (paired, mean +- std)"] == "+0.0150 +- 0.0050"
    assert rows[1]["per seed"] == "0.6900 0.7000"
