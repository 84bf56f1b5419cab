"""Deferred state of one weight under any rule of the optimizer family.

The generalisation of :class:`~gluon_sparse.optimizer.deferred.DeferredAdamState`
to every rule (``csrc/ops/optim_rule.h``): the rule's state arrays (MXNet's
``create_state`` layout), ``last_step`` (int64, the step each row is up to date
with) and ``history`` (float32 ``(capacity, len(rule.step_names))``: the scalars
of step ``s`` in record ``s``). Each update applies the step to the gradient's
rows alone (``gluon_sparse_<rule>_deferred_update``); a row left behind replays
the steps it missed, with the eager operator's arithmetic, when it is next read:
by the product operator inside the graph (the operator library's registry
knows the weight's rule), by the update (catch_up, several devices), or by the
flush (``gluon_sparse_<rule>_deferred_flush``) that every Gluon read and write
path runs first (:mod:`gluon_sparse.optimizer._parameter_hooks`).
"""
import ctypes
import logging

import mxnet as mx
import numpy as np

from .. import _native
from . import _registry, _state_memory, deferred

__all__ = ["DeferredRuleState", "create_state", "update"]

logger = logging.getLogger(__name__)

_INITIAL_HISTORY = 1024


class DeferredRuleState(_registry.RegisteredState):
    """Optimizer state of one weight under a deferred rule of the family.

    Parameters
    ----------
    weight : NDArray
        The dense weight (one row per input feature), float32 or float64.
    rule : gluon_sparse.optimizer._family.Rule
        The rule that updates it.
    fixed : dict
        The rule's fixed scalars (name -> float); they may not change during training.
    states : list of NDArray
        The initial state arrays, shaped and typed like the weight, in
        ``rule.state_names`` order.

    Attributes
    ----------
    states : list of NDArray
        The rule's state arrays (also readable by name: ``state.mom``).
    last_step, history : NDArray
        The deferral's bookkeeping.
    step : int
        The last update applied.
    """

    def __init__(self, weight, rule, fixed, states):
        if weight.stype != "default" or weight.ndim < 1:
            raise ValueError("a deferred update needs a dense weight with rows, got a %s array of "
                             "shape %s" % (weight.stype, weight.shape))
        dtype = np.dtype(weight.dtype)
        if dtype not in _registry.DTYPE_CODES:
            raise TypeError("deferred %s supports float32 and float64 weights, got %s (train "
                            "float16 with multi_precision=True)" % (rule.name, dtype))
        if len(states) != len(rule.state_names):
            raise ValueError("rule %s has %d states, got %d arrays"
                             % (rule.name, len(rule.state_names), len(states)))
        ctx = weight.context
        self.rule = rule.name
        self.state_names = tuple(rule.state_names)
        self.fixed = {name: float(fixed[name]) for name in rule.fixed_names}
        self.states = list(states)
        self.shape, self.dtype = tuple(weight.shape), dtype
        self.last_step = mx.nd.zeros((weight.shape[0],), ctx=ctx, dtype=np.int64)
        self.history = mx.nd.zeros((_INITIAL_HISTORY, len(rule.step_names)), ctx=ctx,
                                   dtype=np.float32)
        self.step = 0
        self._synced_step = 0  # every row is known to be up to date with this step
        self._started = False
        self._unbind_state()
        self.bind(weight)

    def __getattr__(self, name):
        # The states by their rule names (state.mom, state.n, ...); only called for
        # attributes not found otherwise.
        names = self.__dict__.get("state_names", ())
        if name in names:
            return self.__dict__["states"][names.index(name)]
        raise AttributeError(name)

    # ------------------------------------------------------- registry binding
    def _array_names(self):
        return ("states", "last_step", "history")

    def _weight_spec(self):
        return self.shape, self.dtype

    def _place_row_states(self, pointer):
        self.states = _state_memory.place(self.states, pointer)

    def _register(self, pointer, owner, weight):
        num_rows, cols, dtype, device = _registry.weight_geometry(weight)
        states = (ctypes.c_void_p * max(1, len(self.states)))(
            *[_registry.data_pointer(a) for a in self.states])
        fixed = (ctypes.c_float * max(1, len(self.fixed)))(*self.fixed.values())
        status = _registry.library().gluon_sparse_deferred_register_rule(
            pointer, owner, self.rule.encode(), states, len(self.states),
            _registry.data_pointer(self.last_step), _registry.data_pointer(self.history),
            self.history.shape[0], self.history.shape[1], fixed, len(self.fixed), num_rows, cols,
            dtype, device, self.step)
        if status == -3:
            raise RuntimeError(
                "the operator library has no rule %r with %d states, %d fixed and %d step "
                "scalars: the Python Rule and the C++ rule (optim_rule_%s.h) disagree, or the "
                "library predates the rule (rebuild it)" % (self.rule, len(self.states),
                                                           len(self.fixed), self.history.shape[1],
                                                           self.rule))
        return status

    # ------------------------------------------------------------------ steps
    def update(self, weight, grad, step, scalars, rescale_grad, catch_up=False):
        """Apply step ``step`` of the rule to the rows of the row_sparse ``grad``.

        Parameters
        ----------
        weight : NDArray
            The weight (updated in place).
        grad : RowSparseNDArray
            Its gradient (int64 row indices).
        step : int
            The history step of this update, :meth:`next_step`.
        scalars : dict
            The rule's step scalars (``Rule.step``).
        rescale_grad : float
            Applied to the gradient's rows.
        catch_up : bool or 'if read', default False
            Bring gradient rows that are behind up to date first; ``'if read'``
            (several devices): only if a product operator has read the weight
            (see :meth:`DeferredAdamState.update`).
        """
        self.bind(weight)  # outside the lock: it may wait (DeferredAdamState.update)
        with _registry.state_locked():
            self._update_locked(weight, grad, step, scalars, rescale_grad, catch_up)

    def _update_locked(self, weight, grad, step, scalars, rescale_grad, catch_up):
        if not self._started:
            self.step = self._synced_step = step - 1
            if step > 1:
                self.last_step[:] = step - 1
            self._started = True
        if step != self.step + 1:
            raise ValueError("deferred %s: step %d follows step %d; pass next_step()"
                             % (self.rule, step, self.step))
        if step >= self.history.shape[0]:
            self._grow_history(step)
        _native.load_ops()
        op = getattr(mx.nd, "gluon_sparse_%s_deferred_update" % self.rule)
        op(weight, grad, *self.states, self.last_step, self.history, out=weight, step=step,
           rescale_grad=rescale_grad, **deferred.catch_up_args(catch_up), **scalars,
           **self.fixed)
        self.step = step

    def flush(self):
        """Bring every row of the bound weight up to date (asynchronous, engine-ordered)."""
        _registry.flush_rows(self.__dict__)

    def nbytes(self):
        """Bytes of the deferral's own state: ``last_step`` plus the history."""
        return int(self.last_step.size * 8 + self.history.size * 4)

    # ------------------------------------------------------------ persistence
    def __getstate__(self):
        self.flush()  # Trainer.save_states pickles the states: saved values must be current
        return {"rule": self.rule, "state_names": self.state_names, "fixed": self.fixed,
                "states": self.states, "shape": self.shape, "dtype": self.dtype.str,
                "last_step": self.last_step, "history": self.history, "step": self.step,
                "started": self._started}

    def __setstate__(self, state):
        self.rule, self.state_names = state["rule"], tuple(state["state_names"])
        self.fixed, self.states = dict(state["fixed"]), list(state["states"])
        self.shape, self.dtype = tuple(state["shape"]), np.dtype(state["dtype"])
        self.last_step, self.history = state["last_step"], state["history"]
        self.step, self._started = state["step"], state["started"]
        # The saved state was flushed; the weights it is loaded for are taken as they
        # are (as Trainer.load_states does for the eager optimizer).
        self.last_step[:] = self.step
        self._synced_step = self.step
        self._unbind_state()  # bound to its weight at the next update


