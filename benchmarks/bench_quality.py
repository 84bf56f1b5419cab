"""Quality: held-out AUC of standard Adam (gluon-sparse) vs lazy Adam (MXNet, PyTorch).

Lazy Adam updates only the rows a batch holds; standard Adam moves every row
every step (momentum keeps moving an absent row, and with weight decay its
``g = wd * w`` decays it). The maths differ most with weight decay. Lazy Adam's
accuracy cost is documented elsewhere (MXNet issue 17728: DCN on Criteo 0.802
with dense Adam vs 0.794 with lazy row_sparse Adam); this benchmark shows what
it is on the CTR-like workload, with a planted signal so that the best
achievable AUC is known.

Data (one NumPy generator per seed; every optimizer trains on the same bytes):
batches of 512 rows x 40 distinct feature ids, Zipf(1.1) over ``--features``
ids (rank -> id through a fixed random permutation; an id repeated within a
row is redrawn, so the head ids are in nearly every row), values 1. Labels come
from a known sparse logistic model: ``P(y=1) = sigmoid(sum_i w*_i x_i / sqrt(40))``
with ``w*_i ~ N(0, 1)`` per feature. The held-out set is ``--eval-batches``
more batches from the same generator; its *Bayes AUC* (the planted model's own
margins as scores) is the ceiling.

Model (the same initial weights, drawn from the seed, in every framework):
``--model mlp``: sum_i x_i W_i + b -> sigmoid -> Dense(8) -> sigmoid -> Dense(1),
W of shape (features, 128) (the model of bench_peers); ``--model logistic``:
sum_i x_i W_i + b with W of shape (features, 1), which is the planted model's
own family, so any AUC gap is the optimizer's and not the model's.

Optimizers, all Adam(lr, beta1 0.9, beta2 0.999, eps 1e-8) with L2 weight decay
``wd`` added to the gradient (MXNet's convention) and one step per batch:

* gluon-sparse ``SparseAdam(deferred=True)``: standard Adam, every row every step;
* MXNet ``Adam(lazy_update=True)``: lazy Adam, wd on the batch's rows only;
* with ``--mxnet-standard``, MXNet ``Adam(lazy_update=False)``: standard Adam
  again (a dense update of every row), a cross-check of the first;
* PyTorch ``EmbeddingBag(mode='sum', sparse=True)`` + ``SparseAdam`` for W
  (lazy; SparseAdam has no weight decay, so ``wd * W[rows]`` is added to the
  coalesced sparse gradient of the batch's rows, as MXNet's lazy Adam does) and
  ``Adam(weight_decay=wd)`` for the dense parameters. Skipped with a message
  when torch is not installed (optional extra ``peers``).

Prints mean +- std of the held-out AUC over the seeds per optimizer and wd,
and the mean paired difference (standard - lazy, same seed, same data).

Run: ``python benchmarks/bench_quality.py [--features 100000] [--steps 1000] [--seeds 0 1 2]``
"""
import argparse
import logging
import os
import sys
import time

import numpy as np
from sklearn.metrics import roc_auc_score

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.runner import Table  # noqa: E402

logger = logging.getLogger("gluon_sparse.benchmarks.quality")

ROWS, NNZ, ZIPF_EXPONENT, HIDDEN = 512, 40, 1.1, 128
STANDARD = "gluon-sparse SparseAdam deferred (standard)"
MX_LAZY = "MXNet Adam lazy_update=True (lazy)"
TORCH_LAZY = "PyTorch EmbeddingBag(sparse)+SparseAdam (lazy)"
MX_STANDARD = "MXNet Adam lazy_update=False (standard)"


# ------------------------------------------------------------------ data
class CtrData:
    """The training and held-out batches of one seed, and the planted model.

    Attributes
    ----------
    train : list of (ids, labels)
        ``ids``: (512, 40) int64, sorted and distinct in each row; ``labels``: (512,) float32.
    eval_ids, eval_labels : numpy.ndarray
        The held-out rows.
    bayes_auc : float
        AUC of the planted model's margins on the held-out rows (the ceiling).
    """

    def __init__(self, features, steps, eval_batches, seed):
        rng = np.random.default_rng(seed)
        ranks = np.arange(1, features + 1, dtype=np.float64)
        cdf = np.cumsum(ranks ** -ZIPF_EXPONENT)
        self._cdf = cdf / cdf[-1]
        self._id_of_rank = rng.permutation(features).astype(np.int64)
        self.features = features
        self.planted = rng.standard_normal(features)
        batches = [self._batch(rng) for _ in range(steps + eval_batches)]
        self.train = batches[:steps]
        self.eval_ids = np.concatenate([ids for ids, _, _ in batches[steps:]])
        self.eval_labels = np.concatenate([labels for _, labels, _ in batches[steps:]])
        eval_margins = np.concatenate([margin for _, _, margin in batches[steps:]])
        self.bayes_auc = roc_auc_score(self.eval_labels, eval_margins)
        self.train = [(ids, labels) for ids, labels, _ in self.train]

    def _draw(self, rng, size):
        ranks = np.searchsorted(self._cdf, rng.random(size), side="right")
        return self._id_of_rank[np.minimum(ranks, self.features - 1)]

    def _batch(self, rng):
        ids = np.sort(self._draw(rng, (ROWS, NNZ)), axis=1)
        while True:  # redraw repeated ids within a row until every row has 40 distinct ids
            repeated = np.zeros(ids.shape, bool)
            repeated[:, 1:] = ids[:, 1:] == ids[:, :-1]
            if not repeated.any():
                break
            ids[repeated] = self._draw(rng, int(repeated.sum()))
            ids.sort(axis=1)
        margin = self.planted[ids].sum(axis=1) / np.sqrt(NNZ)
        labels = (rng.random(ROWS) < 1 / (1 + np.exp(-margin))).astype(np.float32)
        return ids, labels, margin


