"""GPU checks and timings of ``gluon_sparse_dot``'s CUDA kernels (``sparse_dot.cu``).

References are NumPy, in float64 (no SciPy needed):

- forward ``dot(csr, W) [+ b]`` (and ``squared``: ``dot(csr^2, W^2)``) and the
  weight gradient's values: **bitwise** equal to ``sequential_forward`` /
  ``sequential_weight_grad``, the CPU operator's sums (each output summed in
  entry order, (column, entry) order for the gradient, in the weight's type,
  never fused), which tests/test_gpu_harness_family.py checks bitwise against
  the CPU ``gluon_sparse_dot``; and, as a check of those references, within a
  rounding-error bound of the float64 sum: ``(k + c) * eps * sum(|terms|)``,
  ``k`` the number of terms, ``c`` the roundings of one term (1 plain, 4
  squared; +1 for the bias), ``eps`` the unit roundoff of the type;
- the weight gradient's rows: exactly the sorted distinct columns of the batch;
- the bias gradient: **bitwise** equal to a NumPy Kahan sum down the rows in
  the kernel's type (MXNet's order and rounding, ``column_sum.h``; no
  multiplication to fuse).

A column outside ``[0, in_units)`` or a decreasing indptr must be rejected
with the launcher's message, before the output is written.
"""
import numpy as np

from .checks import assert_bitwise, expect_rejections
from .timing import cuda_time, versions


def random_csr(rng, batch, in_units, max_per_row, dtype):
    """A CSR batch: ~10% empty rows, sorted duplicate-free columns, column in_units - 1 used."""
    counts = rng.integers(1, max_per_row + 1, batch)
    counts[rng.random(batch) < 0.1] = 0
    counts[0] = max(counts[0], 1)
    cols = [np.sort(rng.choice(in_units, c, replace=False)) for c in counts]
    cols[0][-1] = in_units - 1  # the last column (cols[0] stays sorted and unique)
    cols[0] = np.unique(cols[0])
    counts[0] = len(cols[0])
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    cols = np.concatenate(cols).astype(np.int64)
    vals = rng.uniform(-2.0, 2.0, len(cols)).astype(dtype)
    return indptr, cols, vals


def _rows_of_entries(indptr):
    return np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))


def reference_forward(indptr, cols, vals, weight, bias, squared):
    """float64 forward and the per-element bound sum(|terms|) (+|bias|), and terms per row."""
    v, w = vals.astype(np.float64), weight.astype(np.float64)
    terms = (v * v)[:, None] * w[cols] ** 2 if squared else v[:, None] * w[cols]
    out = np.zeros((len(indptr) - 1, weight.shape[1]))
    mag = np.zeros_like(out)
    rows = _rows_of_entries(indptr)
    np.add.at(out, rows, terms)
    np.add.at(mag, rows, np.abs(terms))
    if bias is not None:
        out += bias
        mag += np.abs(bias.astype(np.float64))
    return out, mag, int(np.diff(indptr).max())


def reference_weight_grad(indptr, cols, vals, ograd, weight, squared):
    """Sorted distinct columns, float64 gradient rows, their bound and the most terms per row."""
    rows_of = _rows_of_entries(indptr)
    uniq, slot, counts = np.unique(cols, return_inverse=True, return_counts=True)
    v, g = vals.astype(np.float64), ograd.astype(np.float64)
    terms = v[:, None] * g[rows_of]
    if squared:
        terms = 2.0 * (v * v)[:, None] * weight.astype(np.float64)[cols] * g[rows_of]
    grad = np.zeros((len(uniq), ograd.shape[1]))
    mag = np.zeros_like(grad)
    np.add.at(grad, slot, terms)
    np.add.at(mag, slot, np.abs(terms))
    return uniq.astype(np.int64), grad, mag, int(counts.max()) if len(counts) else 0


def sequential_forward(indptr, cols, vals, weight, bias, squared):
    """The CPU operator's forward in the weight's type: per row, its entries' terms
    (``v * w``; squared ``((v * v) * w) * w``) added in entry order, then the bias."""
    t = weight.dtype.type
    out = np.zeros((len(indptr) - 1, weight.shape[1]), weight.dtype)
    for r in range(len(indptr) - 1):
        for k in range(indptr[r], indptr[r + 1]):
            v, w = t(vals[k]), weight[cols[k]]
            out[r] += ((v * v) * w) * w if squared else v * w
    if bias is not None:
        out += bias
    return out


