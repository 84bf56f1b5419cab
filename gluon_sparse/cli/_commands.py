"""``gluon-sparse predict``, ``evaluate`` and ``launch``."""
import logging

import numpy as np

from . import _files, _multilabel
from ._errors import InputError
from ._metrics import format_metrics, metrics

logger = logging.getLogger("gluon_sparse.cli")


def predict(args):
    """Write one prediction (or probability row) a line; returns the exit status."""
    _files.check_readable(args.data)
    _files.check_output_file(args.out, inputs=[args.data])
    if args.proba and args.top_k is not None:
        raise InputError("--proba (class probabilities) and --top-k (the K best labels with "
                         "their scores) are two kinds of output; pass one")
    model = _files.load_model(args.model_dir)
    zero_based = _files.index_base(model, args.zero_based, args.model_dir)
    if args.top_k is not None or _multilabel.is_multilabel_model(model):
        if args.proba:
            raise InputError("--proba is for single-label classifiers; predictions of a "
                             "multi-label model are 'label:score' lines (--top-k K)")
        return _multilabel.predict_top_k(args, model, zero_based)
    if args.proba and not hasattr(model, "predict_proba"):
        if hasattr(model, "classes_"):
            raise InputError("--proba needs class probabilities; %s holds a %s, which scores "
                             "each label on its own: --top-k K writes those scores"
                             % (args.model_dir, type(model).__name__))
        raise InputError("--proba needs a classification model; %s holds a %s"
                         % (args.model_dir, type(model).__name__))
    X, _ = _files.load_for_model(args.data, model, zero_based, check_labels=False)
    if args.proba:
        # Said on stderr: the file keeps one row of numbers a sample.
        logger.info("columns of %s: probabilities of classes %s",
                    "stdout" if args.out == "-" else args.out,
                    ", ".join(_files.format_label(label) for label in model.classes_))
        lines = (" ".join("%.6g" % p for p in row) for row in model.predict_proba(X))
    else:
        lines = (_files.format_label(value) if np.ndim(value) == 0
                 else " ".join("%.6g" % v for v in value) for value in model.predict(X))
    if not _files.write_lines(args.out, lines):
        print("%d predictions written to %s" % (X.shape[0], args.out))
    return 0


def evaluate(args):
    """Print the model's metrics on a labelled file; returns the exit status."""
    _files.check_readable(args.data)
    model = _files.load_model(args.model_dir)
    zero_based = _files.index_base(model, args.zero_based, args.model_dir)
    if _multilabel.is_multilabel_model(model):
        return _multilabel.evaluate(args, model, zero_based)
    X, y = _files.load_for_model(args.data, model, zero_based)
    classes = getattr(model, "classes_", None)
    if classes is not None:
        if classes.dtype.kind not in "iufb":
            raise InputError("the model's classes are not numbers (e.g. %r): a LibSVM file's "
                             "labels are, so they cannot be compared; score it in Python"
                             % (classes[0],))
        note = _files.unseen_labels_note(y, classes)
        if note:
            print(note)
    print("%s: %d samples  %s" % (args.data, X.shape[0], format_metrics(metrics(model, X, y))))
    return 0


def add_launch_arguments(parser):
    """The launcher's own options on the ``launch`` subcommand."""
    from ..distributed import launcher
    launcher.add_arguments(parser)


def launch(args):
    """Start a distributed job; returns the exit status of the launcher."""
    from ..distributed import launcher
    return launcher.run(args)
