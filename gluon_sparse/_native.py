"""Locate and load gluon-sparse's native libraries.

``libgluon_sparse_ops.so`` is an MXNet operator library (loaded once with
``mx.library.load``); ``libgluon_sparse_io.so`` is a plain C library (loaded
with ctypes). Both are compiled by ``pip install`` (see setup.py). Every
failure here is turned into an ImportError/RuntimeError that says how to fix
it, since a library built for another MXNet could otherwise crash the process.
"""
import ctypes
import logging
import os
import threading

logger = logging.getLogger(__name__)

LIB_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")
OPS_LIBRARY = os.path.join(LIB_DIR, "libgluon_sparse_ops.so")
IO_LIBRARY = os.path.join(LIB_DIR, "libgluon_sparse_io.so")

_REBUILD_HINT = (
    "Rebuild it: `pip install --force-reinstall --no-cache-dir gluon-sparse` for an "
    "installed package, or `python setup.py build_ext --inplace` in a source checkout "
    "(needs g++ with OpenMP; nvcc optional for the CUDA kernels).")

_lock = threading.Lock()
_ops_loaded = False
_io_lib = None


PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _installed_copies():
    """Other gluon_sparse packages on sys.path that do hold the built library."""
    import sys
    found = []
    for entry in sys.path:
        candidate = os.path.join(os.path.abspath(entry or os.curdir), "gluon_sparse")
        if (os.path.realpath(candidate) != os.path.realpath(PACKAGE_DIR)
                and os.path.exists(os.path.join(candidate, "lib", os.path.basename(OPS_LIBRARY)))):
            found.append(candidate)
    return found


def _missing(path):
    """The ImportError for a missing native library, saying why and what to do.

    A source checkout imported instead of the installed package (Python puts
    the current directory first on sys.path, so running it from the repository
    root after a non-editable ``pip install .`` does that) is the usual cause,
    and is named as such.
    """
    root = os.path.dirname(PACKAGE_DIR)
    if os.path.exists(os.path.join(root, "setup.py")):
        installed = _installed_copies()
        where = (" The installed package is at %s." % installed[0]) if installed else ""
        return ImportError(
            "gluon-sparse's native library %s is missing: you are importing the source tree "
            "at %s (Python looks first in the directory of the script it runs, or in the "
            "current directory for -c and the interactive prompt), whose libraries were not "
            "built.%s Run Python, and keep your scripts, outside %s to use the installed "
            "package, or build this tree in place: `cd %s && python setup.py build_ext "
            "--inplace` (or `pip install -e .`)." % (path, PACKAGE_DIR, where, root, root))
    return ImportError("gluon-sparse's native library %s is missing: it was not built. %s"
                       % (path, _REBUILD_HINT))


def build_info():
    """Return what the operator library was built with.

    Returns
    -------
    dict
        ``{'mxnet_version': str, 'cuda': bool, 'omp_threads': int, 'grain': int,
        'path': str}``; ``omp_threads`` is the largest team the CPU operators
        use (``MXNET_OMP_MAX_THREADS``, else ``OMP_NUM_THREADS``, else every
        CPU of the process's affinity mask) and ``grain`` the work (element
        operations) per thread below which a kernel stays serial.
    """
    if not os.path.exists(OPS_LIBRARY):
        raise _missing(OPS_LIBRARY)
    # RTLD_LOCAL handle used only to read the build stamp; MXNet maps its own.
    lib = ctypes.CDLL(OPS_LIBRARY)
    lib.gluon_sparse_build_mxnet_version.restype = ctypes.c_char_p
    lib.gluon_sparse_grain.restype = ctypes.c_int64
    return {"mxnet_version": lib.gluon_sparse_build_mxnet_version().decode(),
            "cuda": bool(lib.gluon_sparse_built_with_cuda()),
            "omp_threads": int(lib.gluon_sparse_omp_threads()),
            "grain": int(lib.gluon_sparse_grain()),
            "path": OPS_LIBRARY}


def _set_parallelism(grain=0, threads=0):
    """Force the CPU kernels' grain and largest team (0: the defaults). For tests only.

    ``grain=1, threads=2`` runs every kernel with two or more items on two
    threads; a huge grain runs every kernel serially. Results must not change.
    """
    load_ops()
    lib = ctypes.CDLL(OPS_LIBRARY)  # the instance MXNet loaded (same path)
    lib.gluon_sparse_set_parallelism.argtypes = [ctypes.c_int64, ctypes.c_int]
    lib.gluon_sparse_set_parallelism(int(grain), int(threads))


def _force_simd_path(path=-1):
    """Force the build the host SIMD kernels take (host_simd.h). For tests only.

    Deferred Adam's replay (its full steps and its frozen-row decay) is
    compiled for baseline x86-64 and for AVX2, its full steps also for AVX-512.
    0: the baseline build, 1: the AVX2 build, 2: the AVX-512 build of the full
    steps with AVX2 elsewhere (a build the CPU lacks falls back to the next one
    down), -1: picked by the CPU (the default). Results must not change.
    """
    load_ops()
    lib = ctypes.CDLL(OPS_LIBRARY)  # the instance MXNet loaded (same path)
    lib.gluon_sparse_force_simd_path.argtypes = [ctypes.c_int]
    lib.gluon_sparse_force_simd_path(int(path))


