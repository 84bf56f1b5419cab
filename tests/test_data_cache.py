"""The binary cache of parsed LibSVM files: whole entries, checksums, clean-up."""
import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
from sklearn.datasets import load_svmlight_file

from gluon_sparse.data import LibSVMDataset
from gluon_sparse.data import cache as data_cache

TEXT = "".join("%d %s\n" % (i % 2, " ".join("%d:%g" % (j, (i + 1) * (j + 0.5))
                                            for j in range(1 + i % 3, 9, 2)))
               for i in range(40))


def entries(cache_dir):
    return sorted(name for name in os.listdir(cache_dir) if not name.startswith("."))


def leftovers(cache_dir):
    return sorted(name for name in os.listdir(cache_dir) if name.startswith("."))


@pytest.fixture
def cached(tmp_path):
    path = tmp_path / "train.libsvm"
    path.write_text(TEXT)
    cache_dir = str(tmp_path / "cache")
    LibSVMDataset(str(path), cache=cache_dir)
    (key,) = entries(cache_dir)
    return str(path), cache_dir, os.path.join(cache_dir, key)


def assert_equals_reference(ds, path):
    X_ref, y_ref = load_svmlight_file(path)
    assert ds.data.shape == X_ref.shape
    assert (ds.data != X_ref.astype(np.float32)).nnz == 0
    np.testing.assert_array_equal(ds.label, y_ref)


def test_an_entry_records_the_size_and_checksum_of_every_file(cached):
    path, cache_dir, entry = cached
    with open(os.path.join(entry, "meta.json")) as f:
        meta = json.load(f)
    import zlib
    for name in ("data", "indices", "indptr", "label"):
        with open(os.path.join(entry, name + ".npy"), "rb") as f:
            raw = f.read()
        assert meta["files"][name] == {"bytes": len(raw), "crc32": zlib.crc32(raw)}
    assert leftovers(cache_dir) == []
    assert_equals_reference(LibSVMDataset(path, cache=cache_dir), path)


def flip_byte(path, position):
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x01]))


def corrupt(entry, how, name):
    target = os.path.join(entry, name)
    size = os.path.getsize(target)
    if how == "flip-last-byte":
        flip_byte(target, size - 1)
    elif how == "flip-header-byte":
        flip_byte(target, 9)
    elif how == "truncate":
        with open(target, "r+b") as f:
            f.truncate(size // 2)
    elif how == "append":
        with open(target, "ab") as f:
            f.write(b"\0" * 8)
    elif how == "delete":
        os.remove(target)
    elif how == "empty":
        open(target, "wb").close()


@pytest.mark.parametrize("name", ["data.npy", "indices.npy", "indptr.npy", "label.npy",
                                  "meta.json"])
@pytest.mark.parametrize("how", ["flip-last-byte", "flip-header-byte", "truncate", "append",
                                 "delete", "empty"])
def test_a_damaged_entry_is_discarded_and_the_file_parsed_again(cached, how, name, caplog):
    path, cache_dir, entry = cached
    corrupt(entry, how, name)
    with caplog.at_level(logging.WARNING, logger="gluon_sparse.data.cache"):
        ds = LibSVMDataset(path, cache=cache_dir)
    assert_equals_reference(ds, path)
    assert any("discarding cache entry %s" % entry in r.getMessage() for r in caplog.records)
    # The entry was written again, whole, and now loads without a warning.
    assert leftovers(cache_dir) == [] and os.path.isdir(entry)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gluon_sparse.data.cache"):
        assert_equals_reference(LibSVMDataset(path, cache=cache_dir), path)
    assert caplog.records == []


@pytest.mark.parametrize("edit", [
    lambda meta: meta.update(shape=[meta["shape"][0], 3]),        # narrower than the indices
    lambda meta: meta.update(shape=[meta["shape"][0] + 1, meta["shape"][1]]),
    lambda meta: meta.update(zero_based=not meta["zero_based"]),
    lambda meta: meta["files"]["data"].update(crc32=0),
])
def test_an_edited_meta_json_is_caught(cached, edit, caplog):
    path, cache_dir, entry = cached
    meta_path = os.path.join(entry, "meta.json")
    with open(meta_path) as f:
        meta = json.load(f)
    edit(meta)
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    assert data_cache.load_cached(os.path.basename(entry), cache_dir) is None
    assert any("discarding" in r.getMessage() for r in caplog.records)
    assert not os.path.exists(entry)
    assert_equals_reference(LibSVMDataset(path, cache=cache_dir), path)


def test_consistent_arrays_with_a_matching_checksum_are_still_checked(cached, caplog):
    # A writer bug (or a forged entry) with valid checksums: indices beyond the width.
    path, cache_dir, entry = cached
    X, y, zero_based = data_cache.load_cached(os.path.basename(entry), cache_dir)
    X = X.copy()
    X.indices[-1] = X.shape[1] + 5
    data_cache.save_cached("forged", cache_dir, X, y, zero_based, [path])
    assert data_cache.load_cached("forged", cache_dir) is None
    assert any("feature indices outside" in r.getMessage() for r in caplog.records)


def test_staging_left_by_a_dead_writer_is_removed_by_the_next_save(cached, tmp_path):
    path, cache_dir, entry = cached
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(dead.stdout)
    stale = os.path.join(cache_dir, ".staging-abc-%d-xyz" % dead_pid)
    discarded = os.path.join(cache_dir, ".discard-abc-%d-0f0f" % dead_pid)
    live = os.path.join(cache_dir, ".staging-abc-%d-xyz" % os.getppid())  # a live writer
    for directory in (stale, discarded, live):
        os.makedirs(directory)
        open(os.path.join(directory, "data.npy"), "wb").close()
    other = tmp_path / "other.libsvm"
    other.write_text("1 1:1\n")
    LibSVMDataset(str(other), cache=cache_dir)  # a save
    assert leftovers(cache_dir) == [os.path.basename(live)]


def test_a_failed_save_leaves_nothing_behind(cached, monkeypatch, caplog):
    path, cache_dir, entry = cached
    X, y, zero_based = data_cache.load_cached(os.path.basename(entry), cache_dir)

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(data_cache.np, "save", fail)
    data_cache.save_cached("full", cache_dir, X, y, zero_based, [path])
    assert leftovers(cache_dir) == [] and "full" not in entries(cache_dir)
    assert any("could not write cache entry" in r.getMessage() for r in caplog.records)


def test_numpy_sizes_and_pathlike_cache_directories(tmp_path):
    """num_features as a NumPy integer keys the same entry as the int (it once failed to
    serialise), and a pathlib cache directory is used, not the default one."""
    path = tmp_path / "train.libsvm"
    path.write_text(TEXT)
    cache_dir = tmp_path / "cache"
    first = LibSVMDataset(str(path), num_features=np.int64(12), cache=cache_dir)
    assert len(entries(cache_dir)) == 1
    again = LibSVMDataset(str(path), num_features=12, cache=str(cache_dir))
    assert len(entries(cache_dir)) == 1 and first.data.shape == again.data.shape == (40, 12)
    assert (first.data != again.data).nnz == 0
    with pytest.raises(ValueError, match="num_features must be a positive integer"):
        LibSVMDataset(str(path), num_features=True, cache=cache_dir)


def test_a_file_replaced_with_its_old_size_and_mtime_is_parsed_again(cached):
    """cp -p, rsync -t and tar give a new file the old one's modification time."""
    path, cache_dir, entry = cached
    old = os.stat(path)
    text = open(path).read()
    changed = text.replace("1:", "2:", 1) if "1:" in text else None
    assert changed is not None and len(changed) == len(text)
    replacement = path + ".new"
    with open(replacement, "w") as f:
        f.write(changed)
    os.replace(replacement, path)
    os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))
    assert os.stat(path).st_size == old.st_size and os.stat(path).st_mtime_ns == old.st_mtime_ns
    assert_equals_reference(LibSVMDataset(path, cache=cache_dir), path)


