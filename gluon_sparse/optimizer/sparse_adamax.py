"""AdaMax on the family's rule ``adamax`` (``csrc/ops/optim_rule_adamax.h``)."""
import logging
import math

import mxnet as mx

from ._family import Rule, SparseRuleMixin
from ._mxnet_scalars import scalar_float32

__all__ = ["SparseAdamax"]

logger = logging.getLogger(__name__)


def composed_clip(optimizer):
    """The clip bound MXNet's Python optimizers apply (-1: none).

    mx.optimizer.Adamax and Nadam call ``clip(grad, -c, c)`` for any ``c`` that
    is not None, 0 included; the C++ optimizers clip only for ``c > 0``.
    """
    clip = optimizer.clip_gradient
    return -1.0 if clip is None else float(clip)


def check_clip(clip_gradient):
    """A negative clip_gradient would make MXNet's clip(grad, -c, c) bounds cross."""
    if clip_gradient is not None and not clip_gradient >= 0:
        raise ValueError("clip_gradient must be None or >= 0, got %r" % (clip_gradient,))


class AdamaxRule(Rule):
    """MXNet's ``Adamax.update``: ``m = b1 m + (1-b1) g; u = max(b2 u, |g|); w -= lr_t m / u``."""

    name = "adamax"
    state_names = ("mean", "max_norm")
    fixed_names = ("beta1", "one_minus_beta1", "beta2", "epsilon")
    step_names = ("lr", "wd", "clip_gradient")

    def fixed(self, optimizer):
        # 1 - beta1 as MXNet's Python computes it (double, then the operator's float).
        return {"beta1": float(optimizer.beta1), "one_minus_beta1": 1. - optimizer.beta1,
                "beta2": float(optimizer.beta2), "epsilon": float(optimizer.epsilon)}

    def step(self, optimizer, index, step=None):
        t = optimizer._index_update_count[index]
        lr = optimizer._get_lr(index)
        lr /= (1. - optimizer.beta1 ** t)  # the same double expression as mx.optimizer.Adamax
        # The scalar of MXNet's `lr * m_t`: the double parsed, then cast to float32.
        return {"lr": scalar_float32(lr), "wd": float(optimizer._get_wd(index)),
                "clip_gradient": composed_clip(optimizer)}


ADAMAX = AdamaxRule()


