"""The GPU harness's optimizer-family and gluon_sparse_dot parts on a machine without a GPU.

- the fixture generator's records replay to themselves through the CPU
  operators (outputs bitwise, step scalars as the deferred operator records
  them, fixed scalars as the operators parse them), for freshly made small
  records and for the fixtures in benchmarks/gpu/build/fixtures that a GPU run will use;
- the checks report a wrong result at its first differing position;
- the references of the gluon_sparse_dot checks agree with a dense NumPy
  product and catch a perturbed result;
- the command line refuses bad options before any work;
- the family library builds with nvcc (when installed), knows every rule of
  the Python family with its sizes, and returns CUDA errors as text.
"""
import glob
import os
import shutil
import subprocess

import numpy as np
import pytest

from benchmarks.gpu import make_family_fixtures as fixtures
from benchmarks.gpu.harness import bindings, cli, dot, family, family_bindings


# --- fixtures -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", fixtures.DTYPES)
def test_small_records_replay_through_the_cpu_operators(dtype):
    for rule in sorted(fixtures.CASES):
        record = fixtures.run_case(rule, dtype, rows=60, cols=5, steps=40)
        fixtures.replay(record)


def test_device_fixtures_replay_through_the_cpu_operators(tmp_path):
    """The fixtures a GPU run will use, or, where none were made, the same full-size
    cases written by the generator's own entry point (about 30 s)."""
    paths = sorted(glob.glob(os.path.join(family.FIXTURE_DIR, "*.npz")))
    if not paths:
        fixtures.main([str(tmp_path)])
        paths = sorted(glob.glob(str(tmp_path / "*.npz")))
    assert len(paths) == len(fixtures.CASES) * len(fixtures.DTYPES)
    for path in paths:
        with np.load(path) as z:
            fixtures.replay({k: z[k] for k in z.files})


def test_a_wrong_replay_is_caught():
    record = fixtures.run_case("sgd_mom", "float32", rows=60, cols=5, steps=20)
    record["state0"] = record["state0"].copy()
    record["state0"][3, 2] = np.nextafter(record["state0"][3, 2], np.float32(1))
    with pytest.raises(AssertionError, match="array 1 does not replay"):
        fixtures.replay(record)


def test_fixture_reader_and_mxnet_comparison(tmp_path):
    record = fixtures.run_case("adagrad", "float64", rows=60, cols=5, steps=30)
    path = str(tmp_path / "adagrad_float64.npz")
    np.savez(path, **record)
    fx = family.Fixture(path)
    assert (fx.rule, fx.dtype, fx.num_states) == ("adagrad", np.float64, 1)
    indices, values = fx.gradient(1)
    assert list(indices) == sorted(set(indices)) and values.shape == (len(indices), 5)
    got = fx.expected()
    if not bool(record["mxnet_bitwise"]):
        assert "MXNet's dense update" in family.compare_with_mxnet(fx, got)
        far = [got[0] + 1.0] + got[1:]
        with pytest.raises(AssertionError, match="farther than the CPU"):
            family.compare_with_mxnet(fx, far)


def test_max_abs_difference_counts_lone_nans():
    a = np.array([1.0, np.nan, np.nan])
    assert family.max_abs_difference(a, np.array([1.5, np.nan, 2.0])) == np.inf
    assert family.max_abs_difference(a[:2], np.array([1.5, np.nan])) == 0.5


def test_bitwise_assert_names_the_first_difference():
    want = np.arange(12, dtype=np.float64).reshape(3, 4)
    got = want.copy()
    got[1, 2] = np.nextafter(got[1, 2], 100.0)
    got[2, 0] = -got[2, 0]
    with pytest.raises(AssertionError, match=r"2 elements differ, first at \(1, 2\)"):
        family.assert_bitwise("x", got, want)


# --- gluon_sparse_dot references ------------------------------------------------------------

