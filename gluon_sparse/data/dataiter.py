"""An ``mx.io.DataIter`` over a :class:`SparseDataLoader` for the Module API."""
import mxnet as mx

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
    ``provide_data`` describes a full batch; a final smaller batch is yielded
    as is with ``pad=0`` (the Module API reshapes for it). The descriptions
    are read from the first batch, which is therefore built on construction.

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
        self._iterator = iter(self._loader)

    def next(self):
        """Return the next ``mx.io.DataBatch`` or raise StopIteration."""
        if self._first is not None:
            batch, self._first = self._first, None
        else:
            batch = next(self._iterator)
        data, label = batch
        if data.shape[0] == self.batch_size:
            provide_data, provide_label = self._provide_data, self._provide_label
        else:  # the final smaller batch describes its own shape
            provide_data = [mx.io.DataDesc(self._data_name, data.shape, data.dtype, layout="NC")]
            provide_label = [] if label is None else [
                mx.io.DataDesc(self._label_name, label.shape, label.dtype, layout="NC"[:label.ndim])]
        return mx.io.DataBatch(data=[data], label=None if label is None else [label], pad=0,
                               provide_data=provide_data, provide_label=provide_label)
