"""The CPU kernels' serial and parallel paths give bitwise equal results.

Every kernel picks serial or parallel execution by its amount of work
(csrc/ops/omp_threads.h); the test knob ``_native._set_parallelism`` forces
each path (grain 1 on two threads: parallel wherever there are two items;
a huge grain: serial), and the results are compared bit for bit, and with a
NumPy reference. Also: deferred Adam's replay against the eager operator,
bitwise, on both builds of its host SIMD kernels (host_simd.h: baseline
x86-64 and AVX2): full steps (adam_replay_steps.cc) for rows back after a few
dozen steps, the frozen-weight decay (geometric_decay.h) for long absences;
and that decay against NumPy's own float32 multiplications.
"""
import math

import mxnet as mx
import numpy as np
import pytest

from gluon_sparse import _native
from gluon_sparse.optimizer import deferred

SERIAL = {"grain": 1 << 60, "threads": 1}
PARALLEL = {"grain": 1, "threads": 2}
B1, B2, EPS = 0.9, 0.999, 1e-8


@pytest.fixture(autouse=True)
def _restore_defaults():
    yield
    _native._set_parallelism(0, 0)
    _native._force_simd_path(-1)


def _bits(array):
    a = array.asnumpy()
    return a.view(np.int32 if a.dtype == np.float32 else np.int64)


def _random_csr(rng, rows, cols, nnz_per_row, dtype="float32"):
    ids = np.sort(np.stack([rng.choice(cols, nnz_per_row, replace=False) for _ in range(rows)]),
                  axis=1)
    values = rng.standard_normal(ids.shape).astype(dtype)
    indptr = np.arange(0, rows * nnz_per_row + 1, nnz_per_row)
    return mx.nd.sparse.csr_matrix((values.ravel(), ids.ravel(), indptr), shape=(rows, cols),
                                   dtype=dtype)


def test_build_info_reports_grain_and_team():
    info = _native.build_info()
    assert info["grain"] > 0 and info["omp_threads"] >= 1
    _native._set_parallelism(5, 3)
    assert _native.build_info()["grain"] == 5 and _native.build_info()["omp_threads"] == 3


