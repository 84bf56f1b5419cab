"""Standalone GPU harness for gluon-sparse's CUDA kernels: standard Adam, the family, sparse dot.

Drives the CUDA kernels the operator library compiles, on PyTorch CUDA tensors
through the C entry points of ``adam_harness.cu`` and ``adam_deferred_harness.cu``
(no MXNet needed):

- ``gluon_sparse/csrc/ops/adam_kernels.cu``: the eager standard-Adam update of
  ``gluon_sparse_adam_update`` (every row, every step);
- ``gluon_sparse/csrc/ops/adam_deferred_kernels.cu``: deferred standard Adam of
  ``gluon_sparse_adam_deferred_update`` / ``gluon_sparse_adam_deferred_flush`` (the gradient's rows
  only; rows left behind replay the steps they missed when they are next read,
  or at the flush).

What it checks, in this order:

1. eager correctness: 50 steps on 1000-row weights (128 columns, the 16-byte
   vector path; 37 and 7, the scalar path), float32 and float64, clipping on and
   off, weight decay, rescaling, empty gradients, *bitwise* equal to
   ``numpy_step`` (the kernels' IEEE operations in their order); bad indices are
   rejected;
2. deferred correctness: 300 steps with a learning-rate schedule, wd = 0,
   wd > 0 and a wd that starts at 0, clipping on and off, float32 and float64,
   rows untouched for ~250 steps, rows never touched and empty gradients, and
   1000 steps in which rows wait until their means are float32 denormals. After
   every step the rows the step changed must be the gradient's rows only (the
   bytes of every other row of weight, mean, var and last_step unchanged) and
   equal the eager CUDA kernels' rows; after the final flush weight, mean and var
   must be *bitwise* equal to the eager CUDA kernels run step by step and to
   ``numpy_step``. Rows are brought up to date both ways the operator does it: a
   catch-up of the rows a batch reads (repeats included) followed by the update
   with its stale-row check, and the update's own ``catch_up`` mode. Stale rows,
   bad indices and a too-short history must be rejected before any write;
3. speed on a ``--rows x --cols`` float32 weight (default 1,000,000 x 128) with
   a ``--grad-rows`` gradient (default 640): the deferred step (catch-up of the
   gradient's rows + their update) with the rows behind by each of ``--gaps``
   steps, the eager step, ``torch.optim.Adam(fused=True)`` (dense gradient),
   ``torch.optim.SparseAdam`` (lazy Adam: another algorithm, the cost floor), and
   the flush with every row up to date or behind by a few steps. Printed as a
   markdown table (device, CUDA and PyTorch versions in its title) for
   ``benchmarks/RESULTS.md``.

4. (``--only family``, ``build/libfamily_harness.so``) the optimizer family's
   kernels (``optim_kernels.cu``, every rule, float32 and float64) against
   runs of the CPU operators recorded by ``make_family_fixtures.py`` in
   ``--fixtures`` (default ``build/fixtures``): the eager kernel *bitwise*
   equal to the CPU operator after 150 steps; the deferred kernels (catch-up
   by rows + update with the stale-row check, or the update's own catch-up)
   writing only the gradient's rows at each step, bitwise equal to the eager
   kernel there and, after the flush, everywhere; MXNet's dense update where
   recorded; stale rows, bad indices, a short history and a bad last_step
   rejected before any write. Timed: per rule, the deferred step (catch-up +
   update of ``--grad-rows`` rows) vs the eager step over every row;
5. (``--only dot``) ``gluon_sparse_dot``'s kernels (``sparse_dot.cu``) on
   random CSR batches: forward and weight-gradient values within their
   rounding-error bound of float64 NumPy, the gradient's rows exact, the bias
   gradient bitwise a NumPy Kahan sum; bad columns rejected. Timed at a CTR
   shape (batch 512 x 40 non-zeros, ``--rows`` x 128 weight) next to
   ``torch.sparse.mm`` and ``embedding_bag``.

``--only`` (repeatable) picks parts 1-3 (adam), 4 (family) or 5 (dot).

Run: ``python benchmarks/gpu/run_harness.py`` (builds ``build/libadam_harness.so``
with build.sh when missing; ``--rebuild`` forces it). Needs a CUDA GPU (sm_75 or
newer with the default build), PyTorch with CUDA, nvcc and NumPy.
``--quick`` keeps every correctness check but times a 100,000-row weight with
fewer repeats (about a minute in all).

Modules: ``reference`` (NumPy references, no GPU package), ``cases`` (the
correctness workloads), ``bindings`` (ctypes), ``checks`` (correctness),
``timing`` (speed tables), ``cli`` (arguments and main). The NumPy references
(``numpy_step`` and ``NumpyDeferredAdam``) are checked bitwise against the CPU
operators by tests/test_gpu_harness.py on any machine, so a GPU run compares the
kernels with a reference that is itself proven exact.
"""
