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
"""
import ctypes
import functools
import itertools
import logging
import math
import weakref

import mxnet as mx
import numpy as np

from .. import _native
from . import _engine_calls, _parameter_hooks

__all__ = ["DeferredAdamState", "create_state", "update", "flush", "state_bytes",
           "registered_count"]

logger = logging.getLogger(__name__)

# The history starts with this many step records and doubles when full.
_INITIAL_HISTORY = 1024
_DTYPE_CODES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1}

_lib = None
_owner_ids = itertools.count(1)
# Optimizer -> its deferred states, for SparseAdam.flush().
_states_by_optimizer = weakref.WeakKeyDictionary()


def _library():
    """The operator library's registry functions, through ctypes (loaded once)."""
    global _lib
    if _lib is None:
        _native.load_ops()
        # The same file MXNet loaded: dlopen returns the same instance, hence
        # the same registry the operators see.
        lib = ctypes.CDLL(_native.OPS_LIBRARY)
        i64, f32, ptr = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
        lib.gluon_sparse_deferred_register.argtypes = [
            ptr, ctypes.c_uint64, ptr, ptr, ptr, ptr, i64, i64, i64, ctypes.c_int, ctypes.c_int,
            f32, f32, f32, i64]
        lib.gluon_sparse_deferred_set_history.argtypes = [ptr, ctypes.c_uint64, ptr, i64]
        lib.gluon_sparse_deferred_unregister.argtypes = [ptr, ctypes.c_uint64]
        lib.gluon_sparse_deferred_step.argtypes = [ptr]
        lib.gluon_sparse_deferred_step.restype = i64
        lib.gluon_sparse_deferred_count.restype = i64
        _lib = lib
    return _lib


def _data_pointer(array):
    """Address of an NDArray's data (allocating it first: creation may be pending)."""
    array.wait_to_read()
    pointer = ctypes.c_void_p()
    mx.base.check_call(mx.base._LIB.MXNDArrayGetData(array.handle, ctypes.byref(pointer)))
    return pointer.value


def _lazy_zeros(shape, ctx, dtype):
    """Zeros on ``ctx`` whose untouched pages cost nothing, where the platform allows.

    ``mx.nd.zeros`` writes every byte: 1 GB of mean and var for a 10^6 x 128
    weight, over a second of page faults before the first step. On the CPU,
    numpy's zeros come from the OS as lazily mapped zero pages, and the array
    is wrapped without a copy. Deferred Adam writes only the rows a batch
    touches (a row untouched since the start is a fixed point when wd == 0),
    so the memory of the rows of features never seen is never committed.
    """
    lazy = mx.nd.from_numpy(np.zeros(shape, dtype=dtype), zero_copy=True)
    if lazy.context == ctx:
        return lazy
    return _zeros(shape, ctx, dtype)  # another device (or CPU id)


def _zeros(shape, ctx, dtype):
    return mx.nd.zeros(shape, ctx=ctx, dtype=dtype)


def _flush(state):
    """Queue the flush of a state's weight; ``state`` is the state's ``__dict__``.

    Free when every row is known to be up to date (``_synced_step``): the
    forward passes and updates only ever bring rows forward.
    """
    weight = state["_weight"]
    if weight is None or state["step"] == 0 or state["_synced_step"] >= state["step"]:
        return
    mx.nd.gluon_sparse_adam_deferred_flush(weight, state["mean"], state["var"], state["last_step"],
                                 state["history"], out=weight, step=state["step"],
                                 beta1=state["beta1"], beta2=state["beta2"],
                                 epsilon=state["epsilon"])
    state["_synced_step"] = state["step"]


def _array_pointer(array):
    """Address of an NDArray's data, without waiting (for use inside engine calls)."""
    pointer = ctypes.c_void_p()
    mx.base.check_call(mx.base._LIB.MXNDArrayGetData(array.handle, ctypes.byref(pointer)))
    return pointer.value


def _swap_history(pointer, owner, grown, old, capacity):
    """Engine call: point the registry at ``grown`` (``old`` is kept alive until now)."""
    del old
    status = _library().gluon_sparse_deferred_set_history(pointer, owner, _array_pointer(grown),
                                                          capacity)
    if status != 0:
        logger.error("deferred Adam: could not re-register a grown history (code %d)", status)


def _unregister(pointer, owner, state):
    """Engine call: forget a weight (``state``, its arrays, is kept alive until now)."""
    del state
    if _lib is not None:
        _lib.gluon_sparse_deferred_unregister(pointer, owner)


def _release(state, pointer, owner):
    """Let a state's weight go: flush it, then unregister it from the operator library.

    Called by ``weakref.finalize`` (when the state is dropped, e.g. with its
    Trainer, or when it unbinds), which holds the state's ``__dict__``, hence
    its arrays, alive until the registry has forgotten them. Flushing first
    keeps the weight right for whoever reads it next, with or without a state.
    """
    weight = state["_weight"]
    _flush(state)
    # Forward passes already queued look the weight up in the registry when they
    # run: unregister in engine order, after them and the flush, without waiting.
    _engine_calls.push(functools.partial(_unregister, pointer, owner, dict(state)),
                       weight.context, [weight], "gluon_sparse_deferred_unregister")


