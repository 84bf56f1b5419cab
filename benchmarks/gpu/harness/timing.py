"""Timings of the CUDA kernels on PyTorch tensors, printed as markdown tables.

``benchmark_eager``: the eager update against a device-to-device copy and
``torch.optim.Adam(fused=True)``; ``benchmark_deferred``: the deferred step and
flush against the eager step, ``torch.optim.Adam(fused=True)`` and
``torch.optim.SparseAdam``. The tables are formatted by ``eager_table`` and
``deferred_table`` (plain functions of the measured times).
"""
from .bindings import DeferredAdamKernels

BYTES_PER_ELEMENT = 24  # what any standard Adam update moves: read w, m, v; write them


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


def events_ms(torch, setup, fn, repeat):
    """Milliseconds of ``fn`` alone, mean of ``repeat`` calls each after an untimed ``setup``."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    total = 0.0
    for _ in range(repeat):
        setup()
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        total += start.elapsed_time(stop)
    return total / repeat


def eager_table(title, results, elements, copy_ms):
    """Markdown lines: each (name, ms) with its GB/s at 24 B/element and % of the copy's."""
    lines = ["", title, "", "| candidate | time/step | GB/s (24 B/elem) | % of copy bandwidth |",
             "|---|---|---|---|"]
    for name, ms in results:
        lines.append("| %s | %.3f ms | %.0f | %.0f%% |"
                     % (name, ms, BYTES_PER_ELEMENT * elements / ms / 1e6, 100 * copy_ms / ms))
    return lines


def deferred_table(title, results, eager_ms):
    """Markdown lines: each (name, ms) with the eager step's time over it."""
    lines = ["", title, "", "| candidate | time | eager step / time |", "|---|---|---|"]
    for name, ms in results:
        lines.append("| %s | %.3f ms | %.1fx |" % (name, ms, eager_ms / ms))
    return lines


def versions(torch):
    """The CUDA and PyTorch versions, for the tables' titles."""
    return "CUDA %s, PyTorch %s" % (torch.version.cuda, torch.__version__)


def benchmark_eager(kernels, torch, rows, cols, repeat):
    """The eager kernels with 640 and 100,000 gradient rows on a ``rows x cols`` weight."""
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
    results.append(("torch.optim.Adam(fused=True), dense grad",
                    cuda_time(torch, fused.step, repeat)))
    del param, fused

    for grad_rows in (640, 100_000):
        indices = torch.sort(torch.randperm(rows, device="cuda")[:grad_rows]).values
        values = torch.randn(grad_rows, cols, device="cuda")
        for validate in (True, False):
            ms = cuda_time(torch, lambda: kernels.step(weight, mean, var, values, indices, 1e-3,
                                                       wd=1e-4, validate=validate), repeat)
            results.append(("gluon-sparse kernels, %d grad rows%s"
                            % (grad_rows, "" if validate else ", without index check"), ms))

    title = "%s, %d x %d float32 (%s)" % (torch.cuda.get_device_name(), rows, cols,
                                          versions(torch))
    print("\n".join(eager_table(title, results, elements, copy_ms)))


def deferred_step_calls(repeat):
    """Calls of each timed deferred configuration: ``cuda_time``'s two warm-ups + ``repeat``."""
    return repeat + 2


