"""An ``mx.io.DataIter`` over a :class:`SparseDataLoader` for the Module API."""
import mxnet as mx
import numpy as np
import scipy.sparse as sp

from .batchify import csr_to_ndarray

__all__ = ["SparseNDArrayIter"]


class SparseNDArrayIter(mx.io.DataIter):
    """Adapt a sparse loader to ``mx.io.DataIter`` (``DataBatch``, ``provide_data``).

    Parameters
    ----------
    loader : SparseDataLoader or iterable of (CSRNDArray, NDArray)
        Re-iterable source of batches; one pass per :meth:`reset`.
    data_name, label_name : str
        Names of the data and label in ``provide_data`` / ``provide_label``.

    Notes
    -----
    Every batch has the shape in ``provide_data``, because MXNet's executors
    cannot reshape for sparse inputs: a final smaller batch is padded with
    the epoch's first rows, as ``mx.io.LibSVMIter`` (``round_batch``) and
    ``NDArrayIter(last_batch_handle='pad')`` pad, and ``DataBatch.pad`` says
    how many. ``Module.predict`` drops them; ``Module.fit`` and
    ``Module.score`` see them, as with MXNet's own iterators (rows repeated,
    not invented). The descriptions are read from the first batch, which is
    therefore built on construction.

    Examples
    --------
    >>> it = loader.as_data_iter()  # doctest: +SKIP
    >>> module.fit(it, num_epoch=2)  # doctest: +SKIP
    """

    def __init__(self, loader, data_name="data", label_name="softmax_label"):
        self._loader = loader
        self._data_name = data_name
        self._label_name = label_name
        self._iterator = iter(loader)
        self._first = next(self._iterator, None)
        self._epoch_head = None  # the epoch's first batch: rows to pad the last with
        if self._first is None:
            raise ValueError("the loader yields no batch; cannot describe provide_data")
        data, label = self._first
        super().__init__(batch_size=data.shape[0])
        self._provide_data = [mx.io.DataDesc(data_name, data.shape, data.dtype, layout="NC")]
        self._provide_label = [] if label is None else [
            mx.io.DataDesc(label_name, label.shape, label.dtype, layout="NC"[:label.ndim])]

    @property
    def provide_data(self):
        """``[DataDesc]`` of the data (shape of a full batch)."""
        return self._provide_data

    @property
    def provide_label(self):
        """``[DataDesc]`` of the label, empty when the dataset has none."""
        return self._provide_label

    def reset(self):
        """Start a new epoch (the loader reshuffles if it shuffles)."""
        close = getattr(self._iterator, "close", None)
        if close is not None:
            close()
        self._first = None
        self._epoch_head = None
        self._iterator = iter(self._loader)

    def next(self):
        """Return the next ``mx.io.DataBatch`` or raise StopIteration."""
        if self._first is not None:
            batch, self._first = self._first, None
        else:
            batch = next(self._iterator)
        if self._epoch_head is None:
            self._epoch_head = batch
        data, label = batch
        pad = self.batch_size - data.shape[0]
        if pad > 0:
            data, label = self._pad(data, label, pad, self._epoch_head)
        return mx.io.DataBatch(data=[data], label=None if label is None else [label], pad=pad,
                               provide_data=self._provide_data, provide_label=self._provide_label)

    @staticmethod
    def _pad(data, label, pad, head):
        """``(data, label)`` followed by the first ``pad`` rows of ``head``, the epoch's first
        batch (a full one: the batch size is the first batch's)."""
        head_data, head_label = head
        take = np.arange(pad)
        padded = sp.vstack([data.asscipy(), head_data.asscipy()[take]], format="csr")
        data = csr_to_ndarray(padded, ctx=data.context)
        if label is not None:
            label = mx.nd.array(np.concatenate([label.asnumpy(), head_label.asnumpy()[take]]),
                                ctx=label.context, dtype=label.dtype)
        return data, label
