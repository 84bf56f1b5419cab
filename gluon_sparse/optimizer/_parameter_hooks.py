"""Gluon hooks that keep deferred optimizer state and the weights it updates in step.

A deferred optimizer (``SparseAdam(deferred=True)``) leaves the rows absent from
a gradient behind: the weight array alone is then not the model, its optimizer
state says which rows still owe which steps. The contract, with standard
(eager) SparseAdam as the reference:

* a **read** of a weight outside a forward pass or a training step
  (``Parameter.data()``, ``list_data()``, ``_reduce`` hence
  ``save_parameters``/``export``/``reset_ctx``, pickling) first brings every
  row up to date;
* a **write** (``set_data`` hence ``load_parameters``, ``initialize(
  force_reinit=True)``, ``cast``, ``reset_ctx``, a kvstore ``pull`` into the
  weight, ``Trainer.load_states`` replacing the optimizer state) is applied as
  if every row was up to date at that moment: the rows are caught up first,
  then written, so the result is the eager optimizer's, bit for bit;
* the forward pass and the training step read the arrays as they are: the
  product operator (``gluon_sparse_dot``) brings the batch's rows up to date
  inside the graph, and the update the gradient's rows. A full catch-up there
  would cost what a standard step costs.

This module is the one place where gluon-sparse changes MXNet's classes for
that contract. Every hook is a module-level function installed on the class
(not on instances), so that nets, parameters and trainers stay picklable, and
each costs one dictionary look-up per array for weights that no deferred state
tracks. The hooks know deferred states only through :class:`DeferredState`
(``flush``, ``detach``), so every deferred optimizer gets them.

What no hook can see: an NDArray obtained from ``data()`` and kept across
training steps is the live weight, not a snapshot; reading it later sees rows
as they are at that moment (call ``data()`` again), and writing into it
in place while rows are behind has those rows' missed steps replayed onto the
written values. ``docs/guide/optimizer.md`` says so.

The hooks, and why each exists:

``Block.__call__``
    Counts the forward passes running in this thread. Gluon reads every
    parameter with ``data()`` inside each forward (``HybridBlock.forward``'s
    parameter dict, ``_call_cached_op``); those reads must not flush.
``Trainer.step``, ``Trainer.update``
    Count as the training step: ``Trainer._update`` reads ``list_data()`` to
    hand the weights to the optimizer, whose update catches its rows up itself.
    Ctrl-C waits for the end of the step (``_interrupt.held_back``), so that
    an interrupted training saves every parameter after the same step.
``Parameter.data``, ``Parameter.list_data``
    Reads outside those: flush first (free when nothing is pending).
``Parameter.set_data``
    Flush, then write (``Block.load_parameters`` and ``ParameterDict.load``
    write through it into a live net).
``Parameter.initialize``, ``Parameter.reset_ctx``, ``Parameter.cast``
    Replace the arrays: flush, then detach the states from the old arrays; the
    next update binds them to the new ones, with every row up to date.
    (``initialize`` also applies a parameter's ``_init_adapter`` to an
    initializer given to it: FullyConnectedSparse's weight takes any initializer
    with Dense's fans, ``gluon_sparse.nn._init``; one hook on the method.)
``Parameter.grad_req`` (set to ``'null'``, through :mod:`gluon_sparse._grad_req`)
    Freezing replaces the arrays by detached copies (new handles, the same
    memory): flush, then detach the states, as for ``initialize``. A frozen
    weight is not updated; the next update after unfreezing binds the states
    to the arrays it is given.
``Parameter.__getstate__``
    Pickling (``pickle.dumps(net)``) reads the arrays directly: flush first.
``Updater.set_states``
    ``Trainer.load_states`` replaces the optimizer states: the weights are
    first brought up to date under the old ones, which are then detached.
``KVStore.pull``, ``KVStore.pushpull``
    Writes into the ``out`` arrays: flush those that are deferred weights.
``KVStore.broadcast``, ``KVStore.init``
    Read ``value`` (a copy goes to the kvstore and, for ``broadcast``, to every
    device's ``out``) and write ``out``: flush both. ``Trainer._init_params``
    broadcasts the first device's weight over the others' when a new Trainer
    takes over parameters that a deferred optimizer of an earlier one still
    holds behind.
"""
import abc
import threading
import weakref

