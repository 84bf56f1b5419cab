"""Fixtures for the GPU checks of the optimizer family: CPU operator runs, recorded.

The GPU machine has no MXNet, so the family's CUDA kernels
(``gluon_sparse/csrc/ops/optim_kernels.cu``) are compared there with runs of
the CPU operators recorded here. For every rule of ``GLUON_SPARSE_OPTIM_RULES``
and for float32 and float64, one deterministic multi-step case (learning-rate
schedule, weight decay, clipping, rescaling, momentum, ...) is trained through
the family's own optimizer class (``SparseSGD``, ``SparseNAG``, ...), whose
``update`` calls ``gluon_sparse_<rule>_update`` on a row_sparse gradient, as a
Trainer does. Each ``<rule>_<dtype>.npz`` in the output folder records:

- ``weight0``: the initial weight; ``grad_offsets`` / ``grad_indices`` /
  ``grad_values``: the gradient rows and values of each step (step t's are
  ``[grad_offsets[t-1], grad_offsets[t])``);
- ``step_scalars`` (float32, ``(steps + 1, kNumStep)``, row 0 unused):
  the step scalars exactly as the operator parsed them, read back from the
  history that ``gluon_sparse_<rule>_deferred_update`` writes for the same
  arguments; ``fixed`` and ``rescale_grad``: the fixed scalars as the operator
  parses them (dmlc's ParseFloat, modelled by ``param_float``);
- ``op_kwargs``: the operator's keyword arguments of each step, as JSON (what
  ``tests/test_gpu_harness_family.py`` replays);
- ``weight`` and ``state<k>``: the eager operator's result after the run (the
  deferred operator plus a flush is checked bitwise equal to it here);
- ``mxnet_*``: MXNet's own optimizer applied to the same gradients made dense,
  only where its result is not bitwise the operator's (``mxnet_bitwise`` says
  which), with the tolerance the optimizer tests use (``mxnet_rtol``,
  ``mxnet_atol``); ``mxnet_class`` is empty where MXNet 1.9 has no such
  optimizer (AdamW).

Run: ``python benchmarks/gpu/make_family_fixtures.py [out_dir]`` (default
``benchmarks/gpu/build/fixtures``). Needs MXNet and the built gluon_sparse operator library.
"""
import argparse
import json
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO, "benchmarks", "gpu", "build", "fixtures")
ROWS, COLS, STEPS = 400, 37, 150
WD_SWITCH_STEP = 100  # cases with "wd_from" switch wd from 0 to it here

# MXNet's dense update is bitwise the operator's in float32 (the optimizer tests
# assert it). In float64 MXNet multiplies by the Python doubles where the
# operators use the C floats the history records, and computes Adamax and Nadam
# in NDArray expressions: the tests allow rtol 1e-6 with atol 1e-7 x lr x steps
# (tests/test_optimizer_adagrad.py::test_float64_within_scalar_rounding) or
# 5e-8 (test_optimizer_adamax.py, test_optimizer_nadam.py) over 14-60 steps; the
# 150 steps here accumulate more of the scalars' float rounding (Adamax's u
# reaches 2e-6 relative), hence rtol 1e-5.
def mxnet_tolerance(lr, steps):
    """(rtol, atol) of a float64 result against MXNet's dense update."""
    return 1e-5, 1e-7 * lr * steps

# rule -> (gluon_sparse.optimizer class, MXNet class or None, keyword arguments).
# lr schedules are added by make_optimizer; "wd_from" is a wd set at WD_SWITCH_STEP.
CASES = {
    "adagrad": ("SparseAdaGrad", "AdaGrad",
                {"learning_rate": 0.1, "wd": 0.01, "clip_gradient": 0.5, "rescale_grad": 0.5,
                 "eps": 1e-6}),
    "adamax": ("SparseAdamax", "Adamax",
               {"learning_rate": 0.02, "wd": 0.001, "clip_gradient": 1.0, "rescale_grad": 0.7,
                "beta1": 0.85}),
    "adamw": ("SparseAdam", None,
              {"learning_rate": 0.01, "wd": 0.02, "clip_gradient": 0.8, "rescale_grad": 0.5,
               "decoupled_wd": True}),
    "ftrl": ("SparseFtrl", "Ftrl",
             {"learning_rate": 0.1, "lamda1": 0.01, "beta": 1.0, "wd": 0.001,
              "rescale_grad": 0.9}),
    "nadam": ("SparseNadam", "Nadam",
              {"learning_rate": 0.01, "wd": 0.001, "clip_gradient": 0.5, "rescale_grad": 0.5,
               "schedule_decay": 0.004}),
    "nag_plain": ("SparseNAG", "NAG",
                  {"learning_rate": 0.1, "momentum": 0.0, "wd": 0.01, "clip_gradient": 0.4}),
    "nag": ("SparseNAG", "NAG",
            {"learning_rate": 0.05, "momentum": 0.9, "wd": 0.0, "wd_from": 0.01,
             "rescale_grad": 0.5}),
    "rmsprop_centered": ("SparseRMSProp", "RMSProp",
                         {"learning_rate": 0.01, "centered": True, "gamma1": 0.9, "gamma2": 0.8,
                          "wd": 0.001, "clip_gradient": 0.6, "clip_weights": 3.0}),
    "rmsprop": ("SparseRMSProp", "RMSProp",
                {"learning_rate": 0.01, "gamma1": 0.9, "wd": 0.0, "wd_from": 0.005,
                 "rescale_grad": 0.8}),
    "sgd_mom": ("SparseSGD", "SGD",
                {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.0, "wd_from": 0.002,
                 "clip_gradient": 0.5}),
    "sgd": ("SparseSGD", "SGD",
            {"learning_rate": 0.1, "momentum": 0.0, "wd": 0.001, "rescale_grad": 2.0}),
}
DTYPES = ("float32", "float64")


