"""``gluon-sparse train``: checks, data, the epoch loop and the closing summary.

Everything that can fail on the user's input is checked before the first
epoch: flags that contradict each other, the files (readable, parseable, with
feature values), and the model directory (a new path, an empty directory or a
model to replace). After training only the atomic write of the model is left.
"""
import logging
import os
import re
import time

import numpy as np

from . import _epochs, _files
from ._arguments import ADAMAX_REASON
from ._errors import InputError
from ._metrics import format_metrics, metrics
from ._parser import DEFAULT_VALIDATION_FRACTION

logger = logging.getLogger("gluon_sparse.cli")


def train(args):
    """Run ``gluon-sparse train`` on parsed arguments; returns the exit status."""
    if args.multilabel:
        from . import _multilabel
        return _multilabel.train(args)
    start = time.perf_counter()
    check_optimizer(args)
    if args.num_sampled is not None:
        raise InputError("--num-sampled applies to --multilabel training (its sampled output "
                         "layer) only")
    fraction = _validation_fraction(args)
    _epochs.check_early_stopping(args, bool(args.test) or fraction > 0)
    for path in args.data + ([args.test] if args.test else []):
        _files.check_readable(path)
    replacing = _files.check_model_dir(args.model_dir)

    X, y, zero_based, source = _training_data(args)
    print("data: %s: %d samples x %d features, %d non-zeros (density %.2g)"
          % (source, X.shape[0], X.shape[1], X.nnz, X.nnz / max(1, X.shape[0] * X.shape[1])))
    classify = args.task == "classification"
    if classify and np.any(y != np.round(y)):
        row = int(np.flatnonzero(y != np.round(y))[0])
        where = source
        if args.data:
            from ..data import locate_row
            where = "%s, line %d" % locate_row(args.data, row)
        raise InputError("%s: label %s is not a class label (classification takes integer "
                         "labels); pass --task regression for a continuous target"
                         % (where, _files.format_label(y[row])))
    if fraction and X.shape[0] - int(np.ceil(fraction * X.shape[0])) < 1:
        raise InputError("--validation-fraction %g of %d samples leaves none to train on"
                         % (fraction, X.shape[0]))
    X_train, y_train, X_test, y_test, held_out = _split(args, X, y, zero_based, fraction,
                                                        classify)
    _epochs.check_early_stopping(args, X_test is not None)
    if args.data:
        _files.check_model_fits(args.data, X, args.hidden, zero_based)
    fit_args = {"classes": np.unique(y_train)} if classify else {}
    if classify and len(fit_args["classes"]) < 2:
        held = ("; --validation-fraction %g left %d of the %d samples to train on"
                % (fraction, X_train.shape[0], X.shape[0]) if X_test is not None and not args.test
                else "")
        raise InputError("the training labels hold a single class (%s); classification needs "
                         "two or more%s" % (_files.format_label(fit_args["classes"][0]), held))
    model = _build_model(args, X_train.shape[0], X_train.shape[1], classify)
    print("model: %s hidden=%s optimizer=%s lr=%g batch=%d ctx=%s; metrics on %s"
          % (type(model).__name__, ",".join(map(str, args.hidden)) or "none", args.optimizer,
             args.lr, model.batch_size, args.ctx, held_out or "nothing (no held-out data)"))
    if replacing:
        print("model-dir: %s holds a model; it will be replaced when training ends"
              % args.model_dir)

    rule = evaluate = None
    if X_test is not None:
        rule = _epochs.criterion(args.task, classify and bool(
            np.isin(y_test, fit_args["classes"]).all()))
        note = classify and _files.unseen_labels_note(y_test, fit_args["classes"])
        if note:  # the epochs' accuracy would say 0.005 and nothing why
            print(note)

        def evaluate():
            return metrics(model, X_test, y_test)
    last_metrics, epochs_run, kept = _epochs.run_epochs(
        args, model, lambda: model.partial_fit(X_train, y_train, **fit_args), evaluate, rule,
        format_metrics)
    if zero_based != "auto":
        # Saved with the model: predict and evaluate read their files with it.
        model.zero_based_ = zero_based
    _files.check_finite_weights(model)
    model.save(args.model_dir)
    scores = {name: value for name, value in last_metrics.items() if name != "loss"}
    # The one line that says what was done: time (data, training and save),
    # the kept epoch's held-out numbers and where the model is.
    print("summary: %s in %.1f s; %s; model written to %s"
          % (_epochs.describe(epochs_run, kept), time.perf_counter() - start,
             ("held-out " + format_metrics(scores)) if scores
             else "training loss %.4f (no held-out data)" % last_metrics["loss"],
             os.path.abspath(args.model_dir)))
    return 0


