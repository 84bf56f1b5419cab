"""Deferred Adam's frozen-weight replay at the edges of its bound, bitwise against the eager op.

A row that comes back after many steps replays them; once no step to come can
move its weights (adam_deferred_kernels.h, steps_until_frozen) only m and v
decay. That bound must never freeze a weight one step early. These runs put
the weights where the bound is tightest and compare every bit of w, m and v
with the eager operator (itself tested bitwise against MXNet's adam_update):

- rows of weights that are powers of two (the lower neighbour half an ulp
  closer), of weights from 1e-30 to 1e30, of weights near FLT_MIN;
- gradients from 1e-22 (v denormal or zero) to 1e3;
- a learning rate with and without spikes of 30x (the bound uses the largest);
- a window of steps with weight decay (no freezing across it);
- betas with beta1^2 > beta2 (the next step does not bound the later ones),
  epsilon from 1e-30 to 1.0;
- rows back after 20 to 2,000 steps, and a flush of the rest at the end.

A threshold of one ulp instead of half an ulp fails the default case.
"""
import math

import mxnet as mx
import numpy as np
import pytest

from gluon_sparse import _native
from gluon_sparse.optimizer import deferred

ROWS, COLS, STEPS = 24, 37, 2400


@pytest.fixture(autouse=True)
def _restore_simd_path():
    yield
    _native._force_simd_path(-1)


def _initial_weights(rng):
    """Rows of four kinds (row % 4): a usual initialisation, powers of two,
    magnitudes over 60 decades, and values near FLT_MIN (which never freeze)."""
    w = rng.standard_normal((ROWS, COLS)) * 0.05
    kind = np.arange(ROWS) % 4
    powers = np.ldexp(1.0, rng.integers(-24, 4, size=(ROWS, COLS)))
    w[kind == 1] = (powers * rng.choice([-1.0, 1.0], size=(ROWS, COLS)))[kind == 1]
    wide = rng.standard_normal((ROWS, COLS)) * 10.0 ** rng.uniform(-30, 30, size=(ROWS, COLS))
    w[kind == 2] = wide[kind == 2]
    tiny = np.float32(np.finfo(np.float32).tiny) * rng.integers(1, 9, size=(ROWS, COLS))
    w[kind == 3] = tiny[kind == 3]
    return w.astype(np.float32)


GAPS = (20, 45, 150, 170, 230, 400, 700, 1000, 2000)


def _schedule(t):
    """Every row at steps 1-3; rows 1-22 back every GAPS[row % 9] steps; row 23 every step."""
    if t <= 3:
        return np.arange(ROWS, dtype=np.int64)
    back = [row for row in range(1, ROWS - 1) if (t - 3) % GAPS[row % len(GAPS)] == 0]
    return np.array(back + [ROWS - 1], dtype=np.int64)


def _run(beta1, beta2, epsilon, eager, spikes):
    rng = np.random.default_rng(7)
    w = mx.nd.array(_initial_weights(rng))
    # Gradients from 1e-22 (v denormal or zero) to 1e3 by column in rows of the
    # third kind, from 1e-3 to 10 elsewhere.
    scale = 10.0 ** rng.uniform(-3, 1, size=(ROWS, COLS))
    scale[2::4] = 10.0 ** rng.uniform(-22, 3, size=(len(scale[2::4]), COLS))
    if eager:
        m, v = mx.nd.zeros((ROWS, COLS)), mx.nd.zeros((ROWS, COLS))
    else:
        state = deferred.DeferredAdamState(w, beta1, beta2, epsilon)
    for t in range(1, STEPS + 1):
        idx = _schedule(t)
        values = (rng.standard_normal((len(idx), COLS)) * scale[idx]).astype(np.float32)
        grad = mx.nd.sparse.row_sparse_array((values, idx), shape=(ROWS, COLS))
        spike = 30.0 if spikes and t % 97 == 0 else 1.0
        lr = 0.01 * spike * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
        wd = 1e-3 if 300 <= t < 310 else 0.0
        if eager:
            mx.nd.gluon_sparse_adam_update(w, grad, m, v, out=w, lr=lr, wd=wd, beta1=beta1,
                                           beta2=beta2, epsilon=epsilon)
            continue
        x = mx.nd.sparse.csr_matrix((np.ones(len(idx)), idx, np.arange(len(idx) + 1)),
                                    shape=(len(idx), ROWS), dtype="float32")
        mx.nd.gluon_sparse_dot(x, w)  # the forward pass brings its rows up to date
        state.update(w, grad, t, lr, wd, 1.0, None)
    if eager:
        return w, m, v
    state.flush()
    out = (w, state.mean, state.var)
    mx.nd.waitall()
    return out


