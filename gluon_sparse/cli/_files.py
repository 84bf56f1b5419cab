"""Files the command line reads and writes: LibSVM input (checked for what
training cannot use), the model directory (checked before training), and
predictions (written atomically or to stdout)."""
import logging
import math
import os
import re
import stat
import sys

import numpy as np

from .._fileio import atomic_file
from ._errors import InputError

logger = logging.getLogger("gluon_sparse.cli")


def check_readable(path):
    """Raise InputError unless ``path`` is a file this process can open for reading."""
    from ..data.libsvm import check_rereadable
    if os.path.isdir(path):
        raise InputError("%s is a directory, not a LibSVM file" % path)
    try:
        check_rereadable(path)  # before open(), which waits for a FIFO's writer
    except ValueError as err:
        raise InputError(str(err)) from None
    try:
        with open(path, "rb"):
            pass
    except OSError as err:
        raise InputError("cannot read %s: %s" % (path, err.strerror or err)) from None


def check_model_dir(path):
    """Check, before any work, that a model can be written to ``path``.

    Returns True when ``path`` already holds a model (which ``train`` will
    replace), False when the save will create it. Raises InputError for
    anything else there (a file, a directory with other content) and for a
    destination that is not writable.
    """
    from ..sklearn import check_model_dir_writable
    try:
        return check_model_dir_writable(path)
    except OSError as err:
        raise InputError("--model-dir %s: %s; choose a new or empty directory"
                         % (path, err.strerror or err)) from None


def to_model_width(X, width, paths, zero_based):
    """``X``, read at its own width, at the model's ``width``: the values of features beyond
    it dropped, with a warning for each file that has some."""
    from ..data._model_width import to_model_width as fit_width
    return fit_width(X, width, paths, zero_based)


def load(paths, zero_based="auto", check_labels=True):
    """Read LibSVM files at their own width: ``(X, y, zero_based)``, the last the index base
    used (a file read for a model is then fitted to its width: :func:`to_model_width`).

    Raises InputError for files without samples, for non-finite feature
    values and, with ``check_labels``, labels (naming the file and line); the
    parser's own errors (malformed text) name the file, line and token.
    """
    from ..data import load_libsvm
    for path in paths:
        check_readable(path)
    try:
        X, y, zero_based = load_libsvm(paths if len(paths) > 1 else paths[0],
                                       zero_based=zero_based, return_zero_based=True)
    except ValueError as err:
        if re.search(r"invalid label '[^']*,", str(err)):
            raise InputError("%s (a list of labels: multi-label data is read by train "
                             "--multilabel)" % err) from None
        if "is an extreme-classification header" in str(err):  # load_libsvm's hint
            raise InputError(str(err)) from None
        raise
    names = ", ".join(map(str, paths))
    if X.shape[0] == 0:
        raise InputError("%s holds no samples" % names)
    if not np.isfinite(X.data).all():
        raise InputError(_describe_non_finite(paths))
    y = np.asarray(y)
    # float32, the precision the network computes in: 1e39 is infinite there.
    bad = np.flatnonzero(~np.isfinite(y.astype(np.float32)) & check_labels)
    if bad.size:
        from ..data import locate_row
        path, line = locate_row(paths if len(paths) > 1 else paths[0], int(bad[0]))
        raise InputError("%s, line %d: label %r is not a finite float32 number (NaN, infinity "
                         "or beyond 3.4e38 cannot be trained on or scored)"
                         % (path, line, float(y[bad[0]])))
    return X, y, zero_based


def check_has_features(X, paths):
    """Raise InputError when the training data has no feature values at all."""
    if X.nnz == 0:
        raise InputError("%s: %d samples but no feature values (0 non-zeros): a file of labels "
                         "only has nothing to learn from" % (", ".join(map(str, paths)),
                                                             X.shape[0]))


# Bytes of a float32 weight: it is written whole when initialised. The deferred
# optimizers' state (Adam's mean and var) is mapped lazily and commits memory only
# for the rows training touches, so it is not counted: the check is for indices
# that make even the weight impossible.
_BYTES_PER_WEIGHT = 4


