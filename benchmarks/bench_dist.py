"""Several local workers on the reference workload, and bytes moved per step.

Trains the reference model (``FullyConnectedSparse(128)-sigmoid-Dense(8)-
sigmoid-Dense(1)``) on 1000 x 1,000,000 CSR rows of density 1e-5 (about 10
non-zeros a row), global batch 10, with ``examples/dist_train.py``:

* **baseline**: one process, no kvstore (``FullyConnectedSparse``, dense weight);
* **1, 2, 4 workers** + 1 server, ``dist_sync``, started by
  ``gluon_sparse.distributed.launcher``; the first layer is
  ``FullyConnectedSparseRowSparseWeight`` (weight on the server, rows pulled).

It reports global samples/s (measured by worker rank 0 after its first step,
which pays for initialisation) and the job's wall time with start-up, plus the
bytes a worker sends and receives per step: touched rows x units x 4 bytes (+ 8
bytes of key per row) for the row_sparse weight, all parameters for the small
dense layers, against what dense gradients of the first layer would move (a
full gradient pushed and a full weight pulled, ``in_units x units x 4`` each).

``--part output`` measures a huge output layer instead (issue 19, the
200k-output seed shape): ``FullyConnectedSparse(512, relu)`` on 100,000
features (40 non-zeros a row), then 200,000 outputs, global batch 256, SGD,
trained by ``examples/dist_train_output.py`` with the **dense** output
(``Dense(200000)``, full softmax; the baseline) and the **sampled** output
(``SampledOutputRowSparseWeight``, positives + 1024 log-uniform negatives), in
four setups: one process without kvstore, two CPU contexts on a ``'device'``
kvstore, and ``dist_sync`` with 1 and 2 workers + 1 server. Bytes per step
are counted by :class:`gluon_sparse.distributed.KVStoreTraffic` at worker 0's
kvstore calls (payload of every push and pull: values + 8-byte row keys of
row_sparse arrays + the ids a row_sparse pull requests), over steps run after
the timed ones (counting waits for each array).

Usage::

    python benchmarks/bench_dist.py            # < 5 minutes on 2 cores
    python benchmarks/bench_dist.py --workers 1,2 --rows 400
    python benchmarks/bench_dist.py --part output   # ~10 minutes on 2 cores
"""
import argparse
import importlib.util
import io
import json
import logging
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.runner import Table, time_call  # noqa: E402
from gluon_sparse.distributed import launcher, part_sizes  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER_SCRIPT = os.path.join(os.path.dirname(HERE), "examples", "dist_train.py")
OUTPUT_SCRIPT = os.path.join(os.path.dirname(HERE), "examples", "dist_train_output.py")
KEY_BYTES = 8  # ps-lite sends one uint64 key per row of a row_sparse push / pull


