"""AdaGrad with MXNet's dense-gradient (standard) semantics on row_sparse gradients.

MXNet 1.9.1's ``AdaGrad`` sends a row_sparse gradient to ``adagrad_update``,
which moves only the gradient's rows and refuses ``wd > 0``; a dense gradient
goes through NDArray ops composed in Python. :class:`SparseAdaGrad` gives the
dense-gradient results (every row steps, absent rows with gradient 0) for
row_sparse gradients too, through the family's operators (rule ``adagrad``,
csrc/ops/optim_rule_adagrad.h), eagerly or deferred.

With ``wd == 0`` a step without gradient changes nothing (the history gains
0 * 0 and the weight 0 / sqrt(history + eps) * lr): lazy and standard AdaGrad
agree, and the deferred catch-up of a row is free. With ``wd > 0`` every row
shrinks by ``weight * wd * lr`` at every step.
"""
import math

import mxnet as mx

from ._family import Rule, SparseRuleMixin
from ._mxnet_scalars import scalar_float32
from ._replay_marks import last_step_where

__all__ = ["SparseAdaGrad"]


def states_in_weight_dtype(state, weight):
    """MXNet's state (an NDArray or a tuple of them) converted to ``weight``'s dtype.

    Anything else (a deferred state, None) is returned as it is.
    """
    def convert(array):
        return array if array.dtype == weight.dtype else array.astype(weight.dtype)
    if isinstance(state, mx.nd.NDArray):
        return convert(state)
    if isinstance(state, tuple) and all(isinstance(a, mx.nd.NDArray) for a in state):
        return tuple(convert(a) for a in state)
    return state


class AdaGradRule(Rule):
    """The ``adagrad`` rule's scalars, as mx.optimizer.AdaGrad's dense path uses them."""

    name = "adagrad"
    state_names = ("history",)
    # eps is a step scalar: the rule parses it correctly rounded (fixed scalars
    # are parsed as MXNet's float fields, which could not carry every float32).
    step_names = ("lr", "wd", "clip_gradient", "epsilon", "last_moving_step")

    def step(self, optimizer, index, step=None):
        # lr, wd and eps are operands of the dense path's scalar ops, which parse
        # a double and cast it to float32: pass that float32 (its repr is exact).
        # clip_gradient is clip's float field: pass it as MXNet does (its text).
        # The dense path clips whenever clip_gradient is not None (0 clips to 0).
        clip = optimizer.clip_gradient
        lr = scalar_float32(optimizer._get_lr(index))
        wd = scalar_float32(optimizer._get_wd(index))
        eps = scalar_float32(optimizer.float_stable_eps)
        # AdaGradRule::step_is_identity: a step without gradient moves nothing.
        identity = wd == 0 and 0 < lr < math.inf and eps > 0
        return {"lr": lr, "wd": wd, "clip_gradient": -1.0 if clip is None else float(clip),
                "epsilon": eps,
                "last_moving_step": last_step_where(optimizer, "adagrad.moving", index,
                                                    not identity, step)}


ADAGRAD = AdaGradRule()


@mx.optimizer.Optimizer.register
class SparseAdaGrad(SparseRuleMixin, mx.optimizer.AdaGrad):
    """AdaGrad with MXNet's standard-update semantics and a fast row_sparse path.

    Registered as ``'sparseadagrad'``. Takes :class:`mxnet.optimizer.AdaGrad`'s
    arguments and gives the results of its dense-gradient update::

        grad = clip(grad * rescale_grad, clip_gradient)
        history += square(grad)
        weight += (grad / sqrt(history + eps) + weight * wd) * -lr

    for row_sparse gradients too: rows absent from the gradient step with
    gradient 0, so with ``wd > 0`` they decay (MXNet's row_sparse
    ``adagrad_update`` rejects ``wd > 0``); with ``wd == 0`` they do not move,
    as in lazy AdaGrad. Bitwise equal to ``mx.optimizer.AdaGrad`` in float32;
    in float64 within the float32 rounding of the scalars (lr, wd, eps,
    rescale_grad, clip_gradient travel as C floats; MXNet's own AdaGrad cannot
    update float64 weights, its history is float32).

    Parameters
    ----------
    eps : float, default 1e-7
        Added to the history under the square root; must be > 0 for rows that
        never had a gradient to stay finite (0 / sqrt(0) is NaN, in MXNet too).
    lazy_update : bool, default False
        If True, row_sparse gradients take MXNet's own lazy ``adagrad_update``
        (only the gradient's rows move; ``wd`` must be 0, and then the results
        are the standard update's anyway).
    deferred : bool, default False
        Standard AdaGrad at lazy cost: a row_sparse-gradient weight is updated
        on the gradient's rows only, the others catch up exactly when read
        (gluon-sparse's forward ops, ``param.data()``, saving, pickling, a
        kvstore pull, ``Trainer.save_states``) or flushed
        (:func:`gluon_sparse.optimizer.flush`).
    **kwargs
        Passed to :class:`mxnet.optimizer.Optimizer`: ``learning_rate``,
        ``wd``, ``rescale_grad``, ``clip_gradient`` (>= 0), ``lr_scheduler``,
        ``multi_precision``, ``param_dict``, ...

    Examples
    --------
    >>> import mxnet as mx
    >>> import gluon_sparse.optimizer
    >>> opt = mx.optimizer.create('sparseadagrad', learning_rate=0.1, wd=1e-4,
    ...                           deferred=True)
    >>> type(opt).__name__
    'SparseAdaGrad'
    """

    def __init__(self, eps=1e-7, lazy_update=False, deferred=False, **kwargs):
        if deferred and lazy_update:
            raise ValueError("deferred=True replays the standard update exactly; it cannot be "
                             "combined with lazy_update=True")
        super().__init__(eps=eps, deferred=deferred, **kwargs)
        self.lazy_update = lazy_update
        if lazy_update and self.wd:
            raise ValueError("lazy_update=True takes MXNet's row_sparse adagrad_update, which "
                             "does not support wd (got wd=%r); lazy_update=False gives "
                             "AdaGrad with weight decay on every row" % (self.wd,))
        if self.clip_gradient is not None and self.clip_gradient < 0:
            raise ValueError("clip_gradient must be >= 0 or None, got %r (MXNet's AdaGrad "
                             "would clip to the empty range [%r, %r])"
                             % (self.clip_gradient, -self.clip_gradient, self.clip_gradient))

    def _rule(self):
        return ADAGRAD

    def update(self, index, weight, grad, state):
        """One AdaGrad step (routed as :class:`~gluon_sparse.optimizer.SparseRuleMixin` says).

        A row_sparse gradient that the family's operators do not take (a float16
        weight without multi_precision, int32 row indices) goes to MXNet's dense
        path, the standard update, rather than its lazy ``adagrad_update``
        (which also refuses ``wd > 0``), unless ``lazy_update``.
        """
        if (grad.stype == "row_sparse" and weight.stype == "default" and not self.lazy_update
                and isinstance(state, mx.nd.NDArray) and not self._uses_operator(weight, grad)):
            grad = grad.tostype("default")
        super().update(index, weight, grad, state)

    def create_state(self, index, weight):
        """The history (MXNet's layout) in the weight's dtype, or a deferred state.

        MXNet's AdaGrad makes a float32 history whatever the weight's dtype,
        which its own update then rejects for float64 and float16 weights.
        """
        return states_in_weight_dtype(super().create_state(index, weight), weight)
