"""Step time of standard Adam in gluon-sparse against its peers: MXNet and PyTorch.

Model (every framework): y = sigmoid(Dense(1)(sigmoid(Dense(8)(sigmoid(sum_i x_i W_i + b)))))
with W of shape (features, 128), sigmoid binary cross-entropy, trained on the
same batches (``benchmarks.workloads.peer_batches``, one seeded generator):

* ``seed``: batch 10 x 10 non-zeros, uniform ids, at 10^5, 10^6, 4x10^6, 10^7 features;
* ``ctr``: batch 512 x 40 non-zeros, Zipf(1.1) ids, 10^6 features.

Candidates:

* gluon-sparse: FullyConnectedSparse + SparseAdam(deferred=True) and SparseAdam
  eager (both standard Adam), hybridized;
* MXNet: its own ``sparse.dot`` (row_sparse weight gradient) + Adam,
  lazy_update=True (lazy Adam) and False (standard Adam), hybridized;
* PyTorch (optional extra ``peers``: ``pip install 'gluon-sparse[peers]'``,
  skipped with a message when torch is absent): EmbeddingBag(mode='sum',
  sparse=True, per_sample_weights) + SparseAdam (lazy Adam; Adam for the dense
  layers), and a dense EmbeddingBag + Adam(fused=True) (standard Adam).

Each configuration runs in its own process, one after the other, with 2
threads: torch.set_num_threads(2); OMP_NUM_THREADS=2 for the MXNet baselines
(MXNet 1.9.1 otherwise gives its operators half the CPUs); gluon-sparse runs
with no threading variable at all (the defaults are its fast path). After a
warm-up (600 steps by default) every step is timed alone, up to the end of its
asynchronous work, over a long steady-state run; the table gives the average
AND the minimum per step, and the ratios of the averages to PyTorch's lazy
step and MXNet's lazy step. Candidates that stream the whole weight every step
(eager / standard / dense Adam) reach their steady state at once: they get a
short warm-up and a few timed steps; MXNet's standard Adam is skipped from
4x10^6 features (over a second a step), and a configuration whose memory does
not fit the machine's available memory is skipped, with a message.

Run: ``python benchmarks/bench_peers.py [--quick] [--workloads seed:1e5,ctr:1e6]``
"""
import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.runner import RESULTS_DIR, Table, available_bytes  # noqa: E402
from benchmarks.workloads import peer_batches  # noqa: E402

logger = logging.getLogger("gluon_sparse.benchmarks.peers")

HIDDEN = 128
LEARNING_RATE = 1e-3
DEFAULT_WORKLOADS = "seed:1e5,seed:1e6,seed:4e6,seed:1e7,ctr:1e6"
THREADS = 2
# (name, framework, weight-sized arrays it keeps, streams the whole weight every step?)
CANDIDATES = [
    ("gluon-sparse deferred SparseAdam (standard)", "gluon-sparse", 1, False),
    ("gluon-sparse eager SparseAdam (standard)", "gluon-sparse", 3, True),
    ("MXNet lazy Adam", "mxnet", 3, False),
    ("MXNet standard Adam", "mxnet", 3, True),
    ("PyTorch EmbeddingBag(sparse)+SparseAdam (lazy)", "torch", 3, False),
    ("PyTorch dense EmbeddingBag+Adam(fused) (standard)", "torch", 4, True),
]
DEFERRED, EAGER, MX_LAZY, MX_STANDARD, TORCH_LAZY, TORCH_DENSE = (c[0] for c in CANDIDATES)
MXNET_STANDARD_MAX_FEATURES = 1_000_000


# ------------------------------------------------------------------ workers
def _mxnet_trainer(name, features):
    import mxnet as mx
    from mxnet import gluon
    if name in (DEFERRED, EAGER):
        from gluon_sparse.nn import FullyConnectedSparse
        from gluon_sparse.optimizer import SparseAdam
        first = FullyConnectedSparse(HIDDEN, activation="sigmoid", in_units=features)
        optimizer = SparseAdam(learning_rate=LEARNING_RATE, deferred=name == DEFERRED)
    else:
        from benchmarks.bench_scale import MXNetSparseDot
        first = MXNetSparseDot(HIDDEN, features)
        optimizer = mx.optimizer.Adam(learning_rate=LEARNING_RATE, lazy_update=name == MX_LAZY)
    net = gluon.nn.HybridSequential()
    net.add(first, gluon.nn.Dense(8, activation="sigmoid", in_units=HIDDEN),
            gluon.nn.Dense(1, in_units=8))
    net.initialize(mx.init.Uniform(0.01))
    net.hybridize(static_alloc=True, static_shape=True)
    loss_fn = gluon.loss.SigmoidBinaryCrossEntropyLoss()
    loss_fn.hybridize(static_alloc=True, static_shape=True)
    return net, loss_fn, gluon.Trainer(net.collect_params(), optimizer)


