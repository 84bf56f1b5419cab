"""Deferred standard Adam: the results of standard Adam at the cost of lazy Adam.

Standard (non-lazy) Adam moves every weight row every step, even rows absent
from the gradient: their ``g = wd * w`` (clipped) still feeds mean, var and
the weight. A row absent from the gradient moves by a function of its own
``(weight, mean, var)`` and the step's scalars only, so those moves can wait.
Here each update applies the step to the gradient's rows alone and records the
step's scalars (bias-corrected ``lr``, ``wd``, ``clip_gradient``) in a
history; every row remembers the step it is up to date with (``last_step``).
A row left behind is brought up to date by replaying the steps it missed, with
the eager operator's arithmetic, so the values are bitwise those of
``gluon_sparse_adam_update`` (standard Adam) whenever they are read:

* by the sparse blocks' forward pass (``FullyConnectedSparse``,
  ``FactorizationMachine``), for exactly the rows of the batch: the product
  operator looks the weight up in the operator library's registry and replays
  those rows first. This happens inside the graph, so it also works when the
  block runs inside a hybridized parent;
* by the update itself for the gradient's rows (which the forward pass already
  brought up to date);
* for every row by :func:`flush`, which runs automatically whenever Gluon
  reads a weight outside a forward pass or a training step (``param.data()``,
  ``list_data()``, ``save_parameters``, ``export``, pickling,
  ``Trainer.save_states``) and before every write to it (``set_data``,
  ``load_parameters``, ``initialize(force_reinit=True)``, a kvstore pull,
  ``Trainer.load_states``): see :mod:`gluon_sparse.optimizer._parameter_hooks`.

An update whose gradient holds a row that a forward pass read without bringing
it up to date (an operator other than gluon-sparse's product read the weight,
so the gradient came from stale values) fails with a clear error rather than
silently diverging from standard Adam.

Cost: per step, the gradient's rows plus the replay of the rows the batch reads
(each replayed step costs what one eager step costs for that row; rows whose
mean and var are zero skip steps without weight decay for free). Memory beyond
standard Adam's mean and var: one int64 per row and 12 bytes per step.

What lives where: this module holds the Adam side, :class:`DeferredAdamState`
(its arrays, the update, persistence) and the functions the optimizer and the
user call (:func:`create_state`, :func:`update`, :func:`flush`,
:func:`state_bytes`). Keeping the operator library's registry in step with the
states (the ctypes bindings, binding a state to its weight, unregistering it
when dropped, growing its history) is :mod:`gluon_sparse.optimizer._registry`'s,
whose :func:`registered_count` is re-exported here.
"""
import contextlib
import logging
import math
import weakref

import mxnet as mx
import numpy as np

from . import _parameter_hooks, _registry, _state_memory
from ._registry import RegisteredState, registered_count

__all__ = ["DeferredAdamState", "create_state", "update", "flush", "state_bytes",
           "registered_count"]

logger = logging.getLogger(__name__)

# The history starts with this many step records and doubles when full.
_INITIAL_HISTORY = 1024

# Optimizer -> its deferred states, for SparseAdam.flush().
_states_by_optimizer = weakref.WeakKeyDictionary()

# Parameter -> {block: (trace, reads every row)} of the graphs that read it
# (set_read_whole): kept up to date after every update while one of them reads all.
_read_whole = weakref.WeakKeyDictionary()


def catch_up_args(catch_up):
    """The deferred update operators' ``catch_up`` and ``catch_up_if_read`` for a state's
    ``catch_up`` argument (False, True or 'if read')."""
    if catch_up not in (False, True, "if read"):
        raise ValueError("catch_up must be False, True or 'if read', got %r" % (catch_up,))
    return {"catch_up": int(bool(catch_up)), "catch_up_if_read": int(catch_up == "if read")}


