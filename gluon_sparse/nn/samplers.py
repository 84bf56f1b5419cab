"""Candidate samplers for sampled output layers (:class:`~gluon_sparse.nn.SampledOutput`).

A sampler draws the negative labels of a batch: ``num_sampled`` draws with
replacement from a proposal ``q`` over the ``num_labels`` labels (or, with
``unique=True``, as many draws as it takes to see ``num_sampled`` distinct
labels: :meth:`CandidateSampler.sample_distinct`). The output layer keeps the
distinct labels drawn, joins them with the batch's positive labels and
corrects the loss with each candidate's *inclusion probability*
``p = 1 - (1 - q) ** draws`` (the probability that a label appears at least
once among the draws), which :meth:`CandidateSampler.log_inclusion` returns.
Every sampler costs O(draws) per batch (``'frequency'``: O(draws log
num_labels)), nothing proportional to the label count.
"""
import abc

import numpy as np

__all__ = ["CandidateSampler", "UniformSampler", "LogUniformSampler", "FrequencySampler",
           "InBatchSampler", "AllLabelsSampler", "make_sampler"]


class CandidateSampler(abc.ABC):
    """Base class: draws negatives with replacement from a proposal ``q``.

    Parameters
    ----------
    num_labels : int
        Number of labels ``L``; draws lie in ``[0, L)``.
    """

    #: True when the candidates are every label (no sampling, no correction).
    exhaustive = False
    #: False when the sampler draws no negatives of its own (``num_sampled`` is moot).
    draws = True

    def __init__(self, num_labels):
        if not isinstance(num_labels, (int, np.integer)) or num_labels <= 0:
            raise ValueError("num_labels must be a positive int, got %r" % (num_labels,))
        self.num_labels = int(num_labels)

    @abc.abstractmethod
    def sample(self, rng, num_sampled):
        """``num_sampled`` label ids (int64) drawn with replacement from ``q``."""

    @abc.abstractmethod
    def probability(self, ids):
        """Proposal probabilities ``q`` of the given label ids (float64)."""

    def sample_distinct(self, rng, num_distinct, exclude=(), max_tries=None):
        """Draw until ``num_distinct`` distinct labels outside ``exclude`` have come up.

        What TensorFlow's candidate samplers do with ``unique=True``: the
        negatives are the distinct labels drawn, and :meth:`log_inclusion`
        corrects them with ``p = 1 - (1 - q) ** tries``, ``tries`` the draws it
        took (an approximation: the number of draws depends on them).

        Parameters
        ----------
        rng : numpy.random.Generator
        num_distinct : int
            Distinct labels wanted; when ``exclude`` leaves fewer, all of them.
        exclude : array-like of int, optional
            Labels that do not count (the batch's positives).
        max_tries : int, optional
            Stop after this many draws (default ``64 * num_distinct``), so a
            proposal with tiny probabilities cannot loop for long.

        Returns
        -------
        ids : numpy.ndarray of int64
            The distinct labels drawn outside ``exclude``, sorted.
        tries : int
            The draws made up to the last label kept.
        """
        exclude = np.unique(np.asarray(exclude, dtype=np.int64))
        wanted = min(int(num_distinct), self.num_labels - exclude.size)
        if wanted <= 0:
            return np.empty(0, dtype=np.int64), 0
        max_tries = 64 * wanted if max_tries is None else int(max_tries)
        draws = ids = np.empty(0, dtype=np.int64)
        chunk = max(wanted, 16)
        while draws.size < max_tries:
            more = self.sample(rng, min(chunk, max_tries - draws.size))
            if more.size == 0:  # a sampler that draws nothing ('in_batch')
                break
            draws = np.concatenate([draws, more])
            valid = ~np.isin(draws, exclude)
            ids, first = np.unique(draws[valid], return_index=True)
            if ids.size >= wanted:
                # The draw that brought the wanted-th distinct label ends the sampling.
                last = np.sort(np.flatnonzero(valid)[first])[wanted - 1]
                kept = draws[:last + 1]
                return np.unique(kept[~np.isin(kept, exclude)]), int(last + 1)
            chunk *= 2
        return ids, int(draws.size)

    def log_inclusion(self, ids, num_sampled):
        """``log(1 - (1 - q) ** num_sampled)``: log-probability that each id is drawn at least once.

        Computed as ``log(-expm1(num_sampled * log1p(-q)))`` so that tiny
        ``q`` (a tail label among 10^6) keeps its precision.
        """
        q = np.minimum(self.probability(np.asarray(ids, dtype=np.int64)), 1.0)
        with np.errstate(divide="ignore"):
            inclusion = -np.expm1(num_sampled * np.log1p(-q))
            return np.log(inclusion)

    def __repr__(self):
        return "%s(num_labels=%d)" % (self.__class__.__name__, self.num_labels)


