"""dist_sync training on loopback (2 workers + 1 server) equals single-process training."""
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
from sklearn.datasets import dump_svmlight_file

import gluon_sparse.optimizer  # noqa: F401 - registers 'sparseadam'
from gluon_sparse.distributed import launcher
from gluon_sparse.nn import FullyConnectedSparse

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER_SCRIPT = os.path.join(REPO, "examples", "dist_train.py")
NUM_FEATURES = 400
NUM_ROWS = 90
BATCH_SIZE = 9  # uneven local batches: 5 rows on one worker, 4 on the other
NUM_WORKERS = 2
STEPS = 4


def reference_model():
    """FullyConnectedSparse(128)-sigmoid-Dense(8)-sigmoid-Dense(1), as in examples/dist_train.py."""
    net = gluon.nn.HybridSequential()
    with net.name_scope():
        net.add(FullyConnectedSparse(128, activation="sigmoid", in_units=NUM_FEATURES),
                gluon.nn.Dense(8, activation="sigmoid", in_units=128),
                gluon.nn.Dense(1, in_units=8))
    return net


@pytest.fixture(scope="module")
def problem(tmp_path_factory):
    """A LibSVM file, the initial parameters and the data as SciPy arrays."""
    directory = tmp_path_factory.mktemp("dist")
    rng = np.random.default_rng(0)
    x = sp.random(NUM_ROWS, NUM_FEATURES, density=0.02, format="csr", dtype=np.float32,
                  random_state=rng)
    # Multiples of 1/8 survive the text round trip exactly.
    x.data = rng.integers(1, 9, size=x.nnz).astype(np.float32) / 8
    y = (rng.random(NUM_ROWS) < 0.5).astype(np.float32)
    data_file = str(directory / "train.libsvm")
    dump_svmlight_file(x, y, data_file, zero_based=True)
    mx.random.seed(1)
    net = reference_model()
    net.initialize(mx.init.Xavier())
    init_file = str(directory / "init.params")
    net.save_parameters(init_file)
    return {"dir": directory, "x": x, "y": y, "data_file": data_file, "init_file": init_file}


def global_batches(x, y):
    """The global batches of the workers, rebuilt independently of the example.

    Worker r owns rows r, r + W, r + 2W, ... (the data loader's strided share)
    and feeds the r-th even part of every global batch; global batch k is the
    concatenation of the workers' k-th local batches.
    """
    share = x.shape[0] // NUM_WORKERS
    shards = [np.arange(x.shape[0])[r::NUM_WORKERS][:share] for r in range(NUM_WORKERS)]
    local_sizes = [len(p) for p in np.array_split(np.arange(BATCH_SIZE), NUM_WORKERS)]
    for step in range(STEPS):
        rows = np.concatenate([shard[step * b:(step + 1) * b]
                               for shard, b in zip(shards, local_sizes)])
        yield x[rows], y[rows]


def train_single_process(problem, optimizer, lr):
    net = reference_model()
    net.load_parameters(problem["init_file"])
    trainer = gluon.Trainer(net.collect_params(), optimizer, {"learning_rate": lr})
    loss_fn = gluon.loss.SigmoidBinaryCrossEntropyLoss()
    for x, y in global_batches(problem["x"], problem["y"]):
        with autograd.record():
            loss = loss_fn(net(mx.nd.sparse.csr_matrix(x)), mx.nd.array(y)).sum()
        loss.backward()
        trainer.step(x.shape[0])
    return {k: v.tostype("default").asnumpy() if hasattr(v, "tostype") else v.asnumpy()
            for k, v in _save_and_load(net, problem["dir"] / ("reference-%s.params" % optimizer))
            .items()}


def _save_and_load(net, path):
    net.save_parameters(str(path))
    return mx.nd.load(str(path))


