"""Registration of deferred optimizer states in the operator library's registry.

The sparse blocks' product operator brings the rows of a batch up to date
inside the graph: it looks the weight up, by the address of its data, in a
registry kept by the operator library (``csrc/ops/deferred_registry.h``)
and reads the state's arrays through the raw pointers registered there. This
module is the Python side of that registry:

* the registry's C functions, loaded through ctypes from the library MXNet
  loaded (:func:`library`), and the data addresses they take
  (:func:`data_pointer`, :func:`array_pointer`);
* :class:`RegisteredState`, the base of every deferred state
  (:class:`~gluon_sparse.optimizer.deferred.DeferredAdamState`,
  :class:`~gluon_sparse.optimizer._family_state.DeferredRuleState`): binding a state
  to its weight (register, re-register when the weight moved, unregister with
  a flush when the state is dropped) and growing its history, with every
  change to the registry queued in MXNet's engine order
  (:mod:`gluon_sparse.optimizer._engine_calls`).

The zeroed arrays a state starts with come from
:mod:`gluon_sparse.optimizer._state_memory`.

The registry entry says who owns the weight: deferred Adam (registered with
``gluon_sparse_deferred_register``) or a rule of the family, by its name
(``gluon_sparse_deferred_register_rule``); the product operator only asks it
to bring rows up to date. The optimizer sides are
:mod:`gluon_sparse.optimizer.deferred` (Adam) and
:mod:`gluon_sparse.optimizer._family_state` (every rule).
"""
import abc
import contextlib
import ctypes
import functools
import itertools
import logging
import threading
import weakref

import mxnet as mx
import numpy as np

from .. import _interrupt, _native
from . import _engine_calls, _parameter_hooks

__all__ = ["DTYPE_CODES", "library", "data_pointer", "array_pointer",
           "flush_rows", "registered_count", "weight_geometry", "RegisteredState"]

logger = logging.getLogger(__name__)

# The registry's code of each weight dtype deferred Adam supports.
DTYPE_CODES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1}

_lib = None
_owner_ids = itertools.count(1)


def library():
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
        lib.gluon_sparse_deferred_register_rule.argtypes = [
            ptr, ctypes.c_uint64, ctypes.c_char_p, ctypes.POINTER(ptr), ctypes.c_int, ptr, ptr,
            i64, ctypes.c_int, ctypes.POINTER(f32), ctypes.c_int, i64, i64, ctypes.c_int,
            ctypes.c_int, i64]
        lib.gluon_sparse_deferred_set_history.argtypes = [ptr, ctypes.c_uint64, ptr, i64]
        lib.gluon_sparse_deferred_unregister.argtypes = [ptr, ctypes.c_uint64]
        lib.gluon_sparse_deferred_step.argtypes = [ptr]
        lib.gluon_sparse_deferred_step.restype = i64
        lib.gluon_sparse_deferred_count.restype = i64
        _lib = lib
    return _lib


def data_pointer(array):
    """Address of an NDArray's data (allocating it first: creation may be pending)."""
    array.wait_to_read()
    return array_pointer(array)


def array_pointer(array):
    """Address of an NDArray's data, without waiting (for use inside engine calls)."""
    pointer = ctypes.c_void_p()
    mx.base.check_call(mx.base._LIB.MXNDArrayGetData(array.handle, ctypes.byref(pointer)))
    return pointer.value


# Held while a state's step is read or advanced and the operator that goes with it is
# queued: an update (training thread) and a flush (a thread reading the weight) then
# reach MXNet's engine in the order of the steps they name. Without it a flush could
# name step S and be queued after update S + 1 ("row R is at step S + 1, outside
# [0, S]"), and the failed operator's error could fall on the training's next ones.
state_lock = threading.RLock()


@contextlib.contextmanager
def state_locked():
    """Hold :data:`state_lock`, with Ctrl-C held back: a KeyboardInterrupt between the
    acquire and the with-block's protection (the in-process SIGINT of a test, a user's
    Ctrl-C) left the lock held for good, and a later flush from another thread hung."""
    with _interrupt.held_back(), state_lock:
        yield


def flush_rows(state):
    """Queue the flush of a state's weight; ``state`` is the state's ``__dict__``.

    Free when every row is known to be up to date (``_synced_step``): the
    forward passes and updates only ever bring rows forward.

    A flush may run inside an ``autograd.record()`` scope: a user reading
    ``param.data()`` there (to log a norm, say), or the garbage collector
    dropping a state. MXNet refuses in-place writes to a graph's arrays while
    recording, and the flush belongs to no graph (it moves only rows the
    recorded forward did not read: those it brought up to date itself), so it
    runs with recording paused.
    """
    with state_locked():
        _flush_rows_locked(state)


def _flush_rows_locked(state):
    weight = state["_weight"]
    if weight is None or state["step"] == 0 or state["_synced_step"] >= state["step"]:
        return
    with mx.autograd.pause():
        rule = state.get("rule")
        if rule is None:  # deferred Adam
            mx.nd.gluon_sparse_adam_deferred_flush(
                weight, state["mean"], state["var"], state["last_step"], state["history"],
                out=weight, step=state["step"], beta1=state["beta1"], beta2=state["beta2"],
                epsilon=state["epsilon"])
        else:
            flush_op = getattr(mx.nd, "gluon_sparse_%s_deferred_flush" % rule)
            flush_op(weight, *state["states"], state["last_step"], state["history"], out=weight,
                     step=state["step"], **state["fixed"])
    state["_synced_step"] = state["step"]


