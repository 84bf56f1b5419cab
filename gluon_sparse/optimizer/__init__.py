"""Optimizers for very wide models with row_sparse gradients.

Importing this package registers every optimizer in MXNet's registry, so that
``mx.optimizer.create('sparseadam')``, ``gluon.Trainer(params, 'sparsesgd')``
and ``Module.init_optimizer(optimizer='sparseadam')`` find them. Every one
takes ``deferred=True`` (exact deferred updates, :mod:`._family`);
:func:`supports_deferred` tells whether a registered name does.
"""
from . import deferred
from ._family import Rule, SparseRuleMixin, family_names, supports_deferred
from .deferred import flush
from .sparse_adagrad import SparseAdaGrad
from .sparse_adam import SparseAdam
from .sparse_adamax import SparseAdamax
from .sparse_ftrl import SparseFtrl
from .sparse_nadam import SparseNadam
from .sparse_nag import SparseNAG
from .sparse_rmsprop import SparseRMSProp
from .sparse_sgd import SparseSGD

__all__ = ["Rule", "SparseAdaGrad", "SparseAdam", "SparseAdamax", "SparseFtrl", "SparseNAG",
           "SparseNadam", "SparseRMSProp", "SparseRuleMixin", "SparseSGD", "deferred", "family_names",
           "flush", "supports_deferred"]
