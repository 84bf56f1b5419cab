"""LibSVM loading and prefetching (issue 3).

1. One pass over a generated LibSVM file (>= 200 MB, 10^6 features, ~10
   non-zeros a row) into CSR batches of 256, side by side with
   ``mx.io.LibSVMIter`` and ``sklearn.datasets.load_svmlight_file``: MB/s and
   the ratio to LibSVMIter.
2. Prefetching: a training loop whose step costs about as much as building a
   batch; the time the loop waits for data with ``prefetch=2`` against
   ``prefetch=0``.

Usage: ``python benchmarks/bench_data.py [--megabytes 220] [--path /tmp/...]``.
The file is generated once into /tmp (never the repository) and reused. Each
table records the load average (``os.getloadavg``) before and after it, since
the figures are only comparable within one run on a shared machine.
"""
import argparse
import logging
import os
import sys
import time

import mxnet as mx
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runner import Table, format_seconds  # noqa: E402

from gluon_sparse.data import CSRDataset, LibSVMStream, SparseDataLoader, load_libsvm  # noqa: E402

NUM_FEATURES = 10 ** 6
BATCH_SIZE = 256


def generate(path, megabytes, seed=0):
    """Write zero-based LibSVM rows (sorted indices, as LibSVMIter requires) until ``megabytes``."""
    target = megabytes * 10 ** 6
    if os.path.exists(path) and os.path.getsize(path) >= target:
        return
    rng = np.random.default_rng(seed)
    rows_per_block = 50000
    written = 0
    with open(path + ".tmp", "w") as f:
        while written < target:
            nnz = rng.integers(5, 16, size=rows_per_block)
            labels = rng.integers(0, 2, size=rows_per_block)
            lines = []
            for count, label in zip(nnz, labels):
                idx = np.unique(rng.integers(0, NUM_FEATURES, size=count))
                vals = rng.random(len(idx))
                lines.append("%d %s\n" % (label, " ".join(
                    "%d:%.6f" % pair for pair in zip(idx.tolist(), vals.tolist()))))
            block = "".join(lines)
            f.write(block)
            written += len(block)
    os.rename(path + ".tmp", path)


def warm_page_cache(path):
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def one_pass_libsvmiter(path):
    it = mx.io.LibSVMIter(data_libsvm=path, data_shape=(NUM_FEATURES,), batch_size=BATCH_SIZE)
    batches = 0
    for batch in it:
        batch.data[0].wait_to_read()
        batches += 1
    return batches


def one_pass_loader(path, prefetch):
    X, y = load_libsvm(path, num_features=NUM_FEATURES, zero_based=True)
    batches = 0
    for data, label in SparseDataLoader(CSRDataset(X, y), batch_size=BATCH_SIZE, prefetch=prefetch):
        data.wait_to_read()
        batches += 1
    return batches


def one_pass_stream(path):
    batches = 0
    for data, label in LibSVMStream(path, BATCH_SIZE, NUM_FEATURES, zero_based=True):
        data.wait_to_read()
        batches += 1
    return batches


def bench_loading(path, skip_sklearn, repeat):
    megabytes = os.path.getsize(path) / 1e6
    table = Table("data_loading", ["method", "seconds", "MB/s", "vs LibSVMIter", "batches"])
    warm_page_cache(path)
    runs = [("mx.io.LibSVMIter (batches of 256)", lambda: one_pass_libsvmiter(path)),
            ("gluon_sparse load_libsvm (parse only)",
             lambda: load_libsvm(path, num_features=NUM_FEATURES, zero_based=True)[0].shape[0]),
            ("gluon_sparse load_libsvm + SparseDataLoader, prefetch=0",
             lambda: one_pass_loader(path, 0)),
            ("gluon_sparse load_libsvm + SparseDataLoader, prefetch=2",
             lambda: one_pass_loader(path, 2)),
            ("gluon_sparse LibSVMStream (16 MB chunks, prefetch=2)", lambda: one_pass_stream(path))]
    load_before = os.getloadavg()
    if not skip_sklearn:
        from sklearn.datasets import load_svmlight_file
        runs.append(("sklearn load_svmlight_file (parse only)",
                     lambda: load_svmlight_file(path, n_features=NUM_FEATURES, zero_based=True,
                                                dtype=np.float32)[0].shape[0]))
    baseline = None
    for name, fn in runs:
        # Best of `repeat` passes: other processes share the machine.
        seconds, count = min(timed(fn) for _ in range(repeat))
        baseline = baseline or seconds
        table.add(method=name, seconds=round(seconds, 2), **{"MB/s": round(megabytes / seconds, 1),
                  "vs LibSVMIter": round(baseline / seconds, 2), "batches": count})
    table.meta.update(file_mb=round(megabytes, 1), repeat=repeat,
                      load_average_before=load_before, load_average_after=os.getloadavg())
    table.save()