@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dot_forward_backward_serial_equals_parallel(squared, dtype):
    rng = np.random.default_rng(1)
    x = _random_csr(rng, 37, 500, 9, dtype)
    weight = mx.nd.array(rng.standard_normal((500, 24)), dtype=dtype)
    ograd = mx.nd.array(rng.standard_normal((37, 24)), dtype=dtype)
    results = []
    for mode in (SERIAL, PARALLEL):
        _native._set_parallelism(**mode)
        w = weight.copy()
        # Not attach_grad(stype=...): MXNet 1.9 would make the gradient float32.
        grad = mx.nd.sparse.zeros("row_sparse", w.shape, dtype=dtype)
        mx.autograd.mark_variables([w], [grad])
        with mx.autograd.record():
            out = mx.nd.gluon_sparse_dot(x, w, squared=squared)
        out.backward(ograd)
        results.append((out, w.grad))
    (out_s, grad_s), (out_p, grad_p) = results
    np.testing.assert_array_equal(_bits(out_s), _bits(out_p))
    np.testing.assert_array_equal(_bits(grad_s), _bits(grad_p))
    np.testing.assert_array_equal(grad_s.indices.asnumpy(), grad_p.indices.asnumpy())
    dense_x, wn = x.asnumpy(), weight.asnumpy()
    if squared:
        dense_x, wn = dense_x ** 2, wn ** 2
    np.testing.assert_allclose(out_s.asnumpy(), dense_x @ wn, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_eager_adam_serial_equals_parallel(dtype):
    rng = np.random.default_rng(2)
    rows, cols = 3001, 7
    idx = np.sort(rng.choice(rows, 400, replace=False))
    grad = mx.nd.sparse.row_sparse_array((rng.standard_normal((400, cols)), idx),
                                         shape=(rows, cols), dtype=dtype)
    init = [rng.standard_normal((rows, cols)), rng.standard_normal((rows, cols)) * 1e-3,
            rng.random((rows, cols)) * 1e-4]
    outputs = []
    for mode in (SERIAL, PARALLEL):
        _native._set_parallelism(**mode)
        w, m, v = (mx.nd.array(a, dtype=dtype) for a in init)
        for _ in range(3):
            mx.nd.gluon_sparse_adam_update(w, grad, m, v, out=w, lr=0.01, wd=0.01,
                                           clip_gradient=0.5)
        outputs.append((w, m, v))
    reference = [mx.nd.array(a, dtype=dtype) for a in init]
    for _ in range(3):
        mx.nd.adam_update(*reference[:1], grad, *reference[1:], out=reference[0], lr=0.01,
                          wd=0.01, clip_gradient=0.5, lazy_update=False)
    for serial, parallel, ref in zip(*outputs, reference):
        np.testing.assert_array_equal(_bits(serial), _bits(parallel))
        np.testing.assert_allclose(serial.asnumpy(), ref.asnumpy(), rtol=1e-5, atol=1e-6)


def _deferred_run(rows, cols, steps, schedule, wd, dtype="float32", eager=False, seed=3,
                  clip=None, col_scale=1.0):
    """Train ``rows x cols`` weights for ``steps`` steps on the rows of ``schedule(t)``
    (gradients standard normal times ``col_scale``, a scalar or one factor a column)."""
    rng = np.random.default_rng(seed)
    init = (rng.standard_normal((rows, cols)) * 0.05).astype(dtype)
    init[0, :3] = [0.0, -0.0, 1e-42 if dtype == "float32" else 0.0]  # zeros and a denormal
    w = mx.nd.array(init, dtype=dtype)
    if eager:
        m, v = mx.nd.zeros((rows, cols), dtype=dtype), mx.nd.zeros((rows, cols), dtype=dtype)
    else:
        state = deferred.DeferredAdamState(w, B1, B2, EPS)
    for t in range(1, steps + 1):
        idx = schedule(t)
        grad = mx.nd.sparse.row_sparse_array(
            (rng.standard_normal((len(idx), cols)) * col_scale, idx), shape=(rows, cols),
            dtype=dtype)
        lr = 0.01 * math.sqrt(1 - B2 ** t) / (1 - B1 ** t)
        if eager:
            mx.nd.gluon_sparse_adam_update(w, grad, m, v, out=w, lr=lr, wd=wd,
                                           **({} if clip is None else {"clip_gradient": clip}))
            continue
        if len(idx):
            x = mx.nd.sparse.csr_matrix((np.ones(len(idx)), idx, np.arange(len(idx) + 1)),
                                        shape=(len(idx), rows), dtype=dtype)
            mx.nd.gluon_sparse_dot(x, w)  # the forward pass brings its rows up to date
        state.update(w, grad, t, lr, wd, 1.0, clip)
    if eager:
        return w, m, v
    state.flush()
    return w, state.mean, state.var


def _sparse_schedule(rows):
    def schedule(t):
        if t <= 3:
            return np.arange(rows, dtype=np.int64)  # every row gets a state
        rng = np.random.default_rng(t)
        return np.sort(rng.choice(rows, 5, replace=False)).astype(np.int64)
    return schedule


@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_deferred_serial_equals_parallel(wd):
    runs = []
    for mode in (SERIAL, PARALLEL):
        _native._set_parallelism(**mode)
        runs.append(_deferred_run(300, 33, 120, _sparse_schedule(300), wd))
    for serial, parallel in zip(*runs):
        np.testing.assert_array_equal(_bits(serial), _bits(parallel))


def _decay_inputs(rng, count):
    """float32 values of every kind: normal at any scale, near FLT_MIN, denormal, +-0, inf, NaN."""
    kinds = rng.integers(0, 6, count)
    bits = np.empty(count, np.uint32)
    bits[kinds == 0] = rng.integers(1, 0x00800000, (kinds == 0).sum())            # denormal
    bits[kinds == 1] = rng.integers(0x00800000, 0x01800000, (kinds == 1).sum())   # near FLT_MIN
    bits[kinds == 2] = rng.choice([0, 0x7F800000, 0x7FC00000], (kinds == 2).sum())
    scale = np.ldexp(1 + rng.random(count), -rng.integers(0, 140, count)).astype(np.float32)
    bits[kinds >= 3] = scale.view(np.uint32)[kinds >= 3]
    bits |= rng.integers(0, 2, count).astype(np.uint32) << 31
    return bits.view(np.float32)


@pytest.mark.parametrize("path", [0, 1])
@pytest.mark.parametrize("b", [0.9, 0.999, 0.5000001, 0.99999994, 0.6, 1.5])
def test_geometric_decay_equals_numpy(path, b):
    """The replay's decay kernel: n float32 multiplications by b, bit for bit (denormals kept)."""
    tiny = np.float32(2.0 ** -149)
    assert tiny * np.float32(0.9) == tiny, "NumPy's float32 arithmetic must keep denormals here"
    rng = np.random.default_rng(int(b * 1e6))
    factor = np.float32(b)
    for count, n in [(1, 1), (3, 7), (33, 150), (130, 1100), (200, 40)]:
        x = _decay_inputs(rng, count)
        want = x.copy()
        with np.errstate(all="ignore"):
            for _ in range(n):
                want = want * factor
        got = x.copy()
        if _native._decay_geometric(got, b, n, path) != path:
            pytest.skip("this CPU has no AVX2")
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32),
                                      err_msg="count %d, n %d" % (count, n))


