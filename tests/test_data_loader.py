"""Datasets, samplers, SparseDataLoader and the DataIter adapter against scipy/NumPy/Gluon."""
import os
import threading
import time

import mxnet as mx
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file

from gluon_sparse.data import (BatchSampler, CSRDataset, LibSVMDataset, PartitionSampler,
                               SparseDataLoader, SparseNDArrayIter, csr_to_ndarray, load_libsvm)
from gluon_sparse.data.batchify import array_to_ndarray, stack_samples

HEART_SCALE = "/work/shared/data/heart_scale"


def random_csr(rows=103, cols=5000, seed=0):
    return sp.random(rows, cols, density=0.002, format="csr", dtype=np.float32, random_state=seed)


def collect(loader):
    """All batches of one epoch as (scipy CSR, numpy label) pairs."""
    out = []
    for data, label in loader:
        assert isinstance(data, mx.nd.sparse.CSRNDArray)
        out.append((data.asscipy(), None if label is None else label.asnumpy()))
    return out


def test_libsvm_dataset_attributes_and_items():
    ds = LibSVMDataset(HEART_SCALE)
    X_ref, y_ref = load_svmlight_file(HEART_SCALE, dtype=np.float32)
    assert len(ds) == 270 and ds.num_features == 13
    assert (ds.data != X_ref).nnz == 0
    np.testing.assert_array_equal(ds.label, y_ref)
    row, label = ds[5]
    assert row.shape == (1, 13) and label == y_ref[5]
    np.testing.assert_array_equal(row.toarray(), X_ref[5].toarray())
    with pytest.raises(IndexError):
        ds[270]


def test_libsvm_dataset_cache_is_keyed_by_size_and_mtime(tmp_path):
    path = tmp_path / "train.libsvm"
    path.write_text("1 1:1 3:2\n0 2:5\n")
    cache_dir = str(tmp_path / "cache")
    first = LibSVMDataset(str(path), cache=cache_dir)
    assert len(os.listdir(cache_dir)) == 1
    second = LibSVMDataset(str(path), cache=cache_dir)
    assert (first.data != second.data).nnz == 0
    np.testing.assert_array_equal(first.label, second.label)
    path.write_text("1 1:1 3:2\n0 2:5\n1 4:1\n")  # new size and mtime: a new entry
    third = LibSVMDataset(str(path), cache=cache_dir)
    assert len(third) == 3 and len(os.listdir(cache_dir)) == 2


@pytest.mark.parametrize("text, zero_based, expected", [
    ("1 0:1 3:2\n0 2:5\n", "auto", True), ("1 1:1 3:2\n0 2:5\n", "auto", False),
    ("1 1:1 3:2\n0 2:5\n", True, True), ("1 1:1 3:2\n0 2:5\n", False, False)])
def test_libsvm_dataset_zero_based_is_resolved_and_cached(tmp_path, text, zero_based, expected):
    path = tmp_path / "train.libsvm"
    path.write_text(text)
    cache_dir = str(tmp_path / "cache")
    parsed = LibSVMDataset(str(path), zero_based=zero_based, cache=cache_dir)
    cached = LibSVMDataset(str(path), zero_based=zero_based, cache=cache_dir)
    assert len(os.listdir(cache_dir)) == 1  # the second dataset was read from the cache
    assert parsed.zero_based_ is expected and cached.zero_based_ is expected
    X_ref, _ = load_svmlight_file(str(path), zero_based=expected, dtype=np.float32)
    assert (cached.data != X_ref).nnz == 0 and cached.num_features == X_ref.shape[1]
    assert LibSVMDataset(str(path), zero_based=zero_based).zero_based_ is expected  # no cache


def test_csr_dataset_accepts_sparse_dense_and_checks_labels():
    dense = np.array([[0, 1.5, 0], [2, 0, 0]], dtype=np.float64)
    for data in [dense, sp.coo_matrix(dense), sp.csc_matrix(dense), mx.nd.array(dense).tostype("csr")]:
        ds = CSRDataset(data, np.array([1, 0]))
        assert sp.isspmatrix_csr(ds.data) and ds.data.has_sorted_indices
        np.testing.assert_array_equal(ds.data.toarray(), dense)
    unsorted = sp.csr_matrix((np.array([1.0, 2.0]), np.array([2, 0]), np.array([0, 2])), shape=(1, 3))
    ds = CSRDataset(unsorted)
    assert ds.data.indices.tolist() == [0, 2] and unsorted.indices.tolist() == [2, 0]
    assert ds.label is None
    with pytest.raises(ValueError, match=r"label has shape \(3,\) but data has 2 rows"):
        CSRDataset(dense, np.zeros(3))


