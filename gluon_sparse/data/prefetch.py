"""Background prefetching with error propagation and clean shutdown.

A :class:`Prefetcher` runs an iterator in a daemon thread and hands its items
to the consumer through a bounded buffer whose `get` is a bare deque pop
(see :class:`_HandOff`). The design follows PyTorch's
DataLoader: an exception in the thread is re-raised in the consumer with the
worker's traceback attached, and every way out of the consumer's loop
(exhaustion, ``break``, an exception, KeyboardInterrupt, garbage collection)
stops and joins the thread.
"""
import collections
import logging
import threading
import time
import traceback

__all__ = ["Prefetcher"]

logger = logging.getLogger(__name__)

_POLL_SECONDS = 0.05
_JOIN_SECONDS = 30.0
# While the buffer is full the producer sleeps an eighth of the consumer's
# recent time per item, within these bounds: a slot freed by a 0.1 ms step is
# refilled at once, and a 100 ms step costs a thousand wake-ups a second.
_FULL_SLEEP_SECONDS = (2e-5, 1e-3)
# Items handed out that the buffer keeps referencing: the consumer's current
# item and the previous one, which its loop variables hold until rebinding.
_KEEP_HANDED = 2
# An adaptive prefetcher moves the source into the consumer's thread when,
# over a window of this many items, the consumer spent less than this
# fraction of the time it waited for items doing anything else.
_STARVED_ITEMS = 16
_STARVED_WORK_FRACTION = 0.25


class _End:
    """Buffer marker: the source is exhausted."""


class _Empty:
    """Marker: nothing left in the buffer (None is a valid item)."""


class _Failure:
    """Buffer marker carrying an exception raised in the worker."""

    def __init__(self, error):
        self.error = error
        self.formatted = "".join(traceback.format_exception(error))


class _HandOff:
    """Bounded single-producer, single-consumer buffer with a cheap ``get``.

    ``queue.Queue.get`` wakes the producer blocked in ``put`` on every item;
    that wake-up, and the producer then taking the GIL, cost the consumer
    about 5 us per item, as long as building a small batch. Here the consumer
    takes an item with a bare ``deque.popleft`` (atomic under the GIL) and
    never signals; the producer polls for a free slot with growing sleeps
    instead. The consumer blocks, and the producer signals it, only when the
    buffer runs empty.

    Handed-out items are also freed by the producer: the buffer keeps a
    reference to the items it gave out and the producer drops all but the
    last ``_KEEP_HANDED``, so that once the consumer has let go of a
    batch, its NDArrays are freed in the producer's thread. Freeing an NDArray
    calls into MXNet without the GIL; in the consumer, taking the GIL back
    from a producer that is building the next batch cost about 9 us per
    batch, more than the hand-off itself.
    """

    def __init__(self, capacity):
        self._items = collections.deque()
        self._handed = collections.deque()
        self._capacity = capacity
        self._ready = threading.Condition(threading.Lock())
        self._consumer_waiting = False
        self._space = threading.Event()  # set by a consumer that found the buffer empty
        self._last_put = None
        self._pause = _FULL_SLEEP_SECONDS[0]
        self.waited = False  # whether the last get() had to wait

    def put(self, item, stop, detach):
        """Append ``item`` once there is room; False (item dropped) when ``stop`` is set.

        Once ``detach`` is set the item is appended even to a full buffer: the
        consumer is then waiting for this thread to end, not for room.
        """
        self._release_handed()
        while len(self._items) >= self._capacity and not detach.is_set():
            if stop.is_set():
                return False
            # A consumer that drains the buffer within this pause wakes the
            # producer at once instead of waiting it out.
            if self._space.wait(self._pause):
                self._space.clear()
            self._release_handed()
        if stop.is_set():
            return False
        self._items.append(item)
        now = time.perf_counter()
        if self._last_put is not None:
            low, high = _FULL_SLEEP_SECONDS
            self._pause = min(max((now - self._last_put) / 8, low), high)
        self._last_put = now
        # Read after the append: a consumer that set the flag before this read
        # is woken; one that sets it later finds the item before waiting.
        if self._consumer_waiting:
            with self._ready:
                self._ready.notify()
        return True

    def get(self, producer):
        """Pop the next item, waiting while the buffer is empty and ``producer`` is alive.

        Raises
        ------
        RuntimeError
            If the producer thread ended without leaving an item.
        """
        try:
            item = self._items.popleft()
            self.waited = False
        except IndexError:
            item = self._wait(producer)
            self.waited = True
        self._handed.append(item)
        return item

    def pop_left_over(self, empty):
        """The next item left in the buffer after the producer ended, or ``empty`` (a
        marker: None may be an item)."""
        try:
            return self._items.popleft()
        except IndexError:
            return empty

    def _wait(self, producer):
        self._space.set()
        with self._ready:
            self._consumer_waiting = True
            try:
                while not self._items:
                    if not producer.is_alive() and not self._items:
                        raise RuntimeError("the prefetch thread died without a result")
                    self._ready.wait(_POLL_SECONDS)
            finally:
                self._consumer_waiting = False
        return self._items.popleft()

    def _release_handed(self):
        # Called by the producer only; deque appends and pops are atomic.
        while len(self._handed) > _KEEP_HANDED:
            self._handed.popleft()

    def clear_handed(self):
        self._handed.clear()

    def clear(self):
        self._items.clear()
        self._handed.clear()


