"""Count the bytes a kvstore moves, at the worker's calls.

:class:`KVStoreTraffic` wraps the ``init``, ``broadcast``, ``push``, ``pull``,
``row_sparse_pull`` and ``pushpull`` methods of one
:class:`mxnet.kvstore.KVStore` object and adds up the payload of every array
that goes in or comes out, per key:

* dense array: ``size x itemsize``;
* row_sparse array: its stored rows (``rows x row size x itemsize``) plus
  8 bytes of row index per row (ps-lite sends one uint64 key per row);
* ``row_sparse_pull``: the rows that come back (as above) plus the 8-byte ids
  the request sends, once per distinct row.

This is the payload the worker hands to (or gets from) the kvstore: for a
``dist_*`` kvstore what crosses the network per worker, less ps-lite's message
headers; for ``'device'`` / ``'local'`` what is copied between the devices and
the kvstore's own copy. Counting waits for each array (its row count is known
only once the operator that wrote it has run), so measure time without it.
"""
import numpy as np

__all__ = ["KVStoreTraffic", "payload_bytes"]

KEY_BYTES = 8  # one uint64 key per row of a row_sparse message

_WRAPPED = ("init", "broadcast", "push", "pull", "row_sparse_pull", "pushpull")


def payload_bytes(array):
    """Bytes of an NDArray's values, plus 8 per stored row for a row_sparse array.

    Parameters
    ----------
    array : NDArray
        Dense or row_sparse (waited for).

    Returns
    -------
    int
    """
    array.wait_to_read()
    itemsize = np.dtype(array.dtype).itemsize
    if array.stype == "row_sparse":
        rows = array.indices.shape[0]
        row_size = int(np.prod(array.shape[1:], dtype=np.int64))
        return rows * (row_size * itemsize + KEY_BYTES)
    if array.stype != "default":
        raise TypeError("cannot count a %s array: the kvstore moves dense and row_sparse "
                        "arrays" % array.stype)
    return int(array.size) * itemsize


def _as_list(value):
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _pairs(keys, values):
    """(key, array) pairs of a kvstore call (one key with one array or a list of arrays,
    or lists of both)."""
    if isinstance(keys, (list, tuple)):
        pairs = []
        for key, value in zip(keys, values):
            pairs += [(key, v) for v in _as_list(value)]
        return pairs
    return [(keys, v) for v in _as_list(values)]


def _key_names(params):
    """Names of a Trainer's kvstore keys 0, 1, ... for the parameters it was given."""
    if hasattr(params, "keys"):
        return sorted(params.keys())  # gluon.Trainer sorts a dict's names
    return [getattr(p, "name", p) for p in params]


class KVStoreTraffic:
    """Bytes pushed to and pulled from one kvstore, per key, since the last :meth:`reset`.

    Parameters
    ----------
    kvstore : mxnet.kvstore.KVStore
        The kvstore to count (give the same object to the
        :class:`~mxnet.gluon.Trainer`: ``Trainer(..., kvstore=kv)``).
    names : ParameterDict, dict, list of Parameter or list of str, optional
        What the integer keys stand for: the parameters given to the
        :class:`~mxnet.gluon.Trainer` (which numbers a dict's parameters in
        the sorted order of their names, a list's in its order), or the key
        names in key order.

    Attributes
    ----------
    pushed, pulled : dict of str to int
        Bytes by key name.
    initialized : dict of str to int
        Bytes of ``init`` and ``broadcast`` (once per key, before training).
    calls : int
        Counted calls.

    Examples
    --------
    >>> import mxnet as mx
    >>> kv = mx.kv.create('local')
    >>> traffic = KVStoreTraffic(kv, names=['w'])
    >>> kv.init(0, mx.nd.zeros((4, 3)))
    >>> kv.push(0, mx.nd.ones((4, 3)))
    >>> traffic.pushed
    {'w': 48}
    """

    def __init__(self, kvstore, names=None):
        self.kvstore = kvstore
        self.names = _key_names(names) if names is not None else None
        self.reset()
        self.enabled = True
        self._originals = {name: getattr(kvstore, name) for name in _WRAPPED}
        for name in _WRAPPED:
            setattr(kvstore, name, getattr(self, "_" + name))

    def reset(self):
        """Forget what was counted."""
        self.pushed, self.pulled, self.initialized = {}, {}, {}
        self.calls = 0

    def close(self):
        """Restore the kvstore's own methods."""
        for name, method in self._originals.items():
            setattr(self.kvstore, name, method)

    @property
    def total(self):
        """Bytes pushed plus pulled."""
        return sum(self.pushed.values()) + sum(self.pulled.values())

    def _name(self, key):
        if self.names is not None and isinstance(key, (int, np.integer)) \
                and 0 <= key < len(self.names):
            return self.names[key]
        return str(key)

    def _add(self, table, key, nbytes):
        name = self._name(key)
        table[name] = table.get(name, 0) + int(nbytes)

    # --------------------------------------------------------------- wrappers
    def _init(self, key, value):
        self._originals["init"](key, value)
        if self.enabled:
            for k, v in _pairs(key, value):
                self._add(self.initialized, k, payload_bytes(v))

    def _broadcast(self, key, value, out, priority=0):
        self._originals["broadcast"](key, value, out, priority=priority)
        if self.enabled:
            for k, v in _pairs(key, value) + _pairs(key, out):
                self._add(self.initialized, k, payload_bytes(v))

    def _push(self, key, value, priority=0):
        self._originals["push"](key, value, priority=priority)
        if self.enabled:
            self.calls += 1
            for k, v in _pairs(key, value):
                self._add(self.pushed, k, payload_bytes(v))

    def _pull(self, key, out=None, priority=0, ignore_sparse=True):
        self._originals["pull"](key, out=out, priority=priority, ignore_sparse=ignore_sparse)
        if self.enabled:
            self.calls += 1
            for k, v in _pairs(key, out):
                if v.stype == "default" or not ignore_sparse:
                    self._add(self.pulled, k, payload_bytes(v))

    def _row_sparse_pull(self, key, out=None, priority=0, row_ids=None):
        self._originals["row_sparse_pull"](key, out=out, priority=priority, row_ids=row_ids)
        if self.enabled:
            self.calls += 1
            pairs = _pairs(key, out)
            ids_list = _as_list(row_ids)
            if len(ids_list) == 1:  # one set of row ids for every output
                ids_list = ids_list * len(pairs)
            for (k, v), ids in zip(pairs, ids_list):
                requested = np.unique(ids.asnumpy()).size * KEY_BYTES
                self._add(self.pulled, k, payload_bytes(v) + requested)

    def _pushpull(self, key, value, out=None, priority=0):
        self._originals["pushpull"](key, value, out=out, priority=priority)
        if self.enabled:
            self.calls += 1
            for k, v in _pairs(key, value):
                self._add(self.pushed, k, payload_bytes(v))
            for k, v in _pairs(key, out if out is not None else value):
                self._add(self.pulled, k, payload_bytes(v))