import mxnet as mx

from .. import _grad_req, _interrupt

__all__ = ["DeferredState", "track", "untrack", "state_of", "flush_arrays", "install"]


class DeferredState(abc.ABC):
    """What the hooks need from the deferred optimizer state of one weight array.

    Subclasses call :func:`track` when they bind to an array and
    :func:`untrack` when they let it go.
    """

    @abc.abstractmethod
    def flush(self):
        """Bring every row of the bound weight up to date (queued on MXNet's engine)."""

    @abc.abstractmethod
    def detach(self):
        """Flush, then forget the bound array (it is about to be replaced or dropped)."""


# NDArray handle -> the deferred state bound to that array. A state holds its
# array, so the handle cannot be reused while the entry lives.
_tracked = weakref.WeakValueDictionary()


def track(array, state):
    """Make ``state`` the deferred state of ``array`` (replacing any other)."""
    _tracked[array.handle.value] = state


def untrack(array, state):
    """Forget ``state`` as the deferred state of ``array`` (if it still is)."""
    key = array.handle.value
    if _tracked.get(key) is state:
        del _tracked[key]


def state_of(array):
    """The deferred state bound to ``array``, or None."""
    if not _tracked:
        return None
    return _tracked.get(array.handle.value)


def flush_arrays(arrays):
    """Flush the deferred state of each array that has one.

    Parameters
    ----------
    arrays : iterable of NDArray (or None)
    """
    if not _tracked or arrays is None:
        return
    for array in arrays:
        state = _tracked.get(array.handle.value)
        if state is not None:
            state.flush()


def _detach_arrays(arrays):
    if not _tracked or arrays is None:
        return
    for array in arrays:
        state = _tracked.get(array.handle.value)
        if state is not None:
            state.detach()


class _Depth(threading.local):
    depth = 0


_inside = _Depth()
_originals = {}


def _flat(out):
    """NDArrays of a kvstore ``out`` argument (an array, a list, or a list of lists)."""
    if out is None:
        return []
    if isinstance(out, mx.nd.NDArray):
        return [out]
    arrays = []
    for item in out:
        arrays += _flat(item)
    return arrays


# ------------------------------------------------------------------ the hooks
# _inside.depth counts the forward passes and training steps running in this
# thread (reads inside them do not flush). Each hook restores the depth it
# found, also when Ctrl-C lands between its increment and its ``try``: a count
# left one too high would silence every later flush, and save stale weights.
def _block_call(self, *args):
    depth = _inside.depth
    try:
        _inside.depth = depth + 1
        return _originals["Block.__call__"](self, *args)
    finally:
        _inside.depth = depth


def _settle_other_trainers_states(trainer):
    """Detach (after a flush) the deferred states of ``trainer``'s weights that another
    trainer's optimizer made: this step writes those weights, and the rows such a state
    owes would otherwise be replayed later, on top of this step's values."""
    own = {id(state) for updater in trainer._updaters for state in updater.states.values()}
    for param in trainer._params:
        for array in param._data or ():
            state = _tracked.get(array.handle.value)
            if state is not None and id(state) not in own:
                state.detach()


def _training_step(original, trainer, args, kwargs):
    # A step counts updates, queues operators and records steps in the deferred
    # states: Ctrl-C waits for the end of the step, which is then done for every
    # parameter or (interrupted before this hook) for none.
    if _tracked:
        _settle_other_trainers_states(trainer)
    with _interrupt.held_back():
        _inside.depth += 1
        try:
            return original(trainer, *args, **kwargs)
        finally:
            _inside.depth -= 1


def _trainer_step(self, *args, **kwargs):
    return _training_step(_originals["Trainer.step"], self, args, kwargs)


def _trainer_update(self, *args, **kwargs):
    return _training_step(_originals["Trainer.update"], self, args, kwargs)


def _parameter_data(self, ctx=None):
    if not _inside.depth:
        flush_arrays(self._data)
    return _originals["Parameter.data"](self, ctx)


def _parameter_list_data(self):
    if not _inside.depth:
        flush_arrays(self._data)
    return _originals["Parameter.list_data"](self)


