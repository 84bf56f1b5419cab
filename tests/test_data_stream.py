"""LibSVMStream: same rows as load_libsvm, bounded memory, repeatable shuffles, errors."""
import gzip
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from gluon_sparse.data import CSRDataset, LibSVMStream, SparseDataLoader, load_libsvm

NUM_FEATURES = 50000


@pytest.fixture(scope="module")
def libsvm_file(tmp_path_factory):
    """About 1.2 MB of one-based LibSVM text whose labels are the row numbers."""
    rng = np.random.default_rng(0)
    lines = []
    for row in range(12000):
        idx = np.sort(rng.choice(NUM_FEATURES, size=rng.integers(1, 15), replace=False)) + 1
        lines.append("%d %s" % (row, " ".join("%d:%.5g" % (j, v) for j, v in zip(idx, rng.random(len(idx))))))
    path = tmp_path_factory.mktemp("stream") / "rows.libsvm"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def read_all(stream):
    datas, labels = [], []
    for data, label in stream:
        assert data.stype == "csr" and data.shape[1] == stream.num_features
        datas.append(data.asscipy())
        labels.append(label.asnumpy())
    return sp.vstack(datas, format="csr"), np.concatenate(labels).astype(np.int64)


@pytest.mark.parametrize("shuffle_buffer", [0, 3000])
def test_stream_yields_every_row_once(libsvm_file, shuffle_buffer):
    X, _ = load_libsvm(libsvm_file, num_features=NUM_FEATURES, zero_based=False)
    stream = LibSVMStream(libsvm_file, batch_size=256, num_features=NUM_FEATURES,
                          chunk_bytes=50000, shuffle_buffer=shuffle_buffer, seed=0)
    data, rows = read_all(stream)
    assert sorted(rows.tolist()) == list(range(X.shape[0]))
    assert (shuffle_buffer == 0) == (rows.tolist() == list(range(X.shape[0])))
    assert (data != X[rows]).nnz == 0


def test_shuffles_repeat_with_the_seed_and_differ_across_epochs(libsvm_file):
    def epochs(stream):
        return [read_all(stream)[1].tolist() for _ in range(2)]

    kwargs = dict(batch_size=500, num_features=NUM_FEATURES, chunk_bytes=100000, shuffle_buffer=2000)
    first = epochs(LibSVMStream(libsvm_file, seed=5, **kwargs))
    assert first == epochs(LibSVMStream(libsvm_file, seed=5, **kwargs))
    assert first[0] != first[1]


def peak_traced_bytes(stream):
    tracemalloc.start()
    try:
        rows = sum(data.shape[0] for data, _ in stream)
        return rows, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_is_bounded_by_the_chunk_not_the_file(libsvm_file):
    chunk_bytes = 40000
    with open(libsvm_file, "rb") as f:
        file_bytes = len(f.read())
    assert file_bytes > 25 * chunk_bytes
    kwargs = dict(batch_size=500, num_features=NUM_FEATURES, chunk_bytes=chunk_bytes,
                  shuffle_buffer=1000, seed=0, prefetch=0)
    rows, peak_once = peak_traced_bytes(LibSVMStream(libsvm_file, **kwargs))
    assert rows == 12000
    # The same file three times: 90 chunks, 36000 rows, and the same peak.
    rows, peak_three_times = peak_traced_bytes(LibSVMStream([libsvm_file] * 3, **kwargs))
    assert rows == 36000
    assert peak_three_times < 1.5 * peak_once  # not 3x: it does not grow with the data
    # Chunk text, its parsed rows and 1000 pooled rows (with shuffle copies): a
    # few chunks' worth, against 3.6 MB of text and ~2.5 MB of parsed arrays.
    assert peak_three_times < 16 * chunk_bytes < 3 * file_bytes / 5


