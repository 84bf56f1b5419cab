"""Gluon blocks for CSR input with row_sparse weight gradients."""
from .basic_layers import FactorizationMachine, FullyConnectedSparse
from .row_sparse_weight import FullyConnectedSparseRowSparseWeight

__all__ = ["FullyConnectedSparse", "FactorizationMachine", "FullyConnectedSparseRowSparseWeight"]