def set_read_whole(params, whole, owner, trace=None):
    """Say whether ``owner``'s graph reads every row of ``params`` (a sparse block's input
    gradient, ``ograd . W^T``, reads the whole weight, not only the batch's rows).

    While some graph does, each deferred update of those parameters is followed
    by a catch-up of every row (a standard step's cost, which that product
    already pays); they are caught up now too, before the graph first reads
    them. Each graph speaks for itself: another one traced without the input
    gradient (an export, the block alone) leaves the first one's say standing,
    and within one tracing (``trace``) a block called twice reads every row if
    either call does.

    Parameters
    ----------
    params : iterable of Parameter
    whole : bool
    owner : Block
        The block whose graph this is (a hybridized parent, or the block itself).
    trace : int, optional
        An id of the tracing in progress (None: an imperative call, its own).
    """
    for param in params:
        owners = _read_whole.get(param)
        if owners is None:
            owners = _read_whole[param] = weakref.WeakKeyDictionary()
        earlier = owners.get(owner)
        if trace is not None and earlier is not None and earlier[0] == trace:
            whole = whole or earlier[1]
        owners[owner] = (trace, whole)
        if whole:
            with mx.autograd.pause():
                flush(param)


def settle_read_whole(param, state):
    """After an update of ``param``: catch every row up if a graph reads them all."""
    owners = _read_whole.get(param) if param is not None else None
    if owners and any(whole for _, whole in owners.values()):
        state.flush()


