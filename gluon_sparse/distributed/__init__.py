"""Training on several devices and several machines with MXNet's kvstore.

* :func:`split_and_load_batch` splits a CSR batch and its labels across the
  devices of one machine (uneven splits included); :func:`part_sizes` tells
  how many rows each part (device, or worker of a global batch) gets, and
  :func:`steps_per_epoch` how many steps every worker of a synchronous job
  must run (the same count on each, or the job waits forever).
* :func:`check_dist_params` refuses, with a clear message, layers that
  MXNet 1.9.1's ``dist_*`` kvstore cannot train (dense weight, row_sparse
  gradient: its server aborts).
* :mod:`~gluon_sparse.distributed.launcher` starts the scheduler, servers and
  workers of a ``dist_sync`` / ``dist_async`` job (``gluon-sparse launch``).
* :mod:`~gluon_sparse.distributed.server` is what the scheduler and the
  servers run.
* :class:`KVStoreTraffic` counts the bytes a kvstore's pushes and pulls move.

The communication itself is MXNet's: ``gluon.Trainer`` with a ``'device'`` or
``'dist_*'`` kvstore pushes only the rows of ``row_sparse`` gradients, and
:class:`~gluon_sparse.nn.row_sparse_weight.FullyConnectedSparseRowSparseWeight`
pulls only the weight rows a batch touches;
:class:`~gluon_sparse.nn.SampledOutputRowSparseWeight` pulls only the rows of
a batch's candidate labels of a huge output layer.
"""
from .checks import check_dist_params
from .split import part_sizes, split_and_load_batch, steps_per_epoch
from .traffic import KVStoreTraffic

__all__ = ["KVStoreTraffic", "check_dist_params", "part_sizes", "split_and_load_batch",
           "steps_per_epoch"]
