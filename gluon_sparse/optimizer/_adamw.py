"""SparseAdam's ``decoupled_wd=True``: AdamW on the family's rule ``adamw``.

The update is MXNet's ``adamw_update`` (``mx.nd.contrib``, dense gradient) as
MXNet's AdamW optimizers call it (MXNet 2.0's ``mx.optimizer.AdamW`` and
GluonNLP's): ``lr=1``, ``eta`` = the learning rate with Adam's bias correction
``lr * sqrt(1 - beta2**t) / (1 - beta1**t)`` and ``wd`` the decoupled weight
decay, so that

    w -= eta * (m / (sqrt(v) + epsilon) + wd * w)

with ``m`` and ``v`` Adam's moments of the gradient alone. Routed like the
family's optimizers (:class:`~gluon_sparse.optimizer._family.SparseRuleMixin`):
a deferred state -> ``gluon_sparse_adamw_deferred_update``; a row_sparse
gradient -> ``gluon_sparse_adamw_update``; a dense gradient -> MXNet's
``adamw_update`` itself. float16 weights with ``multi_precision=True`` go
through a float32 master copy (MXNet's ``update_multi_precision`` wrapper),
which computes what ``mp_adamw_update`` does.
"""
import math

import mxnet as mx
import numpy as np

from .. import _native
from . import _family_state
from ._family import Rule, _as_list

__all__ = ["AdamwRule", "ADAMW", "create_state", "update", "check_options"]

_OP_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _rescale_skips(rescale_grad):
    """adamw_update leaves everything untouched when rescale_grad is 0, NaN or inf."""
    value = float(np.float32(rescale_grad))  # it reaches the kernel as a float32 NDArray
    return value == 0 or not math.isfinite(value)


class AdamwRule(Rule):
    """MXNet's ``adamw_update``: Adam's moments, decoupled weight decay (see the module docstring).

    The operators parse the scalars' text as MXNet's parameter fields do
    (dmlc::stof), so the values given here are MXNet's own.
    """

    name = "adamw"
    state_names = ("mean", "var")
    fixed_names = ("beta1", "beta2", "epsilon")
    step_names = ("lr", "eta", "wd", "clip_gradient", "skip")

    def fixed(self, optimizer):
        return {"beta1": float(optimizer.beta1), "beta2": float(optimizer.beta2),
                "epsilon": float(optimizer.epsilon)}

    def step(self, optimizer, index, step=None):
        return mxnet_arguments(optimizer, index)


ADAMW = AdamwRule()


def mxnet_arguments(optimizer, index):
    """``adamw_update``'s lr, eta, wd and clip_gradient for this update, as MXNet computes them.

    Plus ``skip``: 1 when MXNet's operator skips the update (rescale_grad 0, NaN or inf).

    Called once per update, after ``optimizer._update_count(index)``.
    """
    t = optimizer._index_update_count[index]
    lr = optimizer._get_lr(index)
    wd = optimizer._get_wd(index)
    # MXNet 2.0's AdamW (correct_bias=True): lr * math.sqrt(coef2) / coef1.
    eta = lr * math.sqrt(1. - optimizer.beta2 ** t) / (1. - optimizer.beta1 ** t)
    clip = optimizer.clip_gradient if optimizer.clip_gradient else -1.0
    return {"lr": 1.0, "eta": eta, "wd": float(wd), "clip_gradient": float(clip),
            "skip": float(_rescale_skips(optimizer.rescale_grad))}


def check_options(optimizer):
    """Reject the SparseAdam options the AdamW update does not have."""
    if optimizer.lazy_update or optimizer.flush_denormals:
        raise ValueError("decoupled_wd=True is MXNet's adamw_update, a standard update: it "
                         "cannot be combined with lazy_update=True or flush_denormals=True")


def create_state(optimizer, index, weight):
    """A deferred ``adamw`` state where deferral applies, else ``(mean, var)`` zeros."""
    if optimizer.deferred:
        state = _family_state.create_state(optimizer, ADAMW, index, weight)
        if state is not None:
            return state
    return (mx.nd.zeros(weight.shape, weight.context, dtype=weight.dtype),
            mx.nd.zeros(weight.shape, weight.context, dtype=weight.dtype))


def update(optimizer, index, weight, grad, state):
    """One AdamW update of ``weight`` and ``state`` in place, routed by gradient and state."""
    if isinstance(state, _family_state.DeferredRuleState):
        _family_state.update(optimizer, ADAMW, index, weight, grad, state)
        return
    optimizer._update_count(index)
    if (grad.stype == "row_sparse" and weight.stype == "default"
            and np.dtype(weight.dtype) in _OP_DTYPES
            and np.dtype(grad._aux_type(0)) == np.int64):
        scalars = dict(ADAMW.step(optimizer, index))
        scalars.update(ADAMW.fixed(optimizer))
        _native.load_ops()
        mx.nd.gluon_sparse_adamw_update(weight, grad, *_as_list(state), out=weight,
                                        rescale_grad=optimizer.rescale_grad, **scalars)
        return
    args = mxnet_arguments(optimizer, index)
    del args["skip"]
    if args["clip_gradient"] < 0:
        del args["clip_gradient"]
    mean, var = state
    rescale = mx.nd.full((1,), optimizer.rescale_grad, ctx=weight.context)
    # adamw_update rescales its gradient input in place: hand it a copy.
    grad = grad.copy() if grad.stype == "default" else grad.tostype("default")
    mx.nd.contrib.adamw_update(weight, grad, mean, var, rescale,
                               out=weight, beta1=optimizer.beta1, beta2=optimizer.beta2,
                               epsilon=optimizer.epsilon, **args)
