"""Nadam on the family's rule ``nadam`` (``csrc/ops/optim_rule_nadam.h``)."""
import mxnet as mx
import numpy as np

from ._family import Rule, SparseRuleMixin
from ._mxnet_scalars import scalar_float32
from .sparse_adamax import check_clip, composed_clip

__all__ = ["SparseNadam"]


class NadamRule(Rule):
    """MXNet's ``Nadam.update``, with its warming momentum schedule in each step's record.

    :meth:`step` advances ``optimizer.m_schedule`` exactly as
    ``mx.optimizer.Nadam.update`` does (once per update call, whatever the
    weight: MXNet keeps one schedule for all of an optimizer's weights), and
    records the divisors and factors the update derives from it.
    """

    name = "nadam"
    state_names = ("mean", "var")
    fixed_names = ("beta1", "one_minus_beta1", "beta2", "one_minus_beta2", "epsilon")
    step_names = ("lr", "wd", "clip_gradient", "one_minus_m_schedule",
                  "one_minus_m_schedule_next", "one_minus_beta2_power", "one_minus_momentum",
                  "momentum_next")

    def fixed(self, optimizer):
        return {"beta1": float(optimizer.beta1), "one_minus_beta1": 1. - optimizer.beta1,
                "beta2": float(optimizer.beta2), "one_minus_beta2": 1. - optimizer.beta2,
                "epsilon": float(optimizer.epsilon)}

    def step(self, optimizer, index, step=None):
        t = optimizer._index_update_count[index]
        lr = optimizer._get_lr(index)
        wd = optimizer._get_wd(index)
        # The double expressions of mx.optimizer.Nadam.update, in its order.
        decay = optimizer.schedule_decay
        momentum_t = optimizer.beta1 * (1. - 0.5 * (pow(0.96, t * decay)))
        momentum_t_1 = optimizer.beta1 * (1. - 0.5 * (pow(0.96, (t + 1) * decay)))
        optimizer.m_schedule = optimizer.m_schedule * momentum_t
        m_schedule_next = optimizer.m_schedule * momentum_t_1
        # Each a scalar operand of MXNet's NDArray arithmetic, which parses the double
        # and casts it to float32 (scalar_float32): a double on a float32 midpoint, as
        # 1 - 0.5 ** 25, rounds there as MXNet rounds it, not as the decimal text would.
        computed = {"one_minus_m_schedule": 1. - optimizer.m_schedule,
                    "one_minus_m_schedule_next": 1. - m_schedule_next,
                    "one_minus_beta2_power": 1. - pow(optimizer.beta2, t),
                    "one_minus_momentum": 1. - momentum_t, "momentum_next": momentum_t_1}
        scalars = {name: scalar_float32(value) for name, value in computed.items()}
        scalars.update({"lr": float(lr), "wd": float(wd),
                        "clip_gradient": composed_clip(optimizer)})
        return scalars


NADAM = NadamRule()


@mx.optimizer.Optimizer.register
class SparseNadam(SparseRuleMixin, mx.optimizer.Nadam):
    """Nadam with MXNet's standard-update semantics and fast row_sparse paths.

    Registered as ``'sparsenadam'``. Accepts the arguments of
    :class:`mxnet.optimizer.Nadam` and produces the results of its update on
    the *dense* gradient: every row steps at every update, rows absent from a
    row_sparse gradient with gradient 0. Updates are routed by gradient:

    * row_sparse gradient, ``deferred=False``: ``gluon_sparse_nadam_update``,
      one pass over the weight;
    * row_sparse gradient, ``deferred=True``: only the gradient's rows are
      updated; the others catch up (replaying the steps they missed, bitwise
      as the eager operator) when gluon-sparse's blocks read them and whenever
      Gluon reads or writes the weight (``param.data()``, saving, pickling,
      kvstore, ...);
    * dense float32 gradient on the CPU, when Trainer hands over several weights
      (MXNet's optimizer aggregation): all of them in one call of
      ``gluon_sparse_nadam_multi_update`` (MXNet's results, without
      its operators per weight);
    * other dense gradients or float16: MXNet's own ``Nadam.update``.

    For float32 weights the results are bitwise those of
    ``mx.optimizer.Nadam().update`` on the dense gradient; for float64 weights
    they agree within float32 rounding of the scalars (MXNet keeps them in
    double there).

    As in MXNet, the momentum schedule ``m_schedule`` belongs to the optimizer
    and advances at every update of *any* of its weights, so a weight's steps
    depend on how many weights the optimizer updates and in which order; each
    deferred step records the values its update used, so the replay follows
    it exactly. ``Trainer.save_states`` saves it with the optimizer. A Trainer
    whose parameters mix dtypes updates them one at a time, in its order (MXNet's
    aggregation would group them by dtype and change the order).

    Parameters
    ----------
    learning_rate : float, default 0.001
        Step size.
    beta1 : float, default 0.9
        Decay rate of the first-moment estimate (scaled by the momentum schedule).
    beta2 : float, default 0.999
        Decay rate of the second-moment estimate.
    epsilon : float, default 1e-8
        Added to ``sqrt(v')`` to avoid division by zero.
    schedule_decay : float, default 0.004
        Decay rate of the momentum schedule
        ``momentum_t = beta1 * (1 - 0.5 * 0.96**(t * schedule_decay))``.
    deferred : bool, default False
        Standard Nadam at the cost of a lazy update (see above).
    **kwargs
        Passed to :class:`mxnet.optimizer.Optimizer`: ``wd``, ``rescale_grad``,
        ``clip_gradient`` (applied whenever not None, as MXNet's Nadam does),
        ``lr_scheduler``, ``multi_precision``, ``param_dict``, ...

    Examples
    --------
    >>> import mxnet as mx
    >>> import gluon_sparse.optimizer
    >>> opt = mx.optimizer.create('sparsenadam', deferred=True, learning_rate=0.001)
    >>> type(opt).__name__
    'SparseNadam'
    """

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 schedule_decay=0.004, deferred=False, **kwargs):
        super().__init__(learning_rate=learning_rate, beta1=beta1, beta2=beta2, epsilon=epsilon,
                         schedule_decay=schedule_decay, deferred=deferred, **kwargs)
        check_clip(self.clip_gradient)

    def _rule(self):
        return NADAM

    # MXNet's Updater hands aggregated weights over grouped by dtype, which
    # reorders a Trainer's weights when their dtypes differ (float32 next to a
    # float64 or float16 one). The shared momentum schedule makes each weight's
    # step depend on that order, so such a Trainer updates one weight at a time,
    # in its own order, as MXNet's Nadam (not aggregated) does. Without a
    # param_dict (an updater outside gluon.Trainer: get_updater, the Module API)
    # the dtypes are unknown: one at a time too.
    @property
    def aggregate_num(self):
        """Weights per update call: 0 (one at a time) when ``param_dict`` mixes dtypes or
        is not set."""
        params = getattr(self, "param_dict", None) or {}
        dtypes = {np.dtype(p.dtype) for p in params.values()}
        return self._aggregate_num if len(dtypes) == 1 else 0

    @aggregate_num.setter
    def aggregate_num(self, value):
        self._aggregate_num = value
