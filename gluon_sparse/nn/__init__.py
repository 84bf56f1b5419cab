"""Gluon blocks for CSR input with row_sparse weight gradients."""
from .basic_layers import FactorizationMachine, FullyConnectedSparse
from .checkpoint import load_compact_parameters, save_compact_parameters
from .row_sparse_weight import FullyConnectedSparseRowSparseWeight

__all__ = ["FullyConnectedSparse", "FactorizationMachine", "FullyConnectedSparseRowSparseWeight",
           "save_compact_parameters", "load_compact_parameters"]
