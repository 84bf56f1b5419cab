"""Binary cache of parsed LibSVM files.

Parsing text is the slow part of loading; the parsed arrays are saved as
``.npy`` files so that a later run reads them at disk speed. An entry is keyed
by the absolute path, device, inode, size, modification and status-change
times of every source file plus the parse options, so editing or replacing a
file invalidates its entry, also when the replacement is given the old file's
size and modification time (``cp -p``, ``rsync -t`` and ``tar`` set it; the
status-change time is the kernel's, which no program sets back).

Entries are crash-safe and checked:

* an entry is written into a hidden staging directory (each file through
  :func:`gluon_sparse._fileio.atomic_file`, flushed to disk) and renamed into
  place once, so a reader sees a whole entry or none, whatever happens to the
  writer; staging directories of writers that died are removed by the next save;
* ``meta.json`` records the size and CRC-32 of every array file, and its own
  fields carry a CRC-32 too. A load checks them over the bytes it reads anyway
  (about 1 GB/s) and the CSR structure; an entry that fails (a disk error, a
  truncated or edited file) is logged, discarded and the files are parsed
  again. CRC-32 catches corruption, not a deliberate forgery.
"""
import contextlib
import hashlib
import io
import json
import logging
import os
import shutil
import tempfile
import zlib

import numpy as np
import scipy.sparse as sp

from .._fileio import _publish_mode, atomic_file, fsync_directory, process_exists

__all__ = ["default_cache_dir", "load_cached", "save_cached", "cache_key"]

logger = logging.getLogger(__name__)

# 2: meta.json records the resolved index base (zero_based).
# 3: meta.json records each file's size and CRC-32 and its own CRC-32.
_FORMAT_VERSION = 3
_ARRAYS = ("data", "indices", "indptr", "label")
_KINDS = {"data": "f", "indices": "i", "indptr": "i", "label": "f"}
# Hidden names of directories that are not entries (yet, or any more).
_STAGING_PREFIX = ".staging-"
_DISCARD_PREFIX = ".discard-"


class CorruptEntry(ValueError):
    """A cache entry whose files do not match what its meta.json records."""


def default_cache_dir():
    """``$GLUON_SPARSE_CACHE_DIR``, else ``$XDG_CACHE_HOME/gluon_sparse/libsvm``
    (``~/.cache/gluon_sparse/libsvm``)."""
    explicit = os.environ.get("GLUON_SPARSE_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gluon_sparse", "libsvm")


def cache_key(paths, options):
    """Hex digest identifying ``paths`` (path, device, inode, size, mtime, ctime) parsed
    with ``options``.

    Raises
    ------
    FileNotFoundError
        If a path does not exist.
    """
    sources = []
    for path in paths:
        stat = os.stat(path)
        sources.append([os.path.abspath(path), stat.st_dev, stat.st_ino, stat.st_size,
                        stat.st_mtime_ns, stat.st_ctime_ns])
    record = json.dumps({"version": _FORMAT_VERSION, "sources": sources, "options": options},
                        sort_keys=True)
    return hashlib.sha256(record.encode()).hexdigest()[:32]


def _meta_checksum(meta):
    fields = {k: v for k, v in meta.items() if k != "meta_crc32"}
    return zlib.crc32(json.dumps(fields, sort_keys=True).encode())


def _read_array(entry, name, record):
    """Read ``name.npy`` of ``entry``, checking its size and CRC-32 against ``record``."""
    path = os.path.join(entry, name + ".npy")
    size = int(record["bytes"])
    raw = bytearray(size + 1)  # one spare byte: a file that grew is caught too
    with open(path, "rb") as f, memoryview(raw) as view:
        read = f.readinto(view)
        while read < len(raw):
            more = f.readinto(view[read:])
            if not more:
                break
            read += more
    if read != size:
        raise CorruptEntry("%s has %d bytes, meta.json records %d" % (path, read, size))
    del raw[size:]
    if zlib.crc32(raw) != int(record["crc32"]):
        raise CorruptEntry("%s does not match its checksum" % path)
    # The .npy header is parsed here so that the array is a view of the bytes
    # just checked, not a second read or copy.
    stream = io.BytesIO(raw)
    version = np.lib.format.read_magic(stream)
    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                   else np.lib.format.read_array_header_2_0)
    shape, fortran, dtype = read_header(stream)
    if fortran or len(shape) != 1 or dtype.kind != _KINDS[name]:
        raise CorruptEntry("%s: expected a 1-D array of kind %r, got shape %s, dtype %s"
                           % (path, _KINDS[name], shape, dtype))
    return np.frombuffer(raw, dtype=dtype, count=shape[0], offset=stream.tell())


def _check_structure(meta, arrays):
    """Cheap CSR invariants; with the checksums these make a loaded entry safe to batch."""
    rows, cols = (int(n) for n in meta["shape"])
    data, indices, indptr, label = (arrays[name] for name in _ARRAYS)
    problems = []
    if indptr.size != rows + 1 or label.size != rows:
        problems.append("%d row pointers and %d labels for %d rows"
                        % (indptr.size, label.size, rows))
    elif indptr[0] != 0 or indptr[-1] != data.size or data.size != indices.size:
        problems.append("row pointers do not span the %d values" % data.size)
    elif indices.size and (indices.min() < 0 or indices.max() >= cols):
        problems.append("feature indices outside [0, %d)" % cols)
    elif rows and np.any(np.diff(indptr) < 0):
        problems.append("decreasing row pointers")
    if problems:
        raise CorruptEntry("inconsistent arrays: " + problems[0])