@pytest.mark.parametrize("squared", [False, True])
def test_dot_references_against_a_dense_product(squared):
    rng = np.random.default_rng(3)
    indptr, cols, vals = dot.random_csr(rng, 30, 50, 6, np.float32)
    assert cols.max() == 49 and (np.diff(indptr) == 0).any()
    for r in range(30):
        row = cols[indptr[r]:indptr[r + 1]]
        assert (np.diff(row) > 0).all()
    dense = np.zeros((30, 50))
    dense[np.repeat(np.arange(30), np.diff(indptr)), cols] = vals
    weight = rng.standard_normal((50, 4)).astype(np.float32)
    ograd = rng.standard_normal((30, 4))
    x, w = (dense ** 2, weight.astype(np.float64) ** 2) if squared else (dense, weight)
    out, mag, terms = dot.reference_forward(indptr, cols, vals, weight, None, squared)
    np.testing.assert_allclose(out, x @ w, rtol=1e-12, atol=1e-12)
    assert terms == np.diff(indptr).max() and (mag >= np.abs(out) - 1e-12).all()
    rows, grad, _, _ = dot.reference_weight_grad(indptr, cols, vals, ograd, weight, squared)
    assert list(rows) == sorted(set(cols))
    want = (dense.T @ ograd)
    if squared:
        want = 2 * (dense.T ** 2 @ ograd) * weight.astype(np.float64)
    np.testing.assert_allclose(grad, want[rows], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dot_sequential_references_are_the_cpu_operator_bitwise(squared, dtype):
    """The GPU check's exact references are the CPU ``gluon_sparse_dot``'s results, bit for
    bit (forward with and without bias, weight gradient rows and values), so a GPU kernel
    that passes them is bitwise the CPU operator."""
    import mxnet as mx
    from gluon_sparse import _native
    _native.load_ops()
    rng = np.random.default_rng(5)
    # Columns from a few dozen of the 300, so that gradient rows sum several entries;
    # some rows empty; the last column in row 0.
    row_cols = [np.sort(rng.choice(60, int(c), replace=False)) for c in rng.integers(0, 12, 40)]
    row_cols[0] = np.append(row_cols[0], 299)
    indptr = np.concatenate([[0], np.cumsum([len(c) for c in row_cols])]).astype(np.int64)
    cols = np.concatenate(row_cols).astype(np.int64)
    vals = rng.uniform(-2.0, 2.0, len(cols)).astype(dtype)
    weight = rng.standard_normal((300, 37)).astype(dtype)
    bias = rng.standard_normal(37).astype(dtype)
    ograd = rng.standard_normal((40, 37)).astype(dtype)
    x = mx.nd.sparse.csr_matrix((vals, cols, indptr), shape=(40, 300), dtype=dtype)
    for b in (None, bias):
        w = mx.nd.array(weight, dtype=dtype)
        grad = mx.nd.sparse.zeros("row_sparse", w.shape, dtype=dtype)
        mx.autograd.mark_variables([w], [grad])
        with mx.autograd.record():
            if b is None:
                out = mx.nd.gluon_sparse_dot(x, w, squared=squared)
            else:
                out = mx.nd.gluon_sparse_dot(x, w, mx.nd.array(b, dtype=dtype),
                                             squared=squared, with_bias=True)
        out.backward(mx.nd.array(ograd, dtype=dtype))
        want = dot.sequential_forward(indptr, cols, vals, weight, b, squared)
        assert np.array_equal(out.asnumpy().view(np.uint8), want.view(np.uint8))
    rows = grad.indices.asnumpy()
    assert list(rows) == sorted(set(cols))
    want = dot.sequential_weight_grad(indptr, cols, vals, ograd, weight, squared)
    assert np.array_equal(grad.data.asnumpy().view(np.uint8), want.view(np.uint8))


def test_dot_bound_names_the_first_element_outside_it():
    want = np.ones((2, 3))
    got = want.astype(np.float32)
    dot.assert_within_bound("ok", got, want, np.ones_like(want), 4, 1, np.float32)
    got[1, 1] += 1e-5
    with pytest.raises(AssertionError, match=r"1 elements outside the rounding bound, first at "
                                             r"\(1, 1\)"):
        dot.assert_within_bound("fwd", got, want, np.ones_like(want), 4, 1, np.float32)


def test_kahan_column_sums_are_column_sum_h_step_by_step():
    m = np.random.default_rng(4).standard_normal((50, 3)).astype(np.float32) * 1e3
    m[10, 2] = 3e38  # the sum overflows: the residual is reset, as kahan_add does
    m[11, 2] = 3e38
    want = []
    for column in m.T:
        total = residual = np.float32(0)
        with np.errstate(over="ignore", invalid="ignore"):
            for x in column:
                y = x - residual
                t = total + y
                residual = np.float32(0) if np.isinf(t) else (t - total) - y
                total = t
        want.append(total)
    family.assert_bitwise("column sums", dot.kahan_column_sums(m), np.array(want, np.float32))


# --- command line ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["--only", "bogus"], ["--only", "family", "--rows", "100"],
                                  ["--only", "dot", "--repeat", "0"]])
