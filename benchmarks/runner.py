"""Shared helpers for the benchmark scripts: timing, machine description, a
printed table and a JSON record of every run.

Every benchmark times its candidates *and* their baseline in the same process
and reports ratios, so figures from a loaded or different machine stay
comparable.
"""
import json
import logging
import os
import platform
import time

logger = logging.getLogger("gluon_sparse.benchmarks")

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def machine():
    """A short description of the machine the figures come from."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
    except (ValueError, OSError):
        mem_gib = float("nan")
    import mxnet as mx
    import numpy as np
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem_gib, 1),
            "python": platform.python_version(), "mxnet": mx.__version__, "numpy": np.__version__}


def available_bytes():
    """Memory available to new allocations (Linux's MemAvailable); inf where unknown."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return float("inf")


def time_call(fn, repeat=3, warmup=1, number=1, sync=None):
    """Time ``fn`` and return a dict with the min, median and all times in seconds.

    Parameters
    ----------
    fn : callable
        Work to time (called ``number`` times per measurement).
    repeat : int
        Number of measurements.
    warmup : int
        Calls made before timing (caches, lazy initialisation, JIT).
    number : int
        Calls per measurement; the reported time is per call.
    sync : callable, optional
        Called after each measurement's calls, inside the timed region, to wait
        for asynchronous work (``mx.nd.waitall``).
    """
    for _ in range(warmup):
        fn()
    if sync is not None:
        sync()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        if sync is not None:
            sync()
        times.append((time.perf_counter() - start) / number)
    ordered = sorted(times)
    return {"min": ordered[0], "median": ordered[len(ordered) // 2], "times": times}


def format_seconds(seconds):
    if seconds >= 1:
        return "%.2f s" % seconds
    if seconds >= 1e-3:
        return "%.2f ms" % (seconds * 1e3)
    return "%.1f us" % (seconds * 1e6)


class Table:
    """Rows of results printed as a Markdown table and saved as JSON.

    Parameters
    ----------
    name : str
        Benchmark name; the JSON goes to ``benchmarks/results/<name>.json``.
    columns : list of str
        Column names, in order.
    """

    def __init__(self, name, columns):
        self.name = name
        self.columns = list(columns)
        self.rows = []
        self.meta = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M:%S")}

    def add(self, **row):
        missing = set(self.columns) - set(row)
        if missing:
            raise ValueError("row lacks columns %s" % sorted(missing))
        self.rows.append(row)
        logger.info("%s", row)

    def markdown(self):
        def cell(value):
            if isinstance(value, float):
                return "%.4g" % value
            return str(value)
        lines = ["| " + " | ".join(self.columns) + " |",
                 "|" + "|".join("---" for _ in self.columns) + "|"]
        for row in self.rows:
            lines.append("| " + " | ".join(cell(row[c]) for c in self.columns) + " |")
        return "\n".join(lines)

    def save(self, directory=RESULTS_DIR):
        """Print the table with the machine and write ``<directory>/<name>.json``."""
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, self.name + ".json")
        with open(path, "w") as f:
            json.dump({"meta": self.meta, "columns": self.columns, "rows": self.rows}, f, indent=1)
        m = self.meta["machine"]
        print("## %s (%s, %s cores, %s GiB, MXNet %s)\n" % (
            self.name, m["cpu"], m["cores"], m["memory_gib"], m["mxnet"]))
        print(self.markdown())
        print("\nsaved %s" % path)
        return path
