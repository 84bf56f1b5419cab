"""Huge output layers: a dense ``Dense(L)`` output against SampledOutput.

Three parts (``--part``), each printed as a Markdown table and saved as JSON
in benchmarks/results/:

* ``scaling`` (output_scaling.json): one training step of the output layer
  alone (input ``h`` of 256 x 256, 3 positives per row drawn from a Zipf
  law over the labels) for L in 10^3 .. 10^6. Dense: ``gluon.nn.Dense(L)``,
  sigmoid binary cross-entropy over all labels, MXNet's Adam. Sampled:
  ``SampledOutput(L)``, sampled softmax with 1024 log-uniform negatives
  (draws with replacement, and ``unique=True``: 1024 distinct negatives),
  ``SparseAdam(deferred=True)`` (standard Adam). The dense layer is not run
  at 10^6 labels (a 1 GB weight, its gradient, Adam's mean and var and
  256 x 10^6 logits, labels and their gradients: ~6 GB on a shared machine).
* ``forum`` (output_forum.json): the two networks of the MXNet forum threads,
  100k -> 200 (sigmoid) -> 120k sigmoid outputs (binary cross-entropy) and
  250k -> 1024 -> 512 -> 200k outputs (softmax), batch 256, CSR input with 50
  non-zeros a row, dense output against SampledOutput (same optimizer:
  SparseAdam(deferred=True), which updates the dense layers with MXNet's Adam).
* ``quality`` (output_quality.json): precision@1/3/5 on held-out rows after the
  same number of epochs on a generated multi-label set with planted
  structure (each label owns a few features; an example shows some features
  of each of its 1-3 labels plus noise), FullyConnectedSparse(256, relu) and
  a dense output (BCE, and full softmax) or SampledOutput (sampled softmax,
  sampled BCE).

* ``long`` (output_long.json, not part of ``all``): SampledOutput's step over a
  long run (8,000 steps, the ``scaling`` workload) at 10^3, 10^5 and 10^6
  labels, the median of the 100 steps before each of a few marks. Deferred
  standard Adam replays, for a label that comes back, the steps in which its
  weight still moved (~140 after each gradient): that work grows over a run
  until it settles, which ``scaling``'s 132 steps do not show.

Steps are timed one by one after warm-up steps (``mx.nd.waitall`` inside the
timed region); the tables give the median. SampledOutput and the forum
networks' first layer use deferred standard Adam, whose rows catch up the
steps they missed when they come back: their cost settles only once rows come
back after typical gaps, so those runs warm up over many steps (``scaling``:
100, and the median of the first 16 steps is reported beside the steady one;
``forum``: 40 steps over 64 distinct batches, so that an input row comes back
after ~20 steps as in a real epoch, not after the 4 of a short cycle). The dense layer's (batch, L) target
matrices are built before the timing (in ``quality``, inside the epochs, as a
training loop would). The load average is recorded.
Run: ``flock /tmp/bench.lock python benchmarks/bench_output.py [--part all|long] [--quick]
[--outputs sampled-bce ...]`` (``--outputs``: the quality part's variants)
"""
import argparse
import gc
import logging
import os
import sys
import time

import mxnet as mx
import numpy as np
import scipy.sparse as sp
from mxnet import autograd, gluon

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.runner import Table  # noqa: E402
from benchmarks.workloads import random_csr, to_mx_csr  # noqa: E402
import gluon_sparse.optimizer  # noqa: E402,F401  (registers 'sparseadam')
from gluon_sparse.nn import FullyConnectedSparse, SampledOutput, top_k_scores  # noqa: E402
from gluon_sparse.nn.topk import precision_at_k  # noqa: E402

logger = logging.getLogger("gluon_sparse.benchmarks.output")

BATCH, HIDDEN, NUM_SAMPLED = 256, 256, 1024
DEFERRED = ("sparseadam", {"learning_rate": 1e-3, "deferred": True})


def _loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _zipf_labels(rng, rows, num_labels, per_row=3):
    """A CSR indicator with ``per_row`` distinct positives a row, popular labels first."""
    ranks = np.minimum(rng.zipf(1.2, size=(rows, per_row * 2)) - 1, num_labels - 1)
    indptr, ids = [0], []
    for row in ranks:
        chosen = np.unique(row)[:per_row]
        ids.extend(chosen)
        indptr.append(len(ids))
    return sp.csr_matrix((np.ones(len(ids), np.float32), ids, indptr), shape=(rows, num_labels))


