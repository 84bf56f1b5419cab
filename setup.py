"""Build script for gluon-sparse's native libraries.

Metadata lives in setup.cfg; this file exists only because two shared
libraries are compiled at install time:

``gluon_sparse/lib/libgluon_sparse_ops.so``
    The MXNet operator library (``gluon_sparse/csrc/ops/*.cc``, plus
    ``*.cu`` when ``nvcc`` is found), compiled against the *installed*
    MXNet's own ``lib_api.h`` / ``lib_api.cc`` and loaded at run time with
    ``mx.library.load``.
``gluon_sparse/lib/libgluon_sparse_io.so``
    Plain C ABI helpers (``gluon_sparse/csrc/io/*.cc``) loaded with ctypes,
    e.g. the parallel LibSVM parser. It does not depend on MXNet.

Neither is a Python extension module, so the compile and link steps are
spelled out here rather than left to distutils' extension machinery, which
would add Python include paths and ``PyInit_`` exports that have no place in
them.

Environment variables
---------------------
GLUON_SPARSE_CUDA
    ``0`` skips the CUDA sources even when ``nvcc`` is on the PATH; ``1``
    makes a missing ``nvcc`` an error. Default: build CUDA when found.
GLUON_SPARSE_CUDA_ARCHS
    Comma separated SM versions, default ``75,80,90`` (plus PTX for the
    highest), filtered by what the found ``nvcc`` supports.
GLUON_SPARSE_CXXFLAGS
    Extra flags for the C++ compiler (e.g. ``-march=native``).
"""
import glob
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join("gluon_sparse", "csrc")
DEFAULT_CUDA_ARCHS = "75,80,90"
NATIVE_LIBRARY_NAMES = ("libgluon_sparse_ops", "libgluon_sparse_io")


class NativeLibrary(Extension):
    """A plain shared library (not a Python module) built from C++/CUDA sources."""

    def __init__(self, name, source_dir, use_mxnet):
        self.source_dir = source_dir
        self.use_mxnet = use_mxnet
        super().__init__(name, sources=[])


def _mxnet_dir():
    """Locate the installed mxnet package *without importing it* (import needs numpy<1.24)."""
    spec = importlib.util.find_spec("mxnet")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "gluon-sparse's operator library is compiled against MXNet's lib_api.h, but "
            "mxnet is not installed in the build environment. Install it first "
            "(pip install 'mxnet==1.9.1' or 'mxnet-cu112==1.9.1') or build with "
            "build isolation enabled (the default), which installs it automatically.")
    return list(spec.submodule_search_locations)[0]


def _mxnet_version(mxnet_dir):
    with open(os.path.join(mxnet_dir, "libinfo.py")) as f:
        match = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", f.read())
    return match.group(1) if match else "unknown"


def _find_nvcc():
    if os.environ.get("GLUON_SPARSE_CUDA") == "0":
        return None
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
        candidate = os.path.join(cuda_home, "bin", "nvcc")
        nvcc = candidate if os.path.exists(candidate) else None
    if nvcc is None and os.environ.get("GLUON_SPARSE_CUDA") == "1":
        raise RuntimeError("GLUON_SPARSE_CUDA=1 but nvcc was not found (set CUDA_HOME or PATH)")
    return nvcc


def _cuda_lib_dir(nvcc):
    """The directory holding libcudart_static.a.

    ``nvcc`` may be a wrapper script outside the toolkit (e.g. /usr/local/bin/nvcc
    exec'ing /usr/local/cuda-13.0/bin/nvcc), so its own location is only one guess.
    """
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
             os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "/usr/local/cuda"]
    for home in filter(None, homes):
        for lib in ("lib64", os.path.join("targets", "x86_64-linux", "lib"), "lib"):
            if os.path.exists(os.path.join(home, lib, "libcudart_static.a")):
                return os.path.join(home, lib)
    raise RuntimeError("nvcc was found (%s) but not libcudart_static.a; set CUDA_HOME to the "
                       "CUDA toolkit, or GLUON_SPARSE_CUDA=0 to build without the CUDA kernels" % nvcc)


def _cuda_gencode_flags(nvcc):
    wanted = [a.strip() for a in os.environ.get("GLUON_SPARSE_CUDA_ARCHS", DEFAULT_CUDA_ARCHS).split(",")]
    supported = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True).stdout.split()
    supported = {s.split("_")[1] for s in supported if s.startswith("compute_")}
    archs = [a for a in wanted if a in supported]
    if not archs:
        raise RuntimeError("nvcc supports none of the requested architectures %s" % wanted)
    flags = []
    for arch in archs:
        flags += ["-gencode", "arch=compute_%s,code=sm_%s" % (arch, arch)]
    # PTX for the newest architecture so later GPUs can JIT the kernels.
    flags += ["-gencode", "arch=compute_%s,code=compute_%s" % (archs[-1], archs[-1])]
    return flags


def _run(cmd):
    print(" ".join(shlex.quote(c) for c in cmd))
    subprocess.check_call(cmd)


