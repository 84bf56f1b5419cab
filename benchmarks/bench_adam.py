"""Standard Adam on a row_sparse gradient: gluon-sparse's operator vs MXNet's.

Part 1 times one update of a 1,000,000 x 128 float32 weight (with mean and
var) for 640 and 100,000 gradient rows:

* ``gluon_sparse_adam_update`` (gluon-sparse, standard update),
* MXNet ``adam_update(lazy_update=False)`` (standard update, same results),
* MXNet ``adam_update`` with a dense gradient (the same work without sparsity),
* MXNet ``adam_update(lazy_update=True)`` (only the gradient's rows move: a
  different optimisation, shown as the floor),

next to a copy-bandwidth probe of the same bytes. A standard update must read
weight, mean and var and write them back: 24 bytes per element is its floor,
exactly what copying a 3 x weight-sized buffer moves. GB/s below is 24 bytes x
elements / time for every candidate.

Part 2 times decay-only steps of a 100,000 x 128 weight whose means are
denormal floats, as they become for rows absent from the gradient for ~800
steps, with and without ``flush_denormals``.

Part 3 times an epoch of the reference workload (1000 x 1,000,000 CSR, density
1e-5, batch 10, FullyConnectedSparse(128)-sigmoid-Dense(8)-sigmoid-Dense(1))
with SparseAdam and with MXNet's Adam, lazy and standard.

Run: ``python benchmarks/bench_adam.py [--rows 1000000] [--cols 128]``
"""
import argparse
import logging
import os
import sys
import threading

import mxnet as mx
import numpy as np
from mxnet import gluon

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.runner import Table, format_seconds, time_call  # noqa: E402
from benchmarks.workloads import batches, reference_data, reference_model, train_epoch  # noqa: E402
from gluon_sparse import _native  # noqa: E402

BYTES_PER_ELEMENT = 24  # read weight, mean, var + write them back, float32
ADAM_ARGS = dict(lr=1e-3, wd=1e-4, beta1=0.9, beta2=0.999, epsilon=1e-8)


def parallel_copy(dst, src, threads):
    """np.copyto of ``src`` into ``dst`` split over ``threads`` threads (numpy drops the GIL)."""
    bounds = np.linspace(0, src.shape[0], threads + 1).astype(int)
    workers = [threading.Thread(target=np.copyto, args=(dst[a:b], src[a:b]))
               for a, b in zip(bounds[:-1], bounds[1:])]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def bench_operator(rows, cols, grad_rows_list, repeat):
    table = Table("adam_operator", ["grad rows", "candidate", "time/step", "GB/s (24 B/elem)",
                                    "vs MXNet standard", "% of copy bandwidth"])
    elements = rows * cols
    rng = np.random.default_rng(0)
    weight = mx.nd.random.normal(shape=(rows, cols))
    mean = mx.nd.random.normal(scale=1e-3, shape=(rows, cols))
    var = mx.nd.random.uniform(1e-8, 1e-6, shape=(rows, cols))
    dense_grad = mx.nd.zeros((rows, cols))
    mx.nd.waitall()

    # Copy-bandwidth probe: the same 24 bytes per element a standard update moves.
    src = np.ones(3 * elements, dtype=np.float32)
    dst = np.zeros_like(src)
    copy_times = {t: time_call(lambda t=t: parallel_copy(dst, src, t), repeat=repeat)["min"]
                  for t in (1, os.cpu_count() or 1)}
    del src, dst
    copy_time = min(copy_times.values())
    copy_gbs = BYTES_PER_ELEMENT * elements / copy_time / 1e9
    for threads, t in sorted(copy_times.items()):
        table.add(**{"grad rows": "-", "candidate": "copy 3 x weight bytes, %d thread(s)" % threads,
                     "time/step": format_seconds(t),
                     "GB/s (24 B/elem)": BYTES_PER_ELEMENT * elements / t / 1e9,
                     "vs MXNet standard": "-",
                     "% of copy bandwidth": "%.0f%%" % (100 * copy_time / t)})

    _native.load_ops()
    for grad_rows in grad_rows_list:
        indices = np.sort(rng.choice(rows, grad_rows, replace=False))
        values = rng.standard_normal((grad_rows, cols), dtype=np.float32)
        grad = mx.nd.sparse.row_sparse_array((values, indices), shape=(rows, cols))
        candidates = [
            ("gluon_sparse_adam_update (gluon-sparse)", lambda: mx.nd.gluon_sparse_adam_update(
                weight, grad, mean, var, out=weight, **ADAM_ARGS)),
            ("MXNet adam_update, lazy_update=False", lambda: mx.nd.adam_update(
                weight, grad, mean, var, out=weight, lazy_update=False, **ADAM_ARGS)),
            ("MXNet adam_update, dense grad", lambda: mx.nd.adam_update(
                weight, dense_grad, mean, var, out=weight, **ADAM_ARGS)),
            ("MXNet adam_update, lazy_update=True", lambda: mx.nd.adam_update(
                weight, grad, mean, var, out=weight, lazy_update=True, **ADAM_ARGS)),
        ]
        timings = {name: time_call(fn, repeat=repeat, sync=mx.nd.waitall)["min"]
                   for name, fn in candidates}
        mxnet_standard = timings["MXNet adam_update, lazy_update=False"]
        for name, t in timings.items():
            lazy = name.endswith("lazy_update=True")
            table.add(**{"grad rows": grad_rows, "candidate": name, "time/step": format_seconds(t),
                         # Lazy Adam moves only the gradient's rows: no full-weight rate to quote.
                         "GB/s (24 B/elem)": ("-" if lazy
                                              else BYTES_PER_ELEMENT * elements / t / 1e9),
                         "vs MXNet standard": "%.2fx faster" % (mxnet_standard / t),
                         "% of copy bandwidth": "-" if lazy else "%.0f%%" % (100 * copy_time / t)})
    table.meta["copy_bandwidth_gbs"] = copy_gbs
    table.save()