def test_gzip_and_several_files(libsvm_file, tmp_path):
    gz = str(tmp_path / "rows.libsvm.gz")
    with open(libsvm_file, "rb") as src, gzip.open(gz, "wb") as dst:
        dst.write(src.read())
    stream = LibSVMStream([libsvm_file, gz], batch_size=1000, num_features=NUM_FEATURES,
                          chunk_bytes=300000, last_batch="discard")
    _, rows = read_all(stream)
    assert rows.tolist() == list(range(12000)) * 2


def test_errors_name_the_line_across_chunks(tmp_path):
    lines = ["1 %d:1" % (i % 100 + 1) for i in range(5000)]
    lines[4321] = "1 3:bad"
    path = tmp_path / "bad.libsvm"
    path.write_text("\n".join(lines) + "\n")
    stream = LibSVMStream(str(path), batch_size=64, num_features=100, chunk_bytes=1000)
    with pytest.raises(ValueError, match=r"bad\.libsvm, line 4322: invalid feature value in '3:bad'"):
        read_all(stream)
    lines[4321] = "1 101:1"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"line 4322: feature index 101 is out of range for "
                                         r"num_features=100"):
        read_all(LibSVMStream(str(path), batch_size=64, num_features=100, chunk_bytes=1000))


def test_lines_longer_than_a_chunk(tmp_path):
    path = tmp_path / "long.libsvm"
    path.write_text("1 " + " ".join("%d:1" % i for i in range(1, 3000)) + "\n0 5:2\n")
    data, rows = read_all(LibSVMStream(str(path), batch_size=2, num_features=NUM_FEATURES,
                                       chunk_bytes=100))
    assert rows.tolist() == [1, 0] and data[0].nnz == 2999 and data[1].indices.tolist() == [4]


def test_invalid_arguments():
    with pytest.raises(ValueError, match="'auto' would need to read the whole file"):
        LibSVMStream("x", batch_size=2, num_features=3, zero_based="auto")
    with pytest.raises(ValueError, match="last_batch"):
        LibSVMStream("x", batch_size=2, num_features=3, last_batch="rollover")
    with pytest.raises(FileNotFoundError):
        list(LibSVMStream("/nonexistent/file.libsvm", batch_size=2, num_features=3))


