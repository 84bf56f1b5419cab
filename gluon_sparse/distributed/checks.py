"""Refuse parameter layouts that MXNet 1.9.1's dist kvstore cannot train.

A *dense* weight with a *row_sparse* gradient (``FullyConnectedSparse``,
``FactorizationMachine``, ``SampledOutput``) works with the ``'device'`` /
``'local'`` kvstores, but with ``dist_*`` the Gluon Trainer initialises the key on the servers with
the dense weight and then pushes row_sparse gradients to it. The server
handles such a push as if the stored weight were row_sparse and aborts
(``ndarray_function.cc: Check failed: size == to->Size()``), taking the whole
job down. Train such layers with a row_sparse weight instead
(:class:`~gluon_sparse.nn.row_sparse_weight.FullyConnectedSparseRowSparseWeight`,
:class:`~gluon_sparse.nn.row_sparse_weight.SampledOutputRowSparseWeight` for
``SampledOutput``), whose init, pushes and pulls are all row_sparse.
"""
__all__ = ["check_dist_params"]


def _kvstore_type(kvstore):
    return kvstore if isinstance(kvstore, str) else getattr(kvstore, "type", "")


def check_dist_params(params, kvstore):
    """Raise before training if ``kvstore`` is distributed and cannot train ``params``.

    Parameters
    ----------
    params : ParameterDict or list of Parameter
        What the Trainer will update.
    kvstore : str or KVStore
        The Trainer's kvstore.

    Raises
    ------
    ValueError
        Naming every parameter with a dense weight and a row_sparse gradient
        when ``kvstore`` is a ``dist_*`` kvstore.
    """
    if "dist" not in _kvstore_type(kvstore):
        return
    params = params.values() if hasattr(params, "values") else params
    offending = [p.name for p in params
                 if p._stype == "default" and p._grad_stype != "default" and p.grad_req != "null"]
    if offending:
        raise ValueError(
            "%s cannot train parameters with a dense weight and a row_sparse gradient (%s): "
            "MXNet 1.9.1's kvstore server aborts on their pushes. Use "
            "FullyConnectedSparseRowSparseWeight (row_sparse weight) for the sparse input "
            "layers and SampledOutputRowSparseWeight for SampledOutput, or "
            "weight_grad_stype='default' (dense gradients, every row sent at every step)."
            % (_kvstore_type(kvstore), ", ".join(offending)))
