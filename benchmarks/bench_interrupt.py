"""Ctrl-C latency during training: how long after SIGINT the training loop
raises KeyboardInterrupt, how long until the process is gone, and how far
training got.

A child process (this script with ``--child``) trains a FullyConnectedSparse
layer of ``--rows`` x ``--units`` (10^6 x 64) with deferred SparseAdam (weight
decay 1e-4, so every step records a history entry) on 32 CSR batches built
ahead of time, as a prefetching loader leaves them, and never synchronises
inside the loop: Python only queues work, the engine runs behind it. That is
the worst case for an engine wait the main thread cannot leave (Python runs a
signal handler only between bytecodes, never inside ``mx.nd.waitall()``). The
history starts at ``--initial-history`` (8) records, so it doubles at steps 8,
16, 32, ... during the run, the path that used to drain the engine.

The child prints ``ready`` once its batches exist; the parent waits a random
delay in [1, 6] s, sends SIGINT and measures

- to KeyboardInterrupt: the child's handler prints ``time.time()`` when the
  exception reaches it, minus the parent's wall clock when it sent the signal;
- process gone: monotonic time from the signal until the child has exited;
- steps: training steps finished before the interrupt, and the innermost
  frame the exception was raised in (``waitall`` means it waited there).

The child is started with SIGINT reset to SIG_DFL (``preexec_fn``): a job
started in the background of a shell inherits SIGINT ignored and would never
see the signal. ``--src`` puts another checkout first on the child's
PYTHONPATH, so two trees can be measured side by side with the same script.

Run: ``flock /tmp/bench.lock python benchmarks/bench_interrupt.py [--runs 5] [--src PATH]
[--quick]``
"""
import argparse
import logging
import os
import random
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BATCHES = 32
BATCH_SIZE = 512
NNZ_PER_ROW = 20
EXIT_TIMEOUT = 60.0  # seconds after SIGINT before the child counts as hung and is killed


def child(rows, units, initial_history):
    """Train until SIGINT; print where the KeyboardInterrupt was raised.

    Imports gluon_sparse from the PYTHONPATH the parent set (``--src``), not
    from this checkout.
    """
    import traceback

    import mxnet as mx
    import numpy as np
    from mxnet import autograd, gluon

    import gluon_sparse
    from gluon_sparse.nn import FullyConnectedSparse
    from gluon_sparse.optimizer import SparseAdam, deferred

    # A small first history makes it grow (doubling) several times within the run.
    deferred._INITIAL_HISTORY = initial_history
    net = FullyConnectedSparse(units, in_units=rows)
    net.initialize()
    trainer = gluon.Trainer(net.collect_params(),
                            SparseAdam(learning_rate=0.01, wd=1e-4, deferred=True))
    rng = np.random.default_rng(0)
    nnz = BATCH_SIZE * NNZ_PER_ROW
    indptr = np.arange(0, nnz + 1, NNZ_PER_ROW)
    batches = [mx.nd.sparse.csr_matrix(
        (np.ones(nnz, np.float32), rng.integers(0, rows, nnz).astype(np.int64), indptr),
        shape=(BATCH_SIZE, rows)) for _ in range(BATCHES)]
    mx.nd.waitall()
    step = 0
    try:
        print("ready %s" % os.path.dirname(gluon_sparse.__file__), flush=True)
        while True:  # no per-step sync: the loop only queues work
            x = batches[step % BATCHES]
            with autograd.record():
                loss = (net(x) ** 2).mean()
            loss.backward()
            trainer.step(BATCH_SIZE)
            step += 1
    except KeyboardInterrupt:
        raised = time.time()
        frame = traceback.extract_tb(sys.exc_info()[2])[-1]
        print("%.6f %d %s:%d %s" % (raised, step, os.path.basename(frame.filename),
                                    frame.lineno, frame.name), flush=True)
        raise


