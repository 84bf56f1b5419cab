"""ctypes bindings of ``build/libfamily_harness.so`` and their Python faces on CUDA tensors.

The library holds the operator library's own CUDA kernels of the optimizer
family (``gluon_sparse/csrc/ops/optim_kernels.cu``, every rule) and of
``gluon_sparse_dot`` (``sparse_dot.cu``) behind the ``extern "C"`` entry points
of ``optim_harness.cu`` and ``sparse_dot_harness.cu``. Every entry point
returns 0, or 1 with the error as text (index checks, stale rows, a bad CSR
entry, a failed launch), which the classes here raise as ValueError.
"""
import ctypes
import os

from .bindings import GPU_DIR, call_entry, open_library, stream_of

FAMILY_LIBRARY = os.path.join(GPU_DIR, "build", "libfamily_harness.so")

OPTIM_ENTRY_POINTS = tuple("gluon_sparse_harness_optim_" + name for name in (
    "rule_sizes", "eager", "deferred_update", "catch_up"))
DOT_ENTRY_POINTS = tuple("gluon_sparse_harness_dot_" + name for name in (
    "forward_workspace_bytes", "weight_grad_workspace_bytes", "forward", "weight_grad_rows",
    "weight_grad_values", "bias_grad"))


def load_family_library(rebuild=False, path=FAMILY_LIBRARY):
    """Build (if needed, with ``TARGET=family build.sh``) and load the library at ``path``.

    Returns
    -------
    ctypes.CDLL
        With the argument and result types of every entry point set.
    """
    lib = open_library(path, "family", rebuild)
    p, i64, f32, i32, text = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int, \
        ctypes.c_char_p
    signatures = {
        # rule, num_states*, num_fixed*, num_step*, error, error_len
        "optim_rule_sizes": [text, p, p, p, text, i32],
        # rule, dtype bytes, weight, states, grad, indices, nnz, num_rows, cols, step scalars,
        # fixed, rescale_grad, validate, workspace, stream, error, error_len
        "optim_eager": [text, i32, p, p, p, p, i64, i64, i64, p, p, f32, i32, p, p, text, i32],
        # rule, dtype bytes, weight, states, last_step, history, capacity, grad, indices, nnz,
        # num_rows, cols, step, step scalars, fixed, rescale_grad, catch_up_rows, validate,
        # workspace, stream, error, error_len
        "optim_deferred_update": [text, i32, p, p, p, p, i64, p, p, i64, i64, i64, i64, p, p,
                                  f32, i32, i32, p, p, text, i32],
        # rule, dtype bytes, weight, states, last_step, history, capacity, num_rows, cols, rows,
        # n, step, fixed, workspace, stream, error, error_len
        "optim_catch_up": [text, i32, p, p, p, p, i64, i64, i64, p, i64, i64, p, p, p, text, i32],
        "dot_forward_workspace_bytes": [i64, i64],
        "dot_weight_grad_workspace_bytes": [i64, i64],
        # dtype bytes, indptr, cols, vals, batch, nnz, weight, in_units, units, squared, bias,
        # out, workspace, stream, error, error_len
        "dot_forward": [i32, p, p, p, i64, i64, p, i64, i64, i32, p, p, p, p, text, i32],
        # indptr, cols, batch, nnz, in_units, workspace, num_rows*, stream, error, error_len
        "dot_weight_grad_rows": [p, p, i64, i64, i64, p, p, p, text, i32],
        # dtype bytes, vals, nnz, ograd, weight, units, squared, workspace, num_rows, row_ids,
        # grad, stream, error, error_len
        "dot_weight_grad_values": [i32, p, i64, p, p, i64, i32, p, i64, p, p, p, text, i32],
        # dtype bytes, ograd, batch, units, grad, stream, error, error_len
        "dot_bias_grad": [i32, p, i64, i64, p, p, text, i32],
    }
    for name, argtypes in signatures.items():
        fn = getattr(lib, "gluon_sparse_harness_" + name)
        fn.argtypes = argtypes
        fn.restype = i64 if name.endswith("workspace_bytes") else i32
    return lib