def initial_weights(model, features, seed):
    """(W, b, and for the MLP W1 (8, 128), b1, W2 (1, 8), b2) as float32 NumPy arrays."""
    rng = np.random.default_rng(10_000 + seed)
    units = HIDDEN if model == "mlp" else 1
    weights = [rng.normal(0.0, 0.01, (features, units)), np.zeros(units)]
    if model == "mlp":
        for fan_in, fan_out in ((HIDDEN, 8), (8, 1)):
            limit = np.sqrt(6.0 / (fan_in + fan_out))  # Xavier uniform
            weights += [rng.uniform(-limit, limit, (fan_out, fan_in)), np.zeros(fan_out)]
    return [w.astype(np.float32) for w in weights]


# ------------------------------------------------------------------ MXNet / gluon-sparse
def _mx_csr(ids, features):
    import mxnet as mx
    rows = ids.shape[0]
    indptr = np.arange(0, ids.size + 1, ids.shape[1], dtype=np.int64)
    return mx.nd.sparse.csr_matrix((np.ones(ids.size, np.float32), ids.ravel(), indptr),
                                   shape=(rows, features))


def train_mxnet(name, model, data, init, lr, wd, eval_chunk=8192):
    """Train with gluon-sparse's standard or MXNet's lazy or standard Adam; return the
    held-out scores."""
    import mxnet as mx
    from mxnet import autograd, gluon
    from gluon_sparse.nn import FullyConnectedSparse
    from gluon_sparse.optimizer import SparseAdam, deferred

    net = gluon.nn.HybridSequential()
    if model == "mlp":
        net.add(FullyConnectedSparse(HIDDEN, activation="sigmoid", in_units=data.features),
                gluon.nn.Dense(8, activation="sigmoid", in_units=HIDDEN),
                gluon.nn.Dense(1, in_units=8))
    else:
        net.add(FullyConnectedSparse(1, in_units=data.features))
    net.initialize()
    for param, value in zip(net.collect_params().values(), init):
        param.set_data(mx.nd.array(value))
    net.hybridize()
    if name == STANDARD:
        optimizer = SparseAdam(learning_rate=lr, wd=wd, deferred=True)
    else:
        optimizer = mx.optimizer.Adam(learning_rate=lr, wd=wd, lazy_update=name == MX_LAZY)
    trainer = gluon.Trainer(net.collect_params(), optimizer)
    loss_fn = gluon.loss.SigmoidBinaryCrossEntropyLoss()
    for ids, labels in data.train:
        with autograd.record():
            loss = loss_fn(net(_mx_csr(ids, data.features)), mx.nd.array(labels))
        loss.backward()
        trainer.step(ids.shape[0])
    if name == STANDARD:
        deferred.flush(trainer)  # every row up to the last step before reading the weights
    scores = [net(_mx_csr(data.eval_ids[i:i + eval_chunk], data.features)).asnumpy().ravel()
              for i in range(0, len(data.eval_ids), eval_chunk)]
    return np.concatenate(scores)


# ------------------------------------------------------------------ PyTorch
def train_torch(model, data, init, lr, wd):
    """EmbeddingBag(sparse=True) + SparseAdam (lazy Adam); return the held-out scores."""
    import torch
    torch.set_num_threads(2)
    units = HIDDEN if model == "mlp" else 1
    embedding = torch.nn.EmbeddingBag(data.features, units, mode="sum", sparse=True)
    dense = [torch.nn.Parameter(torch.from_numpy(init[1]))]
    with torch.no_grad():
        embedding.weight.copy_(torch.from_numpy(init[0]))
    layers = []
    if model == "mlp":
        layers = [torch.nn.Linear(HIDDEN, 8), torch.nn.Linear(8, 1)]
        with torch.no_grad():
            for layer, (w, b) in zip(layers, (init[2:4], init[4:6])):
                layer.weight.copy_(torch.from_numpy(w))
                layer.bias.copy_(torch.from_numpy(b))
        dense += [p for layer in layers for p in layer.parameters()]

    def forward(ids):
        ids = torch.from_numpy(ids)
        offsets = torch.arange(0, ids.numel(), ids.shape[1])
        h = embedding(ids.reshape(-1), offsets) + dense[0]
        if model == "mlp":
            h = layers[1](torch.sigmoid(layers[0](torch.sigmoid(h))))
        return h.squeeze(1)

    sparse_opt = torch.optim.SparseAdam([embedding.weight], lr=lr)
    dense_opt = torch.optim.Adam(dense, lr=lr, weight_decay=wd)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    for ids, labels in data.train:
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        loss_fn(forward(ids), torch.from_numpy(labels)).backward()
        if wd > 0:
            # SparseAdam has no weight decay: add wd * W to the batch's rows, as MXNet's lazy Adam.
            grad = embedding.weight.grad.coalesce()
            rows = grad.indices()[0]
            embedding.weight.grad = torch.sparse_coo_tensor(
                grad.indices(), grad.values() + wd * embedding.weight.detach()[rows], grad.shape)
        sparse_opt.step()
        dense_opt.step()
    with torch.no_grad():
        return forward(data.eval_ids).numpy()


