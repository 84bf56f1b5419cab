"""Background prefetching with error propagation and clean shutdown.

A :class:`Prefetcher` runs an iterator in a daemon thread and hands its items
to the consumer through a bounded queue. The design follows PyTorch's
DataLoader: an exception in the thread is re-raised in the consumer with the
worker's traceback attached, and every way out of the consumer's loop
(exhaustion, ``break``, an exception, KeyboardInterrupt, garbage collection)
stops and joins the thread.
"""
import logging
import queue
import threading
import time
import traceback

__all__ = ["Prefetcher"]

logger = logging.getLogger(__name__)

_POLL_SECONDS = 0.05
_JOIN_SECONDS = 30.0


class _End:
    """Queue marker: the source is exhausted."""


class _Failure:
    """Queue marker carrying an exception raised in the worker."""

    def __init__(self, error):
        self.error = error
        self.formatted = "".join(traceback.format_exception(error))


def _put(item, items, stop):
    """Put ``item`` unless asked to stop; returns False when stopping."""
    while not stop.is_set():
        try:
            items.put(item, timeout=_POLL_SECONDS)
            return True
        except queue.Full:
            continue
    return False


def _work(iterator, transform, items, stop):
    """Body of the worker thread: produce into ``items`` until done or stopped."""
    try:
        for item in iterator:
            if transform is not None:
                item = transform(item)
            if not _put(item, items, stop):
                return
        _put(_End, items, stop)
    except BaseException as error:  # noqa: B902 - every failure goes to the consumer
        _put(_Failure(error), items, stop)
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()


class Prefetcher:
    """Iterate ``source`` in a background thread, ``depth`` items ahead.

    Parameters
    ----------
    source : iterable
        Produces the items; iterated only in the worker thread.
    depth : int
        Items produced ahead of the consumer (queue size), >= 1.
    transform : callable, optional
        Applied to each item in the worker (e.g. a copy to a GPU context).
    name : str
        Thread name, for debugging.

    Notes
    -----
    Use it as an iterator, ideally in a ``with`` block or a ``for`` loop;
    :meth:`close` stops the worker and is idempotent. Python code in the
    worker holds the GIL; work that releases it (file reads, the native
    parser, MXNet copies) overlaps the training step fully.

    Examples
    --------
    >>> with Prefetcher(range(3), depth=2) as items:
    ...     list(items)
    [0, 1, 2]
    """

    def __init__(self, source, depth=2, transform=None, name="gluon-sparse-prefetch"):
        if depth < 1:
            raise ValueError("depth must be >= 1, got %d" % depth)
        self._queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._done = False
        # The worker must not reference this object, or dropping the last
        # reference to it (a consumer leaving its loop) would never collect it.
        self._thread = threading.Thread(target=_work, name=name, daemon=True,
                                        args=(iter(source), transform, self._queue, self._stop))
        self._thread.start()

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        while True:
            try:
                item = self._queue.get(timeout=_POLL_SECONDS)
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    self.close()
                    raise RuntimeError("the prefetch thread died without a result") from None
        if item is _End:
            self.close()
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
            error = item.error
            error.add_note("The error above was raised in gluon-sparse's prefetch thread:\n"
                           + item.formatted)
            raise error
        return item

    def close(self):
        """Stop the worker thread and wait for it to exit (idempotent)."""
        self._done = True
        self._stop.set()
        deadline = time.monotonic() + _JOIN_SECONDS
        while self._thread.is_alive():
            # Drain so a worker blocked on a full queue sees the stop flag.
            try:
                while True:
                    self._queue.get_nowait()
            except queue.Empty:
                pass
            self._thread.join(_POLL_SECONDS)
            if self._thread.is_alive() and time.monotonic() > deadline:
                logger.warning("prefetch thread %s did not stop within %.0f s; it is a daemon "
                               "and will not block exit", self._thread.name, _JOIN_SECONDS)
                return

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __del__(self):
        if getattr(self, "_thread", None) is not None:
            self.close()