def launch_training(problem, optimizer, lr, name):
    save_dir = str(problem["dir"] / name)
    args = launcher.add_arguments(argparse.ArgumentParser()).parse_args(
        ["-n", str(NUM_WORKERS), "-s", "1", "--timeout", "120", "--grace-period", "5", "--",
         sys.executable, WORKER_SCRIPT, "--data", problem["data_file"], "--zero-based", "true",
         "--num-features", str(NUM_FEATURES), "--batch-size", str(BATCH_SIZE),
         "--steps", str(STEPS), "--optimizer", optimizer, "--lr", str(lr),
         "--init-params", problem["init_file"], "--save-dir", save_dir])
    output = io.StringIO()
    code = launcher.run(args, output=output)
    assert code == 0, output.getvalue()
    results = []
    for rank in range(NUM_WORKERS):
        with open(os.path.join(save_dir, "stats-rank%d.json" % rank)) as f:
            assert json.load(f)["steps"] == STEPS
        params = mx.nd.load(os.path.join(save_dir, "params-rank%d.params" % rank))
        results.append({k: v.tostype("default").asnumpy() for k, v in params.items()})
    return results, output.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize("optimizer, lr", [("sparseadam", 0.01)])
def test_dist_sync_two_workers_equal_single_process(problem, optimizer, lr):
    # SparseAdam (standard, non-lazy Adam) on the servers is the strictest case:
    # unpickled there, run by gluon-sparse's operator, every row updated each step.
    # (SGD and MXNet's lazy Adam pass too; one job is kept to bound the test time.)
    expected = train_single_process(problem, optimizer, lr)
    workers, output = launch_training(problem, optimizer, lr, "dist-" + optimizer)
    # The servers hold the first layer's weight as row_sparse and update it there;
    # for SparseAdam they unpickle it and run gluon-sparse's gluon_sparse_adam_update.
    assert "row_sparse first layer" in output
    initial = {k: v.asnumpy() for k, v in mx.nd.load(problem["init_file"]).items()}
    for params in workers:
        assert params.keys() == expected.keys()
        for name in expected:
            # Same global batches and updates; only the float32 summation order
            # differs (two partial gradients added on the server): a few ulps per step.
            np.testing.assert_allclose(params[name], expected[name], rtol=1e-5, atol=1e-6,
                                       err_msg=name)
    assert not np.allclose(initial["0.weight"], expected["0.weight"])
    if optimizer == "sparseadam":
        # Standard Adam moves rows absent from a step's gradient; MXNet's lazy
        # Adam would not, and its result is measurably different here.
        lazy = train_single_process(problem, "adam", lr)
        assert not np.allclose(lazy["0.weight"], expected["0.weight"], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_a_server_that_cannot_unpickle_the_optimizer_fails_the_job(tmp_path, caplog):
    # MXNet's own server only prints such an error and keeps serving without an
    # optimizer, which silently assigns summed gradients to the weights.
    worker = tmp_path / "worker.py"
    worker.write_text(
        "import mxnet as mx\n"
        "class ScriptLocalSGD(mx.optimizer.SGD):\n"
        "    pass  # defined in __main__: the servers cannot import it\n"
        "kv = mx.kv.create('dist_sync')\n"
        "kv.set_optimizer(ScriptLocalSGD(learning_rate=0.1))\n"
        "kv.init(0, mx.nd.ones(3))\n"
        "kv.push(0, mx.nd.ones(3))\n"
        "out = mx.nd.zeros(3)\n"
        "kv.pull(0, out=out)\n"
        "print('pulled', out.asnumpy())\n")
    args = launcher.add_arguments(argparse.ArgumentParser()).parse_args(
        ["-n", "1", "-s", "1", "--timeout", "60", "--grace-period", "2", "--",
         sys.executable, str(worker)])
    output = io.StringIO()
    code = launcher.run(args, output=output)
    assert code == 1, output.getvalue()
    assert "pulled" not in output.getvalue()
    assert "ScriptLocalSGD" in output.getvalue()  # the server's traceback is forwarded
    assert any("server 0" in r.getMessage() and "exited with code 1" in r.getMessage()
               for r in caplog.records)