def check_model_fits(paths, X, hidden, zero_based, labels=None):
    """Raise InputError, before the model is built, when its weights cannot fit the memory
    available: the width comes from the largest feature index (and, for ``labels``, the
    largest label id), which a stray index can make huge.

    Parameters
    ----------
    paths : list of str
        The DATA files (for the file and line of the largest index).
    X : scipy.sparse.csr_matrix
        The training rows (its width is the first layer's input).
    hidden : tuple of int
        Hidden layer sizes.
    zero_based : bool
        The base the files were read with (to name a feature index as the file has it).
    labels : scipy.sparse.csr_matrix, optional
        A multi-label indicator: its width is the output layer's.
    """
    from ..optimizer._state_memory import _available_memory
    available = _available_memory()
    if not available or not hidden:
        return
    layers = [(X, "feature index", X.shape[1] * hidden[0], 0 if zero_based is True else 1)]
    if labels is not None:
        layers.append((labels, "label id", labels.shape[1] * hidden[-1], 0))
    needed = sum(layer[2] for layer in layers) * _BYTES_PER_WEIGHT
    if needed <= available:
        return
    matrix, what, _, base = max(layers, key=lambda layer: layer[2])
    sizes = "the model's weights alone need %.1f GB, and %.1f GB of memory are available" % (
        needed / 1e9, available / 1e9)
    if not matrix.nnz or matrix.indices.max() + 1 < matrix.shape[1]:
        # No index asks for that width: an XC header (line 1) declared it.
        kind = "labels" if labels is matrix else "features"
        raise InputError("%s declares %d %s: %s (is the header right?)"
                         % (_header_declaring(paths, matrix.shape[1]), matrix.shape[1], kind,
                            sizes))
    from .._sparse_entries import row_of_entry
    from ..data import locate_row
    position = int(np.argmax(matrix.indices))
    path, line = locate_row(paths, row_of_entry(matrix.indptr, position))
    raise InputError("%s, line %d: %s %d makes the model %s wide; %s (is the index right? see "
                     "docs/limits.md)"
                     % (path, line, what, matrix.indices[position] + base, matrix.shape[1],
                        sizes))


def _header_declaring(paths, width):
    """'FILE, line 1: the header 'R F L'' of the first file whose XC header declares
    ``width`` features or labels ('FILES' if none does)."""
    from ..data.libsvm import open_libsvm_buffer, xc_header
    for path in paths:
        with open_libsvm_buffer(path) as buf:
            tokens, _ = xc_header(buf)
        if tokens is not None and width in (int(tokens[1]), int(tokens[2])):
            return "%s, line 1: the header %r" % (path, b" ".join(tokens).decode())
    return ", ".join(paths)


def _lines(text):
    """The lines of a memory map or bytes, one copied at a time."""
    start = 0
    while start < len(text):
        end = text.find(b"\n", start)
        end = len(text) if end < 0 else end + 1
        yield text[start:end]
        start = end


def _describe_non_finite(paths):
    """'FILE, line N: ...' for the first NaN or infinite feature value in ``paths``."""
    from ..data.libsvm import open_libsvm_buffer
    for path in paths:
        with open_libsvm_buffer(path) as text:  # a .gz or .bz2 file's text, not its bytes
            for number, raw in enumerate(_lines(text), 1):
                for token in raw.split(b"#", 1)[0].split()[1:]:
                    _, _, value = token.partition(b":")
                    try:
                        # float32, as the data is stored: 1e39 is infinite there.
                        finite = math.isfinite(np.float32(float(value)))
                    except ValueError:
                        continue
                    if not finite:
                        return ("%s, line %d: feature value in '%s' is not a finite number "
                                "(NaN and infinity cannot be trained on or predicted)"
                                % (path, number, token.decode("utf-8", "backslashreplace")))
    return "%s: a feature value is not a finite number" % ", ".join(map(str, paths))


def index_base(model, zero_based, model_dir):
    """The index base to read a file for ``model`` with: the one it records (its training
    files', saved by ``train`` or a fit on files), else ``zero_based`` (the ``--zero-based``
    of predict and evaluate); InputError where the two contradict each other."""
    recorded = getattr(model, "zero_based_", None)
    if recorded is None:
        return zero_based
    if zero_based != "auto" and zero_based != recorded:
        raise InputError("--zero-based %s contradicts the model in %s: it was trained on files "
                         "read with %s-based indices (--zero-based %s); every column would be "
                         "one off: leave the flag out" % (_flag(zero_based), model_dir,
                                                          "zero" if recorded else "one",
                                                          _flag(recorded)))
    return recorded


def _flag(zero_based):
    return "true" if zero_based else "false"


def load_for_model(path, model, zero_based, check_labels=True, read=None):
    """Read a file for a trained model: with the index base :func:`index_base` gave, at the
    model's width (``check_labels=False`` for predictions, which do not use the labels).

    Features beyond the width, which the training never saw, are dropped with a warning
    (:func:`to_model_width`), as LIBLINEAR's predict drops them. ``read``: the reader,
    ``read(paths, zero_based=..., check_labels=...) -> (X, labels, zero_based)``
    (default :func:`load`; multi-label files have their own).
    """
    # 'auto' alone decides per file: a zero-based training file without
    # feature 0 reads as one-based, a test file with feature 0 as zero-based,
    # and every column would be shifted by one against the model's.
    X, y, resolved = (read or load)([path], zero_based=zero_based, check_labels=check_labels)
    if zero_based == "auto":
        warn_if_base_guessed(model, X, resolved, path)
    return to_model_width(X, model.n_features_in_, [path], resolved), y


