"""optimizer/_engine_calls: Python calls in MXNet's engine order; _fork: forks while the engine
holds work that needs the GIL."""
import ctypes
import os
import subprocess
import sys

import mxnet as mx
import numpy as np

from gluon_sparse.optimizer import _engine_calls


def _slow_writes(out, count=6):
    """Queue ~1 s of work writing ``out`` (2000 x 2000 products)."""
    a = mx.nd.ones(out.shape) / out.shape[0]
    for _ in range(count):
        mx.nd.dot(a, a, out=out)


def test_call_runs_after_earlier_writes_and_before_later_ones():
    b = mx.nd.zeros((2000, 2000))
    b.wait_to_read()  # allocated by the zeros operator: its address is final from here
    pointer = ctypes.c_void_p()
    mx.base.check_call(mx.base._LIB.MXNDArrayGetData(b.handle, ctypes.byref(pointer)))
    seen = []

    def call():  # reads the memory directly: waiting for the engine here would deadlock
        first = ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float))
        seen.append(float(np.ctypeslib.as_array(first, shape=(1,))[0]))

    _slow_writes(b)
    b[:] = 7
    _engine_calls.push(call, mx.cpu(), [b])
    b[:] = 9
    b.wait_to_read()
    assert seen == [7.0]
    assert float(b[0, 0].asscalar()) == 9


_FORK_WHILE_QUEUED = r"""
import multiprocessing, subprocess, sys
import numpy as np, mxnet as mx
sys.path.insert(0, {tests!r})
from test_engine_calls import _slow_writes
import gluon_sparse
from gluon_sparse.optimizer import _engine_calls

def fork(how):
    if how == "subprocess":
        subprocess.run([sys.executable, "-c", "pass"], preexec_fn=lambda: None, check=True)
    else:
        process = multiprocessing.get_context("fork").Process(target=int)
        process.start()
        process.join()
        assert process.exitcode == 0

ran = []
for how in ("subprocess", "multiprocessing"):
    # A queued Python call (a grown history's swap, a dropped state's unregister).
    b = mx.nd.zeros((2000, 2000))
    _slow_writes(b)
    _engine_calls.push(lambda: ran.append(how), mx.cpu(), [b])
    fork(how)
    # An array wrapped from NumPy whose last reference a queued operator holds.
    _slow_writes(b)
    wrapped = mx.nd.from_numpy(np.ones((2000, 2000), np.float32), zero_copy=True)
    product = mx.nd.dot(b, wrapped)
    del wrapped
    fork(how)
    ran.append(float(product[0, 0].asscalar()) > 0)
print("forked", ran)
"""


def test_fork_while_the_engine_holds_python_work_does_not_hang():
    """Forks (subprocess with preexec_fn, multiprocessing's fork) while ~1 s of work is
    queued before a call that needs the GIL on an engine thread: a queued Python call, and
    the NumPy deleter of a zero-copy array whose last reference an operator holds. MXNet's
    atfork handler waits for the engine with the GIL held: without gluon_sparse._fork
    both hung forever."""
    script = _FORK_WHILE_QUEUED.format(tests=os.path.dirname(__file__))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "forked ['subprocess', True, 'multiprocessing', True]" in done.stdout