def _checked_sqrt_errors(first, vectors):
    """Run the AVX-512 replay's checked square root (checked_sqrt.h) over float bit patterns.

    Covers ``16 * vectors`` consecutive patterns from ``first`` (wrapping at
    2^32). Returns ``(wrong, accepted)``: the lanes whose fast root the exact
    test accepted although it is not bitwise the hardware's (must be 0), and the
    lanes it accepted; ``None`` on a CPU or build without AVX-512. For tests only.
    """
    load_ops()
    lib = ctypes.CDLL(OPS_LIBRARY)
    lib.gluon_sparse_checked_sqrt_errors.restype = ctypes.c_int64
    lib.gluon_sparse_checked_sqrt_errors.argtypes = [ctypes.c_uint32, ctypes.c_int64,
                                                     ctypes.POINTER(ctypes.c_int64)]
    accepted = ctypes.c_int64(0)
    wrong = lib.gluon_sparse_checked_sqrt_errors(int(first) & 0xFFFFFFFF, int(vectors),
                                                 ctypes.byref(accepted))
    return None if wrong < 0 else (int(wrong), int(accepted.value))


def _decay_geometric(x, b, n, path=-1):
    """``x = float32(b) * x``, ``n`` times, in place, through the replay's kernel. For tests only.

    Returns the path taken (0 baseline, 1 AVX2); ``x`` must be a C-contiguous
    float32 NumPy array.
    """
    import numpy as np
    if x.dtype != np.float32 or not x.flags.c_contiguous:
        raise ValueError("x must be a C-contiguous float32 array")
    load_ops()
    lib = ctypes.CDLL(OPS_LIBRARY)
    lib.gluon_sparse_decay_geometric.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_float,
                                                 ctypes.c_int64, ctypes.c_int]
    return int(lib.gluon_sparse_decay_geometric(x.size, x.ctypes.data, float(b), int(n),
                                                 int(path)))


def _adam_steps_until_frozen(w, m, v, beta1, beta2, epsilon, max_lr, n):
    """Deferred Adam's freezing test for one row (adam_deferred_kernels.h). For tests only.

    Returns 0 when no step of the ``n`` to come (no gradient, no weight decay,
    learning rates of at most ``max_lr``) can change a bit of ``w``, otherwise
    how many full steps to replay before asking again. ``w``, ``m``, ``v``:
    C-contiguous float32 NumPy arrays of one size.
    """
    import numpy as np
    arrays = (w, m, v)
    if any(a.dtype != np.float32 or not a.flags.c_contiguous or a.size != w.size
           for a in arrays):
        raise ValueError("w, m and v must be C-contiguous float32 arrays of one size")
    load_ops()
    lib = ctypes.CDLL(OPS_LIBRARY)
    fn = lib.gluon_sparse_adam_steps_until_frozen
    fn.argtypes = [ctypes.c_int64] + [ctypes.c_void_p] * 3 + [ctypes.c_float] * 4 + [ctypes.c_int64]
    fn.restype = ctypes.c_int64
    return int(fn(w.size, w.ctypes.data, m.ctypes.data, v.ctypes.data, float(beta1),
                  float(beta2), float(epsilon), float(max_lr), int(n)))


def _parallel_fill(n, chunk, team, item_micros=0):
    """Run ``out[i] += i + 1`` for ``i < n`` on the worker pool. For tests only.

    ``chunk`` 0 splits [0, n) into one block per thread (parallel_blocks),
    ``chunk`` > 0 hands out that many items at a time (parallel_dynamic), on
    a team of ``team`` threads; each item also spins for ``item_micros``
    microseconds (time for the pool's workers to wake and take part). Returns ``(out, threads)``: the int64 array
    (every item run exactly once gives ``arange(n) + 1``) and how many
    threads ran items.
    """
    import numpy as np
    load_ops()
    out = np.zeros(int(n), np.int64)
    lib = ctypes.CDLL(OPS_LIBRARY)
    lib.gluon_sparse_parallel_fill.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_int,
                                               ctypes.c_int64, ctypes.c_void_p]
    threads = lib.gluon_sparse_parallel_fill(int(n), int(chunk), int(team), int(item_micros),
                                             out.ctypes.data)
    return out, int(threads)


def load_ops():
    """Load the operator library into MXNet once; later calls are free.

    Raises
    ------
    ImportError
        If the library is missing or was built for a different MXNet version.
    """
    global _ops_loaded
    if _ops_loaded:
        return
    with _lock:
        if _ops_loaded:
            return
        import mxnet as mx
        built_for = build_info()["mxnet_version"]
        if built_for != mx.__version__:
            raise ImportError("gluon-sparse's operator library was built for MXNet %s but MXNet %s "
                              "is installed. %s" % (built_for, mx.__version__, _REBUILD_HINT))
        try:
            mx.library.load(OPS_LIBRARY, verbose=False)
        except mx.base.MXNetError as err:
            raise ImportError("MXNet could not load gluon-sparse's operator library %s: %s\n%s"
                              % (OPS_LIBRARY, err, _REBUILD_HINT)) from err
        _ops_loaded = True
        logger.debug("loaded operator library %s", OPS_LIBRARY)


def io_library():
    """Return the ctypes handle of the C I/O library (the LibSVM parser)."""
    global _io_lib
    if _io_lib is None:
        with _lock:
            if _io_lib is None:
                if not os.path.exists(IO_LIBRARY):
                    raise _missing(IO_LIBRARY)
                _io_lib = ctypes.CDLL(IO_LIBRARY)
    return _io_lib
