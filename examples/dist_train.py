"""Data-parallel training of the reference model with MXNet's kvstore.

Run it under the launcher, one process per worker::

    gluon-sparse launch -n 2 -s 1 -- python examples/dist_train.py --data train.libsvm
    gluon-sparse launch -n 4 -- python examples/dist_train.py --synthetic 1000:1000000:1e-5

or alone with ``--kvstore local`` (or ``device``). The model is the reference
one: ``FullyConnectedSparse(units)-sigmoid-Dense(8)-sigmoid-Dense(1)`` with a
logistic loss. With a ``dist_*`` kvstore the first layer is
``FullyConnectedSparseRowSparseWeight`` (same math and parameter layout): its
weight stays on the servers and each batch pulls only the rows it touches.
(MXNet 1.9.1's servers abort on the dense-weight / row_sparse-gradient layout of
``FullyConnectedSparse``, see ``gluon_sparse.distributed.checks``.)

Data parallelism: every worker trains on its equal, strided share of the rows
(``SparseDataLoader(num_parts=kv.num_workers, part_index=kv.rank)``: rows
``rank, rank + workers, ...``) in local batches that together make one global
batch of ``--batch-size`` rows (``part_sizes``) and sums its loss; gradients
are scaled by 1 / ``--batch-size``. The servers add the workers' gradients, so each
step equals one single-process step on the global batch made of the workers'
local batches. Every worker runs the same number of steps (``dist_sync`` waits
for all of them): the fewest full local batches any share has.

The gradient scale 1 / batch size is set on the optimizer when it is created,
and ``trainer.step(1)`` is called: with a row_sparse weight the Trainer sends
the optimizer to the servers at the first row pull, before any ``step`` could
set the scale.
"""
import argparse
import itertools
import json
import logging
import os
import time

import mxnet as mx
import numpy as np
import scipy.sparse as sp
from mxnet import autograd, gluon

from gluon_sparse.data import CSRDataset, SparseDataLoader, load_libsvm
from gluon_sparse.distributed import check_dist_params, part_sizes, steps_per_epoch
from gluon_sparse.nn import FullyConnectedSparse
from gluon_sparse.nn.row_sparse_weight import FullyConnectedSparseRowSparseWeight

logger = logging.getLogger("dist_train")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", help="LibSVM file")
    source.add_argument("--synthetic", metavar="ROWS:FEATURES:DENSITY",
                        help="random CSR data, the same on every worker (seeded)")
    parser.add_argument("--num-features", type=int, default=None,
                        help="input width for --data (default: largest index + 1)")
    parser.add_argument("--zero-based", choices=("auto", "true", "false"), default="auto",
                        help="feature indices of --data start at 0 (true) or 1 (false); auto "
                             "decides from the file, as load_libsvm does")
    parser.add_argument("--batch-size", type=int, default=10, help="global batch size")
    parser.add_argument("--steps", type=int, default=None,
                        help="stop after this many steps (default: one pass over the shares)")
    parser.add_argument("--units", type=int, default=128, help="width of the sparse layer")
    parser.add_argument("--first-layer", choices=("row_sparse", "dense"), default=None,
                        help="weight storage of the sparse layer: row_sparse (pulled by rows "
                             "from the kvstore) or dense (FullyConnectedSparse); default: "
                             "row_sparse for dist_* kvstores, dense otherwise")
    parser.add_argument("--optimizer", default="sparseadam",
                        help="optimizer name (sparseadam, sgd, adam, ...); with dist_* it runs "
                             "on the servers")
    parser.add_argument("--lr", type=float, default=0.1, help="learning rate")
    parser.add_argument("--kvstore", default="dist_sync",
                        help="dist_sync, dist_async, local, device or none (one process, "
                             "no kvstore)")
    parser.add_argument("--init-params", help="load the initial parameters from this file")
    parser.add_argument("--seed", type=int, default=0, help="seed of data and initialisation")
    parser.add_argument("--save-dir", help="write params-rank<r>.params and stats-rank<r>.json")
    return parser.parse_args(argv)


def load_data(args):
    """The whole dataset as (float32 CSR, 0/1 labels)."""
    if args.synthetic:
        rows, features, density = args.synthetic.split(":")
        rng = np.random.default_rng(args.seed)
        x = sp.random(int(rows), int(features), density=float(density), format="csr",
                      dtype=np.float32, random_state=rng)
        y = (rng.random(int(rows)) < 0.5).astype(np.float32)
        return x, y
    zero_based = {"auto": "auto", "true": True, "false": False}[args.zero_based]
    x, y = load_libsvm(args.data, num_features=args.num_features, zero_based=zero_based)
    return x, (np.asarray(y) > 0).astype(np.float32)