@pytest.mark.parametrize("meta", [b"null", b"[]", b"0", b'"text"'])
def test_a_meta_json_that_is_not_an_object_is_discarded(cached, meta, caplog):
    path, cache_dir, entry = cached
    with open(os.path.join(entry, "meta.json"), "wb") as f:
        f.write(meta)
    assert_equals_reference(LibSVMDataset(path, cache=cache_dir), path)
    assert any("not an object" in r.getMessage() for r in caplog.records)


def test_threads_of_one_process_writing_entries_keep_each_others_staging(tmp_path):
    """A save removed the staging directories of its own process: another thread's
    write in progress then failed and its entry was never written."""
    import threading
    cache_dir = str(tmp_path / "cache")
    rng = np.random.default_rng(0)
    paths = []
    for i in range(6):
        path = tmp_path / ("part%d.libsvm" % i)
        path.write_text("".join("%d %s\n" % (r % 2, " ".join(
            "%d:%g" % (j + 1, v) for j, v in enumerate(rng.random(40)))) for r in range(3000)))
        paths.append(str(path))
    errors = []

    def load(path):
        try:
            LibSVMDataset(path, cache=cache_dir)
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)
    threads = [threading.Thread(target=load, args=(p,)) for p in paths]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(entries(cache_dir)) == len(paths) and leftovers(cache_dir) == []


def test_an_entry_is_as_readable_as_the_umask_makes_new_files(tmp_path):
    """A shared cache: entries had mkdtemp's mode 0700, which the cache's other users could
    not read (they discarded the entry and wrote their own, in turn unreadable)."""
    path = tmp_path / "train.libsvm"
    path.write_text(TEXT)
    cache_dir = str(tmp_path / "cache")
    old = os.umask(0o022)
    try:
        LibSVMDataset(str(path), cache=cache_dir)
    finally:
        os.umask(old)
    (key,) = entries(cache_dir)
    entry = os.path.join(cache_dir, key)
    assert os.stat(entry).st_mode & 0o777 == 0o755
    for name in os.listdir(entry):
        assert os.stat(os.path.join(entry, name)).st_mode & 0o777 == 0o644, name


def test_an_entry_this_user_cannot_read_is_left_alone(cached, monkeypatch, caplog):
    """Permission denied is another user's entry, not a damaged one: parse, warn, keep."""
    path, cache_dir, entry = cached

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", args[0])

    monkeypatch.setattr(data_cache, "open", denied, raising=False)
    with caplog.at_level(logging.WARNING, logger="gluon_sparse.data.cache"):
        assert_equals_reference(LibSVMDataset(path, cache=cache_dir), path)
    messages = [r.getMessage() for r in caplog.records]
    assert any("cannot read cache entry %s" % entry in m for m in messages), messages
    assert not any("discarding" in m for m in messages)
    assert os.path.isdir(entry) and leftovers(cache_dir) == []
    # And no copy of the data is written (to be thrown away) at every load.
    saved = []
    monkeypatch.setattr(data_cache.np, "save", lambda *a, **k: saved.append(1))
    LibSVMDataset(path, cache=cache_dir)
    assert saved == []