def rows_of_step(rng, rows, step, steps):
    """The gradient rows of ``step`` (sorted, unique).

    The last 10% of the rows are never touched; rows 0-7 get gradients at
    steps 1-3 and then wait until the last 30 steps (~120 steps absent); every
    25th step has an empty gradient; the rest draws 2% of the rows.
    """
    if step % 25 == 11:
        return np.empty(0, np.int64)
    chosen = rng.choice(np.arange(8, rows * 9 // 10), max(1, rows // 50), replace=False)
    if step <= 3:
        chosen = np.concatenate([chosen, np.arange(8)])
    elif step > steps - 30 and step % 4 == 0:
        chosen = np.concatenate([chosen, [(step // 4) % 8]])
    return np.sort(chosen).astype(np.int64)


def make_optimizer(module, class_name, kwargs, lr_scheduler):
    """An optimizer of ``module`` (gluon_sparse.optimizer or mx.optimizer) for ``kwargs``."""
    kwargs = {k: v for k, v in kwargs.items() if k != "wd_from"}
    if module.__name__.startswith("mxnet"):
        kwargs.pop("decoupled_wd", None)
    return getattr(module, class_name)(lr_scheduler=lr_scheduler, **kwargs)


def _schedule(lr):
    import mxnet as mx
    return mx.lr_scheduler.FactorScheduler(step=40, factor=0.7, base_lr=lr)


class _Recorder:
    """Stands in for ``mx.nd.<op>`` during one update, recording its keyword arguments."""

    def __init__(self, op):
        self.op, self.kwargs = op, None

    def __call__(self, *args, **kwargs):
        self.kwargs = {k: v for k, v in kwargs.items() if k != "out"}
        return self.op(*args, **kwargs)


def _as_list(state):
    if state is None:
        return []
    return [state] if not isinstance(state, (tuple, list)) else list(state)


def deferred_op_args(rule, kwargs):
    """The eager op's keyword arguments, split as the deferred ops take them."""
    step = {k: v for k, v in kwargs.items() if k not in rule.fixed_names}
    fixed = {k: kwargs[k] for k in rule.fixed_names if k in kwargs}
    return step, fixed


def run_case(rule_name, dtype, rows=ROWS, cols=COLS, steps=STEPS):
    """Train one case through the CPU operators; returns the record (a dict of arrays).

    Raises AssertionError if the deferred operator's run (catch-up in the
    update, flush at the end) is not bitwise the eager one, or MXNet's dense
    update is outside the tests' tolerance.
    """
    import mxnet as mx
    import gluon_sparse.optimizer as gso
    from gluon_sparse import _native
    from gluon_sparse.optimizer._mxnet_scalars import param_float
    _native.load_ops()
    class_name, mx_class, kwargs = CASES[rule_name]
    seed = sorted(CASES).index(rule_name) * 2 + DTYPES.index(dtype)
    rng = np.random.default_rng(seed)
    weight0 = rng.standard_normal((rows, cols)).astype(dtype)
    weight0[-1, :2] = [0.0, -0.0]  # signed zeros in a row never touched

    opt = make_optimizer(gso, class_name, kwargs, _schedule(kwargs["learning_rate"]))
    rule = opt._rule() if hasattr(opt, "_rule") else gso._adamw.ADAMW  # SparseAdam: AdamW
    assert rule.name == rule_name, (rule.name, rule_name)
    weight = mx.nd.array(weight0, dtype=dtype)
    state = opt.create_state(0, weight)
    op_name = "gluon_sparse_%s_update" % rule.name
    # The deferred operators on a copy: their history holds the parsed step scalars.
    d_weight = mx.nd.array(weight0, dtype=dtype)
    d_states = [mx.nd.zeros((rows, cols), dtype=dtype) for _ in rule.state_names]
    last_step = mx.nd.zeros((rows,), dtype="int64")
    history = mx.nd.zeros((steps + 1, len(rule.step_names)), dtype="float32")
    deferred_update = getattr(mx.nd, "gluon_sparse_%s_deferred_update" % rule.name)

    reference = None
    if mx_class is not None:
        reference = make_optimizer(mx.optimizer, mx_class, kwargs,
                                   _schedule(kwargs["learning_rate"]))
        ref_weight = mx.nd.array(weight0, dtype=dtype)
        ref_states = [mx.nd.zeros((rows, cols), dtype=dtype) for _ in rule.state_names]
        # MXNet's RMSProp unpacks a tuple even for its one state.
        ref_state = (None if not ref_states else ref_states[0]
                     if len(ref_states) == 1 and mx_class != "RMSProp" else tuple(ref_states))

    offsets, all_indices, all_values, op_kwargs = [0], [], [], []
    for t in range(1, steps + 1):
        if t == WD_SWITCH_STEP and "wd_from" in kwargs:
            opt.wd = kwargs["wd_from"]
            if reference is not None:
                reference.wd = kwargs["wd_from"]
        indices = rows_of_step(rng, rows, t, steps)
        values = rng.standard_normal((len(indices), cols)).astype(dtype)
        grad = mx.nd.sparse.row_sparse_array((values, indices), shape=(rows, cols), dtype=dtype)
        original = getattr(mx.nd, op_name)
        recorder = _Recorder(original)
        setattr(mx.nd, op_name, recorder)
        try:
            opt.update(0, weight, grad, state)
        finally:
            setattr(mx.nd, op_name, original)
        assert recorder.kwargs is not None, "%s did not call %s" % (class_name, op_name)
        step_kwargs, fixed_kwargs = deferred_op_args(rule, recorder.kwargs)
        deferred_update(d_weight, grad, *d_states, last_step, history, out=d_weight, step=t,
                        catch_up=1, **step_kwargs, **fixed_kwargs)
        if reference is not None:
            reference.update(0, ref_weight, grad.tostype("default"), ref_state)
        offsets.append(offsets[-1] + len(indices))
        all_indices.append(indices)
        all_values.append(values)
        op_kwargs.append(recorder.kwargs)

    flush = getattr(mx.nd, "gluon_sparse_%s_deferred_flush" % rule.name)
    flush(d_weight, *d_states, last_step, history, out=d_weight, step=steps, **fixed_kwargs)
    result = [weight.asnumpy()] + [a.asnumpy() for a in _as_list(state)]
    deferred_result = [d_weight.asnumpy()] + [a.asnumpy() for a in d_states]
    for k, (got, want) in enumerate(zip(deferred_result, result)):
        assert np.array_equal(got.view(_int_of(got)), want.view(_int_of(want))), \
            "%s %s: deferred + flush differs from eager in array %d" % (rule_name, dtype, k)

    record = {
        "rule": np.array(rule_name), "dtype": np.array(dtype), "steps": np.array(steps),
        "weight0": weight0, "grad_offsets": np.array(offsets, np.int64),
        "grad_indices": np.concatenate(all_indices).astype(np.int64),
        "grad_values": np.concatenate(all_values).reshape(-1, cols).astype(dtype),
        "step_scalars": history.asnumpy(),
        "fixed": np.array([param_float(fixed_kwargs[k]) for k in rule.fixed_names],
                          np.float32),
        "rescale_grad": np.float32(param_float(op_kwargs[0]["rescale_grad"])),
        "op_kwargs": np.array(json.dumps(op_kwargs)),
        "state_names": np.array(list(rule.state_names) or [""]),
        "fixed_names": np.array(list(rule.fixed_names) or [""]),
        "step_names": np.array(list(rule.step_names)),
        "num_states": np.array(len(rule.state_names)),
        "weight": result[0], "mxnet_class": np.array(mx_class or ""),
    }
    for k, a in enumerate(result[1:]):
        record["state%d" % k] = a
    if reference is not None:
        _record_mxnet(record, rule_name, dtype, result,
                      [ref_weight.asnumpy()] + [a.asnumpy() for a in ref_states])
    return record


def _int_of(array):
    return {4: np.int32, 8: np.int64}[array.dtype.itemsize]


def _record_mxnet(record, rule_name, dtype, result, mxnet_result):
    """MXNet's dense result: a flag when bitwise the operator's, else the arrays.

    Float32 must be bitwise. In float64 the arrays are kept with the tests'
    tolerance (``mxnet_rtol``, ``mxnet_atol``), whether the operator's result
    is within it (``mxnet_within``) and its largest absolute difference
    (``mxnet_cpu_max_abs``): a clipping decision near the bound can go the
    other way with a double scalar, so a long run may leave a few elements
    outside the tolerance; the GPU must then be no farther than the CPU is.
    """
    bitwise = all(np.array_equal(a.view(_int_of(a)), b.view(_int_of(b)))
                  for a, b in zip(result, mxnet_result))
    record["mxnet_bitwise"] = np.array(bitwise)
    rtol, atol = (0.0, 0.0) if dtype == "float32" else mxnet_tolerance(
        CASES[rule_name][2]["learning_rate"], int(record["steps"]))
    record["mxnet_rtol"], record["mxnet_atol"] = np.array(rtol), np.array(atol)
    if bitwise:
        return
    assert dtype == "float64", "%s %s: the operator is not bitwise MXNet's dense update" % (
        rule_name, dtype)
    from benchmarks.gpu.harness.family import max_abs_difference
    within, worst = True, 0.0
    for k, (got, want) in enumerate(zip(result, mxnet_result)):
        within &= bool(np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True))
        worst = max(worst, max_abs_difference(got, want))
        record["mxnet_%d" % k] = want
    record["mxnet_within"], record["mxnet_cpu_max_abs"] = np.array(within), np.array(worst)


def replay(record):
    """Replay a record through the CPU operators and assert it reproduces itself.

    The recorded keyword arguments of each step, given to
    ``gluon_sparse_<rule>_update`` with the recorded gradients, must give the
    recorded weight and states bitwise; given to the deferred update, they
    must write the recorded step scalars into its history; the recorded fixed
    scalars and rescale_grad must be what the operators parse from their text.
    """
    import mxnet as mx
    from gluon_sparse import _native
    from gluon_sparse.optimizer._mxnet_scalars import param_float
    _native.load_ops()
    rule_name, dtype = str(record["rule"]), str(record["dtype"])
    steps, num_states = int(record["steps"]), int(record["num_states"])
    weight0 = record["weight0"]
    shape = weight0.shape
    weight = mx.nd.array(weight0, dtype=dtype)
    states = [mx.nd.zeros(shape, dtype=dtype) for _ in range(num_states)]
    history = mx.nd.zeros(record["step_scalars"].shape, dtype="float32")
    last_step = mx.nd.zeros((shape[0],), dtype="int64")
    d_weight, d_states = weight.copy(), [s.copy() for s in states]
    update = getattr(mx.nd, "gluon_sparse_%s_update" % rule_name)
    deferred_update = getattr(mx.nd, "gluon_sparse_%s_deferred_update" % rule_name)
    offsets = record["grad_offsets"]
    op_kwargs = json.loads(str(record["op_kwargs"]))
    fixed_names = [str(k) for k in record["fixed_names"] if str(k)]
    for t in range(1, steps + 1):
        lo, hi = offsets[t - 1], offsets[t]
        grad = mx.nd.sparse.row_sparse_array(
            (record["grad_values"][lo:hi], record["grad_indices"][lo:hi]), shape=shape,
            dtype=dtype)
        update(weight, grad, *states, out=weight, **op_kwargs[t - 1])
        deferred_update(d_weight, grad, *d_states, last_step, history, out=d_weight, step=t,
                        catch_up=1, **op_kwargs[t - 1])
    expected = [record["weight"]] + [record["state%d" % k] for k in range(num_states)]
    for k, (got, want) in enumerate(zip([weight] + states, expected)):
        got = got.asnumpy()
        assert np.array_equal(got.view(_int_of(got)), want.view(_int_of(want))), \
            "%s %s: array %d does not replay to the record" % (rule_name, dtype, k)
    assert np.array_equal(history.asnumpy()[1:], record["step_scalars"][1:]), \
        "%s %s: the recorded step scalars are not the operator's" % (rule_name, dtype)
    fixed = [param_float(op_kwargs[0][k]) for k in fixed_names]
    assert np.array_equal(np.array(fixed, np.float32), record["fixed"]), (rule_name, fixed)
    assert np.float32(param_float(op_kwargs[0]["rescale_grad"])) == record["rescale_grad"]


def fixture_path(out_dir, rule_name, dtype):
    """Where the record of one case is written."""
    return os.path.join(out_dir, "%s_%s.npz" % (rule_name, dtype))


def main(argv=None):
    """Write one ``<rule>_<dtype>.npz`` per case into the output folder."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", nargs="?", default=DEFAULT_OUT)
    parser.add_argument("--rules", nargs="+", choices=sorted(CASES), default=sorted(CASES))
    args = parser.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    total = 0
    for rule_name in args.rules:
        for dtype in DTYPES:
            path = fixture_path(args.out_dir, rule_name, dtype)
            np.savez_compressed(path, **run_case(rule_name, dtype))
            total += os.path.getsize(path)
            print("wrote %s" % path)
    print("%d fixtures, %.1f MB" % (len(args.rules) * len(DTYPES), total / 1e6))


if __name__ == "__main__":
    sys.path.insert(0, REPO)
    main()
