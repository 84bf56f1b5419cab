"""gluon-sparse: Gluon blocks, data loaders and exact fast optimizers for very
sparse, very wide data (LibSVM, CTR, text) on MXNet 1.9.1."""
from ._compat import import_mxnet as _import_mxnet

_import_mxnet()

from ._version import __version__  # noqa: E402
from . import nn  # noqa: E402

__all__ = ["__version__", "nn"]