def sequential_weight_grad(indptr, cols, vals, ograd, weight, squared):
    """The CPU operator's weight gradient values in the weight's type: per distinct
    column, its entries in (column, entry) order, each ``v * g`` (squared
    ``(((2 * v) * v) * w) * g``) added in turn."""
    t = weight.dtype.type
    rows_of = _rows_of_entries(indptr)
    order = np.lexsort((np.arange(len(cols)), cols))
    uniq = np.unique(cols)
    grad = np.zeros((len(uniq), ograd.shape[1]), weight.dtype)
    slot = np.searchsorted(uniq, cols)
    for k in order:
        v, g = t(vals[k]), ograd[rows_of[k]]
        grad[slot[k]] += (((t(2) * v) * v) * weight[cols[k]]) * g if squared else v * g
    return grad


def kahan_column_sums(m):
    """MXNet's column sums (column_sum.h's kahan_add) in ``m``'s type, down the rows in order."""
    sums = np.zeros(m.shape[1], m.dtype)
    residual = np.zeros_like(sums)
    with np.errstate(over="ignore", invalid="ignore"):
        for row in m:
            y = row - residual
            t = sums + y
            residual = np.where(np.isinf(t), m.dtype.type(0), (t - sums) - y)
            sums = t
    return sums


def assert_within_bound(what, got, want, mag, terms, roundings, dtype):
    """Each |got - want| <= (terms + roundings) * eps * mag (+ a denormal floor)."""
    eps = np.finfo(dtype).eps / 2
    got = np.asarray(got, np.float64)
    bound = (terms + roundings) * eps * mag + np.finfo(dtype).tiny
    excess = np.abs(got - want) > bound
    if excess.any():
        first = tuple(int(i) for i in np.argwhere(excess)[0])
        raise AssertionError("%s: %d elements outside the rounding bound, first at %s "
                             "(%r vs %r, bound %g)" % (what, int(excess.sum()), first,
                                                       got[first], want[first], bound[first]))


def check_dot_case(dot, torch, dtype, units, squared, seed, device="cuda"):
    """Forward, weight gradient and bias gradient of one random batch against NumPy."""
    rng = np.random.default_rng(seed)
    batch, in_units = 64, 500
    indptr, cols, vals = random_csr(rng, batch, in_units, 12, dtype)
    weight = rng.standard_normal((in_units, units)).astype(dtype)
    bias = rng.standard_normal(units).astype(dtype)
    ograd = rng.standard_normal((batch, units)).astype(dtype)
    t = {name: torch.from_numpy(a).to(device) for name, a in (
        ("indptr", indptr), ("cols", cols), ("vals", vals), ("weight", weight), ("bias", bias),
        ("ograd", ograd))}
    label = "%s, %d x %d weight, %d units%s" % (np.dtype(dtype).name, in_units, units, units,
                                                ", squared" if squared else "")
    for with_bias in (False, True):
        out = dot.forward(t["indptr"], t["cols"], t["vals"], t["weight"],
                          t["bias"] if with_bias else None, squared)
        want, mag, terms = reference_forward(indptr, cols, vals, weight,
                                             bias if with_bias else None, squared)
        what = "forward (%s%s)" % (label, ", bias" if with_bias else "")
        exact = sequential_forward(indptr, cols, vals, weight, bias if with_bias else None,
                                   squared)
        assert_within_bound(what + ", the CPU-order reference", exact, want, mag, terms,
                            (4 if squared else 1) + with_bias, dtype)
        assert_bitwise(what + " vs the CPU operator's order", out, exact)
        empty = np.diff(indptr) == 0
        got_empty = out.cpu().numpy()[empty]
        assert_bitwise("forward of the empty rows (%s)" % label, got_empty,
                       np.broadcast_to(bias if with_bias else dtype(0), got_empty.shape)
                       .astype(dtype))
    rows, values = dot.weight_grad(t["indptr"], t["cols"], t["vals"], t["ograd"], t["weight"],
                                   squared)
    want_rows, want, mag, terms = reference_weight_grad(indptr, cols, vals, ograd, weight,
                                                        squared)
    assert_bitwise("weight gradient rows (%s)" % label, rows, want_rows)
    exact = sequential_weight_grad(indptr, cols, vals, ograd, weight, squared)
    assert_within_bound("weight gradient values (%s), the CPU-order reference" % label, exact,
                        want, mag, terms, 5 if squared else 1, dtype)
    assert_bitwise("weight gradient values (%s) vs the CPU operator's order" % label, values,
                   exact)
    assert_bitwise("bias gradient (%s)" % label, dot.bias_grad(t["ograd"]),
                   kahan_column_sums(ograd))
    print("ok  gluon_sparse_dot %s: forward and weight gradient bitwise the CPU operator's "
          "sums (themselves within their rounding bound of float64 NumPy), rows exact, bias "
          "gradient bitwise MXNet's Kahan sum" % label)


