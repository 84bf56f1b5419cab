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

:func:`state_zeros` picks one per weight, and places its arrays.

Placement. The hot loops of the deferred optimizers (replaying the steps a
returning row missed, the update) walk the same row of the weight and of every
state array together. Large arrays come from ``mmap``, which recent Linux
kernels align to 2 MB for transparent huge pages, so the weight (MXNet's
memory) and its state arrays often lie at addresses equal in bits 12 to 27,
or all but 48 bytes apart in their page. On AMD Zen (the 2-core EPYC of benchmarks/RESULTS.md)
such lines share an L1 set and the way predictor's tag, a hash of bits 12-27,
and evict each other on every access; addresses equal in bits 0-11 also make
loads wait on unrelated stores ("4K aliasing", any x86). Measured at the seed
shape: the processes where two of weight, mean and var agreed in bits 12-27
(about half) trained at 2.8-3.9 ms a step, the others at 1.3-2.1 ms, for the
same work. So an array of ``_PLACE_MIN_BYTES`` or more is placed against the
weight's address: slot ``k`` (0, 1, 2: the order the rule makes its states)
equals the weight in bits 14-27, differs from it and from every other slot in
bits 12-13 and in bits 10-11 (1 KB or more apart within a page), and is
64-byte aligned. This takes ``2 ** _PLACE_BITS`` bytes of padding around the
array, address space that is never touched and commits no memory.
"""
import ctypes
import functools
import itertools
import logging
import mmap
import threading

import mxnet as mx
import numpy as np

from . import _registry

__all__ = ["zeros", "lazy_zeros", "populated_zeros", "populate", "placed", "place",
           "state_zeros", "PREFAULT_SHARE"]

logger = logging.getLogger(__name__)

#: populated_zeros commits an array up to this share of the memory available.
PREFAULT_SHARE = 0.25
#: Smaller arrays are left lazy: their faults are few, a thread is not worth it.
_MIN_POPULATE_BYTES = 16 << 20
_MADV_POPULATE_WRITE = 23  # <linux/mman.h>, Linux >= 5.14
_CHUNK = 64 << 20  # bytes a madvise call commits
#: Placement (module doc): the address bits set against the weight's, and the
#: smallest array placed (smaller ones come from the heap, not from aligned maps).
_PLACE_BITS = 28
_PLACE_MIN_BYTES = 2 << 20


def _slot_bits(slot):
    """The bits in which slot ``slot`` differs from the weight: 12-13 and 10-11 (module doc)."""
    pattern = slot % 3 + 1  # 1, 2, 3: pairwise different, none zero (the weight's)
    return pattern << 12 | pattern << 10


def _placed_bits(near, slot):
    """Bits 0 to _PLACE_BITS - 1 of the address of slot ``slot`` placed against ``near``."""
    return (near ^ _slot_bits(slot)) & ((1 << _PLACE_BITS) - 1) & ~63


def _host_zeros(shape, dtype, near=None, slot=0):
    """numpy zeros (lazily mapped pages where large), placed against address ``near`` if given."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if near is None or nbytes < _PLACE_MIN_BYTES:
        return np.zeros(shape, dtype=dtype)
    window = 1 << _PLACE_BITS
    try:
        padded = np.zeros(nbytes + window, dtype=np.uint8)  # the padding is never touched
    except MemoryError:  # an address-space limit or strict overcommit: unplaced then
        logger.debug("no address space for a placed state array: left unplaced")
        return np.zeros(shape, dtype=dtype)
    offset = (_placed_bits(near, slot) - padded.ctypes.data) % window
    return padded[offset:offset + nbytes].view(dtype).reshape(shape)


def place(arrays, near):
    """A weight's row states (in slot order), each moved to memory placed against ``near``.

    For states that were not made by :func:`placed` for the weight at
    ``near``: loaded by ``Trainer.load_states``, or bound to a weight that
    moved. An array already placed, too small to be, or not on the CPU is
    returned as it is; the others are copied (module doc, "Placement").
    """
    moved = []
    for slot, array in enumerate(arrays):
        nbytes = array.size * np.dtype(array.dtype).itemsize
        if (array.context == mx.cpu() and nbytes >= _PLACE_MIN_BYTES and
                _registry.data_pointer(array) & ((1 << _PLACE_BITS) - 1) !=
                _placed_bits(near, slot)):
            copy = mx.nd.from_numpy(_host_zeros(array.shape, array.dtype, near, slot),
                                    zero_copy=True)
            array.copyto(copy)
            array = copy
        moved.append(array)
    return moved


def zeros(shape, ctx, dtype, near=None, slot=0):
    """Zeros with every byte written: ``mx.nd.zeros`` (pooled memory), or placed host memory.

    With ``near`` (an address) on the CPU, an array placed against it as the
    module doc says, its pages written (committed) now.
    """
    if near is None or ctx != mx.cpu():
        return mx.nd.zeros(shape, ctx=ctx, dtype=dtype)
    host = _host_zeros(shape, dtype, near, slot)
    host.fill(0)  # commit the pages now, as mx.nd.zeros does (the padding stays untouched)
    return mx.nd.from_numpy(host, zero_copy=True)


def lazy_zeros(shape, ctx, dtype, near=None, slot=0):
    """Zeros on ``ctx`` whose untouched pages cost nothing, where the platform allows.

    On the CPU, numpy's zeros come from the OS as lazily mapped zero pages, and
    the array is wrapped without a copy (placed against address ``near`` if
    given: module doc); elsewhere :func:`zeros`.
    """
    if ctx != mx.cpu():
        return zeros(shape, ctx, dtype)  # another device (or CPU id)
    return mx.nd.from_numpy(_host_zeros(shape, dtype, near, slot), zero_copy=True)


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


def populated_zeros(shape, ctx, dtype, near=None, slot=0):
    """Lazy zeros whose pages a daemon thread commits, if they fit ``PREFAULT_SHARE`` of memory.

    Memory that earlier calls scheduled but have not committed yet counts as
    taken, so that several large states cannot together overrun the share.
    Placed against address ``near`` if given (module doc).
    """
    if ctx != mx.cpu():
        return zeros(shape, ctx, dtype)  # another device (or CPU id)
    host = _host_zeros(shape, dtype, near, slot)
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


def placed(zeros_like, near):
    """``zeros(shape, ctx, dtype)`` calling ``zeros_like`` with each array placed against ``near``.

    Parameters
    ----------
    zeros_like : callable
        :func:`zeros`, :func:`lazy_zeros` or :func:`populated_zeros`.
    near : int
        The weight's address; the arrays made take slots 0, 1, 2, ... in order
        (module doc, "Placement").
    """
    slots = itertools.count()

    def allocate(shape, ctx, dtype):
        return zeros_like(shape, ctx, dtype, near=near, slot=next(slots))
    return allocate


def state_zeros(optimizer, index, weight):
    """The allocator of the zeroed state arrays of weight ``index`` under a deferred optimizer.

    With weight decay every row moves at the next flush, so every byte gets
    written anyway: :func:`zeros`. Without: :func:`populated_zeros`. Either way
    placed against ``weight``'s address (module doc).
    """
    near = _registry.data_pointer(weight)
    return placed(zeros if optimizer._get_wd(index) != 0 else populated_zeros, near)
