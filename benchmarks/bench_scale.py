"""Time of one training step against the number of features.

The step of the project's reference network (FullyConnectedSparse(128)-sigmoid-
Dense(8)-sigmoid-Dense(1), sigmoid binary cross-entropy, gluon.Trainer) on a
batch of 10 rows x 10 non-zeros, at 10^5, 10^6, 4*10^6 and 10^7 features:

* MXNet: the first layer is ``sparse.dot(csr, W)`` with a row_sparse weight
  gradient (what FullyConnectedSparse was before the operator library), with
  MXNet's lazy Adam, and with MXNet's standard Adam at the sizes where a step
  stays under a few seconds (it moves every row every step);
* gluon-sparse: FullyConnectedSparse (``gluon_sparse_dot``), with MXNet's lazy
  Adam, with SparseAdam's standard Adam (eager, small sizes only, like MXNet's)
  and with SparseAdam's deferred standard Adam, when gluon_sparse.optimizer
  provides them.

Every candidate is hybridized (network and loss) and timed in the same process
as the others: ``--steps`` steps, each timed alone; the table gives their 10th
percentile (``step_ms``, used for the ratios), their median, and the process's
CPU time per step (``cpu_ms``, all threads: what the step costs, whatever else
runs on the machine). One model at a
time is alive (a 10^7 x 128 float32 weight is 5.1 GB, 15.4 GB with Adam's
mean and var), and a size is skipped for a candidate when the machine does not
have the memory available. Writes benchmarks/results/scale.json and a
log-log plot, scale.png.

Run: ``python benchmarks/bench_scale.py [--sizes 1e5,1e6,4e6,1e7]``
"""
import argparse
import gc
import json
import logging
import os
import sys
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.runner import (RESULTS_DIR, Table, available_bytes, format_seconds,  # noqa: E402
                               time_call)
from benchmarks.workloads import random_csr, to_mx_csr  # noqa: E402
from gluon_sparse.nn import FullyConnectedSparse  # noqa: E402

logger = logging.getLogger("gluon_sparse.benchmarks.scale")

BATCH, NNZ_PER_ROW, HIDDEN = 10, 10, 128
LEARNING_RATE = 1e-3
# Above this many features a standard (non-lazy, eager) Adam step streams
# gigabytes of weight, mean and var: seconds per step, measured at the small sizes only.
EAGER_STANDARD_MAX_FEATURES = 1_000_000
MXNET_LAZY = "MXNet sparse.dot + lazy adam"


