"""Exact top-k prediction over a huge output layer, against scoring every label at once.

For ``L`` labels (weight ``L x H``, bias ``L``) and a batch ``h`` of ``rows x H``,
every candidate returns the ``k`` best labels of each row of ``h W^T + b``:

- ``gluon-sparse top_k_scores``: blocks of ``row_chunk x label_chunk`` scores
  (oneDNN's ``FullyConnected``), each folded into a running top-k by the
  operator ``gluon_sparse_topk`` (a k-entry heap per row); the scores of one
  block are all that exist at a time;
- ``scoring alone``: the same blocks without the merge, the floor any exact
  method pays (the product is ``rows x L x H`` multiply-adds);
- ``MXNet``: all ``rows x L`` scores from one ``FullyConnected``, then
  ``mx.nd.topk`` (which sorts each row), in row chunks of at most 10^8 scores:
  past ~2 GiB its sort's workspace fails to allocate;
- ``NumPy``: ``h @ W.T + b`` (BLAS), ``np.argpartition`` then a sort of the k;
- ``PyTorch`` (when installed): ``torch.topk(torch.addmm(b, h, W.T), k)``.

Each is timed after one warm-up call (median of ``--repeat``), one process,
the same float32 data; the table gives the time, the speed against MXNet and
PyTorch, the
largest score array the method holds, and how many rows' top-k agree with
NumPy's as sets of labels (products summed in another order can swap two labels
whose scores differ in the last bits).

Run: ``flock /tmp/bench.lock python benchmarks/bench_topk.py [--quick]``
(results in benchmarks/results/topk.json).
"""
import argparse
import logging
import os
import sys

import mxnet as mx
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.runner import Table, time_call  # noqa: E402
from gluon_sparse.nn import top_k_scores  # noqa: E402
from gluon_sparse.nn.topk import _block_scores  # noqa: E402

logger = logging.getLogger("gluon_sparse.benchmarks.topk")

HIDDEN, K = 256, 5
MXNET_TOPK_SCORES = 100_000_000


def _loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def numpy_top_k(h, weight, bias, k):
    """Ids (best first) of the k best labels per row, from all the scores at once."""
    scores = h @ weight.T + bias
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(scores, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1)


def agreement(ids, reference):
    """Rows whose k labels are the reference's k labels, as sets."""
    return int(sum(set(a) == set(b) for a, b in zip(np.asarray(ids), reference)))


def bench(num_labels, rows, repeat, row_chunk=1024, label_chunk=16384):
    rng = np.random.default_rng(0)
    h = rng.standard_normal((rows, HIDDEN)).astype(np.float32)
    weight = (rng.standard_normal((num_labels, HIDDEN)) * 0.05).astype(np.float32)
    bias = (rng.standard_normal(num_labels) * 0.1).astype(np.float32)
    nd_h, nd_w, nd_b = mx.nd.array(h), mx.nd.array(weight), mx.nd.array(bias)
    reference = numpy_top_k(h, weight, bias, K)
    block_mb = 4 * min(rows, row_chunk) * min(num_labels, label_chunk) / 2 ** 20
    all_mb = 4 * rows * num_labels / 2 ** 20
    results = []

    def ours():
        return top_k_scores(nd_h, nd_w, nd_b, K, row_chunk=row_chunk, label_chunk=label_chunk)[0]
    results.append(("gluon-sparse top_k_scores", ours, block_mb, agreement(ours(), reference)))

    def scoring_alone():
        for r0 in range(0, rows, row_chunk):
            for l0 in range(0, num_labels, label_chunk):
                r1, l1 = min(r0 + row_chunk, rows), min(l0 + label_chunk, num_labels)
                block = _block_scores(nd_h[r0:r1], nd_w[l0:l1], nd_b[l0:l1])
                block.wait_to_read()
    results.append(("scoring alone, same blocks (no top-k)", scoring_alone, block_mb, "-"))

    # MXNet's topk sorts whole rows, with a workspace that fails to allocate past
    # ~2 GiB ("Failed to allocate CPU Memory": 200 x 10^6 scores fail here, 140 x
    # 10^6 do not), so it gets at most MXNET_TOPK_SCORES scores at a time.
    mx_rows = max(1, min(rows, MXNET_TOPK_SCORES // num_labels))

    def mxnet_topk():
        ids = []
        for r0 in range(0, rows, mx_rows):
            scores = mx.nd.FullyConnected(nd_h[r0:min(r0 + mx_rows, rows)], nd_w, nd_b,
                                          num_hidden=num_labels)
            ids.append(mx.nd.topk(scores, axis=1, k=K, ret_typ="indices", dtype="int64"))
        return np.concatenate([i.asnumpy() for i in ids])
    name = "MXNet FullyConnected + topk" + (
        "" if mx_rows == rows else " (%d rows at a time)" % mx_rows)
    results.append((name, mxnet_topk, 4 * mx_rows * num_labels / 2 ** 20,
                    agreement(mxnet_topk(), reference)))

    results.append(("NumPy matmul + argpartition", lambda: numpy_top_k(h, weight, bias, K),
                    all_mb, rows))
    try:
        import torch
    except ImportError:
        logger.info("PyTorch is not installed: its column is skipped (pip install "
                    "'gluon-sparse[peers]')")
    else:
        th, tw, tb = torch.from_numpy(h), torch.from_numpy(weight), torch.from_numpy(bias)

        def torch_topk():
            return torch.topk(torch.addmm(tb, th, tw.T), K, dim=1).indices.numpy()
        results.append(("PyTorch addmm + topk", torch_topk, all_mb,
                        agreement(torch_topk(), reference)))

    timed = [(name, time_call(fn, repeat=repeat, warmup=1, sync=mx.nd.waitall)["median"], mb,
              agree) for name, fn, mb, agree in results]
    seconds = {name.split(" (")[0]: s for name, s, _, _ in timed}  # MXNet's name has its chunk
    mxnet_s, torch_s = seconds["MXNet FullyConnected + topk"], seconds.get("PyTorch addmm + topk")
    return [{"labels": num_labels, "rows": rows, "method": name, "seconds": s,
             "vs_mxnet": mxnet_s / s,
             "vs_pytorch": "n/a" if torch_s is None else torch_s / s, "largest_scores_mb": mb,
             "rows_agreeing_with_numpy": agree, "loadavg": _loadavg()}
            for name, s, mb, agree in timed]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10^5 labels only, 2 repeats")
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    table = Table("topk", ["labels", "rows", "method", "seconds", "vs_mxnet", "vs_pytorch",
                           "largest_scores_mb", "rows_agreeing_with_numpy", "loadavg"])
    for num_labels in ([100_000] if args.quick else [100_000, 1_000_000]):
        for row in bench(num_labels, args.rows, 2 if args.quick else args.repeat):
            table.add(**row)
    table.save()


if __name__ == "__main__":
    main()
