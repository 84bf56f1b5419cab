"""A sampled output layer whose weight and bias live row by row in a kvstore.

:class:`SampledOutputRowSparseWeight` is :class:`~gluon_sparse.nn.SampledOutput`
with ``row_sparse`` parameters, pulled per batch with
:func:`~gluon_sparse.nn.row_sparse_weight.pull_rows` (the mechanism of
:class:`~gluon_sparse.nn.FullyConnectedSparseRowSparseWeight`): each step moves
the rows of the batch's candidate labels, not the ``num_labels x in_units``
weight. The candidates are drawn once per global batch
(:meth:`~SampledOutputRowSparseWeight.draw_candidates`, a :class:`Candidates`)
so that several devices or workers train exactly as one device on the whole
batch.
"""
import mxnet as mx
import numpy as np

from ..data.batchify import array_to_ndarray
from .row_sparse_weight import pull_rows
from .sparse_output import SampledOutput, _blockwise, candidate_selector, is_stand_in

__all__ = ["SampledOutputRowSparseWeight", "Candidates"]


class Candidates:
    """The candidate labels of a batch, drawn once, and the targets of some of its rows.

    Made by :meth:`SampledOutputRowSparseWeight.draw_candidates` for a whole
    (global) batch; :meth:`rows` and :meth:`split` give the parts that
    devices or workers pass to the block in place of their labels. Every part
    shares the draw: the candidate ids (the whole batch's positives and the
    sampled negatives) and the logQ correction, which is what makes the parts'
    summed losses and gradients those of the whole batch.

    Attributes
    ----------
    ids : numpy.ndarray of int64, shape (C,)
        Sorted candidate labels.
    target : numpy.ndarray, shape (num_rows, C)
        The rows' targets over the candidates (see ``SampledOutput.candidates``).
    correction : numpy.ndarray, shape (C,)
        ``log p_c`` subtracted from the logits.
    """

    def __init__(self, ids, target, correction):
        self.ids, self.target, self.correction = ids, target, correction

    @property
    def num_rows(self):
        """Number of examples whose targets this holds."""
        return self.target.shape[0]

    def rows(self, start, stop):
        """The part of rows ``start:stop`` (same ids and correction).

        Parameters
        ----------
        start, stop : int
            Row range, ``0 <= start <= stop <= num_rows``.

        Returns
        -------
        Candidates
        """
        if not 0 <= start <= stop <= self.num_rows:
            raise ValueError("rows %d:%d are outside the %d rows of this draw"
                             % (start, stop, self.num_rows))
        return Candidates(self.ids, self.target[start:stop], self.correction)

    def split(self, sizes):
        """Consecutive parts of the given sizes (e.g. ``part_sizes(batch, len(ctx))``).

        Parameters
        ----------
        sizes : list of int
            Row counts summing to ``num_rows``, in the order of the parts.

        Returns
        -------
        list of Candidates
        """
        sizes = [int(size) for size in sizes]
        if sum(sizes) != self.num_rows or min(sizes, default=0) < 0:
            raise ValueError("part sizes %s do not split the %d rows of this draw"
                             % (sizes, self.num_rows))
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        return [self.rows(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]

    def __repr__(self):
        return "Candidates(%d rows, %d candidates)" % (self.num_rows, self.ids.size)


class SampledOutputRowSparseWeight(SampledOutput):
    r""":class:`~gluon_sparse.nn.SampledOutput` whose weight and bias live in the kvstore.

    Same losses, samplers, parameters (``weight`` ``(num_labels, in_units)``,
    ``bias`` ``(num_labels, 1)``) and results as
    :class:`~gluon_sparse.nn.SampledOutput`; the parameters are ``row_sparse``
    and each forward pass pulls only the candidates' rows from the Trainer's
    kvstore (:func:`pull_rows`), so that a step moves ``C x in_units`` values
    each way (``C`` candidates) instead of ``num_labels x in_units``. For
    several devices (a ``'device'`` kvstore) or workers (``dist_sync``),
    draw the candidates once per global batch and give each part its rows::

        draw = output.draw_candidates(labels)          # the whole batch's labels
        parts = draw.split(part_sizes(batch_size, len(ctx)))
        with autograd.record():
            losses = [output(h, part).sum() for h, part in zip(hs, parts)]

    Each device then scores the same candidates as one device given the whole
    batch, and the summed gradients are that device's (up to float32 rounding
    of the sum). A ``dist_sync`` worker draws from the labels of the whole
    global batch too (labels only, not the features; seed the block the same
    on every worker so that the sampled negatives agree) and passes
    ``draw.rows(start, stop)`` for its own rows. Given its own labels alone, a
    worker trains on its positives plus the shared negatives: a valid sampled
    loss, but not the one-device result.

    What the kvstore implies (as for
    :class:`FullyConnectedSparseRowSparseWeight`): create the
    :class:`~mxnet.gluon.Trainer` before the first forward pass; updates run
    where the weight lives (``update_on_kvstore``), with an optimizer that
    has a row_sparse update (SGD, lazy Adam, gluon-sparse's SparseAdam);
    ``SparseAdam(deferred=True)`` runs there eagerly (exact standard Adam, at
    a cost proportional to ``num_labels`` on the kvstore, not in the bytes
    moved); with ``dist_*`` set ``rescale_grad`` on the optimizer and call
    ``trainer.step(1)``; ``in_units`` must be given; the block is imperative
    (rows are pulled at run time). :meth:`top_k` and :meth:`scores` pull the
    whole weight; for prediction without a Trainer, load the saved parameters
    into a :class:`~gluon_sparse.nn.SampledOutput` of the same shape.

    Parameters
    ----------
    num_labels, in_units : int
        Labels ``L`` and input width ``H`` (required).
    **kwargs
        As for :class:`~gluon_sparse.nn.SampledOutput` (``num_sampled``,
        ``sampler``, ``loss``, ``seed``, ...), including Gluon's Block
        arguments ``prefix`` (prefix of this block's parameter names) and
        ``params`` (a ParameterDict of parameters to share with another
        block).

    Notes
    -----
    Called as ``block(h, labels)``: ``h`` an NDArray ``(batch_size, in_units)``,
    ``labels`` as for :class:`~gluon_sparse.nn.SampledOutput` or a
    :class:`Candidates` part with ``batch_size`` rows; the result the
    ``batch_size`` losses.

    Examples
    --------
    >>> import mxnet as mx
    >>> from mxnet import autograd, gluon
    >>> from gluon_sparse.nn import SampledOutputRowSparseWeight
    >>> out = SampledOutputRowSparseWeight(100000, in_units=8, num_sampled=64, seed=0)
    >>> out.initialize(ctx=[mx.cpu(0), mx.cpu(1)])
    >>> trainer = gluon.Trainer(out.collect_params(), 'sgd', {'learning_rate': 0.1},
    ...                         kvstore='device')
    >>> draw = out.draw_candidates(mx.nd.array([3, 17, 99999, 3]))
    >>> parts = draw.split([2, 2])
    >>> with autograd.record():
    ...     losses = [out(mx.nd.ones((2, 8), ctx=c), p).sum()
    ...               for c, p in zip([mx.cpu(0), mx.cpu(1)], parts)]
    >>> autograd.backward(losses)
    >>> trainer.step(4)
    """

    _param_stype = "row_sparse"

    def __init__(self, num_labels, in_units, **kwargs):
        if not isinstance(in_units, (int, np.integer)) or in_units <= 0:
            raise ValueError("%s needs the input width: in_units must be a positive int, got %r"
                             % (self.__class__.__name__, in_units))
        super().__init__(num_labels, in_units=in_units, **kwargs)

    def draw_candidates(self, labels, batch_size=None):
        """Draw the candidates of a (global) batch: its positives plus sampled negatives.

        Parameters
        ----------
        labels : int array (batch,) or CSR indicator (batch, num_labels)
            The labels of every row of the batch (NDArray, NumPy or SciPy).
        batch_size : int, optional
            Rows of the batch (default: ``labels.shape[0]``).

        Returns
        -------
        Candidates
        """
        if batch_size is None:
            batch_size = labels.shape[0]
        return Candidates(*self.candidates(labels, batch_size))

    def _candidate_rows(self, F, selector, param):
        # The pulled parameter is row_sparse: MXNet's dot(csr, row_sparse) reads
        # those rows and gives a row_sparse gradient of the same rows.
        return _blockwise(F, F.sparse.dot, selector, param)

    def forward(self, h, labels):
        """Loss of each example over its (global) batch's candidates."""
        if not isinstance(h, mx.nd.NDArray):
            raise TypeError("%s takes an NDArray batch, got %s (it cannot be hybridized: rows "
                            "are pulled from the kvstore at run time)"
                            % (self.__class__.__name__, type(h).__name__))
        self._check_input(h)
        batch = h.shape[0]
        if batch == 0:
            # A worker's part of a split batch can be empty (split_and_load of fewer rows
            # than devices); oneDNN's error named none of this.
            raise ValueError("%s: the batch has no rows (h has shape %s): skip empty batches"
                             % (self.name, tuple(h.shape)))
        draw = labels if isinstance(labels, Candidates) else self.draw_candidates(labels, batch)
        if draw.num_rows != batch:
            raise ValueError("%s: the candidates part has targets for %d rows but the batch has "
                             "%d rows" % (self.name, draw.num_rows, batch))
        dtype = np.dtype(self.weight.dtype)
        ctx = h.context
        ids = array_to_ndarray(draw.ids, ctx)
        weight = pull_rows(self.weight, ids)
        bias = pull_rows(self.bias, ids) if self.bias is not None else None
        selector = candidate_selector(draw.ids, self.num_labels, dtype, ctx,
                                      stand_in=is_stand_in(draw.correction))
        target = array_to_ndarray(draw.target.astype(dtype), ctx)
        correction = array_to_ndarray(draw.correction.astype(dtype), ctx)
        return self.hybrid_forward(mx.nd, h, selector, target, correction, weight, bias)

    def _dense_params(self, ctx):
        # Prediction reads every row: pull them all (what save_parameters does too).
        all_rows = mx.nd.arange(self.num_labels, ctx=ctx, dtype=np.int64)
        dense = []
        for param in (self.weight, self.bias):
            if param is None:
                dense.append(None)
                continue
            pulled = pull_rows(param, all_rows)
            if pulled.indices.shape[0] != self.num_labels:
                raise RuntimeError("%s: pulling all %d rows of %s gave %d rows"
                                   % (self.name, self.num_labels, param.name,
                                      pulled.indices.shape[0]))
            # All rows, sorted: the row_sparse array's data is the dense weight.
            dense.append(pulled.data)
        weight, bias = dense
        return weight, bias.reshape((-1,)) if bias is not None else None
