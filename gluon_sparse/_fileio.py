"""Crash-safe file writing shared by the whole package.

Every file gluon-sparse writes for the user (predictions, model files, cache
entries) goes through :func:`atomic_file`: the content is written to a
temporary file beside the destination, flushed to disk and renamed over it in
one ``os.replace``, so a reader sees the old file or the new one, never a
half-written one, and a crash leaves at most a hidden temporary file behind
(named ``.<name>.tmp-*``, removed when the write fails in Python).
"""
import contextlib
import os
import tempfile

__all__ = ["atomic_file", "fsync_directory"]


def fsync_directory(directory):
    """Flush a directory's entries (a rename) to disk, where the platform allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(path, mode="w", **open_kwargs):
    """Open a temporary file that replaces ``path`` when the block ends without error.

    Parameters
    ----------
    path : str
        Destination. Its directory must exist.
    mode : {'w', 'wb'}
        Text or binary.
    **open_kwargs
        Passed to :func:`open` (e.g. ``encoding``).

    Yields
    ------
    file object
        Write the whole content to it. On an exception the temporary file is
        removed and ``path`` is left as it was.
    """
    if mode not in ("w", "wb"):
        raise ValueError("atomic_file writes whole files: mode must be 'w' or 'wb', not %r"
                         % (mode,))
    path = os.path.abspath(path)
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        raise FileNotFoundError("cannot write %s: directory %s does not exist"
                                % (path, directory))
    handle, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".tmp-",
                                   dir=directory)
    try:
        with os.fdopen(handle, mode, **open_kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise
    fsync_directory(directory)
