"""Nesterov momentum on the family's rules (``optim_rule_nag.h``: rules ``nag`` and ``nag_plain``)."""
import mxnet as mx

from ._family import Rule, SparseRuleMixin

__all__ = ["SparseNAG"]


class NagRule(Rule):
    """MXNet's ``nag_mom_update`` (momentum > 0)."""

    name = "nag"
    state_names = ("mom",)
    fixed_names = ("momentum",)
    step_names = ("lr", "wd", "clip_gradient")

    def fixed(self, optimizer):
        return {"momentum": float(optimizer.momentum)}

    def step(self, optimizer, index, step=None):
        return self.lr_wd_clip(optimizer, index)


class NagPlainRule(Rule):
    """MXNet's ``sgd_update``, which ``mx.optimizer.NAG`` runs for momentum 0; no state."""

    name = "nag_plain"
    step_names = ("lr", "wd", "clip_gradient")

    def step(self, optimizer, index, step=None):
        return self.lr_wd_clip(optimizer, index)


NAG = NagRule()
NAG_PLAIN = NagPlainRule()


@mx.optimizer.Optimizer.register
class SparseNAG(SparseRuleMixin, mx.optimizer.NAG):
    """Nesterov accelerated gradient with MXNet's standard-update semantics and fast sparse paths.

    Registered as ``'sparsenag'``. Accepts the arguments of
    :class:`mxnet.optimizer.NAG` and produces the results of its update on the
    *dense* gradient: every row steps every update, rows absent from a
    row_sparse gradient with gradient 0.

    * row_sparse gradient, ``deferred=False``: ``gluon_sparse_nag_update``
      (``gluon_sparse_nag_plain_update`` for momentum 0), one pass over the
      weight, bitwise equal to MXNet's dense-gradient update on CPU;
    * row_sparse gradient, ``deferred=True``: only the gradient's rows are
      updated; the others catch up exactly when read (see
      :class:`~gluon_sparse.optimizer.SparseSGD`);
    * dense float32 gradient on the CPU, when Trainer hands over several weights
      (MXNet's optimizer aggregation): all of them in one call of
      ``gluon_sparse_nag_multi_update`` (MXNet's results, without
      its operators per weight);
    * other dense gradients or float16: MXNet's own update.

    Parameters
    ----------
    learning_rate : float, optional
        Step size; 0.01 when neither it nor an ``lr_scheduler`` is given (as MXNet).
    momentum : float, default 0.0
        Momentum (>= 0).
    deferred : bool, default False
        Exact deferred updates for weights with a row_sparse gradient.
    **kwargs
        Passed to :class:`mxnet.optimizer.Optimizer`: ``wd``, ``rescale_grad``,
        ``clip_gradient``, ``lr_scheduler``, ``multi_precision``, ``param_dict``, ...

    Examples
    --------
    >>> import mxnet as mx
    >>> import gluon_sparse.optimizer
    >>> opt = mx.optimizer.create('sparsenag', learning_rate=0.1, momentum=0.9, deferred=True)
    """

    def __init__(self, learning_rate=None, momentum=0.0, deferred=False, **kwargs):
        super().__init__(learning_rate=learning_rate, momentum=momentum, deferred=deferred,
                         **kwargs)
        if momentum < 0:
            raise ValueError("momentum must be >= 0, got %r" % (momentum,))

    def _rule(self):
        return NAG if self.momentum != 0 else NAG_PLAIN
