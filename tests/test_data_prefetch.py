"""The background prefetcher: errors reach the consumer, no thread survives its loop."""
import threading
import time
import traceback

import numpy as np
import pytest
import scipy.sparse as sp

from gluon_sparse.data import CSRDataset, Prefetcher, SparseDataLoader


_threads_before = set()


@pytest.fixture(autouse=True)
def record_threads():
    """Threads alive before the test (other tests' or pytest's are not ours)."""
    _threads_before.clear()
    _threads_before.update(threading.enumerate())
    yield


def new_threads():
    return [t for t in threading.enumerate() if t not in _threads_before]


def wait_for_no_prefetch_threads(seconds=5.0):
    """Threads started by the test and still alive (prefetch and batch-building workers)."""
    # close() joins the threads; the short wait only covers interpreter bookkeeping.
    deadline = time.monotonic() + seconds
    while new_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    return new_threads()


def loader(rows=200, **kwargs):
    X = sp.random(rows, 1000, density=0.01, format="csr", dtype=np.float32, random_state=0)
    return SparseDataLoader(CSRDataset(X, np.arange(rows)), batch_size=4, **kwargs)


def failing_source():
    yield 1
    raise KeyError("bad record 7")


def test_items_arrive_in_order():
    with Prefetcher(iter(range(100)), depth=3) as items:
        assert list(items) == list(range(100))
    assert wait_for_no_prefetch_threads() == []


def test_worker_error_is_reraised_with_its_traceback():
    items = Prefetcher(failing_source(), depth=2)
    assert next(items) == 1
    with pytest.raises(KeyError, match="bad record 7") as info:
        next(items)
    text = "".join(traceback.format_exception(info.value))
    assert "failing_source" in text and "prefetch thread" in text
    assert wait_for_no_prefetch_threads() == []


def test_loader_batch_error_reaches_the_consumer():
    bad = loader(prefetch=2)
    bad._batchify.label = None
    bad._batchify.data = "not a matrix"  # building a batch now fails in the worker
    with pytest.raises(Exception, match="prefetch thread"):
        for _ in bad:
            pass
    assert wait_for_no_prefetch_threads() == []


def test_break_leaves_no_thread():
    for _ in range(3):
        for i, _ in enumerate(loader(prefetch=2)):
            if i == 2:
                break
    assert wait_for_no_prefetch_threads() == []


def test_exception_in_training_loop_leaves_no_thread():
    def train():
        for i, _ in enumerate(loader(prefetch=3, num_workers=2)):
            if i == 1:
                raise RuntimeError("loss is nan")

    with pytest.raises(RuntimeError, match="loss is nan"):
        train()
    assert wait_for_no_prefetch_threads() == []


def test_keyboard_interrupt_leaves_no_thread():
    def train():
        for i, _ in enumerate(loader(prefetch=2)):
            if i == 3:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train()
    assert wait_for_no_prefetch_threads() == []


def test_abandoned_prefetcher_is_stopped_when_collected():
    items = Prefetcher(iter(range(10 ** 6)), depth=2)
    next(items)
    del items
    assert wait_for_no_prefetch_threads() == []


def test_close_is_idempotent_and_stops_iteration():
    items = Prefetcher(iter(range(10)), depth=1)
    items.close()
    items.close()
    assert list(items) == []
    assert wait_for_no_prefetch_threads() == []


def test_producer_stays_within_depth():
    produced = []

    def source():
        for i in range(50):
            produced.append(i)
            yield i

    with Prefetcher(source(), depth=3) as items:
        for expected in range(10):
            time.sleep(0.005)  # time for the producer to run as far ahead as it may
            # items handed out + buffered + the one being built when the buffer filled
            assert len(produced) <= expected + 3 + 1
            assert next(items) == expected
    assert wait_for_no_prefetch_threads() == []


def test_slow_producer_wakes_a_waiting_consumer():
    def slow():
        for i in range(5):
            time.sleep(0.02)
            yield i

    with Prefetcher(slow(), depth=2) as items:
        assert list(items) == list(range(5))  # the consumer waited for every item
    assert wait_for_no_prefetch_threads() == []


class Tracked:
    """Records the thread that frees it."""
    freed_in = []

    def __del__(self):
        Tracked.freed_in.append(threading.current_thread().name)


def test_consumed_items_are_freed_by_the_producer_thread():
    Tracked.freed_in.clear()
    with Prefetcher((Tracked() for _ in range(40)), depth=2, name="producer") as items:
        for item in items:
            time.sleep(0.002)  # let the producer run between items
    del item
    freed_by_producer = Tracked.freed_in.count("producer")
    assert len(Tracked.freed_in) == 40
    assert freed_by_producer >= 30  # all but the last few, which close() releases


def test_producer_finishing_an_epoch_prepares_the_next_shuffle():
    data = loader(rows=200, shuffle=True, seed=3, prefetch=2)
    sampler = data._batch_sampler._sampler
    first = [label.asnumpy().tolist() for _, label in data]
    assert sampler._prepared[0] == 1  # computed in the background at the end of epoch 0
    second = [label.asnumpy().tolist() for _, label in data]
    fresh = loader(rows=200, shuffle=True, seed=3, prefetch=0)
    assert [label.asnumpy().tolist() for _, label in fresh] == first
    assert [label.asnumpy().tolist() for _, label in fresh] == second
    assert first != second


def slow_source(count, seconds, log=None):
    try:
        for i in range(count):
            time.sleep(seconds)  # the producer is the bottleneck
            yield i
    finally:
        if log is not None:
            log.append(threading.current_thread().name)


def test_adaptive_prefetcher_moves_a_starving_source_into_the_consumer():
    closed_in = []
    with Prefetcher(slow_source(60, 0.002, closed_in), depth=2, adaptive=True,
                    name="producer") as items:
        got = [next(items) for _ in range(40)]  # the loop does nothing but read
        assert items.inline
        assert [t for t in new_threads() if t.name == "producer"] == []
        got += list(items)
    assert got == list(range(60))
    assert closed_in == [threading.current_thread().name]  # exhausted in the consumer
    assert wait_for_no_prefetch_threads() == []


def test_adaptive_prefetcher_keeps_its_thread_while_the_consumer_works():
    with Prefetcher(iter(range(40)), depth=2, adaptive=True) as items:
        for expected in range(40):
            assert next(items) == expected
            time.sleep(0.003)  # a training step: the producer is far ahead
        assert not items.inline


def test_errors_and_close_after_moving_inline():
    def failing():
        yield from slow_source(30, 0.002)
        raise KeyError("bad record 31")

    items = Prefetcher(failing(), depth=2, adaptive=True)
    assert [next(items) for _ in range(30)] == list(range(30))
    assert items.inline
    with pytest.raises(KeyError, match="bad record 31"):
        next(items)
    with pytest.raises(StopIteration):
        next(items)

    closed_in = []
    items = Prefetcher(slow_source(100, 0.002, closed_in), depth=2, adaptive=True)
    for _ in range(30):
        next(items)
    assert items.inline
    items.close()  # a loop left early: the source is closed in the consumer
    assert closed_in == [threading.current_thread().name]
    assert wait_for_no_prefetch_threads() == []


def test_none_items_survive_the_move_into_the_consumer():
    """An item that is None, left in the buffer when the source moved into the consumer,
    was taken for an empty buffer and dropped (199 of 200 items)."""
    def source():
        for i in range(200):
            time.sleep(0.0005)  # slower than the consumer: the prefetcher moves inline
            yield None if i % 2 else i

    got = list(Prefetcher(source(), depth=2, adaptive=True))
    assert got == [None if i % 2 else i for i in range(200)]
