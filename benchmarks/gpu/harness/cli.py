"""Command line of the GPU harness: arguments and the order of checks and timings."""
import argparse
import os
import sys
import traceback

from . import __doc__ as HARNESS_DOC
from .timing import deferred_step_calls

QUICK_ROWS, QUICK_REPEAT, QUICK_GAPS = 100_000, 10, [0, 100]
DEFAULT_GAPS = [0, 1, 10, 100, 1000]
PARTS = ("adam", "family", "dot")
FAMILY_REPEAT = 10  # timed calls per rule (the family's table has 11 rules)
DOT_SHAPE = {"batch": 512, "per_row": 40, "units": 128}  # a CTR batch


def _positive_int(text):
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("%r is not a positive integer" % text)
    return value


def _non_negative_int(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("%r is not a non-negative integer" % text)
    return value


def build_parser():
    """The argument parser of ``run_harness.py`` (its ``--help`` is the package's doc)."""
    parser = argparse.ArgumentParser(
        prog="run_harness.py", description=HARNESS_DOC,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=_positive_int, default=1_000_000,
                        help="rows of the timed weight (default 1,000,000; --quick: 100,000)")
    parser.add_argument("--cols", type=_positive_int, default=128,
                        help="its columns (default 128)")
    parser.add_argument("--grad-rows", type=_positive_int, default=640,
                        help="gradient rows of the timed deferred steps (default 640)")
    parser.add_argument("--gaps", type=_non_negative_int, nargs="+", default=None,
                        help="missed steps the timed deferred steps replay per gradient row "
                             "(default 0 1 10 100 1000; --quick: 0 100)")
    parser.add_argument("--repeat", type=_positive_int, default=50,
                        help="timed calls per candidate (default 50; --quick: 10)")
    parser.add_argument("--quick", action="store_true",
                        help="time a 100,000-row weight with fewer repeats and gaps "
                             "(every correctness check still runs)")
    parser.add_argument("--skip-correctness", action="store_true",
                        help="only time the kernels")
    parser.add_argument("--skip-benchmark", action="store_true",
                        help="only run the correctness checks")
    parser.add_argument("--rebuild", action="store_true",
                        help="rebuild the harness libraries with build.sh first")
    parser.add_argument("--only", choices=PARTS, action="append", default=None,
                        help="run only this part (repeatable; default every part): adam "
                             "(standard Adam, eager and deferred: build/libadam_harness.so), "
                             "family (the optimizer family's kernels against recorded CPU runs: "
                             "build/libfamily_harness.so and --fixtures), dot "
                             "(gluon_sparse_dot's kernels against NumPy)")
    parser.add_argument("--fixtures", default=None,
                        help="folder of the family's fixtures (default "
                             "benchmarks/gpu/build/fixtures, written by make_family_fixtures.py)")
    return parser


def parse_args(argv=None):
    """Parse ``argv``, apply ``--quick`` and check the timings' sizes before any work.

    ``--quick`` caps ``--rows`` at 100,000 and ``--repeat`` at 10, and uses the
    gaps 0 and 100 unless ``--gaps`` is given. The deferred timings need
    (repeat + 2) x grad_rows distinct rows; a weight with fewer is refused here
    rather than after the correctness checks.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.quick:
        args.rows = min(args.rows, QUICK_ROWS)
        args.repeat = min(args.repeat, QUICK_REPEAT)
    if args.gaps is None:
        args.gaps = list(QUICK_GAPS if args.quick else DEFAULT_GAPS)
    args.only = sorted(set(args.only or PARTS), key=PARTS.index)
    needed = deferred_step_calls(args.repeat) * args.grad_rows
    if "family" in args.only:
        family_calls = deferred_step_calls(min(args.repeat, FAMILY_REPEAT))
        needed = max(needed, family_calls * args.grad_rows)
    if not args.skip_benchmark and needed > args.rows:
        parser.error("the timed deferred steps need (repeat + 2) x grad-rows = %d distinct rows, "
                     "more than --rows %d: lower --repeat or --grad-rows, or raise --rows"
                     % (needed, args.rows))
    return args


def run_each(parts):
    """Run each ``(name, callable)`` of ``parts``, going on past a failure.

    A failed check or timing is reported with its traceback, and the ones after
    it still run, so that one run on a lent GPU shows every failure at once.

    Returns
    -------
    list of str
        The names of the parts that raised.
    """
    failed = []
    for name, part in parts:
        try:
            part()
        except Exception:  # noqa: BLE001 - reported, and the run fails at its end
            traceback.print_exc()
            print("FAILED  %s" % name, flush=True)
            failed.append(name)
    return failed


def adam_parts(args, torch):
    """The standard-Adam checks and timings (libadam_harness.so)."""
    from . import cases, checks, timing
    from .bindings import AdamKernels, load_library
    lib = load_library(args.rebuild)
    kernels = AdamKernels(lib, torch)
    parts = []
    if not args.skip_correctness:
        parts.append(("eager correctness", lambda: checks.check_eager_correctness(kernels, torch)))
        parts.extend(("deferred correctness, case %d" % case,
                      lambda case=case, spec=spec: checks.check_deferred_case(
                          lib, kernels, torch, case, *spec))
                     for case, spec in enumerate(cases.DEFERRED_CASES))
        parts.append(("deferred rejections", lambda: checks.check_deferred_rejections(lib, torch)))
    if not args.skip_benchmark:
        parts.append(("eager timing", lambda: timing.benchmark_eager(
            kernels, torch, args.rows, args.cols, args.repeat)))
        parts.append(("deferred timing", lambda: timing.benchmark_deferred(
            lib, kernels, torch, args.rows, args.cols, args.grad_rows, args.gaps, args.repeat)))
    return parts


def family_parts(args, torch, lib):
    """The optimizer family's checks (one part per fixture) and its timing table."""
    from . import family
    paths = family.fixture_paths(args.fixtures or family.FIXTURE_DIR)
    parts = []
    if not args.skip_correctness:
        for path in paths:
            name = os.path.basename(path)[:-len(".npz")]
            parts.append(("family %s" % name, lambda p=path: family.check_family_case(
                lib, torch, p)))
            parts.append(("family %s vector path" % name,
                          lambda p=path: family.check_vector_path(lib, torch, p)))
            parts.append(("family %s rejections" % name,
                          lambda p=path: family.check_family_rejections(lib, torch, p)))
    if not args.skip_benchmark:
        parts.append(("family timing", lambda: family.benchmark_family(
            lib, torch, paths, args.rows, args.cols, args.grad_rows,
            min(args.repeat, FAMILY_REPEAT))))
    return parts


def dot_parts(args, torch, lib):
    """gluon_sparse_dot's checks and its timing table."""
    from . import dot
    from .family_bindings import DotKernels
    kernels = DotKernels(lib, torch)
    parts = []
    if not args.skip_correctness:
        parts.append(("dot correctness", lambda: dot.check_dot_correctness(kernels, torch)))
    if not args.skip_benchmark:
        parts.append(("dot timing", lambda: dot.benchmark_dot(
            kernels, torch, args.rows, DOT_SHAPE["units"], DOT_SHAPE["batch"],
            DOT_SHAPE["per_row"], args.repeat)))
    return parts


def main(argv=None):
    """Run the chosen parts (each its correctness checks, then its timings), as the
    arguments say.

    A part that cannot even be set up (a library that does not build, missing
    fixtures) fails alone; exits with status 1, naming them, when any check,
    timing or set-up failed.
    """
    args = parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        sys.exit("run_harness.py needs a CUDA GPU and PyTorch built with CUDA")
    parts, family_lib = [], []

    def setup(name, make):
        def run():
            parts.extend(make())
        return ("set-up of " + name, run)

    def family_library():
        if not family_lib:
            from .family_bindings import load_family_library
            family_lib.append(load_family_library(args.rebuild))
        return family_lib[0]
    makers = {"adam": lambda: adam_parts(args, torch),
              "family": lambda: family_parts(args, torch, family_library()),
              "dot": lambda: dot_parts(args, torch, family_library())}
    failed = run_each([setup(name, makers[name]) for name in args.only])
    failed += run_each(parts)
    if failed:
        sys.exit("failed: " + ", ".join(failed))
