"""Deferred standard Adam on the reference workload: epoch and step time against
the eager SparseAdam operator and MXNet's lazy and standard Adam, the training
loss curves of deferred and eager Adam (they coincide), and the state memory.

All candidates train the same network (reference_model: 1,000,000 features,
FullyConnectedSparse(128)-Dense(8)-Dense(1), hybridized) on the same 1000-row
CSR data in batches of 10 (100 steps an epoch). Each is warmed up for one
epoch (so the timed epochs of deferred Adam include the replay of rows last
touched an epoch earlier), then timed as the minimum of ``--repeat`` epochs;
a configuration whose warm-up epoch exceeds ``--slow-seconds`` (the eager
update, which moves all 128 M weights every step) is timed on one more epoch
only, and MXNet's standard Adam (~30 s an epoch) once, without warm-up.

Run: ``python benchmarks/bench_deferred.py [--repeat 3] [--curve-epochs 2]``
"""
import argparse
import logging
import os
import sys
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.runner import RESULTS_DIR, Table, format_seconds, time_call  # noqa: E402
from benchmarks.workloads import batches, reference_data, reference_model, train_epoch  # noqa: E402
from gluon_sparse.optimizer import SparseAdam, deferred  # noqa: E402

LEARNING_RATE = 1e-3
WD = 1e-5  # weight decay makes every row move every step: the replay does real work


def candidates():
    """(name, optimizer factory, timed repeatedly?) for each configuration."""
    args = {"learning_rate": LEARNING_RATE, "wd": WD}
    return [
        ("SparseAdam deferred (gluon-sparse)", lambda: SparseAdam(deferred=True, **args), True),
        ("SparseAdam eager (gluon-sparse)", lambda: SparseAdam(**args), True),
        ("adam lazy (MXNet)", lambda: mx.optimizer.Adam(lazy_update=True, **args), True),
        ("adam standard (MXNet)", lambda: mx.optimizer.Adam(lazy_update=False, **args), False),
    ]


def make(factory, seed=0):
    mx.random.seed(seed)
    net = reference_model()
    return net, gluon.Trainer(net.collect_params(), factory())


def loss_curve(factory, data, epochs):
    """Per-step training loss (mean over the batch) over ``epochs`` epochs."""
    net, trainer = make(factory)
    loss_fn = gluon.loss.SigmoidBinaryCrossEntropyLoss()
    losses = []
    for _ in range(epochs):
        for x, label in data:
            with autograd.record():
                loss = loss_fn(net(x), label)
            loss.backward()
            trainer.step(x.shape[0])
            losses.append(float(loss.mean().asscalar()))
    return np.array(losses)


def plot(curves, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    styles = {"SparseAdam deferred (gluon-sparse)": dict(lw=3, alpha=0.5),
              "SparseAdam eager (gluon-sparse)": dict(lw=1, ls="--", color="k")}
    for name, losses in curves.items():
        ax.plot(np.arange(1, len(losses) + 1), losses, label=name, **styles.get(name, dict(lw=1)))
    ax.set_xlabel("step (batch of 10)")
    ax.set_ylabel("training loss (sigmoid BCE)")
    ax.set_title("Reference workload: deferred vs eager standard Adam")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--features", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--curve-epochs", type=int, default=2)
    parser.add_argument("--slow-seconds", type=float, default=5.0,
                        help="time configurations slower than this per epoch only once")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    X, y = reference_data(rows=args.rows, features=args.features)
    data = batches(X, y, args.batch_size)
    steps = len(data)
    table = Table("deferred_adam", ["optimizer", "epoch", "step", "epochs timed",
                                    "vs MXNet lazy adam", "vs deferred"])
    timings = {}
    for name, factory, repeat in candidates():
        net, trainer = make(factory)
        run = lambda: train_epoch(net, trainer, data)  # noqa: E731
        if repeat:
            warmup = time_call(run, repeat=1, warmup=0)["min"]
            timed = args.repeat if warmup < args.slow_seconds else 1
            timings[name] = (time_call(run, repeat=timed, warmup=0)["min"], timed)
        else:
            start = time.perf_counter()
            run()
            timings[name] = (time.perf_counter() - start, 1)
        if name.startswith("SparseAdam deferred"):
            memory = {"deferral (last_step + history)": deferred.state_bytes(trainer),
                      "mean + var": sum(2 * p.data().size * 4 for p in net.collect_params().values())}
        logging.info("%s: %s an epoch", name, format_seconds(timings[name][0]))
        del net, trainer
    lazy = timings["adam lazy (MXNet)"][0]
    mine = timings["SparseAdam deferred (gluon-sparse)"][0]
    for name, (seconds, timed) in timings.items():
        table.add(**{"optimizer": name, "epoch": format_seconds(seconds),
                     "step": format_seconds(seconds / steps), "epochs timed": timed,
                     "vs MXNet lazy adam": "%.2fx" % (seconds / lazy),
                     "vs deferred": "%.2fx" % (seconds / mine)})
    table.meta["memory_bytes"] = memory
    table.meta["steps_per_epoch"] = steps

    curves = {name: loss_curve(factory, data, args.curve_epochs)
              for name, factory, _ in candidates()[:3]}
    deferred_curve = curves["SparseAdam deferred (gluon-sparse)"]
    eager_curve = curves["SparseAdam eager (gluon-sparse)"]
    lazy_curve = curves["adam lazy (MXNet)"]
    table.meta["loss_curve"] = {
        "steps": len(deferred_curve),
        "max |deferred - eager|": float(np.abs(deferred_curve - eager_curve).max()),
        "max |lazy - eager|": float(np.abs(lazy_curve - eager_curve).max()),
        "final loss (deferred, eager, lazy)": [float(c[-1]) for c in
                                               (deferred_curve, eager_curve, lazy_curve)]}
    os.makedirs(RESULTS_DIR, exist_ok=True)
    plot_path = os.path.join(RESULTS_DIR, "deferred_loss.png")
    plot(curves, plot_path)
    table.save()
    print("\nstate memory (bytes): %s" % memory)
    print("loss curves over %d steps: %s" % (len(deferred_curve), table.meta["loss_curve"]))
    print("plot: %s" % plot_path)


if __name__ == "__main__":
    main()
