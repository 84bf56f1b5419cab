"""NumPy references of the standard-Adam CUDA kernels, eager and deferred.

They import no GPU package: ``tests/test_gpu_harness.py`` checks them bitwise
against the CPU operators (``gluon_sparse_adam_update``, ``gluon_sparse_adam_deferred_update`` /
``gluon_sparse_adam_deferred_flush``) on any machine, so that a GPU run compares the
kernels with references that are themselves proven exact.
"""
import numpy as np

BETA1, BETA2, EPSILON = 0.9, 0.999, 1e-8


def numpy_step(w, m, v, grad_values, indices, lr, beta1=BETA1, beta2=BETA2, epsilon=EPSILON,
               wd=0.0, rescale_grad=1.0, clip_gradient=-1.0):
    """One eager standard-Adam step on every row of ``w``, ``m``, ``v``, in place.

    The kernel's operations, in its order and precision: the scalars are rounded
    to float32 first (the kernels receive them as ``float``), then to the
    array's dtype; rows outside ``indices`` see a zero gradient (weight decay only).

    Parameters
    ----------
    w, m, v : numpy.ndarray
        Weight, mean and variance, (rows, cols), float32 or float64.
    grad_values : numpy.ndarray
        (len(indices), cols) gradient rows.
    indices : numpy.ndarray
        Sorted unique int64 row indices of the gradient.
    lr, beta1, beta2, epsilon, wd, rescale_grad, clip_gradient : float
        The operator's attributes (``clip_gradient < 0``: no clipping).
    """
    dt = w.dtype.type
    c = {k: dt(np.float32(x)) for k, x in dict(lr=lr, beta1=beta1, beta2=beta2, epsilon=epsilon,
                                                 wd=wd, rescale=rescale_grad,
                                                 clip=clip_gradient).items()}
    g = w * c["wd"]
    g[indices] = grad_values * c["rescale"] + w[indices] * c["wd"]
    if clip_gradient >= 0:
        g = np.where(g > c["clip"], c["clip"], np.where(g < -c["clip"], -c["clip"], g))
    m[...] = c["beta1"] * m + (dt(1) - c["beta1"]) * g
    v[...] = c["beta2"] * v + (dt(1) - c["beta2"]) * (g * g)
    w[...] = w - (c["lr"] * m) / (np.sqrt(v) + c["epsilon"])


class NumpyDeferredAdam:
    """Deferred standard Adam in NumPy: the reference of the deferred kernels.

    Applies each step to the gradient's rows only and replays the steps a row
    missed, with ``numpy_step`` and the step's recorded (lr, wd, clip_gradient),
    when the row is next updated or at ``flush``. It takes no shortcut (the
    kernels skip fixed-point steps, which changes no bit), so it is bitwise
    equal to ``numpy_step`` applied to every row every step.

    Parameters
    ----------
    weight : numpy.ndarray
        (rows, cols) float32 or float64; copied.
    beta1, beta2, epsilon : float
        Adam's fixed scalars.
    """

    def __init__(self, weight, beta1=BETA1, beta2=BETA2, epsilon=EPSILON):
        self.weight = np.array(weight)
        self.mean = np.zeros_like(self.weight)
        self.var = np.zeros_like(self.weight)
        self.last_step = np.zeros(len(self.weight), dtype=np.int64)
        self.history = {}  # step -> (lr, wd, clip_gradient)
        self.fixed = dict(beta1=beta1, beta2=beta2, epsilon=epsilon)
        self.step = 0

    def catch_up(self, rows, step):
        """Replay steps last_step + 1 .. ``step`` of ``rows`` (repeats allowed)."""
        rows = np.unique(np.asarray(rows, dtype=np.int64))
        behind = rows[self.last_step[rows] < step]
        if len(behind) == 0:
            return
        no_grad = np.empty((0,) + self.weight.shape[1:], self.weight.dtype)
        no_rows = np.empty(0, np.int64)
        for s in range(int(self.last_step[behind].min()) + 1, step + 1):
            active = behind[self.last_step[behind] < s]
            w, m, v = self.weight[active], self.mean[active], self.var[active]
            lr, wd, clip = self.history[s]
            numpy_step(w, m, v, no_grad, no_rows, lr, wd=wd, clip_gradient=clip, **self.fixed)
            self.weight[active], self.mean[active], self.var[active] = w, m, v
        self.last_step[behind] = step

    def update(self, grad_values, indices, step, lr, wd=0.0, rescale_grad=1.0,
               clip_gradient=-1.0):
        """Update ``step`` (1-based, consecutive) with a row-sparse gradient."""
        if step != self.step + 1:
            raise ValueError("update %d follows step %d" % (step, self.step))
        indices = np.asarray(indices, dtype=np.int64)
        self.catch_up(indices, step - 1)
        self.history[step] = (lr, wd, clip_gradient)
        w, m, v = self.weight[indices], self.mean[indices], self.var[indices]
        numpy_step(w, m, v, grad_values, np.arange(len(indices)), lr, wd=wd,
                   rescale_grad=rescale_grad, clip_gradient=clip_gradient, **self.fixed)
        self.weight[indices], self.mean[indices], self.var[indices] = w, m, v
        self.last_step[indices] = step
        self.step = step

    def flush(self):
        """Bring every row up to the last step."""
        self.catch_up(np.arange(len(self.weight)), self.step)
