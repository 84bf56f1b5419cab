"""FTRL-Proximal with MXNet's dense-gradient (standard) semantics on row_sparse gradients.

MXNet 1.9.1's ``ftrl_update`` moves only the gradient's rows when weight and
states are row_sparse (lazy FTRL) and densifies the gradient otherwise (a
storage fallback: every row, every step, at dense cost). :class:`SparseFtrl`
gives the dense results at sparse cost through the family's operators (rule
``ftrl``, csrc/ops/optim_rule_ftrl.h), eagerly or deferred.

A step without gradient leaves z and n alone but recomputes the weight from
them with the step's lr and wd: a row never touched is set to 0 by the first
standard step (lazy FTRL keeps its initial value), and under an lr schedule
the weight follows lr. The deferred catch-up of a row is therefore O(1): the
first missed step, then the last.
"""
import math

import mxnet as mx

from ._family import Rule, SparseRuleMixin
from ._mxnet_scalars import param_float
from ._replay_marks import last_step_where, running_max
from .sparse_adagrad import states_in_weight_dtype

__all__ = ["SparseFtrl"]


class FtrlRule(Rule):
    """The ``ftrl`` rule's scalars, as mx.optimizer.Ftrl passes them to ftrl_update."""

    name = "ftrl"
    state_names = ("z", "n")
    fixed_names = ("lamda1", "beta")
    # max_lr, last_odd_step: marks for the O(1) catch-up (FtrlRule::replay_row).
    step_names = ("lr", "wd", "clip_gradient", "max_lr", "last_odd_step")

    # The scalars go as text, as mx.optimizer.Ftrl passes them: the library
    # parses them as FtrlParam's float fields (dmlc, not always correctly rounded).
    def fixed(self, optimizer):
        return {"lamda1": float(optimizer.lamda1), "beta": float(optimizer.beta)}

    def step(self, optimizer, index, step=None):
        # mx.optimizer.Ftrl passes clip_gradient only when truthy and the kernel
        # clips when it is >= 0: 0 and negative values mean no clipping.
        scalars = self.lr_wd_clip(optimizer, index)
        lr, wd = param_float(scalars["lr"]), param_float(scalars["wd"])  # as parsed
        odd = not (0 < lr < math.inf and 0 <= wd < math.inf)
        # Twice the largest lr: a bound whatever the parse of its text.
        scalars["max_lr"] = 2.0 * running_max(optimizer, "ftrl.max_lr", index, lr)
        scalars["last_odd_step"] = last_step_where(optimizer, "ftrl.odd", index, odd, step)
        return scalars


FTRL = FtrlRule()


@mx.optimizer.Optimizer.register
class SparseFtrl(SparseRuleMixin, mx.optimizer.Ftrl):
    """FTRL with MXNet's standard-update semantics and a fast row_sparse path.

    Registered as ``'sparseftrl'``. Takes :class:`mxnet.optimizer.Ftrl`'s
    arguments and gives the results of ``ftrl_update`` on the dense gradient::

        grad = clip(grad * rescale_grad, clip_gradient)
        z += grad - (sqrt(n + grad**2) - sqrt(n)) * weight / lr
        n += grad**2
        weight = (sign(z) * lamda1 - z) / ((beta + sqrt(n)) / lr + wd) * (abs(z) > lamda1)

    for row_sparse gradients too, bitwise on CPU in float32 and float64 (MXNet's
    own Ftrl cannot update float64 weights: its states are float32). Rows
    absent from the gradient keep z and n, but their weight is recomputed at
    every step, so a row that never had a gradient becomes 0 at the first step.

    Parameters
    ----------
    lamda1 : float, default 0.01
        L1 regularization coefficient.
    learning_rate : float, default 0.1
        The learning rate; ignored when an ``lr_scheduler`` is given (its own
        ``base_lr`` applies), as in MXNet's Ftrl.
    beta : float, default 1
        Per-coordinate learning rate correlation parameter.
    lazy_update : bool, default False
        If True, row_sparse gradients take MXNet's own ``ftrl_update`` (lazy on
        row_sparse weights, a dense fallback on dense ones).
    deferred : bool, default False
        Standard FTRL at lazy cost: a row_sparse-gradient weight is updated on
        the gradient's rows only, the others catch up exactly (in O(1) each)
        when read or flushed (:func:`gluon_sparse.optimizer.flush`).
    **kwargs
        Passed to :class:`mxnet.optimizer.Optimizer`: ``wd``, ``rescale_grad``,
        ``clip_gradient``, ``lr_scheduler``, ``param_dict``, ...

    Examples
    --------
    >>> import mxnet as mx
    >>> import gluon_sparse.optimizer
    >>> opt = mx.optimizer.create('sparseftrl', learning_rate=0.1, lamda1=0.01,
    ...                           deferred=True)
    >>> type(opt).__name__
    'SparseFtrl'
    """

    def __init__(self, lamda1=0.01, learning_rate=0.1, beta=1, lazy_update=False,
                 deferred=False, **kwargs):
        if deferred and lazy_update:
            raise ValueError("deferred=True replays the standard update exactly; it cannot be "
                             "combined with lazy_update=True")
        super().__init__(lamda1=lamda1, learning_rate=learning_rate, beta=beta,
                         deferred=deferred, **kwargs)
        self.lazy_update = lazy_update

    def _rule(self):
        return FTRL

    def create_state(self, index, weight):
        """``(z, n)`` (MXNet's layout) in the weight's dtype, or a deferred state.

        MXNet's Ftrl makes float32 states whatever the weight's dtype, which
        its own ftrl_update then rejects for float64 and float16 weights.
        """
        return states_in_weight_dtype(super().create_state(index, weight), weight)
