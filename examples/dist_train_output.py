"""Data-parallel training of a network with a huge output layer, dense or sampled.

Run it under the launcher, one process per worker, or alone on several devices::

    gluon-sparse launch -n 2 -s 1 -- python examples/dist_train_output.py \\
        --synthetic 4096:100000:200000 --output sampled
    python examples/dist_train_output.py --synthetic 4096:100000:200000 --kvstore device \\
        --contexts 2

The model: ``FullyConnectedSparse(hidden, relu)`` on the CSR input, then the
output over ``num_labels`` labels: ``SampledOutput`` (``--output sampled``:
the batch's positives plus ``--num-sampled`` negatives) or ``Dense(num_labels)``
with the full softmax cross-entropy (``--output dense``, multi-class only).
With a kvstore (``dist_*``, or ``device`` / ``local`` with ``--contexts``)
the input layer is ``FullyConnectedSparseRowSparseWeight`` and the sampled
output ``SampledOutputRowSparseWeight``: their weights live in the kvstore and
each step pulls only the rows of the batch's features and candidate labels.
Without one (``--kvstore none``) the plain blocks train on one device.

Data parallelism: global batch ``k`` is rows ``k B .. (k + 1) B - 1`` of the
data (``B = --batch-size``); worker ``r`` takes the ``r``-th of
``part_sizes(B, workers)`` consecutive parts of it and splits that over its
contexts the same way. Every worker reads the labels of the whole global
batch (not its features) and draws the candidates from them with the same
seed (``draw_candidates``), so all parts score the same candidates and the
summed gradients are those of one device on the whole batch. The loss is
summed and the optimizer scales gradients by ``1 / B`` (``trainer.step(1)``).

``--count-steps M`` runs ``M`` more steps after the timed ones and counts the
bytes the kvstore moves on them (:class:`gluon_sparse.distributed.KVStoreTraffic`);
``--save-dir`` gets ``params-rank<r>.params`` and ``stats-rank<r>.json``.
"""
import argparse
import json
import logging
import os
import time

import mxnet as mx
import numpy as np
import scipy.sparse as sp
from mxnet import autograd, gluon

from gluon_sparse.distributed import KVStoreTraffic, check_dist_params, part_sizes
from gluon_sparse.nn import (FullyConnectedSparse, FullyConnectedSparseRowSparseWeight,
                             SampledOutput, SampledOutputRowSparseWeight)

logger = logging.getLogger("dist_train_output")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--synthetic", metavar="ROWS:FEATURES:LABELS",
                        help="random CSR rows and log-uniform class labels (seeded: the same "
                             "on every worker)")
    source.add_argument("--data", metavar="X.npz",
                        help="CSR input saved with scipy.sparse.save_npz (needs --labels)")
    parser.add_argument("--labels", metavar="Y.npy|Y.npz",
                        help="class ids (.npy, int) or a CSR label indicator (.npz, multi-label)")
    parser.add_argument("--nnz-per-row", type=int, default=40,
                        help="non-zeros per synthetic row")
    parser.add_argument("--hidden", type=int, default=512, help="width of the hidden layer")
    parser.add_argument("--output", choices=("sampled", "dense"), default="sampled")
    parser.add_argument("--num-sampled", type=int, default=1024)
    parser.add_argument("--sampler", default="log_uniform")
    parser.add_argument("--loss", choices=("softmax", "bce"), default="softmax")
    parser.add_argument("--batch-size", type=int, default=256, help="global batch size")
    parser.add_argument("--steps", type=int, default=5, help="timed steps (after one warm-up)")
    parser.add_argument("--count-steps", type=int, default=0,
                        help="further steps on which the kvstore's bytes are counted")
    parser.add_argument("--optimizer", default="sgd", help="sgd, sparseadam, adam, ...")
    parser.add_argument("--deferred", action="store_true",
                        help="SparseAdam(deferred=True) (runs eagerly where a kvstore holds "
                             "the weights)")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--kvstore", default="dist_sync",
                        help="dist_sync, device, local or none (one device, plain blocks)")
    parser.add_argument("--contexts", type=int, default=1,
                        help="CPU contexts of this process (cpu(0), cpu(1), ...)")
    parser.add_argument("--init-params", help="load the initial parameters from this file")
    parser.add_argument("--seed", type=int, default=0, help="seed of data, init and sampler")
    parser.add_argument("--save-dir")
    args = parser.parse_args(argv)
    if args.data and not args.labels:
        parser.error("--data needs --labels")
    if args.kvstore == "none" and args.contexts != 1:
        parser.error("several contexts need a kvstore (device or local)")
    return args


