"""SparseMLPClassifier with many classes: time per epoch of the dense against the sampled output.

Where ``output='auto'`` switches to the sampled softmax
(``gluon_sparse.sklearn._class_output.SAMPLED_OUTPUT_MIN_CLASSES``) is read
off this table. For each class count, the same generated multi-class problem
with planted structure (each class owns 8 of 50,000 features; a row shows 5 of
its class's plus 5 noise features; class ``c`` has frequency proportional to ``1 / (c + 1)``) is fit
by ``SparseMLPClassifier(output='dense')`` and ``output='sampled'`` with the
estimator's defaults otherwise (hidden_layer_sizes=(100,), batch 200,
alpha=1e-4, deferred SparseAdam). The first ``partial_fit`` epoch (network
construction and first-touch allocation) is not timed; the next epochs are, one
by one, and the table gives their median and the held-out accuracy after them.

Run: ``flock /tmp/bench.lock python benchmarks/bench_mlp_output.py [--quick]``
(results in benchmarks/results/mlp_output.json).
"""
import argparse
import logging
import os
import sys
import time
import warnings

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.runner import Table  # noqa: E402
from gluon_sparse.sklearn import SparseMLPClassifier  # noqa: E402

logger = logging.getLogger("gluon_sparse.benchmarks.mlp_output")


def _loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def planted_multiclass(rows, num_features, num_classes, seed=0, prototype=8, shown=5, noise=5):
    """``(X, y)``: class ``c`` owns ``prototype`` features; a row shows ``shown`` of its
    class's and ``noise`` random ones (L2-normalised); classes Zipf-distributed."""
    rng = np.random.default_rng(seed)
    owners = rng.integers(0, num_features, size=(num_classes, prototype))
    popularity = 1.0 / np.arange(1, num_classes + 1)  # Zipf's law over the classes
    y = rng.choice(num_classes, size=rows, p=popularity / popularity.sum())
    cols = np.concatenate([rng.permuted(owners[y], axis=1)[:, :shown],
                           rng.integers(0, num_features, size=(rows, noise))], axis=1)
    X = sp.csr_matrix((np.ones(cols.size, np.float32), cols.ravel(),
                       np.arange(0, cols.size + 1, cols.shape[1])), shape=(rows, num_features))
    X.sum_duplicates()
    X.data = np.minimum(X.data, 1.0)
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    return sp.csr_matrix(sp.diags(1 / norms) @ X, dtype=np.float32), y


def bench(class_counts, rows, epochs):
    table = Table("mlp_output", ["classes", "output", "s_per_epoch", "dense_over_sampled",
                                 "accuracy", "loadavg"])
    for num_classes in class_counts:
        X, y = planted_multiclass(rows + rows // 5, 50_000, num_classes)
        X, Xt, y, yt = X[:rows], X[rows:], y[:rows], y[rows:]
        classes = np.arange(num_classes)
        seconds = {}
        for output in ("dense", "sampled"):
            clf = SparseMLPClassifier(output=output, random_state=0)
            clf.partial_fit(X, y, classes=classes)  # builds the network: not timed
            times = []
            for _ in range(epochs):
                start = time.perf_counter()
                clf.partial_fit(X, y)  # returns after the epoch's loss: all steps done
                times.append(time.perf_counter() - start)
            seconds[output] = float(np.median(times))
            table.add(classes=num_classes, output=output, s_per_epoch=seconds[output],
                      dense_over_sampled=seconds["dense"] / seconds[output],
                      accuracy=clf.score(Xt, yt), loadavg=_loadavg())
    table.meta.update(rows=rows, features=50_000, epochs_timed=epochs)
    table.save()
    return table


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rows and class counts")
    parser.add_argument("--classes", type=int, nargs="+",
                        default=[500, 1000, 2000, 5000, 10_000, 20_000])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    warnings.simplefilter("ignore")  # ConvergenceWarning of one-epoch fits
    print("load average at start: %s" % _loadavg())
    bench(args.classes[:3] if args.quick else args.classes, rows=2000 if args.quick else 10_000,
          epochs=1 if args.quick else 2)
    print("load average at end: %s" % _loadavg())


if __name__ == "__main__":
    main()
