"""SGD with momentum and plain SGD on the family's rules (``optim_rule_sgd_mom.h``, ``optim_rule_sgd.h``)."""
import mxnet as mx

from ._family import Rule, SparseRuleMixin

__all__ = ["SparseSGD"]


class SgdMomRule(Rule):
    """MXNet's ``sgd_mom_update``: ``mom = momentum * mom - lr * wd * w - lr * g; w += mom``."""

    name = "sgd_mom"
    state_names = ("mom",)
    fixed_names = ("momentum",)
    step_names = ("lr", "wd", "clip_gradient")

    def fixed(self, optimizer):
        return {"momentum": float(optimizer.momentum)}

    def step(self, optimizer, index, step=None):
        return self.lr_wd_clip(optimizer, index)


class SgdRule(Rule):
    """MXNet's ``multi_sgd_update`` (momentum 0): ``w += 0 - lr * wd * w - lr * g``; no state."""

    name = "sgd"
    step_names = ("lr", "wd", "clip_gradient")

    def step(self, optimizer, index, step=None):
        return self.lr_wd_clip(optimizer, index)


SGD_MOM = SgdMomRule()
SGD = SgdRule()


@mx.optimizer.Optimizer.register
class SparseSGD(SparseRuleMixin, mx.optimizer.SGD):
    """SGD (with momentum) with MXNet's standard-update semantics and fast row_sparse paths.

    Registered as ``'sparsesgd'``. Accepts the arguments of
    :class:`mxnet.optimizer.SGD` and produces the results of its update on
    the *dense* gradient, but ``lazy_update`` defaults to ``False``: every row
    steps every update, rows absent from a row_sparse gradient with gradient 0
    (their momentum decays and weight decay moves them), which lazy SGD skips.

    * row_sparse gradient, ``deferred=False``: ``gluon_sparse_sgd_mom_update``
      (``gluon_sparse_sgd_update`` for momentum 0), one pass over the weight,
      bitwise equal to MXNet's dense-gradient update on CPU;
    * row_sparse gradient, ``deferred=True``: only the gradient's rows are
      updated; the others catch up (bitwise, replaying the steps they missed)
      when gluon-sparse's blocks read them and whenever Gluon reads or writes
      the weight (``param.data()``, saving, pickling, kvstore, ...);
    * dense float32 gradient on the CPU, when Trainer hands over several weights
      (MXNet's optimizer aggregation): all of them in one call of
      ``gluon_sparse_sgd[_mom]_multi_update`` (MXNet's results, without
      its operators per weight);
    * other dense gradients, ``lazy_update=True`` or float16: MXNet's own update.

    Parameters
    ----------
    learning_rate : float, optional
        Step size; 0.01 when neither it nor an ``lr_scheduler`` is given (as MXNet).
    momentum : float, default 0.0
        Momentum; 0 gives plain SGD, whose only deferred motion is weight decay.
    lazy_update : bool, default False
        If True, MXNet's lazy update (only the gradient's rows move).
    deferred : bool, default False
        Exact deferred updates for weights with a row_sparse gradient (see above).
    **kwargs
        Passed to :class:`mxnet.optimizer.Optimizer`: ``wd``, ``rescale_grad``,
        ``clip_gradient``, ``lr_scheduler``, ``multi_precision``, ``param_dict``, ...

    Examples
    --------
    >>> import mxnet as mx
    >>> import gluon_sparse.optimizer
    >>> opt = mx.optimizer.create('sparsesgd', learning_rate=0.1, momentum=0.9, deferred=True)
    """

    def __init__(self, learning_rate=None, momentum=0.0, lazy_update=False, deferred=False,
                 **kwargs):
        super().__init__(learning_rate=learning_rate, momentum=momentum, lazy_update=lazy_update,
                         deferred=deferred, **kwargs)
        if momentum < 0:
            raise ValueError("momentum must be >= 0, got %r" % (momentum,))

    def _rule(self):
        return SGD_MOM if self.momentum != 0 else SGD
