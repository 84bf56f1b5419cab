"""Start a ``dist_sync`` / ``dist_async`` training job: scheduler, servers and workers.

``gluon-sparse launch -n 2 -s 1 -- python train.py ...`` runs, by default on
this machine and on the loopback interface only:

* one **scheduler** and ``-s`` **servers**, as
  ``python .../gluon_sparse/distributed/server.py`` (see :mod:`.server`: it
  loads the operator library and gluon-sparse's optimizers before serving);
* ``-n`` **workers** running the command.

Every process gets the ``DMLC_*`` environment MXNet's parameter server reads
(``DMLC_ROLE``, ``DMLC_PS_ROOT_URI``, ``DMLC_PS_ROOT_PORT``,
``DMLC_NUM_SERVER``, ``DMLC_NUM_WORKER``, ``DMLC_NODE_HOST``, plus
``DMLC_WORKER_ID`` / ``DMLC_SERVER_ID``, the launcher's numbering). The
kvstore assigns its own ``kv.rank``, which need not equal ``DMLC_WORKER_ID``:
shard data by ``kv.rank``. Local processes also get ``OMP_NUM_THREADS`` (when
it is not set): the cores shared among workers and servers, 1 for servers.

Output of each process is forwarded line by line with a prefix
(``[worker 0] ...``). When a process fails, the launcher names it in one line,
stops all the others (``SIGTERM`` to each process group, ``SIGKILL`` after a
grace period) and exits with the failed process's code (``128 + signal`` for a
signal). It exits 0 once every worker has exited 0, and ``124`` when
``--timeout`` expires. If the launcher itself is killed, even with SIGKILL,
its processes die with it (see ``gluon_sparse/distributed/_lifeline.py``).

With ``--hosts FILE`` the processes are started with ``ssh`` instead: the
scheduler on the first host, servers and workers round robin over all hosts,
each in the launcher's working directory and with the launcher's Python
(``sys.executable``) for the servers, so hosts need the same paths (a shared
file system or an identical image). Stopping an ssh process closes its
connection; a remote command that ignores the hang-up may outlive it.
"""
import argparse
import logging
import os
import signal
import socket
import sys
import threading
import time

from ..cli._arguments import non_negative_float, positive
from ._hosts import host_address, read_hosts, ssh_command
from ._job import POLL_INTERVAL, Job, StartFailed, describe_exit

logger = logging.getLogger(__name__)

# read_hosts and ssh_command live in ._hosts; they stay importable from here.
__all__ = ["Process", "add_arguments", "build_processes", "main", "read_hosts", "run",
           "ssh_command"]

LOOPBACK = "127.0.0.1"
SERVER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "server.py")
TIMEOUT_EXIT_CODE = 124
DEFAULT_GRACE_PERIOD = 5.0


class Process:
    """One process of a job: its name, how to start it and where.

    Parameters
    ----------
    role : {'scheduler', 'server', 'worker'}
        The ``DMLC_ROLE``.
    index : int
        Number among the processes of that role (0 for the scheduler).
    argv : list of str
        Command line, run as is (already wrapped in ``ssh`` for a remote host).
    env : dict of str to str
        Variables added to the launcher's environment (local processes) or
        already part of ``argv`` (remote processes).
    host : str or None
        Remote host, or ``None`` for a local process.
    """

    def __init__(self, role, index, argv, env, host=None):
        self.role = role
        self.index = index
        self.argv = list(argv)
        self.env = dict(env)
        self.host = host

    @property
    def name(self):
        """``'scheduler'``, ``'server 0'``, ``'worker 1'``, ...: the output prefix."""
        return self.role if self.role == "scheduler" else "%s %d" % (self.role, self.index)

    def __repr__(self):
        return "Process(%s, host=%s, argv=%s)" % (self.name, self.host, self.argv)