def load_data(args):
    """``(x, labels)``: float32 CSR rows and class ids or a CSR label indicator."""
    if args.data:
        x = sp.load_npz(args.data).tocsr().astype(np.float32)
        y = sp.load_npz(args.labels).tocsr() if args.labels.endswith(".npz") \
            else np.load(args.labels)
        return x, y
    rows, features, labels = (int(v) for v in args.synthetic.split(":"))
    rng = np.random.default_rng(args.seed)
    indices = rng.integers(0, features, size=(rows, args.nnz_per_row))
    indices.sort(axis=1)
    x = sp.csr_matrix((np.ones(indices.size, np.float32), indices.ravel(),
                       np.arange(0, indices.size + 1, args.nnz_per_row)), shape=(rows, features))
    x.sum_duplicates()
    # Log-uniform (Zipf-like) class ids, the frequency profile the default sampler assumes.
    y = (np.exp(rng.random(rows) * np.log(labels + 1)) - 1).astype(np.int64).clip(0, labels - 1)
    return x, y


def build_model(args, num_features, num_labels, in_kvstore):
    """Input layer and output block in a Sequential (structural names '0.weight', '1.weight')."""
    net = gluon.nn.Sequential()
    with net.name_scope():
        if in_kvstore:
            hidden = FullyConnectedSparseRowSparseWeight(args.hidden, in_units=num_features,
                                                         activation="relu")
        else:
            hidden = FullyConnectedSparse(args.hidden, in_units=num_features, activation="relu")
        if args.output == "dense":
            output = gluon.nn.Dense(num_labels, in_units=args.hidden)
        else:
            block = SampledOutputRowSparseWeight if in_kvstore else SampledOutput
            output = block(num_labels, in_units=args.hidden, num_sampled=args.num_sampled,
                           sampler=args.sampler, loss=args.loss, seed=args.seed)
        net.add(hidden, output)
    return net


def make_optimizer(args):
    import gluon_sparse.optimizer  # noqa: F401 - registers 'sparseadam'
    kwargs = {"learning_rate": args.lr, "rescale_grad": 1.0 / args.batch_size}
    if args.deferred:
        kwargs["deferred"] = True
    return mx.optimizer.create(args.optimizer, **kwargs)


def bounds(sizes):
    edges = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    return list(zip(edges[:-1], edges[1:]))


class Step:
    """One training step of this process's part of each global batch."""

    def __init__(self, args, net, x, y, contexts, rank, num_workers):
        self.args, self.net, self.x, self.y = args, net, x, y
        self.contexts = contexts
        self.worker_rows = bounds(part_sizes(args.batch_size, num_workers))[rank]
        self.loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def __call__(self, step, trainer):
        start = step * self.args.batch_size
        hidden, output = self.net[0], self.net[1]
        lo, hi = self.worker_rows
        local = range(start + lo, start + hi)
        ctx_rows = bounds(part_sizes(hi - lo, len(self.contexts)))
        if isinstance(output, SampledOutputRowSparseWeight):
            global_labels = self.y[start:start + self.args.batch_size]
            labels = output.draw_candidates(global_labels).rows(lo, hi).split(
                [b - a for a, b in ctx_rows])
        elif self.args.output == "sampled":  # one device, the whole batch
            labels = [self.y[start:start + self.args.batch_size]]
        else:
            labels = [mx.nd.array(self.y[local.start + a:local.start + b], ctx=ctx)
                      for (a, b), ctx in zip(ctx_rows, self.contexts)]
        with autograd.record():
            losses = []
            for (a, b), ctx, label in zip(ctx_rows, self.contexts, labels):
                data = mx.nd.sparse.csr_matrix(self.x[local.start + a:local.start + b], ctx=ctx)
                h = hidden(data)
                loss = output(h, label) if self.args.output == "sampled" \
                    else self.loss_fn(output(h), label)
                losses.append(loss.sum())
        autograd.backward(losses)
        trainer.step(1)  # the optimizer scales by 1 / global batch size
        return losses


