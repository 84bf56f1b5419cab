"""Multi-label models on the command line: ``train --multilabel``, ``predict --top-k``,
``evaluate`` with precision@k and nDCG@k.

Files are multi-label LibSVM (``3,17,204 f:v ...``) or the extreme-classification
format (header ``num_rows num_features num_labels``); labels are integer ids. The
model is a :class:`~gluon_sparse.sklearn.SparseMultiLabelClassifier`: trained
here, its labels are the ids ``0 .. L-1``; trained in Python, any integer ids.
Evaluation compares the model's predicted labels with the file's label ids, and
a label the model never saw counts as a positive that no prediction hits (a
miss for precision@k, and in the ideal ranking of nDCG@k).
"""
import os
import sys
import time

import numpy as np

from . import _epochs, _files, _train
from ._errors import InputError
from ._parser import DEFAULT_NUM_SAMPLED

__all__ = ["train", "predict_top_k", "evaluate", "is_multilabel_model", "ranking_metrics"]

_KS = (1, 3, 5)
_DEFAULT_TOP_K = 5


def is_multilabel_model(model):
    """Whether ``model`` ranks labels (a SparseMultiLabelClassifier fitted on label sets)."""
    return hasattr(model, "predict_top_k") and getattr(model, "multilabel_", False)


def _load(paths, zero_based="auto", check_labels=True):
    from ..data import load_multilabel
    for path in paths:
        _files.check_readable(path)
    try:
        X, Y, zero_based = load_multilabel(paths if len(paths) > 1 else paths[0],
                                           zero_based=zero_based, allow_empty=True,
                                           return_zero_based=True, allow_nonfinite=False,
                                           check_labels=check_labels)
    except ValueError as err:
        raise InputError(str(err)) from None
    if X.shape[0] == 0:
        raise InputError("%s holds no samples" % ", ".join(map(str, paths)))
    return X, Y, zero_based


def _load_for_model(path, model, zero_based, check_labels=True):
    """``(X, Y)`` of a file for ``model`` (:func:`._files.load_for_model` with the multi-label
    reader); ``check_labels=False`` for predictions, which do not use the labels (Y is None)."""
    return _files.load_for_model(path, model, zero_based, check_labels, read=_load)


def _label_ids(model, labels):
    """Predicted labels as the integer label ids of the files (a model trained in Python
    may have other labels: they cannot be compared with a file's)."""
    from ..sklearn.multilabel import classes_are_label_ids
    classes = np.asarray(model.classes_)
    if not classes_are_label_ids(classes):
        example = next(c for c in classes.tolist() if not classes_are_label_ids(np.asarray([c])))
        raise InputError("the model's labels are not integer ids (e.g. %r): a multi-label "
                         "file's labels are ids, so they cannot be compared; score it in "
                         "Python" % (example,))
    return labels.astype(np.int64)


def ranking_metrics(model, X, Y):
    """``{'P@1': ..., 'P@3': ..., 'P@5': ..., 'nDCG@1': ..., ...}`` of ``model`` on ``(X, Y)``.

    ``Y``'s columns are label ids, all of a row's positives (those the model never saw
    too: no prediction hits them, and nDCG's ideal ranking counts them).
    """
    from ..nn.topk import ndcg_at_k, precision_at_k
    k = min(max(_KS), model.n_outputs_)
    labels, _ = model.predict_top_k(X, k)
    ids = _label_ids(model, labels)
    values = {}
    for metric, name in ((precision_at_k, "P"), (ndcg_at_k, "nDCG")):
        for kk in _KS:
            if kk <= k:
                values["%s@%d" % (name, kk)] = metric(Y, ids, kk)
    return values


def _format(values):
    return "  ".join("%s %.4f" % item for item in values.items())


