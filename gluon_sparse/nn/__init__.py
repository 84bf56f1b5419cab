"""Gluon blocks for CSR input with row_sparse weight gradients, and sampled output layers."""
from .basic_layers import FactorizationMachine, FullyConnectedSparse
from .checkpoint import load_compact_parameters, save_compact_parameters
from .row_sparse_output import SampledOutputRowSparseWeight
from .row_sparse_weight import FullyConnectedSparseRowSparseWeight
from .sparse_output import SampledOutput
from .topk import top_k_scores

__all__ = ["FullyConnectedSparse", "FactorizationMachine", "FullyConnectedSparseRowSparseWeight",
           "SampledOutput", "SampledOutputRowSparseWeight", "top_k_scores",
           "save_compact_parameters", "load_compact_parameters"]