@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize("num_workers", [0, 3])
def test_batches_equal_scipy_row_slices(prefetch, num_workers):
    X = random_csr()
    y = np.arange(X.shape[0], dtype=np.float32)
    loader = SparseDataLoader(CSRDataset(X, y), batch_size=10, shuffle=True, seed=3,
                              prefetch=prefetch, num_workers=num_workers)
    batches = collect(loader)
    assert len(batches) == len(loader) == 11
    order = np.concatenate([label for _, label in batches]).astype(np.int64)
    assert sorted(order.tolist()) == list(range(X.shape[0]))
    assert order.tolist() != list(range(X.shape[0]))
    stacked = sp.vstack([data for data, _ in batches], format="csr")
    assert stacked.shape == X.shape
    np.testing.assert_array_equal(stacked.toarray(), X[order].toarray())


def test_two_dimensional_labels_and_dtype():
    X = random_csr(rows=20)
    y = np.arange(40).reshape(20, 2)
    data, label = next(iter(SparseDataLoader(CSRDataset(X, y), batch_size=8, dtype="float64")))
    assert data.dtype == np.float64 and label.dtype == np.float64 and label.shape == (8, 2)
    np.testing.assert_array_equal(label.asnumpy(), y[:8])


def test_seed_repeats_epochs_and_epochs_differ():
    ds = CSRDataset(random_csr(), np.arange(103))

    def epochs(loader, n=3):
        return [np.concatenate([label.asnumpy() for _, label in loader]).tolist() for _ in range(n)]

    run_a = epochs(SparseDataLoader(ds, batch_size=16, shuffle=True, seed=7))
    run_b = epochs(SparseDataLoader(ds, batch_size=16, shuffle=True, seed=7))
    assert run_a == run_b
    assert run_a[0] != run_a[1] != run_a[2]
    assert epochs(SparseDataLoader(ds, batch_size=16, shuffle=True, seed=8))[0] != run_a[0]


@pytest.mark.parametrize("last_batch", ["keep", "discard", "rollover"])
def test_last_batch_matches_gluon_batch_sampler(last_batch):
    ours = SparseDataLoader(CSRDataset(random_csr(rows=23), np.arange(23)), batch_size=5,
                            last_batch=last_batch, prefetch=0)
    gluon = mx.gluon.data.BatchSampler(mx.gluon.data.SequentialSampler(23), 5, last_batch)
    for _ in range(3):
        assert len(ours) == len(gluon)
        expected = [list(b) for b in gluon]
        got = [label.asnumpy().astype(int).tolist() for _, label in ours]
        assert got == expected


def test_partitions_are_disjoint_equal_and_strided():
    ds = CSRDataset(random_csr(rows=103), np.arange(103))
    parts = []
    for k in range(4):
        loader = SparseDataLoader(ds, batch_size=7, shuffle=True, seed=1, num_parts=4, part_index=k)
        labels = np.concatenate([label.asnumpy() for _, label in loader]).astype(int)
        assert len(labels) == 103 // 4 and len(loader) == 4
        assert sorted(labels.tolist()) == list(range(k, 100, 4))
        parts.append(set(labels.tolist()))
    assert set.union(*parts) == set(range(100))
    with pytest.raises(ValueError, match="part_index"):
        SparseDataLoader(ds, batch_size=7, num_parts=4, part_index=4)


def test_samplers_and_batch_sampler_arguments():
    ds = CSRDataset(random_csr(rows=10), np.arange(10))
    reverse = list(range(9, -1, -1))
    got = [label.asnumpy().astype(int).tolist() for _, label in
           SparseDataLoader(ds, batch_size=4, sampler=reverse)]
    assert got == [[9, 8, 7, 6], [5, 4, 3, 2], [1, 0]]
    got = [label.asnumpy().astype(int).tolist() for _, label in
           SparseDataLoader(ds, batch_sampler=[[3, 1], [0]])]
    assert got == [[3, 1], [0]]
    with pytest.raises(ValueError, match="batch_size must be given"):
        SparseDataLoader(ds)
    with pytest.raises(ValueError, match="must not be given with batch_sampler"):
        SparseDataLoader(ds, batch_size=2, batch_sampler=[[0]])
    with pytest.raises(ValueError, match="custom sampler"):
        SparseDataLoader(ds, batch_size=2, sampler=reverse, shuffle=True)
    assert [b.tolist() for b in BatchSampler(PartitionSampler(5), 2)] == [[0, 1], [2, 3], [4]]


