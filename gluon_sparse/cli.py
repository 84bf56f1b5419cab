"""The ``gluon-sparse`` command line (also ``python -m gluon_sparse``).

``gluon-sparse train [DATA ...] --model-dir DIR``
    Train a SparseMLP on LibSVM files (or, with no DATA, on the in-memory
    reference dataset), print per-epoch metrics on held-out data and a closing
    summary, and write the model directory atomically. The index base the
    training files were read with (``--zero-based``, 'auto' by default) is
    saved with the model.
``gluon-sparse predict DATA --model-dir DIR --out FILE``
    One prediction a line.
``gluon-sparse evaluate DATA --model-dir DIR``
    Accuracy / AUC / log-loss (classification) or MSE / R^2 (regression).

predict, evaluate and ``train --test`` read their file with the training
files' index base, never with 'auto' afresh: column j means one feature.
``gluon-sparse launch ...``
    Start a distributed job (see :mod:`gluon_sparse.distributed.launcher`).

Bad input (missing or malformed files, bad flags) ends with exit status 2 and
one line on stderr naming the problem; Ctrl-C ends with 130 and leaves no
half-written model or output file.
"""
import argparse
import logging
import os
import sys
import tempfile
import time

import numpy as np

logger = logging.getLogger("gluon_sparse.cli")

__all__ = ["main", "build_parser"]

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class InputError(Exception):
    """A problem with the user's input, reported in one line with exit status 2."""


# ---------------------------------------------------------------- argument types
def _hidden_sizes(text):
    text = text.strip()
    if text in ("", "none", "linear"):
        return ()
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("expected comma separated positive integers such as "
                                         "128,8, got %r" % text) from None
    if any(size < 1 for size in sizes):
        raise argparse.ArgumentTypeError("hidden layer sizes must be >= 1, got %r" % text)
    return sizes


def _positive(kind):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError("expected a positive %s, got %r"
                                             % (kind.__name__, text)) from None
        if value <= 0:
            raise argparse.ArgumentTypeError("expected a positive %s, got %r"
                                             % (kind.__name__, text))
        return value
    return parse


