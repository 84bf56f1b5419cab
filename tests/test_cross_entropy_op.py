"""``gluon_sparse_cross_entropy``: the fused loss of SampledOutput (csrc/ops/cross_entropy.cc).

Forward and backward against a float64 NumPy reference of the same formulas
and against MXNet's own composition (log_softmax, pick, softrelu, sum), on
both builds of the float32 kernels (baseline and AVX2, bitwise equal) and on
the serial and parallel paths (bitwise equal); bad targets give errors that
name the row.
"""
import mxnet as mx
import numpy as np
import pytest

from gluon_sparse import _native

SERIAL = {"grain": 1 << 60, "threads": 1}
PARALLEL = {"grain": 1, "threads": 2}


@pytest.fixture(autouse=True)
def _restore_defaults():
    _native.load_ops()
    yield
    _native._set_parallelism(0, 0)
    _native._force_simd_path(-1)


def reference(z, t, loss):
    """Loss, d loss / d logits and d loss / d target per unit output gradient, in float64."""
    z = z.astype(np.float64)
    t = t.astype(np.float64)
    if loss == "sigmoid":
        with np.errstate(over="ignore"):
            sigmoid = 1 / (1 + np.exp(-z))
        softplus = np.maximum(z, 0) + np.log1p(np.exp(-np.abs(z)))
        return (softplus - z * t).sum(1), sigmoid - t, -z
    m = z.max(1, keepdims=True)
    lse = m + np.log(np.exp(z - m).sum(1, keepdims=True))
    if t.ndim == 1:  # class ids
        rows, y = np.arange(len(z)), t.astype(np.int64)
        dz = np.exp(z - lse)
        dz[rows, y] -= 1
        return lse[:, 0] - z[rows, y], dz, np.zeros_like(t)
    return (t * (lse - z)).sum(1), t.sum(1, keepdims=True) * np.exp(z - lse) - t, lse - z


def make_case(rng, rows, cols, loss, target, dtype, scale=5.0):
    z = (rng.standard_normal((rows, cols)) * scale).astype(dtype)
    if target == "class":
        return z, rng.integers(0, cols, rows).astype(dtype)
    t = (rng.random((rows, cols)) < 0.2).astype(dtype)
    if loss == "softmax":  # uniform over the row's positives; a row without any stays 0
        t /= np.maximum(t.sum(1, keepdims=True), 1)
    return z, t


def run(z, t, loss, ograd):
    """Output, logits gradient and target gradient of the operator."""
    zn, tn = mx.nd.array(z, dtype=z.dtype), mx.nd.array(t, dtype=t.dtype)
    zn.attach_grad()
    tn.attach_grad()
    with mx.autograd.record():
        out = mx.nd.gluon_sparse_cross_entropy(zn, tn, loss=loss)
    out.backward(mx.nd.array(ograd, dtype=z.dtype))
    return out.asnumpy(), zn.grad.asnumpy(), tn.grad.asnumpy()


CASES = [("softmax", "dense"), ("softmax", "class"), ("sigmoid", "dense")]
# Widths around the kernels' 8 lanes: a lone column, a partial vector, exact vectors, a tail.
WIDTHS = [1, 5, 8, 13, 64, 1283]


