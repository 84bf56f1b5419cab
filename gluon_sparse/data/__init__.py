"""Data pipeline for sparse, wide data: LibSVM parsing, datasets, samplers,
CSR batch assembly, a background prefetcher, loaders and a streaming reader.

Data flows file -> :func:`load_libsvm` / :class:`LibSVMDataset` ->
:class:`SparseDataLoader` (sampler -> batchify -> prefetcher) -> ``(CSRNDArray,
NDArray)`` batches; :class:`LibSVMStream` does the same chunk by chunk for
files larger than memory, and :class:`SparseNDArrayIter` serves the Module API.
"""
from .batchify import CSRBatchify, csr_to_ndarray
from .dataiter import SparseNDArrayIter
from .dataset import CSRDataset, LibSVMDataset
from .libsvm import load_libsvm, locate_row
from .loader import SparseDataLoader
from .prefetch import Prefetcher
from .sampler import BatchSampler, PartitionSampler
from .stream import LibSVMStream

__all__ = ["load_libsvm", "locate_row", "LibSVMDataset", "CSRDataset", "SparseDataLoader", "SparseNDArrayIter",
           "LibSVMStream", "Prefetcher", "PartitionSampler", "BatchSampler", "CSRBatchify",
           "csr_to_ndarray"]
