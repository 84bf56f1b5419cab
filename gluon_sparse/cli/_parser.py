"""The ``gluon-sparse`` argument parser: subcommands train, predict, evaluate, launch."""
import argparse

from .._version import __version__
from . import _arguments as types
from ._errors import EXIT_USAGE

__all__ = ["build_parser"]

# The reference model (128-8-1, batch 10) with SparseAdam's exact deferred
# standard updates, whose step costs what the batch's rows cost. An L2 penalty
# (--alpha > 0) moves every weight row at every step, so it is off by default.
# Learning rate 1e-3 (Adam's usual default) and 4 epochs: on the reference
# dataset the held-out log-loss falls at every epoch up to the 4th (3e-3 and 5
# epochs, the defaults of 0.1, overfit from the 2nd epoch on).
DEFAULT_HIDDEN = (128, 8)
DEFAULT_EPOCHS = 4
DEFAULT_BATCH_SIZE = 10
DEFAULT_LR = 1e-3
DEFAULT_VALIDATION_FRACTION = 0.2
DEFAULT_NUM_SAMPLED = 1024  # train --multilabel's --num-sampled


class _OneLineErrorParser(argparse.ArgumentParser):
    """argparse, minus the usage block before an error: one line naming the problem."""

    def error(self, message):
        self.exit(EXIT_USAGE, "%s: error: %s (see %s --help)\n" % (self.prog, message, self.prog))


# predict's and evaluate's DATA, as LIBLINEAR's predict reads a test file.
_UNSEEN_FEATURES_HELP = ("Features with an index beyond the model's width, which the training "
                         "never saw, are ignored, with one warning naming how many")


def _add_zero_based(command):
    """predict's and evaluate's ``--zero-based``: for a model that records no index base."""
    command.add_argument("--zero-based", type=types.zero_based, default="auto",
                         metavar="{auto,true,false}",
                         help="index base of DATA where the model records none (one trained "
                              "in Python on a matrix): 'auto' (default) guesses as train "
                              "does, with a warning where the file does not settle it. A model "
                              "trained on files reads DATA with their base; a value that "
                              "contradicts it is an error")


