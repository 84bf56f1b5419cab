"""Data pipeline for sparse, wide data: LibSVM parsing, datasets, samplers,
CSR batch assembly, a background prefetcher, loaders and a streaming reader.

Data flows file -> :func:`load_libsvm` / :class:`LibSVMDataset` ->
:class:`SparseDataLoader` (sampler -> batchify -> prefetcher) -> ``(CSRNDArray,
NDArray)`` batches; :class:`LibSVMStream` does the same chunk by chunk for
files larger than memory, and :class:`SparseNDArrayIter` serves the Module API.
:func:`make_reference_dataset` generates the project's synthetic reference data.
"""
from .batchify import CSRBatchify, csr_to_ndarray
from .dataiter import SparseNDArrayIter
from .dataset import CSRDataset, LibSVMDataset
from .libsvm import load_libsvm, locate_row
from .loader import SparseDataLoader
from .multilabel import MultiLabelDataset, MultiLabelLoader, load_multilabel
from .prefetch import Prefetcher
from .sampler import BatchSampler, PartitionSampler
from .stream import LibSVMStream
from .synthetic import make_reference_dataset

__all__ = ["load_libsvm", "locate_row", "LibSVMDataset", "CSRDataset", "SparseDataLoader", "SparseNDArrayIter",
           "LibSVMStream", "Prefetcher", "PartitionSampler", "BatchSampler", "CSRBatchify",
           "csr_to_ndarray", "make_reference_dataset", "load_multilabel", "MultiLabelDataset",
           "MultiLabelLoader"]