class DeferredAdamState(RegisteredState):
    """Optimizer state of one weight under deferred standard Adam.

    Holds ``mean`` and ``var`` (as standard Adam), ``last_step`` (int64, the
    step each row is up to date with) and ``history`` (float32
    ``(capacity, 3)``: bias-corrected lr, wd and clip_gradient of each step,
    record ``s`` for step ``s``). While bound to a weight it is registered in
    the operator library, so that the sparse blocks bring the rows they read
    up to date.

    Parameters
    ----------
    weight : NDArray
        The dense weight (one row per input feature).
    beta1, beta2, epsilon : float
        Adam's constants; they may not change during training.
    zeros : callable, optional
        ``zeros(shape, ctx, dtype)``, the allocator of ``mean`` and ``var``.
        Default: lazily zeroed pages where possible (CPU), so that rows never
        written commit no memory, which is what training without weight
        decay wants, placed against the weight's address
        (``_state_memory``, "Placement"). The optimizer picks one per weight
        (``_state_memory.state_zeros``).
    """

    def __init__(self, weight, beta1, beta2, epsilon, zeros=None):
        if weight.stype != "default" or weight.ndim < 1:
            raise ValueError("deferred Adam needs a dense weight with rows, got a %s array of "
                             "shape %s" % (weight.stype, weight.shape))
        dtype = np.dtype(weight.dtype)
        if dtype not in _registry.DTYPE_CODES:
            raise TypeError("deferred Adam supports float32 and float64 weights, got %s (train "
                            "float16 with multi_precision=True)" % dtype)
        ctx = weight.context
        zeros = zeros or _state_memory.placed(_state_memory.lazy_zeros,
                                              _registry.data_pointer(weight))
        self.mean = zeros(weight.shape, ctx, dtype)
        self.var = zeros(weight.shape, ctx, dtype)
        self.last_step = mx.nd.zeros((weight.shape[0],), ctx=ctx, dtype=np.int64)
        self.history = mx.nd.zeros((_INITIAL_HISTORY, 3), ctx=ctx, dtype=np.float32)
        self.step = 0
        # Every row is known to be up to date with this step (flush is then free).
        self._synced_step = 0
        self.beta1, self.beta2, self.epsilon = float(beta1), float(beta2), float(epsilon)
        self._started = False
        self._unbind_state()
        self.bind(weight)

    # ------------------------------------------------------- registry binding
    def _array_names(self):
        return ("mean", "var", "last_step", "history")

    def _weight_spec(self):
        return self.mean.shape, np.dtype(self.mean.dtype)

    def _place_row_states(self, pointer):
        self.mean, self.var = _state_memory.place([self.mean, self.var], pointer)

    def _register(self, pointer, owner, weight):
        num_rows, cols, dtype, device = _registry.weight_geometry(weight)
        return _registry.library().gluon_sparse_deferred_register(
            pointer, owner, _registry.data_pointer(self.mean), _registry.data_pointer(self.var),
            _registry.data_pointer(self.last_step), _registry.data_pointer(self.history),
            self.history.shape[0], num_rows, cols, dtype, device, self.beta1, self.beta2,
            self.epsilon, self.step)

    # ------------------------------------------------------------------ steps
    def update(self, weight, grad, step, lr, wd, rescale_grad, clip_gradient, catch_up=False):
        """Apply standard Adam step ``step`` to the rows of the row_sparse ``grad``.

        Parameters
        ----------
        weight : NDArray
            The weight (updated in place).
        grad : RowSparseNDArray
            Its gradient.
        step : int
            The optimizer's 1-based update count of this weight: a fresh state's
            first step (later steps follow the state's own count).
        lr : float
            Learning rate with Adam's bias correction folded in.
        wd, rescale_grad : float
            As for ``adam_update``.
        clip_gradient : float or None
            None (or a negative value) disables clipping.
        catch_up : bool or 'if read', default False
            Bring gradient rows that are behind up to date before the step. Needed
            with several devices (the summed gradient holds rows that only another
            device read); otherwise such a row means it was read stale, an error.
            ``'if read'`` (what the Trainer's update gives with several devices):
            only if a product operator has read the weight; rows behind in a weight
            that only other operators read (an Embedding's) were read stale, and
            are refused as on one device.
        """
        # Bound first, outside the lock: binding may wait for the weight's pending
        # writes, among them engine calls whose garbage collection may run a dropped
        # state's finalizer, which takes the lock.
        self.bind(weight)
        with _registry.state_locked():
            self._update_locked(weight, grad, step, lr, wd, rescale_grad, clip_gradient,
                                catch_up)

    def _update_locked(self, weight, grad, step, lr, wd, rescale_grad, clip_gradient, catch_up):
        step = self.next_step(step)  # the replay reads nothing of a step but its record
        if not self._started:
            # A fresh state (mean = var = 0) is up to date with any step before its
            # first update: the zero history records before it (lr = wd = 0) are
            # no-ops, skipped by the replay as fixed points.
            self.step = self._synced_step = step - 1
            self._started = True
        if step >= self.history.shape[0]:
            self._grow_history(step)
        kwargs = {"lr": lr, "step": step, "beta1": self.beta1, "beta2": self.beta2,
                  "epsilon": self.epsilon, "wd": wd, "rescale_grad": rescale_grad,
                  **catch_up_args(catch_up)}
        if clip_gradient is not None:
            kwargs["clip_gradient"] = clip_gradient
        mx.nd.gluon_sparse_adam_deferred_update(weight, grad, self.mean, self.var, self.last_step,
                                                self.history, out=weight, **kwargs)
        self.step = step

    def flush(self):
        """Bring every row of the bound weight up to date (asynchronous, engine-ordered).

        Free when no update happened since the last flush.
        """
        _registry.flush_rows(self.__dict__)

    def nbytes(self):
        """Bytes of the deferral's own state: ``last_step`` plus the history.

        Returns
        -------
        int
        """
        return int(self.last_step.size * 8 + self.history.size * 4)

    # ------------------------------------------------------------ persistence
    def __getstate__(self):
        # Trainer.save_states pickles the states: saved values must be current.
        self.flush()
        return {"mean": self.mean, "var": self.var, "last_step": self.last_step,
                "history": self.history, "step": self.step, "started": self._started,
                "beta1": self.beta1, "beta2": self.beta2, "epsilon": self.epsilon}

    def __setstate__(self, state):
        self.mean, self.var = state["mean"], state["var"]
        self.last_step, self.history = state["last_step"], state["history"]
        self.step, self._started = state["step"], state["started"]
        self.beta1, self.beta2, self.epsilon = state["beta1"], state["beta2"], state["epsilon"]
        # The saved state was flushed, and the weights it is loaded for are taken
        # as they are (as Trainer.load_states does for eager Adam): every row is
        # up to date with the loaded mean and var.
        self.last_step[:] = self.step
        self._synced_step = self.step
        # Bound to its weight at the next update (Trainer.load_states has no weight to give).
        self._unbind_state()


def _parameter_of(optimizer, index):
    param_dict = getattr(optimizer, "param_dict", None) or {}
    return param_dict.get(index)


