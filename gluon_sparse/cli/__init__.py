"""The ``gluon-sparse`` command line (also ``python -m gluon_sparse``).

``gluon-sparse train [DATA ...] --model-dir DIR``
    Train a SparseMLP on LibSVM files (or, with no DATA, on the in-memory
    reference dataset), print per-epoch metrics on held-out data and a closing
    summary line, and write the model directory atomically. The index base the
    training files were read with (``--zero-based``, 'auto' by default) is
    saved with the model.
``gluon-sparse predict DATA --model-dir DIR --out FILE``
    One prediction a line.
``gluon-sparse evaluate DATA --model-dir DIR``
    Accuracy / AUC / log-loss (classification) or MSE / R^2 (regression).
``gluon-sparse launch ...``
    Start a distributed job (see :mod:`gluon_sparse.distributed.launcher`).

predict, evaluate and ``train --test`` read their file with the training
files' index base, never with 'auto' afresh: column j means one feature. Its
features beyond the model's width, which the training never saw, are ignored
with one warning, as LIBLINEAR's predict ignores them.

Every check that can fail (flags, files readable, the model directory usable)
runs before the first epoch. Bad input ends with exit status 2 and one line on
stderr naming the problem; Ctrl-C ends with 130 and leaves no half-written
model or output file.

The package is split by concern: ``_arguments`` (argument types),
``_parser`` (the argparse tree), ``_files`` (reading LibSVM files, checking
paths and sizes, writing output), ``_metrics``, ``_train`` (the train
command), ``_epochs`` (its epoch loop and early stopping), ``_multilabel``
(train, predict and evaluate of multi-label models), ``_commands`` (predict,
evaluate, launch) and ``_main`` (the entry point and its error handling).
"""
from ._main import main
from ._parser import build_parser

__all__ = ["main", "build_parser"]
