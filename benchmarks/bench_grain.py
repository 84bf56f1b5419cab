"""Where two threads start to beat one: the grain of the CPU kernels.

Every CPU kernel of the operator library runs serially below two grains of
work (element operations) and on a team of at most work / grain threads above
(csrc/ops/omp_threads.h). This script measures, for each kind of kernel, the
time of one call forced serial and forced onto two threads (the test knob
``gluon_sparse._native._set_parallelism``) at growing amounts of work, inside
MXNet's engine as in training, and prints the ratio; the grain is half the
work at which the parallel call first wins (a team of two needs two grains).

Kernels: ``gluon_sparse_dot`` forward and backward (units = 128, work = nnz x
128), ``gluon_sparse_adam_update`` on a weight of `rows` x 128 (work = rows x 128) and
``gluon_sparse_adam_deferred_update`` on `rows` gradient rows (work = rows x 128).

Run: ``python benchmarks/bench_grain.py [--repeat 200]``
"""
import argparse
import logging
import os
import sys
import time

import mxnet as mx
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.runner import Table  # noqa: E402
from gluon_sparse import _native  # noqa: E402
from gluon_sparse.optimizer import deferred  # noqa: E402

UNITS = 128
WORK = [2 ** k for k in range(12, 22)]  # element operations per call


def _timed(fn, repeat):
    """Fastest of `repeat` calls (each waited for): robust to other jobs preempting this one."""
    for _ in range(5):
        fn()
    mx.nd.waitall()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        mx.nd.waitall()
        times.append(time.perf_counter() - start)
    return float(np.min(times))


def _dot_calls(work, rng):
    nnz = max(1, work // UNITS)
    rows = max(2, nnz // 10)
    per_row = max(1, nnz // rows)
    features = 1_000_000
    ids = np.sort(rng.choice(features, (rows, per_row)), axis=1).ravel()
    x = mx.nd.sparse.csr_matrix((np.ones(ids.size, "f"), ids,
                                 np.arange(0, ids.size + 1, per_row)), shape=(rows, features))
    weight = mx.nd.random.uniform(shape=(features, UNITS))
    head = mx.nd.ones((rows, UNITS))

    def forward():
        mx.nd.gluon_sparse_dot(x, weight)

    def forward_backward():
        w_grad = mx.nd.sparse.zeros("row_sparse", weight.shape)
        mx.autograd.mark_variables([weight], [w_grad])
        with mx.autograd.record():
            out = mx.nd.gluon_sparse_dot(x, weight)
        out.backward(head)
    return {"gluon_sparse_dot forward": forward,
            "gluon_sparse_dot forward+backward": forward_backward}


def _adam_calls(work, rng):
    rows = max(2, work // UNITS)
    w = mx.nd.random.uniform(shape=(rows, UNITS))
    m, v = mx.nd.zeros((rows, UNITS)), mx.nd.zeros((rows, UNITS))
    idx = np.arange(rows, dtype=np.int64)
    grad = mx.nd.sparse.row_sparse_array((rng.standard_normal((rows, UNITS)).astype("f"), idx),
                                         shape=(rows, UNITS))
    big = mx.nd.random.uniform(shape=(max(rows, 4096) * 4, UNITS))
    state = deferred.DeferredAdamState(big, 0.9, 0.999, 1e-8)
    dgrad = mx.nd.sparse.row_sparse_array(
        (rng.standard_normal((rows, UNITS)).astype("f"), idx * 4), shape=big.shape)
    step = [0]

    def eager():
        mx.nd.gluon_sparse_adam_update(w, grad, m, v, out=w, lr=1e-3)

    def deferred_update():
        step[0] += 1
        # Every gradient row is up to date: the update alone is timed.
        state.update(big, dgrad, step[0], 1e-3, 0.0, 1.0, None, catch_up=True)
    return {"gluon_sparse_adam_update (eager)": eager,
            "gluon_sparse_adam_deferred_update": deferred_update}, state


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    _native.load_ops()
    rng = np.random.default_rng(0)
    table = Table("grain", ["kernel", "work (element ops)", "serial us", "2 threads us",
                            "2 threads / serial", "load avg"])
    for work in WORK:
        calls = dict(_dot_calls(work, rng))
        adam_calls, state = _adam_calls(work, rng)
        calls.update(adam_calls)
        for name, fn in calls.items():
            load = open("/proc/loadavg").read().split()[0]
            _native._set_parallelism(1 << 60, 1)
            serial = _timed(fn, args.repeat)
            _native._set_parallelism(1, 2)
            parallel = _timed(fn, args.repeat)
            _native._set_parallelism(0, 0)
            table.add(**{"kernel": name, "work (element ops)": work,
                         "serial us": round(serial * 1e6, 1),
                         "2 threads us": round(parallel * 1e6, 1),
                         "2 threads / serial": round(parallel / serial, 2), "load avg": load})
        mx.nd.waitall()
        state.unbind()
    table.save()


if __name__ == "__main__":
    main()
