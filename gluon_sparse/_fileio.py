"""Crash-safe file writing shared by the whole package.

Every file gluon-sparse writes for the user (predictions, model files, cache
entries) goes through :func:`atomic_file`: the content is written to a
temporary file beside the destination, flushed to disk and renamed over it in
one ``os.replace``, so a reader sees the old file or the new one, never a
half-written one, and a crash leaves at most a hidden temporary file behind
(named ``.<name>.tmp-<pid>-*``, removed when the write fails in Python, and by
the next write of the same file once the process that left it is gone).

A set of files that must change together (a model: its parameters and its
description) is a *versioned directory*, written by
:func:`write_versioned_directory` and read by :func:`read_versioned_directory`::

    model/
        CURRENT          "v-000007\n": the version readers use, replaced atomically
        v-000007/        the current version: immutable once named
        v-000006/        the previous one, kept until the next save so that a
                         reader that resolved it just before the switch can finish
        .lock            held (flock) by a writer for the whole save

A new version is written in full under a hidden ``.tmp-*`` name, flushed,
renamed to ``v-<n>`` and only then named by ``CURRENT``, so at every instant,
and after a crash at any point, ``CURRENT`` names a whole version. Each save
removes what crashed saves left (``.tmp-*``, versions never named) and every
version older than the previous one.
"""
import contextlib
import errno
import os
import re
import shutil
import stat
import tempfile
import time
import zlib

try:
    import fcntl
except ImportError:  # not POSIX: saves of one directory must then not overlap
    fcntl = None

__all__ = ["atomic_file", "atomic_path", "fsync_directory", "process_exists", "save_ndarrays",
           "write_versioned_directory", "read_versioned_directory", "versioned_directory_state",
           "POINTER_FILE"]

POINTER_FILE = "CURRENT"
_LOCK_FILE = ".lock"
_TMP_PREFIX = ".tmp-"
_VERSION = re.compile(r"^v-(\d{6,})$")

# Tests set this to a function called with the name of each commit point of a
# versioned save ("version-renamed", "pointer-replaced", "cleaned"), e.g. to
# SIGKILL the process right there.
_fault_hook = None


def _process_umask():
    """The process's umask, read without changing it where Linux says it."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: read by setting (briefly process-wide)
    os.umask(mask)
    return mask


def _publish_mode(path, directory=False):
    """Give a file or directory made by ``tempfile`` (0600 / 0700) the mode ``open`` or
    ``os.mkdir`` would have given it, so that what is renamed into place is as readable
    as any file the user writes."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_process_umask())


def _fault_point(stage):
    if _fault_hook is not None:
        _fault_hook(stage)


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


def save_ndarrays(path, arrays):
    """``mx.nd.save(path, arrays)``, with a failed write an OSError naming the file.

    MXNet reports a short write (a full disk) as a C++ check failure that names
    neither the file nor the cause.
    """
    import mxnet as mx
    try:
        mx.nd.save(path, arrays)
    except mx.base.MXNetError as err:
        if "Write incomplete" not in str(err):
            raise
        raise OSError(errno.ENOSPC, "the write was cut short (is the disk full?)",
                      path) from None


