"""AdaMax's replay hook (optim_rule_adamax_replay.h) bitwise against the step-by-step replay.

A row back after a long absence replays the steps it missed. With wd == 0 the
hook stops the full steps once no step to come can move a weight, and decays
m and u alone from there (geometric_decay.h). The driver below compiles the
hook and the generic replay (the rule's apply<false>, one step at a time) from
the library's headers, and random rows compare them bit for bit: weights near
their freezing point (powers of two among them), long and short ranges, weight
decay switched on and off, lr spikes, clipping, zero and -0 states, non-finite
values, constants outside what the hook takes, on both SIMD builds.
"""
import ctypes

import numpy as np
import pytest
from replay_driver import build_driver

_DRIVER = r"""
#include "optim_rule_adamax.h"
using namespace gluon_sparse::optim;
extern "C" void adamax_replay(int hook, long cols, float* w, float* states, const float* history,
                              const float* fixed, long from, long to) {
  float* s[2] = {states, states + cols};
  if (hook) {
    if (AdamaxRule::replay_row<float>(cols, w, s, history, fixed, from, to)) return;
    StatePtrs<float> p;
    p.p[0] = s[0];
    p.p[1] = s[1];
    replay_steps<AdamaxRule, float>(cols, w, p, history, fixed, from + 1, to);
    return;
  }
  for (long t = from + 1; t <= to; ++t) {
    const auto sc = AdamaxRule::scalars<float>(history + t * AdamaxRule::kNumStep, fixed, 1.0f);
    for (long j = 0; j < cols; ++j) {
      float st[2] = {s[0][j], s[1][j]};
      AdamaxRule::apply<false>(0.0f, w + j, st, sc);
      s[0][j] = st[0];
      s[1][j] = st[1];
    }
  }
}
"""


@pytest.fixture(scope="module")
def replay_lib(tmp_path_factory):
    """The hook and the step-by-step replay, compiled as the library is."""
    lib = build_driver(tmp_path_factory, "adamax_replay", _DRIVER)
    p, i, c_long = ctypes.c_void_p, ctypes.c_int, ctypes.c_long
    lib.adamax_replay.argtypes = [i, c_long, p, p, p, p, c_long, c_long]
    return lib


def _random_case(rng):
    """A float32 row after a gradient step, its m and u, a history and the constants."""
    cols = int(rng.choice([rng.integers(1, 9), rng.integers(30, 70), 128, 133]))
    steps = int(rng.choice([1, 5, 20, 100, 400, 1500, 3000]))
    beta1 = float(rng.choice([0.9, 0.9, 0.6, 0.99]))
    beta2 = float(rng.choice([0.999, 0.999, 0.9999, 0.95, 0.7]))
    eps = float(rng.choice([0.0, 1e-8, 1e-3]))
    fixed = np.array([beta1, 1.0 - beta1, beta2, eps], np.float32)
    if rng.random() < 0.1:  # constants the hook leaves to the generic replay
        fixed[rng.integers(4)] = rng.choice([0.4, 1.0, 0.0, -1e-8, np.nan])
    history = np.zeros((steps + 1, 3), np.float32)
    wd_window = sorted(rng.integers(1, steps + 1, size=2)) if rng.random() < 0.3 else (0, -1)
    varying = rng.random() < 0.5  # else a constant lr: the bound at its tightest
    spiky = rng.random() < 0.3    # odd lr values (non-finite ones end the decay steps)
    for t in range(1, steps + 1):
        lr = 0.002 * (1.0 + 0.1 * (t % 5)) if varying else 0.002
        if spiky and rng.random() < 0.01:
            lr = float(rng.choice([0.2, 0.0, -0.0, -0.002, np.inf, np.nan]))
        wd = 0.01 if wd_window[0] <= t <= wd_window[1] else 0.0
        history[t] = (lr, wd, rng.choice([-1.0, -1.0, 0.5, 0.0, 1e-3]))
    if rng.random() < 0.5:
        w = rng.standard_normal(cols) * rng.choice([1.0, 1.0, 1e-3, 10.0, 1e-30, 1e30])
    else:  # powers of two: the lower neighbour is half an ulp closer
        w = np.ldexp(rng.choice([-1.0, 1.0], cols), rng.integers(-30, 10, cols))
    w = w.astype(np.float32)
    g = (rng.standard_normal(cols) * rng.choice([1.0, 1e-3, 1e-20, 1e-39])).astype(np.float32)
    m = ((1.0 - beta1) * g).astype(np.float32)
    u = np.abs(g)
    if rng.random() < 0.2:  # powers of two whose next update is 1/4 to 1/2 of their ulp
        w = np.ldexp(rng.choice([-1.0, 1.0], cols), rng.integers(-30, 10, cols)).astype(np.float32)
        ulp = np.spacing(np.abs(w)).astype(np.float64)
        towards_zero = np.sign(w) * rng.choice([1.0, -1.0], cols, p=[0.8, 0.2])
        d = ulp * rng.uniform(0.2, 0.6) / beta1 * beta2  # one fraction for the row
        m = (towards_zero * d * (u.astype(np.float64) + eps) / 0.002).astype(np.float32)
    if rng.random() < 0.3:
        w[rng.integers(cols)] = rng.choice([0.0, -0.0, np.inf, np.nan, 1e-42])
    if rng.random() < 0.2:
        m[rng.integers(cols)] = rng.choice([0.0, -0.0, np.nan])
    if rng.random() < 0.2:
        u[rng.integers(cols)] = rng.choice([0.0, -0.0, -1.0, np.inf])
    if rng.random() < 0.1:
        m[:], u[:] = rng.choice([0.0, -0.0]), rng.choice([0.0, -0.0])
    return w, np.stack([m, u]).astype(np.float32), history, fixed


def _bits_or_nan(a):
    a = a.copy()
    a[np.isnan(a)] = np.nan  # one NaN for every NaN: payloads are not reproducible
    return a.view(np.int32)


def test_hook_equals_step_by_step_replay(replay_lib):
    rng = np.random.default_rng(5)
    try:
        for case in range(500):
            w, states, history, fixed = _random_case(rng)
            results = []
            for hook, simd_path in ((0, -1), (1, 0), (1, 1)):
                replay_lib.gluon_sparse_force_simd_path(simd_path)
                w_out, s_out = w.copy(), states.copy()
                replay_lib.adamax_replay(hook, len(w), w_out.ctypes.data, s_out.ctypes.data,
                                         history.ctypes.data, fixed.ctypes.data, 0,
                                         len(history) - 1)
                results.append((w_out, s_out))
            for path, (w_out, s_out) in enumerate(results[1:]):
                what = "case %d, SIMD build %d, fixed %s, %d steps" % (case, path, fixed,
                                                                      len(history) - 1)
                np.testing.assert_array_equal(_bits_or_nan(w_out), _bits_or_nan(results[0][0]),
                                              err_msg="weight, " + what)
                np.testing.assert_array_equal(_bits_or_nan(s_out), _bits_or_nan(results[0][1]),
                                              err_msg="states, " + what)
    finally:
        replay_lib.gluon_sparse_force_simd_path(-1)