class BuildNative(build_ext):
    """Compile :class:`NativeLibrary` extensions with the system compilers."""

    def run(self):
        # The in-place copy (editable installs, --inplace) needs the folder, which
        # a fresh clone lacks: it holds nothing but build outputs, ignored by git.
        os.makedirs(os.path.join(HERE, "gluon_sparse", "lib"), exist_ok=True)
        super().run()

    def get_ext_filename(self, ext_name):
        # distutils passes either the dotted name or only its last component.
        if ext_name.split(".")[-1] in NATIVE_LIBRARY_NAMES:
            return os.path.join(*ext_name.split(".")) + ".so"
        return super().get_ext_filename(ext_name)

    def get_export_symbols(self, ext):
        return []

    def build_extension(self, ext):
        if not isinstance(ext, NativeLibrary):
            return super().build_extension(ext)
        sources = sorted(glob.glob(os.path.join(HERE, ext.source_dir, "*.cc")))
        if not sources:
            return
        out_path = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(out_path), exist_ok=True)
        obj_dir = os.path.join(self.build_temp, ext.name.replace(".", "_"))
        os.makedirs(obj_dir, exist_ok=True)

        cxx = os.environ.get("CXX") or sysconfig.get_config_var("CXX").split()[0] or "g++"
        if shutil.which(cxx) is None:
            raise RuntimeError(
                "gluon-sparse needs a C++17 compiler to build its native libraries and none "
                "was found (looked for %r). Install one (e.g. apt-get install g++) and "
                "reinstall gluon-sparse." % cxx)
        # -fno-math-errno: nothing here reads errno, and with GCC's default every
        # sqrt may set it, a side effect that keeps the optimizer rules' row loops
        # (optim_rows.h) scalar. Without it they vectorise; sqrtps is correctly
        # rounded per lane like sqrtss, so results stay bitwise the same.
        # -ffp-contract=off: GCC fuses a * b + c into one FMA (one rounding instead
        # of two) wherever the target has FMA, as the AVX-512 replay's functions do
        # (and -march=native builds); the kernels must round like MXNet's, twice.
        cxxflags = ["-O3", "-std=c++17", "-fPIC", "-fopenmp", "-fno-math-errno",
                    "-ffp-contract=off", "-Wall",
                    "-Wno-unused-function",
                    "-I", os.path.join(HERE, ext.source_dir), "-I", os.path.join(HERE, CSRC)]
        cxxflags += shlex.split(os.environ.get("GLUON_SPARSE_CXXFLAGS", ""))
        ldflags = ["-shared", "-fopenmp"]

        if ext.use_mxnet:
            mxnet_dir = _mxnet_dir()
            # lib_api.cc is compiled through csrc/ops/mxnet_lib_api.cc, which
            # renames the two functions error_messages.cc replaces.
            cxxflags += ["-I", os.path.join(mxnet_dir, "include"), "-I", os.path.join(mxnet_dir, "src")]
            # Recorded in the library (gluon_sparse_build_mxnet_version()) so that
            # loading it into another MXNet is refused before MXNet maps it.
            version = _mxnet_version(mxnet_dir)
            major, minor, patch = (int(re.match(r"\d+", p).group()) for p in version.split(".")[:3])
            cxxflags += ['-DGLUON_SPARSE_MXNET_VERSION="%s"' % version,
                         "-DGLUON_SPARSE_MXNET_VERSION_CODE=%d" % (major * 10000 + minor * 100 + patch)]
            cu_sources = sorted(glob.glob(os.path.join(HERE, ext.source_dir, "*.cu")))
            nvcc = _find_nvcc() if cu_sources else None
            if nvcc:
                gencode = _cuda_gencode_flags(nvcc)
                cxxflags.append("-DGLUON_SPARSE_WITH_CUDA=1")
                cuda_lib_dir = _cuda_lib_dir(nvcc)
                objects = []
                for src in cu_sources:
                    obj = os.path.join(obj_dir, os.path.basename(src) + ".o")
                    _run([nvcc, "-O3", "-std=c++17", "-Xcompiler", "-fPIC", "-c", src, "-o", obj,
                          "-I", os.path.join(HERE, ext.source_dir), "-I", os.path.join(HERE, CSRC)]
                         + gencode)
                    objects.append(obj)
                # Static cudart: the library then loads on machines without CUDA
                # (CPU-only MXNet); libcuda is only opened on the first GPU call.
                ldflags = objects + ["-L", cuda_lib_dir, "-lcudart_static",
                                     "-ldl", "-lrt", "-lpthread"] + ldflags

        objects = []
        for src in sources:
            obj = os.path.join(obj_dir, os.path.basename(src) + ".o")
            _run([cxx] + cxxflags + ["-c", src, "-o", obj])
            objects.append(obj)
        _run([cxx] + objects + ["-o", out_path] + ldflags)


def _native_libraries():
    """The native libraries that have sources (a library without any is not built)."""
    libraries = [
        NativeLibrary("gluon_sparse.lib.libgluon_sparse_ops", os.path.join(CSRC, "ops"), use_mxnet=True),
        NativeLibrary("gluon_sparse.lib.libgluon_sparse_io", os.path.join(CSRC, "io"), use_mxnet=False),
    ]
    return [lib for lib in libraries if glob.glob(os.path.join(HERE, lib.source_dir, "*.cc"))]


setup(
    ext_modules=_native_libraries(),
    cmdclass={"build_ext": BuildNative},
)