@pytest.mark.parametrize("loss, target", CASES)
@pytest.mark.parametrize("dtype, rtol", [("float32", 2e-6), ("float64", 1e-13)])
@pytest.mark.parametrize("cols", WIDTHS)
def test_equals_the_float64_reference(loss, target, dtype, rtol, cols):
    rng = np.random.default_rng(cols)
    z, t = make_case(rng, 9, cols, loss, target, dtype)
    ograd = rng.random(9).astype(dtype) + 0.5
    out, dz, dt = run(z, t, loss, ograd)
    want, want_dz, want_dt = reference(z, t, loss)
    assert out.dtype == np.dtype(dtype) and out.shape == (9,)
    np.testing.assert_allclose(out, want, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(dz, ograd[:, None] * want_dz, rtol=rtol, atol=rtol)
    want_dt = ograd[:, None] * want_dt if target == "dense" else np.zeros(9)
    np.testing.assert_allclose(dt, want_dt, rtol=rtol, atol=rtol * np.abs(want_dt).max())


@pytest.mark.parametrize("loss, target", CASES)
def test_equals_mxnets_composition(loss, target):
    rng = np.random.default_rng(7)
    z, t = make_case(rng, 16, 300, loss, target, "float32")
    ograd = rng.random(16).astype("float32")
    out, dz, _ = run(z, t, loss, ograd)
    zn, tn = mx.nd.array(z), mx.nd.array(t)
    zn.attach_grad()
    with mx.autograd.record():
        if loss == "sigmoid":
            want = mx.nd.sum(mx.nd.Activation(zn, act_type="softrelu") - zn * tn, axis=1)
        elif target == "class":
            want = -mx.nd.pick(mx.nd.log_softmax(zn, axis=1), tn, axis=1)
        else:
            want = -mx.nd.sum(tn * mx.nd.log_softmax(zn, axis=1), axis=1)
    want.backward(mx.nd.array(ograd))
    np.testing.assert_allclose(out, want.asnumpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dz, zn.grad.asnumpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("loss, target", CASES)
def test_extreme_logits_stay_finite_and_right(loss, target):
    """Logits far past exp's range: no overflow to inf or NaN where the true value is finite."""
    z = np.array([[-1000.0, 0.0, 1000.0, 88.0, -88.0, 90.0, -100.0, 5.0, 3.0]] * 3,
                 dtype="float32")
    z[1] *= -1
    z[2] = -1e30
    z[2, 4] = 0.0
    if target == "class":
        t = np.array([2, 0, 4], dtype="float32")
    else:
        t = np.zeros_like(z)
        t[:, [2, 4]] = 0.5 if loss == "softmax" else 1.0
    out, dz, dt = run(z, t, loss, np.ones(3, "float32"))
    want, want_dz, _ = reference(z, t, loss)
    assert np.isfinite(out).all() and np.isfinite(dz).all()
    np.testing.assert_allclose(out, want, rtol=1e-6)
    np.testing.assert_allclose(dz, want_dz, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("loss", ["softmax", "sigmoid"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_masked_candidates_add_nothing(loss, dtype):
    """A logit of -inf with a target of 0 (a candidate masked out) adds 0 to the loss
    and gets no gradient (MXNet's composition gives NaN: 0 x -inf)."""
    z = np.array([[1.0, -np.inf, 2.0, 0.5]], dtype=dtype)
    t = np.array([[0.0, 0.0, 1.0, 0.0]], dtype=dtype)
    out, dz, _ = run(z, t, loss, np.ones(1, dtype))
    finite = reference(z[:, [0, 2, 3]], t[:, [0, 2, 3]], loss)
    np.testing.assert_allclose(out, finite[0], rtol=1e-6)
    assert dz[0, 1] == 0.0
    np.testing.assert_allclose(dz[:, [0, 2, 3]], finite[1], rtol=1e-6, atol=1e-7)


def test_nan_logits_reach_the_loss():
    z = np.array([[0.0, np.nan, 1.0], [0.0, 1.0, 2.0]], dtype="float32")
    t = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]], dtype="float32")
    for loss in ("softmax", "sigmoid"):
        out, _, _ = run(z, t, loss, np.ones(2, "float32"))
        assert np.isnan(out[0]) and np.isfinite(out[1])


@pytest.mark.parametrize("loss, target", CASES)
def test_avx2_and_baseline_builds_are_bitwise_equal(loss, target):
    rng = np.random.default_rng(3)
    z, t = make_case(rng, 33, 1001, loss, target, "float32", scale=30.0)
    ograd = rng.random(33).astype("float32")
    results = []
    for path in (0, 1):
        _native._force_simd_path(path)
        results.append(run(z, t, loss, ograd))
    for got, want in zip(*results):
        assert np.array_equal(got.view(np.int32), want.view(np.int32))


@pytest.mark.parametrize("loss, target", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_serial_and_parallel_paths_are_bitwise_equal(loss, target, dtype):
    rng = np.random.default_rng(4)
    z, t = make_case(rng, 41, 300, loss, target, dtype)
    ograd = rng.random(41).astype(dtype)
    results = []
    for mode in (SERIAL, PARALLEL):
        _native._set_parallelism(**mode)
        results.append(run(z, t, loss, ograd))
    for got, want in zip(*results):
        assert np.array_equal(got, want)


@pytest.mark.parametrize("label, shown", [(5.0, "5"), (-1.0, "-1"), (2.5, "2.5")])
def test_a_bad_class_names_its_row(label, shown):
    z = mx.nd.zeros((3, 5))
    labels = mx.nd.array([0, label, 1])
    with pytest.raises(mx.MXNetError, match=r"the class of row 1 is %s, not an integer in "
                                            r"\[0, 5\)" % shown):
        mx.nd.gluon_sparse_cross_entropy(z, labels).asnumpy()


@pytest.mark.parametrize("target_shape, loss, message", [
    ((3, 4), "softmax", r"target must have the logits' shape \(3, 5\) or be \(3,\) class ids, "
                        r"got \(3, 4\)"),
    ((3,), "sigmoid", r"target must have the logits' shape \(3, 5\), got \(3,\)"),
])
def test_a_target_of_the_wrong_shape_is_refused(target_shape, loss, message):
    with pytest.raises(mx.MXNetError, match=message):
        mx.nd.gluon_sparse_cross_entropy(mx.nd.zeros((3, 5)), mx.nd.zeros(target_shape),
                                         loss=loss).asnumpy()


def test_an_unknown_loss_is_refused():
    with pytest.raises(mx.MXNetError, match="loss must be 'softmax' or 'sigmoid', got 'hinge'"):
        mx.nd.gluon_sparse_cross_entropy(mx.nd.zeros((2, 3)), mx.nd.zeros((2, 3)),
                                         loss="hinge").asnumpy()


def test_a_target_of_another_dtype_is_refused():
    with pytest.raises(mx.MXNetError, match="must have the logits' dtype"):
        mx.nd.gluon_sparse_cross_entropy(mx.nd.zeros((2, 3)),
                                         mx.nd.zeros((2, 3), dtype="float64")).asnumpy()


@pytest.mark.parametrize("loss", ["softmax", "sigmoid"])
def test_logits_without_classes_are_refused_not_a_crash(loss):
    # MXNet hands the shape check a 0 dimension as "unknown": (3, 0) logits got past
    # it and the softmax kernel read through a null pointer (SIGSEGV). In a child
    # process, so that a crash fails this test instead of the run.
    import subprocess
    import sys
    code = ("import mxnet as mx, numpy as np\nfrom gluon_sparse import _native\n"
            "_native.load_ops()\nempty = mx.nd.array(np.zeros((3, 0)))\n"
            "try:\n    mx.nd.gluon_sparse_cross_entropy(empty, empty, loss=%r).asnumpy()\n"
            "except mx.MXNetError as err:\n    print(err)\n" % loss)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "classes >= 1, got shape (3, 0)" in done.stdout, done.stdout