def test_cli_refuses_bad_options(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(argv)
    assert exc.value.code == 2


def test_cli_only_parts():
    assert cli.parse_args([]).only == ["adam", "family", "dot"]
    args = cli.parse_args(["--only", "dot", "--only", "family", "--quick"])
    assert args.only == ["family", "dot"] and args.rows == cli.QUICK_ROWS
    assert "--only" in cli.build_parser().format_help()


# --- the CUDA build -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def family_library(tmp_path_factory):
    """The family library built by build.sh for one architecture (about 20 s)."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH: the CUDA harness cannot be compiled on this machine")
    out = tmp_path_factory.mktemp("gpu_harness_family") / "libfamily_harness.so"
    subprocess.run(["sh", bindings.BUILD_SCRIPT, str(out)], check=True, capture_output=True,
                   env=dict(os.environ, TARGET="family", ARCHS="80"))
    return family_bindings.load_family_library(path=str(out))


@pytest.mark.slow
def test_family_library_knows_every_rule(family_library):
    import gluon_sparse.optimizer as gso  # noqa: F401  (imports every rule)
    from gluon_sparse.optimizer import _adamw, _family
    rules = [_adamw.ADAMW]
    pending = list(_family.Rule.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        rules.append(cls())
    names = set()
    for rule in rules:
        sizes = family_bindings.rule_sizes(family_library, rule.name)
        assert sizes == (len(rule.state_names), len(rule.fixed_names), len(rule.step_names))
        names.add(rule.name)
    assert names == set(fixtures.CASES)
    with pytest.raises(ValueError, match="no rule named adam"):
        family_bindings.rule_sizes(family_library, "adam")


@pytest.mark.slow
def test_family_entry_points_return_errors_as_text(family_library):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: run_harness.py --only family checks the kernels")
    kernels = family_bindings.RuleKernels(family_library, torch, "sgd_mom", device="cpu")
    w, s = torch.zeros(4, 3), [torch.zeros(4, 3)]
    for validate in (True, False):
        with pytest.raises(ValueError, match="CUDA error"):
            kernels.step(w, s, torch.ones(1, 3), torch.tensor([1]), [0.1, 0.0, -1.0], [0.9],
                         validate=validate)
    deferred = family_bindings.DeferredRuleKernels(family_library, torch, "rmsprop", w, 4,
                                                   [0.9, 1e-8, -1.0])
    with pytest.raises(ValueError, match="does not fit"):
        deferred.flush(4)
    with pytest.raises(ValueError, match="CUDA error"):
        deferred.flush(3)
    dk = family_bindings.DotKernels(family_library, torch)
    indptr, cols, vals = torch.tensor([0, 1]), torch.tensor([1]), torch.ones(1)
    with pytest.raises(ValueError, match="CSR validation"):
        dk.forward(indptr, cols, vals, torch.ones(4, 3))
    with pytest.raises(ValueError, match="CSR validation"):
        dk.weight_grad(indptr, cols, vals, torch.ones(1, 3), torch.ones(4, 3))
    with pytest.raises(ValueError, match="bias gradient kernel"):
        dk.bias_grad(torch.ones(2, 3))
    assert torch.equal(w, torch.zeros(4, 3))