def _fraction(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a number in [0, 1), got %r" % text) from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError("expected a number in [0, 1), got %r" % text)
    return value


def _zero_based(text):
    choices = {"auto": "auto", "true": True, "false": False}
    if text.strip().lower() not in choices:
        raise argparse.ArgumentTypeError("expected auto, true or false, got %r" % text)
    return choices[text.strip().lower()]


def _context(text):
    from .sklearn._context import parse_context
    try:
        parse_context(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


# ---------------------------------------------------------------- parser
class _OneLineErrorParser(argparse.ArgumentParser):
    """argparse, minus the usage block before an error: one line naming the problem."""

    def error(self, message):
        self.exit(EXIT_USAGE, "%s: error: %s (see %s --help)\n" % (self.prog, message, self.prog))


def build_parser():
    """The ``gluon-sparse`` argument parser (subcommands train, predict, evaluate, launch)."""
    parser = _OneLineErrorParser(
        prog="gluon-sparse",
        description="Train, apply and evaluate sparse neural networks on LibSVM data.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    train = commands.add_parser(
        "train", help="train a model (on the built-in reference dataset when no DATA is given)",
        description="Train a SparseMLP on LibSVM files. Without DATA, trains on the reference "
                    "dataset (1000 x 1,000,000, density 1e-5), generated in memory.")
    train.add_argument("data", nargs="*", metavar="DATA", help="LibSVM training file(s)")
    train.add_argument("--model-dir", required=True, help="directory to write the model to")
    train.add_argument("--test", metavar="DATA", help="LibSVM file to report metrics on each epoch "
                       "(default: a held-out share of the training data)")
    train.add_argument("--zero-based", type=_zero_based, default="auto",
                       metavar="{auto,true,false}",
                       help="index base of the LibSVM files: 'auto' (default) takes them as "
                            "one-based unless some file has feature 0, like scikit-learn; the "
                            "base used is saved with the model for predict and evaluate")
    train.add_argument("--validation-fraction", type=_fraction, default=0.2,
                       help="share of the training data held out when --test is not given "
                            "(0: none; default 0.2)")
    # Defaults: the reference model (128-8-1, batch 10) with SparseAdam's exact
    # deferred standard updates, whose step costs what the batch's rows cost. An L2
    # penalty (--alpha > 0) moves every weight row at every step, so it is off by
    # default: the deferred rows are then replayed when the weights are read.
    train.add_argument("--hidden", type=_hidden_sizes, default=(128, 8),
                       help="hidden layer sizes, comma separated; the first layer is sparse "
                            "(default 128,8; 'linear' for none)")
    train.add_argument("--epochs", type=_positive(int), default=5, help="epochs (default 5)")
    train.add_argument("--batch-size", type=_positive(int), default=10,
                       help="samples per batch (default 10)")
    train.add_argument("--lr", type=_positive(float), default=3e-3,
                       help="learning rate (default 3e-3)")
    train.add_argument("--alpha", type=float, default=0.0,
                       help="L2 penalty (default 0; > 0 makes every weight row move every step)")
    train.add_argument("--optimizer", default="sparseadam",
                       help="MXNet optimizer name (default sparseadam)")
    train.add_argument("--ctx", type=_context, default="cpu", help="cpu, gpu or gpu:N (default cpu)")
    train.add_argument("--task", choices=("classification", "regression"),
                       default="classification", help="default classification")
    train.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(handler=_train)

    predict = commands.add_parser("predict", help="write one prediction a line",
                                  description="Predict with a trained model; one line per sample.")
    predict.add_argument("data", metavar="DATA", help="LibSVM file (labels are ignored)")
    predict.add_argument("--model-dir", required=True, help="directory written by train")
    predict.add_argument("--out", required=True, help="output file ('-' for stdout)")
    predict.add_argument("--proba", action="store_true",
                         help="write the class probabilities (in the order of the model's "
                              "classes) instead of labels")
    predict.set_defaults(handler=_predict)

    evaluate = commands.add_parser("evaluate", help="report metrics on labelled data",
                                   description="Score a trained model on a labelled LibSVM file.")
    evaluate.add_argument("data", metavar="DATA", help="LibSVM file")
    evaluate.add_argument("--model-dir", required=True, help="directory written by train")
    evaluate.set_defaults(handler=_evaluate)

    _add_launch_parser(commands)
    return parser


def _add_launch_parser(commands):
    help_text = "start a distributed job (scheduler, servers, workers)"
    try:
        from .distributed import launcher
    except ImportError as err:
        # The distributed extras are optional: every other command still works.
        launch = commands.add_parser("launch", help=help_text, add_help=False)
        launch.add_argument("rest", nargs=argparse.REMAINDER)
        launch.set_defaults(handler=_launch_unavailable, import_error=str(err))
        return
    launch = commands.add_parser("launch", help=help_text, description=help_text)
    launcher.add_arguments(launch)
    launch.set_defaults(handler=_launch)


def _launch(args):
    from .distributed import launcher
    return launcher.run(args)


def _launch_unavailable(args):
    raise InputError("gluon-sparse launch is not available: %s" % args.import_error)


# ---------------------------------------------------------------- data
def _load(paths, n_features=None, zero_based="auto"):
    """Read LibSVM files: ``(X, y, zero_based)``, the last the index base used."""
    from .data import load_libsvm
    X, y, zero_based = load_libsvm(paths if len(paths) > 1 else paths[0], num_features=n_features,
                                   zero_based=zero_based, return_zero_based=True)
    if X.shape[0] == 0:
        raise InputError("%s holds no samples" % ", ".join(map(str, paths)))
    return X, np.asarray(y), zero_based


def _load_for_model(path, model):
    """Read a file for a trained model: its width, and the index base of its training files."""
    # 'auto' alone decides per file: a zero-based training file without
    # feature 0 reads as one-based, a test file with feature 0 as zero-based,
    # and every column would be shifted by one against the model's.
    X, y, _ = _load([path], n_features=model.n_features_in_,
                    zero_based=getattr(model, "zero_based_", "auto"))
    return X, y


def _format_label(value):
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def _write_lines_atomically(path, lines):
    if path == "-":
        sys.stdout.writelines(line + "\n" for line in lines)
        return
    path = os.path.abspath(path)
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        raise InputError("cannot write %s: directory %s does not exist" % (path, directory))
    handle, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".tmp-", dir=directory)
    try:
        with os.fdopen(handle, "w") as f:
            f.writelines(line + "\n" for line in lines)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


# ---------------------------------------------------------------- metrics
def _metrics(model, X, y):
    """Held-out metrics of a fitted model, as an ordered dict of name -> value."""
    from sklearn.metrics import accuracy_score, log_loss, mean_squared_error, r2_score, roc_auc_score
    if not hasattr(model, "classes_"):
        predicted = model.predict(X)
        return {"mse": mean_squared_error(y, predicted), "r2": r2_score(y, predicted)}
    proba = model.predict_proba(X)
    predicted = model.classes_[proba.argmax(axis=1)]
    metrics = {"accuracy": accuracy_score(y, predicted)}
    known = np.isin(y, model.classes_)
    try:
        if len(model.classes_) == 2:
            metrics["auc"] = roc_auc_score(y[known] == model.classes_[1], proba[known, 1])
        else:
            metrics["auc"] = roc_auc_score(y[known], proba[known], multi_class="ovr",
                                           labels=model.classes_)
    except ValueError:
        metrics["auc"] = float("nan")  # only one class in the held-out labels
    if known.all():
        metrics["log_loss"] = log_loss(y, proba, labels=model.classes_)
    return metrics


def _format_metrics(metrics):
    return "  ".join("%s %.4f" % (name, value) for name, value in metrics.items())


# ---------------------------------------------------------------- commands
def _train(args):
    from sklearn.model_selection import train_test_split

    from .sklearn import SparseMLPClassifier, SparseMLPRegressor

    setup_start = time.perf_counter()
    if args.data:
        X, y, zero_based = _load(args.data, zero_based=args.zero_based)
        source = ", ".join(args.data)
    else:
        from .datasets import make_reference_dataset
        X, y = make_reference_dataset(random_state=args.seed)
        zero_based = "auto"  # columns of a matrix: no file base to keep
        source = "reference dataset (generated in memory)"
    print("data: %s: %d samples x %d features, %d non-zeros (density %.2g)"
          % (source, X.shape[0], X.shape[1], X.nnz, X.nnz / max(1, X.shape[0] * X.shape[1])))
    classify = args.task == "classification"
    if args.test:
        X_train, y_train = X, y
        X_test, y_test, _ = _load([args.test], n_features=X.shape[1], zero_based=zero_based)
        held_out = args.test
    elif args.validation_fraction > 0:
        X_train, X_test, y_train, y_test = train_test_split(
            X, y, test_size=args.validation_fraction, random_state=args.seed,
            stratify=y if classify and _can_stratify(y, args.validation_fraction) else None)
        held_out = "%d held-out training samples" % X_test.shape[0]
    else:
        X_train, y_train, X_test, y_test, held_out = X, y, None, None, None
    estimator = SparseMLPClassifier if classify else SparseMLPRegressor
    model = estimator(hidden_layer_sizes=args.hidden, batch_size=args.batch_size,
                      learning_rate_init=args.lr, alpha=args.alpha, optimizer=args.optimizer,
                      ctx=args.ctx, random_state=args.seed)
    fit_args = {"classes": np.unique(y_train)} if classify else {}
    if classify and len(fit_args["classes"]) < 2:
        raise InputError("the training labels hold a single class (%s); classification needs "
                         "two or more" % _format_label(fit_args["classes"][0]))
    print("model: %s hidden=%s optimizer=%s ctx=%s; metrics on %s"
          % (estimator.__name__, ",".join(map(str, args.hidden)) or "none", args.optimizer,
             args.ctx, held_out or "nothing (no held-out data)"))

    from tqdm.auto import tqdm
    epoch_times = []
    # disable=None: a bar on terminals only, not in logs and pipes.
    progress = tqdm(range(args.epochs), desc="train", unit="epoch",
                    disable=True if args.quiet else None)
    setup_seconds = time.perf_counter() - setup_start
    for epoch in progress:
        start = time.perf_counter()
        model.partial_fit(X_train, y_train, **fit_args)
        epoch_times.append(time.perf_counter() - start)
        metrics = {"loss": model.loss_}
        if X_test is not None:
            metrics.update(_metrics(model, X_test, y_test))
        progress.set_postfix({name: "%.4f" % value for name, value in metrics.items()})
        tqdm.write("epoch %d/%d  %s  (%.2f s)" % (epoch + 1, args.epochs,
                                                   _format_metrics(metrics), epoch_times[-1]))
    if epoch_times:
        # The first epoch also pays for building the network (weights and
        # optimizer state of the wide first layer).
        print("summary: %d epochs, %.2f s/epoch (first %.2f s, then %.2f s), %.0f samples/s; "
              "data and setup %.2f s"
              % (len(epoch_times), float(np.mean(epoch_times)), epoch_times[0],
                 float(np.mean(epoch_times[1:])) if len(epoch_times) > 1 else epoch_times[0],
                 X_train.shape[0] * len(epoch_times) / sum(epoch_times), setup_seconds))
    if zero_based != "auto":
        # Saved with the model: predict and evaluate read their files with it.
        model.zero_based_ = zero_based
    model.save(args.model_dir)
    print("model written to %s" % os.path.abspath(args.model_dir))
    return 0


def _can_stratify(y, fraction):
    _, counts = np.unique(y, return_counts=True)
    return counts.min() >= 2 and len(counts) <= fraction * len(y)


def _load_model(model_dir):
    from .sklearn import load
    return load(model_dir)


def _predict(args):
    model = _load_model(args.model_dir)
    X, _ = _load_for_model(args.data, model)
    if args.proba:
        if not hasattr(model, "predict_proba"):
            raise InputError("--proba needs a classification model; %s holds a %s"
                             % (args.model_dir, type(model).__name__))
        lines = (" ".join("%.6g" % p for p in row) for row in model.predict_proba(X))
    else:
        lines = (_format_label(value) if np.ndim(value) == 0
                 else " ".join("%.6g" % v for v in value) for value in model.predict(X))
    _write_lines_atomically(args.out, lines)
    if args.out != "-":
        print("%d predictions written to %s" % (X.shape[0], args.out))
    return 0


def _evaluate(args):
    model = _load_model(args.model_dir)
    X, y = _load_for_model(args.data, model)
    metrics = _metrics(model, X, y)
    print("%s: %d samples  %s" % (args.data, X.shape[0], _format_metrics(metrics)))
    return 0


# ---------------------------------------------------------------- entry point
def main(argv=None):
    """Run the command line; returns the exit status.

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name (default ``sys.argv[1:]``).

    Returns
    -------
    int
        0 on success, 2 for bad input or flags, 130 when interrupted.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse already printed its one-line error
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    prog = "gluon-sparse %s" % args.command
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        print("%s: interrupted; nothing was written" % prog, file=sys.stderr)
        return EXIT_INTERRUPTED
    except (InputError, OSError, ValueError, TypeError) as err:
        # Input problems (missing / malformed files, a model directory that is
        # not one) are the user's to fix: one line, no traceback.
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print("%s: error: %s" % (prog, message), file=sys.stderr)
        return EXIT_USAGE