def mxnet_step_fn(name, features, raw):
    """A function running one training step of an MXNet-based candidate (waits for it)."""
    import mxnet as mx
    from mxnet import autograd
    logging.getLogger("mxnet").setLevel(logging.ERROR)  # lazy Adam's "not standard" warning
    net, loss_fn, trainer = _mxnet_trainer(name, features)
    batches = [(mx.nd.sparse.csr_matrix((v, i, p), shape=(len(p) - 1, features)),
                mx.nd.array(y.reshape(-1, 1))) for p, i, v, y in raw]

    def step(k):
        x, y = batches[k % len(batches)]
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(x.shape[0])
        mx.nd.waitall()
    return step


def torch_step_fn(name, features, raw):
    """A function running one training step of a PyTorch candidate."""
    import torch
    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    sparse = name == TORCH_LAZY
    bag = torch.nn.EmbeddingBag(features, HIDDEN, mode="sum", sparse=sparse)
    torch.nn.init.uniform_(bag.weight, -0.01, 0.01)
    bias = torch.nn.Parameter(torch.zeros(HIDDEN))
    head = torch.nn.Sequential(torch.nn.Linear(HIDDEN, 8), torch.nn.Sigmoid(),
                               torch.nn.Linear(8, 1))
    dense_params = [bias] + list(head.parameters())
    if sparse:
        optimizers = [torch.optim.SparseAdam([bag.weight], lr=LEARNING_RATE),
                      torch.optim.Adam(dense_params, lr=LEARNING_RATE)]
    else:
        optimizers = [torch.optim.Adam([bag.weight] + dense_params, lr=LEARNING_RATE,
                                       fused=True)]
    loss_fn = torch.nn.BCEWithLogitsLoss()
    batches = [(torch.from_numpy(i), torch.from_numpy(p[:-1]), torch.from_numpy(v),
                torch.from_numpy(y.reshape(-1, 1))) for p, i, v, y in raw]

    def step(k):
        ids, offsets, values, y = batches[k % len(batches)]
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        hidden = torch.sigmoid(bag(ids, offsets, per_sample_weights=values) + bias)
        loss_fn(head(hidden), y).backward()
        for opt in optimizers:
            opt.step()
    return step


def run_worker(args):
    """Time one candidate on one workload in this process; write a JSON result."""
    name = CANDIDATES[args.candidate][0]
    workload, features = args.workload.split(":")
    features = int(float(features))
    raw = peer_batches(workload, features, args.batches, seed=args.seed)
    start = time.perf_counter()
    make = torch_step_fn if CANDIDATES[args.candidate][1] == "torch" else mxnet_step_fn
    step = make(name, features, raw)
    setup_s = time.perf_counter() - start
    start = time.perf_counter()
    for k in range(args.warmup):
        step(k)
    warmup_s = time.perf_counter() - start
    times = np.empty(args.steps)
    for k in range(args.steps):
        begin = time.perf_counter()
        step(args.warmup + k)
        times[k] = time.perf_counter() - begin
    # Quarter by quarter: a steady state shows flat averages.
    quarters = [float(q.mean() * 1e3) for q in np.array_split(times, 4)]
    result = {"avg_ms": float(times.mean() * 1e3), "min_ms": float(times.min() * 1e3),
              "p50_ms": float(np.median(times) * 1e3), "quarters_avg_ms": quarters,
              "steps": args.steps, "warmup": args.warmup, "setup_s": setup_s,
              "warmup_avg_ms": warmup_s / max(args.warmup, 1) * 1e3}
    with open(args.out, "w") as f:
        json.dump(result, f)


# ------------------------------------------------------------------ driver
def torch_available():
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def skip_reason(name, framework, arrays, features, have_torch):
    if framework == "torch" and not have_torch:
        return ("PyTorch is not installed (optional extra: pip install "
                "'gluon-sparse[peers]')")
    if name == MX_STANDARD and features > MXNET_STANDARD_MAX_FEATURES:
        return "over a second a step from 4x10^6 features (streams 3 weight-sized arrays)"
    need = arrays * features * HIDDEN * 4 + 1.5 * 2 ** 30
    if need > available_bytes():
        return "needs %.1f GB, %.1f GB available" % (need / 1e9, available_bytes() / 1e9)
    return None


def environment(framework):
    env = dict(os.environ)
    pythonpath = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    if framework == "mxnet":
        env["OMP_NUM_THREADS"] = str(THREADS)
    elif framework == "gluon-sparse":
        # No threading variable: gluon-sparse's defaults must be its fast path.
        for var in ("OMP_NUM_THREADS", "MXNET_OMP_MAX_THREADS", "GOMP_SPINCOUNT"):
            env.pop(var, None)
    return env