# ------------------------------------------------------------------ main
def optimizers(mxnet_standard=False):
    """The candidates this machine can run (PyTorch is optional)."""
    names = [STANDARD, MX_LAZY] + ([MX_STANDARD] if mxnet_standard else [])
    try:
        import torch  # noqa: F401
        names.append(TORCH_LAZY)
    except ImportError:
        logger.warning("PyTorch is not installed (optional extra 'peers'): skipping %s",
                       TORCH_LAZY)
    return names


def summarize(aucs, names, wds, seeds):
    """Rows of the result table: mean +- std per (wd, optimizer), paired difference to standard."""
    rows = []
    for wd in wds:
        standard = np.array([aucs[wd, STANDARD, s] for s in seeds])
        for name in names:
            auc = np.array([aucs[wd, name, s] for s in seeds])
            diff = standard - auc
            rows.append({"wd": wd, "optimizer": name,
                         "held-out AUC (mean +- std)": "%.4f +- %.4f" % (auc.mean(), auc.std()),
                         "standard - this (paired, mean +- std)":
                             "-" if name == STANDARD else "%+.4f +- %.4f" % (diff.mean(),
                                                                             diff.std()),
                         "per seed": " ".join("%.4f" % a for a in auc)})
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=int, default=100_000,
                        help="feature ids (default 10^5; the issue's CTR shape has 10^6)")
    parser.add_argument("--steps", type=int, default=1000, help="training batches (default 1000)")
    parser.add_argument("--eval-batches", type=int, default=40,
                        help="held-out batches of 512 rows (default 40)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--wds", type=float, nargs="+", default=[0.0, 1e-4])
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--model", choices=("mlp", "logistic"), default="mlp")
    parser.add_argument("--mxnet-standard", action="store_true",
                        help="also MXNet's standard Adam (lazy_update=False: every row every "
                             "step, slow): a cross-check that gluon-sparse's AUC is standard "
                             "Adam's")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from tqdm import tqdm

    names = optimizers(args.mxnet_standard)
    aucs, bayes = {}, []
    runs = tqdm(total=len(args.seeds) * len(args.wds) * len(names), desc="runs")
    for seed in args.seeds:
        data = CtrData(args.features, args.steps, args.eval_batches, seed)
        bayes.append(data.bayes_auc)
        init = initial_weights(args.model, args.features, seed)
        for wd in args.wds:
            for name in names:
                start = time.perf_counter()
                if name == TORCH_LAZY:
                    scores = train_torch(args.model, data, init, args.lr, wd)
                else:
                    scores = train_mxnet(name, args.model, data, init, args.lr, wd)
                aucs[wd, name, seed] = roc_auc_score(data.eval_labels, scores)
                logger.info("seed %d, wd %g, %s: AUC %.4f (%.0f s)", seed, wd, name,
                            aucs[wd, name, seed], time.perf_counter() - start)
                runs.update()
        del data
    runs.close()

    record = "quality_%s%s" % (args.model, "_mxnet_standard" if args.mxnet_standard else "")
    table = Table(record, ["wd", "optimizer", "held-out AUC (mean +- std)",
                           "standard - this (paired, mean +- std)", "per seed"])
    for row in summarize(aucs, names, args.wds, args.seeds):
        table.add(**row)
    table.meta.update({"features": args.features, "steps": args.steps, "batch": ROWS,
                       "nnz_per_row": NNZ, "zipf": ZIPF_EXPONENT, "model": args.model,
                       "lr": args.lr, "seeds": args.seeds, "eval_rows": args.eval_batches * ROWS,
                       "bayes_auc": "%.4f +- %.4f" % (np.mean(bayes), np.std(bayes)),
                       "loadavg": open("/proc/loadavg").read().split()[:3]})
    table.save()
    print("\nBayes AUC (planted model) %s; %d features, %d steps of %d x %d, model %s"
          % (table.meta["bayes_auc"], args.features, args.steps, ROWS, NNZ, args.model))


if __name__ == "__main__":
    main()