def measure_waits(loader, step, steps):
    """Run ``steps`` training steps over ``loader``.

    Returns (total seconds, seconds spent waiting in next(), per-step waits).
    """
    waits = []
    start = time.perf_counter()
    batches = iter(loader)
    while len(waits) < steps:
        t0 = time.perf_counter()
        batch = next(batches, None)
        waited = time.perf_counter() - t0
        if batch is None:  # next epoch
            batches = iter(loader)
            continue
        waits.append(waited)
        step(batch)
    return time.perf_counter() - start, float(np.sum(waits)), np.array(waits)


def bench_prefetch(path, max_rows=200000, steps=2000):
    X, y = load_libsvm(path, num_features=NUM_FEATURES, zero_based=True)
    dataset = CSRDataset(X[:max_rows], y[:max_rows])

    def loader(prefetch):
        return SparseDataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True, seed=0,
                                prefetch=prefetch)

    # Cost of loading one shuffled batch (rows gathered, not a range), as a
    # loop over the loader sees it: the mean over 500 batches (or the epoch's,
    # if it has fewer), not the best case of one, since MXNet's engine threads
    # wake up between batches.
    count = min(500, len(loader(0)))
    it = iter(loader(0))
    build = timed(lambda: [next(it) for _ in range(count)])[0] / count

    # Step 1, device-bound: the host waits for an accelerator (emulated by a
    # sleep of the batch cost), as when training on a GPU.
    def device_step(batch):
        time.sleep(build)

    # Step 2, CPU-bound: MXNet computes on this machine's two cores, which the
    # batch-building thread then has to share (CPU and GIL).
    weight = mx.nd.random.uniform(shape=(NUM_FEATURES, 16))
    probe = next(iter(loader(0)))
    size = 32
    while True:
        a = mx.nd.random.uniform(shape=(size, size))

        def cpu_step(batch, a=a):
            (mx.nd.sparse.dot(batch[0], weight).sum() + mx.nd.dot(a, a).sum()).wait_to_read()
        cost = float(np.median([timed(lambda: cpu_step(probe))[0] for _ in range(30)]))
        if cost >= build or size > 4096:
            break
        size = int(size * 1.2)

    table = Table("data_prefetch", ["step", "step cost", "prefetch", "steps", "total",
                                    "waiting for data", "wait vs prefetch=0", "median wait",
                                    "steps waiting > 50 us", "longest wait"])
    load_before = os.getloadavg()
    for name, step, step_cost in (("device-bound (sleep)", device_step, build),
                                  ("CPU-bound (MXNet dot)", cpu_step, cost)):
        waits = {}
        for prefetch in (0, 2):
            total, waited, per_step = measure_waits(loader(prefetch), step, steps)
            waits[prefetch] = waited
            table.add(step=name, prefetch=prefetch, steps=steps, total=format_seconds(total),
                      **{"step cost": format_seconds(step_cost),
                         "waiting for data": format_seconds(waited),
                         "wait vs prefetch=0": round(waited / waits[0], 3),
                         "median wait": format_seconds(float(np.median(per_step))),
                         "steps waiting > 50 us": "%.1f%%" % (100 * np.mean(per_step > 50e-6)),
                         "longest wait": format_seconds(float(per_step.max()))})
    table.meta.update(batch_build_s=build, cpu_step_s=cost, load_average_before=load_before,
                      load_average_after=os.getloadavg())
    print("\nbuilding one batch of %d: %s" % (BATCH_SIZE, format_seconds(build)))
    table.save()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megabytes", type=int, default=220)
    parser.add_argument("--path", default="/tmp/gluon_sparse_bench_1m_features.libsvm")
    parser.add_argument("--skip-sklearn", action="store_true")
    parser.add_argument("--repeat", type=int, default=2, help="passes per loader (best is kept)")
    parser.add_argument("--steps", type=int, default=2000, help="training steps per prefetch run")
    parser.add_argument("--skip-prefetch", action="store_true",
                        help="only the loading table (parser throughput)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    start = time.perf_counter()
    generate(args.path, args.megabytes)
    print("file %s: %.1f MB (generated/checked in %.0f s)"
          % (args.path, os.path.getsize(args.path) / 1e6, time.perf_counter() - start))
    bench_loading(args.path, args.skip_sklearn, args.repeat)
    if not args.skip_prefetch:
        bench_prefetch(args.path, steps=args.steps)


if __name__ == "__main__":
    main()
