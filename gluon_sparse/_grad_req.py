"""Hooks on ``Parameter.grad_req`` changes, for the two parts that must see them.

``Parameter.grad_req`` is replaced, on the class, by a property that runs the
registered hooks (a dictionary look-up, and the global hooks) and then MXNet's
own setter. Its users:

* :mod:`gluon_sparse.nn` refuses a change that a graph already built cannot
  honour (:func:`watch`). ``gluon_sparse_dot`` writes its gradients: MXNet's
  extension interface (lib_api) does not tell an operator whether to write or
  to add. A block decides at trace time which gradients go through it
  (FullyConnectedSparse's bias only while its ``grad_req`` is ``'write'``),
  and re-decides whenever it is called again itself. Inside a hybridized
  parent, though, the parent's cached graph is reused and the block is not
  called: a later change of ``grad_req`` to ``'add'`` would be silently
  overwritten, so the block's check raises before such a change takes effect.
* :mod:`gluon_sparse.optimizer` brings a deferred weight up to date before it
  is frozen (:func:`before_every_change`): MXNet's setter replaces the arrays
  of a parameter set to ``'null'`` by detached copies, new handles that the
  deferred state does not know.
"""
import weakref

from mxnet.gluon import Parameter

__all__ = ["watch", "before_every_change"]

_checks = weakref.WeakKeyDictionary()  # Parameter -> {key: check(param, new_req)}
_global_hooks = []  # hook(param, new_req), for every parameter
_mxnet_property = Parameter.grad_req


def _set_grad_req(param, req):
    for check in list(_checks.get(param, {}).values()):
        check(param, req)
    for hook in _global_hooks:
        hook(param, req)
    _mxnet_property.fset(param, req)


class _HookedGradReq(property):
    """Parameter.grad_req with the hooks of this module (a type to recognise it by)."""


def _install():
    if not isinstance(Parameter.__dict__.get("grad_req"), _HookedGradReq):
        Parameter.grad_req = _HookedGradReq(_mxnet_property.fget, _set_grad_req,
                                            doc=_mxnet_property.__doc__)


def watch(param, check, key=None):
    """Run ``check(param, new_req)`` before every change of ``param.grad_req``.

    ``check`` raises to refuse the change. It should not hold a strong
    reference to its block (use a weakref) so that blocks stay collectable.
    A parameter shared by several blocks has a check from each: ``key`` (e.g.
    the block's id) replaces that block's earlier check only.
    """
    _install()
    _checks.setdefault(param, {})[key] = check


def before_every_change(hook):
    """Run ``hook(param, new_req)`` before every change of any parameter's ``grad_req``
    (once per hook, however often it is registered)."""
    _install()
    if hook not in _global_hooks:
        _global_hooks.append(hook)
