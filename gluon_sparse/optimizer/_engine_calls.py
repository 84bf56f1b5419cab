"""Run a Python function in MXNet's engine order, without waiting for it.

The operator library's registry (csrc/ops/deferred_registry.h) hands raw
pointers of a deferred state's arrays to the forward passes, outside the
engine's view of dependencies. Changing them (a grown history, an
unregistered weight) must therefore happen after the forward passes already
queued and before the ones queued next. Waiting for the engine to drain
(``mx.nd.waitall()``) does that, but blocks the training loop for as long as
the engine has work queued, seconds when the loop runs ahead of it, and the
main thread cannot act on Ctrl-C meanwhile. Instead the change is pushed onto
the engine (``MXEnginePushSyncND``) as an operation that writes the weight:
the engine runs it after every queued reader and writer of the weight and
before any later one, on one of its own threads, and this thread goes on.

The function runs on an engine thread (holding the GIL while it runs); it must
not wait for the engine itself. Such a call still queued when the process
forks would hang the fork, but for :mod:`gluon_sparse._fork`.
"""
import ctypes
import itertools
import logging
import threading

import mxnet as mx

__all__ = ["push"]

logger = logging.getLogger(__name__)

_SyncFunc = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


class _Context(ctypes.Structure):
    # mxnet::Context, as MXEnginePushSync reads it through its ContextHandle.
    _fields_ = [("dev_type", ctypes.c_int), ("dev_id", ctypes.c_int)]


_pending = {}  # key -> the function (and, through it, the arrays it keeps alive)
_lock = threading.Lock()
_keys = itertools.count(1)


def _run(_run_context, key):
    with _lock:
        function = _pending.pop(key, None)
    if function is None:
        return
    try:
        function()
    except Exception:  # an engine thread has no caller to raise to
        logger.exception("gluon-sparse: an engine-ordered call failed")


# One C callback for the life of the process: ctypes must keep it alive while
# the engine may still call it.
_CALLBACK = _SyncFunc(_run)


def push(function, ctx, mutable, name="gluon_sparse_engine_call"):
    """Queue ``function()`` on MXNet's engine as an operation writing ``mutable``.

    Parameters
    ----------
    function : callable
        Called with no arguments on an engine thread once every operation
        queued before on the arrays of ``mutable`` has run.
    ctx : Context
        The device whose engine queue runs it.
    mutable : list of NDArray
        Arrays the call is ordered with as if it wrote them.
    name : str
        Name shown in MXNet's profiler.
    """
    key = next(_keys)
    with _lock:
        _pending[key] = function
    handles = (mx.base.NDArrayHandle * len(mutable))(*[array.handle for array in mutable])
    context = _Context(ctx.device_typeid, ctx.device_id)
    try:
        mx.base.check_call(mx.base._LIB.MXEnginePushSyncND(
            _CALLBACK, ctypes.c_void_p(key), None, ctypes.byref(context), None, 0, handles,
            len(mutable), None, 0, mx.base.c_str(name)))
    except Exception:
        with _lock:
            _pending.pop(key, None)
        raise