@mx.optimizer.Optimizer.register
class SparseAdamax(SparseRuleMixin, mx.optimizer.Adamax):
    """AdaMax with MXNet's standard-update semantics and fast row_sparse paths.

    Registered as ``'sparseadamax'``. Accepts the arguments of
    :class:`mxnet.optimizer.Adamax` and produces the results of its update on
    the *dense* gradient: every row steps at every update, rows absent from a
    row_sparse gradient with gradient 0 (``m`` and ``u`` decay, weight decay
    moves them). Updates are routed by gradient:

    * row_sparse gradient, ``deferred=False``: ``gluon_sparse_adamax_update``,
      one pass over the weight;
    * row_sparse gradient, ``deferred=True``: only the gradient's rows are
      updated; the others catch up (replaying the steps they missed, bitwise
      as the eager operator) when gluon-sparse's blocks read them and whenever
      Gluon reads or writes the weight (``param.data()``, saving, pickling,
      kvstore, ...);
    * dense float32 gradient on the CPU, when Trainer hands over several weights
      (MXNet's optimizer aggregation): all of them in one call of
      ``gluon_sparse_adamax_multi_update`` (MXNet's results, without
      its operators per weight);
    * other dense gradients or float16: MXNet's own ``Adamax.update`` (with
      ``epsilon > 0``, the same NDArray operations dividing by ``u + epsilon``).

    For float32 weights the results are bitwise those of
    ``mx.optimizer.Adamax().update`` on the dense gradient (the operator repeats
    its NDArray operations one by one); for float64 weights they agree within
    float32 rounding of the scalars, which MXNet keeps in double there.

    MXNet's AdaMax divides by ``u`` with no epsilon: an element whose gradient
    has always been 0 (a row that no batch has read yet, with ``wd=0`` or a
    zero weight) gets ``0 / 0``, NaN, in MXNet and here alike. ``epsilon > 0``
    (gluon-sparse's addition) divides by ``u + epsilon`` instead (Keras's form).

    Parameters
    ----------
    learning_rate : float, default 0.002
        Step size; AdaMax's bias correction ``1 / (1 - beta1**t)`` is folded
        into it at every step, as in MXNet.
    beta1 : float, default 0.9
        Decay rate of the first-moment estimate ``m``.
    beta2 : float, default 0.999
        Decay rate of the infinity norm ``u``.
    epsilon : float, default 0.0
        Added to ``u`` in the denominator. 0 is MXNet's AdaMax bit for bit;
        give e.g. 1e-8 to keep never-updated elements finite.
    deferred : bool, default False
        Standard AdaMax at the cost of a lazy update (see above).
    **kwargs
        Passed to :class:`mxnet.optimizer.Optimizer`: ``wd``, ``rescale_grad``,
        ``clip_gradient`` (applied whenever not None, as MXNet's Adamax does),
        ``lr_scheduler``, ``multi_precision``, ``param_dict``, ...

    Examples
    --------
    >>> import mxnet as mx
    >>> import gluon_sparse.optimizer
    >>> opt = mx.optimizer.create('sparseadamax', deferred=True, learning_rate=0.002)
    >>> type(opt).__name__
    'SparseAdamax'
    """

    def __init__(self, learning_rate=0.002, beta1=0.9, beta2=0.999, epsilon=0.0,
                 deferred=False, **kwargs):
        super().__init__(learning_rate=learning_rate, beta1=beta1, beta2=beta2,
                         deferred=deferred, **kwargs)
        check_clip(self.clip_gradient)
        if not (epsilon >= 0 and math.isfinite(epsilon)):
            raise ValueError("epsilon must be a finite number >= 0, got %r" % (epsilon,))
        self.epsilon = float(epsilon)
        self._warned_zero_division = False

    def _rule(self):
        return ADAMAX

    def create_state(self, index, weight):
        """``(mean, max_norm)`` in MXNet's layout, or a deferred state (see the class docstring)."""
        param = (getattr(self, "param_dict", None) or {}).get(index)
        if (self.epsilon == 0 and not self._warned_zero_division
                and getattr(param, "_grad_stype", None) == "row_sparse"):
            self._warned_zero_division = True
            logger.warning("SparseAdamax(epsilon=0) divides by u as mx.optimizer.Adamax does: "
                           "elements of rows no gradient has reached yet become NaN when wd=0 "
                           "(or the weight is 0), as in MXNet; pass epsilon > 0 (e.g. 1e-8) to "
                           "divide by u + epsilon")
        return super().create_state(index, weight)

    def update(self, index, weight, grad, state):
        """Apply one AdaMax step to ``weight`` and ``state`` in place.

        Parameters
        ----------
        index : int
            Index of the parameter (keys its update count, lr_mult and wd_mult).
        weight : NDArray
            The parameter.
        grad : NDArray
            Its gradient, dense or row_sparse.
        state : tuple of NDArray or DeferredRuleState
            From :meth:`create_state`.
        """
        # A kvstore's row_sparse weight is stepped on a dense copy by the base class,
        # which then comes back here with the dense weight.
        if self.epsilon and isinstance(state, (tuple, list)) and \
                not self._uses_operator(weight, grad) and \
                not self._steps_dense_copy(weight, grad):
            _composed_update(self, index, weight, grad, state)
            return
        super().update(index, weight, grad, state)


def _composed_update(optimizer, index, weight, grad, state):
    """MXNet's ``Adamax.update`` with ``u + epsilon`` (dense gradients when epsilon > 0)."""
    optimizer._update_count(index)
    scalars = ADAMAX.step(optimizer, index)
    grad = grad * optimizer.rescale_grad + scalars["wd"] * weight
    if optimizer.clip_gradient is not None:
        grad = mx.nd.clip(grad, -optimizer.clip_gradient, optimizer.clip_gradient)
    mean, max_norm = state
    mean[:] *= optimizer.beta1
    mean[:] += (1. - optimizer.beta1) * grad
    max_norm[:] = mx.nd.maximum(optimizer.beta2 * max_norm, mx.nd.abs(grad))
    weight[:] -= scalars["lr"] * mean / (max_norm + optimizer.epsilon)
