"""Optimizers for very wide models with row_sparse gradients.

Importing this package registers every optimizer in MXNet's registry, so that
``mx.optimizer.create('sparseadam')``, ``gluon.Trainer(params, 'sparseadam')``
and ``Module.init_optimizer(optimizer='sparseadam')`` find them.
"""
from . import deferred
from .deferred import flush
from .sparse_adam import SparseAdam

__all__ = ["SparseAdam", "flush", "deferred"]