def create_state(optimizer, index, weight):
    """A :class:`DeferredAdamState` for ``weight``, or None where deferral does not apply.

    Deferral applies to the dense weights with a ``row_sparse`` gradient of the
    Trainer's parameters, updated on the devices that also run the forward pass.
    Elsewhere it could not be kept exact, and None tells the caller to create
    its usual (eager) state:

    * a dense gradient touches every row anyway (silently eager);
    * the weight is not the parameter's own array: the update runs on a
      kvstore (``update_on_kvstore=True``), whose copy no forward pass reads;
    * no parameter is known for ``index`` (Module API, a kvstore server, which
      gets the optimizer without its ``param_dict``): the library could not
      flush before the weights are saved or pulled.

    The last two log a warning.

    Parameters
    ----------
    optimizer : mxnet.optimizer.Optimizer
        An Adam-like optimizer (``beta1``, ``beta2``, ``epsilon``).
    index : int
        The weight's index (the Trainer's parameter index).
    weight : NDArray
        The weight.

    Returns
    -------
    DeferredAdamState or None
    """
    param = _parameter_of(optimizer, index)
    if param is None or param._data is None:
        logger.warning("deferred Adam: no gluon Parameter is known for weight %s (Module API or "
                       "kvstore server); it is updated eagerly (standard Adam, full cost)", index)
        return None
    if param._grad_stype != "row_sparse" or weight.stype != "default":
        return None
    elsewhere = updated_elsewhere(param, weight)
    if elsewhere:
        logger.warning("deferred Adam: %s; it is updated eagerly (standard Adam, full cost)",
                       elsewhere)
        return None
    state = DeferredAdamState(weight, optimizer.beta1, optimizer.beta2, optimizer.epsilon,
                              zeros=_state_memory.state_zeros(optimizer, index, weight))
    remember_state(optimizer, state)
    return state


def updated_elsewhere(param, weight):
    """Why the array an optimizer updates is not one of ``param``'s own (which forward passes
    read and catch up), or None where it is one of them."""
    if _registry.data_pointer(weight) in {_registry.data_pointer(a) for a in param.list_data()}:
        return None
    if np.dtype(weight.dtype) != np.dtype(param.dtype):
        return ("%s is %s and the optimizer updates a %s master copy of it (multi_precision), "
                "which no forward pass reads; to defer, keep the sparse layer's weight in "
                "float32 or float64" % (param.name, np.dtype(param.dtype).name,
                                          np.dtype(weight.dtype).name))
    return ("%s is updated on a kvstore (update_on_kvstore=True), whose copy of the weight no "
            "forward pass refreshes; create the Trainer with update_on_kvstore=False to defer"
            % param.name)


def update(optimizer, index, weight, grad, state):
    """One deferred standard-Adam update, with ``mx.optimizer.Adam``'s scalars.

    Counts the update, folds the bias correction into the learning rate
    exactly as :class:`mxnet.optimizer.Adam` does, and applies it through
    ``gluon_sparse_adam_deferred_update``.

    Parameters
    ----------
    optimizer : mxnet.optimizer.Optimizer
        An Adam-like optimizer.
    index : int
        The weight's index.
    weight : NDArray
        The weight (updated in place).
    grad : RowSparseNDArray
        Its gradient.
    state : DeferredAdamState
        From :func:`create_state`.
    """
    if grad.stype != "row_sparse":
        raise TypeError("deferred Adam updates row_sparse gradients, got a %s gradient for "
                        "weight %s" % (grad.stype, index))
    if np.dtype(grad._aux_type(0)) != np.int64:
        # The operator reads the row indices as int64, MXNet's default.
        raise TypeError("deferred Adam needs int64 row indices, got %s for weight %s"
                        % (np.dtype(grad._aux_type(0)), index))
    if (optimizer.beta1, optimizer.beta2, optimizer.epsilon) != (state.beta1, state.beta2,
                                                                   state.epsilon):
        raise ValueError("deferred Adam replays past steps with fixed beta1, beta2 and epsilon "
                         "(%g, %g, %g); they changed to (%g, %g, %g)"
                         % (state.beta1, state.beta2, state.epsilon, optimizer.beta1,
                            optimizer.beta2, optimizer.epsilon))
    with counted_unless_refused(optimizer, index):
        lr = optimizer._get_lr(index)
        # (A non-finite rescale_grad is replayed as MXNet's row_sparse Adam computes it.)
        check_replayable(optimizer, index, lr, "learning rate")
    wd = optimizer._get_wd(index)
    t = optimizer._index_update_count[index]
    lr *= math.sqrt(1. - optimizer.beta2 ** t) / (1. - optimizer.beta1 ** t)
    remember_state(optimizer, state)
    param = _parameter_of(optimizer, index)
    several_devices = False
    if param is not None:
        several_devices = param._data is not None and len(param._data) > 1
    # As mx.optimizer.Adam: clip_gradient None or 0 means no clipping.
    clip = optimizer.clip_gradient if optimizer.clip_gradient else None
    state.update(weight, grad, t, lr, wd, optimizer.rescale_grad, clip,
                 catch_up="if read" if several_devices else False)
    settle_read_whole(param, state)


