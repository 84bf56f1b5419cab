"""Split CSR batches across the devices of one machine.

The rule is MXNet's own (:func:`mxnet.gluon.utils.split_data` with
``even_split=False``): ``n`` rows in ``k`` parts give the first ``n % k`` parts
one row more than the others. A batch of 10 rows on 3 devices is 4 + 3 + 3.
(Sharing a dataset among workers is the data pipeline's job:
``gluon_sparse.data.SparseDataLoader(num_parts=..., part_index=...)``.)

Gradients stay exact with uneven parts when every part's loss is *summed* (not
averaged) and ``Trainer.step`` gets the global batch size: the sum of the
parts' gradients is then the gradient of the whole batch.
"""
import mxnet as mx
import numpy as np
import scipy.sparse as sp
from mxnet.gluon.utils import split_and_load

__all__ = ["part_sizes", "split_and_load_batch", "steps_per_epoch"]


def part_sizes(num_rows, num_parts):
    """Sizes of ``num_parts`` contiguous, near-even parts of ``num_rows`` rows.

    Parameters
    ----------
    num_rows : int
        Number of rows to divide (>= 0).
    num_parts : int
        Number of parts (>= 1).

    Returns
    -------
    list of int
        ``num_parts`` sizes summing to ``num_rows``; the first ``num_rows % num_parts``
        are one larger than the rest.

    Examples
    --------
    >>> part_sizes(10, 3)
    [4, 3, 3]
    """
    if not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool)
               for n in (num_rows, num_parts)):
        raise TypeError("part_sizes takes integers, got num_rows=%r, num_parts=%r"
                        % (num_rows, num_parts))
    if num_parts < 1:
        raise ValueError("num_parts must be at least 1, got %d" % num_parts)
    if num_rows < 0:
        raise ValueError("num_rows must be non-negative, got %d" % num_rows)
    base, extra = divmod(num_rows, num_parts)
    return [base + 1] * extra + [base] * (num_parts - extra)