class DenseOutput(gluon.HybridBlock):
    """``Dense(L)`` with the loss of the sampled layer it is compared with, over all labels."""

    def __init__(self, num_labels, in_units, loss):
        super().__init__()
        self._loss = loss
        with self.name_scope():
            self.dense = gluon.nn.Dense(num_labels, in_units=in_units)

    def hybrid_forward(self, F, h, target):
        logits = self.dense(h)
        if self._loss == "bce":
            return F.sum(F.relu(logits) - logits * target
                         + F.Activation(-F.abs(logits), act_type="softrelu"), axis=1)
        if self._loss == "softmax_class":  # target: class ids
            return -F.pick(F.log_softmax(logits, axis=1), target, axis=1)
        return -F.sum(target * F.log_softmax(logits, axis=1), axis=1)  # normalized multi-label

    def weights(self):
        return self.dense.weight.data(), self.dense.bias.data()


def _dense_target(labels, loss):
    if loss == "softmax_class":
        return mx.nd.array(labels)
    dense = labels.toarray()
    if loss == "softmax":
        dense /= np.maximum(dense.sum(axis=1, keepdims=True), 1)
    return mx.nd.array(dense)


def _step_seconds(step, batches, steps, start=0):
    """Seconds of each of ``steps`` steps (``mx.nd.waitall`` inside), on batches cycled from
    ``start``."""
    times = []
    for i in range(start, start + steps):
        begin = time.perf_counter()
        step(*batches[i % len(batches)])
        mx.nd.waitall()
        times.append(time.perf_counter() - begin)
    return times


def _time_steps(step, batches, warmup, steps, first=None):
    """Median seconds of ``steps`` timed steps after ``warmup``; ``first``: a list that
    receives the median of the first 16 steps after two (the cold start)."""
    times = _step_seconds(step, batches, warmup)
    if first is not None:
        first.append(float(np.median(times[2:18])))
    return float(np.median(_step_seconds(step, batches, steps, start=warmup)))


def _stepper(hidden, output, trainer, dense_loss=None):
    """One training step; ``dense_loss``: the labels are converted to the dense target."""
    def step(x, labels):
        with autograd.record():
            h = hidden(x) if hidden is not None else x
            if dense_loss is None:
                loss = output(h, labels)
            else:
                target = labels if isinstance(labels, mx.nd.NDArray) else _dense_target(
                    labels, dense_loss)
                loss = output(h, target)
        loss.backward()
        trainer.step(x.shape[0])
    return step


def bench_scaling(sizes, dense_max, steps, warmup, sampled_warmup):
    table = Table("output_scaling", ["labels", "layer", "ms_per_step", "first_steps_ms",
                                     "vs_dense", "loadavg"])
    rng = np.random.default_rng(0)
    h = mx.nd.array(rng.standard_normal((BATCH, HIDDEN)))
    for num_labels in sizes:
        batches = [(h, _zipf_labels(rng, BATCH, num_labels)) for _ in range(4)]
        dense_ms = None
        if num_labels <= dense_max:
            out = DenseOutput(num_labels, HIDDEN, "bce")
            out.initialize()
            out.hybridize()
            trainer = gluon.Trainer(out.collect_params(), "adam", {"learning_rate": 1e-3})
            # Dense targets built before the timing: only the layer's step is timed.
            dense_batches = [(x, _dense_target(labels, "bce")) for x, labels in batches[:2]]
            dense_ms = 1e3 * _time_steps(_stepper(None, out, trainer, "bce"), dense_batches,
                                         warmup, steps)
            del dense_batches
            table.add(labels=num_labels, layer="Dense(L) + BCE, adam", ms_per_step=dense_ms,
                      first_steps_ms="-", vs_dense=1.0, loadavg=_loadavg())
            del out, trainer
            gc.collect()
        for unique in (False, True):
            out = SampledOutput(num_labels, in_units=HIDDEN, num_sampled=NUM_SAMPLED, seed=0,
                                unique=unique)
            out.initialize()
            out.hybridize()
            trainer = gluon.Trainer(out.collect_params(), *DEFERRED)
            first = []
            ms = 1e3 * _time_steps(_stepper(None, out, trainer), batches, sampled_warmup,
                                   steps * 4, first)
            layer = "SampledOutput softmax%s, deferred sparseadam" % (
                ", unique=True" if unique else "")
            table.add(labels=num_labels, layer=layer, ms_per_step=ms,
                      first_steps_ms=1e3 * first[0],
                      vs_dense=(dense_ms / ms if dense_ms else "n/a"), loadavg=_loadavg())
            del out, trainer
            gc.collect()
    table.save()
    return table


