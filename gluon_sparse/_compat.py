"""Import-time checks for the platform gluon-sparse runs on.

MXNet 1.9.1 fails inside ``import mxnet`` with numpy >= 1.24 (it uses the
removed aliases ``np.bool`` / ``np.object``), which surfaces as a confusing
AttributeError deep in MXNet. Check first and say what to install instead.
"""

_NUMPY_FIX = "pip install 'numpy>=1.21,<1.24'"
_MXNET_FIX = ("pip install 'gluon-sparse[cpu]' (CPU, mxnet==1.9.1) or "
              "pip install 'gluon-sparse[cu112]' (CUDA 11.2, mxnet-cu112==1.9.1)")


def _version_tuple(version):
    parts = []
    for piece in version.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def import_mxnet():
    """Import and return :mod:`mxnet`, or raise ImportError naming the fix."""
    try:
        import numpy
    except ImportError as err:
        raise ImportError("gluon-sparse needs numpy < 1.24: %s" % _NUMPY_FIX) from err
    if _version_tuple(numpy.__version__) >= (1, 24):
        raise ImportError(
            "gluon-sparse needs MXNet 1.9.1, which cannot be imported with numpy %s "
            "(numpy >= 1.24 removed aliases MXNet uses). Fix: %s"
            % (numpy.__version__, _NUMPY_FIX))
    try:
        import mxnet
    except ImportError as err:
        raise ImportError("gluon-sparse needs MXNet 1.9.1, which is not installed. Fix: %s"
                          % _MXNET_FIX) from err
    except AttributeError as err:  # numpy incompatibility not caught above
        raise ImportError("MXNet failed to import (%s); it needs numpy < 1.24. Fix: %s"
                          % (err, _NUMPY_FIX)) from err
    if _version_tuple(mxnet.__version__)[:2] != (1, 9):
        raise ImportError("gluon-sparse is built for MXNet 1.9.x, found %s. Fix: %s"
                          % (mxnet.__version__, _MXNET_FIX))
    return mxnet
