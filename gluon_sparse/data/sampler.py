"""Sample order: which rows, in which order, in which batches.

Samplers here yield numpy index arrays rather than Python ints so that batch
assembly can slice rows in bulk. Shuffled orders derive from ``(seed, epoch)``,
so every epoch differs and a run with the same seed repeats exactly.
"""
import numpy as np
from mxnet.gluon.data import Sampler

__all__ = ["PartitionSampler", "BatchSampler"]

_LAST_BATCH = ("keep", "discard", "rollover")


class PartitionSampler(Sampler):
    """Indices of one worker's share of a dataset, optionally shuffled per epoch.

    The share is strided: worker ``k`` of ``P`` owns samples ``k, k + P,
    k + 2P, ...``, truncated to ``n // P`` samples so that every worker has the
    same number of samples (and, with the same batch size, batches), which
    synchronous distributed training needs; the last ``n % P`` samples are
    left out. Workers whose batch sizes differ must run
    :func:`gluon_sparse.distributed.steps_per_epoch` steps each. The share is
    the same every epoch; shuffling reorders it.

    Parameters
    ----------
    length : int
        Number of samples in the dataset.
    shuffle : bool
        Shuffle the share each epoch.
    seed : int, optional
        Seed of the shuffles; epoch ``e`` uses ``numpy.random.default_rng([seed, e])``.
        Drawn at random when None.
    num_parts : int
        Number of workers.
    part_index : int
        This worker, in ``[0, num_parts)``.

    Examples
    --------
    >>> list(PartitionSampler(7, num_parts=2, part_index=1))
    [1, 3, 5]
    """

    def __init__(self, length, shuffle=False, seed=None, num_parts=1, part_index=0):
        if length < 0:
            raise ValueError("length must be >= 0, got %d" % length)
        if num_parts < 1 or not 0 <= part_index < num_parts:
            raise ValueError("need num_parts >= 1 and 0 <= part_index < num_parts, got num_parts=%d, "
                             "part_index=%d" % (num_parts, part_index))
        self._share = np.arange(part_index, (length // num_parts) * num_parts, num_parts,
                                dtype=np.int64)
        self._shuffle = shuffle
        self._seed = int(np.random.SeedSequence().entropy % 2 ** 63) if seed is None else int(seed)
        self._prepared = (None, None)
        self.epoch = 0

    def indices(self, epoch=None):
        """The index array of ``epoch`` (default: the next one) without advancing."""
        epoch = self.epoch if epoch is None else epoch
        if not self._shuffle:
            return self._share
        prepared_epoch, order = self._prepared
        if prepared_epoch == epoch:
            return order
        return self._permutation(epoch)

    def _permutation(self, epoch):
        return np.random.default_rng([self._seed, epoch]).permutation(self._share)

    def prepare(self, epoch=None):
        """Compute the order of ``epoch`` (default: the next one) ahead of its use.

        Shuffling a million indices takes about 12 ms; a loader's background
        thread calls this at the end of an epoch (numpy shuffles without the
        GIL), so that the next epoch's first batch does not wait for it. The
        order is the same as computed on demand.
        """
        epoch = self.epoch if epoch is None else epoch
        if self._shuffle and self._prepared[0] != epoch:
            self._prepared = (epoch, self._permutation(epoch))

    def __iter__(self):
        order = self.indices()
        self.epoch += 1
        return iter(order.tolist())

    def __len__(self):
        return len(self._share)


class BatchSampler(Sampler):
    """Groups a sampler's indices into batches, yielded as int64 numpy arrays.

    Parameters
    ----------
    sampler : PartitionSampler or iterable of int
        Source of indices; a :class:`PartitionSampler` is read as one array
        per epoch instead of index by index.
    batch_size : int
        Samples per batch.
    last_batch : {'keep', 'discard', 'rollover'}
        What to do with a final incomplete batch: yield it, drop it, or carry
        its samples over to the start of the next epoch (as Gluon's
        ``BatchSampler``; the carry is set when an epoch starts, so an epoch
        left early hands it on too, and ``len()`` during an epoch counts the
        next one).

    Examples
    --------
    >>> [b.tolist() for b in BatchSampler(PartitionSampler(5), 2)]
    [[0, 1], [2, 3], [4]]
    """

    def __init__(self, sampler, batch_size, last_batch="keep"):
        if batch_size is None or int(batch_size) < 1:
            raise ValueError("batch_size must be a positive integer, got %r" % (batch_size,))
        if last_batch not in _LAST_BATCH:
            raise ValueError("last_batch must be one of %s, got %r" % (_LAST_BATCH, last_batch))
        self._sampler = sampler
        self._batch_size = int(batch_size)
        self._last_batch = last_batch
        self._carry = np.zeros(0, dtype=np.int64)

    def _epoch_indices(self):
        if isinstance(self._sampler, PartitionSampler):
            order = self._sampler.indices()
            self._sampler.epoch += 1
            return order
        return np.fromiter(iter(self._sampler), dtype=np.int64)

    def __iter__(self):
        order = self._epoch_indices()
        if self._last_batch == "rollover" and self._carry.size:
            order = np.concatenate([self._carry, order])
        full = len(order) // self._batch_size * self._batch_size
        if self._last_batch == "rollover":
            # Handed on when the epoch starts, not when its last batch is taken: an
            # epoch left early (break) then gives the same next epoch whether a
            # loader's background thread ran ahead to its end or not.
            self._carry = order[full:]
        return self._batches(order, full)

    def _batches(self, order, full):
        for start in range(0, full, self._batch_size):
            yield order[start:start + self._batch_size]
        rest = order[full:]
        if self._last_batch == "keep" and rest.size:
            yield rest
        if isinstance(self._sampler, PartitionSampler):
            # Runs when the consumer asks past the last batch: in a loader, in
            # its background thread while the training loop eats the last batches.
            self._sampler.prepare()

    def __len__(self):
        n = len(self._sampler)
        if self._last_batch == "keep":
            return (n + self._batch_size - 1) // self._batch_size
        if self._last_batch == "rollover":
            return (n + len(self._carry)) // self._batch_size
        return n // self._batch_size