def steps_per_epoch(num_rows, global_batch_size, num_workers):
    """Steps every worker of a synchronous job runs in an epoch: the fewest full local
    batches any worker's share holds.

    Each worker reads its share of ``num_rows // num_workers`` rows
    (``SparseDataLoader(num_parts=num_workers, part_index=rank)``) in local
    batches of ``part_sizes(global_batch_size, num_workers)[rank]`` rows. Where
    the global batch does not divide evenly the local batches differ, and so
    would the workers' batch counts: a ``dist_sync`` job whose workers push
    different numbers of steps waits forever for the missing pushes. Run
    this many steps on every worker (``itertools.islice(loader, steps)``);
    the rows beyond them in the shares of the workers with smaller local
    batches are left out of the epoch.

    Parameters
    ----------
    num_rows : int
        Rows of the whole dataset.
    global_batch_size : int
        Rows of one step over all workers.
    num_workers : int
        Workers (``kv.num_workers``).

    Returns
    -------
    int

    Raises
    ------
    ValueError
        If the global batch leaves some worker without rows.

    Examples
    --------
    >>> part_sizes(9, 2), steps_per_epoch(90, 9, 2)  # shares of 45 rows: 9 x 5, 11 x 4
    ([5, 4], 9)
    """
    local_sizes = part_sizes(global_batch_size, num_workers)
    if min(local_sizes) == 0:
        raise ValueError("a global batch of %d rows leaves some of the %d workers without rows"
                         % (global_batch_size, num_workers))
    if num_rows < 0:
        raise ValueError("num_rows must be non-negative, got %d" % num_rows)
    return (num_rows // num_workers) // max(local_sizes)


def _as_ndarray(array, what, ctx):
    """``array`` as an NDArray on ``ctx``: SciPy input as CSR, NumPy and lists as MXNet's
    default float32 (bool and integer features too, which MXNet's slicing cannot take)."""
    if isinstance(array, mx.nd.NDArray):
        return array
    if sp.issparse(array):
        csr = sp.csr_matrix(array)
        if csr.dtype.kind not in "f":
            csr = csr.astype(np.float32)
        return mx.nd.sparse.csr_matrix(csr, ctx=ctx)
    try:
        values = np.asarray(array)
    except (TypeError, ValueError) as err:
        raise TypeError("%s must be an NDArray, a scipy.sparse matrix or array-like, got %s"
                        % (what, type(array).__name__)) from err
    if values.ndim == 0:
        raise ValueError("%s must hold one row per sample, got the scalar %r" % (what, values))
    if values.dtype.kind in "iu":
        # float32 holds every integer up to 2^24, not all past it: a class id would change.
        changed = np.flatnonzero(values.astype(np.float32).astype(values.dtype) != values)
        if changed.size:
            raise ValueError("%s holds the integer %d, which float32 (the dtype it would "
                             "become) cannot hold exactly; pass an NDArray of the dtype you "
                             "need" % (what, values.flat[changed[0]]))
    try:
        return mx.nd.array(values, ctx=ctx)
    except (TypeError, ValueError) as err:
        raise TypeError("%s must be an NDArray, a scipy.sparse matrix or array-like, got %s"
                        % (what, type(array).__name__)) from err


def split_and_load_batch(data, label, ctx_list):
    """Split a batch and its labels row-wise across contexts, keeping CSR storage.

    A thin layer over :func:`mxnet.gluon.utils.split_and_load` (which keeps a
    ``CSRNDArray`` in CSR and, with ``even_split=False``, splits unevenly) that
    also splits the labels the same way, accepts SciPy / NumPy input and checks
    the shapes first.

    Parameters
    ----------
    data : CSRNDArray, NDArray, scipy.sparse matrix or numpy.ndarray
        Batch of shape ``(batch_size, num_features)``; SciPy matrices become CSR.
    label : NDArray, array-like or None
        Labels with ``batch_size`` rows, or ``None``.
    ctx_list : list of Context (or one Context)
        Devices to load the parts on, in order.

    Returns
    -------
    data_parts : list of NDArray
        One part per context; CSR input gives ``CSRNDArray`` parts.
    label_parts : list of NDArray or None
        The matching label parts (``None`` when ``label`` is ``None``).

    Raises
    ------
    ValueError
        If the shapes disagree or the batch has fewer rows than there are
        contexts (a context without rows would keep a stale gradient).

    Examples
    --------
    >>> import mxnet as mx, scipy.sparse as sp
    >>> x = sp.random(5, 100, density=0.05, format='csr', random_state=0)
    >>> xs, ys = split_and_load_batch(x, [0, 1, 0, 1, 1], [mx.cpu(0), mx.cpu(1)])
    >>> [(p.stype, p.shape[0]) for p in xs], [y.shape[0] for y in ys]
    ([('csr', 3), ('csr', 2)], [3, 2])
    """
    ctx_list = [ctx_list] if isinstance(ctx_list, mx.Context) else list(ctx_list)
    if not ctx_list:
        raise ValueError("ctx_list is empty: give at least one context")
    data = _as_ndarray(data, "data", ctx_list[0])
    if data.ndim != 2:
        raise ValueError("data must be a 2-D (batch_size, num_features) batch, got shape %s"
                         % (tuple(data.shape),))
    num_rows = data.shape[0]
    if num_rows < len(ctx_list):
        raise ValueError("a batch of %d rows cannot be split across %d contexts: every context "
                         "needs at least one row, otherwise it keeps a stale gradient; use a "
                         "larger batch or fewer contexts for this batch"
                         % (num_rows, len(ctx_list)))
    data_parts = split_and_load(data, ctx_list, even_split=False)
    if label is None:
        return data_parts, None
    label = _as_ndarray(label, "label", ctx_list[0])
    if label.shape[0] != num_rows:
        raise ValueError("data has %d rows but label has %d (label shape %s)"
                         % (num_rows, label.shape[0], tuple(label.shape)))
    return data_parts, split_and_load(label, ctx_list, even_split=False)