class UniformSampler(CandidateSampler):
    """Every label equally likely: ``q = 1 / L``."""

    def sample(self, rng, num_sampled):
        return rng.integers(0, self.num_labels, size=num_sampled, dtype=np.int64)

    def probability(self, ids):
        return np.full(len(ids), 1.0 / self.num_labels)


class LogUniformSampler(CandidateSampler):
    """Zipfian proposal ``q(k) = log((k + 2) / (k + 1)) / log(L + 1)``.

    The proposal of word2vec / TensorFlow's ``log_uniform_candidate_sampler``:
    it fits labels numbered by decreasing frequency (label 0 the most frequent).
    """

    def sample(self, rng, num_sampled):
        u = rng.random(num_sampled)
        ids = np.floor(np.expm1(u * np.log1p(self.num_labels))).astype(np.int64)
        return np.clip(ids, 0, self.num_labels - 1)

    def probability(self, ids):
        ids = np.asarray(ids, dtype=np.float64)
        return np.log1p(1.0 / (ids + 1.0)) / np.log1p(self.num_labels)


class FrequencySampler(CandidateSampler):
    """Proposal proportional to ``(count + 1) ** alpha`` of each label's training frequency.

    Parameters
    ----------
    counts : array-like of shape (num_labels,)
        How often each label occurs in the training set (one is added so that
        unseen labels can still be drawn).
    alpha : float, default 0.75
        Flattening exponent (word2vec's 0.75; 1 samples by frequency, 0 uniformly).
    """

    def __init__(self, counts, alpha=0.75):
        if hasattr(counts, "asnumpy"):  # an MXNet NDArray: NumPy cannot read it directly
            counts = counts.asnumpy()
        counts = np.asarray(counts, dtype=np.float64)
        if counts.ndim != 1 or counts.size == 0:
            raise ValueError("counts must be a non-empty 1-D array (one count per label), got "
                             "shape %s" % (counts.shape,))
        if not np.all(np.isfinite(counts)) or np.any(counts < 0):
            raise ValueError("label counts must be finite and >= 0")
        if not np.isfinite(alpha) or alpha < 0:
            raise ValueError("alpha must be a finite number >= 0, got %r" % (alpha,))
        super().__init__(counts.size)
        self.alpha = float(alpha)
        weights = (counts + 1.0) ** self.alpha
        self._q = weights / weights.sum()
        self._cdf = np.cumsum(self._q)
        self._cdf[-1] = 1.0

    def sample(self, rng, num_sampled):
        ids = np.searchsorted(self._cdf, rng.random(num_sampled), side="right")
        return np.minimum(ids, self.num_labels - 1).astype(np.int64)

    def probability(self, ids):
        return self._q[np.asarray(ids, dtype=np.int64)]

    def __repr__(self):
        return "FrequencySampler(num_labels=%d, alpha=%g)" % (self.num_labels, self.alpha)


class InBatchSampler(CandidateSampler):
    """No extra draws: the negatives of an example are the other examples' positives.

    The candidates are then present with certainty given the batch, so no
    correction applies.
    """

    draws = False

    def sample(self, rng, num_sampled):
        return np.empty(0, dtype=np.int64)

    def probability(self, ids):
        return np.ones(len(ids))


class AllLabelsSampler(CandidateSampler):
    """Every label is a candidate: the exact (full) loss, at a cost proportional to ``L``."""

    exhaustive = True

    def sample(self, rng, num_sampled):
        return np.arange(self.num_labels, dtype=np.int64)

    def probability(self, ids):
        return np.ones(len(ids))


_BY_NAME = {"uniform": UniformSampler, "log_uniform": LogUniformSampler,
            "in_batch": InBatchSampler, "all": AllLabelsSampler}


def make_sampler(sampler, num_labels, label_counts=None, alpha=0.75):
    """A :class:`CandidateSampler` from a name or an instance.

    Parameters
    ----------
    sampler : str or CandidateSampler
        ``'uniform'``, ``'log_uniform'``, ``'frequency'`` (needs ``label_counts``),
        ``'in_batch'``, ``'all'``, or a sampler instance for ``num_labels`` labels.
    num_labels : int
    label_counts : array-like, optional
        Per-label training counts, for ``'frequency'``.
    alpha : float, default 0.75
        Exponent of ``'frequency'``.
    """
    if isinstance(sampler, CandidateSampler):
        if sampler.num_labels != num_labels:
            raise ValueError("the sampler draws from %d labels but the layer has %d"
                             % (sampler.num_labels, num_labels))
        return sampler
    if sampler == "frequency":
        if label_counts is None:
            raise ValueError("sampler='frequency' needs label_counts (one count per label)")
        if len(label_counts) != num_labels:
            raise ValueError("label_counts has %d entries but the layer has %d labels"
                             % (len(label_counts), num_labels))
        return FrequencySampler(label_counts, alpha=alpha)
    if sampler not in _BY_NAME:
        raise ValueError("unknown sampler %r; expected one of %s, 'frequency' or a "
                         "CandidateSampler" % (sampler, sorted(_BY_NAME)))
    return _BY_NAME[sampler](num_labels)
