"""The correctness workloads: learning-rate schedule, gradient rows per step, cases.

Shared by the GPU checks (``checks.py``) and by ``tests/test_gpu_harness.py``,
which runs the same schedules against the CPU operators.
"""
import numpy as np

from .reference import BETA1, BETA2


def lr_schedule(step, base_lr=0.01):
    """A step schedule (x0.7 every 40 steps) with Adam's bias correction folded in."""
    return base_lr * 0.7 ** (step // 40) * np.sqrt(1 - BETA2 ** step) / (1 - BETA1 ** step)


def deferred_rows_of_step(rng, rows, step, steps=300):
    """The gradient rows of ``step`` in the deferred checks (sorted, unique).

    The last 10% of the rows are never touched; rows 0-7 get gradients at steps
    1-3 and then wait until the last 50 steps (~250 of 300 steps deferred);
    every 50th step has an empty gradient (a pure decay step); the rest draws
    5% of the rows.
    """
    if step % 50 == 7:
        return np.empty(0, np.int64)
    chosen = rng.choice(np.arange(8, rows * 9 // 10), max(1, rows // 20), replace=False)
    if step <= 3:
        chosen = np.concatenate([chosen, np.arange(8)])
    elif step >= steps - 50 and step % 6 == 0:
        chosen = np.concatenate([chosen, [(step // 6) % 8]])
    return np.sort(chosen).astype(np.int64)


def long_absence_rows_of_step(rng, rows, step, steps=1000):
    """Rows 0-3 get gradients at steps 1-3 and at the last step only (their means
    decay into float32 denormals meanwhile), rows 4-7 take turns, the others wait."""
    if step <= 3:
        return np.arange(8, dtype=np.int64)
    return np.arange(4, dtype=np.int64) if step == steps else np.array([4 + step % 4])


# (dtype, columns, step parameters): 128 columns take the kernels' 16-byte vector
# path, 37 and 7 the scalar path.
EAGER_CASES = [
    (np.float32, 128, {}),
    (np.float32, 37, {"wd": 0.01, "clip_gradient": 0.05}),
    (np.float64, 128, {"wd": 0.02, "rescale_grad": 0.5, "clip_gradient": 0.3}),
    (np.float64, 7, {"beta1": 0.8, "beta2": 0.99, "epsilon": 1e-6}),
]

# (dtype, rows, cols, steps, gradient rows of a step, wd of step t, other step parameters)
DEFERRED_CASES = [
    (np.float32, 1000, 128, 300, deferred_rows_of_step, lambda t: 0.0, {}),
    (np.float32, 1000, 128, 300, deferred_rows_of_step, lambda t: 1e-3, {"clip_gradient": 0.05}),
    (np.float32, 1000, 37, 300, deferred_rows_of_step, lambda t: 0.0 if t < 100 else 0.01,
     {"clip_gradient": 0.5}),
    (np.float64, 1000, 128, 300, deferred_rows_of_step, lambda t: 0.02,
     {"rescale_grad": 0.5, "clip_gradient": 0.3}),
    (np.float64, 1000, 7, 300, deferred_rows_of_step, lambda t: 0.0, {}),
    (np.float32, 80, 8, 1000, long_absence_rows_of_step, lambda t: 0.0, {"clip_gradient": 0.5}),
]
