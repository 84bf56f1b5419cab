"""Standalone GPU harness for gluon-sparse's standard-Adam CUDA kernels.

Drives the kernels of ``gluon_sparse/csrc/ops/adam_kernels.cu`` (the source the
operator library compiles) on PyTorch CUDA tensors through the C entry points
of ``adam_harness.cu``, without MXNet:

1. correctness: many steps on small weights (a row width that takes the
   16-byte vector path and one that does not), float32 and float64, clipping
   on and off, weight decay, empty gradients, compared with a NumPy
   implementation that performs the same IEEE operations in the same order,
   so results must be *bitwise* equal; bad indices must be rejected;
2. speed on a ``--rows x --cols`` float32 weight with 640 and 100,000 gradient
   rows, next to ``torch.optim.Adam(fused=True)`` on the same shape (dense
   gradient) and a device-to-device copy of the same bytes (3 x weight: the
   24 bytes per element a standard Adam update must move).

Run: ``python benchmarks/gpu/run_harness.py`` (builds ``build/libadam_harness.so``
with build.sh when missing; ``--rebuild`` forces it). Needs a CUDA GPU,
PyTorch with CUDA, nvcc and NumPy.
"""
import argparse
import ctypes
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = os.path.join(HERE, "build", "libadam_harness.so")
BYTES_PER_ELEMENT = 24


def load_library(rebuild=False):
    """Build (if needed) and load the harness library with its C signatures."""
    if rebuild or not os.path.exists(LIBRARY):
        subprocess.check_call(["sh", os.path.join(HERE, "build.sh"), LIBRARY])
    lib = ctypes.CDLL(LIBRARY)
    p, i64, f32, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int
    for name in ("gs_harness_adam_update_f32", "gs_harness_adam_update_f64"):
        fn = getattr(lib, name)
        fn.argtypes = [p, p, p, p, p, i64, i64, i64] + [f32] * 7 + [i32, p, p, ctypes.c_char_p, i32]
        fn.restype = i32
    return lib


class AdamKernels:
    """Python face of the harness: one standard Adam step on CUDA tensors, in place."""

    def __init__(self, lib, torch):
        self.lib = lib
        self.torch = torch
        self.workspace = torch.empty(1, dtype=torch.int64, device="cuda")

    def step(self, weight, mean, var, grad_values, indices, lr, beta1=0.9, beta2=0.999,
             epsilon=1e-8, wd=0.0, rescale_grad=1.0, clip_gradient=-1.0, validate=True):
        torch = self.torch
        fn = {torch.float32: self.lib.gs_harness_adam_update_f32,
              torch.float64: self.lib.gs_harness_adam_update_f64}[weight.dtype]
        for t in (weight, mean, var, grad_values):
            assert t.is_cuda and t.is_contiguous() and t.dtype == weight.dtype
        assert indices.dtype == torch.int64 and indices.is_contiguous()
        rows, cols = weight.shape[0], weight[0].numel()
        error = ctypes.create_string_buffer(512)
        stream = torch.cuda.current_stream().cuda_stream
        rc = fn(weight.data_ptr(), mean.data_ptr(), var.data_ptr(), grad_values.data_ptr(),
                indices.data_ptr(), indices.numel(), rows, cols, lr, beta1, beta2, epsilon, wd,
                rescale_grad, clip_gradient, int(validate), self.workspace.data_ptr(), stream,
                error, len(error))
        if rc != 0:
            raise ValueError(error.value.decode())


def numpy_step(w, m, v, grad_values, indices, lr, beta1=0.9, beta2=0.999, epsilon=1e-8, wd=0.0,
               rescale_grad=1.0, clip_gradient=-1.0):
    """The kernel's operations, in its order and precision (scalars rounded to float32 first)."""
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