def build_parser():
    """The ``gluon-sparse`` argument parser (subcommands train, predict, evaluate, launch).

    Returns
    -------
    argparse.ArgumentParser
        Each subcommand's namespace carries its function as ``handler``.
    """
    from . import _commands, _train

    parser = _OneLineErrorParser(
        prog="gluon-sparse",
        description="Train, apply and evaluate sparse neural networks on LibSVM data.")
    parser.add_argument("--version", action="version", version="%(prog)s " + __version__)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    train = commands.add_parser(
        "train", help="train a model (on the built-in reference dataset when no DATA is given)",
        description="Train a SparseMLP on LibSVM files. Without DATA, trains on the reference "
                    "dataset (1000 x 1,000,000, density 1e-5), generated in memory.")
    train.add_argument("data", nargs="*", metavar="DATA", help="LibSVM training file(s)")
    train.add_argument("--model-dir", required=True,
                       help="directory to write the model to (created when missing or "
                            "empty; a model already there is replaced; any other existing "
                            "file or folder is an error, reported before training)")
    train.add_argument("--test", metavar="DATA", help="LibSVM file to report metrics on each epoch "
                       "(default: a held-out share of the training data; not combinable with "
                       "--validation-fraction)")
    train.add_argument("--zero-based", type=types.zero_based, default="auto",
                       metavar="{auto,true,false}",
                       help="index base of the LibSVM files: 'auto' (default) takes them as "
                            "one-based unless some file has feature 0, like scikit-learn; the "
                            "base used is saved with the model for predict and evaluate")
    # None, not the default value: train tells "not given" from "given" to
    # refuse --validation-fraction together with --test.
    train.add_argument("--validation-fraction", type=types.fraction, default=None,
                       help="share of the training data held out when --test is not given "
                            "(0: none; default %g)" % DEFAULT_VALIDATION_FRACTION)
    train.add_argument("--hidden", type=types.hidden_sizes, default=DEFAULT_HIDDEN,
                       help="hidden layer sizes, comma separated; the first layer is sparse "
                            "(default %s; 'linear' for none)" % ",".join(map(str, DEFAULT_HIDDEN)))
    train.add_argument("--epochs", type=types.positive(int), default=DEFAULT_EPOCHS,
                       help="epochs (default %d)" % DEFAULT_EPOCHS)
    train.add_argument("--early-stopping", type=types.positive(int), default=None,
                       metavar="N",
                       help="stop once N epochs in a row have not improved the held-out score "
                            "(log loss; mse for regression; P@1 for --multilabel) and save the "
                            "best epoch's model (default: run every epoch, save the last)")
    train.add_argument("--batch-size", type=types.positive(int), default=DEFAULT_BATCH_SIZE,
                       help="samples per batch (default %d)" % DEFAULT_BATCH_SIZE)
    train.add_argument("--lr", type=types.positive(float), default=DEFAULT_LR,
                       help="learning rate (default %g)" % DEFAULT_LR)
    train.add_argument("--alpha", type=types.non_negative_float, default=0.0,
                       help="L2 penalty (default 0; > 0 makes every weight row move every step)")
    train.add_argument("--optimizer", type=types.optimizer_name, default="sparseadam",
                       metavar="NAME",
                       help="one of %s (default sparseadam; adagrad, nag, lbsgd only with --alpha 0; "
                            "sparseadamax only with --optimizer-param epsilon=1e-8)"
                            % ", ".join(types.optimizer_names()))
    train.add_argument("--optimizer-param", type=types.optimizer_param, action="append",
                       default=[], metavar="NAME=VALUE", dest="optimizer_params",
                       help="another hyper-parameter of the optimizer, under MXNet's name "
                            "(repeatable): momentum=0.9 with sparsesgd, beta1=0.8 or "
                            "epsilon=1e-7 with sparseadam, clip_gradient=5")
    train.add_argument("--ctx", type=types.context, default="cpu",
                       help="cpu, gpu or gpu:N (default cpu)")
    train.add_argument("--task", choices=("classification", "regression"),
                       default="classification", help="default classification")
    train.add_argument("--seed", type=types.seed, default=0,
                       help="random seed in [0, 4294967295] (default 0)")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.add_argument("--multilabel", action="store_true",
                       help="multi-label LibSVM ('3,17,204 f:v ...') or extreme-classification "
                            "files: train a SparseMultiLabelClassifier (sampled output layer); "
                            "reports P@1/3/5 and nDCG@1/3/5")
    train.add_argument("--num-sampled", type=types.positive(int), default=None,
                       help="--multilabel: negative labels sampled per batch (default %d)"
                            % DEFAULT_NUM_SAMPLED)
    train.set_defaults(handler=_train.train)

    predict = commands.add_parser("predict", help="write one prediction a line",
                                  description="Predict with a trained model; one line per sample.")
    predict.add_argument("data", metavar="DATA",
                         help="LibSVM file (each line starts with a label, any number, e.g. 0 "
                              "or nan: it is not used; for a multi-label model, label ids "
                              "'3,17' or nothing). %s" % _UNSEEN_FEATURES_HELP)
    predict.add_argument("--model-dir", required=True, help="directory written by train")
    predict.add_argument("--out", required=True, help="output file ('-' for stdout)")
    predict.add_argument("--proba", action="store_true",
                         help="write the class probabilities (in the order of the model's "
                              "classes, which a line on stderr names) instead of labels")
    predict.add_argument("--top-k", type=types.positive(int), default=None, metavar="K",
                         help="multi-label models: the K best labels a line, 'label:score ...' "
                              "(default for a multi-label model: 5, or all its labels if fewer)")
    _add_zero_based(predict)
    predict.set_defaults(handler=_commands.predict)

    evaluate = commands.add_parser("evaluate", help="report metrics on labelled data",
                                   description="Score a trained model on a labelled LibSVM file.")
    evaluate.add_argument("data", metavar="DATA",
                          help="labelled LibSVM file. %s" % _UNSEEN_FEATURES_HELP)
    evaluate.add_argument("--model-dir", required=True, help="directory written by train")
    _add_zero_based(evaluate)
    evaluate.set_defaults(handler=_commands.evaluate)

    launch_help = "start a distributed job (scheduler, servers, workers)"
    launch = commands.add_parser("launch", help=launch_help, description=launch_help)
    _commands.add_launch_arguments(launch)
    launch.set_defaults(handler=_commands.launch)
    return parser
