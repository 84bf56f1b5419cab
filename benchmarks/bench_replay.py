"""Cost of bringing rows back after an absence under deferred standard Adam.

100 rows of a 100,000 x 128 float32 weight get three gradient steps, then
``gap`` steps without gradient (wd = 0); the table gives the time the
``gluon_sparse_dot`` forward pass that reads them again spends replaying the
missed steps (the first read minus the best of five reads that replay
nothing), the median of ``--repeat`` fresh runs. Run with ``--serial`` to
force the kernels onto one thread (test knob), to see the kernel's own cost
on a machine whose other core is busy. ``--builds baseline,avx2`` times both
builds of the replay's SIMD kernels (host_simd.h) in the same run, gap by
gap, alternating (default: the one the CPU picks).

Run: ``python benchmarks/bench_replay.py [--gaps 20,100,300,1000,3000] [--serial] [--repeat 5]
[--builds baseline,avx2]``
"""
import argparse
import math
import os
import sys
import time

import mxnet as mx
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.runner import Table  # noqa: E402
from gluon_sparse import _native  # noqa: E402
from gluon_sparse.optimizer import deferred  # noqa: E402

ROWS, COLS = 100_000, 128
READ = np.arange(0, 10_000, 100, dtype=np.int64)  # the 100 rows that come back


def replay_seconds(gap):
    w = mx.nd.random.uniform(-0.01, 0.01, shape=(ROWS, COLS))
    state = deferred.DeferredAdamState(w, 0.9, 0.999, 1e-8)
    rng = np.random.default_rng(0)
    empty = mx.nd.sparse.row_sparse_array((np.zeros((0, COLS), "f"), np.zeros(0, np.int64)),
                                          shape=(ROWS, COLS))
    grad = mx.nd.sparse.row_sparse_array(
        (rng.standard_normal((len(READ), COLS)).astype("f"), READ), shape=(ROWS, COLS))
    x = mx.nd.sparse.csr_matrix((np.ones(len(READ), "f"), READ, np.arange(len(READ) + 1)),
                                shape=(len(READ), ROWS))
    for t in range(1, gap + 4):
        lr = 1e-3 * math.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
        if t <= 3:
            mx.nd.gluon_sparse_dot(x, w)
        state.update(w, grad if t <= 3 else empty, t, lr, 0.0, 1.0, None)
    mx.nd.gluon_sparse_dot(x[:1], w).wait_to_read()  # engine and op warm, one row refreshed
    start = time.perf_counter()
    mx.nd.gluon_sparse_dot(x, w).wait_to_read()
    first = time.perf_counter() - start
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        mx.nd.gluon_sparse_dot(x, w).wait_to_read()
        best = min(best, time.perf_counter() - start)
    mx.nd.waitall()
    state.unbind()
    return first - best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gaps", default="20,100,300,1000,3000")
    parser.add_argument("--serial", action="store_true")
    parser.add_argument("--repeat", type=int, default=5, help="fresh runs a gap (median)")
    parser.add_argument("--builds", default="auto",
                        help="comma-separated: auto (the CPU's pick), baseline, avx2")
    args = parser.parse_args(argv)
    paths = {"auto": -1, "baseline": 0, "avx2": 1}
    builds = args.builds.split(",")
    unknown = [b for b in builds if b not in paths]
    if unknown:
        parser.error("unknown build(s) %s; choose from %s" % (unknown, sorted(paths)))
    _native.load_ops()
    if args.serial:
        _native._set_parallelism(1 << 60, 1)
    table = Table("replay", ["steps away", "build", "replay of 100 rows", "ns per element-step",
                             "threads", "load avg"])
    for gap in (int(g) for g in args.gaps.split(",")):
        load = open("/proc/loadavg").read().split()[0]
        runs = {build: [] for build in builds}
        for _ in range(args.repeat):  # builds alternate, so drifts of the machine hit both
            for build in builds:
                _native._force_simd_path(paths[build])
                runs[build].append(replay_seconds(gap))
        _native._force_simd_path(-1)
        for build in builds:
            seconds = float(np.median(runs[build]))
            table.add(**{"steps away": gap, "build": build,
                         "replay of 100 rows": "%.2f ms" % (seconds * 1e3),
                         "ns per element-step": round(seconds / (len(READ) * COLS * gap) * 1e9,
                                                      2),
                         "threads": "1 (forced)" if args.serial else "default",
                         "load avg": load})
    table.save()


if __name__ == "__main__":
    main()
