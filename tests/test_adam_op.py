"""The ``gluon_sparse_adam_update`` operator against MXNet's adam_update and NumPy.

MXNet's own ``adam_update(lazy_update=False)`` on a row_sparse gradient is the
reference: the plugin reproduces its arithmetic operation for operation, so on
CPU the results must be bitwise equal. A float64 NumPy implementation of the
documented formula checks both against the maths.
"""
import os
import subprocess

import mxnet as mx
import numpy as np
import pytest

from gluon_sparse import _native

_native.load_ops()

OPS_DIR = os.path.join(os.path.dirname(_native.__file__), "csrc", "ops")


def _rsp(values, indices, shape, dtype):
    return mx.nd.sparse.row_sparse_array((np.asarray(values, dtype=dtype),
                                          np.asarray(indices, dtype=np.int64)),
                                         shape=shape, dtype=dtype)


def _random_grad(rng, shape, rows, dtype):
    indices = np.sort(rng.choice(shape[0], rows, replace=False))
    return _rsp(rng.randn(rows, *shape[1:]), indices, shape, dtype)


def numpy_adam(weight, mean, var, grad_rows, indices, lr, beta1=0.9, beta2=0.999, epsilon=1e-8,
               wd=0.0, rescale_grad=1.0, clip_gradient=-1.0):
    """One standard Adam step in float64, from the formula in mx.optimizer.Adam's docstring."""
    grad = np.zeros_like(weight)
    grad[indices] = grad_rows
    g = grad * rescale_grad + wd * weight
    if clip_gradient >= 0:
        g = np.clip(g, -clip_gradient, clip_gradient)
    mean = beta1 * mean + (1 - beta1) * g
    var = beta2 * var + (1 - beta2) * g * g
    return weight - lr * mean / (np.sqrt(var) + epsilon), mean, var


DEFAULTS = dict(beta1=0.9, beta2=0.999, epsilon=1e-8, wd=0.0, rescale_grad=1.0,
                clip_gradient=-1.0)