class MXNetSparseDot(gluon.HybridBlock):
    """The first layer written with MXNet's own ``sparse.dot`` (the baseline)."""

    def __init__(self, units, in_units, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.weight = self.params.get("weight", shape=(in_units, units),
                                          grad_stype="row_sparse")
            self.bias = self.params.get("bias", shape=(units,), init="zeros")

    def hybrid_forward(self, F, x, weight, bias):
        return F.sigmoid(F.broadcast_add(F.sparse.dot(x, weight), bias.reshape((1, -1))))


def build_net(first_layer, features):
    net = gluon.nn.HybridSequential()
    if first_layer == "mxnet":
        net.add(MXNetSparseDot(HIDDEN, features))
    else:
        net.add(FullyConnectedSparse(HIDDEN, activation="sigmoid", in_units=features))
    net.add(gluon.nn.Dense(8, activation="sigmoid"), gluon.nn.Dense(1))
    net.initialize(mx.init.Uniform(0.01))
    net.hybridize(static_alloc=True, static_shape=True)
    return net


def candidates():
    """(name, first layer, optimizer factory, eager standard Adam?) of every candidate."""
    lazy = {"learning_rate": LEARNING_RATE, "lazy_update": True}
    standard = {"learning_rate": LEARNING_RATE, "lazy_update": False}
    found = [(MXNET_LAZY, "mxnet", lambda: mx.optimizer.create("adam", **lazy), False),
             ("MXNet sparse.dot + standard adam", "mxnet",
              lambda: mx.optimizer.create("adam", **standard), True),
             ("gluon-sparse dot + lazy adam", "ours",
              lambda: mx.optimizer.create("adam", **lazy), False)]
    try:
        from gluon_sparse.optimizer import SparseAdam
    except ImportError:
        logger.warning("gluon_sparse.optimizer is not available: SparseAdam not measured")
        return found
    found.append(("gluon-sparse dot + SparseAdam standard (eager)", "ours",
                  lambda: SparseAdam(learning_rate=LEARNING_RATE), True))
    try:
        SparseAdam(learning_rate=LEARNING_RATE, deferred=True)
    except TypeError:
        logger.warning("this SparseAdam has no deferred mode: deferred Adam not measured")
    else:
        found.append(("gluon-sparse dot + SparseAdam standard (deferred)", "ours",
                      lambda: SparseAdam(learning_rate=LEARNING_RATE, deferred=True), False))
    return found


def model_bytes(features):
    # weight + Adam's mean and var (the initializer's transient copy of the
    # weight is freed before Adam allocates), plus 0.5 GB for everything else.
    return 3 * features * HIDDEN * 4 + 500 * 2 ** 20


def make_batches(features, count, seed):
    rng = np.random.RandomState(seed)
    out = []
    for i in range(count):
        x = to_mx_csr(random_csr(BATCH, features, NNZ_PER_ROW, seed=seed * 1000 + i))
        out.append((x, mx.nd.array(rng.randint(0, 2, (BATCH, 1)).astype("float32"))))
    return out


def time_step(first_layer, make_optimizer, features, data, steps, warmup):
    """Wall times of ``steps`` training steps, each timed alone, and CPU seconds per step.

    Each step is timed on its own, up to the end of its asynchronous work, so
    that the low percentiles show a step's own cost even on a machine shared
    with other jobs (whole runs of many steps are dominated by preemption there).
    Also returns the process's CPU time per step (all threads), which other
    jobs do not inflate. Warm-up (deferred initialisation, graph caching,
    Adam's state allocation) is not timed.
    """
    net = build_net(first_layer, features)
    loss_fn = gluon.loss.SigmoidBinaryCrossEntropyLoss()
    loss_fn.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(net.collect_params(), make_optimizer())
    position = [0]

    def step():
        x, y = data[position[0] % len(data)]
        position[0] += 1
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(BATCH)

    # Warm-up covers deferred initialisation, graph caching and Adam's state allocation.
    for _ in range(warmup):
        step()
    mx.nd.waitall()
    cpu_start = time.process_time()
    result = time_call(step, repeat=steps, warmup=0, number=1, sync=mx.nd.waitall)
    cpu_seconds = (time.process_time() - cpu_start) / steps
    del net, trainer, loss_fn
    gc.collect()
    mx.nd.waitall()
    return np.asarray(result["times"]), cpu_seconds


def time_first_layer(features, data, steps):
    """Per-call seconds (10th percentile) of the first layer's forward + backward.

    MXNet's ``sparse.dot`` and ``gluon_sparse_dot`` on the same weight and
    batches, with a row_sparse weight gradient: the part of the step that the
    operator library replaces.
    """
    weight = mx.nd.random.uniform(-0.01, 0.01, shape=(features, HIDDEN))
    grad = mx.nd.sparse.zeros("row_sparse", weight.shape)
    autograd.mark_variables([weight], [grad])
    head = mx.nd.ones((BATCH, HIDDEN))
    result = {}
    for name, product in (("MXNet sparse.dot", mx.nd.sparse.dot),
                          ("gluon_sparse_dot", mx.nd.gluon_sparse_dot)):
        position = [0]

        def forward_backward():
            x = data[position[0] % len(data)][0]
            position[0] += 1
            with autograd.record():
                out = product(x, weight)
            out.backward(head)

        times = time_call(forward_backward, repeat=steps, warmup=10, number=1,
                          sync=mx.nd.waitall)["times"]
        result[name] = float(np.percentile(times, 10))
    del weight, grad
    mx.nd.waitall()
    return result


def checkpoint(table):
    """Write the rows so far to the table's JSON (a run at 10^7 features can be OOM-killed)."""
    os.makedirs(RESULTS_DIR, exist_ok=True)
    with open(os.path.join(RESULTS_DIR, table.name + ".json"), "w") as f:
        json.dump({"meta": table.meta, "columns": table.columns, "rows": table.rows}, f, indent=1)


def plot(table, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in dict.fromkeys(row["candidate"] for row in table.rows):
        rows = [r for r in table.rows if r["candidate"] == name]
        ax.loglog([r["features"] for r in rows], [r["step_ms"] for r in rows], marker="o",
                  label=name, linestyle="--" if name.startswith("MXNet") else "-")
    ax.set_xlabel("number of features (in_units)")
    ax.set_ylabel("time per training step (ms)")
    ax.set_title("Step cost vs features (batch 10 x 10 non-zeros, 128-8-1 MLP)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e5,1e6,4e6,1e7",
                        help="comma separated feature counts")
    parser.add_argument("--steps", type=int, default=300, help="timed steps per candidate")
    parser.add_argument("--batches", type=int, default=64, help="distinct batches cycled through")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    # MXNet warns once per process that lazy Adam is not standard Adam; that is the point here.
    logging.getLogger("mxnet").setLevel(logging.ERROR)

    sizes = [int(float(s)) for s in args.sizes.split(",")]
    table = Table("scale", ["features", "candidate", "step_ms", "median_ms", "cpu_ms",
                            "speed-up vs MXNet lazy adam", "vs own smallest size"])
    layer_table = Table("scale_first_layer", ["features", "MXNet sparse.dot fwd+bwd (ms)",
                                              "gluon_sparse_dot fwd+bwd (ms)", "speed-up"])
    baseline, smallest = {}, {}
    for features in sizes:
        data = make_batches(features, args.batches, seed=features % 9973)
        if features * HIDDEN * 4 + 500 * 2 ** 20 < available_bytes():
            layer = time_first_layer(features, data, args.steps)
            mxnet_s, ours_s = layer["MXNet sparse.dot"], layer["gluon_sparse_dot"]
            layer_table.add(features=features, **{
                "MXNet sparse.dot fwd+bwd (ms)": round(mxnet_s * 1e3, 3),
                "gluon_sparse_dot fwd+bwd (ms)": round(ours_s * 1e3, 3),
                "speed-up": "%.1fx" % (mxnet_s / ours_s)})
            checkpoint(layer_table)
        for name, first_layer, make_optimizer, eager_standard in candidates():
            if eager_standard and features > EAGER_STANDARD_MAX_FEATURES:
                continue
            if model_bytes(features) > available_bytes():
                logger.warning("%s at %d features skipped: needs %.1f GB, %.1f GB available",
                               name, features, model_bytes(features) / 1e9,
                               available_bytes() / 1e9)
                continue
            # An eager standard Adam step takes seconds at 10^6 features: a few suffice.
            steps, warmup = (5, 3) if eager_standard else (args.steps, len(data) // 2)
            times, cpu_seconds = time_step(first_layer, make_optimizer, features, data, steps,
                                           warmup)
            # The 10th percentile: a step's own cost, robust to the other jobs' load.
            seconds = float(np.percentile(times, 10))
            if name == MXNET_LAZY:
                baseline[features] = seconds
            smallest.setdefault(name, seconds)
            table.add(features=features, candidate=name, step_ms=round(seconds * 1e3, 3),
                      median_ms=round(float(np.median(times)) * 1e3, 3),
                      cpu_ms=round(cpu_seconds * 1e3, 3),
                      **{"speed-up vs MXNet lazy adam": "%.2fx" % (baseline[features] / seconds)
                         if features in baseline else "n/a",
                         "vs own smallest size": "%.2fx" % (seconds / smallest[name])})
            checkpoint(table)
            logger.info("%d features, %s: %s per step", features, name, format_seconds(seconds))
    layer_table.save()
    table.save()
    print("plot: %s" % plot(table, os.path.join(RESULTS_DIR, "scale.png")))


if __name__ == "__main__":
    main()
