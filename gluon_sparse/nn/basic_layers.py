"""Gluon blocks whose first layer consumes CSR batches.

The weight of a sparse layer is stored as ``(in_units, units)``, the transpose
of ``gluon.nn.Dense``'s, so that ``dot(csr, weight)`` touches only the weight
rows of the batch's features and its gradient is ``row_sparse``: an optimizer
then has rows, not a dense ``in_units x units`` matrix, to update.

The products go through the operator library's ``gluon_sparse_dot``, whose
``row_sparse`` weight gradient costs O(nnz x units) plus sorting the batch's
feature ids. MXNet's own ``sparse.dot`` gives the same gradient but walks every
one of the ``in_units`` rows in its backward, so a step at 10^7 features costs
~25x more than at 10^5 (benchmarks/bench_scale.py); it is used only where the
operator cannot serve: a dense weight gradient (``weight_grad_stype='default'``).
"""
import functools
import sys
import weakref

import mxnet as mx
import numpy as np
from mxnet.gluon import HybridBlock, nn

from .. import _grad_req, _native
from ._csr import checked_csr
from ._init import DenseLayoutWeight

__all__ = ["FullyConnectedSparse", "FactorizationMachine"]

# The blocks' graphs (and symbols exported from them) name gluon_sparse_dot,
# which exists in MXNet only once the operator library is loaded.
_native.load_ops()


# The dtypes gluon_sparse_dot has kernels for.
_OPERATOR_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _check_dtype(block, dtype):
    """Refuse at construction a parameter dtype the operator cannot compute in."""
    if np.dtype(dtype) not in _OPERATOR_DTYPES:
        raise TypeError("%s: dtype must be float32 or float64 (gluon_sparse_dot has no %s "
                        "kernel), got %r" % (block, np.dtype(dtype), dtype))


def _empty_rows(columns, like):
    # nd.zeros((0, n)) fails: MXNet's legacy shape semantics read 0 as "unknown".
    return mx.nd.array(np.zeros((0, columns), dtype=like.dtype), ctx=like.context)


def _needs_input_grad(x):
    """Whether autograd will want a gradient for the NDArray ``x``: a dense array marked
    with ``attach_grad`` or the result of recorded operations, under ``autograd.record``."""
    if x.stype != "default" or not mx.autograd.is_recording():
        return False
    if x.grad is not None:
        return True
    try:
        return mx.autograd.get_symbol(x).get_children() is not None
    except mx.base.MXNetError:  # not recorded: plain data
        return False


def _depends_on_parameters(symbol):
    """Whether ``symbol`` is computed from a Gluon Parameter (its variables carry
    ``__lr_mult__``; a hybridized block's data inputs are plain variables)."""
    if symbol.get_children() is None:
        return False  # a variable: the parent's input, data
    arguments = set(symbol.list_arguments())
    return any("__lr_mult__" in attrs for name, attrs in symbol.attr_dict().items()
               if name in arguments)


