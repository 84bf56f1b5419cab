"""SparseMultiLabelClassifier.predict_top_k: a batch of rows and a single row.

A model with one hidden layer of 128 units over 5,000 features is trained for
one epoch on 3,000 rows (two random labels a row, every label seen) for each
label count; the table gives the best of ``--repeat`` calls of
``predict_top_k(X, 5)`` on all 3,000 rows and on one row. Rows are scored in
blocks of one fixed height (64 to 1,024 rows, by the label count), the last
padded, so that a row's scores do not depend on the rows predicted with it: a
single row costs what a block costs.

``--repo PATH`` imports gluon_sparse from another checkout (with its built
libraries), to compare two versions one process at a time.

Run: ``flock /tmp/bench.lock python benchmarks/bench_multilabel_predict.py
[--labels 2000,30000] [--repo PATH]``
"""
import argparse
import os
import sys
import time


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", default="2000,30000")
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--repo", default=os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    args = parser.parse_args(argv)
    sys.path.insert(0, args.repo)
    import numpy as np
    import scipy.sparse as sp
    from gluon_sparse.sklearn import SparseMultiLabelClassifier

    rng = np.random.default_rng(0)
    X = sp.random(args.rows, 5000, density=0.005, format="csr", random_state=0,
                  dtype=np.float32)
    for num_labels in (int(n) for n in args.labels.split(",")):
        Y = [[int(a) for a in rng.integers(0, num_labels, 2)] for _ in range(args.rows)]
        Y[0] = list(range(num_labels))
        model = SparseMultiLabelClassifier(hidden_layer_sizes=(128,), max_iter=1,
                                           random_state=0).fit(X, Y)
        model.predict_top_k(X[:10], 5)
        for rows in (args.rows, 1):
            best = float("inf")
            for _ in range(args.repeat):
                start = time.perf_counter()
                model.predict_top_k(X[:rows], 5)
                best = min(best, time.perf_counter() - start)
            print("%s  labels %d  rows %d  %.4f s" % (args.repo, num_labels, rows, best))


if __name__ == "__main__":
    main()