def bench_long(sizes, steps, marks):
    """SampledOutput's step at each of ``marks``: the median of the 100 steps before it."""
    table = Table("output_long", ["labels"] + ["step_%d_ms" % m for m in marks] + ["loadavg"])
    rng = np.random.default_rng(0)
    h = mx.nd.array(rng.standard_normal((BATCH, HIDDEN)))
    for num_labels in sizes:
        batches = [(h, _zipf_labels(rng, BATCH, num_labels)) for _ in range(4)]
        out = SampledOutput(num_labels, in_units=HIDDEN, num_sampled=NUM_SAMPLED, seed=0)
        out.initialize()
        trainer = gluon.Trainer(out.collect_params(), *DEFERRED)
        times = _step_seconds(_stepper(None, out, trainer), batches, steps)
        row = {"step_%d_ms" % m: 1e3 * float(np.median(times[max(0, m - 100):m])) for m in marks}
        table.add(labels=num_labels, loadavg=_loadavg(), **row)
        del out, trainer
        gc.collect()
    table.save()
    return table


def _forum_net(shape, sampled):
    features, hidden, num_labels, loss = shape
    net = gluon.nn.HybridSequential()
    net.add(FullyConnectedSparse(hidden[0], activation="sigmoid" if loss == "bce" else "relu",
                                 in_units=features))
    for units in hidden[1:]:
        net.add(gluon.nn.Dense(units, activation="relu", in_units=hidden[0]))
    if sampled:
        out = SampledOutput(num_labels, in_units=hidden[-1], num_sampled=NUM_SAMPLED,
                            loss="bce" if loss == "bce" else "softmax", seed=0)
    else:
        out = DenseOutput(num_labels, hidden[-1], loss)
    net.initialize()
    out.initialize()
    net.hybridize()
    out.hybridize()
    params = net.collect_params()
    params.update(out.collect_params())
    return net, out, gluon.Trainer(params, *DEFERRED)


def bench_forum(dense_steps, steps, warmup, distinct_batches=64):
    shapes = {"100k-200-120k sigmoid": (100_000, (200,), 120_000, "bce"),
              "250k-1024-512-200k softmax": (250_000, (1024, 512), 200_000, "softmax_class")}
    table = Table("output_forum", ["network", "output", "ms_per_step", "speedup", "loadavg"])
    rng = np.random.default_rng(1)
    for name, shape in shapes.items():
        features, _, num_labels, loss = shape
        batches = []
        for i in range(distinct_batches):
            x = to_mx_csr(random_csr(BATCH, features, 50, seed=i))
            labels = (rng.integers(0, num_labels, BATCH) if loss == "softmax_class"
                      else _zipf_labels(rng, BATCH, num_labels))
            batches.append((x, labels))
        results = {}
        for sampled in (False, True):
            net, out, trainer = _forum_net(shape, sampled)
            step = _stepper(net, out, trainer, None if sampled else loss)
            # Two dense targets (205 MB each at 200k labels), cycled under every input batch.
            targets = [] if sampled else [_dense_target(labels, loss)
                                          for _, labels in batches[:2]]
            timed = batches if sampled else [(x, targets[i % 2])
                                             for i, (x, _) in enumerate(batches)]
            results[sampled] = 1e3 * _time_steps(step, timed, warmup,
                                                 steps if sampled else dense_steps)
            del timed, targets
            table.add(network=name, output="SampledOutput" if sampled else "Dense(L)",
                      ms_per_step=results[sampled],
                      speedup=results[False] / results[sampled], loadavg=_loadavg())
            del net, out, trainer
            gc.collect()
    table.save()
    return table


def planted_multilabel(rows, num_features, num_labels, seed=0, prototype=8, shown=5, noise=5):
    """(X, Y): each label owns ``prototype`` features; a row shows ``shown`` of each of its labels'."""
    rng = np.random.default_rng(seed)
    owners = rng.integers(0, num_features, size=(num_labels, prototype))
    Y = _zipf_labels(rng, rows, num_labels, per_row=3)
    # 1 to 3 labels a row: drop extra positives at random.
    keep = rng.integers(1, 4, size=rows)
    indptr, ids = [0], []
    for i in range(rows):
        ids.extend(Y.indices[Y.indptr[i]:Y.indptr[i + 1]][:keep[i]])
        indptr.append(len(ids))
    Y = sp.csr_matrix((np.ones(len(ids), np.float32), ids, indptr), shape=(rows, num_labels))
    x_rows, x_cols = [], []
    for i in range(rows):
        cols = [rng.choice(owners[l], shown, replace=False) for l in Y.indices[Y.indptr[i]:Y.indptr[i + 1]]]
        cols.append(rng.integers(0, num_features, noise))
        cols = np.unique(np.concatenate(cols))
        x_rows.append(np.full(cols.size, i))
        x_cols.append(cols)
    x_rows, x_cols = np.concatenate(x_rows), np.concatenate(x_cols)
    X = sp.csr_matrix((np.ones(x_rows.size, np.float32), (x_rows, x_cols)),
                      shape=(rows, num_features))
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = sp.csr_matrix(sp.diags(1 / norms) @ X, dtype=np.float32)
    return X, Y