def registered_count():
    """Number of weights registered in the operator library (a diagnostic)."""
    return int(_library().gluon_sparse_deferred_count())


class DeferredAdamState(_parameter_hooks.DeferredState):
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
    lazy_zeros : bool
        Create ``mean`` and ``var`` as lazily zeroed pages where possible
        (CPU), so that rows never written commit no memory: what training
        without weight decay wants. With weight decay every row is written
        at the next flush, and MXNet's ``zeros`` (pooled memory) is cheaper.
    """

    def __init__(self, weight, beta1, beta2, epsilon, lazy_zeros=True):
        if weight.stype != "default" or weight.ndim < 1:
            raise ValueError("deferred Adam needs a dense weight with rows, got a %s array of "
                             "shape %s" % (weight.stype, weight.shape))
        dtype = np.dtype(weight.dtype)
        if dtype not in _DTYPE_CODES:
            raise TypeError("deferred Adam supports float32 and float64 weights, got %s (train "
                            "float16 with multi_precision=True)" % dtype)
        ctx = weight.context
        zeros = _lazy_zeros if lazy_zeros else _zeros
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

    # ------------------------------------------------------------ registration
    def _unbind_state(self):
        self._weight = None
        self._pointer = None
        self._owner = None
        self._finalizer = None

    def bind(self, weight):
        """Register the state for ``weight`` (re-registering if it moved).

        Parameters
        ----------
        weight : NDArray
            The weight this state updates; its rows are refreshed in place.
        """
        if self._weight is not None and weight.handle.value == self._weight.handle.value:
            return  # the same array: no pointer look-up (it would wait for pending writes)
        previous = _parameter_hooks.state_of(weight)
        if previous is not None and previous is not self:
            # Another state (a replaced Trainer's) still owes this weight rows: settle them.
            previous.detach()
        pointer = _data_pointer(weight)
        if pointer == self._pointer:
            _parameter_hooks.untrack(self._weight, self)
            self._weight = weight
            _parameter_hooks.track(weight, self)
            return
        self.unbind()
        if weight.shape != self.mean.shape or np.dtype(weight.dtype) != self.mean.dtype:
            raise ValueError("deferred Adam state of shape %s (%s) cannot update a weight of "
                             "shape %s (%s)" % (self.mean.shape, self.mean.dtype, weight.shape,
                                               np.dtype(weight.dtype)))
        if weight.context != self.mean.context:
            # A state loaded from Trainer.save_states comes back on its saved device.
            for name in ("mean", "var", "last_step", "history"):
                setattr(self, name, getattr(self, name).as_in_context(weight.context))
        lib = _library()
        owner = next(_owner_ids)
        status = lib.gluon_sparse_deferred_register(
            pointer, owner, _data_pointer(self.mean), _data_pointer(self.var),
            _data_pointer(self.last_step), _data_pointer(self.history), self.history.shape[0],
            weight.shape[0], int(np.prod(weight.shape[1:], dtype=np.int64)),
            _DTYPE_CODES[np.dtype(weight.dtype)], 2 if weight.context.device_type == "gpu" else 1,
            self.beta1, self.beta2, self.epsilon, self.step)
        if status != 0:
            raise RuntimeError("could not register the deferred Adam state of a weight of shape "
                               "%s (code %d)" % (weight.shape, status))
        self._weight, self._pointer, self._owner = weight, pointer, owner
        # The finalizer holds the state's attributes (its arrays) until the
        # registry has forgotten them, and flushes the weight if the state is
        # dropped with rows behind. At interpreter exit there is no one to read.
        self._finalizer = weakref.finalize(self, _release, self.__dict__, pointer, owner)
        self._finalizer.atexit = False
        _parameter_hooks.track(weight, self)

    def unbind(self):
        """Flush the bound weight and unregister the state (no-op when unbound)."""
        if self._finalizer is not None:
            _parameter_hooks.untrack(self._weight, self)
            self._finalizer()
        self._unbind_state()

    def detach(self):
        """Flush, then forget the bound weight (it is about to be replaced or dropped).

        The next update binds the state to the weight it is given, every row
        up to date.
        """
        self.unbind()

    def _grow_history(self, needed):
        capacity = self.history.shape[0]
        while capacity <= needed:
            capacity *= 2
        old = self.history
        grown = mx.nd.zeros((capacity, 3), ctx=old.context, dtype=np.float32)
        grown[:old.shape[0]] = old  # queued after the updates that wrote `old`
        if self._pointer is not None:
            # Forward passes already queued read `old` through the registry: the
            # registry switches to `grown` in engine order, after them and the
            # copy, while this thread goes on (no wait: Ctrl-C stays prompt).
            _engine_calls.push(functools.partial(_swap_history, self._pointer, self._owner,
                                                 grown, old, capacity),
                               self._weight.context, [self._weight, grown],
                               "gluon_sparse_deferred_grow_history")
        self.history = grown
        logger.debug("deferred Adam history grown to %d steps", capacity)

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
            The 1-based update count of this weight.
        lr : float
            Learning rate with Adam's bias correction folded in.
        wd, rescale_grad : float
            As for ``adam_update``.
        clip_gradient : float or None
            None (or a negative value) disables clipping.
        catch_up : bool, default False
            Bring gradient rows that are behind up to date before the step. Needed
            with several devices (the summed gradient holds rows that only another
            device read); otherwise such a row means it was read stale, an error.
        """
        self.bind(weight)
        if not self._started:
            # A fresh state (mean = var = 0) is up to date with any step before its
            # first update: the zero history records before it (lr = wd = 0) are
            # no-ops, skipped by the replay as fixed points.
            self.step = self._synced_step = step - 1
            self._started = True
        if step != self.step + 1:
            raise RuntimeError("deferred Adam: the optimizer is at update %d of this weight but "
                               "its state is at step %d; the state does not belong to this "
                               "optimizer (load_states of another run?)" % (step, self.step))
        if step >= self.history.shape[0]:
            self._grow_history(step)
        kwargs = {"lr": lr, "step": step, "beta1": self.beta1, "beta2": self.beta2,
                  "epsilon": self.epsilon, "wd": wd, "rescale_grad": rescale_grad,
                  "catch_up": int(catch_up)}
        if clip_gradient is not None:
            kwargs["clip_gradient"] = clip_gradient
        mx.nd.gluon_sparse_adam_deferred_update(weight, grad, self.mean, self.var, self.last_step,
                                      self.history, out=weight, **kwargs)
        self.step = step

    def flush(self):
        """Bring every row of the bound weight up to date (asynchronous, engine-ordered).

        Free when no update happened since the last flush.
        """
        _flush(self.__dict__)

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
    if _data_pointer(weight) not in {_data_pointer(a) for a in param.list_data()}:
        logger.warning("deferred Adam: %s is updated on a kvstore (update_on_kvstore=True), "
                       "whose copy of the weight no forward pass refreshes; it is updated "
                       "eagerly (standard Adam, full cost). Create the Trainer with "
                       "update_on_kvstore=False to defer", param.name)
        return None
    # With weight decay every row moves every step: all of mean and var get
    # written at the next flush anyway, and MXNet's pooled memory (reused
    # from earlier arrays) is cheaper to fill than fresh zero pages.
    lazy_zeros = optimizer._get_wd(index) == 0
    state = DeferredAdamState(weight, optimizer.beta1, optimizer.beta2, optimizer.epsilon,
                              lazy_zeros=lazy_zeros)
    _states_by_optimizer.setdefault(optimizer, weakref.WeakSet()).add(state)
    return state


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
    optimizer._update_count(index)
    lr = optimizer._get_lr(index)
    wd = optimizer._get_wd(index)
    t = optimizer._index_update_count[index]
    lr *= math.sqrt(1. - optimizer.beta2 ** t) / (1. - optimizer.beta1 ** t)
    _states_by_optimizer.setdefault(optimizer, weakref.WeakSet()).add(state)
    param = _parameter_of(optimizer, index)
    several_devices = False
    if param is not None:
        several_devices = param._data is not None and len(param._data) > 1
    # As mx.optimizer.Adam: clip_gradient None or 0 means no clipping.
    clip = optimizer.clip_gradient if optimizer.clip_gradient else None
    state.update(weight, grad, t, lr, wd, optimizer.rescale_grad, clip, catch_up=several_devices)


