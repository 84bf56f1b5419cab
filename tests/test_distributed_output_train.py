"""dist_sync with a sampled output (2 workers + 1 server on loopback) equals one device.

The workers run examples/dist_train_output.py: input layer and sampled output
both row_sparse in the kvstore, candidates drawn from the whole global batch's
labels with the same seed on both workers. The reference, built here, is the
plain FullyConnectedSparse + SampledOutput trained on one device without a
kvstore on the same global batches.
"""
import argparse
import io
import json
import os
import sys

import mxnet as mx
import numpy as np
import pytest
import scipy.sparse as sp
from mxnet import autograd, gluon

import gluon_sparse.optimizer  # noqa: F401 - registers 'sparseadam'
from gluon_sparse.distributed import launcher
from gluon_sparse.nn import FullyConnectedSparse, SampledOutput

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER_SCRIPT = os.path.join(REPO, "examples", "dist_train_output.py")
NUM_FEATURES, NUM_LABELS, HIDDEN = 200, 400, 8
NUM_ROWS, BATCH_SIZE, NUM_SAMPLED, SEED = 60, 9, 30, 5  # 9 rows: 5 + 4 per worker
TIMED_STEPS = 3  # the worker runs one warm-up step first
STEPS = 1 + TIMED_STEPS
LR = {"sgd": 0.5, "sparseadam": 0.05}


def reference_model():
    net = gluon.nn.Sequential()
    with net.name_scope():
        net.add(FullyConnectedSparse(HIDDEN, in_units=NUM_FEATURES, activation="relu"),
                SampledOutput(NUM_LABELS, in_units=HIDDEN, num_sampled=NUM_SAMPLED,
                              loss="softmax", seed=SEED))
    return net


@pytest.fixture(scope="module")
def problem(tmp_path_factory):
    directory = tmp_path_factory.mktemp("dist-output")
    rng = np.random.default_rng(0)
    x = sp.random(NUM_ROWS, NUM_FEATURES, density=0.05, format="csr", dtype=np.float32,
                  random_state=rng)
    x.data = rng.integers(1, 9, size=x.nnz).astype(np.float32) / 8
    y = sp.random(NUM_ROWS, NUM_LABELS, density=0.005, format="csr", random_state=rng)
    y.data[:] = 1  # multi-label indicator, some rows without labels
    paths = {"x": str(directory / "x.npz"), "y": str(directory / "y.npz"),
             "init": str(directory / "init.params")}
    sp.save_npz(paths["x"], x)
    sp.save_npz(paths["y"], y)
    mx.random.seed(1)
    net = reference_model()
    net.initialize(mx.init.Xavier())
    net.save_parameters(paths["init"])
    return {"dir": directory, "x": x, "y": y, "paths": paths}


def make_optimizer(name, deferred):
    kwargs = {"deferred": True} if deferred else {}
    return mx.optimizer.create(name, learning_rate=LR[name], rescale_grad=1.0 / BATCH_SIZE,
                               **kwargs)


def train_one_device(problem, name, deferred):
    """Global batch k = rows k B .. (k + 1) B - 1, on one device, no kvstore."""
    net = reference_model()
    net.load_parameters(problem["paths"]["init"])
    trainer = gluon.Trainer(net.collect_params(), make_optimizer(name, deferred))
    for step in range(STEPS):
        rows = slice(step * BATCH_SIZE, (step + 1) * BATCH_SIZE)
        with autograd.record():
            loss = net[1](net[0](mx.nd.sparse.csr_matrix(problem["x"][rows])),
                          problem["y"][rows]).sum()
        loss.backward()
        trainer.step(1)
    path = problem["dir"] / ("reference-%s-%s.params" % (name, deferred))
    net.save_parameters(str(path))
    return {k: v.asnumpy() for k, v in mx.nd.load(str(path)).items()}


def launch(problem, name, deferred):
    save_dir = str(problem["dir"] / ("dist-%s-%s" % (name, deferred)))
    command = [sys.executable, WORKER_SCRIPT, "--data", problem["paths"]["x"],
               "--labels", problem["paths"]["y"], "--hidden", str(HIDDEN),
               "--num-sampled", str(NUM_SAMPLED), "--batch-size", str(BATCH_SIZE),
               "--steps", str(TIMED_STEPS), "--optimizer", name, "--lr", str(LR[name]),
               "--kvstore", "dist_sync", "--init-params", problem["paths"]["init"],
               "--seed", str(SEED), "--save-dir", save_dir]
    if deferred:
        command.append("--deferred")
    args = launcher.add_arguments(argparse.ArgumentParser()).parse_args(
        ["-n", "2", "-s", "1", "--timeout", "150", "--grace-period", "5", "--"] + command)
    output = io.StringIO()
    code = launcher.run(args, output=output)
    assert code == 0, output.getvalue()[-5000:]
    workers = []
    for rank in range(2):
        with open(os.path.join(save_dir, "stats-rank%d.json" % rank)) as f:
            assert len(json.load(f)["loss"]) == STEPS
        params = mx.nd.load(os.path.join(save_dir, "params-rank%d.params" % rank))
        workers.append({k: v.tostype("default").asnumpy() for k, v in params.items()})
    return workers


@pytest.mark.slow
@pytest.mark.parametrize("name, deferred", [("sgd", False), ("sparseadam", False),
                                            ("sparseadam", True)])
def test_two_dist_workers_equal_one_device(problem, name, deferred):
    expected = train_one_device(problem, name, deferred)
    initial = {k: v.asnumpy() for k, v in mx.nd.load(problem["paths"]["init"]).items()}
    for params in launch(problem, name, deferred):
        assert params.keys() == expected.keys()
        for key in expected:
            # Same global batches and candidates; the server adds the two workers'
            # gradients, so float32 rounding differs by a few ulps a step.
            np.testing.assert_allclose(params[key], expected[key], rtol=1e-5, atol=2e-6,
                                       err_msg=key)
    assert not np.allclose(initial["1.weight"], expected["1.weight"])