def _swap_history(pointer, owner, grown, old, capacity):
    """Engine call: point the registry at ``grown`` (``old`` is kept alive until now)."""
    del old
    status = library().gluon_sparse_deferred_set_history(pointer, owner, array_pointer(grown),
                                                         capacity)
    if status != 0:
        logger.error("deferred update: could not re-register a grown history (code %d)", status)


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
    # Ctrl-C (in whatever code the collector interrupted) waits: the unregister
    # below must be queued before the arrays can be freed.
    with _interrupt.held_back():
        try:
            flush_rows(state)  # may run inside autograd.record(): flush_rows pauses it
        finally:
            # Whatever the flush did, the registry must forget the arrays before they
            # are freed: a stale entry would hand a later weight at the same address
            # freed memory as its state. Forward passes already queued look the weight
            # up when they run: unregister in engine order, after them, without waiting.
            _engine_calls.push(functools.partial(_unregister, pointer, owner, dict(state)),
                               weight.context, [weight], "gluon_sparse_deferred_unregister")


def registered_count():
    """Number of weights registered in the operator library (a diagnostic)."""
    return int(library().gluon_sparse_deferred_count())


class RegisteredState(_parameter_hooks.DeferredState):
    """A deferred state that the operator library's registry knows while it is bound.

    The subclass holds the arrays the registry points at (its states,
    ``last_step``, ``history``), the scalars ``step`` and ``_synced_step`` and
    the flag ``_started`` (its first update is done), calls
    :meth:`_unbind_state` before its first :meth:`bind`, and implements
    :meth:`_array_names` (the attributes holding its arrays, moved with the
    weight to its device), :meth:`_weight_spec` and :meth:`_register`.
    """

    @abc.abstractmethod
    def _array_names(self):
        """Names of the attributes that hold NDArrays (moved to the weight's device)."""

    @abc.abstractmethod
    def _weight_spec(self):
        """``(shape, numpy dtype)`` of the weight this state was made for."""

    @abc.abstractmethod
    def _register(self, pointer, owner, weight):
        """Register the arrays for the weight at ``pointer``; returns the C status (0: done)."""

    def _place_row_states(self, pointer):
        """Move the arrays that follow the weight's rows to memory placed against ``pointer``
        (``_state_memory.place``; a state made for this weight already is)."""

    def next_step(self, count):
        """The history step the next update writes, given the optimizer's update count.

        A fresh state starts at the optimizer's count: it is up to date with any
        step before its first update (a Trainer's ``begin_num_update``, or a
        state created late), so the empty records before it are never replayed
        (with clip_weights or FTRL's recomputed weight they would not be
        no-ops). From there the state numbers its own steps: MXNet counts
        updates per device id, so a weight moved to another device
        (``reset_ctx``) counts from 1 again while its rows are where they were.
        Each step's scalars (a bias correction included) stay the optimizer's,
        from its own count, as the eager update's are.
        """
        return count if not self._started else self.step + 1

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
        # Registered, then its finalizer made: Ctrl-C between the two would leave an
        # entry that nothing unregisters when the arrays are freed.
        with _interrupt.held_back():
            self._bind(weight)

    def _bind(self, weight):
        previous = _parameter_hooks.state_of(weight)
        if previous is not None and previous is not self:
            # Another state (a replaced Trainer's) still owes this weight rows: settle them.
            previous.detach()
        pointer = data_pointer(weight)
        if pointer == self._pointer:
            _parameter_hooks.untrack(self._weight, self)
            self._weight = weight
            _parameter_hooks.track(weight, self)
            return
        self.unbind()
        shape, dtype = self._weight_spec()
        if tuple(weight.shape) != tuple(shape) or np.dtype(weight.dtype) != dtype:
            raise ValueError("deferred optimizer state of shape %s (%s) cannot update a weight "
                             "of shape %s (%s)" % (tuple(shape), dtype, weight.shape,
                                                  np.dtype(weight.dtype)))
        if weight.context != self.last_step.context:
            # A state loaded from Trainer.save_states comes back on its saved device.
            for name in self._array_names():
                value = getattr(self, name)
                if isinstance(value, list):
                    setattr(self, name, [a.as_in_context(weight.context) for a in value])
                else:
                    setattr(self, name, value.as_in_context(weight.context))
        self._place_row_states(pointer)
        owner = next(_owner_ids)
        status = self._register(pointer, owner, weight)
        if status != 0:
            raise RuntimeError("could not register the deferred optimizer state of a weight of "
                               "shape %s (code %d)" % (weight.shape, status))
        self._weight, self._pointer, self._owner = weight, pointer, owner
        # The finalizer holds the state's attributes (its arrays) until the
        # registry has forgotten them, and flushes the weight if the state is
        # dropped with rows behind. At interpreter exit there is no one to read.
        self._finalizer = weakref.finalize(self, _release, self.__dict__, pointer, owner)
        self._finalizer.atexit = False
        _parameter_hooks.track(weight, self)

    def unbind(self):
        """Flush the bound weight and unregister the state (no-op when unbound)."""
        if self._finalizer is None:
            self._unbind_state()
            return
        with _interrupt.held_back():  # not left bound to a weight it no longer updates
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
        grown = mx.nd.zeros((capacity, old.shape[1]), ctx=old.context, dtype=np.float32)
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
        logger.debug("deferred update history grown to %d steps", capacity)


def weight_geometry(weight):
    """``(num_rows, cols, dtype code, device code)`` of a weight, as the registry takes them."""
    return (weight.shape[0], int(np.prod(weight.shape[1:], dtype=np.int64)),
            DTYPE_CODES[np.dtype(weight.dtype)], 2 if weight.context.device_type == "gpu" else 1)