def check_correctness(kernels, torch):
    rng = np.random.default_rng(0)
    cases = [(np.float32, 128, {}), (np.float32, 37, {"wd": 0.01, "clip_gradient": 0.05}),
             (np.float64, 128, {"wd": 0.02, "rescale_grad": 0.5, "clip_gradient": 0.3}),
             (np.float64, 7, {"beta1": 0.8, "beta2": 0.99, "epsilon": 1e-6})]
    for dtype, cols, params in cases:
        rows = 1000
        w = rng.standard_normal((rows, cols)).astype(dtype)
        m, v = np.zeros_like(w), np.zeros_like(w)
        tw, tm, tv = (torch.from_numpy(a.copy()).cuda() for a in (w, m, v))
        for step in range(50):
            n = 0 if step % 9 == 4 else int(rng.integers(1, rows))
            indices = np.sort(rng.choice(rows, n, replace=False)).astype(np.int64)
            values = rng.standard_normal((n, cols)).astype(dtype)
            lr = 0.01 * np.sqrt(1 - 0.999 ** (step + 1)) / (1 - 0.9 ** (step + 1))
            numpy_step(w, m, v, values, indices, lr, **params)
            kernels.step(tw, tm, tv, torch.from_numpy(values).cuda(),
                         torch.from_numpy(indices).cuda(), lr, **params)
        for name, got, want in (("weight", tw, w), ("mean", tm, m), ("var", tv, v)):
            got = got.cpu().numpy()
            if not np.array_equal(got, want):
                raise AssertionError("%s differs from NumPy for %s cols=%d %s: max |diff| %g"
                                     % (name, np.dtype(dtype).name, cols, params,
                                        np.abs(got - want).max()))
        print("ok  bitwise equal to NumPy: %s, %d x %d, %s, 50 steps"
              % (np.dtype(dtype).name, rows, cols, params))
    z = torch.zeros((10, 4), device="cuda")
    for bad, expected in (([3, 10], "out of range"), ([-1], "out of range"),
                          ([5, 2], "sorted and unique"), ([2, 2], "sorted and unique")):
        try:
            kernels.step(z, z.clone(), z.clone(), torch.ones((len(bad), 4), device="cuda"),
                         torch.tensor(bad, dtype=torch.int64, device="cuda"), 0.1)
        except ValueError as err:
            assert expected in str(err), err
        else:
            raise AssertionError("indices %s were accepted" % bad)
    print("ok  bad indices rejected before any write")


def cuda_time(torch, fn, repeat):
    """Milliseconds per call, from CUDA events, after two warm-up calls."""
    fn()
    fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeat):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / repeat


def benchmark(kernels, torch, rows, cols, repeat):
    elements = rows * cols
    weight = torch.randn(rows, cols, device="cuda")
    mean = torch.randn(rows, cols, device="cuda") * 1e-3
    var = torch.rand(rows, cols, device="cuda") * 1e-6
    src = torch.empty(3 * elements, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = cuda_time(torch, lambda: dst.copy_(src), repeat)
    del src, dst
    results = [("device-to-device copy of 3 x weight bytes", copy_ms)]

    param = torch.nn.Parameter(torch.randn(rows, cols, device="cuda"))
    param.grad = torch.randn(rows, cols, device="cuda")
    fused = torch.optim.Adam([param], lr=1e-3, weight_decay=1e-4, fused=True)
    results.append(("torch.optim.Adam(fused=True), dense grad", cuda_time(torch, fused.step, repeat)))
    del param, fused

    for grad_rows in (640, 100_000):
        indices = torch.sort(torch.randperm(rows, device="cuda")[:grad_rows]).values
        values = torch.randn(grad_rows, cols, device="cuda")
        for validate in (True, False):
            ms = cuda_time(torch, lambda: kernels.step(weight, mean, var, values, indices, 1e-3,
                                                       wd=1e-4, validate=validate), repeat)
            results.append(("gluon-sparse kernels, %d grad rows%s"
                            % (grad_rows, "" if validate else ", without index check"), ms))

    print("\n%s, %d x %d float32 (%s)\n" % (torch.cuda.get_device_name(), rows, cols,
                                             "CUDA %s, PyTorch %s" % (torch.version.cuda,
                                                                      torch.__version__)))
    print("| candidate | time/step | GB/s (24 B/elem) | % of copy bandwidth |")
    print("|---|---|---|---|")
    for name, ms in results:
        print("| %s | %.3f ms | %.0f | %.0f%% |" % (name, ms, BYTES_PER_ELEMENT * elements / ms / 1e6,
                                                  100 * copy_ms / ms))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--cols", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--rebuild", action="store_true", help="rebuild the harness library")
    args = parser.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        sys.exit("run_harness.py needs a CUDA GPU and PyTorch built with CUDA")
    kernels = AdamKernels(load_library(args.rebuild), torch)
    check_correctness(kernels, torch)
    benchmark(kernels, torch, args.rows, args.cols, args.repeat)


if __name__ == "__main__":
    main()