def _discard(entry, reason):
    """Log and remove a bad entry (renamed away first, so no reader sees it half-deleted)."""
    logger.warning("discarding cache entry %s (the files will be parsed again): %s",
                   entry, reason)
    parent, name = os.path.split(entry)
    trash = os.path.join(parent, "%s%s-%d-%s" % (_DISCARD_PREFIX, name, os.getpid(),
                                                  os.urandom(4).hex()))
    try:
        os.rename(entry, trash)
    except OSError:
        return  # already gone (another reader discarded it) or not ours to remove
    shutil.rmtree(trash, ignore_errors=True)


def load_cached(key, cache_dir):
    """Return ``(X, y, zero_based)`` of a cache entry, or None when there is none.

    An entry that is unreadable, fails its checksums or has inconsistent
    arrays is logged, removed, and None is returned, so the caller parses the
    files again. ``zero_based`` is the index base the files were parsed with.
    """
    entry = os.path.join(cache_dir, key)
    if not os.path.isdir(entry):
        return None
    try:
        with open(os.path.join(entry, "meta.json"), "rb") as f:
            meta = json.loads(f.read().decode("utf-8"))
        if not isinstance(meta, dict):
            raise CorruptEntry("meta.json holds a %s, not an object" % type(meta).__name__)
        if meta.get("version") != _FORMAT_VERSION or meta.get("meta_crc32") != _meta_checksum(meta):
            raise CorruptEntry("meta.json does not match its checksum")
        arrays = {name: _read_array(entry, name, meta["files"][name]) for name in _ARRAYS}
        _check_structure(meta, arrays)
        X = sp.csr_matrix((arrays["data"], arrays["indices"], arrays["indptr"]),
                          shape=tuple(meta["shape"]), copy=False)
        X.has_sorted_indices = True
        zero_based = bool(meta["zero_based"])
    except FileNotFoundError as err:
        if not os.path.isdir(entry):  # discarded by another reader meanwhile
            return None
        _discard(entry, err)
        return None
    except PermissionError as err:
        # Another user's entry (a shared cache): not corrupt, and not ours to remove.
        logger.warning("cannot read cache entry %s (the files are parsed instead): %s",
                       entry, err)
        return None
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as err:
        _discard(entry, err)
        return None
    logger.debug("loaded %s from cache %s", meta.get("sources"), entry)
    return X, arrays["label"], zero_based


def _remove_stale_staging(cache_dir):
    """Remove staging and discard directories of processes that no longer run (this
    process's are left alone: another of its threads may be writing one)."""
    try:
        names = os.listdir(cache_dir)
    except OSError:
        return
    for name in names:
        if not name.startswith((_STAGING_PREFIX, _DISCARD_PREFIX)):
            continue
        try:  # .staging-KEY-PID-RANDOM, .discard-KEY-PID-RANDOM
            pid = int(name.rsplit("-", 2)[-2])
        except (ValueError, IndexError):
            pid = None
        if pid is not None and process_exists(pid):
            continue  # a live writer's staging: not ours to touch
        logger.info("removing %s left by an interrupted cache write", name)
        shutil.rmtree(os.path.join(cache_dir, name), ignore_errors=True)


class _ChecksummingWriter:
    """A write-only file that keeps the size and CRC-32 of what goes through it.

    ``np.save`` writes an array to an object that is not a real file in
    buffered pieces, so the checksum costs no copy of the whole array.
    """

    def __init__(self, f):
        self._f = f
        self.bytes = 0
        self.crc32 = 0

    def write(self, data):
        self.bytes += memoryview(data).nbytes
        self.crc32 = zlib.crc32(data, self.crc32)
        return self._f.write(data)


def save_cached(key, cache_dir, X, y, zero_based, sources):
    """Write ``(X, y)`` parsed with index base ``zero_based`` as entry ``key``.

    Concurrent writers and readers are safe: the entry appears whole, by one
    rename, or not at all. A failure is logged, not raised (the cache is an
    optimisation).
    """
    entry = os.path.join(cache_dir, key)
    if os.path.isdir(entry):
        # Written meanwhile by another process, or one this user cannot read (load_cached
        # said so): a new copy could not replace it, and would be written for nothing.
        return
    staging = None
    try:
        os.makedirs(cache_dir, exist_ok=True)
        _remove_stale_staging(cache_dir)
        # The pid in the name tells a later save whether the writer still runs.
        staging = tempfile.mkdtemp(prefix="%s%s-%d-" % (_STAGING_PREFIX, key, os.getpid()),
                                   dir=cache_dir)
        # mkdtemp's 0700 would keep the entry from the other users of a shared cache.
        _publish_mode(staging, directory=True)
        files = {}
        for name, array in zip(_ARRAYS, (X.data, X.indices, X.indptr, y)):
            with atomic_file(os.path.join(staging, name + ".npy"), "wb") as f:
                checked = _ChecksummingWriter(f)
                np.save(checked, np.asarray(array))
            files[name] = {"bytes": checked.bytes, "crc32": checked.crc32}
        meta = {"version": _FORMAT_VERSION, "shape": list(X.shape),
                "zero_based": bool(zero_based), "sources": list(sources), "files": files}
        meta["meta_crc32"] = _meta_checksum(meta)
        with atomic_file(os.path.join(staging, "meta.json"), "w") as f:
            json.dump(meta, f)
        os.rename(staging, entry)
        staging = None
        fsync_directory(cache_dir)
    except OSError as err:
        # Another process may have written the same entry first: then all is well.
        if not os.path.isdir(entry):
            logger.warning("could not write cache entry %s: %s", entry, err)
    finally:
        if staging is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(staging)
