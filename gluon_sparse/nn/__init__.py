"""Gluon blocks for CSR input with row_sparse weight gradients."""
from .basic_layers import FactorizationMachine, FullyConnectedSparse

__all__ = ["FullyConnectedSparse", "FactorizationMachine"]