def benchmark_deferred(lib, kernels, torch, rows, cols, grad_rows, gaps, repeat):
    """Deferred step vs eager step vs torch's Adam, and the flush; prints a markdown table.

    For the deferred step with gap g, call i (update step base + i) gets its own
    random gradient rows (disjoint from the other calls'), set beforehand to step
    base + i - 1 - g: each call replays g missed steps for each of its rows, then
    updates them (gap 0: rows updated by the previous step, as the hot rows of
    CTR data).
    """
    lr, wd = 1e-3, 1e-4  # (about 6 GiB of device memory at 1,000,000 x 128 in all)
    calls = deferred_step_calls(repeat)
    if calls * grad_rows > rows:
        raise ValueError("the timed deferred steps need (repeat + 2) x grad_rows = %d distinct "
                         "rows, more than the weight's %d" % (calls * grad_rows, rows))
    base = max(list(gaps) + [1000]) + 2
    deferred = DeferredAdamKernels(lib, torch, torch.randn(rows, cols, device="cuda"),
                                   base + calls + 1)
    # A non-zero state everywhere: no row is a fixed point, every replayed step is computed.
    deferred.mean.normal_(0.0, 1e-3)
    deferred.var.uniform_(0.0, 1e-6)
    deferred.history[1:] = torch.tensor([lr, wd, -1.0], device="cuda")
    # Disjoint row sets: a row of a later call must not be ahead of an earlier call's step.
    order = torch.randperm(rows, device="cuda")
    index_sets = [torch.sort(order[i * grad_rows:(i + 1) * grad_rows]).values
                  for i in range(calls)]
    values = torch.randn(grad_rows, cols, device="cuda")
    results = []

    def deferred_steps(gap, catch_up_first=False, validate=False):
        deferred.last_step.fill_(base - 1)
        for i, indices in enumerate(index_sets):
            deferred.last_step[indices] = base + i - 1 - gap
        call = iter(range(calls))

        def one_step():
            i = next(call)
            if catch_up_first:
                deferred.catch_up(index_sets[i], base + i - 1)
            deferred.update(values, index_sets[i], base + i, lr, wd=wd,
                            catch_up=not catch_up_first, validate=validate)
        return cuda_time(torch, one_step, repeat)

    eager_state = [deferred.weight.clone(), deferred.mean.clone(), deferred.var.clone()]
    eager_ms = cuda_time(torch, lambda: kernels.step(*eager_state, values, index_sets[0], lr,
                                                     wd=wd), repeat)
    results.append(("eager gluon_sparse_adam_update kernels (every row), index check", eager_ms))
    for gap in gaps:
        results.append(("deferred step: catch-up of the grad rows (%d missed step%s) + update"
                        % (gap, "" if gap == 1 else "s"), deferred_steps(gap)))
    results.append(("deferred step, 0 missed steps, with the operator's index check",
                    deferred_steps(0, validate=True)))
    results.append(("deferred step as in training: catch-up by the forward pass, update with "
                    "index and stale-row checks, 0 missed steps",
                    deferred_steps(0, catch_up_first=True, validate=True)))

    step = base - 1
    flush_cases = [("flush, every row up to date", lambda: deferred.last_step.fill_(step))]
    for lag in (1, 10):
        flush_cases.append(("flush, every row %d step%s behind" % (lag, "" if lag == 1 else "s"),
                            lambda lag=lag: deferred.last_step.fill_(step - lag)))
    stale = torch.randperm(rows, device="cuda")[:rows // 100]

    def one_percent_behind():
        deferred.last_step.fill_(step)
        deferred.last_step[stale] = step - 1000
    flush_cases.append(("flush, 1% of the rows 1000 steps behind, the rest up to date",
                        one_percent_behind))
    for name, setup in flush_cases:
        results.append((name, events_ms(torch, setup, lambda: deferred.flush(step),
                                        max(3, repeat // 10))))

    param = torch.nn.Parameter(torch.randn(rows, cols, device="cuda"))
    param.grad = torch.randn(rows, cols, device="cuda")
    fused = torch.optim.Adam([param], lr=lr, weight_decay=wd, fused=True)
    results.append(("torch.optim.Adam(fused=True), dense grad (standard Adam)",
                    cuda_time(torch, fused.step, repeat)))
    param.grad = None
    sparse = torch.optim.SparseAdam([param], lr=lr)

    def sparse_step():
        param.grad = torch.sparse_coo_tensor(index_sets[0][None], values, (rows, cols),
                                             check_invariants=False)
        sparse.step()
    results.append(("torch.optim.SparseAdam, %d-row sparse grad (lazy Adam: another algorithm)"
                    % grad_rows, cuda_time(torch, sparse_step, repeat)))

    title = ("#### Deferred standard Adam: %s, %d x %d float32, %d-row gradient (%s)"
             % (torch.cuda.get_device_name(), rows, cols, grad_rows, versions(torch)))
    print("\n".join(deferred_table(title, results, eager_ms)))