def test_generic_gluon_dataset_falls_back_to_stacking_samples():
    X = random_csr(rows=9)
    samples = mx.gluon.data.SimpleDataset([(X[i], float(i)) for i in range(9)])
    batches = collect(SparseDataLoader(samples, batch_size=4))
    np.testing.assert_array_equal(sp.vstack([d for d, _ in batches]).toarray(), X.toarray())
    assert np.concatenate([label for _, label in batches]).tolist() == list(range(9))


def test_unlabelled_dataset_yields_none_labels():
    batches = collect(SparseDataLoader(CSRDataset(random_csr(rows=6)), batch_size=4))
    assert [label for _, label in batches] == [None, None]


def test_ctx_copies_in_background():
    # Threads other tests left behind (tqdm's monitor, ...) are not the loader's.
    before = set(threading.enumerate())
    loader = SparseDataLoader(CSRDataset(random_csr(rows=12), np.arange(12)), batch_size=5,
                              ctx=mx.cpu(0))
    for data, label in loader:
        assert data.context == mx.cpu(0) and label.context == mx.cpu(0)
    assert [t for t in threading.enumerate() if t not in before] == []


def test_data_iter_serves_module_api():
    X, y = load_libsvm(HEART_SCALE)
    loader = SparseDataLoader(CSRDataset(X, (y > 0).astype(np.float32)), batch_size=64)
    it = loader.as_data_iter()
    assert isinstance(it, mx.io.DataIter) and isinstance(it, SparseNDArrayIter)
    assert it.provide_data[0].name == "data" and it.provide_data[0].shape == (64, 13)
    assert it.provide_label[0].name == "softmax_label" and it.provide_label[0].shape == (64,)
    for _ in range(2):
        batches = list(it)
        # The last batch is padded to the full size (MXNet's executors cannot
        # reshape for sparse input) with the epoch's first rows, as LibSVMIter
        # pads: Module.fit and Module.score see real rows, not empty rows labelled 0.
        assert [b.data[0].shape[0] for b in batches] == [64] * 5
        assert [b.pad for b in batches] == [0, 0, 0, 0, 50]
        stacked = sp.vstack([b.data[0].asscipy() for b in batches]).tocsr()
        assert (stacked[:270] != X).nnz == 0 and (stacked[270:] != X[:50]).nnz == 0
        labels = np.concatenate([b.label[0].asnumpy() for b in batches])
        np.testing.assert_array_equal(labels[270:], (y[:50] > 0).astype(np.float32))
        it.reset()

    # A sparse linear model trained through Module.fit reaches a sensible accuracy.
    data = mx.sym.var("data", stype="csr")
    weight = mx.sym.var("weight", shape=(13, 2), stype="row_sparse")
    out = mx.sym.SoftmaxOutput(mx.sym.sparse.dot(data, weight), name="softmax")
    module = mx.mod.Module(out, data_names=["data"], label_names=["softmax_label"])
    module.fit(it, num_epoch=5, optimizer="sgd", optimizer_params={"learning_rate": 0.5},
               initializer=mx.init.Zero())
    it.reset()
    accuracy = dict(module.score(it, "acc"))["accuracy"]
    assert accuracy > 0.75


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("value_dtype", [np.float32, np.float64])
def test_gather_rows_equals_scipy_fancy_indexing(index_dtype, value_dtype):
    from gluon_sparse.data.batchify import gather_rows
    X = random_csr(rows=50).astype(value_dtype)
    X = sp.vstack([X[:7], sp.csr_matrix((1, X.shape[1]), dtype=value_dtype), X[8:]],
                  format="csr")  # row 7 empty
    X.indices, X.indptr = X.indices.astype(index_dtype), X.indptr.astype(index_dtype)
    rows = np.array([7, 3, 3, 49, 0, 7])
    values, indices, indptr = gather_rows(X, rows)
    expected = X[rows]
    assert indices.dtype == indptr.dtype == np.int64 and values.dtype == value_dtype
    np.testing.assert_array_equal(indptr, expected.indptr)
    np.testing.assert_array_equal(indices, expected.indices)
    np.testing.assert_array_equal(values, expected.data)
    for bad in ([50], [-1], [0, 51]):
        with pytest.raises(IndexError, match="out of range for a matrix of 50 rows"):
            gather_rows(X, np.array(bad))