def _floats(values):
    values = [float(v) for v in values]
    return (ctypes.c_float * max(1, len(values)))(*values)


def _pointers(tensors):
    return (ctypes.c_void_p * max(1, len(tensors)))(*[t.data_ptr() for t in tensors])


def _ptr(tensor):
    """A tensor's data pointer, None for None or an empty tensor (the kernels then read nothing)."""
    return None if tensor is None or tensor.numel() == 0 else tensor.data_ptr()


def rule_sizes(lib, rule):
    """``(kNumStates, kNumFixed, kNumStep)`` of the rule named ``rule``."""
    sizes = [ctypes.c_int(), ctypes.c_int(), ctypes.c_int()]
    call_entry(lib.gluon_sparse_harness_optim_rule_sizes, rule.encode(),
               *[ctypes.byref(s) for s in sizes])
    return tuple(s.value for s in sizes)


class RuleKernels:
    """Python face of one rule's eager kernel: ``gluon_sparse_<rule>_update`` on CUDA tensors."""

    def __init__(self, lib, torch, rule, device="cuda"):
        self.lib, self.torch, self.rule = lib, torch, rule
        self.num_states, self.num_fixed, self.num_step = rule_sizes(lib, rule)
        self.workspace = torch.empty(1, dtype=torch.int64, device=device)

    def step(self, weight, states, grad_values, indices, step_scalars, fixed, rescale_grad=1.0,
             validate=True):
        """One eager step of ``weight`` and its ``states`` (updated in place) on every row."""
        assert len(states) == self.num_states and len(step_scalars) == self.num_step
        assert len(fixed) == self.num_fixed
        for t in list(states) + [grad_values]:
            assert t.dtype == weight.dtype and t.is_contiguous() and t.device == weight.device
        assert indices.dtype == self.torch.int64 and indices.is_contiguous()
        call_entry(self.lib.gluon_sparse_harness_optim_eager, self.rule.encode(),
                   weight.element_size(), weight.data_ptr(), _pointers(states), _ptr(grad_values),
                   _ptr(indices), indices.numel(), weight.shape[0], weight[0].numel(),
                   _floats(step_scalars), _floats(fixed), rescale_grad, int(validate),
                   self.workspace.data_ptr(), stream_of(self.torch, weight.device))


class DeferredRuleKernels:
    """One weight's deferred state for one rule on CUDA tensors (the deferred operators' inputs).

    Holds ``weight`` (updated in place), ``states`` (zeros), ``last_step``
    (int64, the step each row is up to date with) and ``history`` (float32
    ``(capacity, kNumStep)``: the step scalars of each update).
    """

    def __init__(self, lib, torch, rule, weight, capacity, fixed):
        self.lib, self.torch, self.rule = lib, torch, rule
        self.num_states, num_fixed, self.num_step = rule_sizes(lib, rule)
        assert len(fixed) == num_fixed
        self.fixed = _floats(fixed)
        self.weight = weight
        self.states = [torch.zeros_like(weight) for _ in range(self.num_states)]
        self.last_step = torch.zeros(weight.shape[0], dtype=torch.int64, device=weight.device)
        self.history = torch.zeros((capacity, self.num_step), dtype=torch.float32,
                                   device=weight.device)
        self.workspace = torch.empty(1, dtype=torch.int64, device=weight.device)

    def _head(self):
        return (self.rule.encode(), self.weight.element_size(), self.weight.data_ptr(),
                _pointers(self.states), self.last_step.data_ptr(), self.history.data_ptr(),
                self.history.shape[0])

    def update(self, grad_values, indices, step, step_scalars, rescale_grad=1.0, catch_up=False,
               validate=True):
        """Deferred update ``step`` of the gradient's rows (sorted unique ``indices``)."""
        assert len(step_scalars) == self.num_step
        assert grad_values.dtype == self.weight.dtype and grad_values.is_contiguous()
        assert indices.dtype == self.torch.int64 and indices.is_contiguous()
        call_entry(self.lib.gluon_sparse_harness_optim_deferred_update, *self._head(),
                   _ptr(grad_values), _ptr(indices), indices.numel(), self.weight.shape[0],
                   self.weight[0].numel(), step, _floats(step_scalars), self.fixed, rescale_grad,
                   int(catch_up), int(validate), self.workspace.data_ptr(),
                   stream_of(self.torch, self.weight.device))

    def catch_up(self, rows, step):
        """Bring ``rows`` (any order, repeats allowed; None: every row, the flush) to ``step``."""
        if rows is not None and rows.numel() == 0:
            return  # (an empty tensor's null pointer would mean every row)
        pointer, n = (None, self.weight.shape[0]) if rows is None else (rows.data_ptr(),
                                                                        rows.numel())
        call_entry(self.lib.gluon_sparse_harness_optim_catch_up, *self._head(),
                   self.weight.shape[0], self.weight[0].numel(), pointer, n, step, self.fixed,
                   self.workspace.data_ptr(), stream_of(self.torch, self.weight.device))

    def flush(self, step):
        """``gluon_sparse_<rule>_deferred_flush``: every row up to ``step``, last_step checked."""
        self.catch_up(None, step)


