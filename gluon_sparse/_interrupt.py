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

:func:`held_back` is the other half: a few state writes that must happen all
or none (an optimizer step counts an update, queues its operator and records
the step; a deferred state that saw the first but not the last would replay a
step twice, or refuse to flush). Ctrl-C pressed inside waits, and is raised
when the block ends.
"""
import _signal  # signal's C functions: signal.signal and getsignal wrap them in ~3 us of enums
import functools
import signal
import threading

__all__ = ["interruptible", "check", "held_back"]

_pending = False  # a Ctrl-C arrived inside an interruptible loop
_depth = 0  # nesting of interruptible calls (the handler is installed by the outermost)
_MAIN_THREAD = threading.main_thread().ident


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


class _HeldBack:
    """The context manager :func:`held_back` returns (one, re-entrant: the outermost holds)."""

    __slots__ = ("depth", "outer", "held")

    def __init__(self):
        self.depth = 0
        self.outer = None  # the handler replaced while held, None when nothing is held
        self.held = None  # (signum, frame) of a Ctrl-C that arrived while held

    def _hold(self, signum, frame):
        self.held = (signum, frame)

    def __enter__(self):
        if threading.get_ident() != _MAIN_THREAD:
            return self  # signals reach the main thread only
        if self.depth == 0:
            handler = _signal.getsignal(signal.SIGINT)
            # SIG_DFL and SIG_IGN run no Python code, nor does a handler set outside Python.
            if callable(handler):
                self.held = None
                # _signal.signal runs a Ctrl-C already pending before it installs the
                # hold: raised here, before the block has written anything.
                _signal.signal(signal.SIGINT, self._hold)
                self.outer = handler
        self.depth += 1
        return self

    def __exit__(self, *exc_info):
        if threading.get_ident() != _MAIN_THREAD:
            return False
        self.depth -= 1
        if self.depth == 0 and self.outer is not None:
            outer, self.outer = self.outer, None
            _signal.signal(signal.SIGINT, outer)
            held, self.held = self.held, None
            if held is not None:
                outer(*held)  # Python's default handler raises KeyboardInterrupt here
        return False


_held_back = _HeldBack()


def held_back():
    """Hold Ctrl-C back until the ``with`` block ends, then raise it as usual.

    For state writes that must happen all or none. Only the main thread
    receives signals; elsewhere, and where SIGINT has no Python handler, the
    block runs as it is. Re-entrant. The block should be short: Ctrl-C waits
    for it.

    Returns
    -------
    context manager

    Examples
    --------
    >>> with held_back():
    ...     pass  # count the step, queue the operator, record the step
    """
    return _held_back