def _reset_sigint():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def measure_once(src, rows, units, initial_history, delay):
    """Start a child on ``src``, interrupt it after ``delay`` s; return its figures."""
    env = dict(os.environ, PYTHONPATH=src)
    command = [sys.executable, os.path.abspath(__file__), "--child", "--rows", str(rows),
               "--units", str(units), "--initial-history", str(initial_history)]
    proc = subprocess.Popen(command, env=env, preexec_fn=_reset_sigint, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ready = proc.stdout.readline().split()
    if not ready or ready[0] != "ready":
        proc.kill()
        _, err = proc.communicate()
        raise RuntimeError("training child did not start (rc %s):\n%s" % (proc.returncode, err))
    time.sleep(delay)
    sent_wall, sent = time.time(), time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=EXIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        logging.warning("no exit within %.0f s of SIGINT: killed", EXIT_TIMEOUT)
        return {"package": ready[1], "delay": delay, "to_interrupt": float("inf"),
                "gone": float("inf"), "steps": None, "where": "hung (killed)", "rc": None}
    gone = time.monotonic() - sent
    lines = out.strip().splitlines()  # "ready" was read already
    if not lines:
        raise RuntimeError("child exited (rc %s) without reporting the interrupt:\n%s"
                           % (proc.returncode, err))
    raised, steps, where = lines[-1].split(None, 2)
    return {"package": ready[1], "delay": delay, "to_interrupt": float(raised) - sent_wall,
            "gone": gone, "steps": int(steps), "where": where, "rc": proc.returncode}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--src", default=REPO,
                        help="checkout whose gluon_sparse the child imports (default: this one)")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--units", type=int, default=64)
    parser.add_argument("--initial-history", type=int, default=8,
                        help="first history capacity of deferred Adam (it doubles when full)")
    parser.add_argument("--min-delay", type=float, default=1.0)
    parser.add_argument("--max-delay", type=float, default=6.0)
    parser.add_argument("--seed", type=int, default=None, help="seed of the random delays")
    parser.add_argument("--quick", action="store_true",
                        help="2 runs of 10^5 rows, delays in [1, 2] s (a smoke test)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.rows, args.units, args.initial_history)
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.quick:
        args.runs, args.rows, args.max_delay = 2, 100_000, 2.0

    sys.path.insert(0, REPO)
    from benchmarks.runner import Table

    src = os.path.abspath(args.src)
    rng = random.Random(args.seed)
    table = Table("interrupt", ["run", "delay", "to KeyboardInterrupt", "process gone",
                                "steps", "raised in"])
    table.meta.update(src=src, rows=args.rows, units=args.units,
                      initial_history=args.initial_history, loadavg_before=_loadavg())
    results = []
    for run in range(1, args.runs + 1):
        delay = rng.uniform(args.min_delay, args.max_delay)
        result = measure_once(src, args.rows, args.units, args.initial_history, delay)
        if run == 1:
            logging.info("gluon_sparse imported from %s", result["package"])
        results.append(result)
        table.add(**{"run": run, "delay": "%.2f s" % delay,
                     "to KeyboardInterrupt": "%.3f s" % result["to_interrupt"],
                     "process gone": "%.2f s" % result["gone"],
                     "steps": result["steps"], "raised in": result["where"]})
    table.meta["loadavg_after"] = _loadavg()
    latency = sorted(r["to_interrupt"] for r in results)
    gone = sorted(r["gone"] for r in results)
    in_wait = sum("wait" in r["where"].split()[-1] for r in results)
    summary = {"to_interrupt_median": latency[len(latency) // 2], "to_interrupt_max": latency[-1],
               "gone_median": gone[len(gone) // 2], "gone_max": gone[-1],
               "runs_interrupted_in_a_wait": in_wait}
    table.meta["summary"] = summary
    table.save()
    print("\nsrc %s, load average %s -> %s" % (src, table.meta["loadavg_before"],
                                               table.meta["loadavg_after"]))
    print("KeyboardInterrupt after SIGINT: median %.3f s, max %.3f s over %d runs "
          "(%d raised inside an engine wait)"
          % (summary["to_interrupt_median"], summary["to_interrupt_max"], len(results), in_wait))
    print("process gone after SIGINT: median %.2f s, max %.2f s" % (summary["gone_median"],
                                                                    summary["gone_max"]))


def _loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "n/a"


if __name__ == "__main__":
    main()