def optimizer_params(args):
    """``--optimizer-param`` as the estimators' ``optimizer_params`` (None when not given)."""
    return dict(args.optimizer_params) or None


def check_optimizer(args):
    """Refuse, before any work, what the optimizer cannot train with: the names themselves
    are checked by the parser (``--optimizer``), their ``--optimizer-param`` here."""
    from ..sklearn._optimizer_params import checked_optimizer_params
    try:
        checked_optimizer_params(args.optimizer, optimizer_params(args))
    except ValueError as err:
        raise InputError("--optimizer-param: %s" % str(err).replace("optimizer_params=", "",
                                                                       1)) from None
    if args.optimizer == "sparseadamax" and not (optimizer_params(args) or {}).get("epsilon"):
        # Checked after training it would waste the run: the estimators refuse the NaN.
        raise InputError("--optimizer sparseadamax needs --optimizer-param epsilon=1e-8 (or "
                         "another positive epsilon): without one, %s" % ADAMAX_REASON)
    from ..sklearn._training import registered_optimizer
    try:
        # The estimator refuses these too (adagrad, nag, lbsgd with --alpha > 0: no weight
        # decay for the rows absent from a batch), but only after the data is read.
        registered_optimizer(args.optimizer, args.alpha)
    except ValueError as err:
        raise InputError(re.sub(r"\boptimizer='([^']*)'", r"--optimizer \1",
                                re.sub(r"\balpha=", "--alpha ", str(err)))) from None


def _validation_fraction(args):
    if args.test and args.validation_fraction is not None:
        raise InputError("--validation-fraction holds out part of the training data when no "
                         "--test file is given; pass one or the other, not both")
    if args.validation_fraction is None:
        return DEFAULT_VALIDATION_FRACTION
    return args.validation_fraction


def _training_data(args):
    """``(X, y, zero_based, description)`` of the files, or of the reference dataset."""
    if not args.data and args.zero_based != "auto":
        # The reference dataset is a matrix: no file base to apply, or to save for predict.
        raise InputError("--zero-based applies to LibSVM files; without DATA train uses the "
                         "reference dataset, which has none")
    if not args.data:
        from ..data.synthetic import make_reference_dataset
        X, y = make_reference_dataset(random_state=args.seed)
        # Columns of a matrix: no file base to keep.
        return X, y, "auto", "reference dataset (generated in memory)"
    X, y, zero_based = _files.load(args.data, zero_based=args.zero_based)
    _files.check_has_features(X, args.data)
    return X, y, zero_based, ", ".join(args.data)


def _split(args, X, y, zero_based, fraction, classify):
    """``(X_train, y_train, X_test, y_test, description of the held-out data)``."""
    if args.test:
        X_test, y_test, test_base = _files.load([args.test], zero_based=zero_based)
        X_test = _files.to_model_width(X_test, X.shape[1], [args.test], test_base)
        return X, y, X_test, y_test, args.test
    if fraction == 0:
        return X, y, None, None, None
    from sklearn.model_selection import train_test_split
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=fraction, random_state=args.seed,
        stratify=y if classify and _can_stratify(y, fraction) else None)
    return X_train, y_train, X_test, y_test, "%d held-out training samples" % X_test.shape[0]


def _can_stratify(y, fraction):
    # scikit-learn's stratified split needs every class twice and each side at least
    # as large as the number of classes; else the split is not stratified.
    _, counts = np.unique(y, return_counts=True)
    n_test = int(np.ceil(fraction * len(y)))
    return counts.min() >= 2 and len(counts) <= min(n_test, len(y) - n_test)


def clipped_batch_size(batch_size, n_train, n_features):
    """``--batch-size``, at most the training samples (said once, with a warning); an
    InputError, before training, for batches too wide for MXNet."""
    from ..sklearn._data import check_training_batch
    if batch_size > n_train:
        # Said once here; the estimator would otherwise warn at every epoch.
        logger.warning("--batch-size %d is larger than the %d training samples: each epoch is "
                       "one batch of %d", batch_size, n_train, n_train)
        batch_size = n_train
    try:
        check_training_batch(batch_size, n_features, flag="--batch-size")
    except ValueError as err:
        raise InputError(str(err)) from None
    return batch_size


def _build_model(args, n_train, n_features, classify):
    from ..sklearn import SparseMLPClassifier, SparseMLPRegressor
    batch_size = clipped_batch_size(args.batch_size, n_train, n_features)
    estimator = SparseMLPClassifier if classify else SparseMLPRegressor
    return estimator(hidden_layer_sizes=args.hidden, batch_size=batch_size,
                     learning_rate_init=args.lr, alpha=args.alpha, optimizer=args.optimizer,
                     optimizer_params=optimizer_params(args), ctx=args.ctx,
                     random_state=args.seed)