def build_model(num_features, units, row_sparse_weight):
    """The reference model; structural parameter names ('0.weight', ...) match either way."""
    if row_sparse_weight:
        net = gluon.nn.Sequential()  # the row_sparse layer cannot be hybridized
        first = FullyConnectedSparseRowSparseWeight(units, in_units=num_features,
                                                    activation="sigmoid")
    else:
        net = gluon.nn.HybridSequential()
        first = FullyConnectedSparse(units, in_units=num_features, activation="sigmoid")
    with net.name_scope():
        net.add(first,
                gluon.nn.Dense(8, activation="sigmoid", in_units=units),
                gluon.nn.Dense(1, in_units=8))
    return net


def make_optimizer(name, lr, batch_size):
    import gluon_sparse.optimizer  # noqa: F401 - registers 'sparseadam'
    return mx.optimizer.create(name, learning_rate=lr, rescale_grad=1.0 / batch_size)


def main(argv=None):
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    mx.random.seed(args.seed)
    np.random.seed(args.seed)

    kv = None if args.kvstore == "none" else mx.kv.create(args.kvstore)
    rank, num_workers = (kv.rank, kv.num_workers) if kv is not None else (0, 1)
    x, y = load_data(args)
    num_features = x.shape[1]

    # Every worker reads its strided, equal share of the rows (the loader's
    # PartitionSampler) in local batches that make up one global batch.
    local_sizes = part_sizes(args.batch_size, num_workers)
    share = x.shape[0] // num_workers
    # dist_sync waits for every worker at every step: all must run the same count.
    try:
        steps = steps_per_epoch(x.shape[0], args.batch_size, num_workers)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    if args.steps is not None:
        steps = min(steps, args.steps)
    local_batch = local_sizes[rank]
    loader = SparseDataLoader(CSRDataset(x, y), batch_size=local_batch, num_parts=num_workers,
                              part_index=rank, last_batch="discard")

    first_layer = args.first_layer or ("row_sparse" if "dist" in args.kvstore else "dense")
    row_sparse_weight = first_layer == "row_sparse"
    net = build_model(num_features, args.units, row_sparse_weight)
    if args.init_params:
        net.load_parameters(args.init_params, ctx=mx.cpu())
    else:
        net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    if not row_sparse_weight:
        net.hybridize()
    check_dist_params(net.collect_params(), args.kvstore)
    # dist_*: the servers run the optimizer (pickled to them; the launcher's
    # server entry has gluon-sparse's operator library loaded to run SparseAdam).
    trainer = gluon.Trainer(net.collect_params(),
                            make_optimizer(args.optimizer, args.lr, args.batch_size), kvstore=kv,
                            update_on_kvstore=True if "dist" in args.kvstore else None)
    loss_fn = gluon.loss.SigmoidBinaryCrossEntropyLoss()

    logger.info("rank %d of %d: %d of %d rows, %d steps of %d local rows (global batch %d), "
                "%d features, %s first layer", rank, num_workers, share, x.shape[0], steps,
                local_batch, args.batch_size, num_features, first_layer)
    batches = itertools.islice(loader, steps)
    losses = []
    start = None
    for step, (data, label) in enumerate(batches):
        if step == 1:
            mx.nd.waitall()
            start = time.perf_counter()  # step 0 pays for initialisation
        with autograd.record():
            loss = loss_fn(net(data), label).sum()
        loss.backward()
        trainer.step(1)  # the optimizer already scales by 1 / batch_size
        losses.append(loss)
    mx.nd.waitall()
    seconds = time.perf_counter() - start if start is not None else float("nan")
    timed_samples = args.batch_size * (steps - 1)
    stats = {"rank": rank, "num_workers": num_workers, "steps": steps,
             "seconds": seconds, "samples_per_second": timed_samples / seconds if steps > 1 else 0,
             "loss": [float(l.asscalar()) for l in losses]}
    logger.info("rank %d: %d steps, %.1f samples/s (global), local loss per row %.4f -> %.4f",
                rank, steps, stats["samples_per_second"],
                stats["loss"][0] / local_batch if steps else float("nan"),
                stats["loss"][-1] / local_batch if steps else float("nan"))
    if args.save_dir:
        os.makedirs(args.save_dir, exist_ok=True)
        net.save_parameters(os.path.join(args.save_dir, "params-rank%d.params" % rank))
        with open(os.path.join(args.save_dir, "stats-rank%d.json" % rank), "w") as f:
            json.dump(stats, f)


if __name__ == "__main__":
    main()
