"""Import-time checks for the platform gluon-sparse runs on.

MXNet 1.9.1 fails inside ``import mxnet`` with numpy >= 1.24 (it uses the
removed aliases ``np.bool`` / ``np.object``), which surfaces as a confusing
AttributeError deep in MXNet. Check first and say what to install instead.
"""

_NUMPY_PIN = "numpy>=1.21,<1.24"
_NUMPY_FIX = "pip install '%s'" % _NUMPY_PIN
# Known pins that keep a package on releases accepting numpy < 1.24.
_COMPATIBLE_PINS = {"matplotlib": "matplotlib>=3.9,<3.11", "contourpy": "contourpy<1.3.3",
                    "scipy": "scipy>=1.9,<1.14", "scikit-learn": "scikit-learn>=1.3,<1.8",
                    "pandas": "pandas>=2.0,<2.3"}
_MXNET_FIX = ("pip install 'gluon-sparse[cpu]' (CPU, mxnet==1.9.1) or "
              "pip install 'gluon-sparse[cu112]' (CUDA 11.2, mxnet-cu112==1.9.1)")


def _version_tuple(version):
    parts = []
    for piece in version.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _numpy_dependents():
    """Installed distributions whose own requirements reject numpy < 1.24 (best effort)."""
    try:
        from importlib import metadata

        from packaging.requirements import Requirement
    except ImportError:
        return []
    names = set()
    for dist in metadata.distributions():
        for text in dist.requires or ():
            try:
                requirement = Requirement(text)
            except ValueError:
                continue
            if (requirement.name.lower() == "numpy" and not requirement.marker
                    and requirement.specifier and not requirement.specifier.contains("1.23.5")):
                names.add(dist.metadata["Name"])
    return sorted(names, key=str.lower)


def _numpy_fix():
    """The pip command that downgrades numpy without breaking what needs a newer one.

    A bare ``pip install 'numpy<1.24'`` would leave packages that require a
    newer numpy (matplotlib 3.11 requires >= 1.25) broken; installing them in
    the same command lets pip choose releases of them that accept numpy 1.23.
    """
    dependents = _numpy_dependents()
    if not dependents:
        return _NUMPY_FIX
    pins = [_COMPATIBLE_PINS.get(name.lower(), name) for name in dependents]
    return ("pip install '%s' %s (the same command pins %s, which need a newer numpy, to "
            "releases that accept it)" % (_NUMPY_PIN, " ".join("'%s'" % pin for pin in pins),
                                          ", ".join(dependents)))


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
            % (numpy.__version__, _numpy_fix()))
    try:
        import mxnet
    except ImportError as err:
        raise ImportError("gluon-sparse needs MXNet 1.9.1, which is not installed. Fix: %s"
                          % _MXNET_FIX) from err
    except AttributeError as err:  # numpy incompatibility not caught above
        raise ImportError("MXNet failed to import (%s); it needs numpy < 1.24. Fix: %s"
                          % (err, _numpy_fix())) from err
    if _version_tuple(mxnet.__version__)[:2] != (1, 9):
        raise ImportError("gluon-sparse is built for MXNet 1.9.x, found %s. Fix: %s"
                          % (mxnet.__version__, _MXNET_FIX))
    return mxnet