def _train_quality(kind, X, Y, Xt, Yt, epochs):
    num_labels = Y.shape[1]
    mx.random.seed(0)
    hidden = FullyConnectedSparse(HIDDEN, activation="relu", in_units=X.shape[1])
    if kind.startswith("dense"):
        loss = kind.split("-")[1]
        out = DenseOutput(num_labels, HIDDEN, loss)
    else:
        loss = None
        out = SampledOutput(num_labels, in_units=HIDDEN, num_sampled=NUM_SAMPLED,
                            loss=kind.split("-")[1], seed=0)
    hidden.initialize()
    out.initialize()
    hidden.hybridize()
    out.hybridize()
    params = hidden.collect_params()
    params.update(out.collect_params())
    trainer = gluon.Trainer(params, "sparseadam", {"learning_rate": 2e-3, "deferred": True})
    step = _stepper(hidden, out, trainer, loss)
    order_rng = np.random.default_rng(0)
    start = time.perf_counter()
    for _ in range(epochs):
        order = order_rng.permutation(X.shape[0])
        for b in range(0, len(order), BATCH):
            idx = np.sort(order[b:b + BATCH])
            step(to_mx_csr(X[idx]), Y[idx])
    mx.nd.waitall()
    seconds = time.perf_counter() - start
    gluon_sparse.optimizer.flush(trainer)
    h = hidden(to_mx_csr(Xt))
    weight, bias = out.weights() if kind.startswith("dense") else (
        out.weight.data(), out.bias.data().reshape((-1,)))
    ids, _ = top_k_scores(h, weight, bias, 5)
    return seconds, [precision_at_k(Yt, ids, k) for k in (1, 3, 5)]


QUALITY_OUTPUTS = ("dense-bce", "dense-softmax", "sampled-softmax", "sampled-bce")


def bench_quality(rows, num_features, num_labels, epochs, outputs=QUALITY_OUTPUTS):
    table = Table("output_quality", ["output", "epochs", "train_s", "P@1", "P@3", "P@5",
                                     "loadavg"])
    X, Y = planted_multilabel(rows + rows // 5, num_features, num_labels)
    X, Xt, Y, Yt = X[:rows], X[rows:], Y[:rows], Y[rows:]
    popular = np.argsort(-np.asarray(Y.sum(axis=0)).ravel(), kind="stable")[:5]
    baseline = precision_at_k(Yt, np.tile(popular, (Yt.shape[0], 1)), 1)
    logger.info("label-popularity P@1 baseline: %.4f", baseline)
    for kind in outputs:
        seconds, (p1, p3, p5) = _train_quality(kind, X, Y, Xt, Yt, epochs)
        table.add(output=kind, epochs=epochs, train_s=seconds, **{"P@1": p1, "P@3": p3,
                                                                  "P@5": p5},
                  loadavg=_loadavg())
    table.meta["popularity_p_at_1"] = baseline
    table.meta["data"] = {"train_rows": rows, "test_rows": rows // 5, "features": num_features,
                          "labels": num_labels}
    table.save()
    return table


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["scaling", "forum", "quality", "long", "all"],
                        default="all", help="'all' is scaling, forum and quality")
    parser.add_argument("--quick", action="store_true",
                        help="fewer steps and a smaller quality set (a smoke run)")
    parser.add_argument("--outputs", nargs="+", choices=QUALITY_OUTPUTS, default=QUALITY_OUTPUTS,
                        help="the output layers the quality part trains (default: all four)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    quick = args.quick
    print("load average at start: %s" % _loadavg())
    if args.part in ("scaling", "all"):
        sizes = [1000, 10_000, 100_000, 200_000, 1_000_000]
        bench_scaling(sizes if not quick else sizes[:3], dense_max=200_000,
                      steps=3 if quick else 8, warmup=2, sampled_warmup=20 if quick else 100)
    if args.part in ("forum", "all"):
        bench_forum(dense_steps=2 if quick else 4, steps=4 if quick else 10,
                    warmup=3 if quick else 40, distinct_batches=8 if quick else 64)
    if args.part in ("quality", "all"):
        bench_quality(rows=4000 if quick else 20_000, num_features=20_000,
                      num_labels=2000 if quick else 10_000, epochs=1 if quick else 3,
                      outputs=args.outputs)
    if args.part == "long":
        marks = [200, 1000, 2000, 4000, 8000] if not quick else [100, 200]
        bench_long([1000, 100_000, 1_000_000] if not quick else [1000, 100_000], marks[-1],
                   marks)
    print("load average at end: %s" % _loadavg())


if __name__ == "__main__":
    main()