@pytest.mark.parametrize("num_parts", [2, 3, 7])
def test_parts_are_the_loaders_even_line_strided_shares(libsvm_file, num_parts):
    # Two files, so the stride continues across the file boundary (12000 + 12000 rows).
    paths = [libsvm_file, libsvm_file]
    X, y = load_libsvm(paths, num_features=NUM_FEATURES, zero_based=False)
    total = X.shape[0]
    shares = []
    for part in range(num_parts):
        stream = LibSVMStream(paths, batch_size=100, num_features=NUM_FEATURES, chunk_bytes=70000,
                              num_parts=num_parts, part_index=part)
        data, rows = read_all(stream)
        expected = np.arange(part, total // num_parts * num_parts, num_parts)
        np.testing.assert_array_equal(rows, y[expected])
        assert (data != X[expected]).nnz == 0
        loader = SparseDataLoader(CSRDataset(X, y), batch_size=100, num_parts=num_parts,
                                  part_index=part, prefetch=0)
        np.testing.assert_array_equal(np.concatenate([l.asnumpy() for _, l in loader]), rows)
        shares.append(expected)
    assert len({len(share) for share in shares}) == 1  # exactly even
    assert sum(len(share) for share in shares) == total - total % num_parts


def test_shuffled_parts_cover_the_share_and_have_equal_batch_counts(libsvm_file):
    X, y = load_libsvm(libsvm_file, num_features=NUM_FEATURES, zero_based=False)
    counts = []
    for part in range(5):  # 12000 rows: 2400 each, 9 full batches of 256 and one of 96
        stream = LibSVMStream(libsvm_file, batch_size=256, num_features=NUM_FEATURES,
                              chunk_bytes=50000, shuffle_buffer=1000, seed=1, num_parts=5,
                              part_index=part, last_batch="discard")
        batches = [label.asnumpy().astype(np.int64) for _, label in stream]
        counts.append(len(batches))
        rows = np.concatenate(batches)
        assert set(rows.tolist()) <= set(np.arange(part, 12000, 5).tolist())
        assert len(rows) == len(set(rows.tolist())) == 9 * 256
    assert counts == [9] * 5


def test_more_parts_than_rows(tmp_path):
    path = tmp_path / "three.libsvm"
    path.write_text("0 1:1\n1 2:1\n2 3:1\n")
    for part in range(4):
        stream = LibSVMStream(str(path), batch_size=2, num_features=5, num_parts=4, part_index=part)
        assert list(stream) == []  # 3 // 4 == 0 rows each
    rows = [read_all(LibSVMStream(str(path), batch_size=2, num_features=5, num_parts=3,
                                  part_index=part))[1].tolist() for part in range(3)]
    assert rows == [[0], [1], [2]]


def test_invalid_partition():
    with pytest.raises(ValueError, match="0 <= part_index < num_parts"):
        LibSVMStream("x", batch_size=2, num_features=3, num_parts=2, part_index=2)
    with pytest.raises(ValueError, match="num_parts >= 1"):
        LibSVMStream("x", batch_size=2, num_features=3, num_parts=0)


@pytest.mark.parametrize("last_batch", ["keep", "discard"])
def test_batches_are_full_across_chunk_and_file_boundaries(libsvm_file, last_batch):
    # 24000 rows in chunks of ~60 rows: most batches join rows of two or more chunks.
    stream = LibSVMStream([libsvm_file, libsvm_file], batch_size=97, num_features=NUM_FEATURES,
                          chunk_bytes=6000, last_batch=last_batch, prefetch=0)
    sizes = [data.shape[0] for data, _ in stream]
    assert sizes[:-1] == [97] * (len(sizes) - 1)
    assert sizes[-1] == (24000 % 97 if last_batch == "keep" else 97)
    assert sum(sizes) == (24000 if last_batch == "keep" else 24000 - 24000 % 97)


@pytest.mark.parametrize("opener", [gzip.compress, __import__("bz2").compress])
def test_a_damaged_compressed_file_is_named_where_the_damage_is(tmp_path, opener):
    """As load_libsvm: the line and bytes of text read before the end of the data (the
    stream read whole chunks with readinto, which drops what it decompressed when the
    stream ends early, and named line 1)."""
    suffix = ".gz" if opener is gzip.compress else ".bz2"
    path = tmp_path / ("cut" + suffix)
    raw = opener(b"".join(b"%d 1:1 2:2\n" % i for i in range(200_000)))
    path.write_bytes(raw[:len(raw) // 2])
    with pytest.raises(ValueError) as whole:
        load_libsvm(str(path))
    with pytest.raises(ValueError) as streamed:
        for _ in LibSVMStream(str(path), batch_size=1000, num_features=3, prefetch=0):
            pass
    line = int(str(whole.value).split("line ")[1].split(":")[0])
    assert line > 1000
    streamed_line = int(str(streamed.value).split("line ")[1].split(":")[0])
    # Within one read of the decompressor of the whole-file reader's position.
    assert abs(streamed_line - line) < 10_000, (str(whole.value), str(streamed.value))


def test_csr_array_input_is_served_as_a_csr_matrix():
    X = sp.random(30, 8, density=0.3, format="csr", random_state=0, dtype=np.float32)
    y = np.arange(30, dtype=np.float32)
    for data in (sp.csr_array(X), sp.coo_array(X)):
        dataset = CSRDataset(data, y)
        assert isinstance(dataset.data, sp.csr_matrix)
        batches = [b.asnumpy() for b, _ in SparseDataLoader(dataset, batch_size=7, prefetch=0)]
        np.testing.assert_array_equal(np.concatenate(batches), X.toarray())