def _graph_trace():
    """``(owner, trace)``: the HybridBlock whose graph is being traced
    (``HybridBlock._get_graph`` up the stack) and an id of this tracing, or
    ``(None, None)``. Read at trace time only, where a parent traces its children."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_get_graph":
            owner = frame.f_locals.get("self")
            if isinstance(owner, HybridBlock):
                return owner, id(frame)
        frame = frame.f_back
    return None, None


def _graph_being_built():
    """The HybridBlock whose graph is being traced, or None (see :func:`_graph_trace`)."""
    return _graph_trace()[0]


def _refuse_add_in_parent_graph(layer, param, req):
    layer = layer()
    if (req == "add" and layer is not None and layer._in_parent_graph
            and any(p is param for p in layer._written_by_operator())):
        raise ValueError(
            "%s: %s.grad_req cannot become 'add' while a hybridized parent's graph holds this "
            "block: gluon_sparse_dot writes that gradient there and would overwrite what should "
            "add up. Call the parent's hybridize() first (the graph is rebuilt at its next call), "
            "then set grad_req" % (layer.name, param.name))


class _SparseInputBlock(HybridBlock):
    """Shared input handling of the blocks whose input is a (batch, in_units) matrix.

    ``forward`` validates NDArray input before MXNet sees it, so a wrong width,
    rank or dtype produces an error naming the shapes instead of an opaque
    shape-inference failure inside the graph; dense input is converted to CSR
    so the weight gradient stays row_sparse. Subclasses list in ``_row_params``
    the attributes of the parameters with one row per input feature.
    """

    _row_params = ()
    #: Whether the block's result depends on a row holding each column once (a product
    #: that squares entries does); such batches are made canonical before the graph.
    _needs_canonical_input = False
    _graph_owners = ()  # the hybridized parents whose graphs hold a trace of this block
    _input_grad = False  # the NDArray input of this call needs a gradient
    _traced_input_grad = None  # whether the last traced graph differentiates its input

    def _feature_params(self):
        return [getattr(self, name) for name in self._row_params]

    def _written_by_operator(self):
        """The parameters whose gradient gluon_sparse_dot writes in the last traced graph."""
        return [p for p in self._feature_params() if p._grad_stype == "row_sparse"]

    @property
    def _in_parent_graph(self):
        """Whether a hybridized parent's cached graph still holds a trace of this block.

        Asked of the parents themselves: a parent's ``hybridize()`` drops its graph,
        the block's own ``hybridize()`` does not drop the parent's.
        """
        return any(owner._cached_op is not None or owner._cached_graph
                   for owner in self._graph_owners)

    def _watch_grad_reqs(self):
        """A hybridized parent's graph keeps this block's trace and never calls it again:
        refuse grad_req='add' for the gradients gluon_sparse_dot writes there
        (gluon_sparse._grad_req), instead of letting the graph overwrite them."""
        owner = _graph_being_built()
        if owner is None or owner is self:
            return  # traced for export or by hand: no cached graph keeps it
        if not self._graph_owners:
            self._graph_owners = weakref.WeakSet()
        self._graph_owners.add(owner)
        layer = weakref.ref(self)
        for param in self.collect_params().values():
            _grad_req.watch(param, functools.partial(_refuse_add_in_parent_graph, layer),
                            key=id(self))

    @property
    def in_units(self):
        """Number of input features (0 until inferred from the first batch)."""
        shape = self._feature_params()[0].shape
        return shape[0] if shape else 0

    def _empty_output(self, x):
        """The output of a batch with no rows (MXNet cannot infer shapes with a 0 dim)."""
        return _empty_rows(self._output_units, x)

    def _check_grad_req(self):
        # lib_api does not tell an operator whether to write or add its output,
        # so gluon_sparse_dot always writes; MXNet's sparse.dot refuses 'add' too.
        for param in self._feature_params():
            if param.grad_req == "add" and param._grad_stype == "row_sparse":
                raise ValueError("%s: grad_req='add' is not supported for the row_sparse gradient "
                                 "of %s (MXNet's sparse dot does not support it either); use "
                                 "grad_req='write' and accumulate outside"
                                 % (self.__class__.__name__, param.name))

    def _check_input(self, x):
        name = self.__class__.__name__
        if x.ndim != 2:
            raise ValueError("%s expects a 2-D (batch_size, in_units) input, got shape %s"
                             % (name, tuple(x.shape)))
        dtype = np.dtype(x.dtype)
        if dtype.kind != "f":
            raise TypeError("%s expects floating-point input, got dtype %s with shape %s; "
                            "convert it with x.astype('float32')" % (name, dtype, tuple(x.shape)))
        param = self._feature_params()[0]
        in_units = self.in_units
        if in_units and x.shape[1] != in_units:
            raise ValueError("%s was built for %d input features (%s has shape %s) but got a "
                             "batch of shape %s" % (name, in_units, param.name, tuple(param.shape),
                                                   tuple(x.shape)))
        if np.dtype(param.dtype) not in _OPERATOR_DTYPES:
            raise TypeError("%s has %s parameters; gluon_sparse_dot computes in float32 or "
                            "float64 (block.cast('float32'))" % (name, np.dtype(param.dtype)))
        if dtype != np.dtype(param.dtype):
            raise TypeError("%s has %s parameters but the input is %s; cast one of them "
                            "(x.astype(...) or block.cast(...))" % (name, np.dtype(param.dtype), dtype))
        if x.stype == "csr":
            aux_types = [np.dtype(t) for t in x._aux_types]
            if any(t != np.int64 for t in aux_types):
                # The operator library reads CSR index arrays as int64, MXNet's default.
                raise TypeError("%s expects a CSR batch with int64 indptr and indices, got %s "
                                "(shape %s)" % (name, "/".join(map(str, aux_types)), tuple(x.shape)))
        self._check_grad_req()

    def forward(self, x, *args):
        self._input_grad = False
        if not isinstance(x, (mx.nd.NDArray, mx.sym.Symbol)) and hasattr(x, "tocsr"):
            # A scipy matrix: Gluon's own error ("one NDArray or one Symbol") names no way out.
            raise TypeError("%s takes an MXNet CSRNDArray (or NDArray), got a scipy %s of shape "
                            "%s; convert it with gluon_sparse.data.csr_to_ndarray(X) or "
                            "mx.nd.sparse.csr_matrix(X)" % (self.__class__.__name__,
                                                             type(x).__name__, tuple(x.shape)))
        if isinstance(x, mx.sym.Symbol):
            self._watch_grad_reqs()
        if isinstance(x, mx.nd.NDArray):
            self._check_input(x)
            if self.in_units == 0:
                # Finish deferred initialisation here rather than in the graph: see infer_shape.
                self.infer_shape(x)
                for param in self.params.values():
                    param._finish_deferred_init()
            if x.shape[0] == 0:
                return self._empty_output(x)
            if x.stype == "csr" and (self._needs_canonical_input or
                                     any(p._grad_stype != "row_sparse"
                                         for p in self._feature_params())):
                # MXNet's sparse.dot serves a dense gradient, unchecked, and its imperative
                # backward assigns a repeated column's entries instead of adding them; a
                # squared product would square a repeated column's entries one by one.
                x = checked_csr(x, self.__class__.__name__, canonical=True)
            self._input_grad = _needs_input_grad(x)
            if self._cached_graph and self._traced_input_grad != self._input_grad:
                self._clear_cached_op()  # the graph was traced for the other kind of input
            if x.stype == "default" and not self._input_grad:
                # The products accept dense data but scan all of it, in the
                # forward and again in the backward; one conversion keeps them O(nnz).
                x = x.tostype("csr")
        return super().forward(x, *args)

    def _differentiates_input(self, F, x):
        """Whether this graph must pass a gradient to ``x`` (see :meth:`_input_gradient`):
        an NDArray input that needs one, or, traced in a hybridized parent, an input
        computed from parameters (a layer before this one). An input computed from the
        parent's data alone (``x * 0.5``) needs none: the term would make every step
        dense."""
        differentiate = self._input_grad or (F is mx.sym and _depends_on_parameters(x))
        self._traced_input_grad = differentiate
        # The input gradient, ograd . W^T, reads every row of the weight, where the
        # products read only the batch's: a deferred optimizer must keep them all current.
        from ..optimizer import deferred
        owner, trace = _graph_trace()
        deferred.set_read_whole(self._feature_params(), differentiate, owner=owner or self,
                                trace=trace)
        return differentiate

    @staticmethod
    def _input_gradient(F, x, jacobian):
        """A term of value zero whose gradient with respect to ``x`` is ``ograd * jacobian``.

        ``gluon_sparse_dot``, like MXNet's ``sparse.dot``, does not differentiate
        with respect to its data operand: its input is data. Where the input is
        computed by trainable layers (or marked with ``attach_grad``), the
        products take ``BlockGrad(x)`` and this term, ``(x - BlockGrad(x)) *
        jacobian`` summed over the features, carries the input's gradient. It
        adds an exact 0 to the output (for finite values) and costs a dense
        ``(batch, in_units)`` pass, as a dense layer's input gradient does.
        """
        return F.sum((x - F.BlockGrad(x)) * jacobian, axis=1, keepdims=True)

    def infer_shape(self, x, *args):
        # Deferred initialisation: in_units is the batch's width, like gluon.nn.Dense.
        # Every parameter shape follows from it, and MXNet's dot cannot infer a
        # partially known right-hand side, so no symbolic inference is needed or used.
        for param in self._feature_params():
            if not param.shape or param.shape[0] == 0:
                param.shape = (x.shape[1],) + tuple(param.shape[1:])


class FullyConnectedSparse(_SparseInputBlock):
    r"""Fully connected layer for CSR input: ``activation(dot(x, weight) + bias)``.

    The weight has shape ``(in_units, units)`` (the transpose of
    :class:`mxnet.gluon.nn.Dense`'s) so that a CSR batch yields a
    ``row_sparse`` weight gradient holding only the rows of the batch's
    features. Results equal ``Dense(units, in_units=in_units)`` with the
    transposed weight, for CSR and dense input, imperative and hybridized.

    Parameters
    ----------
    units : int
        Dimensionality of the output.
    activation : str, optional
        Activation applied to the output (any :func:`mxnet.ndarray.Activation`
        ``act_type``). Default: none.
    use_bias : bool, default True
        Whether to add a bias vector.
    dtype : str or numpy.dtype, default 'float32'
        Data type of the parameters.
    weight_initializer : str or Initializer, optional
        Initializer of the ``(in_units, units)`` weight (None: the one given to
        ``initialize``). Initializers get Dense's fans: Xavier's and
        MSRAPrelu's fan-in is ``in_units``, and one seed gives Dense's values in
        Dense's memory order (``gluon_sparse.nn._init``).
    bias_initializer : str or Initializer, default 'zeros'
        Initializer of the bias.
    in_units : int, default 0
        Number of input features; 0 infers it from the first batch.
    weight_grad_stype : {'row_sparse', 'default'}, default 'row_sparse'
        Storage type of the weight gradient. ``'default'`` gives a dense gradient
        (useful only to measure what sparsity saves).
    prefix : str, optional
        Prefix of this block's parameter names (Gluon's Block argument).
    params : ParameterDict, optional
        Parameters to share with another block (Gluon's Block argument).

    Notes
    -----
    Called as ``block(data)``: ``data`` is a CSRNDArray (or NDArray) of shape
    ``(batch_size, in_units)``; the result an NDArray of shape
    ``(batch_size, units)``.

    Cost of a step: the forward and the ``row_sparse`` weight gradient cost
    O(nnz x units) plus sorting the batch's feature ids (operator
    ``gluon_sparse_dot``), nothing proportional to ``in_units``; with a lazy
    or deferred Adam the update touches only the gradient's rows too. Memory:
    the weight, plus the optimizer's states (Adam: mean and var), i.e.
    ``3 x in_units x units x 4`` bytes in float32 (15.4 GB for 10^7 x 128),
    which must fit in one machine's memory. Beyond that, keep the weight
    ``row_sparse`` on MXNet's parameter servers and pull only the batch's rows
    (see :mod:`gluon_sparse.distributed`). ``grad_req='add'`` is refused for a
    ``row_sparse`` weight gradient, as by MXNet's own sparse dot.

    The bias is added inside the same operator (``with_bias``) when its gradient
    is written (``grad_req='write'``, the default), with the arithmetic of
    MXNet's ``broadcast_add``, so results are bitwise those of a separate add;
    with ``'add'`` or ``'null'`` MXNet adds it. A change of ``bias.grad_req``
    is seen at the block's next call. A hybridized parent, though, reuses the
    graph it traced and does not call the block again: there a change to
    ``'add'`` raises ``ValueError`` until the parent's ``hybridize()`` has been
    called (which rebuilds the graph), rather than being silently overwritten.

    Examples
    --------
    >>> import mxnet as mx
    >>> from gluon_sparse.nn import FullyConnectedSparse
    >>> layer = FullyConnectedSparse(4, in_units=1000)
    >>> layer.initialize()
    >>> x = mx.nd.sparse.csr_matrix(([1.0, 2.0], [3, 999], [0, 1, 2]), shape=(2, 1000))
    >>> layer(x).shape
    (2, 4)
    """

    _row_params = ("weight",)

    def __init__(self, units, activation=None, use_bias=True, dtype="float32",
                 weight_initializer=None, bias_initializer="zeros", in_units=0,
                 weight_grad_stype="row_sparse", prefix=None, params=None):
        super().__init__(prefix=prefix, params=params)
        if weight_grad_stype not in ("row_sparse", "default"):
            raise ValueError("weight_grad_stype must be 'row_sparse' or 'default', got %r"
                             % (weight_grad_stype,))
        _check_dtype("FullyConnectedSparse", dtype)
        self._output_units = units
        with self.name_scope():
            self.weight = self.params.get("weight", shape=(in_units, units),
                                          init=DenseLayoutWeight(weight_initializer), dtype=dtype,
                                          allow_deferred_init=True, grad_stype=weight_grad_stype)
            self.weight._init_adapter = DenseLayoutWeight  # param.initialize(init=...) too
            if use_bias:
                self.bias = self.params.get("bias", shape=(units,), init=bias_initializer,
                                            dtype=dtype, allow_deferred_init=True)
            else:
                self.bias = None
            self.act = nn.Activation(activation, prefix=activation + "_") if activation else None
        self._traced_fused_bias = None  # whether the last traced graph has the fused bias

    def _fuses_bias(self):
        # The bias goes into gluon_sparse_dot (one operator instead of the add and
        # its backward) only where its gradient is written: lib_api does not tell
        # an operator to add to its output (_check_grad_req), and a frozen bias
        # ('null') has no gradient array to write.
        return (self.bias is not None and self.weight._grad_stype == "row_sparse"
                and self.bias.grad_req == "write")

    def forward(self, x, *args):
        if (isinstance(x, mx.nd.NDArray) and self._cached_graph
                and self._traced_fused_bias != self._fuses_bias()):
            self._clear_cached_op()  # bias.grad_req changed since the graph was traced
        return super().forward(x, *args)

    def _written_by_operator(self):
        written = super()._written_by_operator()
        return written + [self.bias] if self._traced_fused_bias else written

    def hybrid_forward(self, F, x, weight, bias=None):
        self._traced_fused_bias = self._fuses_bias()
        differentiate = self._differentiates_input(F, x)
        data = F.BlockGrad(x) if differentiate else x
        if self.weight._grad_stype == "row_sparse":
            self._check_grad_req()  # at trace time too: a hybridized child skips forward()
            if self._traced_fused_bias:
                out = F.gluon_sparse_dot(data, weight, bias, with_bias=True)
                bias = None
            else:
                out = F.gluon_sparse_dot(data, weight)
        else:
            # A dense gradient is what MXNet's dot produces natively.
            out = F.sparse.dot(data, weight)
        if differentiate:
            # (x - BlockGrad(x)) . W: zero, with the input gradient ograd . W^T.
            out = out + F.dot(x - F.BlockGrad(x), F.BlockGrad(weight))
        if bias is not None:
            out = F.broadcast_add(out, bias.reshape((1, -1)))
        if self.act is not None:
            out = self.act(out)
        return out

    def __repr__(self):
        in_units = self.in_units or None
        return "{name}({in_units} -> {units}, {act}, grad_stype={gs})".format(
            name=self.__class__.__name__, in_units=in_units, units=self._output_units,
            act=self.act._act_type if self.act is not None else "linear",
            gs=self.weight._grad_stype)


class FactorizationMachine(_SparseInputBlock):
    r"""Second-order factorization machine (Rendle, 2010) for CSR input.

    .. math::
        y(x) = w_0 + \sum_i w_i x_i + \frac{1}{2} \sum_{f=1}^{k}
               \Big[\big(\sum_i v_{i,f} x_i\big)^2 - \sum_i v_{i,f}^2 x_i^2\Big]

    ``V`` (``factor``, shape ``(in_units, factor_size)``) and ``w``
    (``linear``, shape ``(in_units, 1)``) get ``row_sparse`` gradients, computed
    like the output in O(nnz x k): the ``sum_i v_if^2 x_i^2`` term is a product
    of the batch's squared values with its rows of ``V`` squared (operator
    ``gluon_sparse_dot`` with ``squared=True``), never ``V * V`` as a whole.

    Parameters
    ----------
    factor_size : int
        Number of latent factors ``k``.
    in_units : int, default 0
        Number of input features; 0 infers it from the first batch.
    dtype : str, default 'float32'
        Data type of the parameters.
    factor_initializer : str or Initializer, optional
        Initializer of ``V``; default ``Normal(0.01)``.
    linear_initializer : str or Initializer, default 'zeros'
        Initializer of ``w``.
    bias_initializer : str or Initializer, default 'zeros'
        Initializer of ``w_0``.
    prefix : str, optional
        Prefix of this block's parameter names (Gluon's Block argument).
    params : ParameterDict, optional
        Parameters to share with another block (Gluon's Block argument).

    Notes
    -----
    Called as ``block(data)``: ``data`` is a CSRNDArray (or NDArray) of shape
    ``(batch_size, in_units)``; the result an NDArray of shape
    ``(batch_size, 1)``.

    The pairwise term squares entries one by one, so a row that holds a column
    twice (``3:1 3:2``, which MXNet's CSR format does not allow) is first made
    canonical, its entries summed (``3:3``) as ``scipy.sparse`` sums them: an
    O(nnz) check of each NDArray batch on the host. Inside a hybridized parent
    no Python runs per batch, and such a row is not checked: feed canonical
    batches there (``scipy.sparse``'s ``X.sum_duplicates()``; the library's
    loaders and estimators give them).
    """

    _row_params = ("factor", "linear")
    _needs_canonical_input = True

    def __init__(self, factor_size, in_units=0, dtype="float32", factor_initializer=None,
                 linear_initializer="zeros", bias_initializer="zeros", prefix=None, params=None):
        super().__init__(prefix=prefix, params=params)
        _check_dtype("FactorizationMachine", dtype)
        self._factor_size = factor_size
        self._output_units = 1
        if factor_initializer is None:
            factor_initializer = mx.init.Normal(0.01)
        with self.name_scope():
            self.factor = self.params.get("factor", shape=(in_units, factor_size),
                                          init=factor_initializer, dtype=dtype,
                                          allow_deferred_init=True, grad_stype="row_sparse")
            self.linear = self.params.get("linear", shape=(in_units, 1), init=linear_initializer,
                                          dtype=dtype, allow_deferred_init=True,
                                          grad_stype="row_sparse")
            self.bias = self.params.get("bias", shape=(1,), init=bias_initializer, dtype=dtype,
                                        allow_deferred_init=True)

    def hybrid_forward(self, F, x, factor, linear, bias):
        self._check_grad_req()
        differentiate = self._differentiates_input(F, x)
        data = F.BlockGrad(x) if differentiate else x
        linear_term = F.gluon_sparse_dot(data, linear)
        xv = F.gluon_sparse_dot(data, factor)
        # sum_i x_i^2 v_if^2 for every f, i.e. dot(x*x, V*V), computed on the
        # batch's rows of V only: squaring V itself would cost O(in_units x k).
        sq_term = F.gluon_sparse_dot(data, factor, squared=True)
        pair_term = 0.5 * F.sum(F.square(xv) - sq_term, axis=1, keepdims=True)
        out = linear_term + pair_term
        if differentiate:
            # d y / d x_i = w_i + sum_f v_if (x V)_f - x_i sum_f v_if^2
            v, w = F.BlockGrad(factor), F.BlockGrad(linear)
            jacobian = F.broadcast_sub(
                F.broadcast_add(F.dot(F.BlockGrad(xv), v, transpose_b=True), w.reshape((1, -1))),
                F.broadcast_mul(data, F.sum(F.square(v), axis=1).reshape((1, -1))))
            out = out + self._input_gradient(F, x, jacobian)
        return F.broadcast_add(out, bias.reshape((1, 1)))

    def __repr__(self):
        return "{name}({in_units} -> 1, factor_size={k})".format(
            name=self.__class__.__name__, in_units=self.in_units or None, k=self._factor_size)
