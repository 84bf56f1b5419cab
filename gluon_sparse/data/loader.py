"""SparseDataLoader: CSR batches from a dataset, built in bulk and prefetched."""
import collections
import concurrent.futures
import threading

import numpy as np
import scipy.sparse as sp

from .batchify import CSRBatchify, check_batch_size, stack_samples
from .prefetch import Prefetcher
from .sampler import BatchSampler, PartitionSampler

__all__ = ["SparseDataLoader"]

class _Stopped(Exception):
    """A batch build abandoned because its iteration ended."""


class SparseDataLoader:
    """Iterate over a sparse dataset in ``(data, label)`` batches.

    ``data`` is a ``CSRNDArray`` of shape ``(batch, num_features)``, never
    densified; ``label`` an ``NDArray`` (None when the dataset has no labels).
    Datasets exposing ``.data`` (a scipy CSR matrix) and ``.label`` (such as
    :class:`LibSVMDataset` and :class:`CSRDataset`) are sliced in bulk, one
    scipy call per batch; any other Gluon dataset of ``(row, label)`` samples
    is read sample by sample and stacked.

    Parameters
    ----------
    dataset : Dataset
        The samples.
    batch_size : int, optional
        Samples per batch; required unless ``batch_sampler`` is given.
    shuffle : bool
        Reshuffle every epoch. With ``seed``, epoch ``e``'s order is a
        function of ``(seed, e)`` only, so runs repeat exactly.
    sampler : iterable of int, optional
        Custom order (excludes ``shuffle``, ``num_parts`` and ``seed``).
    last_batch : {'keep', 'discard', 'rollover'}
        Handling of the final incomplete batch (see :class:`BatchSampler`).
    batch_sampler : iterable of index lists, optional
        Custom batches (excludes ``batch_size``, ``shuffle``, ``sampler``,
        ``last_batch`` and ``num_parts``).
    num_workers : int
        Threads that build batches in parallel (0: the prefetch thread builds
        them, or the consumer when ``prefetch=0``). Batch order is kept.
    prefetch : int
        Batches built ahead in a background thread; 0 builds each batch on
        demand in the consumer's thread. If the loop does little but wait for
        batches (it spends less than a quarter of its waiting time on
        anything else over 16 batches), the rest of the epoch is built in the
        loop's own thread: two Python threads trading the GIL for every batch
        are slower than one (see :class:`Prefetcher`, ``adaptive``).
    ctx : mxnet.Context, optional
        Where batches are created; with ``prefetch > 0`` the copy to it also
        happens in the background.
    seed : int, optional
        Seed of the shuffles.
    num_parts : int
        Number of distributed workers sharing the dataset.
    part_index : int
        This worker's index. Each worker gets a strided, equal share (see
        :class:`PartitionSampler`): samples ``part_index, part_index +
        num_parts, ...``, ``len(dataset) // num_parts`` of them.
    dtype : str or numpy.dtype, optional
        dtype of data and labels (default: the dataset matrix's, float32 for
        generic datasets).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from gluon_sparse.data import CSRDataset
    >>> ds = CSRDataset(sp.random(10, 1000, density=0.01, format="csr"), np.arange(10))
    >>> loader = SparseDataLoader(ds, batch_size=4, shuffle=True, seed=0)
    >>> len(loader), [x.shape for x, y in loader]
    (3, [(4, 1000), (4, 1000), (2, 1000)])
    """

    def __init__(self, dataset, batch_size=None, shuffle=False, sampler=None, last_batch="keep",
                 batch_sampler=None, num_workers=0, prefetch=2, ctx=None, seed=None,
                 num_parts=1, part_index=0, dtype=None):
        self._dataset = dataset
        if batch_sampler is None:
            if batch_size is None:
                raise ValueError("batch_size must be given when batch_sampler is None")
            if sampler is None:
                sampler = PartitionSampler(len(dataset), shuffle=shuffle, seed=seed,
                                           num_parts=num_parts, part_index=part_index)
            elif shuffle or num_parts != 1 or seed is not None:
                raise ValueError("shuffle, seed and num_parts must not be given with a custom "
                                 "sampler (the sampler decides the order)")
            batch_sampler = BatchSampler(sampler, batch_size, last_batch)
        elif (batch_size is not None or shuffle or sampler is not None or last_batch != "keep"
              or num_parts != 1):
            raise ValueError("batch_size, shuffle, sampler, last_batch and num_parts must not be "
                             "given with batch_sampler")
        if num_workers < 0 or prefetch < 0:
            raise ValueError("num_workers and prefetch must be >= 0, got %d and %d"
                             % (num_workers, prefetch))
        self._batch_sampler = batch_sampler
        self._num_workers = num_workers
        self._prefetch = prefetch
        self._ctx = ctx
        data = getattr(dataset, "data", None)
        if sp.issparse(data) and data.format == "csr":
            label = getattr(dataset, "label", None)
            if label is not None and np.asarray(label).dtype == object:
                raise TypeError("the dataset's labels are Python objects (multilabel tuples?); "
                                "convert them to a numeric array, e.g. with "
                                "sklearn.preprocessing.MultiLabelBinarizer")
            self._batchify = CSRBatchify(data, None if label is None else np.asarray(label), dtype)
            check_batch_size(batch_size, data.shape[1])
        else:
            self._batchify = None
            self._dtype = dtype

    @property
    def num_features(self):
        """Width of the batches (None for generic datasets)."""
        return None if self._batchify is None else self._batchify.data.shape[1]

    def __len__(self):
        return len(self._batch_sampler)

    def _build(self, indices, stop):
        if self._batchify is not None:
            return self._batchify(indices)
        samples = []
        for i in indices:
            # A generic dataset's item may be slow (a fetch, a decode): a stopped
            # iteration (Ctrl-C, a break) waits for one item, not for a whole batch.
            if stop.is_set():
                raise _Stopped
            samples.append(self._dataset[int(i)])
        return stack_samples(samples, dtype=self._dtype)

    def _batches(self, stop):
        if self._num_workers <= 1:
            for indices in self._batch_sampler:
                yield self._build(indices, stop)
            return
        # An ordered map with a bounded window of submitted batches.
        window = self._num_workers + max(self._prefetch, 1)
        with concurrent.futures.ThreadPoolExecutor(self._num_workers,
                                                   thread_name_prefix="gluon-sparse-batch") as pool:
            pending = collections.deque()
            try:
                for indices in self._batch_sampler:
                    pending.append(pool.submit(self._build, indices, stop))
                    if len(pending) >= window:
                        yield pending.popleft().result()
                while pending:
                    yield pending.popleft().result()
            finally:
                # The pool's exit waits for the batches being built: they stop early.
                stop.set()
                for future in pending:
                    future.cancel()

    def _to_context(self, batch):
        data, label = batch
        data = data.as_in_context(self._ctx)
        label = None if label is None else label.as_in_context(self._ctx)
        if self._prefetch:
            # Wait here so the consumer receives batches already on the device.
            data.wait_to_read()
            if label is not None:
                label.wait_to_read()
        return data, label

    def __iter__(self):
        transform = self._to_context if self._ctx is not None else None
        stop = threading.Event()  # set when this iteration ends early: builds stop
        if self._prefetch == 0:
            for batch in self._batches(stop):
                yield batch if transform is None else transform(batch)
            return
        with Prefetcher(self._batches(stop), depth=self._prefetch, transform=transform,
                        adaptive=True) as batches:
            try:
                # Not `yield from`: it would close the prefetcher (and wait for its
                # thread) before this finally could tell the builds to stop.
                for batch in batches:
                    yield batch
            finally:
                stop.set()  # before the prefetcher waits for its thread

    def as_data_iter(self, data_name="data", label_name="softmax_label"):
        """This loader as an ``mx.io.DataIter`` for the Module API.

        Parameters
        ----------
        data_name, label_name : str
            Names in ``provide_data`` / ``provide_label``.

        Returns
        -------
        SparseNDArrayIter
        """
        from .dataiter import SparseNDArrayIter
        return SparseNDArrayIter(self, data_name=data_name, label_name=label_name)