@pytest.mark.parametrize("path", [0, 1])
@pytest.mark.parametrize("b", [0.9, 0.5000001])
def test_geometric_decay_one_step_every_tiny_value(path, b):
    """One step of every float32 below 2 FLT_MIN (the integer-grid path), against NumPy."""
    x = np.arange(0, 0x01000000, dtype=np.uint32).view(np.float32)
    want = x * np.float32(b)
    got = x.copy()
    if _native._decay_geometric(got, b, 1, path) != path:
        pytest.skip("this CPU has no AVX2")
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def _has_avx2():
    return _native._decay_geometric(np.ones(1, np.float32), 0.9, 1, 1) == 1


def _has_avx512():
    return _native._checked_sqrt_errors(0, 1) is not None


def _skip_without(path):
    if path == 1 and not _has_avx2():
        pytest.skip("this CPU has no AVX2")
    if path == 2 and not _has_avx512():
        pytest.skip("this CPU (or build) has no AVX-512")


@pytest.mark.parametrize("path", [0, 1, 2])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("wd, clip", [(0.0, None), (0.01, 0.5)])
def test_full_step_replay_builds_equal_eager(path, dtype, wd, clip):
    """Rows back after a few to a few dozen steps (moving weights: full Adam steps) = eager.

    The full-step replay (adam_replay_steps.cc) is built for baseline x86-64,
    for AVX2 and, float32 without clipping, for AVX-512; 61 columns cover whole
    vectors and the scalar tail of each (AVX-512: a pair of 16-lane vectors,
    one more vector, 13 scalars).
    """
    _skip_without(path)
    rows, cols, steps = 24, 61, 70

    def schedule(t):
        if t <= 2:
            return np.arange(rows, dtype=np.int64)
        rng = np.random.default_rng(t)
        return np.sort(rng.choice(rows, 2, replace=False)).astype(np.int64)

    _native._force_simd_path(path)
    deferred_result = _deferred_run(rows, cols, steps, schedule, wd, dtype, clip=clip)
    eager_result = _deferred_run(rows, cols, steps, schedule, wd, dtype, eager=True, clip=clip)
    for got, want in zip(deferred_result, eager_result):
        np.testing.assert_array_equal(_bits(got), _bits(want))


def test_checked_square_root_is_the_hardware_one_for_every_float():
    """The AVX-512 replay's square root off the divider (checked_sqrt.h): over all 2^32
    float32 bit patterns, no lane passes its exact test with a root that is not bitwise
    sqrtps's, and it passes nearly every lane in its range, [2^-100, 2^124] and +-0."""
    result = _native._checked_sqrt_errors(0, 1 << 28)
    if result is None:
        pytest.skip("this CPU (or build) has no AVX-512")
    wrong, accepted = result
    assert wrong == 0
    # exponent fields 27 (2^-100) to 251 (2^124 alone), and +-0
    in_range = (251 - 27) * (1 << 23) + 1 + 2
    assert in_range * (1 - 1e-4) < accepted <= in_range


@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_avx512_replay_with_zero_denormal_and_infinite_var_equals_eager(wd):
    """Columns whose var is 0 (its own root in checked_sqrt.h), denormal or infinite
    (gradients 1e-20 and 1e25: these fail its test and send their vector to the
    divider), mixed with ordinary columns in both vectors of each pair: the AVX-512
    replay stays bitwise eager."""
    _skip_without(2)
    rows, cols, steps = 24, 83, 70
    scale = np.ones(cols)
    scale[[0, 20, 40]] = 0.0
    scale[[5, 37]] = 1e-20
    scale[[50, 70]] = 1e25
    sparse = _sparse_schedule(rows)
    _native._force_simd_path(2)
    got = _deferred_run(rows, cols, steps, sparse, wd, col_scale=scale)
    want = _deferred_run(rows, cols, steps, sparse, wd, eager=True, col_scale=scale)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(_bits(a), _bits(b))


