"""Ctrl-C stops the library's training loops even when CPython loses it in a __del__."""
import os
import signal

import numpy as np
import pytest
import scipy.sparse as sp

from gluon_sparse import _interrupt
from gluon_sparse.sklearn import SparseMLPClassifier, _training

# The lost KeyboardInterrupts are reported by CPython as unraisable: expected here.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(autouse=True)
def python_sigint_handler():
    """Python's own Ctrl-C handler for each test, whatever the runner started with: a
    shell's background job inherits SIGINT ignored, which the library rightly leaves alone."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


class _LosesInterrupt:
    """Receives Ctrl-C inside its __del__, where CPython prints the KeyboardInterrupt and drops it."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # bytecode boundaries: the handler runs here, inside __del__
            pass


def _loop(batches, lose_at):
    for i in range(batches):
        _interrupt.check()
        if i == lose_at:
            _LosesInterrupt()  # freed at once
    return "finished"


def test_cpython_loses_a_keyboard_interrupt_raised_in_del():
    # The failure the module guards against: without it the loop runs to its end.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert _loop(20, lose_at=3) == "finished"


def test_lost_interrupt_is_raised_at_the_next_check():
    with pytest.raises(KeyboardInterrupt):
        _interrupt.interruptible(_loop)(20, lose_at=3)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    assert _loop(5, lose_at=-1) == "finished"  # nothing left pending


def test_a_program_handler_is_left_alone():
    seen = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        assert _interrupt.interruptible(_loop)(20, lose_at=3) == "finished"
        assert seen == [signal.SIGINT]
        assert signal.getsignal(signal.SIGINT) is not _interrupt._handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_estimator_fit_stops_on_a_lost_interrupt(monkeypatch):
    class LosingLoader(_training.SparseDataLoader):
        def __iter__(self):
            for i, batch in enumerate(super().__iter__()):
                if i == 1:
                    _LosesInterrupt()
                yield batch

    monkeypatch.setattr(_training, "SparseDataLoader", LosingLoader)
    rng = np.random.default_rng(0)
    X = sp.random(400, 50, density=0.1, format="csr", random_state=0, dtype=np.float32)
    y = rng.integers(0, 2, 400)
    clf = SparseMLPClassifier(hidden_layer_sizes=(4,), batch_size=20, max_iter=50, random_state=0)
    with pytest.raises(KeyboardInterrupt):
        clf.fit(X, y)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
