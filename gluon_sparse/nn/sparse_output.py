"""An output layer over a huge label set, trained on sampled candidates.

A dense ``Dense(L)`` output costs ``B x H x L`` per step and moves an
``L x H`` gradient, whatever the batch. :class:`SampledOutput` scores only the
batch's *candidate* labels (its positives plus sampled negatives), so its
weight and bias gradients are ``row_sparse`` with the candidates' rows and a
step costs ``B x H x C`` for ``C`` candidates, independent of ``L``.

The candidate rows are read with the operator library's ``gluon_sparse_dot``
applied to a one-hot CSR *selector* (one row per candidate, a single 1.0 in
the candidate's column): ``dot(selector, weight)`` is exactly the gather of
those rows, its gradient is the ``row_sparse`` scatter of the rows'
gradients, and, crucially, it is the read path that deferred Adam
(``SparseAdam(deferred=True)``) already refreshes: rows left behind are
brought up to date before they are read, so deferred training equals eager
standard Adam bitwise.
"""
import logging

import mxnet as mx
import numpy as np
import scipy.sparse as sp
from mxnet.gluon import HybridBlock

from .. import _native
from .._sparse_entries import first_not_binary, first_outside, row_of_entry
from ..data.batchify import array_to_ndarray, csr_parts_to_ndarray
from .samplers import make_sampler
from .topk import _block_scores, top_k_scores

__all__ = ["SampledOutput"]

logger = logging.getLogger(__name__)

_native.load_ops()

_LOSSES = ("softmax", "bce")


# MXNet 1.9.1 (built without int64 tensor sizes) refuses an operator input of 2^31
# elements or more, counting a CSR array's logical shape: C candidates over L labels
# reach it from C = 2,148 at 10^6 labels (a batch of 256 rows with 5 labels each and
# 1,024 draws).
_MAX_INPUT_ELEMENTS = 2 ** 31 - 1

# The correction (log p, subtracted from the logit) of the one candidate that stands in
# when a batch has none: see SampledOutput._draw.
_STAND_IN_LOG_P = 1e30


def is_stand_in(correction):
    """Whether a draw's candidates are the one stand-in of a batch without candidates."""
    return correction.size == 1 and correction[0] == _STAND_IN_LOG_P