def add_arguments(parser):
    """Add the launcher's options to an :class:`argparse.ArgumentParser`.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        Parser (or sub-command parser) to extend with ``-n/--num-workers``,
        ``-s/--num-servers``, ``--hosts``, ``--timeout``, ``--port``,
        ``--grace-period`` and the trailing ``command``.

    Returns
    -------
    argparse.ArgumentParser
        The same parser.
    """
    parser.add_argument("-n", "--num-workers", type=int, required=True,
                        help="number of worker processes running COMMAND")
    parser.add_argument("-s", "--num-servers", type=int, default=1,
                        help="number of kvstore server processes (default: 1)")
    parser.add_argument("--hosts", metavar="FILE",
                        help="file with one ssh host per line ([user@]host[:port]); without it "
                             "every process runs on this machine on 127.0.0.1")
    parser.add_argument("--timeout", type=positive(float), default=None, metavar="SECONDS",
                        help="stop the whole job and exit %d after this many seconds "
                             "(default: no limit)" % TIMEOUT_EXIT_CODE)
    parser.add_argument("--port", type=int, default=0,
                        help="scheduler port (default: a port free on this machine; with "
                             "--hosts it is only checked here, so pick one the first host has "
                             "free)")
    parser.add_argument("--grace-period", type=non_negative_float, default=DEFAULT_GRACE_PERIOD,
                        metavar="SECONDS",
                        help="time between SIGTERM and SIGKILL when stopping processes, and "
                             "that servers get to exit after the workers (default: %g)"
                             % DEFAULT_GRACE_PERIOD)
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="worker command, after '--' (e.g. -- python train.py --epochs 2)")
    return parser


