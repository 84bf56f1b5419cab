"""Initialisation of ``(in_units, units)`` weights as ``gluon.nn.Dense`` initialises its own.

FullyConnectedSparse stores the transpose of Dense's ``(units, in_units)`` weight
(so that a CSR batch gives row_sparse gradient rows). MXNet's Xavier family
reads the fans from the shape: ``fan_in = shape[1]``, ``fan_out = shape[0]``.
Given the transposed shape, ``Xavier(factor_type='in')`` (He initialisation,
``magnitude=2``) would scale by ``units`` instead of ``in_units``: a weight
``sqrt(in_units / units)`` times too large, with no error.
"""
import mxnet as mx

__all__ = ["DenseLayoutWeight"]


@mx.init.register
class DenseLayoutWeight(mx.init.Initializer):
    """Initialise an ``(in_units, units)`` weight exactly as Dense initialises its
    ``(units, in_units)`` weight, then store it in the sparse layers' layout.

    The Xavier family (:class:`mxnet.init.Xavier`, :class:`mxnet.init.MSRAPrelu`)
    draws independent values whose scale depends on the shape only: it fills the
    weight's memory viewed as ``(units, in_units)``, so fans are Dense's and
    the values, for one seed, are Dense's weight reshaped (not transposed: the
    same distribution, not the same initial function). Every other
    initializer sees the weight as it is (elementwise ones, such as the default
    Uniform, give the same values either way; ``Orthogonal`` wants the real
    layout).

    Parameters
    ----------
    inner : str or Initializer, optional
        The block's ``weight_initializer``; None uses the global initializer
        (``initialize(init=...)``), as a parameter without its own would.
    """

    def __init__(self, inner=None):
        # The object itself is used (a custom initializer need not be registered, nor
        # pass its arguments to Initializer.__init__, as for Dense); its dumps() string
        # is what serialises (Symbol attributes, ``mx.init.create``), as MXNet's own.
        described = inner
        if inner is not None and not isinstance(inner, str):
            try:
                described = inner.dumps()
            except (TypeError, ValueError):  # arguments JSON cannot hold
                described = None
        super().__init__(inner=described)
        self._inner = inner

    def _init_weight(self, desc, arr):
        if self._inner is not None:
            inner, call = mx.init.create(self._inner), None
        else:
            inner = desc.global_init
            # As Gluon calls a global initializer: by the parameter's name (Mixed, ...).
            call = lambda out: inner(mx.init.InitDesc(str(desc), global_init=inner), out)
        if not isinstance(inner, mx.init.Xavier) or len(arr.shape) != 2:
            if call is not None:
                call(arr)
            else:
                inner._init_weight(desc, arr)
            return
        dense_shape = arr.shape[::-1]
        if arr.stype == "default":
            inner._init_weight(desc, arr.reshape(dense_shape))  # a view: fills arr
            return
        dense = mx.nd.zeros(dense_shape, ctx=arr.context, dtype=arr.dtype)
        inner._init_weight(desc, dense)
        dense.reshape(arr.shape).tostype(arr.stype).copyto(arr)
