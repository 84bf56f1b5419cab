"""Memory of the deferred optimizers' zeroed state arrays (mean, var, momentum, ...).

A deferred optimizer writes a state row the first time a batch touches the
weight row, and a row never touched is never written (with ``wd == 0`` its
zero state is a fixed point). Three ways to get the zeros:

* :func:`zeros`: MXNet's ``mx.nd.zeros``, pooled memory, every byte written
  when created (1 GB of mean and var for a 10^6 x 128 weight: a second of
  page faults before the first step);
* :func:`lazy_zeros`: numpy's zeros, lazily mapped zero pages wrapped without
  a copy: nothing is committed until a row is written, but that first write
  is a page fault inside a training step (5 ms of a 19 ms SampledOutput step
  at 10^6 labels, 8% of a 250k x 1024 input layer's step,
  benchmarks/RESULTS.md);
* :func:`populated_zeros`: lazy zeros whose pages a daemon thread commits
  with ``madvise(MADV_POPULATE_WRITE)`` (Linux >= 5.14), which faults the pages
  in without writing them, so training may write rows meanwhile. Start-up
  does not wait, and later first touches are no faults. Only arrays that take
  at most ``PREFAULT_SHARE`` of the memory available are committed: the state
  of an input layer of 10^7 features x 128 (5 GB each for mean and var) stays
  lazy, and the rows of features never seen cost no memory.

:func:`state_zeros` picks one per weight.
"""
import ctypes
import functools
import logging
import mmap
import threading

import mxnet as mx
import numpy as np

__all__ = ["zeros", "lazy_zeros", "populated_zeros", "populate", "state_zeros",
           "PREFAULT_SHARE"]

logger = logging.getLogger(__name__)

#: populated_zeros commits an array up to this share of the memory available.
PREFAULT_SHARE = 0.25
#: Smaller arrays are left lazy: their faults are few, a thread is not worth it.
_MIN_POPULATE_BYTES = 16 << 20
_MADV_POPULATE_WRITE = 23  # <linux/mman.h>, Linux >= 5.14
_CHUNK = 64 << 20  # bytes a madvise call commits


def zeros(shape, ctx, dtype):
    """``mx.nd.zeros`` (pooled memory, every byte written)."""
    return mx.nd.zeros(shape, ctx=ctx, dtype=dtype)


def lazy_zeros(shape, ctx, dtype):
    """Zeros on ``ctx`` whose untouched pages cost nothing, where the platform allows.

    On the CPU, numpy's zeros come from the OS as lazily mapped zero pages, and
    the array is wrapped without a copy; elsewhere :func:`zeros`.
    """
    if ctx != mx.cpu():
        return zeros(shape, ctx, dtype)  # another device (or CPU id)
    return mx.nd.from_numpy(np.zeros(shape, dtype=dtype), zero_copy=True)


def _available_memory():
    """Bytes of memory available to new allocations (Linux's MemAvailable), 0 if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


@functools.lru_cache(maxsize=None)
def _madvise():
    """The C library's madvise, looked up once in this process's symbols; None where absent.

    (``ctypes.util.find_library`` would run ``ldconfig`` in a subprocess for
    every state; libc is already loaded.)
    """
    madvise = getattr(ctypes.CDLL(None, use_errno=True), "madvise", None)
    if madvise is not None:
        madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        madvise.restype = ctypes.c_int
    return madvise


def populate(host):
    """Commit the pages of numpy array ``host`` without changing a byte of it.

    ``madvise(MADV_POPULATE_WRITE)`` in chunks; safe while other threads write
    the array. Returns False (and commits what it did) where the kernel does
    not support it or memory runs short.
    """
    madvise = _madvise()
    if madvise is None:
        return False
    start = host.ctypes.data - host.ctypes.data % mmap.PAGESIZE
    end = host.ctypes.data + host.nbytes
    for offset in range(start, end, _CHUNK):
        if madvise(offset, min(_CHUNK, end - offset), _MADV_POPULATE_WRITE) != 0:
            logger.debug("madvise(MADV_POPULATE_WRITE) failed (errno %d): state stays lazy",
                         ctypes.get_errno())
            return False
    return True


#: The daemon threads started by populated_zeros (for tests to join).
populating = []
_pending = {"bytes": 0}  # scheduled by populated_zeros, not yet committed
_pending_lock = threading.Lock()


def _populate_then_release(host):
    try:
        populate(host)
    finally:
        with _pending_lock:
            _pending["bytes"] -= host.nbytes


def populated_zeros(shape, ctx, dtype):
    """Lazy zeros whose pages a daemon thread commits, if they fit ``PREFAULT_SHARE`` of memory.

    Memory that earlier calls scheduled but have not committed yet counts as
    taken, so that several large states cannot together overrun the share.
    """
    if ctx != mx.cpu():
        return zeros(shape, ctx, dtype)  # another device (or CPU id)
    host = np.zeros(shape, dtype=dtype)
    with _pending_lock:
        free = _available_memory() - _pending["bytes"]
        commit = _MIN_POPULATE_BYTES <= host.nbytes <= PREFAULT_SHARE * free
        if commit:
            _pending["bytes"] += host.nbytes
    if commit:
        # The thread holds `host`, so the memory outlives it whatever happens to the NDArray.
        thread = threading.Thread(target=_populate_then_release, args=(host,), daemon=True,
                                  name="gluon-sparse-populate")
        populating[:] = [t for t in populating if t.is_alive()] + [thread]
        thread.start()
    return mx.nd.from_numpy(host, zero_copy=True)


def state_zeros(optimizer, index):
    """The allocator of the zeroed state arrays of weight ``index`` under a deferred optimizer.

    With weight decay every row moves at the next flush, so every byte gets
    written anyway: :func:`zeros` (MXNet's pooled memory). Without:
    :func:`populated_zeros`.
    """
    if optimizer._get_wd(index) != 0:
        return zeros
    return populated_zeros