def file_crc32(path):
    """The CRC-32 (zlib's) of the file at ``path``, read 16 MB at a time."""
    crc = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            crc = zlib.crc32(block, crc)
    return crc


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
        removed and ``path`` is left as it was. A file replaced keeps its
        permission bits; a new one gets those ``open`` would give it.
    """
    if mode not in ("w", "wb"):
        raise ValueError("atomic_file writes whole files: mode must be 'w' or 'wb', not %r"
                         % (mode,))
    with _replacing(path) as (handle, _):
        with os.fdopen(handle, mode, **open_kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())


@contextlib.contextmanager
def atomic_path(path):
    """The name of a temporary file that replaces ``path`` when the block ends without error.

    For writers that take a file name (``mx.nd.save``); otherwise as
    :func:`atomic_file`.
    """
    with _replacing(path) as (handle, tmp):
        os.close(handle)
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)  # still mkstemp's 0600, ours: the mode comes last
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _replacing(path):
    """``(open descriptor, name)`` of a temporary beside ``path`` that the caller writes
    and flushes; it then takes ``path``'s permission bits (a new file: those ``open``
    gives) and replaces it. The temporary, ``.<name>.tmp-<pid>-`` and mkstemp's 8 random
    characters, is removed on an exception; what a killed writer left (its process
    gone) by the next write of ``path``.

    A symbolic link is written through: the file it points to is replaced (beside
    it, in its own directory), the link stays (replacing the link itself left the
    file it named with the old content). An OSError while creating, writing or
    replacing names ``path``, not the temporary."""
    given = path
    path = os.path.realpath(path)
    directory, name = os.path.split(path)
    if not os.path.isdir(directory):
        raise FileNotFoundError("cannot write %s: directory %s does not exist"
                                % (path, directory))
    _remove_dead_writers_temporaries(directory, name)
    try:
        handle, tmp = tempfile.mkstemp(prefix="%s%d-" % (_temporary_prefix(name), os.getpid()),
                                       dir=directory)
    except OSError as err:  # a read-only directory, most often
        raise OSError(err.errno, "could not write %s: %s"
                      % (given, err.strerror or err)) from err
    try:
        yield handle, tmp
        # Only now: a read-only mode (0444) set earlier would refuse the writes.
        try:
            os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))  # a 0640 file stays 0640
        except FileNotFoundError:
            _publish_mode(tmp)
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        if isinstance(err, OSError) and err.errno is not None and err.filename in (None, tmp):
            raise OSError(err.errno, "could not write %s: %s"
                          % (given, err.strerror or err)) from err
        raise
    fsync_directory(directory)


def _temporary_prefix(name):
    return "." + name + ".tmp-"


def _remove_dead_writers_temporaries(directory, name):
    """Remove the temporaries of ``path`` (exactly ``.<name>.tmp-<pid>-`` and mkstemp's 8
    characters) whose writer process no longer runs."""
    own = re.compile(r"^%s(\d+)-[a-z0-9_]{8}$" % re.escape(_temporary_prefix(name)))
    try:
        entries = os.listdir(directory)
    except OSError:
        return
    for entry in entries:
        match = own.match(entry)
        if match and not process_exists(int(match.group(1))):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(directory, entry))


def process_exists(pid):
    """Whether process ``pid`` runs (someone else's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # someone else's, or no pid at all: not to be taken for gone
    return True


def _read_pointer(path):
    """The version ``path/CURRENT`` names, or None when there is no pointer."""
    try:
        with open(os.path.join(path, POINTER_FILE)) as f:
            name = f.read().strip()
    except FileNotFoundError:
        return None
    if not _VERSION.match(name):
        raise ValueError("%s is corrupt: it names %r, not a version directory"
                         % (os.path.join(path, POINTER_FILE), name))
    return name


def _is_own_entry(name):
    # ".CURRENT.tmp-*": atomic_file's temporary, left by a kill while replacing the pointer.
    return (name in (POINTER_FILE, _LOCK_FILE) or name.startswith(_TMP_PREFIX)
            or name.startswith("." + POINTER_FILE + ".tmp-") or bool(_VERSION.match(name)))


def check_versioned_replaceable(path, legacy_files=()):
    """Raise unless the versioned directory ``path`` (state ``'versioned'``) holds only
    what its writer puts there (``legacy_files`` too: the flat layout's files stay
    until the save after the first versioned one), with a readable pointer.

    A foreign directory with a file named ``CURRENT`` (a LevelDB's) is not one to
    replace, and a corrupt pointer would fail the replacing save only at its end.

    Raises
    ------
    FileExistsError
        If ``path`` holds entries no versioned directory has.
    ValueError
        If its ``CURRENT`` does not name a version directory.
    """
    foreign = sorted(name for name in os.listdir(path)
                     if not _is_own_entry(name) and name not in legacy_files)
    if foreign:
        raise FileExistsError("refusing to replace %s: besides a %s file it holds %s, which no "
                              "gluon-sparse model directory has"
                              % (path, POINTER_FILE, ", ".join(foreign[:5])
                                 + (", ..." if len(foreign) > 5 else "")))
    _read_pointer(path)


def versioned_directory_state(path, legacy_files=()):
    """What ``path`` holds, for a writer deciding whether it may replace it.

    Parameters
    ----------
    path : str or os.PathLike
    legacy_files : sequence of str
        Names of the files of the flat layout used before versioned directories.

    Returns
    -------
    {'missing', 'empty', 'versioned', 'legacy', 'leftovers', 'other'}
        ``'versioned'``: a ``CURRENT`` pointer; ``'legacy'``: the flat files
        (``legacy_files[0]`` among them) and nothing else; ``'leftovers'``:
        only what a crashed first save leaves; ``'other'``: anything else
        (a file, a directory with foreign content), which a writer must not replace.
    """
    path = os.fspath(path)
    if not os.path.lexists(path):
        return "missing"
    # A symbolic link to a directory is that directory: versions are written inside it.
    if not os.path.isdir(path):
        return "other"
    entries = os.listdir(path)
    if not entries:
        return "empty"
    if POINTER_FILE in entries:
        return "versioned"
    if all(_is_own_entry(name) for name in entries):
        return "leftovers"
    if legacy_files and legacy_files[0] in entries and all(
            _is_own_entry(name) or name in legacy_files for name in entries):
        return "legacy"
    return "other"


@contextlib.contextmanager
def _writer_lock(path):
    """Hold ``path/.lock`` exclusively: one writer at a time (released by the OS on a crash)."""
    fd = os.open(os.path.join(path, _LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the flock


def _fsync_tree(directory):
    for root, _, files in os.walk(directory):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_directory(root)


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def write_versioned_directory(path, write, legacy_files=()):
    """Write a new version of the versioned directory ``path`` and make it current.

    Parameters
    ----------
    path : str or os.PathLike
        The directory; created if missing. An existing one must be a
        versioned directory, empty, a flat ``legacy_files`` layout or the
        leftovers of a crashed first save: anything else is refused.
    write : callable
        ``write(directory)`` writes the version's files into the new, empty
        ``directory`` (with ordinary ``open``: they are flushed to disk here).
        If it raises, nothing changes at ``path`` but a temporary directory
        removed on the way out (or, after a crash, by the next save).
    legacy_files : sequence of str
        Files of a flat pre-versioning layout: kept while they are the
        previous version, removed by the save after.

    Returns
    -------
    str
        The new version's directory.

    Raises
    ------
    FileExistsError
        If ``path`` exists and is something else.
    """
    path = os.path.abspath(os.fspath(path))
    state = versioned_directory_state(path, legacy_files)
    if state == "other":
        raise FileExistsError("refusing to replace %s: it exists and is not a %s"
                              % (path, "directory" if not os.path.isdir(path) else
                                 "model directory (it holds other files)"))
    if state == "missing":
        written = _write_first_version(path, write)
        if written is not None:
            return written
        # Another process created the directory meanwhile: save as a new version.
    with _writer_lock(path):
        previous = _read_pointer(path)
        tmp = tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=path)
        try:
            _publish_mode(tmp, directory=True)
            _write_naming_path(write, tmp, path)
            _fsync_tree(tmp)
            numbers = [int(m.group(1)) for m in map(_VERSION.match, os.listdir(path)) if m]
            version = "v-%06d" % (max(numbers, default=0) + 1)
            os.rename(tmp, os.path.join(path, version))
        except BaseException:
            _remove(tmp)
            raise
        fsync_directory(path)
        _fault_point("version-renamed")
        with atomic_file(os.path.join(path, POINTER_FILE)) as f:
            f.write(version + "\n")
        _fault_point("pointer-replaced")
        keep = {POINTER_FILE, _LOCK_FILE, version, previous}
        if previous is None:
            keep.update(legacy_files)  # the flat model stays readable until the next save
        for name in os.listdir(path):
            if name not in keep and (_is_own_entry(name) or name in legacy_files):
                _remove(os.path.join(path, name))
        _remove_old_layout_leftovers(path)
        _fault_point("cleaned")
    return os.path.join(path, version)


def _write_naming_path(write, directory, path):
    """``write(directory)``; an OSError (a full disk while closing a file, say) is raised
    again naming the directory being saved, ``path``, rather than a file of the
    temporary version being built."""
    try:
        write(directory)
    except OSError as err:
        if err.errno is None:
            raise
        raise OSError(err.errno, "could not write %s: %s" % (path, err.strerror or err),
                      path) from err


def _write_first_version(path, write):
    """Create ``path`` whole: its first version and pointer built beside it, one rename.

    Nothing appears at ``path`` before the model is complete; an interrupted
    write leaves only a hidden ``.<name>.tmp-*`` beside it, removed by the
    next save. Returns None if ``path`` appeared meanwhile.
    """
    parent, base = os.path.split(path)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="." + base + ".tmp-", dir=parent)
    # Held for the whole save, it tells a concurrent first save of the same
    # directory that this one is alive (not a crash's leftover to remove); renamed
    # with the directory, it is then the directory's writer lock.
    lock = os.open(os.path.join(tmp, _LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        return _write_first_version_locked(path, tmp, write)
    finally:
        os.close(lock)


def _write_first_version_locked(path, tmp, write):
    """:func:`_write_first_version` in its temporary directory ``tmp``, whose lock is held."""
    parent = os.path.dirname(path)
    try:
        _publish_mode(tmp, directory=True)
        version = "v-%06d" % 1
        os.mkdir(os.path.join(tmp, version))
        _write_naming_path(write, os.path.join(tmp, version), path)
        with open(os.path.join(tmp, POINTER_FILE), "w") as f:
            f.write(version + "\n")
        _fsync_tree(tmp)
        try:
            os.rename(tmp, path)
        except OSError:
            if not os.path.lexists(path):
                raise
            _remove(tmp)
            return None
    except BaseException:
        _remove(tmp)
        raise
    fsync_directory(parent)
    _fault_point("pointer-replaced")
    _remove_old_layout_leftovers(path)
    _fault_point("cleaned")
    return os.path.join(path, version)


def _remove_old_layout_leftovers(path):
    """Remove the hidden directories that crashed saves left beside ``path``.

    ``.<name>.tmp-*``: an interrupted first save; ``.<name>.old-*``: the
    copies of the flat layout's saves, which renamed the old model aside.
    A first save of the same new directory running at this moment in another
    process is not serialised by the directory's lock, which does not exist
    yet: it holds a lock in its temporary, and that temporary is kept.
    """
    parent, base = os.path.split(path)
    for name in os.listdir(parent):
        entry = os.path.join(parent, name)
        if name.startswith("." + base + ".tmp-") and _save_in_progress(entry):
            continue
        if (name.startswith("." + base + ".tmp-") or name.startswith("." + base + ".old-")) \
                and os.path.isdir(entry):
            _remove(entry)


# A first save's temporary directory younger than this, without its lock file yet
# (made a moment before it), is taken for a live save.
_UNLOCKED_GRACE_SECONDS = 60


def _save_in_progress(tmp):
    """Whether another process's first save is writing ``tmp`` now (it holds its lock)."""
    if fcntl is None:
        return False
    try:
        fd = os.open(os.path.join(tmp, _LOCK_FILE), os.O_RDONLY)
    except FileNotFoundError:
        try:
            return time.time() - os.stat(tmp).st_mtime < _UNLOCKED_GRACE_SECONDS
        except OSError:
            return False
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases the flock if it was taken
    return False


def read_versioned_directory(path, names, legacy_files=(), attempts=100):
    """Read the files ``names`` of the current version of ``path``, all from one version.

    The pointer is read once and every file opened from the version it
    names. If a save removed that version in between (readers take no
    lock, and a version is kept until the save after the one that replaced
    it), the read starts again from the new pointer.

    Parameters
    ----------
    path : str or os.PathLike
    names : sequence of str
        Files to read; each must exist in the version.
    legacy_files : sequence of str
        A directory without ``CURRENT`` holding ``legacy_files[0]`` is read as
        one flat version.
    attempts : int
        How many versions to try while saves keep replacing them.

    Returns
    -------
    version_dir : str
        The directory the files were read from (for messages).
    contents : dict of str to bytes

    Raises
    ------
    FileNotFoundError
        If ``path`` is not a versioned directory (nor a legacy one), or a file
        is missing from its current version.
    """
    path = os.fspath(path)
    for _ in range(attempts):
        version = _read_pointer(path)
        if version is None:
            if not (legacy_files and os.path.isfile(os.path.join(path, legacy_files[0]))):
                raise FileNotFoundError("%s is not a model directory (no %s%s)"
                                        % (path, POINTER_FILE, " nor %s" % legacy_files[0]
                                           if legacy_files else ""))
            directory = path
        else:
            directory = os.path.join(path, version)
        handles = {}
        try:
            for name in names:
                handles[name] = open(os.path.join(directory, name), "rb")
        except FileNotFoundError:
            if _read_pointer(path) != version:
                continue  # replaced while we opened it: read the new one
            raise
        finally:
            if len(handles) < len(names):
                for handle in handles.values():
                    handle.close()
        # Open files stay readable even if a save removes the version now.
        contents = {}
        for name, handle in handles.items():
            with handle:
                contents[name] = handle.read()
        return directory, contents
    raise RuntimeError("%s was replaced %d times while being read" % (path, attempts))
