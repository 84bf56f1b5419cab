"""The frozen replay hooks of AdaMax and Nadam (frozen_replay.h) bitwise against the
step-by-step replay.

A row back after a long absence replays the steps it missed. With wd == 0 the
hook stops the full steps once no step to come can move a weight, and decays
the two states alone from there (geometric_decay.h). tests/rule_replay_harness.cc
compiles the hook and the generic replay (the rule's apply<false>, one step at a
time) from the library's headers, and random rows compare them bit for bit: weights
near their freezing point (powers of two among them), long and short ranges,
weight decay switched on and off, lr spikes, clipping, zero and -0 states,
non-finite values, constants and schedule scalars outside what the hook takes,
on both SIMD builds.
"""
import numpy as np
import pytest

from optimizer_rule_runs import check_replay_hook


def _lr_wd_clip(rng, steps, base_lr, edge):
    """Per step (lr, wd, clip): a constant or varying lr, spikes, a window of weight decay
    (``edge``: neither)."""
    out = np.zeros((steps + 1, 3))
    windowed = rng.random() < 0.3 and not edge
    wd_window = sorted(rng.integers(1, steps + 1, size=2)) if windowed else (0, -1)
    varying = rng.random() < 0.5  # else a constant lr: the bound at its tightest
    spiky = rng.random() < 0.3 and not edge  # odd lr values (non-finite ones end the decay steps)
    for t in range(1, steps + 1):
        lr = base_lr * (1.0 + 0.1 * (t % 5)) if varying else base_lr
        if spiky and rng.random() < 0.01:
            lr = float(rng.choice([100 * base_lr, 0.0, -0.0, -base_lr, np.inf, np.nan]))
        wd = 0.01 if wd_window[0] <= t <= wd_window[1] else 0.0
        out[t] = (lr, wd, rng.choice([-1.0, -1.0, 0.5, 0.0, 1e-3]))
    return out


def _adamax_history(rng, steps, edge):
    return _lr_wd_clip(rng, steps, 0.002, edge).astype(np.float32)


def _nadam_history(rng, steps, beta1, beta2, edge):
    """Records of MXNet's Nadam.update from update t0 + 1 on: its momentum schedule in
    double, each scalar rounded to float32 (as the Python rule records them)."""
    decay = float(rng.choice([0.004, 0.004, 0.0, 0.1]))
    t0 = int(rng.choice([0, 40, 1000, 20000]))
    m_schedule = 1.0
    for t in range(1, t0 + 1):
        m_schedule *= beta1 * (1. - 0.5 * 0.96 ** (t * decay))
    base = _lr_wd_clip(rng, steps, 0.001, edge)
    history = np.zeros((steps + 1, 8))
    history[:, :3] = base
    for k in range(1, steps + 1):
        t = t0 + k
        momentum_t = beta1 * (1. - 0.5 * (pow(0.96, t * decay)))
        momentum_t_1 = beta1 * (1. - 0.5 * (pow(0.96, (t + 1) * decay)))
        m_schedule = m_schedule * momentum_t
        history[k, 3:] = (1. - m_schedule, 1. - m_schedule * momentum_t_1,
                          1. - pow(beta2, t), 1. - momentum_t, momentum_t_1)
        if rng.random() < 0.002 and not edge:  # schedule scalars that end the decay steps
            history[k, rng.integers(3, 8)] = rng.choice([0.0, -0.0, 1.5, np.inf, np.nan])
    if rng.random() < (0.3 if edge else 0.1):  # v_div > 1 (not MXNet's): updates larger
        history[1:, 5] = rng.uniform(1.0, 4.0)
    return history.astype(np.float32)


def _first_update_per_m(rule, record, fixed, second):
    """About |update| / |m| at the first step of the replay, per element."""
    beta1, beta2, eps = float(fixed[0]), float(fixed[2]), float(fixed[-1])
    second = second.astype(np.float64)
    if rule == "adamax":
        return abs(float(record[0])) * beta1 / (beta2 * second + eps)
    coef = abs(float(record[0]) * float(record[7]) / float(record[4]))
    return coef * beta1 / (np.sqrt(beta2 * second / float(record[5])) + eps)