def candidate_selector(ids, num_labels, dtype, ctx, stand_in=False):
    """The CSR ``(C, num_labels)`` with a 1 at ``(i, ids[i])``: ``dot(selector, W)`` is
    the candidates' rows of ``W``. A list of such blocks of consecutive candidates where
    one array would be too large for MXNet. ``stand_in``: one empty row, whose product
    is a row of zeros and whose gradient holds no row of ``W`` (a lazy optimizer would
    step a row given even a zero gradient)."""
    if stand_in:
        return csr_parts_to_ndarray(np.zeros(0, dtype=dtype), np.zeros(0, dtype=np.int64),
                                    np.zeros(2, dtype=np.int64), (1, num_labels), dtype, ctx)
    rows = max(1, (_MAX_INPUT_ELEMENTS - 1) // num_labels)
    blocks = [csr_parts_to_ndarray(np.ones(part.size, dtype=dtype), part,
                                   np.arange(part.size + 1, dtype=np.int64),
                                   (part.size, num_labels), dtype, ctx)
              for part in (ids[start:start + rows] for start in range(0, max(ids.size, 1), rows))]
    return blocks[0] if len(blocks) == 1 else blocks


def _blockwise(F, dot, selector, param):
    """``dot(selector, param)``, or its blocks' products stacked (each block's gradient
    is row_sparse; autograd adds them up)."""
    if isinstance(selector, (list, tuple)):
        return F.concat(*[dot(block, param) for block in selector], dim=0)
    return dot(selector, param)


class SampledOutput(HybridBlock):
    r"""Output layer of ``num_labels`` labels trained with sampled candidates.

    Scores are ``s = h W^T + b`` with weight ``W`` of shape
    ``(num_labels, in_units)`` and bias ``b`` of shape ``(num_labels, 1)``
    (a column, so that it is read and updated row by row like the weight).
    Calling the block with a batch ``h`` and its labels returns the loss of
    each example over the batch's candidates ``S``: the distinct labels that
    are positive for some example of the batch (present with certainty),
    joined with the distinct labels among ``num_sampled`` draws of the
    sampler (label ``c`` present with probability ``p_c``, see
    :mod:`gluon_sparse.nn.samplers`).

    * ``loss='softmax'``: sampled softmax cross-entropy over ``S`` with the
      logQ correction ``s_c - log p_c`` (``p_c = 1`` for the batch's
      positives). Multi-class: ``-log softmax_S(s)_y``. Multi-label (extreme
      classification): the target is uniform over the example's positives,
      ``-(1/|Y|) sum_{y in Y} log softmax_S(s)_y``; an example without
      positives contributes 0.
    * ``loss='bce'``: sampled sigmoid cross-entropy, negative sampling with
      the logQ correction (as TensorFlow's ``sampled_sigmoid`` / ``nce_loss``
      with ``subtract_log_q``, except that the batch's positives, candidates
      with certainty, are not shifted: TensorFlow subtracts their ``log Q``
      too; word2vec's negative sampling): the binary
      cross-entropy summed over the candidates, *unweighted*, on the logits
      ``s_c - log p_c`` with the same ``p_c`` as the softmax (1 for the
      batch's positives, which are negatives of the batch's other examples)::

          sum_{c in S} softplus(s_c - log p_c) - y_c (s_c - log p_c)

      Estimator and bias: a label drawn with probability ``p_c`` adds
      ``p_c softplus(s - log p_c)`` to the expected loss, which is
      ``softplus(s)`` (its term of the full loss) while ``exp(s) << p_c``
      and grows only linearly, with slope ``p_c``, above: the estimate is
      the full loss where the labels' scores are low (the negatives of a
      trained model) and under-weights a negative whose score is high
      compared with its inclusion probability, so those scores come down
      more slowly than under the full loss. In return each term's gradient
      is at most 1 in magnitude: the Horvitz-Thompson estimate (weights
      ``1 / p_c``, unbiased for the loss) has weights near 1,000 for the
      tail labels of a log-uniform proposal and trained worse than the
      label-popularity baseline. The batch's positives count as negatives
      of the other examples uncorrected, as in the softmax: an in-batch
      component weighted by label frequency. The bias starts at the prior
      logit ``-log(num_labels - 1)`` (each label positive with probability
      ``1 / num_labels``), not 0: a label the sampler seldom draws keeps its
      initial score for many steps, and from 0 those scores (``sigma = 0.5``)
      outrank the trained labels' in prediction.

    With ``sampler='all'`` the candidates are all labels, ``p = 1``, and the
    losses are exactly the full softmax cross-entropy
    (``gluon.loss.SoftmaxCrossEntropyLoss``) and the full binary
    cross-entropy summed over labels (``L x SigmoidBinaryCrossEntropyLoss``).

    Parameters
    ----------
    num_labels : int
        Number of labels ``L``.
    in_units : int, default 0
        Width of the input ``h``; 0 infers it from the first batch.
    num_sampled : int, default 1024
        Number of negative draws per batch (with replacement; ignored by
        ``'in_batch'`` and ``'all'``).
    sampler : str or CandidateSampler, default 'log_uniform'
        ``'uniform'``, ``'log_uniform'`` (labels numbered by decreasing
        frequency), ``'frequency'`` (``(label_counts + 1) ** alpha``: a label
        never seen is still drawn), ``'in_batch'`` (negatives are the other
        examples' positives), ``'all'`` (full loss).
    loss : {'softmax', 'bce'}, default 'softmax'
    label_counts : array-like, optional
        Training frequency of each label, for ``sampler='frequency'``.
    alpha : float, default 0.75
        Exponent of the ``'frequency'`` sampler.
    use_bias : bool, default True
    dtype : str, default 'float32'
    weight_initializer, bias_initializer : Initializer or str, optional
        Defaults: MXNet's default (uniform), and for the bias zeros
        (softmax) or the prior logit ``-log(num_labels - 1)`` (BCE).
    seed : int, optional
        Seed of the sampler's random generator (reproducible candidates).
    unique : bool, default False
        Draw until ``num_sampled`` distinct negatives have come up
        (TensorFlow's ``unique=True``) instead of ``num_sampled`` draws with
        replacement, whose distinct labels are fewer where the proposal
        repeats itself (few labels, or a peaked proposal). The work of a step
        is then the same at every ``num_labels``. When ``num_sampled`` covers
        every label that is not a positive, every label is a candidate (the
        exact loss).
    prefix : str, optional
        Prefix of this block's parameter names (Gluon's Block argument).
    params : ParameterDict, optional
        Parameters to share with another block (Gluon's Block argument).

    Notes
    -----
    Called as ``block(h, labels)``: ``h`` is an NDArray of shape
    ``(batch_size, in_units)``; ``labels`` an int array of shape
    ``(batch_size,)`` (multi-class) or a CSR indicator of shape
    ``(batch_size, num_labels)`` (``scipy.sparse`` or ``CSRNDArray``,
    multi-label); the result the NDArray of the ``batch_size`` losses.

    Both parameters have ``grad_stype='row_sparse'``; train them with
    ``gluon.Trainer(..., 'sparseadam', {'deferred': True})`` for standard Adam
    at the candidates' cost, not ``L``'s (eager standard Adam moves all ``L``
    rows every step; a candidate that comes back replays the ~140 steps in
    which standard Adam still moved it, so over a long run with a large ``L``
    the step grows until it settles: docs/guide/nn.md). Reading the whole
    weight (:meth:`top_k`, :meth:`scores`) flushes deferred rows first. The
    sampling happens in :meth:`forward`, in Python; the operators after it run
    imperatively (:meth:`hybridize` is accepted and leaves them so), called
    with a symbol they build the graph of the selector, the targets and the
    correction (for export). On the CPU the loss is one operator of the
    library (``gluon_sparse_cross_entropy``).

    Examples
    --------
    >>> import mxnet as mx
    >>> from gluon_sparse.nn import SampledOutput
    >>> out = SampledOutput(100000, num_sampled=256, seed=0)
    >>> out.initialize()
    >>> h = mx.nd.random.uniform(shape=(4, 32))
    >>> out(h, mx.nd.array([3, 17, 99999, 3])).shape
    (4,)
    >>> ids, scores = out.top_k(h, 5)
    >>> ids.shape
    (4, 5)
    """

    # Storage of weight and bias ('row_sparse' in SampledOutputRowSparseWeight).
    _param_stype = "default"

    def __init__(self, num_labels, in_units=0, num_sampled=1024, sampler="log_uniform",
                 loss="softmax", label_counts=None, alpha=0.75, use_bias=True, dtype="float32",
                 weight_initializer=None, bias_initializer=None, seed=None, prefix=None,
                 params=None, unique=False):
        super().__init__(prefix=prefix, params=params)
        if not isinstance(num_labels, (int, np.integer)) or num_labels <= 0:
            raise ValueError("num_labels must be a positive int, got %r" % (num_labels,))
        if loss not in _LOSSES:
            raise ValueError("loss must be one of %s, got %r" % (_LOSSES, loss))
        if not isinstance(num_sampled, (int, np.integer)) or num_sampled < 0:
            raise ValueError("num_sampled must be an int >= 0, got %r" % (num_sampled,))
        self._num_labels = int(num_labels)
        self._num_sampled = int(num_sampled)
        self._unique = bool(unique)
        self._loss = loss
        self.sampler = make_sampler(sampler, self._num_labels, label_counts, alpha)
        self._rng = np.random.default_rng(seed)
        if bias_initializer is None:
            bias_initializer = ("zeros" if loss == "softmax" else
                                mx.init.Constant(-np.log(max(self._num_labels - 1, 1))))
        with self.name_scope():
            self.weight = self.params.get("weight", shape=(self._num_labels, in_units),
                                          init=weight_initializer, dtype=dtype,
                                          allow_deferred_init=True, stype=self._param_stype,
                                          grad_stype="row_sparse")
            if use_bias:
                self.bias = self.params.get("bias", shape=(self._num_labels, 1),
                                            init=bias_initializer, dtype=dtype,
                                            allow_deferred_init=True, stype=self._param_stype,
                                            grad_stype="row_sparse")
            else:
                self.bias = None

    @property
    def num_labels(self):
        """Number of labels."""
        return self._num_labels

    @property
    def in_units(self):
        """Width of the input (0 until inferred)."""
        shape = self.weight.shape
        return shape[1] if shape and len(shape) > 1 else 0

    # ------------------------------------------------------------- candidates
    def _label_rows(self, labels, batch):
        """Per-example positive ids as CSR arrays ``(indptr, ids)`` plus whether multi-label."""
        if isinstance(labels, mx.nd.NDArray):
            labels = (labels.asscipy() if labels.stype == "csr" else labels.asnumpy())
        if sp.issparse(labels):
            # A copy: the caller's matrix stays as given (it is batched again next epoch).
            labels = sp.csr_matrix(labels, copy=True)
            if labels.shape != (batch, self._num_labels):
                raise ValueError("%s: the label indicator has shape %s but the batch has %d rows "
                                 "and the layer %d labels" % (self.name, labels.shape, batch,
                                                              self._num_labels))
            # An MXNet CSR array is not checked against its shape: a one-based label id
            # would otherwise become a candidate row past the weight's end.
            bad = first_outside(labels.indices, self._num_labels)
            if bad is not None:
                raise ValueError("%s: label %d of example %d is outside [0, %d)"
                                 % (self.name, labels.indices[bad],
                                    row_of_entry(labels.indptr, bad), self._num_labels))
            bad = first_not_binary(labels.data)
            if bad is not None:
                raise ValueError("%s: a label indicator holds 0 and 1; example %d has %r for "
                                 "label %d" % (self.name, row_of_entry(labels.indptr, bad),
                                               float(labels.data[bad]), labels.indices[bad]))
            labels.eliminate_zeros()
            labels.sum_duplicates()
            return labels.indptr.astype(np.int64), labels.indices.astype(np.int64), True
        labels = np.asarray(labels)
        if labels.ndim != 1 or labels.shape[0] != batch:
            raise ValueError("%s: multi-class labels must be a 1-D array of %d label ids, got "
                             "shape %s (give a CSR indicator for multi-label)"
                             % (self.name, batch, labels.shape))
        ids = labels.astype(np.int64)
        if not np.array_equal(ids, labels):
            bad = int(np.flatnonzero(ids != labels)[0])
            raise ValueError("%s: label %r of example %d is not an integer id"
                             % (self.name, labels[bad], bad))
        bad = first_outside(ids, self._num_labels)
        if bad is not None:
            raise ValueError("%s: label %d of example %d is outside [0, %d)"
                             % (self.name, ids[bad], bad, self._num_labels))
        return np.arange(batch + 1, dtype=np.int64), ids, False

    def candidates(self, labels, batch):
        """Draw the candidates of a batch.

        Parameters
        ----------
        labels : int array (batch,) or CSR indicator (batch, num_labels)
        batch : int
            Number of examples.

        Returns
        -------
        ids : numpy.ndarray of int64, shape (C,)
            The candidate labels, sorted.
        target : numpy.ndarray of shape (batch, C)
            Softmax: the target distribution (one-hot, or uniform over the
            example's positives); BCE: the 0/1 indicator.
        correction : numpy.ndarray of shape (C,)
            ``log p_c``, subtracted from the logits (0 for the batch's
            positives and with ``'all'`` and ``'in_batch'``).

        A batch without positives whose sampler draws nothing (``'in_batch'``,
        ``num_sampled=0``) has one stand-in candidate, id 0 with a correction
        of ``1e30`` and a target of 0, which reads no row of the weight: its
        loss is exactly 0, no row gets a gradient, and MXNet gets a product
        over one candidate, not zero.
        """
        ids, log_p, rows, cols, counts = self._draw(labels, batch)
        target = np.zeros((batch, ids.size))
        target[rows, cols] = 1.0 / counts[rows] if self._loss == "softmax" else 1.0
        return ids, target, log_p

    def _draw(self, labels, batch):
        """The candidates ``ids``, their ``log p``, and where the positives are: ``(rows,
        cols)`` of each positive in the ``(batch, C)`` target and each example's count."""
        indptr, positive_ids, multilabel = self._label_rows(labels, batch)
        positives = np.unique(positive_ids)
        unique = self._unique and self.sampler.draws  # in-batch negatives draw nothing
        exhaustive = self.sampler.exhaustive or (
            unique and self._num_sampled >= self._num_labels - positives.size)
        if exhaustive:  # every label: the exact loss, no correction
            ids = np.arange(self._num_labels, dtype=np.int64)
        elif unique:
            drawn, tries = self.sampler.sample_distinct(self._rng, self._num_sampled, positives)
            ids = np.union1d(positives, drawn).astype(np.int64)
        else:
            drawn, tries = self.sampler.sample(self._rng, self._num_sampled), self._num_sampled
            ids = np.union1d(positives, drawn).astype(np.int64)
        if ids.size == 0:
            # No positive in the batch and nothing drawn (in-batch negatives, or
            # num_sampled=0): every example's loss is 0, but MXNet cannot take a product
            # over 0 candidates. One stand-in takes their place: an empty selector row
            # (no weight row read or given a gradient) shifted to a logit of -1e30,
            # where its loss and gradient are exactly 0 under both losses.
            return (np.zeros(1, dtype=np.int64), np.full(1, _STAND_IN_LOG_P),
                    np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64),
                    np.diff(indptr).astype(np.float64))
        log_p = np.zeros(ids.size)
        if not exhaustive:
            sampled_only = ~np.isin(ids, positives, assume_unique=True)
            # Floored so that a label the sampler cannot draw (q = 0) gives a
            # large finite shift, not an infinite logit.
            log_p[sampled_only] = np.maximum(
                self.sampler.log_inclusion(ids[sampled_only], tries), -80.0)
        counts = np.diff(indptr)
        rows = np.repeat(np.arange(batch), counts)
        cols = np.searchsorted(ids, positive_ids)
        return ids, log_p, rows, cols, counts.astype(np.float64)

    # ---------------------------------------------------------------- forward
    def _check_input(self, h):
        if h.ndim != 2:
            raise ValueError("%s expects a 2-D (batch_size, in_units) input, got shape %s"
                             % (self.name, tuple(h.shape)))
        in_units = self.in_units
        if in_units and h.shape[1] != in_units:
            raise ValueError("%s was built for inputs of width %d (weight shape %s) but got shape "
                             "%s" % (self.name, in_units, tuple(self.weight.shape), tuple(h.shape)))
        if in_units == 0:
            self.weight.shape = (self._num_labels, h.shape[1])
            for param in self.params.values():
                param._finish_deferred_init()
        if h.stype != "default":
            raise TypeError("%s takes a dense input h (the output of the hidden layers), got %s"
                            % (self.name, h.stype))
        if np.dtype(h.dtype) != np.dtype(self.weight.dtype):
            raise TypeError("%s has %s parameters but h is %s with shape %s; cast h with "
                            "h.astype(...)" % (self.name, np.dtype(self.weight.dtype),
                                               np.dtype(h.dtype), tuple(h.shape)))
        for param in self.params.values():
            if param.grad_req == "add":
                raise ValueError("%s: grad_req='add' is not supported for the row_sparse "
                                 "gradient of %s" % (self.name, param.name))

    def forward(self, h, labels, *args):
        """Loss of each example over its batch's candidates (see the class docstring)."""
        if not isinstance(h, mx.nd.NDArray):
            # Symbolic call (export): the caller passes selector, target, correction.
            return super().forward(h, labels, *args)
        self._check_input(h)
        batch = h.shape[0]
        if batch == 0:
            # MXNet cannot infer shapes with a 0 dimension; its error named none of this.
            raise ValueError("%s: the batch has no rows (h has shape %s): skip empty batches"
                             % (self.name, tuple(h.shape)))
        ids, correction, rows, cols, counts = self._draw(labels, batch)
        dtype = np.dtype(self.weight.dtype)
        if self._loss == "softmax" and rows.size == batch and np.all(counts == 1):
            # One label an example: the target is its column (picked, not a one-hot
            # matrix multiplied in: the same terms, without B x C of zeros).
            target = cols.astype(dtype)
        else:
            target = np.zeros((batch, ids.size), dtype=dtype)
            target[rows, cols] = 1.0 / counts[rows] if self._loss == "softmax" else 1.0
        ctx = h.context
        # Built in this thread (data.batchify's helpers): mx.nd.array and
        # sparse.csr_matrix copy through the engine and wait behind the
        # previous step's queued work, which costs more than the step itself.
        selector = candidate_selector(ids, self._num_labels, dtype, ctx,
                                      stand_in=is_stand_in(correction))
        target = array_to_ndarray(target, ctx)
        correction = array_to_ndarray(correction.astype(dtype), ctx)
        return super().forward(h, selector, target, correction)

    def hybridize(self, active=True, **kwargs):
        """Accepted, as on any block; the layer itself stays imperative.

        Its candidate count changes with every batch, and the logits are one
        ``FullyConnected`` with that many outputs: MXNet's oneDNN (MKLDNN)
        kernel, 5-10x faster here than ``dot`` (OpenBLAS) forward and
        backward, but its ``num_hidden`` is fixed when a graph is built. The
        dozen operators of the loss cost less imperatively than rebuilding a
        cached graph per batch would.
        """
        super().hybridize(False, **kwargs)

    def _candidate_rows(self, F, selector, param):
        """The candidates' rows of ``param``: ``dot(selector, param)``, block by block for a
        list of selector blocks (:func:`candidate_selector`); a hook: the row_sparse-weight
        subclass reads a pulled row_sparse array with MXNet's sparse.dot."""
        return _blockwise(F, F.gluon_sparse_dot, selector, param)

    def hybrid_forward(self, F, h, selector, target, correction, weight, bias=None):
        rows = self._candidate_rows(F, selector, weight)  # (C, in_units): the candidates' rows
        # Each candidate's bias minus its correction, added in the product.
        shift = -correction
        if bias is not None:
            shift = self._candidate_rows(F, selector, bias).reshape((-1,)) - correction
        if F is mx.nd:
            logits = F.FullyConnected(h, rows, shift, num_hidden=rows.shape[0])
        else:  # a symbol (export): the candidate count is not known here
            logits = F.broadcast_add(F.dot(h, rows, transpose_b=True), shift.reshape((1, -1)))
        if F is mx.nd and logits.context.device_type == "cpu":
            # The loss in one operator (csrc/ops/cross_entropy.cc): the composition
            # below is 5 operators forward and 4 backward over (batch, C), and cost
            # 3-4 ms a step at C = 1,280, more than the logits' product.
            return F.gluon_sparse_cross_entropy(logits, target, loss=(
                "softmax" if self._loss == "softmax" else "sigmoid"))
        if self._loss == "softmax":
            if F is mx.nd and target.ndim == 1:  # each example's one label (its column)
                return -F.pick(F.log_softmax(logits, axis=1), target, axis=1)
            return -F.sum(target * F.log_softmax(logits, axis=1), axis=1)
        # Sigmoid cross-entropy, unweighted: log(1 + exp(x)) - x t. MXNet's softrelu
        # is stable (x itself above 20; log1p(exp(x)) below, which is 0, not inf, far
        # below), so this is max(x, 0) - x t + log(1 + exp(-|x|)) in two operators.
        return F.sum(F.Activation(logits, act_type="softrelu") - logits * target, axis=1)

    # ------------------------------------------------------------- prediction
    def _dense_params(self, ctx):
        # Every row is read: bring those a deferred optimizer left behind up to date
        # (data() does not inside a forward pass, where scores() may be called too).
        from ..optimizer import deferred
        with mx.autograd.pause():
            deferred.flush([p for p in (self.weight, self.bias) if p is not None])
        weight = self.weight.data(ctx)
        bias = self.bias.data(ctx).reshape((-1,)) if self.bias is not None else None
        return weight, bias

    def scores(self, h):
        """Scores of all labels, shape ``(batch_size, num_labels)``: for small label sets.

        Deferred Adam rows are brought up to date first.
        """
        weight, bias = self._dense_params(h.context)
        if np.dtype(h.dtype) != np.dtype(weight.dtype):
            raise TypeError("%s has %s parameters but h is %s with shape %s; cast h with "
                            "h.astype(...)" % (self.name, np.dtype(weight.dtype),
                                               np.dtype(h.dtype), tuple(h.shape)))
        return _block_scores(h, weight, bias)

    def top_k(self, h, k, row_chunk=1024, label_chunk=16384):
        """The ``k`` best labels of each row over all labels, exactly, in bounded memory.

        Scores are computed block by block (``row_chunk`` rows x
        ``label_chunk`` labels) and merged by the operator
        ``gluon_sparse_topk``; see :func:`gluon_sparse.nn.topk.top_k_scores`
        for the order (score descending, ties to the smaller label id).

        Returns
        -------
        ids : numpy.ndarray of int64, shape (batch_size, k)
        scores : numpy.ndarray, shape (batch_size, k)
        """
        weight, bias = self._dense_params(h.context)
        return top_k_scores(h, weight, bias, k, row_chunk=row_chunk, label_chunk=label_chunk)

    def __repr__(self):
        return "{name}({in_units} -> {labels}, loss={loss}, sampler={sampler}, " \
               "num_sampled={k})".format(name=self.__class__.__name__,
                                         in_units=self.in_units or None, labels=self._num_labels,
                                         loss=self._loss, sampler=self.sampler,
                                         k=self._num_sampled)