class DotKernels:
    """Python face of ``gluon_sparse_dot``'s CUDA kernels on CSR data held as three tensors."""

    def __init__(self, lib, torch):
        self.lib, self.torch = lib, torch

    def _workspace(self, name, batch, nnz, device):
        size = getattr(self.lib, "gluon_sparse_harness_dot_%s_workspace_bytes" % name)(batch, nnz)
        return self.torch.empty(max(1, size), dtype=self.torch.uint8, device=device)

    def forward(self, indptr, cols, vals, weight, bias=None, squared=False, out=None):
        """``dot(csr, weight) [+ bias]`` (batch x units); ``out`` is written in place if given."""
        batch = indptr.numel() - 1
        if out is None:
            out = self.torch.empty((batch, weight.shape[1]), dtype=weight.dtype,
                                   device=weight.device)
        workspace = self._workspace("forward", batch, cols.numel(), weight.device)
        call_entry(self.lib.gluon_sparse_harness_dot_forward, weight.element_size(), _ptr(indptr),
                   _ptr(cols), _ptr(vals), batch, cols.numel(), weight.data_ptr(), weight.shape[0],
                   weight.shape[1], int(squared), _ptr(bias), out.data_ptr(), workspace.data_ptr(),
                   stream_of(self.torch, weight.device))
        return out

    def weight_grad(self, indptr, cols, vals, ograd, weight, squared=False):
        """The row_sparse weight gradient: ``(row_ids, values)``, as the backward computes it."""
        torch = self.torch
        batch, nnz = indptr.numel() - 1, cols.numel()
        workspace = self._workspace("weight_grad", batch, nnz, weight.device)
        num_rows = ctypes.c_int64()
        stream = stream_of(torch, weight.device)
        call_entry(self.lib.gluon_sparse_harness_dot_weight_grad_rows, _ptr(indptr), _ptr(cols),
                   batch, nnz, weight.shape[0], workspace.data_ptr(), ctypes.byref(num_rows),
                   stream)
        rows = torch.empty(num_rows.value, dtype=torch.int64, device=weight.device)
        values = torch.empty((num_rows.value, weight.shape[1]), dtype=weight.dtype,
                             device=weight.device)
        if num_rows.value:
            call_entry(self.lib.gluon_sparse_harness_dot_weight_grad_values, weight.element_size(),
                       vals.data_ptr(), nnz, ograd.data_ptr(), weight.data_ptr(), weight.shape[1],
                       int(squared), workspace.data_ptr(), num_rows.value, rows.data_ptr(),
                       values.data_ptr(), stream)
        return rows, values

    def bias_grad(self, ograd):
        """The bias gradient: the column sums of ``ograd`` (batch x units)."""
        grad = self.torch.empty(ograd.shape[1], dtype=ograd.dtype, device=ograd.device)
        call_entry(self.lib.gluon_sparse_harness_dot_bias_grad, ograd.element_size(),
                   ograd.data_ptr(), ograd.shape[0], ograd.shape[1], grad.data_ptr(),
                   stream_of(self.torch, ograd.device))
        return grad