@pytest.mark.parametrize("dtype, cols, simd_path", [("float32", 130, -1), ("float32", 130, 0),
                                                    ("float32", 130, 2),
                                                    ("float64", 8, -1)])
def test_long_absences_replay_equals_eager(dtype, cols, simd_path):
    """Rows away for up to 1,400 steps (weights frozen, means through denormals) vs eager."""
    rows, steps = 40, 1400
    _native._force_simd_path(simd_path)

    # At beta1 = 0.9 a mean of ~0.1 is denormal after ~820 steps and at its fixed
    # point (a few denormal units) by ~900. Rows coming back at step 1,000 (997
    # steps away) replay through that range before their gradient, and 400 more
    # steps follow, so an error there shows; the flush at the end replays the
    # rows away since step 3 (1,397 steps).
    def schedule(t):
        if t <= 3:
            return np.arange(rows, dtype=np.int64)
        if t == 1000:
            return np.arange(0, rows, 3, dtype=np.int64)  # some rows come back mid-way
        return np.array([rows - 1], dtype=np.int64)       # one hot row every step

    deferred_result = _deferred_run(rows, cols, steps, schedule, 0.0, dtype)
    eager_result = _deferred_run(rows, cols, steps, schedule, 0.0, dtype, eager=True)
    for got, want in zip(deferred_result, eager_result):
        np.testing.assert_array_equal(_bits(got), _bits(want))


# ------------------------------------------------------------------ worker pool
@pytest.mark.parametrize("chunk", [0, 1, 7])
@pytest.mark.parametrize("n", [2, 3, 1000])
def test_worker_pool_runs_every_item_once(chunk, n):
    # (A worker that has not woken up by the time the caller is done leaves
    # its share to the caller, so how many threads ran items varies.)
    out, threads = _native._parallel_fill(n, chunk, 2)
    np.testing.assert_array_equal(out, np.arange(n) + 1)
    assert threads in (1, 2)
    out, threads = _native._parallel_fill(n, chunk, 1)
    np.testing.assert_array_equal(out, np.arange(n) + 1)
    assert threads == 1


@pytest.mark.parametrize("chunk", [0, 1])
def test_worker_pool_workers_take_part(chunk):
    """Items of 100 ms: the workers wake up in time to run some."""
    out, threads = _native._parallel_fill(4, chunk, 2, item_micros=100_000)
    np.testing.assert_array_equal(out, np.arange(4) + 1)
    assert threads == 2


def test_worker_pool_with_a_team_larger_than_its_threads():
    out, threads = _native._parallel_fill(50, 0, 9)
    np.testing.assert_array_equal(out, np.arange(50) + 1)
    assert 1 <= threads <= 9
    out, threads = _native._parallel_fill(9, 0, 9, item_micros=50_000)
    np.testing.assert_array_equal(out, np.arange(9) + 1)
    assert threads >= 2


def test_worker_pool_under_concurrent_callers():
    """Callers racing for the pool (MXNet runs operators on several engine
    threads): one gets the team, the others run serially, none waits on another."""
    import threading
    failures = []

    def call(seed):
        rng = np.random.default_rng(seed)
        for _ in range(300):
            n = int(rng.integers(2, 3000))
            out, _ = _native._parallel_fill(n, int(rng.integers(0, 9)), 2)
            if not np.array_equal(out, np.arange(n) + 1):
                failures.append(n)

    callers = [threading.Thread(target=call, args=(seed,)) for seed in range(4)]
    for t in callers:
        t.start()
    for t in callers:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in callers), "a caller hung"
    assert failures == []


def test_worker_pool_in_a_forked_child():
    """The child of a fork has none of the parent's threads: it gets a pool of its own."""
    import os
    import time
    _native._parallel_fill(100, 0, 2)  # the parent's pool is up
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            out, threads = _native._parallel_fill(4, 0, 2, item_micros=100_000)
            ok = np.array_equal(out, np.arange(4) + 1) and threads == 2
        finally:
            os._exit(0 if ok else 1)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung on the worker pool")
        time.sleep(0.05)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    out, threads = _native._parallel_fill(4, 0, 2, item_micros=100_000)  # the parent's still works
    assert threads == 2 and np.array_equal(out, np.arange(4) + 1)