def test_csr_to_ndarray_copies_and_leaves_the_input_writeable():
    from gluon_sparse.data import csr_to_ndarray
    X = random_csr(rows=20)
    nd = csr_to_ndarray(X, dtype="float64")
    assert nd.dtype == np.float64 and (nd.asscipy() != X).nnz == 0
    assert X.data.flags.writeable and X.indices.flags.writeable and X.indptr.flags.writeable
    X.data[:] = 0  # the CSRNDArray owns its own copy
    assert nd.asscipy().count_nonzero() == nd.asscipy().nnz > 0
    empty = csr_to_ndarray(sp.csr_matrix((3, 7), dtype=np.float32))
    assert empty.shape == (3, 7) and empty.asnumpy().sum() == 0


def test_batches_too_wide_for_mxnet_operators_are_warned_about(caplog):
    # 256 x 10^7 counts as 2.56e9 elements: MXNet's wheels refuse such operator inputs.
    wide = sp.csr_matrix((300, 10 ** 7), dtype=np.float32)
    with caplog.at_level("WARNING", logger="gluon_sparse.data.batchify"):
        SparseDataLoader(CSRDataset(wide), batch_size=256)
    assert "Use batch_size <= 214" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="gluon_sparse.data.batchify"):
        SparseDataLoader(CSRDataset(wide), batch_size=200)
    assert caplog.text == ""


@pytest.mark.parametrize("ctx", [mx.cpu(1), mx.cpu_pinned(0)])
def test_batches_land_on_the_cpu_device_asked_for(ctx):
    """Another CPU device id (a model initialised on cpu(1)) gets its batches there, not on
    cpu(0): a hybridized block refuses inputs from two contexts."""
    loader = SparseDataLoader(CSRDataset(random_csr(rows=6), np.arange(6)), batch_size=4,
                              ctx=ctx)
    for data, label in loader:
        assert data.context == ctx and label.context == ctx
        assert data.stype == "csr"


@pytest.mark.parametrize("prefetch", [0, 2])
def test_rollover_after_an_epoch_left_early_does_not_depend_on_prefetch(prefetch):
    """The carry is handed on when an epoch starts: with it set at the epoch's end, a
    break re-used the previous carry without prefetch and the abandoned epoch's with it."""
    def epochs(prefetch):
        loader = SparseDataLoader(CSRDataset(random_csr(rows=250), np.arange(250)),
                                  batch_size=100, last_batch="rollover", prefetch=prefetch)
        first = [label.asnumpy().tolist() for _, label in loader]
        for _, label in loader:
            second = [label.asnumpy().tolist()]
            break
        time.sleep(0.05)  # a background thread may run on to the epoch's end
        third = [label.asnumpy().tolist() for _, label in loader]
        return first, second, third

    first, second, third = epochs(prefetch)
    assert (first, second, third) == epochs(0)
    assert [len(b) for b in first] == [100, 100] and second[0][:50] == list(range(200, 250))
    # The second epoch (50 carried + 250) left nothing over, though only its first
    # batch was taken: the third starts afresh and carries 50 again.
    assert [len(b) for b in third] == [100, 100] and third[0][:3] == [0, 1, 2]


def test_data_iter_pads_after_a_reset_with_the_new_epochs_first_rows():
    X = sp.csr_matrix(np.arange(1, 11, dtype=np.float32).reshape(5, 2))
    it = SparseDataLoader(CSRDataset(X, np.arange(5, dtype=np.float32)), batch_size=4,
                          shuffle=True, seed=3).as_data_iter()
    for _ in range(3):
        batches = list(it)
        assert [b.pad for b in batches] == [0, 3]
        first, last = batches[0], batches[1]
        np.testing.assert_array_equal(last.data[0].asnumpy()[1:], first.data[0].asnumpy()[:3])
        np.testing.assert_array_equal(last.label[0].asnumpy()[1:], first.label[0].asnumpy()[:3])
        it.reset()


class _SlowDataset:
    """A generic dataset whose items take a while (a fetch, a decode), counting calls."""

    def __init__(self, n=120, seconds=0.02):
        self.calls, self._seconds, self._n = 0, seconds, n
        self._lock = threading.Lock()

    def __len__(self):
        return self._n

    def __getitem__(self, i):
        time.sleep(self._seconds)
        with self._lock:
            self.calls += 1
        return np.full(3, i, np.float32), np.float32(i % 2)


