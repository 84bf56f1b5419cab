"""Hooks the sparse blocks run before their forward pass reads weight rows.

An optimizer that defers the updates of rows absent from the gradient (the
deferred SparseAdam) must bring exactly the rows a batch reads up to date
before the forward pass reads them. The blocks stay ignorant of optimizers:
they call every registered hook with themselves and the CSR batch.
"""
import threading

__all__ = ["register_before_read", "run_before_read"]

_lock = threading.Lock()
_hooks = []


class HookHandle:
    """Returned by :func:`register_before_read`; ``remove()`` unregisters the hook."""

    def __init__(self, hook):
        self._hook = hook

    def remove(self):
        with _lock:
            if self._hook in _hooks:
                _hooks.remove(self._hook)


def register_before_read(hook):
    """Register ``hook(block, x)``, called before a sparse block reads rows for batch ``x``.

    Parameters
    ----------
    hook : callable
        Called as ``hook(block, x)`` with the block (FullyConnectedSparse,
        FactorizationMachine) and its CSRNDArray input, before the forward pass.

    Returns
    -------
    HookHandle
        Call its ``remove()`` to unregister the hook.
    """
    with _lock:
        _hooks.append(hook)
    return HookHandle(hook)


def run_before_read(block, x):
    """Call every registered hook with ``(block, x)`` (cheap when none is registered)."""
    if _hooks:
        for hook in list(_hooks):
            hook(block, x)
