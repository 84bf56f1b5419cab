"""Binary cache of parsed LibSVM files.

Parsing text is the slow part of loading; the parsed arrays are saved as
``.npy`` files so that a later run reads them at disk speed. An entry is keyed
by the absolute path, size and modification time of every source file plus the
parse options, so editing or replacing a file invalidates its entry.
"""
import hashlib
import json
import logging
import os
import shutil
import tempfile

import numpy as np
import scipy.sparse as sp

__all__ = ["default_cache_dir", "load_cached", "save_cached", "cache_key"]

logger = logging.getLogger(__name__)

# 2: meta.json records the resolved index base (zero_based); entries of
# version 1 lack it and are re-parsed.
_FORMAT_VERSION = 2
_ARRAYS = ("data", "indices", "indptr", "label")


def default_cache_dir():
    """``$GLUON_SPARSE_CACHE_DIR``, else ``$XDG_CACHE_HOME/gluon_sparse/libsvm``
    (``~/.cache/gluon_sparse/libsvm``)."""
    explicit = os.environ.get("GLUON_SPARSE_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gluon_sparse", "libsvm")


def cache_key(paths, options):
    """Hex digest identifying ``paths`` (path, size, mtime) parsed with ``options``.

    Raises
    ------
    FileNotFoundError
        If a path does not exist.
    """
    sources = []
    for path in paths:
        stat = os.stat(path)
        sources.append([os.path.abspath(path), stat.st_size, stat.st_mtime_ns])
    record = json.dumps({"version": _FORMAT_VERSION, "sources": sources, "options": options},
                        sort_keys=True)
    return hashlib.sha256(record.encode()).hexdigest()[:32]


def load_cached(key, cache_dir):
    """Return ``(X, y, zero_based)`` of a cache entry, or None when there is none (or it is
    unreadable); ``zero_based`` is the index base the files were parsed with."""
    entry = os.path.join(cache_dir, key)
    if not os.path.isdir(entry):
        return None
    try:
        with open(os.path.join(entry, "meta.json")) as f:
            meta = json.load(f)
        arrays = {name: np.load(os.path.join(entry, name + ".npy")) for name in _ARRAYS}
        X = sp.csr_matrix((arrays["data"], arrays["indices"], arrays["indptr"]),
                          shape=tuple(meta["shape"]), copy=False)
        X.has_sorted_indices = True
        zero_based = bool(meta["zero_based"])
    except (OSError, ValueError, KeyError) as err:
        logger.warning("ignoring unreadable cache entry %s: %s", entry, err)
        return None
    logger.debug("loaded %s from cache %s", meta.get("sources"), entry)
    return X, arrays["label"], zero_based


def save_cached(key, cache_dir, X, y, zero_based, sources):
    """Write ``(X, y)`` parsed with index base ``zero_based`` as entry ``key``; concurrent
    writers are safe (atomic rename)."""
    os.makedirs(cache_dir, exist_ok=True)
    entry = os.path.join(cache_dir, key)
    staging = tempfile.mkdtemp(prefix=key + ".tmp", dir=cache_dir)
    try:
        for name, array in zip(_ARRAYS, (X.data, X.indices, X.indptr, y)):
            np.save(os.path.join(staging, name + ".npy"), np.asarray(array))
        with open(os.path.join(staging, "meta.json"), "w") as f:
            json.dump({"shape": list(X.shape), "zero_based": bool(zero_based),
                       "sources": list(sources)}, f)
        os.rename(staging, entry)
    except OSError as err:
        # Another process may have written the same entry first; either way the
        # cache is an optimisation, so a failure is logged, not raised.
        shutil.rmtree(staging, ignore_errors=True)
        if not os.path.isdir(entry):
            logger.warning("could not write cache entry %s: %s", entry, err)