@pytest.mark.parametrize("beta1, beta2, epsilon, spikes, simd_path", [
    (0.9, 0.999, 1e-8, False, -1),   # the defaults: the bound at its tightest
    (0.9, 0.999, 1e-8, False, 0),    # the same on the baseline x86-64 build
    (0.9, 0.999, 1e-8, True, -1),    # a largest lr well above the usual one
    (0.9, 0.99999, 1e-30, False, -1),  # v barely decays; epsilon negligible
    (0.6, 0.999, 1.0, False, -1),    # epsilon outweighs sqrt(v)
    (0.99, 0.9, 1e-6, False, -1),    # beta1^2 > beta2: the bound for the least v
])
def test_replay_at_the_bound_equals_eager(beta1, beta2, epsilon, spikes, simd_path):
    _native._force_simd_path(simd_path)
    got = _run(beta1, beta2, epsilon, eager=False, spikes=spikes)
    want = _run(beta1, beta2, epsilon, eager=True, spikes=spikes)
    for name, a, b in zip(("weight", "mean", "var"), got, want):
        a, b = a.asnumpy().view(np.int32), b.asnumpy().view(np.int32)
        assert np.array_equal(a, b), "%s differs at %s" % (name, np.argwhere(a != b)[:5].tolist())


# ------------------------------------------------------- the bound, element by element
def _w_after_steps(w, m, v, beta1, beta2, epsilon, lr, steps):
    """w after each sample's own number of steps without gradient or decay, in
    float32, in the eager operator's order (adam_kernels.h, `apply`)."""
    f = np.float32
    b1, b2, eps = f(beta1), f(beta2), f(epsilon)
    omb1, omb2 = f(1) - b1, f(1) - b2
    w, m, v = w.copy(), m.copy(), v.copy()
    out = np.empty_like(w)
    for t in range(1, int(steps.max()) + 1):
        g = w * f(0)
        m = b1 * m + omb1 * g
        v = b2 * v + omb2 * (g * g)
        w = w - (lr * m) / (np.sqrt(v) + eps)
        out[steps == t] = w[steps == t]
    return out


@pytest.mark.parametrize("beta1, beta2, epsilon", [
    (0.9, 0.999, 1e-8), (0.9, 0.99999, 1e-30), (0.6, 0.999, 1.0), (0.99, 0.9, 1e-6)])
def test_frozen_means_no_step_moves_the_weight(beta1, beta2, epsilon):
    """Whenever the bound says "frozen", none of the n steps to come changes w.

    Samples put the first update between 1/64 and 4 ulps of w, half of them with
    w a power of two (whose lower neighbour is half an ulp closer), moving
    towards zero or away, v from 0 to 1, every step at the largest lr.
    """
    rng = np.random.default_rng(11)
    count = 3000
    f = np.float32
    power = np.ldexp(1.0, rng.integers(-100, 100, size=count))
    mantissa = np.where(rng.random(count) < 0.5, 1.0, rng.uniform(1.0, 2.0, size=count))
    w = (rng.choice([-1.0, 1.0], size=count) * power * mantissa).astype(f)
    ulp = np.spacing(np.abs(w))
    v = (10.0 ** rng.uniform(-30, 0, size=count)).astype(f)
    v[rng.random(count) < 0.1] = 0.0
    lr = f(10.0 ** rng.uniform(-4, 0))
    update = ulp * 2.0 ** rng.uniform(-6, 2, size=count)  # the next step's, about
    towards_zero = np.sign(w) * rng.choice([-1.0, 1.0], size=count)
    m = (towards_zero * update * (np.sqrt(v.astype(np.float64)) + epsilon) / lr / beta1).astype(f)
    steps = rng.choice([16, 40, 200, 1000, 3000], size=count)
    frozen = np.array([_native._adam_steps_until_frozen(w[i:i + 1], m[i:i + 1], v[i:i + 1], beta1,
                                                        beta2, epsilon, lr, steps[i]) == 0
                       for i in range(count)])
    after = _w_after_steps(w, m, v, beta1, beta2, epsilon, lr, steps)
    moved = after.view(np.int32) != w.view(np.int32)
    assert not (frozen & moved).any(), "frozen, yet w moved: %s" % (
        [(w[i], m[i], v[i], steps[i]) for i in np.flatnonzero(frozen & moved)[:3]],)
    # Not vacuous: many samples freeze, and many samples near the bound move.
    assert frozen.mean() > 0.2 and (moved & ~frozen).mean() > 0.2