def train(args):
    """``gluon-sparse train --multilabel``; returns the exit status."""
    from ..sklearn import SparseMultiLabelClassifier
    start = time.perf_counter()
    if not args.data:
        raise InputError("train --multilabel needs DATA: multi-label LibSVM or XC file(s)")
    if args.test and args.validation_fraction is not None:
        raise InputError("pass --test or --validation-fraction, not both")
    _train.check_optimizer(args)
    _epochs.check_early_stopping(args, bool(args.test) or args.validation_fraction != 0)
    num_sampled = DEFAULT_NUM_SAMPLED if args.num_sampled is None else args.num_sampled
    if args.task != "classification":
        raise InputError("--multilabel trains a classifier: --task %s does not apply" % args.task)
    if not args.hidden:
        raise InputError("--multilabel needs a hidden layer (the sampled output layer takes "
                         "its dense output); --hidden linear gives none")
    replacing = _files.check_model_dir(args.model_dir)
    X, Y, zero_based = _load(args.data, zero_based=args.zero_based)
    _files.check_has_features(X, args.data)
    _files.check_model_fits(args.data, X, args.hidden, zero_based, labels=Y)
    print("data: %s: %d samples x %d features, %d labels (%.2f a sample)"
          % (", ".join(args.data), X.shape[0], X.shape[1], Y.shape[1], Y.nnz / X.shape[0]))
    if args.test:
        X_test, Y_test, test_base = _load([args.test], zero_based=zero_based)
        _check_has_labels(Y_test, args.test, "--test")
        X_test = _files.to_model_width(X_test, X.shape[1], [args.test], test_base)
    else:
        fraction = 0.2 if args.validation_fraction is None else args.validation_fraction
        order = np.random.default_rng(args.seed).permutation(X.shape[0])
        n_test = int(round(fraction * X.shape[0]))
        if n_test >= X.shape[0]:
            raise InputError("--validation-fraction %g of %d samples leaves none to train on"
                             % (fraction, X.shape[0]))
        X_test, Y_test = (X[order[:n_test]], Y[order[:n_test]]) if n_test else (None, None)
        X, Y = X[order[n_test:]], Y[order[n_test:]]
    _epochs.check_early_stopping(args, X_test is not None)
    batch_size = _train.clipped_batch_size(args.batch_size, X.shape[0], X.shape[1])
    model = SparseMultiLabelClassifier(
        hidden_layer_sizes=args.hidden, num_sampled=num_sampled,
        batch_size=batch_size, learning_rate_init=args.lr,
        alpha=args.alpha, optimizer=args.optimizer,
        optimizer_params=_train.optimizer_params(args), ctx=args.ctx, random_state=args.seed)
    held_out = (args.test if args.test else "%d held-out training samples" % X_test.shape[0]
                if X_test is not None else "nothing (no held-out data)")
    print("model: SparseMultiLabelClassifier hidden=%s num_sampled=%d lr=%g batch=%d; metrics "
          "on %s" % (",".join(map(str, model.hidden_layer_sizes)), num_sampled, args.lr,
                     model.batch_size, held_out))
    if replacing:
        print("model-dir: %s holds a model; it will be replaced when training ends"
              % args.model_dir)
    evaluate = None
    if X_test is not None:
        def evaluate():
            return ranking_metrics(model, X_test, Y_test)
    values, epochs_run, kept = _epochs.run_epochs(
        args, model, lambda: model.partial_fit(X, Y), evaluate,
        _epochs.criterion("multilabel") if X_test is not None else None, _format)
    model.zero_based_ = zero_based
    _files.check_finite_weights(model)
    model.save(args.model_dir)
    print("summary: %s in %.1f s; %s; model written to %s"
          % (_epochs.describe(epochs_run, kept), time.perf_counter() - start, _format(values),
             os.path.abspath(args.model_dir)))
    return 0


def predict_top_k(args, model, zero_based):
    """``gluon-sparse predict --top-k K``: one line a row, ``label:score ...`` (without
    ``--top-k``: the model's 5 best labels, or all of them where it has fewer)."""
    k = args.top_k
    if not hasattr(model, "predict_top_k"):
        raise InputError("--top-k needs a multi-label model (train --multilabel); %s holds a %s"
                         % (args.model_dir, type(model).__name__))
    if k is None:
        k = min(_DEFAULT_TOP_K, model.n_outputs_)
    elif k > model.n_outputs_:
        raise InputError("--top-k %d is more than the model's %d labels" % (k, model.n_outputs_))
    _check_writable_labels(model)
    X, _ = _load_for_model(args.data, model, zero_based, check_labels=False)
    labels, scores = model.predict_top_k(X, k)
    lines = (" ".join("%s:%.6g" % (_files.format_label(label), score)
                      for label, score in zip(row_labels, row_scores))
             for row_labels, row_scores in zip(labels, scores))
    if not _files.write_lines(args.out, lines):
        print("%d predictions written to %s" % (X.shape[0], args.out))
    return 0


def _check_writable_labels(model):
    """A "label:score" line splits on whitespace, then at the last ':'; a label with
    whitespace (a model trained in Python on names) would make it ambiguous."""
    for label in np.asarray(model.classes_).tolist():
        text = _files.format_label(label)
        if not text or any(c.isspace() for c in text):
            raise InputError("the model's label %r cannot be written in predict's "
                             "'label:score' lines (it holds whitespace); predict it in Python "
                             "(model.predict_top_k)" % (label,))


def evaluate(args, model, zero_based):
    """``gluon-sparse evaluate`` of a multi-label model: P@1/3/5 and nDCG@1/3/5 (the file
    read with the index base ``zero_based``)."""
    X, Y = _load_for_model(args.data, model, zero_based)
    _check_has_labels(Y, args.data, "evaluate")
    print("%s: %d samples  %s" % (args.data, X.shape[0], _format(ranking_metrics(model, X, Y))))
    _note_uncounted(model, Y)
    return 0


def _check_has_labels(Y, name, what):
    """As single-label evaluate refuses a file without labels: every P@k would be 0 (and
    early stopping would choose among epochs that all score 0)."""
    if Y.nnz == 0:
        raise InputError("%s: no row has a label; %s needs each row's true labels "
                         "('3,17 f:v ...'); predict takes unlabelled rows" % (name, what))


def _note_uncounted(model, Y):
    """Say on stderr what the metrics count as misses: rows without labels (0 in the
    mean, as the extreme-classification repository's tools count them) and labels the
    model never saw (no prediction can hit them)."""
    empty = int(np.sum(np.diff(Y.indptr) == 0))
    if empty:
        print("note: %d of %d samples have no label and count as 0 in every metric"
              % (empty, Y.shape[0]), file=sys.stderr)
    known = np.asarray(model.classes_, dtype=np.float64)  # ids: ranking_metrics checked
    unknown = ~np.isin(Y.indices, known)
    if unknown.any():
        rows = np.unique(np.repeat(np.arange(Y.shape[0]), np.diff(Y.indptr))[unknown])
        print("note: %d of %d samples have labels the model never saw (e.g. %s): no "
              "prediction hits them" % (rows.size, Y.shape[0], ", ".join(
                  str(int(v)) for v in np.unique(Y.indices[unknown])[:5])), file=sys.stderr)
