"""Blocks whose weights live row by row in a kvstore and are pulled per batch.

:class:`~gluon_sparse.nn.FullyConnectedSparse` keeps a full ``(in_units, units)``
weight on every device and, with a distributed kvstore, pulls all of it after
every step. For 10^7+ input features that is too much for one worker, and a
huge output layer (:class:`~gluon_sparse.nn.SampledOutput` over 10^5-10^6
labels) has the same problem on the output side. The blocks here declare their
weights as ``row_sparse`` :class:`~mxnet.gluon.Parameter` objects, the pattern
of :class:`mxnet.gluon.contrib.nn.SparseEmbedding`: the
:class:`~mxnet.gluon.Trainer` keeps the weight in its kvstore (the servers,
with ``dist_*``; the kvstore's own copy with ``'device'`` / ``'local'`` and
several contexts), each batch pulls only the rows it needs
(``row_sparse_pull``, :func:`pull_rows`) and the Trainer pushes back a
``row_sparse`` gradient of the same rows, updated where the weight lives
(``update_on_kvstore``). Bytes per step are then proportional to the batch,
not to the weight:

* :class:`FullyConnectedSparseRowSparseWeight` pulls the rows of the features
  a CSR batch contains;
* :class:`~gluon_sparse.nn.row_sparse_output.SampledOutputRowSparseWeight`
  (in :mod:`gluon_sparse.nn.row_sparse_output`) pulls the rows (weight and
  bias) of the batch's candidate labels.
"""
import mxnet as mx
import numpy as np
from mxnet.gluon import Block, nn

from .._sparse_entries import first_outside
from ._csr import checked_csr
from ._init import DenseLayoutWeight
from .basic_layers import _empty_rows, _needs_input_grad

__all__ = ["FullyConnectedSparseRowSparseWeight", "pull_rows"]

# Parameter storage of the blocks here: weight and gradient both row_sparse.
ROW_SPARSE = {"stype": "row_sparse", "grad_stype": "row_sparse"}


def pull_rows(param, row_ids, what="row id"):
    """The rows ``row_ids`` of a ``row_sparse`` Parameter, pulled from its Trainer's kvstore.

    The shared mechanism of the blocks of this module: a thin layer over
    :meth:`mxnet.gluon.Parameter.row_sparse_data` (``kvstore.row_sparse_pull``,
    which sends each distinct row once) with a clearer error when no
    :class:`~mxnet.gluon.Trainer` holds the parameter yet.

    Parameters
    ----------
    param : mxnet.gluon.Parameter
        A parameter with ``stype='row_sparse'``.
    row_ids : NDArray of int64
        Rows to pull (need be neither unique nor sorted), on the context whose
        copy of the parameter receives them.
    what : str, default 'row id'
        What an id is to the caller, for the error naming one outside the weight.

    Returns
    -------
    RowSparseNDArray
        The parameter's array on ``row_ids.context``, holding those rows;
        gradients recorded through it land in the parameter's gradient.
    """
    # The kvstore does not check ids against the weight: one past its end is a write
    # out of bounds (heap corruption), so check here, on the host copy of the ids.
    ids = row_ids.asnumpy()
    bad = first_outside(ids, param.shape[0])
    if bad is not None:
        raise ValueError("%s: %s %d is outside [0, %d) (the weight's rows)"
                         % (param.name, what, ids[bad], param.shape[0]))
    trainer = param._trainer
    if trainer is None:
        raise RuntimeError("%s is stored row by row in a Trainer's kvstore: create the "
                           "gluon.Trainer with this block's parameters before the first forward "
                           "pass (no Trainer holds it yet)" % param.name)
    # The first pull hands every parameter of the Trainer to the kvstore
    # (Trainer._init_params, MXNet 1.9.1): make their row_sparse arrays whole first.
    for waiting in list(getattr(trainer, "_params_to_init", ())):
        if waiting._stype == "row_sparse" and waiting._data is not None:
            _store_every_row(waiting)
    return param.row_sparse_data(row_ids)


