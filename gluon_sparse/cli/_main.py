"""The entry point: parse, run the command, turn failures into exit statuses."""
import logging
import os
import sys

from ._errors import EXIT_INTERRUPTED, EXIT_USAGE, InputError
from ._parser import build_parser


def _model_version(args):
    """The version ``train``'s model directory names now (None where it has none)."""
    if args.command != "train" or not getattr(args, "model_dir", None):
        return None
    from .._fileio import _read_pointer
    try:
        return _read_pointer(args.model_dir)
    except (OSError, ValueError):
        return None


def main(argv=None):
    """Run the command line; returns the exit status.

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name (default ``sys.argv[1:]``).

    Returns
    -------
    int
        0 on success (also when the reader of stdout goes away, as in
        ``predict --out - | head``), 2 for bad input or flags, 130 when
        interrupted.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse already printed its one-line error (or --version)
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    prog = "gluon-sparse %s" % args.command
    version_before = _model_version(args)
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        if _model_version(args) != version_before:
            # Ctrl-C after the save committed (its clean-up of old versions was cut short).
            print("%s: interrupted after the model was written to %s"
                  % (prog, os.path.abspath(args.model_dir)), file=sys.stderr)
        else:
            print("%s: interrupted; nothing was written" % prog, file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader of stdout has gone (`| head`): as every Unix filter, stop
        # quietly. Point stdout at /dev/null so that the interpreter's final
        # flush of the buffered rest does not fail a second time.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0
    except (InputError, OSError, ValueError, TypeError) as err:
        # Input problems (missing / malformed files, a model directory that is
        # not one) are the user's to fix: one line, no traceback.
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print("%s: error: %s" % (prog, message), file=sys.stderr)
        return EXIT_USAGE