def _random_case(rng, rule, edge=False):
    """A float32 row after a gradient step, its two states, a history and the constants.

    ``edge``: a row whose every weight sits about the bound's threshold, with
    no odd values, so that most such rows freeze at the first check.
    """
    cols = int(rng.choice([rng.integers(1, 9), rng.integers(30, 70), 128, 133]))
    steps = int(rng.choice([1, 5, 20, 100, 400, 1500, 3000]))
    beta1 = float(rng.choice([0.9, 0.9, 0.6, 0.99]))
    beta2 = float(rng.choice([0.999, 0.999, 0.9999, 0.95, 0.7]))
    if edge:  # constants with which the bound can say frozen
        beta2 = float(rng.choice([0.999, 0.9999]))
    if rule == "adamax":
        eps = float(rng.choice([0.0, 1e-8, 1e-3]))
        fixed = np.array([beta1, 1.0 - beta1, beta2, eps], np.float32)
        history = _adamax_history(rng, steps, edge)
    else:
        eps = float(rng.choice([1e-8, 1e-3] if edge else [0.0, 1e-8, 1e-8, 1e-3]))
        fixed = np.array([beta1, 1.0 - beta1, beta2, 1.0 - beta2, eps], np.float32)
        history = _nadam_history(rng, steps, beta1, beta2, edge)
    if rng.random() < 0.1 and not edge:  # constants the hook leaves to the generic replay
        fixed[rng.integers(len(fixed))] = rng.choice([0.4, 1.0, 0.0, -1e-8, np.nan])
    if rng.random() < 0.5:
        w = rng.standard_normal(cols) * rng.choice([1.0, 1.0, 1e-3, 10.0, 1e-30, 1e30])
    else:  # powers of two: the lower neighbour is half an ulp closer
        w = np.ldexp(rng.choice([-1.0, 1.0], cols), rng.integers(-30, 10, cols))
    w = w.astype(np.float32)
    g_scale = rng.choice([1.0, 1e-3] if edge else [1.0, 1e-3, 1e-20, 1e-39])
    g = (rng.standard_normal(cols) * g_scale).astype(np.float32)
    m = ((1.0 - beta1) * g).astype(np.float32)
    # AdaMax's u = |g|; Nadam's v = (1 - beta2) g^2, whose square root divides.
    second = np.abs(g) if rule == "adamax" else ((1.0 - beta2) * g * g).astype(np.float32)
    odd = 1.0  # how often odd values go in below
    if edge or rng.random() < 0.3:
        # Powers of two (the lower neighbour is half an ulp closer) whose first
        # update is about the freezing threshold: a quarter of their ulp towards
        # zero, half of it away, within a fraction drawn for the row.
        w = np.ldexp(rng.choice([-1.0, 1.0], cols), rng.integers(-30, 10, cols)).astype(np.float32)
        ulp = np.spacing(np.abs(w)).astype(np.float64)
        towards = rng.choice([1.0, -1.0], cols, p=[0.8, 0.2])
        d = ulp * np.where(towards > 0, 0.25, 0.5) * rng.uniform(0.75, 1.25)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            per_m = _first_update_per_m(rule, history[min(1, steps)], fixed, second)
            m = (np.sign(w) * towards * d / per_m).astype(np.float32)
        odd = 0.0 if edge else 0.3  # most such rows whole, so that they can freeze
    if rng.random() < 0.3 * odd:
        w[rng.integers(cols)] = rng.choice([0.0, -0.0, np.inf, np.nan, 1e-42])
    if rng.random() < 0.2 * odd:
        m[rng.integers(cols)] = rng.choice([0.0, -0.0, np.nan])
    if rng.random() < 0.2 * odd:
        second[rng.integers(cols)] = rng.choice([0.0, -0.0, -1.0, np.inf])
    if rng.random() < 0.1 * odd:
        m[:], second[:] = rng.choice([0.0, -0.0]), rng.choice([0.0, -0.0])
    return w, np.stack([m, second]).astype(np.float32), history, fixed


def _compare_paths(harness, rule, cases, edge):
    rng = np.random.default_rng(5 if not edge else 6)
    rows = ((w, states, history, fixed, 0, len(history) - 1)
            for w, states, history, fixed in (_random_case(rng, rule, edge) for _ in range(cases)))
    return check_replay_hook(harness, rule, rows, simd_paths=(0, 1))


@pytest.mark.parametrize("rule", ["adamax", "nadam"])
def test_hook_equals_step_by_step_replay(rule_replay_harness, rule):
    assert _compare_paths(rule_replay_harness, rule, 500, edge=False) > 200  # 258-307 of 500


@pytest.mark.parametrize("rule", ["adamax", "nadam"])
def test_hook_at_the_freezing_edge(rule_replay_harness, rule):
    """Rows at the bound's threshold: a bound too small by a few percent shows here."""
    assert _compare_paths(rule_replay_harness, rule, 300, edge=True) > 100  # 141-215 of 300