def main(argv=None):
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    mx.random.seed(args.seed)
    kv = None if args.kvstore == "none" else mx.kv.create(args.kvstore)
    distributed = kv is not None and "dist" in kv.type
    rank, num_workers = (kv.rank, kv.num_workers) if distributed else (0, 1)
    contexts = [mx.cpu(i) for i in range(args.contexts)]
    x, y = load_data(args)
    if args.output == "dense" and sp.issparse(y):
        raise SystemExit("--output dense trains class ids (softmax); give .npy labels")
    num_labels = y.shape[1] if sp.issparse(y) else int(y.max()) + 1
    if args.synthetic:
        num_labels = int(args.synthetic.split(":")[2])
    total_steps = 1 + args.steps + args.count_steps
    if total_steps * args.batch_size > x.shape[0]:
        raise SystemExit("%d steps of %d rows need %d rows; the data has %d"
                         % (total_steps, args.batch_size, total_steps * args.batch_size,
                            x.shape[0]))

    net = build_model(args, x.shape[1], num_labels, in_kvstore=kv is not None)
    if args.init_params:
        net.load_parameters(args.init_params, ctx=contexts)
    else:
        net.initialize(mx.init.Xavier(), ctx=contexts)
    params = net.collect_params()
    check_dist_params(params, kv if kv is not None else "none")
    trainer = gluon.Trainer(params, make_optimizer(args), kvstore=kv,
                            update_on_kvstore=True if distributed else None)
    step = Step(args, net, x, y, contexts, rank, num_workers)
    logger.info("rank %d of %d, %d context(s): %s output over %d labels, hidden %d, global "
                "batch %d", rank, num_workers, len(contexts), args.output, num_labels,
                args.hidden, args.batch_size)

    losses = [float(sum(l.asscalar() for l in step(0, trainer)))]  # warm-up: initialisation
    mx.nd.waitall()
    began = time.perf_counter()
    for i in range(1, 1 + args.steps):
        losses.append(step(i, trainer))
    mx.nd.waitall()
    seconds = (time.perf_counter() - began) / max(args.steps, 1)
    losses[1:] = [float(sum(l.asscalar() for l in ls)) for ls in losses[1:]]
    bytes_per_step = {}
    if args.count_steps and kv is not None:
        traffic = KVStoreTraffic(kv, names=params)
        for i in range(1 + args.steps, total_steps):
            losses.append(float(sum(l.asscalar() for l in step(i, trainer))))
        mx.nd.waitall()
        traffic.close()
        for direction, table in (("pushed", traffic.pushed), ("pulled", traffic.pulled)):
            bytes_per_step[direction] = {k: v / args.count_steps for k, v in table.items()}
    stats = {"rank": rank, "num_workers": num_workers, "contexts": len(contexts),
             "output": args.output, "seconds_per_step": seconds,
             "samples_per_second": args.batch_size / seconds, "loss": losses,
             "bytes_per_step": bytes_per_step}
    logger.info("rank %d: %.1f ms a step, %.0f samples/s (global)", rank, 1000 * seconds,
                stats["samples_per_second"])
    if args.save_dir:
        os.makedirs(args.save_dir, exist_ok=True)
        net.save_parameters(os.path.join(args.save_dir, "params-rank%d.params" % rank))
        with open(os.path.join(args.save_dir, "stats-rank%d.json" % rank), "w") as f:
            json.dump(stats, f)


if __name__ == "__main__":
    main()
