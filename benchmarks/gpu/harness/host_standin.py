"""A host stand-in of ``libadam_harness.so``: the same entry points, in NumPy, on CPU memory.

It lets ``tests/test_gpu_harness.py`` run the correctness drivers of
``checks.py`` end to end on PyTorch CPU tensors, on a machine without a GPU, so
that the drivers themselves (their bookkeeping, comparisons and messages) are
known to work before a GPU session runs them on the real kernels. It checks
nothing about the CUDA kernels: its arithmetic is the NumPy reference's.

Each method has the signature of the C entry point of the same name (the
bindings call them with raw data pointers) and, like them, returns 0, or 1
with the error as text in ``error``.
"""
import ctypes

import numpy as np

from .reference import numpy_step

_DTYPES = {"f32": np.float32, "f64": np.float64}


def _view(pointer, count, dtype, shape=None):
    """A writable NumPy view of ``count`` elements at the address ``pointer``."""
    if count == 0:
        return np.empty(shape or 0, dtype)
    buffer = (ctypes.c_char * (count * np.dtype(dtype).itemsize)).from_address(pointer)
    array = np.frombuffer(buffer, dtype=dtype)
    return array.reshape(shape) if shape is not None else array


def _fail(error, error_len, message):
    error.value = message.encode()[:error_len - 1]
    return 1


def _index_error(indices, num_rows):
    """The operators' index check (its substance, not its exact text); None when valid."""
    bad = (indices < 0) | (indices >= num_rows)
    if bad.any():
        return "row index %d is out of range [0, %d)" % (indices[bad][0], num_rows)
    if len(indices) > 1 and (np.diff(indices) <= 0).any():
        return "row indices must be sorted and unique"
    return None


class _Deferred:
    """One call's view of a deferred state (weight, mean, var, last_step, history)."""

    def __init__(self, dtype, weight, mean, var, last_step, history, capacity, num_rows, cols):
        shape = (num_rows, cols)
        self.w = _view(weight, num_rows * cols, dtype, shape)
        self.m = _view(mean, num_rows * cols, dtype, shape)
        self.v = _view(var, num_rows * cols, dtype, shape)
        self.last = _view(last_step, num_rows, np.int64)
        self.history = _view(history, capacity * 3, np.float32, (capacity, 3))
        self.no_grad = np.empty((0, cols), dtype)

    def replayed(self, rows, step, fixed):
        """(weight, mean, var) of ``rows`` (unique) brought up to ``step``, not written back."""
        w, m, v = self.w[rows], self.m[rows], self.v[rows]
        last = self.last[rows]
        for s in range(int(last.min()) + 1 if len(rows) else step + 1, step + 1):
            active = last < s
            lr, wd, clip = (float(x) for x in self.history[s])
            aw, am, av = w[active], m[active], v[active]
            numpy_step(aw, am, av, self.no_grad, np.empty(0, np.int64), lr, wd=wd,
                       clip_gradient=clip, **fixed)
            w[active], m[active], v[active] = aw, am, av
        return w, m, v

    def catch_up(self, rows, step, fixed):
        rows = np.unique(rows)
        rows = rows[self.last[rows] < step]
        self.w[rows], self.m[rows], self.v[rows] = self.replayed(rows, step, fixed)
        self.last[rows] = step


class HostStandIn:
    """The six ``gluon_sparse_harness_*`` entry points on host memory (see the module's doc)."""

    def __getattr__(self, name):
        for suffix, dtype in _DTYPES.items():
            for kind, method in (("adam_update", self._eager),
                                 ("adam_deferred_update", self._deferred_update),
                                 ("adam_deferred_catch_up", self._catch_up)):
                if name == "gluon_sparse_harness_%s_%s" % (kind, suffix):
                    return lambda *args, dtype=dtype, method=method: method(dtype, *args)
        raise AttributeError(name)

    @staticmethod
    def _eager(dtype, weight, mean, var, grad, indices, nnz, num_rows, cols, lr, beta1, beta2,
               epsilon, wd, rescale_grad, clip_gradient, validate, workspace, stream, error,
               error_len):
        rows = _view(indices, nnz, np.int64)
        message = _index_error(rows, num_rows) if validate else None
        if message:
            return _fail(error, error_len, message)
        state = [_view(p, num_rows * cols, dtype, (num_rows, cols)) for p in (weight, mean, var)]
        numpy_step(*state, _view(grad, nnz * cols, dtype, (nnz, cols)), rows, lr, beta1=beta1,
                   beta2=beta2, epsilon=epsilon, wd=wd, rescale_grad=rescale_grad,
                   clip_gradient=clip_gradient)
        return 0

    @staticmethod
    def _deferred_update(dtype, weight, mean, var, last_step, history, capacity, grad, indices,
                         nnz, num_rows, cols, step, lr, beta1, beta2, epsilon, wd, rescale_grad,
                         clip_gradient, catch_up_rows, validate, workspace, stream, error,
                         error_len):
        if step <= 0:
            return _fail(error, error_len, "step %d is not a positive integer" % step)
        if step >= capacity:
            return _fail(error, error_len, "step %d does not fit a history of %d records"
                         % (step, capacity))
        rows = _view(indices, nnz, np.int64)
        message = _index_error(rows, num_rows) if validate else None
        if message:
            return _fail(error, error_len, message)
        state = _Deferred(dtype, weight, mean, var, last_step, history, capacity, num_rows, cols)
        fixed = dict(beta1=beta1, beta2=beta2, epsilon=epsilon)
        if catch_up_rows:
            state.catch_up(rows, step - 1, fixed)
        elif validate:
            behind = rows[state.last[rows] < step - 1]
            replayed = state.replayed(behind, step - 1, fixed)
            for i, row in enumerate(behind):
                if any(new[i].tobytes() != old[row].tobytes()
                       for new, old in zip(replayed, (state.w, state.m, state.v))):
                    return _fail(error, error_len, "row %d was read stale: it is at step %d, "
                                 "the update is step %d" % (row, state.last[row], step))
        state.history[step] = (lr, wd, clip_gradient)
        w, m, v = state.w[rows], state.m[rows], state.v[rows]
        numpy_step(w, m, v, _view(grad, nnz * cols, dtype, (nnz, cols)), np.arange(nnz), lr,
                   wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient, **fixed)
        state.w[rows], state.m[rows], state.v[rows] = w, m, v
        state.last[rows] = step
        return 0

    @staticmethod
    def _catch_up(dtype, weight, mean, var, last_step, history, capacity, num_rows, cols, rows,
                  n, step, beta1, beta2, epsilon, stream, error, error_len):
        if step >= capacity:
            return _fail(error, error_len, "step %d does not fit a history of %d records"
                         % (step, capacity))
        state = _Deferred(dtype, weight, mean, var, last_step, history, capacity, num_rows, cols)
        rows = np.arange(num_rows) if rows is None else _view(rows, n, np.int64)
        if (state.last[rows] > step).any() or (state.last[rows] < 0).any():
            return _fail(error, error_len, "last_step outside [0, %d]" % step)
        state.catch_up(rows, step, dict(beta1=beta1, beta2=beta2, epsilon=epsilon))
        return 0