def run_candidate(index, workload, args):
    name, framework, _, streams = CANDIDATES[index]
    warmup, steps = (args.slow_warmup, args.slow_steps) if streams else (args.warmup, args.steps)
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--candidate", str(index),
               "--workload", workload, "--warmup", str(warmup), "--steps", str(steps),
               "--batches", str(args.batches), "--seed", str(args.seed), "--out", out.name]
        proc = subprocess.run(cmd, env=environment(framework), capture_output=True, text=True)
        if proc.returncode != 0:
            logger.warning("%s on %s failed (exit %d): %s", name, workload, proc.returncode,
                           proc.stderr.strip().splitlines()[-1:] or "")
            return None
        with open(out.name) as f:
            return json.load(f)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=DEFAULT_WORKLOADS,
                        help="comma separated workload:features (workload seed or ctr)")
    parser.add_argument("--warmup", type=int, default=600)
    parser.add_argument("--steps", type=int, default=2000, help="timed steady-state steps")
    parser.add_argument("--slow-warmup", type=int, default=3,
                        help="warm-up of the candidates that stream the whole weight")
    parser.add_argument("--slow-steps", type=int, default=20)
    parser.add_argument("--batches", type=int, default=1000, help="distinct batches cycled")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default="",
                        help="comma separated candidate numbers 0-%d to run" % (len(CANDIDATES) - 1))
    parser.add_argument("--quick", action="store_true",
                        help="seed:1e5,seed:1e6,ctr:1e6; 100 warm-up and 300 timed steps")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--candidate", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--workload", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.worker:
        return run_worker(args)
    if args.quick:
        args.workloads = "seed:1e5,seed:1e6,ctr:1e6"
        args.warmup, args.steps, args.batches = 100, 300, 300
        args.slow_steps = 5
    have_torch = torch_available()
    if not have_torch:
        logger.warning("PyTorch is not installed: its candidates are skipped (optional extra "
                       "'peers': pip install 'gluon-sparse[peers]')")
    only = {int(c) for c in args.only.split(",") if c}
    table = Table("peers", ["workload", "candidate", "avg ms", "min ms", "vs PyTorch lazy (avg)",
                            "vs MXNet lazy (avg)", "steps timed", "load avg"])
    for workload in args.workloads.split(","):
        kind, features = workload.split(":")
        features = int(float(features))
        results = {}
        for index, (name, framework, arrays, _) in enumerate(CANDIDATES):
            if only and index not in only:
                continue
            reason = skip_reason(name, framework, arrays, features, have_torch)
            if reason:
                logger.warning("%s on %s skipped: %s", name, workload, reason)
                results[name] = reason
                continue
            load = open("/proc/loadavg").read().split()[0]
            result = run_candidate(index, workload, args)
            if result is not None:
                result["load"] = load
                logger.info("%s on %s: avg %.3f ms, min %.3f ms (quarters %s)", name, workload,
                            result["avg_ms"], result["min_ms"],
                            ", ".join("%.2f" % q for q in result["quarters_avg_ms"]))
            results[name] = result if result is not None else "failed"
        for name, result in results.items():
            label = "%s %s x %s nnz, %.0e features" % (
                kind, *(("10", "10") if kind == "seed" else ("512", "40")), features)
            if not isinstance(result, dict):
                table.add(**{"workload": label, "candidate": name, "avg ms": "skipped: " + result,
                             "min ms": "-", "vs PyTorch lazy (avg)": "-",
                             "vs MXNet lazy (avg)": "-", "steps timed": 0, "load avg": "-"})
                continue
            ratios = {}
            for column, base in (("vs PyTorch lazy (avg)", TORCH_LAZY),
                                 ("vs MXNet lazy (avg)", MX_LAZY)):
                ref = results.get(base)
                ratios[column] = ("%.2fx" % (result["avg_ms"] / ref["avg_ms"])
                                  if isinstance(ref, dict) else "-")
            table.add(**{"workload": label, "candidate": name,
                         "avg ms": round(result["avg_ms"], 3), "min ms": round(result["min_ms"], 3),
                         "steps timed": result["steps"], "load avg": result["load"], **ratios})
        table.meta.setdefault("raw", {})[workload] = results
    table.meta["settings"] = {k: getattr(args, k) for k in ("warmup", "steps", "slow_warmup",
                                                              "slow_steps", "batches", "seed")}
    os.makedirs(RESULTS_DIR, exist_ok=True)
    table.save()


if __name__ == "__main__":
    main()
