"""What bounds the replay of full Adam steps: the square root and the division.

Compiles ``benchmarks/native/replay_bound.cc`` (g++, AVX2 + AVX-512) and runs
its loop: the full step deferred Adam replays for a row whose weights still
move, over rows of 1,024 columns, 20 steps a row, one thread, in six variants
(the source's comment lists them). Prints the median nanoseconds per
element-step of three rounds and each variant's ratio to the library's 8-lane
build (variant 5 is the library's AVX-512 build, with its own checked_sqrt.h).
Skipped, with a message, without g++ or on a CPU without AVX-512.

Run: ``python benchmarks/bench_replay_bound.py``
"""
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.runner import Table  # noqa: E402

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native", "replay_bound.cc")
OPS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gluon_sparse",
                       "csrc", "ops")
VARIANTS = {
    0: "8 lanes (the library's AVX2 build): sqrt + division",
    1: "16 lanes (AVX-512): sqrt + division",
    2: "16 lanes: sqrt from vrsqrt14 + Newton + 1-ulp correction (FMA ports), division",
    3: "16 lanes: sqrt, multiplication instead of division",
    4: "16 lanes: neither (v for sqrt(v), multiplication)",
    5: "16 lanes, one vector in two with the library's checked sqrt (FMA ports, exact)",
}


def _cpu_has_avx512():
    try:
        with open("/proc/cpuinfo") as f:
            return " avx512f" in f.read()
    except OSError:
        return False


def main():
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    compiler = shutil.which("g++")
    if compiler is None or not _cpu_has_avx512():
        print("skipped: needs g++ and a CPU with AVX-512 (avx512f)")
        return
    with tempfile.TemporaryDirectory() as work:
        binary = os.path.join(work, "replay_bound")
        # -ffp-contract=off: no fused multiply-adds outside the variant that asks for
        # them, as in the library's exact kernels.
        subprocess.run([compiler, "-O3", "-mavx2", "-mavx512f", "-mfma", "-ffp-contract=off",
                        "-Wno-maybe-uninitialized", "-Wno-psabi", "-I", OPS_DIR, SOURCE, "-o",
                        binary], check=True)
        out = subprocess.run([binary], check=True, capture_output=True, text=True).stdout
    samples = {v: [] for v in VARIANTS}
    for line in out.split("\n"):
        if line.strip():
            variant, ns = line.split()
            samples[int(variant)].append(float(ns))
    base = statistics.median(samples[0])
    table = Table("replay_bound", ["variant", "ns per element-step", "vs 8-lane build"])
    for variant, label in VARIANTS.items():
        ns = statistics.median(samples[variant])
        table.add(**{"variant": label, "ns per element-step": ns, "vs 8-lane build": ns / base})
    table.save()


if __name__ == "__main__":
    main()