def free_port(host=LOOPBACK):
    """A TCP port that is free on ``host`` now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _check_port_free(port, host=LOOPBACK):
    """Raise OSError naming ``port`` when the scheduler could not bind it (ps-lite's own
    message does not name it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            raise OSError("--port %d: the scheduler cannot listen there (%s); pick another "
                          "port or leave --port out" % (port, err.strerror or err)) from None


def build_processes(num_workers, num_servers, command, port, hosts=None, cwd=None,
                    python=sys.executable):
    """Describe every process of a job, scheduler first, then servers, then workers.

    Parameters
    ----------
    num_workers, num_servers : int
        Process counts (at least 1 each: MXNet's dist kvstore needs a server).
    command : list of str
        Worker command.
    port : int
        Scheduler port.
    hosts : list of str, optional
        ssh hosts; ``None`` runs everything locally on 127.0.0.1.
    cwd : str, optional
        Working directory for remote processes (default: the current one).
    python : str
        Interpreter running the scheduler and the servers.

    Returns
    -------
    list of Process
    """
    if num_workers < 1:
        raise ValueError("--num-workers must be at least 1, got %d" % num_workers)
    if num_servers < 1:
        raise ValueError("--num-servers must be at least 1 (MXNet's dist kvstore keeps the "
                         "weights on servers), got %d" % num_servers)
    if not command:
        raise ValueError("no worker command given: put it after '--', e.g. "
                         "gluon-sparse launch -n 2 -- python train.py")
    if not 0 < port < 65536:
        raise ValueError("scheduler port must be in 1..65535, got %d" % port)
    common = {"DMLC_PS_ROOT_URI": host_address(hosts[0]) if hosts else LOOPBACK,
              "DMLC_PS_ROOT_PORT": str(port),
              "DMLC_NUM_SERVER": str(num_servers),
              "DMLC_NUM_WORKER": str(num_workers),
              "PYTHONUNBUFFERED": "1"}
    if not hosts:
        # ps-lite otherwise binds to the first non-loopback interface.
        common["DMLC_NODE_HOST"] = LOOPBACK
        # Every process would start one OpenMP thread per core and oversubscribe
        # the machine; spinning OpenMP threads then starve the server (measured:
        # 1 worker + 1 server on 2 cores ran 15x slower with 2 threads than with 1).
        if "OMP_NUM_THREADS" not in os.environ:
            common["OMP_NUM_THREADS"] = str(
                max(1, (os.cpu_count() or 1) // (num_workers + num_servers)))
    server_command = [python, SERVER_SCRIPT]
    layout = [("scheduler", 0, server_command, {})]
    layout += [("server", i, server_command, {"DMLC_SERVER_ID": str(i)})
               for i in range(num_servers)]
    layout += [("worker", i, list(command), {"DMLC_WORKER_ID": str(i)})
               for i in range(num_workers)]
    processes = []
    for role, index, argv, extra in layout:
        env = dict(common, DMLC_ROLE=role, **extra)
        if role != "worker" and not hosts:
            env["OMP_NUM_THREADS"] = "1"  # servers only add up rows
        host = None
        if hosts:
            host = hosts[0] if role == "scheduler" else hosts[index % len(hosts)]
            argv = ssh_command(host, env, argv, cwd or os.getcwd())
        processes.append(Process(role, index, argv, env, host))
    return processes


def _supervise(job, timeout, grace_period):
    """Wait for the job's end; return the launcher's exit code."""
    start = time.monotonic()
    workers = [i for i, proc in enumerate(job.processes) if proc.role == "worker"]
    workers_done_at = first_worker_done_at = None
    warned_early_exit = False
    while True:
        codes = job.returncodes()
        for proc, popen, code in zip(job.processes, job.popens, codes):
            if code is not None and code != 0:
                what, exit_code = describe_exit(code)
                others = sum(1 for c in codes if c is None)
                logger.error("%s (pid %d) %s; stopping the other %d running process(es)",
                             proc.name, popen.pid, what, others)
                return exit_code
        if all(code == 0 for code in codes):
            return 0
        now = time.monotonic()
        finished = [job.processes[i].name for i in workers if codes[i] == 0]
        if finished and len(finished) < len(workers):
            # Workers of a dist_* job leave together (ps-lite's finalize is a barrier).
            # One that left long before the others never joined the kvstore, or left
            # it early, and the rest wait for it in their next push or pull.
            first_worker_done_at = first_worker_done_at or now
            if now - first_worker_done_at > grace_period and not warned_early_exit:
                logger.warning("%s finished %g s ago while other workers still run; if they "
                               "wait for it in the kvstore, the job hangs (--timeout ends it)",
                               ", ".join(finished), grace_period)
                warned_early_exit = True
        if all(codes[i] == 0 for i in workers):
            # Servers and the scheduler exit by themselves once every worker
            # has shut its kvstore down; do not wait for them forever.
            workers_done_at = workers_done_at or now
            if now - workers_done_at > grace_period:
                left = [p.name for p, c in zip(job.processes, codes) if c is None]
                logger.warning("all workers finished but %s did not exit within %g s; "
                               "stopping them (they exit once every worker has created a "
                               "dist_* kvstore and shut it down: did a worker train with "
                               "another kvstore?)", ", ".join(left), grace_period)
                return 0
        if timeout is not None and now - start > timeout:
            left = [p.name for p, c in zip(job.processes, codes) if c is None]
            logger.error("timed out after %g s with %s still running; stopping the job",
                         timeout, ", ".join(left))
            return TIMEOUT_EXIT_CODE
        time.sleep(POLL_INTERVAL)


class _Interrupted(Exception):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _raise_interrupted(signum, frame):
    raise _Interrupted(signum)


def run(args, output=None):
    """Run a job described by parsed :func:`add_arguments` options.

    Parameters
    ----------
    args : argparse.Namespace
        ``num_workers``, ``num_servers``, ``hosts``, ``timeout``, ``command`` and
        optionally ``port`` and ``grace_period``.
    output : file-like, optional
        Where the prefixed output of the processes goes (default: ``sys.stdout``).

    Returns
    -------
    int
        0 when every worker succeeded; the first failed process's exit code
        (``128 + signal`` if it was killed); 124 on timeout; 127 when a process
        cannot be started; ``128 + signal`` when the launcher itself receives
        SIGTERM or SIGHUP (130 for Ctrl-C); 2 for bad arguments.
    """
    output = output if output is not None else sys.stdout
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    grace_period = getattr(args, "grace_period", DEFAULT_GRACE_PERIOD)
    try:
        hosts = read_hosts(args.hosts) if args.hosts else None
        port = getattr(args, "port", 0) or free_port()
        # Described first: build_processes checks the port's range, which bind() would
        # meet with an OverflowError.
        processes = build_processes(args.num_workers, args.num_servers, command, port, hosts)
        if not hosts:
            _check_port_free(port)
    except (OSError, ValueError) as err:
        logger.error("%s", err)
        return 2
    job = Job(processes, output, grace_period)
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            handlers[signum] = signal.signal(signum, _raise_interrupted)
    try:
        job.start()
        return _supervise(job, args.timeout, grace_period)
    except StartFailed as err:
        logger.error("%s; stopping the job", err)
        return 127
    except _Interrupted as stop:
        logger.error("received %s; stopping the job", signal.Signals(stop.signum).name)
        return 128 + stop.signum
    except KeyboardInterrupt:
        logger.error("interrupted; stopping the job")
        return 130
    finally:
        # A second SIGTERM must not cut the clean-up short and leave processes behind.
        for signum in handlers:
            signal.signal(signum, signal.SIG_IGN)
        job.stop()
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def main(argv=None):
    """Command-line entry point: ``python -m gluon_sparse.distributed.launcher -n 2 -- CMD``.

    Parameters
    ----------
    argv : list of str, optional
        Arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        Exit code, see :func:`run`.
    """
    parser = add_arguments(argparse.ArgumentParser(
        prog="gluon-sparse launch",
        description="Start a scheduler, servers and workers for MXNet's dist kvstore."))
    args = parser.parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="gluon-sparse launch: %(message)s")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