PARAMS = [
    dict(lr=0.01),
    dict(lr=0.05, wd=0.03),
    dict(lr=0.02, rescale_grad=0.25, clip_gradient=0.1),
    dict(lr=0.01, wd=0.1, rescale_grad=2.0, clip_gradient=0.5, beta1=0.8, beta2=0.99,
         epsilon=1e-6),
    dict(lr=0.01, clip_gradient=0.0),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("params", PARAMS, ids=lambda p: ",".join("%s=%s" % kv for kv in p.items()))
def test_bitwise_equal_to_mxnet_adam_update(dtype, params):
    rng = np.random.RandomState(0)
    shape = (50, 8)
    weight = mx.nd.array(rng.randn(*shape), dtype=dtype)
    mean, var = mx.nd.zeros(shape, dtype=dtype), mx.nd.zeros(shape, dtype=dtype)
    ref = [a.copy() for a in (weight, mean, var)]
    # Row counts include an empty gradient (decay only) and a full one.
    for rows in [7, 0, 50, 1, 13] * 6:
        grad = _random_grad(rng, shape, rows, dtype)
        mx.nd.adam_update(ref[0], grad, ref[1], ref[2], out=ref[0], lazy_update=False, **params)
        mx.nd.gluon_sparse_adam_update(weight, grad, mean, var, out=weight, **params)
    for got, want in zip((weight, mean, var), ref):
        np.testing.assert_array_equal(got.asnumpy(), want.asnumpy())


@pytest.mark.parametrize("params", PARAMS[1:4])
def test_matches_numpy_reference(params):
    rng = np.random.RandomState(1)
    shape = (40, 6)
    w = rng.randn(*shape)
    m, v = np.zeros(shape), np.zeros(shape)
    weight, mean, var = (mx.nd.array(a, dtype="float64") for a in (w, m, v))
    for _ in range(40):
        indices = np.sort(rng.choice(shape[0], 5, replace=False))
        rows = rng.randn(5, shape[1])
        # MXNet's AdamParam (and so the operator) holds its scalars as C floats.
        scalars = {k: float(np.float32(x)) for k, x in dict(DEFAULTS, **params).items()}
        w, m, v = numpy_adam(w, m, v, rows, indices, **scalars)
        mx.nd.gluon_sparse_adam_update(weight, _rsp(rows, indices, shape, "float64"), mean, var,
                                       out=weight, **params)
    np.testing.assert_allclose(weight.asnumpy(), w, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(mean.asnumpy(), m, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(var.asnumpy(), v, rtol=1e-12, atol=1e-16)


def test_large_weight_across_threads_and_trailing_dims():
    # Large enough for the OpenMP path; 3-D weight: rows x (3*11) columns.
    rng = np.random.RandomState(2)
    shape = (6001, 3, 11)
    weight = mx.nd.array(rng.randn(*shape))
    mean, var = mx.nd.zeros(shape), mx.nd.zeros(shape)
    ref = [a.copy() for a in (weight, mean, var)]
    for rows in (1000, 3, 6001):
        grad = _random_grad(rng, shape, rows, "float32")
        kwargs = dict(lr=0.003, wd=0.01, clip_gradient=1.0)
        mx.nd.adam_update(ref[0], grad, ref[1], ref[2], out=ref[0], lazy_update=False, **kwargs)
        mx.nd.gluon_sparse_adam_update(weight, grad, mean, var, out=weight, **kwargs)
    for got, want in zip((weight, mean, var), ref):
        np.testing.assert_array_equal(got.asnumpy(), want.asnumpy())


def test_row_sparse_weight_holding_every_row():
    rng = np.random.RandomState(3)
    shape = (30, 4)
    dense = rng.randn(*shape).astype(np.float32)
    weight = _rsp(dense, np.arange(shape[0]), shape, "float32")
    ref = weight.copy()
    mean, var = mx.nd.zeros(shape), mx.nd.zeros(shape)
    ref_mean, ref_var = mean.copy(), var.copy()
    for _ in range(5):
        grad = _random_grad(rng, shape, 6, "float32")
        mx.nd.adam_update(ref, grad, ref_mean, ref_var, out=ref, lazy_update=False, lr=0.1, wd=0.1)
        mx.nd.gluon_sparse_adam_update(weight, grad, mean, var, out=weight, lr=0.1, wd=0.1)
    assert weight.stype == "row_sparse"
    np.testing.assert_array_equal(weight.asnumpy(), ref.asnumpy())
    np.testing.assert_array_equal(var.asnumpy(), ref_var.asnumpy())


def _error_of(weight, grad, mean, var, out=None, **params):
    """Run the op and return the message of the MXNetError it raises (None if none)."""
    out = weight if out is None else out
    params.setdefault("lr", 0.1)
    try:
        mx.nd.gluon_sparse_adam_update(weight, grad, mean, var, out=out, **params)
        out.wait_to_read()
    except mx.base.MXNetError as err:
        # lib_api keeps every message of the process: this call's is the last one.
        return str(err).strip().splitlines()[-1]
    return None


@pytest.mark.parametrize("indices, expected", [
    ([0, 5], "grad row index 5 at position 1 is out of range for a weight of 5 rows"),
    ([-3], "grad row index -3 at position 0 is out of range"),
    ([1 << 62], "is out of range"),
    ([3, 1], "sorted and unique, but index 1 at position 1 follows 3"),
    ([2, 2], "sorted and unique, but index 2 at position 1 follows 2"),
])
def test_bad_indices_are_rejected(indices, expected):
    shape = (5, 3)
    grad = mx.nd.sparse.row_sparse_array(
        (mx.nd.ones((len(indices), 3)), mx.nd.array(indices, dtype=np.int64)), shape=shape)
    weight, mean, var = mx.nd.zeros(shape), mx.nd.zeros(shape), mx.nd.zeros(shape)
    message = _error_of(weight, grad, mean, var)
    assert message is not None and expected in message


def test_more_indices_than_rows_is_rejected():
    grad = mx.nd.sparse.row_sparse_array(
        (mx.nd.ones((4, 2)), mx.nd.array([0, 1, 2, 3], dtype=np.int64)), shape=(2, 2))
    message = _error_of(mx.nd.zeros((2, 2)), grad, mx.nd.zeros((2, 2)), mx.nd.zeros((2, 2)))
    assert "grad stores 4 row indices" in message


@pytest.mark.parametrize("case, expected", [
    ("grad_shape", "grad has shape (5, 4) but weight has shape (5, 3)"),
    ("mean_shape", "mean has shape (5, 2) but weight has shape (5, 3)"),
    ("var_dtype", "var has dtype float64 but weight has float32"),
    ("float16", "train float16 weights with multi_precision=True"),
    ("dense_grad", "grad must be row_sparse; use mx.nd.adam_update"),
    ("rsp_mean", "mean must be dense"),
    ("partial_rsp_weight", "must store all its 5 rows for a standard (non-lazy) update, but it "
                           "stores 2"),
    ("not_in_place", "updates the weight in place: call it with out=weight"),
    ("unknown_param", "unknown parameter 'momentum'"),
    ("bad_number", "parameter wd='abc' is not a float32 number"),
    ("missing_lr", "parameter lr is required"),
])
def test_bad_arguments_are_rejected(case, expected):
    shape = (5, 3)
    weight, mean, var = mx.nd.zeros(shape), mx.nd.zeros(shape), mx.nd.zeros(shape)
    grad = _rsp(np.ones((1, 3)), [1], shape, "float32")
    out, params = weight, {"lr": 0.1}
    if case == "grad_shape":
        grad = _rsp(np.ones((1, 4)), [1], (5, 4), "float32")
    elif case == "mean_shape":
        mean = mx.nd.zeros((5, 2))
    elif case == "var_dtype":
        var = mx.nd.zeros(shape, dtype="float64")
    elif case == "float16":
        weight, mean, var = (mx.nd.zeros(shape, dtype="float16") for _ in range(3))
        grad, out = grad.astype("float16"), weight
    elif case == "dense_grad":
        grad = mx.nd.ones(shape)
    elif case == "rsp_mean":
        mean = mean.tostype("row_sparse")
    elif case == "partial_rsp_weight":
        weight = _rsp(np.ones((2, 3)), [0, 3], shape, "float32")
        out = weight
    elif case == "not_in_place":
        out = mx.nd.zeros(shape)
    elif case == "unknown_param":
        params["momentum"] = 0.9
    elif case == "bad_number":
        params["wd"] = "abc"
    elif case == "missing_lr":
        params = {}
    try:
        mx.nd.gluon_sparse_adam_update(weight, grad, mean, var, out=out, **params)
        out.wait_to_read()
        message = None
    except mx.base.MXNetError as err:
        message = str(err)
    assert message is not None and expected in message


# A C++ driver that compiles the operator's source with AddressSanitizer and
# UBSan and calls its CPU forward function on valid and hostile inputs, every
# buffer allocated at its exact size so any out-of-bounds access is reported.
_SANITIZER_DRIVER = r"""
#include <cstdio>
#include <vector>
#include "adam_op.cc"
#include "adam_op_cpu.cc"
#include "error_messages.cc"
#include "omp_threads.cc"
#include "worker_pool.cc"

static int run(std::vector<int64_t> idx, int64_t rows, int64_t cols, int64_t weight_rows_stored,
               bool sparse_weight) {
  std::vector<float> w(weight_rows_stored * cols, 1.f), m(rows * cols), v(rows * cols);
  std::vector<float> g(idx.size() * cols, 0.5f);
  std::vector<int64_t> w_idx(weight_rows_stored);
  for (int64_t i = 0; i < weight_rows_stored; ++i) w_idx[i] = i;
  const std::vector<int64_t> shape = {rows, cols};
  MXContext cpu("cpu", 0);
  MXSparse gs, ws;
  gs.set(g.data(), shape.data(), 2, idx.data(), idx.size());
  ws.set(w.data(), shape.data(), 2, w_idx.data(), w_idx.size());
  MXStorageType wst = sparse_weight ? kRowSparseStorage : kDefaultStorage;
  void* wptr = sparse_weight ? static_cast<void*>(&ws) : static_cast<void*>(w.data());
  std::vector<MXTensor> in = {MXTensor(wptr, shape, kFloat32, 0, cpu, wst),
                              MXTensor(&gs, shape, kFloat32, 0, cpu, kRowSparseStorage),
                              MXTensor(m.data(), shape, kFloat32, 0, cpu),
                              MXTensor(v.data(), shape, kFloat32, 0, cpu)};
  std::vector<MXTensor> out = {MXTensor(wptr, shape, kFloat32, 0, cpu, wst)};
  OpResource res(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
  std::unordered_map<std::string, std::string> attrs = {{"lr", "0.1"}, {"wd", "0.01"},
                                                        {"clip_gradient", "1"}};
  return gluon_sparse::adam::compute_cpu(attrs, &in, &out, res) == MX_SUCCESS ? 1 : 0;
}

int main() {
  int failures = 0;
  auto expect = [&](const char* name, int got, int want) {
    if (got != want) { std::printf("FAIL %s\n", name); ++failures; }
  };
  expect("valid", run({1, 5, 99}, 100, 7, 100, false), 1);
  expect("valid, threads", run({0, 17, 40000, 65535}, 65536, 3, 65536, false), 1);
  expect("empty grad", run({}, 10, 4, 10, false), 1);
  expect("out of range", run({3, 10}, 10, 4, 10, false), 0);
  expect("huge", run({int64_t(1) << 62}, 10, 4, 10, false), 0);
  expect("negative", run({-1, 2}, 10, 4, 10, false), 0);
  expect("unsorted", run({5, 2}, 10, 4, 10, false), 0);
  expect("duplicate", run({2, 2}, 10, 4, 10, false), 0);
  expect("more indices than rows", run({0, 1, 2}, 2, 4, 2, false), 0);
  expect("rsp weight, all rows", run({1, 4}, 10, 4, 10, true), 1);
  expect("rsp weight, missing rows", run({1, 4}, 10, 4, 3, true), 0);
  std::printf("%d failures\n", failures);
  return failures != 0;
}
"""


@pytest.mark.slow
def test_cpu_kernel_under_address_and_undefined_behaviour_sanitizers(tmp_path):
    mxnet_dir = os.path.dirname(mx.__file__)
    driver = tmp_path / "driver.cc"
    driver.write_text(_SANITIZER_DRIVER)
    binary = str(tmp_path / "driver")
    includes = ["-std=c++17", "-fopenmp", "-DGLUON_SPARSE_MXNET_VERSION_CODE=10901",
                "-I", OPS_DIR, "-I", os.path.join(mxnet_dir, "include"), "-c"]
    sanitize = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
    # -O0 compiles fastest and hides nothing from the sanitizers. MXNet's
    # lib_api.cc (through mxnet_lib_api.cc, as the library builds it) only
    # marshals the tensors: compiled without instrumentation, in parallel with
    # the driver.
    compiles = [subprocess.Popen(["g++", "-O0", "-fno-omit-frame-pointer"] + sanitize + includes
                                 + [str(driver), "-o", binary + ".o"], stderr=subprocess.PIPE),
                subprocess.Popen(["g++", "-O0", "-I", os.path.join(mxnet_dir, "src")] + includes
                                 + [os.path.join(OPS_DIR, "mxnet_lib_api.cc"),
                                    "-o", binary + "_lib_api.o"], stderr=subprocess.PIPE)]
    for proc in compiles:
        _, stderr = proc.communicate()
        assert proc.returncode == 0, stderr.decode()
    subprocess.run(["g++", "-fopenmp"] + sanitize + [binary + ".o", binary + "_lib_api.o",
                                                     "-o", binary], check=True, capture_output=True)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0", OMP_NUM_THREADS="2")
    result = subprocess.run([binary], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 failures" in result.stdout
    assert "runtime error" not in result.stderr and "AddressSanitizer" not in result.stderr


@pytest.mark.parametrize("flush", [False, True])
def test_flush_denormals(flush):
    # Means of rows long absent from the gradient decay into the denormal range.
    rng = np.random.RandomState(8)
    shape = (40, 12)
    tiny = np.finfo(np.float32).tiny  # smallest normal float32
    mean0 = (rng.rand(*shape) * tiny * 4).astype(np.float32)  # denormal and just-normal values
    weight0 = rng.randn(*shape).astype(np.float32)
    var0 = np.full(shape, 1e-6, dtype=np.float32)
    grad = _random_grad(rng, shape, 5, "float32")
    ref = [mx.nd.array(a) for a in (weight0, mean0, var0)]
    got = [mx.nd.array(a) for a in (weight0, mean0, var0)]
    mx.nd.adam_update(ref[0], grad, ref[1], ref[2], out=ref[0], lazy_update=False, lr=0.01)
    mx.nd.gluon_sparse_adam_update(got[0], grad, got[1], got[2], out=got[0], lr=0.01,
                                   flush_denormals=flush)
    ref_mean, mean = ref[1].asnumpy(), got[1].asnumpy()
    assert (np.abs(ref_mean)[ref_mean != 0] < tiny).any()  # MXNet keeps denormals
    if flush:
        # No denormal survives; everything else is what MXNet computes, to rounding.
        assert not ((mean != 0) & (np.abs(mean) < tiny)).any()
        normal = np.abs(ref_mean) >= tiny
        np.testing.assert_array_equal(mean[normal], ref_mean[normal])
        np.testing.assert_allclose(got[0].asnumpy(), ref[0].asnumpy(), rtol=1e-6, atol=1e-30)
    else:
        for a, b in zip(got, ref):
            np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())
    # The flag is per call: a later call without it keeps denormals again.
    again = [mx.nd.array(a) for a in (weight0, mean0, var0)]
    mx.nd.gluon_sparse_adam_update(again[0], grad, again[1], again[2], out=again[0], lr=0.01)
    np.testing.assert_array_equal(again[1].asnumpy(), ref_mean)


def test_flush_denormals_rejects_non_boolean():
    shape = (5, 3)
    grad = _rsp(np.ones((1, 3)), [1], shape, "float32")
    message = _error_of(mx.nd.zeros(shape), grad, mx.nd.zeros(shape), mx.nd.zeros(shape),
                        flush_denormals="maybe")
    assert "flush_denormals='maybe' is not a boolean" in message