def check_dot_correctness(dot, torch, device="cuda"):
    """Every case of ``check_dot_case``, then the rejections."""
    seed = 0
    for dtype in (np.float32, np.float64):
        for units, squared in ((37, False), (128, False), (16, True)):
            check_dot_case(dot, torch, dtype, units, squared, seed, device)
            seed += 1
    check_dot_rejections(dot, torch, device)


def check_dot_rejections(dot, torch, device="cuda"):
    """Bad columns and a decreasing indptr: an error naming them, the output not written."""
    weight = torch.ones((10, 4), device=device)
    ograd = torch.ones((2, 4), device=device)

    def csr(indptr, cols):
        return (torch.tensor(indptr, dtype=torch.int64, device=device),
                torch.tensor(cols, dtype=torch.int64, device=device),
                torch.ones(len(cols), device=device))
    out = torch.full((2, 4), 7.0, device=device)
    cases = [(csr([0, 1, 2], [3, 10]), "entry 1 has a column index outside [0, 10)"),
             (csr([0, 1, 2], [-1, 2]), "entry 0 has a column index outside"),
             (csr([0, 2, 1], [1, 2]), "indptr decreases at row 1")]
    attempts = []
    for (indptr, cols, vals), expected in cases:
        attempts.append((expected, lambda a=(indptr, cols, vals): dot.forward(
            *a, weight, out=out)))
        attempts.append((expected, lambda a=(indptr, cols, vals): dot.weight_grad(
            *a, ograd, weight)))
    expect_rejections(attempts)
    assert_bitwise("forward output after the rejected calls", out, np.full((2, 4), 7.0,
                                                                           np.float32))
    print("ok  gluon_sparse_dot: bad columns and a decreasing indptr rejected with their "
          "message, output not written")


def benchmark_dot(dot, torch, in_units, units, batch, per_row, repeat):
    """Forward and weight gradient at a CTR-like shape, next to PyTorch; prints a table."""
    rng = np.random.default_rng(0)
    cols = np.sort(np.stack([rng.choice(in_units, per_row, replace=False)
                             for _ in range(batch)]), axis=1).reshape(-1).astype(np.int64)
    indptr = torch.arange(0, batch * per_row + 1, per_row, device="cuda")
    t_cols = torch.from_numpy(cols).to("cuda")
    vals = torch.rand(batch * per_row, device="cuda")
    weight = torch.randn(in_units, units, device="cuda")
    ograd = torch.randn(batch, units, device="cuda")
    out = torch.empty(batch, units, device="cuda")
    results = [
        ("gluon-sparse forward", cuda_time(torch, lambda: dot.forward(
            indptr, t_cols, vals, weight, out=out), repeat)),
        ("gluon-sparse weight gradient (rows + values)", cuda_time(
            torch, lambda: dot.weight_grad(indptr, t_cols, vals, ograd, weight), repeat)),
    ]
    results.append(("gluon-sparse forward + weight gradient", results[0][1] + results[1][1]))
    csr = torch.sparse_csr_tensor(indptr, t_cols, vals, (batch, in_units))
    results.append(("torch.sparse.mm (CSR x dense) forward",
                    cuda_time(torch, lambda: torch.sparse.mm(csr, weight), repeat)))
    offsets = indptr[:-1].contiguous()
    param = torch.nn.Parameter(weight.clone())

    def bag():
        return torch.nn.functional.embedding_bag(t_cols, param, offsets, mode="sum",
                                                 per_sample_weights=vals, sparse=True)
    results.append(("torch embedding_bag(sum, per_sample_weights) forward",
                    cuda_time(torch, lambda: bag(), repeat)))

    def bag_step():
        param.grad = None
        bag().backward(ograd)
    results.append(("torch embedding_bag forward + backward (sparse=True weight grad)",
                    cuda_time(torch, bag_step, repeat)))
    lines = ["", "#### gluon_sparse_dot on %s: batch %d x %d nnz, %d x %d float32 weight (%s)"
             % (torch.cuda.get_device_name(), batch, per_row, in_units, units, versions(torch)),
             "",
             "| candidate | time |", "|---|---|"]
    lines += ["| %s | %.3f ms |" % (name, ms) for name, ms in results]
    print("\n".join(lines))
