"""A Gluon block's parameters as plain numpy arrays, and back.

Pickling and the model directories store the fitted network as
``{structural name: numpy array}``; these functions are the only way in and
out of a block for them, so that both agree on names, dtypes and deferred
Adam's pending rows.
"""
import mxnet as mx
import numpy as np

__all__ = ["module_param_arrays", "module_param_ndarrays", "initialize_param",
           "set_module_params", "first_nonfinite_param"]

# Rows of a parameter copied to the host at a time by first_nonfinite_param.
_CHECK_BLOCK_ROWS = 65536


def module_param_ndarrays(module):
    """The parameters of a Gluon block as ``{structural name: NDArray}``: the live arrays.

    The names are the ones :meth:`mxnet.gluon.Block.save_parameters` writes
    (``'0.weight'``, ...): they depend on the block's structure only, not on
    the global name counters, so a rebuilt block accepts them. Rows whose Adam
    updates are still deferred are brought up to date first. No copy is
    made: a model directory's save reads them a block of rows at a time.
    """
    params = module._collect_params_with_prefix()
    # data() brings deferred rows up to date first (optimizer/_parameter_hooks.py).
    return {name: param.data() for name, param in params.items()}


def module_param_arrays(module):
    """:func:`module_param_ndarrays` copied into numpy arrays."""
    return {name: array.asnumpy() for name, array in module_param_ndarrays(module).items()}


def initialize_param(param, values, ctx):
    """Initialise the uninitialised ``param`` on ``ctx`` with the numpy array ``values``.

    ``values`` is handed to MXNet without a copy (and made read-only); its
    shape fills the dimensions a deferred-initialisation block leaves unknown.
    """
    values = np.ascontiguousarray(values, dtype=param.dtype)
    # Parameter.initialize would first fill a new CPU array with the
    # initializer and then copy it to ctx; _load_init (what load_parameters
    # uses) copies ours straight to ctx. For a 10^6 x 32 weight that saves a
    # 128 MB first-touch allocation, a large part of a short fit's time.
    param._load_init(mx.nd.from_numpy(values, zero_copy=True), [ctx])


def set_module_params(module, arrays, ctx):
    """Initialise ``module``'s parameters on ``ctx`` from :func:`module_param_arrays` output."""
    params = module._collect_params_with_prefix()
    missing, extra = set(params) - set(arrays), set(arrays) - set(params)
    if missing or extra:
        raise ValueError("the stored parameters do not fit the network: missing %s, unexpected %s"
                         % (sorted(missing), sorted(extra)))
    for name, param in params.items():
        initialize_param(param, arrays[name], ctx)


def first_nonfinite_param(module):
    """Structural name of the first trained parameter holding a NaN or an infinity, or None.

    Parameters with ``grad_req='null'`` (constants such as a mask of ``-inf``)
    are not trained and not checked. Reads each parameter (deferred rows brought
    up to date) a block of rows at a time, so that the check never holds a
    second copy of a wide layer.
    """
    params = module._collect_params_with_prefix()
    for name, array in module_param_ndarrays(module).items():
        if params[name].grad_req == "null":
            continue
        rows = array.shape[0] if array.ndim > 1 else 1
        for start in range(0, rows, _CHECK_BLOCK_ROWS):
            block = array[start:start + _CHECK_BLOCK_ROWS] if array.ndim > 1 else array
            if not np.isfinite(block.asnumpy()).all():
                return name
    return None
