"""Epoch time of the reference workload for every first layer x optimizer.

First layers: ``nn.Dense`` (batches densified), FullyConnectedSparse with a
dense weight gradient, and with a row_sparse weight gradient. Optimizers: SGD,
MXNet's lazy Adam, MXNet's standard (non-lazy) Adam, and gluon-sparse's
SparseAdam (standard Adam; eager and with exact deferred updates). Each configuration is warmed up on a few
batches, then timed as the minimum of ``--repeat`` epochs; configurations slower than ``--slow-seconds``
per epoch are timed once (they are the ones the library exists to avoid).

Run: ``python benchmarks/bench_reference.py [--quick]``
"""
import argparse
import logging
import os
import sys

import mxnet as mx
from mxnet import gluon

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.runner import Table, format_seconds, time_call  # noqa: E402
from benchmarks.workloads import batches, reference_data, reference_model, train_epoch  # noqa: E402
import gluon_sparse.optimizer  # noqa: E402,F401  registers 'sparseadam' (part of the package)


def optimizers():
    """(label, MXNet optimizer name, optimizer parameters) of every optimizer measured."""
    return [("sgd", "sgd", {"learning_rate": 0.1}),
            ("adam lazy (MXNet)", "adam", {"learning_rate": 1e-3, "lazy_update": True}),
            ("adam standard (MXNet)", "adam", {"learning_rate": 1e-3, "lazy_update": False}),
            ("SparseAdam standard, eager (gluon-sparse)", "sparseadam", {"learning_rate": 1e-3}),
            ("SparseAdam standard, deferred (gluon-sparse)", "sparseadam",
             {"learning_rate": 1e-3, "deferred": True})]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--features", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--slow-seconds", type=float, default=5.0,
                        help="time configurations slower than this per epoch only once")
    parser.add_argument("--quick", action="store_true",
                        help="skip the dense-gradient configurations (minutes each)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    X, y = reference_data(rows=args.rows, features=args.features)
    data = batches(X, y, args.batch_size)
    layers = [("FullyConnectedSparse, row_sparse grad", "sparse", "row_sparse")]
    if not args.quick:
        layers += [("FullyConnectedSparse, dense grad", "sparse", "default"),
                   ("nn.Dense (densified batches)", "dense", None)]
    table = Table("reference_workload", ["first layer", "optimizer", "epoch", "epochs timed",
                                         "vs rsp+lazy adam"])
    baseline = None
    for layer_name, first_layer, grad_stype in layers:
        for opt_name, opt, opt_args in optimizers():
            net = reference_model(first_layer, grad_stype or "row_sparse", in_units=args.features)
            trainer = gluon.Trainer(net.collect_params(), opt, dict(opt_args))
            densify = first_layer == "dense"
            # Warm up on a few batches (state allocation, hybridize, library load),
            # then one timed epoch tells whether the configuration is slow enough
            # to be timed only once.
            train_epoch(net, trainer, data[:3], densify)
            first = time_call(lambda: train_epoch(net, trainer, data, densify), repeat=1, warmup=0)
            repeat = 1 if first["min"] > args.slow_seconds else args.repeat
            timing = first if repeat == 1 else time_call(
                lambda: train_epoch(net, trainer, data, densify), repeat=repeat, warmup=0)
            if layer_name.endswith("row_sparse grad") and opt_name.startswith("adam lazy"):
                baseline = timing["min"]
            table.add(**{"first layer": layer_name, "optimizer": opt_name,
                         "epoch": format_seconds(timing["min"]), "epochs timed": repeat,
                         "vs rsp+lazy adam": "%.1fx" % (timing["min"] / baseline) if baseline else "-"})
            del net, trainer
            mx.nd.waitall()
    table.save()


if __name__ == "__main__":
    main()