def _parameter_set_data(self, data):
    flush_arrays(self._data)
    return _originals["Parameter.set_data"](self, data)


def _parameter_initialize(self, *args, **kwargs):
    adapt = getattr(self, "_init_adapter", None)
    if adapt is not None:
        # An initializer given here replaces the parameter's own, which adapts the
        # one its block was given (FullyConnectedSparse's weight: Dense's fans).
        given = kwargs.get("init", args[0] if args else None)
        if given is not None and not isinstance(given, adapt):
            if args:
                args = (adapt(given),) + tuple(args[1:])
            else:
                kwargs["init"] = adapt(given)
    # Only force_reinit replaces initialised arrays; otherwise MXNet warns and returns.
    force = kwargs.get("force_reinit", args[3] if len(args) > 3 else False)
    if force:
        _detach_arrays(self._data)
    return _originals["Parameter.initialize"](self, *args, **kwargs)


def _parameter_reset_ctx(self, ctx):
    _detach_arrays(self._data)
    return _originals["Parameter.reset_ctx"](self, ctx)


def _parameter_cast(self, dtype):
    _detach_arrays(self._data)
    return _originals["Parameter.cast"](self, dtype)


def _parameter_grad_req(param, req):
    # MXNet's setter: `self._data = [i.detach() for i in self._data]` for 'null'.
    if req == "null" and param.grad_req != "null" and param._grad is not None:
        _detach_arrays(param._data)


def _parameter_getstate(self):
    flush_arrays(self._data)
    return self.__dict__


def _updater_set_states(self, states):
    for state in list(self.states.values()):
        if isinstance(state, DeferredState):
            state.detach()
    return _originals["Updater.set_states"](self, states)


def _kvstore_pull(self, key, out=None, *args, **kwargs):
    flush_arrays(_flat(out))
    return _originals["KVStore.pull"](self, key, out, *args, **kwargs)


def _kvstore_pushpull(self, key, value, out=None, *args, **kwargs):
    flush_arrays(_flat(out))
    return _originals["KVStore.pushpull"](self, key, value, out, *args, **kwargs)


def _kvstore_broadcast(self, key, value, out, *args, **kwargs):
    # Trainer._init_params broadcasts the first device's weight over every device's:
    # a read of value and a write of out, each up to date first.
    flush_arrays(_flat(value) + _flat(out))
    return _originals["KVStore.broadcast"](self, key, value, out, *args, **kwargs)


def _kvstore_init(self, key, value):
    flush_arrays(_flat(value))  # the kvstore keeps a copy of what it is given
    return _originals["KVStore.init"](self, key, value)


_HOOKS = [
    (mx.gluon.Block, "__call__", _block_call),
    (mx.gluon.Trainer, "step", _trainer_step),
    (mx.gluon.Trainer, "update", _trainer_update),
    (mx.gluon.Parameter, "data", _parameter_data),
    (mx.gluon.Parameter, "list_data", _parameter_list_data),
    (mx.gluon.Parameter, "set_data", _parameter_set_data),
    (mx.gluon.Parameter, "initialize", _parameter_initialize),
    (mx.gluon.Parameter, "reset_ctx", _parameter_reset_ctx),
    (mx.gluon.Parameter, "cast", _parameter_cast),
    (mx.gluon.Parameter, "__getstate__", _parameter_getstate),
    (mx.optimizer.Updater, "set_states", _updater_set_states),
    (mx.kvstore.KVStore, "pull", _kvstore_pull),
    (mx.kvstore.KVStore, "pushpull", _kvstore_pushpull),
    (mx.kvstore.KVStore, "broadcast", _kvstore_broadcast),
    (mx.kvstore.KVStore, "init", _kvstore_init),
]


def install():
    """Install the hooks (once; later calls do nothing)."""
    if _originals:
        return
    for cls, name, hook in _HOOKS:
        _originals["%s.%s" % (cls.__name__, name)] = cls.__dict__.get(name)
        hook.__doc__ = getattr(cls.__dict__.get(name), "__doc__", None)
        setattr(cls, name, hook)
    _grad_req.before_every_change(_parameter_grad_req)