def unseen_labels_note(y, classes):
    """'note: ...' on the labels of ``y`` that are not among a model's ``classes``
    (another label convention, 0..9 against 1..10, say), or None."""
    unseen = ~np.isin(y, classes)
    if not unseen.any():
        return None
    return ("note: %d of %d samples have labels the model never saw (e.g. %s; its classes: "
            "%s): they count as errors in accuracy, auc leaves them out and log_loss is not "
            "defined" % (unseen.sum(), len(y), format_label(y[unseen][0]),
                         ", ".join(format_label(c) for c in classes[:10])
                         + (", ..." if len(classes) > 10 else "")))


def warn_if_base_guessed(model, X, zero_based, path):
    """Log a warning where a model with no recorded index base (trained in Python on a
    matrix) reads a file whose base 'auto' could only guess (as the estimators warn)."""
    from ..sklearn._data import base_is_a_guess
    if base_is_a_guess(model, X, zero_based):
        logger.warning("%s: the model was trained on a matrix (in Python), so this file's index "
                       "base is unknown; it was read as one-based (it has no feature 0). If its "
                       "indices start at 0, every column is one off: pass --zero-based true "
                       "(--zero-based false reads it as one-based without this warning)" % path)


def check_finite_weights(model):
    """Raise InputError, before a save, when training left a NaN or infinite weight (the
    estimators' own check: partial_fit, which train runs an epoch at a time, reads the
    weights only when an epoch's loss is not finite)."""
    from ..sklearn._training import raise_if_diverged
    try:
        raise_if_diverged(model, model.module_, always=True)
    except ValueError as err:
        raise InputError("%s; no model was written" % err) from None


def load_model(model_dir):
    """The estimator saved in ``model_dir`` (InputError when there is none)."""
    from ..sklearn import is_model_dir, load as load_estimator
    if not is_model_dir(model_dir):
        raise InputError("--model-dir %s is not a gluon-sparse model directory (train writes one)"
                         % model_dir)
    return load_estimator(model_dir)


def format_label(value):
    """A label as text: integral floats without their '.0'."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def check_output_file(path, inputs=()):
    """Raise InputError unless ``path`` is '-' or a file in an existing directory that is
    none of the ``inputs`` (writing the predictions over the data read would lose it)."""
    if path == "-":
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise InputError("cannot write %s: directory %s does not exist" % (path, directory))
    if os.path.isdir(path):
        raise InputError("cannot write %s: it is a directory" % path)
    target = os.path.realpath(path)
    if not os.path.isdir(os.path.dirname(target)):
        raise InputError("cannot write %s: it links to %s, whose directory does not exist"
                         % (path, target))
    if (os.path.isfile(target) or not os.path.exists(target)) and not os.access(
            os.path.dirname(target), os.W_OK | os.X_OK):
        # The file is replaced by a rename in its directory: found out before the
        # whole prediction ran, not after, naming a temporary file.
        raise InputError("cannot write %s: its directory %s is not writable"
                         % (path, os.path.dirname(target)))
    for source in inputs:
        if os.path.exists(path) and os.path.samefile(path, source):
            raise InputError("--out %s is the input file %s: it would be overwritten; choose "
                             "another output file" % (path, source))


def _is_stdout(target):
    try:
        return os.path.samestat(target, os.fstat(sys.stdout.fileno()))
    except (AttributeError, OSError, ValueError):  # no real stdout (captured, closed)
        return False


def write_lines(path, lines):
    """Write text lines to ``path``, or to stdout when ``path`` is '-'.

    A regular file (new, or the target of a symbolic link, which stays a link)
    is replaced atomically, with its permission bits; the file this process's
    stdout goes to (``/dev/stdout``, or the log that ``>>`` appends to) is
    written through stdout; anything else that exists (a FIFO, ``/dev/null``,
    a process substitution's ``/dev/fd/N``) is written to directly, never
    replaced by a file.
    """
    try:
        target = os.stat(path) if path != "-" else None
    except FileNotFoundError:
        target = None
    if path == "-" or (target is not None and _is_stdout(target)):
        sys.stdout.writelines(line + "\n" for line in lines)
        sys.stdout.flush()
        return True
    if target is not None and not stat.S_ISREG(target.st_mode):
        with open(path, "w") as f:
            f.writelines(line + "\n" for line in lines)
        return False
    with atomic_file(os.path.realpath(path), "w") as f:
        f.writelines(line + "\n" for line in lines)
    return False
