"""Refuse a ``grad_req`` change that a graph already built cannot honour.

``gluon_sparse_dot`` writes its gradients: MXNet's extension interface
(lib_api) does not tell an operator whether to write or to add. A block
decides at trace time which gradients go through it (FullyConnectedSparse's
bias only while its ``grad_req`` is ``'write'``), and re-decides whenever it
is called again itself. Inside a hybridized parent, though, the parent's
cached graph is reused and the block is not called: a later change of
``grad_req`` to ``'add'`` would be silently overwritten. So a block registers
a check here, and the check raises before such a change takes effect.

``Parameter.grad_req`` is replaced, on the class, by a property that runs the
registered check (one dictionary look-up) and then MXNet's own setter.
"""
import weakref

from mxnet.gluon import Parameter

_checks = weakref.WeakKeyDictionary()  # Parameter -> check(param, new_req)
_mxnet_property = Parameter.grad_req


def _set_grad_req(param, req):
    check = _checks.get(param)
    if check is not None:
        check(param, req)
    _mxnet_property.fset(param, req)


def watch(param, check):
    """Run ``check(param, new_req)`` before every change of ``param.grad_req``.

    ``check`` raises to refuse the change. It should not hold a strong
    reference to its block (use a weakref) so that blocks stay collectable.
    """
    if not isinstance(Parameter.__dict__.get("grad_req"), _GuardedGradReq):
        Parameter.grad_req = _GuardedGradReq(_mxnet_property.fget, _set_grad_req,
                                            doc=_mxnet_property.__doc__)
    _checks[param] = check


class _GuardedGradReq(property):
    """Parameter.grad_req with the checks of :func:`watch` (a type to recognise it by)."""
