"""Make a launcher's processes die with it, even when it is killed with SIGKILL.

A launcher that is killed cannot run its clean-up; its children would be
re-parented to init and keep running (a scheduler, servers and workers blocked
in ps-lite, forever). Two mechanisms cover this, each for what the other
cannot reach:

* :func:`die_with_parent` runs in each child between ``fork`` and ``exec``
  (``subprocess.Popen(preexec_fn=...)``, after ``start_new_session``) and asks
  the kernel (``prctl(PR_SET_PDEATHSIG, SIGKILL)``) to kill the child when the
  launcher's thread that started it ends. The setting survives ``exec`` but not
  ``fork``: a worker's own children (a shell's command, a data-loading pool)
  are not covered.
* a :class:`Watchdog` process, started by the launcher in its own session,
  reads a pipe whose only write end the launcher holds. The launcher tells it
  each process group it starts; when the pipe ends without the launcher's
  ``done`` (the launcher died), the watchdog kills every group it was told of,
  which reaches the grandchildren in those groups, then exits.

A process that leaves its group (``setsid``, ``start_new_session=True``)
escapes both, unless it is one of the launcher's own children: a worker's
child that starts its own session runs on after the launcher is killed.
Remote (ssh) processes get the hang-up of their connection, as before. This file runs as the watchdog's
script by path (``python -S _lifeline.py``): it imports only the standard
library, so the watchdog starts in milliseconds and imports neither MXNet nor
gluon-sparse.
"""
import ctypes
import ctypes.util
import logging
import os
import signal
import subprocess
import sys

__all__ = ["die_with_parent", "Watchdog"]

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_prctl = None


def _load_prctl():
    """libc's prctl, resolved in the parent: the child must not look symbols up."""
    global _prctl
    if _prctl is None and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            _prctl = libc.prctl
            _prctl.restype = ctypes.c_int
            _prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                               ctypes.c_ulong]
        except (OSError, AttributeError):
            _prctl = False
    return _prctl or None


def die_with_parent(parent_pid=None):
    """A ``preexec_fn`` that makes the child die (SIGKILL) when ``parent_pid`` does.

    Parameters
    ----------
    parent_pid : int, optional
        The launcher's pid (default: the calling process). The child compares
        it with its ``getppid()`` after ``prctl``: if the launcher died between
        ``fork`` and ``prctl``, the death signal would never come, so the child
        kills itself.

    Returns
    -------
    callable or None
        Pass it as ``preexec_fn``; None where ``prctl`` is unavailable (not
        Linux), where the :class:`Watchdog` alone covers the children.

    Notes
    -----
    The kernel sends the signal when the *thread* that forked the child ends,
    so start children from a thread that lives as long as the launcher (its
    main thread). The function does no allocation-heavy work, no import and no
    lock, which is what makes a ``preexec_fn`` safe beside other threads.
    """
    prctl = _load_prctl()
    if prctl is None:
        return None
    parent_pid = os.getpid() if parent_pid is None else parent_pid
    kill = int(signal.SIGKILL)

    def preexec():
        prctl(_PR_SET_PDEATHSIG, kill, 0, 0, 0)
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), kill)

    return preexec


class Watchdog:
    """A process that kills the launcher's process groups if the launcher dies.

    Use :meth:`watch` for each process group started, :meth:`forget` for one
    the launcher has stopped and reaped, and :meth:`close` at a normal end
    (after the launcher stopped everything itself). Where the watchdog cannot
    be started (no ``fork``, out of processes), the launcher goes on without it
    and logs a warning: ``prctl`` still covers its direct children.
    """

    def __init__(self, python=sys.executable):
        self._pipe = None
        self._process = None
        read_end, write_end = os.pipe()
        try:
            # The read end is the watchdog's stdin; os.pipe's descriptors are not
            # inherited, so no other child holds the write end open.
            self._process = subprocess.Popen(
                [python, "-S", os.path.abspath(__file__), str(os.getpid())],
                stdin=read_end, stdout=subprocess.DEVNULL, start_new_session=True)
        except OSError as err:
            os.close(write_end)
            logger.warning("could not start the watchdog that stops the job if the launcher "
                           "is killed (%s); only its direct children are covered", err)
            return
        finally:
            os.close(read_end)
        self._pipe = os.fdopen(write_end, "w", buffering=1)

    @property
    def pid(self):
        """The watchdog's pid, or None when it could not be started."""
        return self._process.pid if self._process is not None else None

    def _send(self, line):
        if self._pipe is None:
            return
        try:
            self._pipe.write(line + "\n")
        except (OSError, ValueError):  # the watchdog died: nothing to tell
            self._pipe = None

    def watch(self, pgid):
        """Kill process group ``pgid`` if the launcher dies."""
        self._send("watch %d" % pgid)

    def forget(self, pgid):
        """Group ``pgid`` is stopped and reaped; its id may be reused."""
        self._send("forget %d" % pgid)

    def close(self):
        """Normal end: the watchdog exits without killing anything."""
        self._send("done")
        if self._pipe is not None:
            try:
                self._pipe.close()
            except OSError:
                pass
            self._pipe = None
        if self._process is not None:
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None


def _watch(stream):
    """The watchdog's loop: read commands until EOF; kill the groups unless told 'done'."""
    groups = set()
    for line in stream:
        command, _, argument = line.strip().partition(" ")
        if command == "watch":
            groups.add(int(argument))
        elif command == "forget":
            groups.discard(int(argument))
        elif command == "done":
            return 0
    for pgid in sorted(groups):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return 0


if __name__ == "__main__":
    # Nothing else may stop the watchdog before the pipe ends: it is in its own
    # session (no terminal signals), and ignores the polite signals.
    for _signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(_signum, signal.SIG_IGN)
    sys.exit(_watch(sys.stdin))
