"""The entry point: parse, run the command, turn failures into exit statuses."""
import contextlib
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


def _stdout_to_devnull():
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.__stdout__.fileno())
    os.close(devnull)


class _OutlivingStdout:
    """sys.stdout for ``train``: when its reader goes away (``train ... | head -1``), the
    rest of the output goes to /dev/null and training goes on to the save (a closed pipe
    used to end the run with status 0 before the model was written)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            _stdout_to_devnull()
            return len(text)

    def flush(self):
        try:
            self._stream.flush()
        except BrokenPipeError:
            _stdout_to_devnull()

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def _stdout_outliving_its_reader(command):
    if command != "train" or sys.stdout is not sys.__stdout__:
        yield  # predict stops quietly instead (below); a replaced stdout is the caller's
        return
    sys.stdout = _OutlivingStdout(sys.stdout)
    try:
        yield
    finally:
        sys.stdout = sys.__stdout__


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
        ``predict --out - | head``, which then stops; ``train`` goes on to save
        its model), 2 for bad input or flags, 130 when interrupted.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse already printed its one-line error (or --version)
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    cli_logger = logging.getLogger("gluon_sparse.cli")
    if cli_logger.level == logging.NOTSET:
        # The command line's own notes (INFO) show on stderr too; the library's stay quiet.
        cli_logger.setLevel(logging.INFO)
    prog = "gluon-sparse %s" % args.command
    version_before = _model_version(args)
    try:
        with _stdout_outliving_its_reader(args.command):
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
        _stdout_to_devnull()
        return 0
    except MemoryError as err:
        # What check_model_fits cannot foresee (another process taking memory meanwhile).
        print("%s: error: out of memory%s: see docs/limits.md for what a model of this width "
              "needs" % (prog, " (%s)" % err if str(err) else ""), file=sys.stderr)
        return EXIT_USAGE
    except (InputError, OSError, ValueError, TypeError) as err:
        # Input problems (missing / malformed files, a model directory that is
        # not one) are the user's to fix: one line, no traceback.
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print("%s: error: %s" % (prog, message), file=sys.stderr)
        return EXIT_USAGE