def load_example():
    spec = importlib.util.spec_from_file_location("dist_train", WORKER_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def worker_argv(args, kvstore, save_dir):
    return [sys.executable, WORKER_SCRIPT, "--synthetic",
            "%d:%d:%g" % (args.rows, args.features, args.density),
            "--batch-size", str(args.batch_size), "--units", str(args.units),
            "--optimizer", "sgd", "--lr", "0.1", "--kvstore", kvstore, "--save-dir", save_dir]


def read_stats(save_dir):
    with open(os.path.join(save_dir, "stats-rank0.json")) as f:
        return json.load(f)


def run_single_process(args, save_dir):
    subprocess.run(worker_argv(args, "none", save_dir), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def run_workers(args, num_workers, save_dir):
    parsed = launcher.add_arguments(argparse.ArgumentParser()).parse_args(
        ["-n", str(num_workers), "-s", "1", "--timeout", "240", "--"]
        + worker_argv(args, "dist_sync", save_dir))
    output = io.StringIO()
    code = launcher.run(parsed, output=output)
    if code != 0:
        raise RuntimeError("%d-worker job failed (exit %d):\n%s"
                           % (num_workers, code, output.getvalue()[-4000:]))


def bytes_per_step(args, num_workers, x):
    """Mean bytes one worker pushes + pulls per step, and the dense-gradient equivalent."""
    # The rows each worker reads: the data loader's strided, equal shares.
    share = x.shape[0] // num_workers
    shards = [np.arange(x.shape[0])[r::num_workers][:share] for r in range(num_workers)]
    local_sizes = part_sizes(args.batch_size, num_workers)
    steps = share // max(local_sizes)
    dense_layers = (args.units * 8 + 8) + (8 + 1) + args.units  # Dense(8), Dense(1), bias
    rows = []
    for shard, b in zip(shards, local_sizes):
        part = x[shard]
        for step in range(steps):
            rows.append(np.unique(part[step * b:(step + 1) * b].indices).size)
    mean_rows = float(np.mean(rows))
    # Push the gradient rows, pull the same weight rows; dense layers both ways.
    sparse = 2 * mean_rows * (args.units * 4 + KEY_BYTES) + 2 * dense_layers * 4
    dense = 2 * args.features * args.units * 4 + 2 * dense_layers * 4
    return mean_rows, sparse, dense


def output_argv(args, output, kvstore, contexts, save_dir):
    return [sys.executable, OUTPUT_SCRIPT, "--synthetic",
            "%d:%d:%d" % (args.batch_size * (1 + args.steps + args.count_steps),
                          args.features, args.labels),
            "--hidden", str(args.units), "--output", output, "--num-sampled",
            str(args.num_sampled), "--batch-size", str(args.batch_size), "--steps",
            str(args.steps), "--count-steps", str(args.count_steps if kvstore != "none" else 0),
            "--optimizer", "sgd", "--lr", "0.1", "--kvstore", kvstore, "--contexts",
            str(contexts), "--save-dir", save_dir]


def run_output_setup(args, output, setup, save_dir):
    """Run one setup; return worker 0's stats."""
    name, kvstore, contexts, workers = setup
    argv = output_argv(args, output, kvstore, contexts, save_dir)
    if workers:
        parsed = launcher.add_arguments(argparse.ArgumentParser()).parse_args(
            ["-n", str(workers), "-s", "1", "--timeout", "900", "--"] + argv)
        log = io.StringIO()
        if launcher.run(parsed, output=log) != 0:
            raise RuntimeError("%s (%s output) failed:\n%s" % (name, output,
                                                                log.getvalue()[-4000:]))
    else:
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return read_stats(save_dir)


def output_part(args):
    """Dense vs sampled output layer: ms a step and kvstore bytes a step, per setup."""
    setups = [("1 process, no kvstore", "none", 1, 0),
              ("2 contexts, 'device' kvstore", "device", 2, 0),
              ("dist_sync, 1 worker + 1 server", "dist_sync", 1, 1),
              ("dist_sync, 2 workers + 1 server", "dist_sync", 1, 2)]
    table = Table("dist_output", ["setup", "output", "ms_per_step", "step_vs_dense",
                                  "output_layer_bytes_per_step", "all_bytes_per_step",
                                  "bytes_vs_dense", "loadavg"])
    table.meta["workload"] = vars(args)
    table.meta["bytes"] = ("worker 0's kvstore calls over --count-steps steps "
                           "(KVStoreTraffic: values + 8-byte row keys + requested row ids); "
                           "for 2 contexts, both devices' pushes and pulls")
    with tempfile.TemporaryDirectory() as tmp:
        for name, kvstore, contexts, workers in setups:
            dense = None
            for output in ("dense", "sampled"):
                save_dir = os.path.join(tmp, "%s-%s-%d-%d" % (output, kvstore, contexts,
                                                              workers))
                stats = run_output_setup(args, output, (name, kvstore, contexts, workers),
                                         save_dir)
                traffic = stats["bytes_per_step"]
                moved = {k: traffic.get("pushed", {}).get(k, 0) + traffic.get("pulled", {})
                         .get(k, 0) for k in set(traffic.get("pushed", {}))
                         | set(traffic.get("pulled", {}))}
                layer = sum(v for k, v in moved.items()
                            if "dense" in k or "sampledoutput" in k)
                row = {"setup": name, "output": output,
                       "ms_per_step": 1000 * stats["seconds_per_step"],
                       "output_layer_bytes_per_step": layer,
                       "all_bytes_per_step": sum(moved.values()),
                       "loadavg": open("/proc/loadavg").read().split()[0]}
                if output == "dense":
                    dense = row
                    row.update(step_vs_dense=1.0, bytes_vs_dense=1.0 if layer else "")
                else:
                    row.update(step_vs_dense=row["ms_per_step"] / dense["ms_per_step"],
                               bytes_vs_dense=(layer / dense["output_layer_bytes_per_step"]
                                               if layer else ""))
                table.add(**row)
                logging.warning("%s, %s output: %.0f ms a step, %.3g output-layer bytes a step",
                                name, output, row["ms_per_step"], layer)
    table.save()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("reference", "output"), default="reference",
                        help="reference: the reference workload on 1, 2, 4 workers; output: "
                             "dense vs sampled 200k-label output layer")
    parser.add_argument("--labels", type=int, default=200000, help="--part output: outputs")
    parser.add_argument("--num-sampled", type=int, default=1024,
                        help="--part output: sampled negatives")
    parser.add_argument("--steps", type=int, default=3, help="--part output: timed steps")
    parser.add_argument("--count-steps", type=int, default=2,
                        help="--part output: steps whose bytes are counted")
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--features", type=int, default=1000000)
    parser.add_argument("--density", type=float, default=1e-5)
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--units", type=int, default=128)
    parser.add_argument("--workers", default="1,2,4", help="comma separated worker counts")
    parser.set_defaults(**{k: None for k in ("features", "batch_size", "units")})
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    output = args.part == "output"
    for key, reference_default, output_default in (("features", 1000000, 100000),
                                                   ("batch_size", 10, 256),
                                                   ("units", 128, 512)):
        if getattr(args, key) is None:
            setattr(args, key, output_default if output else reference_default)
    if output:
        output_part(args)
        return

    example = load_example()
    x, _ = example.load_data(example.parse_args(worker_argv(args, "none", "-")[2:]))
    table = Table("dist", ["setup", "workers", "samples_per_s", "speedup_vs_1_worker",
                           "vs_single_process", "job_wall_s", "rows_per_step",
                           "bytes_per_step", "dense_grad_bytes_per_step", "bytes_ratio"])
    table.meta["workload"] = vars(args)
    table.meta["note"] = ("2-core machine shared with other jobs; servers, scheduler and "
                          "workers share the same 2 cores, so more workers cannot scale")
    with tempfile.TemporaryDirectory() as tmp:
        save_dir = os.path.join(tmp, "single")
        wall = time_call(lambda: run_single_process(args, save_dir), repeat=1, warmup=0)
        baseline = read_stats(save_dir)["samples_per_second"]
        table.add(setup="single process, no kvstore", workers=1, samples_per_s=baseline,
                  speedup_vs_1_worker="", vs_single_process=1.0, job_wall_s=wall["min"],
                  rows_per_step="", bytes_per_step=0, dense_grad_bytes_per_step=0,
                  bytes_ratio="")
        one_worker = None
        for num_workers in [int(w) for w in args.workers.split(",")]:
            save_dir = os.path.join(tmp, "w%d" % num_workers)
            wall = time_call(lambda: run_workers(args, num_workers, save_dir), repeat=1,
                             warmup=0)
            rate = read_stats(save_dir)["samples_per_second"]
            one_worker = one_worker or rate
            rows, sparse, dense = bytes_per_step(args, num_workers, x)
            table.add(setup="dist_sync + 1 server", workers=num_workers, samples_per_s=rate,
                      speedup_vs_1_worker=rate / one_worker, vs_single_process=rate / baseline,
                      job_wall_s=wall["min"], rows_per_step=rows, bytes_per_step=sparse,
                      dense_grad_bytes_per_step=dense, bytes_ratio=dense / sparse)
    table.save()


if __name__ == "__main__":
    main()