def _states_of(obj):
    """The deferred states reachable from a Trainer, optimizer, Parameter(s) or state."""
    if isinstance(obj, DeferredAdamState):
        return [obj]
    if isinstance(obj, mx.gluon.Trainer):
        states = []
        for updater in obj._updaters:
            states += [s for s in updater.states.values() if isinstance(s, DeferredAdamState)]
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
    """Bring every deferred row up to date, so that the weights equal standard Adam's.

    Done automatically whenever Gluon reads a weight outside a forward pass or
    a training step (``param.data()``, ``save_parameters``, ``export``,
    pickling, ``Trainer.save_states``) and before every write to it; calling
    it yourself is needed only before reading an NDArray kept from an earlier
    ``data()`` call. Asynchronous like any MXNet operator: reading the weights
    waits for it; free when nothing is pending.

    Parameters
    ----------
    obj : Trainer, Optimizer, Parameter, ParameterDict, iterable of Parameters, or DeferredAdamState
        What to flush: all deferred weights of a Trainer or optimizer, or the given parameters.
    """
    for state in _states_of(obj):
        state.flush()


def state_bytes(obj):
    """Bytes the deferral adds to standard Adam's state (``last_step`` and history).

    Parameters
    ----------
    obj : Trainer, Optimizer, Parameter, ParameterDict or iterable of Parameters

    Returns
    -------
    int
    """
    return sum(state.nbytes() for state in _states_of(obj))


_parameter_hooks.install()