def _store_every_row(param):
    """Make each copy of a row_sparse Parameter store all of its rows, zero rows included.

    ``load_parameters`` converts a dense saved array (a model trained with the
    plain blocks) with ``tostype('row_sparse')``, which drops the all-zero
    rows, such as those of a bias initialised at 0. The kvstore would then hold
    a weight without those rows: MXNet's row_sparse optimizers refuse it and a
    ``dist_*`` server aborts on an empty one ("init with empty data is not
    supported").
    """
    rows = param.shape[0]
    for array in param._data:
        if array.indices.shape[0] == rows:
            continue
        whole = mx.nd.sparse.row_sparse_array(
            (array.tostype("default"), mx.nd.arange(rows, dtype=np.int64, ctx=array.context)),
            shape=array.shape, ctx=array.context, dtype=array.dtype)
        with mx.autograd.pause():  # the first forward pass may be recording
            array[:] = whole  # in place: autograd and the Trainer hold this array


class FullyConnectedSparseRowSparseWeight(Block):
    r"""``activation(sparse.dot(x, weight) + bias)`` with a ``row_sparse`` weight Parameter.

    Same math and weight layout ``(in_units, units)`` as
    :class:`~gluon_sparse.nn.FullyConnectedSparse`; the difference is where the
    weight lives. Here it is stored in the Trainer's kvstore and every forward
    pass fetches only the rows of the batch's features with
    :meth:`mxnet.gluon.Parameter.row_sparse_data`, so a worker holds the rows of
    one batch, not the whole matrix. Consequences of that design:

    * a :class:`mxnet.gluon.Trainer` must be created with the block's parameters
      before the first forward pass (it owns the kvstore the rows come from);
    * updates always happen in the kvstore (``update_on_kvstore=True``), with a
      ``row_sparse`` gradient: use an optimizer with a row_sparse update (SGD,
      Adam, AdaGrad with ``lazy_update``, or gluon-sparse's SparseAdam);
    * with a ``dist_*`` kvstore, create the optimizer with
      ``rescale_grad=1.0 / batch_size`` and call ``trainer.step(1)``: the Trainer
      sends the optimizer to the servers at the first row pull, before any
      ``step(batch_size)`` could set the scale (MXNet then refuses the step);
    * it is an imperative :class:`~mxnet.gluon.Block`: pulling rows is a runtime
      kvstore call, which a hybridized graph cannot make;
    * ``in_units`` must be given: no deferred shape inference. Initialisation
      still materialises the full weight once on each device before the kvstore
      takes it over (MXNet's Parameter has no lazy row-wise initialiser);
    * deferred Adam (``SparseAdam(deferred=True)``) does not apply: the rows a
      batch reads come up to date from the kvstore, where the optimizer runs
      (eagerly) on the servers.

    Parameters
    ----------
    units : int
        Dimensionality of the output.
    in_units : int
        Number of input features (rows of the weight).
    activation : str, optional
        Activation applied to the output (any :func:`mxnet.ndarray.Activation`
        ``act_type``). Default: none.
    use_bias : bool, default True
        Whether to add a (dense) bias vector.
    dtype : str or numpy.dtype, default 'float32'
        Data type of the parameters.
    weight_initializer : str or Initializer, optional
        Initializer of the ``(in_units, units)`` weight (None: the one given to
        ``initialize``). Initializers get Dense's fans: Xavier's and
        MSRAPrelu's fan-in is ``in_units``, and one seed gives Dense's values in
        Dense's memory order (``gluon_sparse.nn._init``).
    bias_initializer : str or Initializer, default 'zeros'
        Initializer of the bias.
    prefix : str, optional
        Prefix of this block's parameter names (Gluon's Block argument).
    params : ParameterDict, optional
        Parameters to share with another block (Gluon's Block argument).

    Notes
    -----
    Called as ``block(data)``: ``data`` is a CSRNDArray (or NDArray) of shape
    ``(batch_size, in_units)``; the result an NDArray of shape
    ``(batch_size, units)``.

    Examples
    --------
    >>> import mxnet as mx
    >>> from mxnet import autograd, gluon
    >>> from gluon_sparse.nn.row_sparse_weight import FullyConnectedSparseRowSparseWeight
    >>> layer = FullyConnectedSparseRowSparseWeight(4, in_units=1000)
    >>> layer.initialize()
    >>> trainer = gluon.Trainer(layer.collect_params(), 'sgd', {'learning_rate': 0.1})
    >>> x = mx.nd.sparse.csr_matrix(([1.0, 2.0], [3, 999], [0, 1, 2]), shape=(2, 1000))
    >>> with autograd.record():
    ...     loss = layer(x).sum()
    >>> loss.backward()
    >>> trainer.step(2)
    >>> layer(x).shape
    (2, 4)
    """

    def __init__(self, units, in_units, activation=None, use_bias=True, dtype="float32",
                 weight_initializer=None, bias_initializer="zeros", prefix=None, params=None):
        super().__init__(prefix=prefix, params=params)
        if not isinstance(in_units, (int, np.integer)) or in_units <= 0:
            raise ValueError("%s needs the number of input features: in_units must be a positive "
                             "int, got %r" % (self.__class__.__name__, in_units))
        if not isinstance(units, (int, np.integer)) or units <= 0:
            raise ValueError("units must be a positive int, got %r" % (units,))
        if np.dtype(dtype) not in (np.dtype(np.float32), np.dtype(np.float64)):
            # MXNet's dot of a CSR batch and a row_sparse weight has no other kernels.
            raise TypeError("%s: dtype must be float32 or float64 (MXNet's sparse dot has no %s "
                            "kernel), got %r" % (self.__class__.__name__, np.dtype(dtype), dtype))
        self._units = int(units)
        self._in_units = int(in_units)
        with self.name_scope():
            self.weight = self.params.get("weight", shape=(self._in_units, self._units),
                                          init=DenseLayoutWeight(weight_initializer), dtype=dtype,
                                          **ROW_SPARSE)
            self.weight._init_adapter = DenseLayoutWeight  # param.initialize(init=...) too
            if use_bias:
                self.bias = self.params.get("bias", shape=(self._units,), init=bias_initializer,
                                            dtype=dtype)
            else:
                self.bias = None
            self.act = nn.Activation(activation, prefix=activation + "_") if activation else None

    @property
    def in_units(self):
        """Number of input features."""
        return self._in_units

    @property
    def units(self):
        """Dimensionality of the output."""
        return self._units

    def _check_input(self, x):
        name = self.__class__.__name__
        if not isinstance(x, mx.nd.NDArray):
            raise TypeError("%s takes an NDArray or CSRNDArray batch, got %s (it cannot be "
                            "hybridized: rows are pulled from the kvstore at run time)"
                            % (name, type(x).__name__))
        if x.ndim != 2:
            raise ValueError("%s expects a 2-D (batch_size, in_units) input, got shape %s"
                             % (name, tuple(x.shape)))
        if x.shape[1] != self._in_units:
            raise ValueError("%s was built for %d input features (weight shape %s) but got a "
                             "batch of shape %s" % (name, self._in_units, tuple(self.weight.shape),
                                                   tuple(x.shape)))
        dtype = np.dtype(x.dtype)
        if dtype != np.dtype(self.weight.dtype):
            raise TypeError("%s has %s parameters but the input is %s with shape %s; cast the "
                            "input with x.astype(...)" % (name, np.dtype(self.weight.dtype), dtype,
                                                          tuple(x.shape)))

    def forward(self, x):
        self._check_input(x)
        if self.weight.grad_req == "add":
            raise ValueError("%s: grad_req='add' is not supported for the row_sparse gradient of "
                             "%s (MXNet's sparse dot writes it); use grad_req='write' and "
                             "accumulate outside" % (self.name, self.weight.name))
        if _needs_input_grad(x):
            # The gradient of x is ograd . W^T over every column, but only the rows of
            # the batch's non-zero columns are pulled; MXNet's dot of the CSR copy
            # would pass x no gradient at all (zeros or uninitialised memory).
            raise ValueError("%s cannot pass a gradient to its input (shape %s): it pulls "
                             "only the weight rows of the batch's non-zero columns; use "
                             "FullyConnectedSparse for an input computed by trainable layers, "
                             "or give it x.detach()" % (self.name, tuple(x.shape)))
        if x.shape[0] == 0:
            return _empty_rows(self._units, x)
        if x.stype != "csr":
            # The row ids to pull are the CSR column indices; a dense batch would
            # also make the weight gradient dense.
            x = x.tostype("csr")
        # MXNet's dot of a CSR batch and a row_sparse weight reads the batch
        # unchecked and assumes each row's columns sorted and unique.
        x = checked_csr(x, self.name, canonical=True)
        weight = pull_rows(self.weight, x.indices, "CSR column index")
        out = mx.nd.sparse.dot(x, weight)
        if self.bias is not None:
            out = mx.nd.broadcast_add(out, self.bias.data(x.context).reshape((1, -1)))
        if self.act is not None:
            out = self.act(out)
        return out

    def __repr__(self):
        return "{name}({in_units} -> {units}, {act}, weight_stype=row_sparse)".format(
            name=self.__class__.__name__, in_units=self._in_units, units=self._units,
            act=self.act._act_type if self.act is not None else "linear")