def create_state(optimizer, rule, index, weight):
    """A :class:`DeferredRuleState` for ``weight``, or None where deferral does not apply.

    Deferral applies to the dense float32/float64 weights with a ``row_sparse``
    gradient of a Trainer's parameters, updated where the forward pass runs
    (see :func:`gluon_sparse.optimizer.deferred.create_state` for the cases
    left eager, with a warning where the user asked for deferral in vain).
    """
    param = deferred._parameter_of(optimizer, index)
    if param is None or param._data is None:
        logger.warning("deferred %s: no gluon Parameter is known for weight %s (Module API or "
                       "kvstore server); it is updated eagerly", rule.name, index)
        return None
    if param._grad_stype != "row_sparse" or weight.stype != "default":
        return None
    if np.dtype(weight.dtype) not in _registry.DTYPE_CODES:
        return None  # float16: MXNet's own update (multi_precision master copies are float32)
    elsewhere = deferred.updated_elsewhere(param, weight)
    if elsewhere:
        logger.warning("deferred %s: %s; it is updated eagerly", rule.name, elsewhere)
        return None
    zeros = _state_memory.state_zeros(optimizer, index, weight)
    states = rule.create_states(optimizer, weight, zeros)
    state = DeferredRuleState(weight, rule, rule.fixed(optimizer), states)
    deferred.remember_state(optimizer, state)
    return state


def update(optimizer, rule, index, weight, grad, state):
    """One deferred update of weight ``index`` under ``rule``, with the optimizer's scalars."""
    if grad.stype != "row_sparse":
        raise TypeError("deferred %s updates row_sparse gradients, got a %s gradient for weight %s"
                        % (rule.name, grad.stype, index))
    if np.dtype(grad._aux_type(0)) != np.int64:
        raise TypeError("deferred %s needs int64 row indices, got %s for weight %s"
                        % (rule.name, np.dtype(grad._aux_type(0)), index))
    if rule.name != state.rule:
        raise ValueError("weight %s has a deferred %s state but the optimizer now uses rule %s "
                         "(a hyper-parameter such as momentum changed between 0 and non-zero)"
                         % (index, state.rule, rule.name))
    fixed = {name: float(value) for name, value in rule.fixed(optimizer).items()}
    if fixed != state.fixed:
        raise ValueError("deferred %s replays past steps with fixed %s; they changed to %s"
                         % (rule.name, state.fixed, fixed))
    with deferred.counted_unless_refused(optimizer, index):
        if rule.name != "adamw":  # AdamW skips such a step, as MXNet's adamw_update does
            deferred.check_replayable(optimizer, index, optimizer.rescale_grad, "rescale_grad")
    step = state.next_step(optimizer._index_update_count[index])
    scalars = rule.step(optimizer, index, step)
    deferred.remember_state(optimizer, state)
    param = deferred._parameter_of(optimizer, index)
    several_devices = param is not None and param._data is not None and len(param._data) > 1
    state.update(weight, grad, step, scalars, optimizer.rescale_grad,
                 catch_up="if read" if several_devices else False)
    deferred.settle_read_whole(param, state)
