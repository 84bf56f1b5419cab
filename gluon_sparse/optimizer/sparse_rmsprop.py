"""RMSProp, plain and centered, with exact standard updates for row_sparse gradients.

MXNet 1.9.1's ``rmsprop_update`` / ``rmspropalex_update`` have no row_sparse
form: a row_sparse gradient is densified and every row moves every step. Rows
absent from a batch still move, even without weight decay: ``n`` (and the
centered form's ``g`` and ``delta``) decay, and the centered weight keeps
moving by ``delta``. :class:`SparseRMSProp` computes those same results
through the optimizer family's operators (csrc/ops/optim_rule_rmsprop.h): eager
(every row, one pass) or deferred (the batch's rows; the others catch up,
bitwise, when read).
"""
import mxnet as mx
import numpy as np

from ._family import Rule, SparseRuleMixin

__all__ = ["SparseRMSProp"]


def _clip_weights(optimizer):
    """MXNet's RMSProp passes clip_weights only when truthy; -1 is off."""
    return float(optimizer.clip_weights) if optimizer.clip_weights else -1.0


class RmspropRule(Rule):
    """Plain RMSProp (Tieleman & Hinton): MXNet's ``rmsprop_update``."""

    name = "rmsprop"
    state_names = ("n",)
    fixed_names = ("gamma1", "epsilon", "clip_weights")
    step_names = ("lr", "wd", "clip_gradient")

    def fixed(self, optimizer):
        return {"gamma1": float(optimizer.gamma1), "epsilon": float(optimizer.epsilon),
                "clip_weights": _clip_weights(optimizer)}

    def step(self, optimizer, index, step=None):
        return self.lr_wd_clip(optimizer, index)


class RmspropCenteredRule(RmspropRule):
    """Centered RMSProp (Graves): MXNet's ``rmspropalex_update``."""

    name = "rmsprop_centered"
    state_names = ("n", "g", "delta")
    fixed_names = ("gamma1", "gamma2", "epsilon", "clip_weights")

    def fixed(self, optimizer):
        fixed = super().fixed(optimizer)
        fixed["gamma2"] = float(optimizer.gamma2)
        return fixed


RMSPROP = RmspropRule()
RMSPROP_CENTERED = RmspropCenteredRule()


@mx.optimizer.Optimizer.register
class SparseRMSProp(SparseRuleMixin, mx.optimizer.RMSProp):
    """RMSProp with MXNet's standard-update results and fast row_sparse updates.

    Registered as ``'sparsermsprop'``. Takes the arguments of
    :class:`mxnet.optimizer.RMSProp` and gives its results (bitwise on CPU):
    every row of the weight and state moves at every step, rows absent from
    the gradient with gradient 0 (plus ``wd * weight``). Unlike Adam's, such a
    step changes the state even at ``wd == 0`` (``n`` decays by ``gamma1``;
    centered, ``g`` decays and the weight moves by the decaying ``delta``), so
    a lazy update would be another optimisation. Updates are routed by
    gradient:

    * row_sparse gradient: gluon-sparse's ``gluon_sparse_rmsprop_update`` /
      ``gluon_sparse_rmsprop_centered_update`` (one pass, CPU threads / CUDA), or,
      with ``deferred=True``, the deferred update of the gradient's rows only;
    * dense float32 gradient on the CPU, when Trainer hands over several weights
      (MXNet's optimizer aggregation): all of them in one call of
      ``gluon_sparse_rmsprop[_centered]_multi_update`` (MXNet's results, without
      its operators per weight);
    * other dense gradients, float16: MXNet's ``rmsprop_update`` /
      ``rmspropalex_update``.

    The state is MXNet's: ``(n,)``, or ``(n, g, delta)`` when centered, in the
    weight's dtype (MXNet's own class creates float32 states, which its
    operator rejects for float64 weights).

    Parameters
    ----------
    learning_rate : float, default 0.001
        Step size.
    gamma1 : float, default 0.9
        Decay of the moving averages of the squared gradient (and, centered,
        of the gradient).
    gamma2 : float, default 0.9
        Momentum of the centered form's ``delta``; unused when not centered.
    epsilon : float, default 1e-8
        Added under the square root.
    centered : bool, default False
        Graves's centered RMSProp (``rmspropalex_update``) instead of
        Tieleman & Hinton's.
    clip_weights : float, optional
        Clip the weights into ``[-clip_weights, clip_weights]`` after every
        step; None or 0 disables it, as in MXNet.
    deferred : bool, default False
        Standard RMSProp at the cost of a lazy update: weights with a
        row_sparse gradient are updated only on the gradient's rows, the other
        rows catch up (bitwise, replaying the steps they missed) whenever
        anything reads or writes them: gluon-sparse's blocks in a forward
        pass, ``param.data()``, ``save_parameters``, pickling,
        ``Trainer.save_states``, ``set_data``, ``load_parameters``, kvstore
        pulls. See the optimizer guide.
    **kwargs
        Passed to :class:`mxnet.optimizer.Optimizer`: ``wd``,
        ``rescale_grad``, ``clip_gradient``, ``lr_scheduler``,
        ``multi_precision``, ``param_dict``, ...

    Examples
    --------
    >>> import mxnet as mx
    >>> import gluon_sparse.optimizer
    >>> opt = mx.optimizer.create('sparsermsprop', learning_rate=0.01, centered=True,
    ...                           wd=1e-4, deferred=True)
    >>> type(opt).__name__
    'SparseRMSProp'
    """

    def __init__(self, learning_rate=0.001, gamma1=0.9, gamma2=0.9, epsilon=1e-8,
                 centered=False, clip_weights=None, deferred=False, **kwargs):
        super().__init__(learning_rate=learning_rate, gamma1=gamma1, gamma2=gamma2,
                         epsilon=epsilon, centered=centered, clip_weights=clip_weights,
                         deferred=deferred, **kwargs)

    def _rule(self):
        return RMSPROP_CENTERED if self.centered else RMSPROP

    def create_state(self, index, weight):
        """A deferred state, or MXNet's ``(n,)`` / ``(n, g, delta)`` in the weight's dtype."""
        state = super().create_state(index, weight)
        if isinstance(state, tuple) and any(a.dtype != weight.dtype for a in state):
            # MXNet's RMSProp makes float32 states, which rmsprop_update rejects
            # next to a float64 weight.
            # Dense for a kvstore's row_sparse weight too (stepped as a dense copy).
            stype = "default" if self._updates_row_sparse_weight(weight) else weight.stype
            state = tuple(mx.nd.zeros(weight.shape, weight.context, dtype=np.dtype(weight.dtype),
                                      stype=stype) for _ in state)
        return state