@contextlib.contextmanager
def counted_unless_refused(optimizer, index):
    """Count the update of weight ``index`` (the learning rate schedule reads the new
    count), undone if the block raises: a refused step is no step (the next one keeps
    Adam's bias correction and the schedule where they were)."""
    before = update_counts(optimizer, [index])
    optimizer._update_count(index)
    try:
        yield
    except BaseException:
        restore_update_counts(optimizer, before)
        raise


def update_counts(optimizer, indices):
    """What :func:`restore_update_counts` puts back: ``optimizer``'s update counts of
    ``indices`` and its ``num_update``."""
    return optimizer.num_update, {i: optimizer._index_update_count.get(i) for i in indices}


def restore_update_counts(optimizer, counts, kept=()):
    """Put back the update counts ``counts`` (of :func:`update_counts`) but those of the
    indices in ``kept``, whose updates happened; ``num_update`` follows."""
    num_update, by_index = counts
    for index, count in by_index.items():
        if index in kept:
            continue
        if count is None:
            optimizer._index_update_count.pop(index, None)
        else:
            optimizer._index_update_count[index] = count
    optimizer.num_update = max([num_update] + [optimizer._index_update_count[i] for i in kept])


def check_replayable(optimizer, index, value, name):
    """Refuse a deferred step whose scalar ``name`` (the learning rate, ``rescale_grad``)
    is not finite where the replay cannot follow the eager update.

    The rows a batch misses are brought up to date later as finite arithmetic
    (Adam leaves a row whose state is still zero as it is), where the eager
    update, as MXNet's, makes them NaN (``inf * 0``): the two would differ.
    """
    if not math.isfinite(value):
        raise ValueError("%s(deferred=True): the %s (%r) of weight %s must be finite; with "
                         "deferred=False the update, as MXNet's, makes the weight NaN"
                         % (type(optimizer).__name__, name, value, index))


def remember_state(optimizer, state):
    """Record that ``optimizer`` made the deferred ``state`` (for :func:`flush` of the optimizer)."""
    _states_by_optimizer.setdefault(optimizer, weakref.WeakSet()).add(state)


def _states_of(obj):
    """The deferred states (of any optimizer of the family) reachable from ``obj``."""
    if isinstance(obj, RegisteredState):
        return [obj]
    if isinstance(obj, mx.gluon.Trainer):
        states = []
        for updater in obj._updaters:
            states += [s for s in updater.states.values() if isinstance(s, RegisteredState)]
        return states
    if isinstance(obj, mx.optimizer.Optimizer):
        return list(_states_by_optimizer.get(obj, ()))
    if isinstance(obj, mx.gluon.Parameter):
        if obj._data is None:
            return []
        found = (_parameter_hooks.state_of(a) for a in obj._data)
        return [s for s in found if s is not None]
    if isinstance(obj, mx.gluon.ParameterDict):
        obj = obj.values()
    states = []
    for item in obj:
        states += _states_of(item)
    return states


def flush(obj):
    """Bring every deferred row up to date, so that the weights equal the eager optimizer's.

    Works for every deferred optimizer of the family (``SparseAdam``,
    ``SparseSGD``, ... with ``deferred=True``).

    Done automatically whenever Gluon reads a weight outside a forward pass or
    a training step (``param.data()``, ``save_parameters``, ``export``,
    pickling, ``Trainer.save_states``) and before every write to it; calling
    it yourself is needed only before reading an NDArray kept from an earlier
    ``data()`` call. Asynchronous like any MXNet operator: reading the weights
    waits for it; free when nothing is pending.

    Parameters
    ----------
    obj : Trainer, Optimizer, Parameter, ParameterDict, iterable of Parameters, or a deferred state
        What to flush: all deferred weights of a Trainer or optimizer, or the given parameters.
    """
    for state in _states_of(obj):
        state.flush()


def state_bytes(obj):
    """Bytes the deferral adds to the eager optimizer's state (``last_step`` and history).

    Parameters
    ----------
    obj : Trainer, Optimizer, Parameter, ParameterDict or iterable of Parameters

    Returns
    -------
    int
    """
    return sum(state.nbytes() for state in _states_of(obj))


_parameter_hooks.install()
