"""gluon-sparse: Gluon blocks, data loaders and exact fast optimizers for very
sparse, very wide data (LibSVM, CTR, text) on MXNet 1.9.1.

``gluon_sparse.sklearn`` and ``gluon_sparse.distributed`` are imported on
demand (they pull in scikit-learn and process management).
"""
from ._compat import import_mxnet as _import_mxnet

_import_mxnet()

from ._version import __version__  # noqa: E402
from . import _fork  # noqa: E402,F401  (forks wait for MXNet's engine without hanging)
from . import _worker_exit  # noqa: E402  (a dist worker that raised exits: its job can end)

_worker_exit.install()
from . import data, nn, optimizer  # noqa: E402  (optimizer registers 'sparseadam')

__all__ = ["__version__", "data", "nn", "optimizer"]
