"""Entry point of the scheduler and server processes of a ``dist_*`` kvstore.

``python .../gluon_sparse/distributed/server.py`` (what :mod:`.launcher` runs
for the scheduler and the servers; run by path, not with ``-m``, which would
import the ``gluon_sparse`` package, and so MXNet, before this file could act)
differs from running the workers' script on them, which is MXNet's usual way,
in two respects:

* gluon-sparse is imported *before* the server starts serving. MXNet starts a
  server inside ``import mxnet`` when ``DMLC_ROLE`` is ``server``, so nothing a
  script does after that import runs on a server. Here the operator library is
  loaded and gluon-sparse's optimizers are registered first, so an optimizer
  that the workers send with ``update_on_kvstore`` (pickled, e.g. SparseAdam)
  can be unpickled and run.
* a command that fails on the server (an optimizer that cannot be unpickled)
  ends the process with exit code 1. MXNet only prints such errors from its
  callback and goes on serving *without* an optimizer, which silently turns
  every push into an assignment of the summed gradients to the weights.
"""
import logging
import os
import sys

logger = logging.getLogger(__name__)

SERVER_ROLES = ("server", "scheduler")


def _import_without_serving(role):
    """Import MXNet and gluon-sparse while MXNet believes this is a worker."""
    # mxnet/__init__.py starts serving when DMLC_ROLE is not 'worker'; ps-lite
    # reads the variable with getenv each time, so restoring it afterwards is enough.
    os.environ["DMLC_ROLE"] = "worker"
    try:
        import mxnet  # noqa: F401
        import gluon_sparse  # noqa: F401
        import gluon_sparse.optimizer  # noqa: F401 - registers SparseAdam & co.
        from gluon_sparse import _native
        _native.load_ops()
    finally:
        os.environ["DMLC_ROLE"] = role


def _fail_fast_server(kvstore):
    """An MXNet KVStoreServer whose failed commands end the process."""
    from mxnet.kvstore.kvstore_server import KVStoreServer

    class FailFastServer(KVStoreServer):
        def _controller(self):
            handle = super()._controller()

            def controller(cmd_id, cmd_body, extra):
                try:
                    handle(cmd_id, cmd_body, extra)
                except BaseException:  # noqa: B902 - anything here leaves the server unusable
                    logger.exception("kvstore server %d failed to apply command %d from the "
                                     "workers (command 0 is the pickled optimizer: its class "
                                     "must be importable here, from a module rather than the "
                                     "training script); exiting", self.kvstore.rank, cmd_id)
                    sys.stderr.flush()
                    # Raising would be swallowed by the ctypes callback: leave at once
                    # so the launcher sees the failure and stops the job.
                    os._exit(1)
            return controller

    return FailFastServer(kvstore)


def main():
    """Serve until the workers finish; return the exit code."""
    role = os.environ.get("DMLC_ROLE")
    if role not in SERVER_ROLES:
        logger.error("gluon_sparse.distributed.server runs a kvstore scheduler or server: "
                     "DMLC_ROLE must be one of %s, got %r", SERVER_ROLES, role)
        return 2
    _import_without_serving(role)
    import mxnet as mx
    logger.debug("%s starting (pid %d)", role, os.getpid())
    _fail_fast_server(mx.kv.create("dist")).run()
    return 0


if __name__ == "__main__":
    # Run as a script, this directory heads sys.path; its modules must not
    # shadow top-level ones. The working directory (the launcher's) takes its
    # place, as with `python -m`, so optimizers defined in modules there unpickle.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path[0] = os.getcwd()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    sys.exit(main())