@pytest.mark.parametrize("prefetch, num_workers", [(0, 3), (2, 3), (2, 0)])
def test_leaving_an_epoch_early_stops_the_batches_being_built(prefetch, num_workers):
    """Ctrl-C or a break: the builds in flight stop after their current item. The loop
    waited for every batch being built (30 s and more for a slow dataset, twice), and the
    pool's threads held up the interpreter's exit for as long."""
    dataset = _SlowDataset()
    loader = SparseDataLoader(dataset, batch_size=20, num_workers=num_workers,
                              prefetch=prefetch)
    batches = iter(loader)
    first, _ = next(batches)
    np.testing.assert_array_equal(first.asnumpy()[:, 0], np.arange(20))
    at_break = dataset.calls
    batches.close()  # what a break or an exception out of the for loop does
    extra = dataset.calls - at_break
    # At most the item each builder was fetching when told to stop.
    assert extra <= max(num_workers, 1) + 1, extra
    assert not [t for t in threading.enumerate() if t.name.startswith("gluon-sparse")]
    # And the next epoch runs in full.
    assert sum(x.shape[0] for x, _ in loader) == 120


def test_arrays_in_the_other_byte_order_give_their_values():
    """'>f4' data and '>f8' labels (a .npy file from a big-endian machine): MXNet reads
    bytes in this machine's order, so they are converted, never passed through."""
    values = np.array([1.5, 2.0, -3.0], dtype=">f4")
    X = sp.csr_matrix((values, np.array([0, 2, 1]), np.array([0, 2, 3])), shape=(2, 3))
    expected = X.astype(np.float32).toarray()
    np.testing.assert_array_equal(csr_to_ndarray(X).asnumpy(), expected)
    np.testing.assert_array_equal(
        array_to_ndarray(np.array([1.5, 2.0], ">f8")).asnumpy(), [1.5, 2.0])
    dataset = CSRDataset(X, np.array([1.0, 0.0], ">f8"))
    (data, label), = list(SparseDataLoader(dataset, batch_size=2))
    np.testing.assert_array_equal(data.asnumpy(), expected)
    np.testing.assert_array_equal(label.asnumpy(), [1.0, 0.0])


@pytest.mark.parametrize("sampler", [[-5, -4], [-3, -2, -1], [4, -1, 0], [-1]])
def test_negative_sampler_indices_count_from_the_end_as_dataset_items_do(sampler):
    X = sp.csr_matrix(np.arange(100.0, 105.0, dtype=np.float32)[:, None])
    dataset = CSRDataset(X, np.arange(5.0))
    (data, label), = list(SparseDataLoader(dataset, batch_size=len(sampler), sampler=sampler,
                                           prefetch=0))
    expected = [dataset[i] for i in sampler]  # Gluon's item access, Python's indexing
    np.testing.assert_array_equal(data.asnumpy().ravel(),
                                  [row.toarray()[0, 0] for row, _ in expected])
    np.testing.assert_array_equal(label.asnumpy(), [lab for _, lab in expected])


@pytest.mark.parametrize("sampler", [[5], [4, 5], [0, 7], [-6], [-6, -5]])
def test_an_out_of_range_sampler_index_is_named(sampler):
    X = sp.csr_matrix(np.arange(1.0, 6.0, dtype=np.float32)[:, None])
    dataset = CSRDataset(X, np.arange(5.0))
    bad = next(i for i in sampler if not -5 <= i < 5)
    with pytest.raises(IndexError, match=r"row %d is out of range for a matrix of 5 rows" % bad):
        list(SparseDataLoader(dataset, batch_size=len(sampler), sampler=sampler, prefetch=0))


def test_duplicate_columns_in_a_row_are_summed_into_mxnets_csr_format():
    """A scipy matrix built from its parts may hold a column twice in a row; MXNet's CSR
    may not (its format check fails, and densifying keeps one of the values)."""
    X = sp.csr_matrix((np.array([2.0, 1.0, 3.0, 4.0], np.float32), np.array([0, 2, 2, 1]),
                       np.array([0, 3, 4])), shape=(2, 3))
    expected = X.toarray()  # scipy sums duplicates
    dataset = CSRDataset(X, np.zeros(2))
    assert X.indices.tolist() == [0, 2, 2, 1]  # the caller's matrix is left as it was
    for sampler in ([0, 1], [1, 0]):  # the contiguous and the gathered path
        (data, _), = list(SparseDataLoader(dataset, batch_size=2, sampler=sampler, prefetch=0))
        data.check_format(full_check=True)
        np.testing.assert_array_equal(data.asnumpy(), expected[sampler])
    batch = stack_samples([(X[0], 0.0), (X[1], 1.0)])[0]
    batch.check_format(full_check=True)
    np.testing.assert_array_equal(batch.asnumpy(), expected)
