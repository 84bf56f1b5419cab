"""Ctrl-C that always stops the library's training loops.

CPython runs a signal's Python handler at the next bytecode boundary of the
main thread, wherever that is. A training loop of MXNet code spends much of its
Python time in ``NDArray.__del__`` (every temporary array is freed through
it), and a KeyboardInterrupt raised inside a ``__del__`` (or a weakref
finalizer) cannot propagate: CPython prints "Exception ignored in ..." and
the loop goes on as if Ctrl-C had never been pressed.

:func:`interruptible` wraps a training loop: while it runs, Ctrl-C raises
KeyboardInterrupt as usual *and* is remembered, and :func:`check`, called once
per batch, raises it again if the first one was lost. Nothing changes when the
loop does not run in the main thread or the program installed its own SIGINT
handler.
"""
import functools
import signal
import threading

__all__ = ["interruptible", "check"]

_pending = False  # a Ctrl-C arrived inside an interruptible loop
_depth = 0  # nesting of interruptible calls (the handler is installed by the outermost)


def _handler(signum, frame):
    global _pending
    _pending = True
    raise KeyboardInterrupt


def check():
    """Raise KeyboardInterrupt if Ctrl-C was pressed and its exception got lost."""
    global _pending
    if _pending:
        _pending = False
        raise KeyboardInterrupt


def interruptible(function):
    """Decorate a training loop so that a lost Ctrl-C is raised at the next :func:`check`.

    Parameters
    ----------
    function : callable
        The loop; it calls :func:`check` once per batch.

    Returns
    -------
    callable
    """
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        global _depth, _pending
        if threading.current_thread() is not threading.main_thread():
            return function(*args, **kwargs)  # signals reach the main thread only
        install = _depth == 0 and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        if install:
            signal.signal(signal.SIGINT, _handler)
            _pending = False
        _depth += 1
        try:
            return function(*args, **kwargs)
        finally:
            _depth -= 1
            if install:
                signal.signal(signal.SIGINT, signal.default_int_handler)
                _pending = False

    return wrapper
