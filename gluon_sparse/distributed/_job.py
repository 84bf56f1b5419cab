"""The running processes of a launched job: start, forward output, stop."""
import logging
import os
import shlex
import signal
import subprocess
import threading
import time

from ._lifeline import Watchdog, die_with_parent

__all__ = ["Job", "StartFailed", "describe_exit", "POLL_INTERVAL"]

logger = logging.getLogger(__name__)

POLL_INTERVAL = 0.05


def describe_exit(returncode):
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "signal %d" % -returncode
        return "was killed by %s" % name, 128 - returncode
    return "exited with code %d" % returncode, returncode


class Job:
    """Running processes, their output forwarders and how to stop them."""

    def __init__(self, processes, output, grace_period):
        self.processes = processes
        self.output = output
        self.grace_period = grace_period
        self.popens = []
        self.readers = []
        self.watchdog = None
        self._write_lock = threading.Lock()

    def start(self):
        """Start every process; call from a thread that lives until :meth:`stop` returns
        (the kernel kills the children when the thread that started them ends)."""
        # If the launcher is killed (even with SIGKILL) its processes die too:
        # prctl covers the direct children, the watchdog their process groups.
        self.watchdog = Watchdog()
        preexec = die_with_parent()
        for proc in self.processes:
            env = dict(os.environ, **proc.env) if proc.host is None else None
            try:
                popen = subprocess.Popen(proc.argv, env=env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         start_new_session=True,  # own group: stop it whole
                                         preexec_fn=preexec)
            except OSError as err:
                raise StartFailed("could not start %s (%s): %s"
                                   % (proc.name, " ".join(proc.argv), err)) from err
            self.watchdog.watch(popen.pid)
            self.popens.append(popen)
            logger.info("started %s (pid %d): %s", proc.name, popen.pid,
                        " ".join(shlex.quote(a) for a in proc.argv))
            reader = threading.Thread(target=self._forward, args=(proc.name, popen.stdout),
                                      name="forward %s" % proc.name, daemon=True)
            reader.start()
            self.readers.append(reader)

    def _forward(self, name, stream):
        prefix = "[%s] " % name
        writable = True
        for raw in iter(stream.readline, b""):
            if not writable:
                continue  # keep draining: a full pipe would block the process
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            with self._write_lock:
                try:
                    self.output.write(prefix + line + "\n")
                    self.output.flush()
                except (OSError, ValueError):  # closed or broken output (e.g. `| head`)
                    writable = False
        stream.close()

    def returncodes(self):
        return [popen.poll() for popen in self.popens]

    def stop(self):
        """Stop every process group: SIGTERM, then SIGKILL after the grace period."""
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_period
        while time.monotonic() < deadline and any(p.poll() is None for p in self.popens):
            time.sleep(POLL_INTERVAL)
        # Also signals groups whose leader has exited, so no grandchild survives.
        self._signal_all(signal.SIGKILL)
        for popen in self.popens:
            popen.wait()
        for reader in self.readers:
            reader.join(timeout=self.grace_period)
        if self.watchdog is not None:
            self.watchdog.close()

    def _signal_all(self, signum):
        for popen in self.popens:
            try:
                os.killpg(popen.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass


class StartFailed(Exception):
    """A process of the job could not be started (e.g. command not found)."""
