"""Forking a process that runs MXNet: the engine is drained first, the GIL released.

MXNet 1.9.1's atfork handler drains its engine before every fork (``os.fork``,
multiprocessing's fork start method, ``subprocess`` with a ``preexec_fn``),
and the forking thread holds the GIL meanwhile. Work queued on the engine that
needs the GIL then never finishes, and neither does the fork: the process
hangs. Two kinds of such work occur in training with this library:

* the Python calls that the deferred optimizers queue in engine order
  (:mod:`gluon_sparse.optimizer._engine_calls`: a grown history, a dropped
  state);
* the deleter of an array wrapped from NumPy without a copy
  (``mx.nd.from_numpy(zero_copy=True)``: the data loaders' batches, the
  deferred states' lazily zeroed arrays), which runs wherever the array's last
  reference goes, an engine thread when an operator held it.

So, from ``import gluon_sparse`` on, a before-fork hook does the same drain
first, with the GIL released (``MXNDArrayWaitAll`` through ctypes). A fork
waits no longer than MXNet makes it wait anyway.

The drain returns when the last operation is marked complete, but the engine
thread that ran it still frees the operation's arrays after that, a zero-copy
array's NumPy deleter among them: under load the fork could start first and
hang on it. So the hook then runs one trivial operation on the engine's CPU
worker and waits for it too, the GIL released: the worker takes it only once
it has finished the tail of the one before.

What the hook cannot cover: a fork from one thread while another keeps queuing
MXNet work (zero-copy arrays among it). That work can land between the hook
and MXNet's own drain, which holds the GIL; fork from the thread that runs
MXNet, or while the others wait.
"""
import logging
import os

import mxnet as mx

__all__ = ["drain_before_fork"]

logger = logging.getLogger(__name__)


def drain_before_fork():
    """Run everything queued on MXNet's engine, the GIL released (module doc).

    An error of a queued operation, which the drain raises, is logged: a fork
    has no caller to raise it to (and MXNet's own drain would raise it inside
    its atfork handler, out of C code).
    """
    if mx.base._LIB.MXNDArrayWaitAll() != 0:  # ctypes releases the GIL
        logger.error("gluon-sparse: an operation queued before a fork failed: %s",
                     mx.base.py_str(mx.base._LIB.MXGetLastError()))
        return
    # The tail of the last operation (freeing its arrays) ends before the next starts.
    marker = mx.nd.zeros((1,), ctx=mx.cpu())
    mx.base._LIB.MXNDArrayWaitToRead(marker.handle)  # the GIL released


os.register_at_fork(before=drain_before_fork)
