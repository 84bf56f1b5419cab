"""A distributed worker that dies of an uncaught exception exits, so its job can end.

At interpreter exit, MXNet's dist kvstore waits in ps-lite's finalize for every
other worker, while they wait in their next push or pull for this one: a worker
that raised would print its traceback and then hang with the whole job, and the
launcher (``gluon-sparse launch``, or any other) never learns that it failed.

So in a process whose ``DMLC_ROLE`` is ``worker``, an uncaught exception arms
``faulthandler``'s watchdog once the traceback is printed: the interpreter
shuts down as usual (``finally`` blocks have run, ``atexit`` handlers run, files
are flushed), and if the process still exists ``GLUON_SPARSE_WORKER_EXIT_GRACE``
seconds later (default 30), the watchdog, a C thread that needs neither the GIL
nor MXNet, prints every thread's stack (where it was stuck) and exits with code
1. A worker that ends normally, or by ``sys.exit``, is left alone: it may wait
at that barrier for slower workers, which is how a job ends.
"""
import faulthandler
import logging
import os
import sys

__all__ = ["install"]

logger = logging.getLogger(__name__)

GRACE_VARIABLE = "GLUON_SPARSE_WORKER_EXIT_GRACE"
_DEFAULT_GRACE = 30.0


def _grace():
    text = os.environ.get(GRACE_VARIABLE)
    try:
        grace = _DEFAULT_GRACE if text is None else float(text)
    except ValueError:
        grace = float("nan")
    if not grace > 0 or grace == float("inf"):
        logger.warning("%s=%r is not a positive number of seconds; using %g", GRACE_VARIABLE,
                       text, _DEFAULT_GRACE)
        grace = _DEFAULT_GRACE
    return grace


def install():
    """Arm the exit watchdog on uncaught exceptions, in a worker process only (idempotent)."""
    if os.environ.get("DMLC_ROLE") != "worker" or getattr(sys.excepthook, "_gluon_sparse", False):
        return
    previous = sys.excepthook
    grace = _grace()

    def excepthook(kind, value, traceback):
        previous(kind, value, traceback)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (AttributeError, OSError, ValueError):
                pass
        faulthandler.dump_traceback_later(grace, exit=True)

    excepthook._gluon_sparse = True
    sys.excepthook = excepthook