def bench_denormals(rows, cols, repeat):
    """Decay-only steps whose means are denormal (rows absent for ~800 steps get there)."""
    table = Table("adam_denormals", ["mean values", "candidate", "time/step", "vs normal means"])
    tiny = float(np.finfo(np.float32).tiny)
    weight = mx.nd.random.normal(shape=(rows, cols))
    var = mx.nd.full((rows, cols), 1e-6)
    mean = mx.nd.zeros((rows, cols))
    empty = mx.nd.sparse.zeros("row_sparse", (rows, cols))
    _native.load_ops()
    candidates = [
        ("gluon_sparse_adam_update", lambda: mx.nd.gluon_sparse_adam_update(
            weight, empty, mean, var, out=weight, lr=1e-3)),
        ("gluon_sparse_adam_update, flush_denormals=True", lambda: mx.nd.gluon_sparse_adam_update(
            weight, empty, mean, var, out=weight, lr=1e-3, flush_denormals=True)),
        ("MXNet adam_update, lazy_update=False", lambda: mx.nd.adam_update(
            weight, empty, mean, var, out=weight, lr=1e-3, lazy_update=False)),
    ]
    normal = {}
    for label, value in (("normal (1e-3)", 1e-3), ("denormal (tiny / 4)", tiny / 4)):
        for name, fn in candidates:
            def step(fn=fn):
                mean[:] = value  # one step moves denormal means only slightly: keep them there
                fn()
            t = time_call(step, repeat=repeat, sync=mx.nd.waitall)["min"]
            normal.setdefault(name, t)
            table.add(**{"mean values": label, "candidate": name, "time/step": format_seconds(t),
                         "vs normal means": "%.1fx" % (t / normal[name])})
    table.save()


def bench_epoch(repeat):
    X, y = reference_data()
    data = batches(X, y, 10)
    table = Table("adam_reference_epoch", ["optimizer", "epoch", "epochs timed", "vs MXNet lazy",
                                           "vs MXNet standard"])
    # MXNet's standard Adam takes ~30 s an epoch on a quiet machine: timed once.
    configs = [("MXNet Adam, lazy_update=True", "adam", {"lazy_update": True}, repeat),
               ("SparseAdam (gluon-sparse), standard", "sparseadam", {}, repeat),
               ("MXNet Adam, lazy_update=False", "adam", {"lazy_update": False}, 1)]
    import gluon_sparse.optimizer  # noqa: F401  registers 'sparseadam'
    epochs = {}
    for name, opt, extra, timed in configs:
        net = reference_model()
        trainer = gluon.Trainer(net.collect_params(), opt, dict(learning_rate=1e-3, **extra))
        train_epoch(net, trainer, data[:3])  # state allocation, hybridize, library load
        epochs[name] = (time_call(lambda: train_epoch(net, trainer, data), repeat=timed,
                                  warmup=0)["min"], timed)
        del net, trainer
        mx.nd.waitall()
    lazy, standard = epochs[configs[0][0]][0], epochs[configs[2][0]][0]
    for name, (best, timed) in epochs.items():
        table.add(**{"optimizer": name, "epoch": format_seconds(best), "epochs timed": timed,
                     "vs MXNet lazy": "%.1fx" % (best / lazy),
                     "vs MXNet standard": "%.2fx faster" % (standard / best)})
    table.save()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--cols", type=int, default=128)
    parser.add_argument("--grad-rows", type=int, nargs="+", default=[640, 100_000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-epoch", action="store_true", help="only the operator timings")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    bench_operator(args.rows, args.cols, args.grad_rows, args.repeat)
    bench_denormals(100_000, args.cols, args.repeat)
    if not args.skip_epoch:
        bench_epoch(repeat=3)


if __name__ == "__main__":
    main()