def _work(iterator, transform, items, stop, detach):
    """Body of the worker thread: produce into ``items`` until done, stopped or detached.

    When ``detach`` is set the worker ends after its current item and leaves
    ``iterator`` open for the consumer to continue.
    """
    detached = False
    try:
        for item in iterator:
            if transform is not None:
                item = transform(item)
            if not items.put(item, stop, detach):
                return
            if detach.is_set():
                detached = True
                return
        items.put(_End, stop, detach)
    except BaseException as error:  # noqa: B902 - every failure goes to the consumer
        items.put(_Failure(error), stop, detach)
    finally:
        close = getattr(iterator, "close", None)
        if close is not None and not detached:
            close()


class Prefetcher:
    """Iterate ``source`` in a background thread, ``depth`` items ahead.

    Parameters
    ----------
    source : iterable
        Produces the items; iterated in the worker thread (and, once an
        adaptive prefetcher has moved it, in the consumer's thread).
    depth : int
        Items produced ahead of the consumer (buffer size), >= 1.
    transform : callable, optional
        Applied to each item in the worker (e.g. a copy to a GPU context).
    name : str
        Thread name, for debugging.
    adaptive : bool
        Move the source into the consumer's thread when prefetching cannot
        help: when, over ``_STARVED_ITEMS`` items, the consumer spent less
        than a quarter of the time it waited for them on anything else (a
        loop that only reads batches). Two Python threads
        then trade the GIL for every item, which made building a batch in
        the worker 2x slower than in the consumer's own thread. Items keep
        their order; the source must tolerate being resumed from another
        thread (generators do).

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

    def __init__(self, source, depth=2, transform=None, name="gluon-sparse-prefetch",
                 adaptive=False):
        if depth < 1:
            raise ValueError("depth must be >= 1, got %d" % depth)
        self._source = iter(source)
        self._transform = transform
        self._items = _HandOff(depth)
        self._stop = threading.Event()
        self._detach = threading.Event()
        self._adaptive = adaptive
        self._inline = False  # the source runs in the consumer's thread
        self._starved = 0
        self._starved_wait = self._starved_work = 0.0
        self._returned_at = None
        self._done = False
        # The worker must not reference this object, or dropping the last
        # reference to it (a consumer leaving its loop) would never collect it.
        self._thread = threading.Thread(
            target=_work, name=name, daemon=True,
            args=(self._source, transform, self._items, self._stop, self._detach))
        self._thread.start()

    @property
    def inline(self):
        """Whether an adaptive prefetcher has moved the source into the consumer's thread."""
        return self._inline

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        if self._inline:
            item = self._next_inline()
        else:
            called_at = time.perf_counter()
            try:
                item = self._items.get(self._thread)
            except RuntimeError:
                self.close()
                raise
            if self._adaptive:
                self._watch_starvation(called_at)
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

    def _watch_starvation(self, called_at):
        # Sums over windows of _STARVED_ITEMS items: the time spent in get()
        # and the time spent elsewhere (the training step) between gets.
        returned_at = time.perf_counter()
        if self._returned_at is not None:
            self._starved += 1
            self._starved_wait += returned_at - called_at
            self._starved_work += called_at - self._returned_at
            if self._starved >= _STARVED_ITEMS:
                if self._starved_work < _STARVED_WORK_FRACTION * self._starved_wait:
                    self._move_source_inline()
                self._starved = 0
                self._starved_wait = self._starved_work = 0.0
        self._returned_at = returned_at

    def _move_source_inline(self):
        self._detach.set()
        self._thread.join()
        self._inline = True
        self._items.clear_handed()
        logger.debug("prefetch thread %s stopped: the consumer waited %.0f us per item and "
                     "worked %.0f us; items are now produced in its thread", self._thread.name,
                     1e6 * self._starved_wait / self._starved, 1e6 * self._starved_work / self._starved)

    def _next_inline(self):
        left_over = self._items.pop_left_over(_Empty)
        if left_over is not _Empty:
            return left_over
        try:
            item = next(self._source)
        except StopIteration:
            return _End
        except BaseException:
            self.close()
            raise
        return item if self._transform is None else self._transform(item)

    def close(self):
        """Stop the worker thread and wait for it to exit (idempotent)."""
        if self._stop.is_set():
            return  # closed already: its wait is not repeated (by __del__ after __exit__)
        self._done = True
        self._stop.set()
        if threading.current_thread() is self._thread:
            return  # collected inside the worker (a garbage cycle): it stops on its own
        # The worker checks the stop flag between items and while the buffer
        # is full, so it ends after the item it is building.
        self._thread.join(_JOIN_SECONDS)
        self._items.clear()
        if self._thread.is_alive():
            logger.warning("prefetch thread %s did not stop within %.0f s; it is a daemon "
                           "and will not block exit", self._thread.name, _JOIN_SECONDS)
        elif self._inline:
            close = getattr(self._source, "close", None)
            if close is not None:
                close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __del__(self):
        if getattr(self, "_thread", None) is not None:
            self.close()
