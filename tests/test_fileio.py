"""gluon_sparse._fileio: whole-file replacement and the permissions of what it publishes."""
import os
import stat

import pytest

from gluon_sparse import _fileio


@pytest.fixture
def umask_027():
    previous = os.umask(0o027)
    yield
    os.umask(previous)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_atomic_file_replaces_on_success_and_keeps_the_old_file_on_error(tmp_path):
    target = tmp_path / "out.txt"
    with _fileio.atomic_file(target) as f:
        f.write("first\n")
    with pytest.raises(RuntimeError):
        with _fileio.atomic_file(target) as f:
            f.write("half")
            raise RuntimeError("interrupted")
    assert target.read_text() == "first\n"
    assert sorted(os.listdir(tmp_path)) == ["out.txt"]  # no temporary file left


def test_atomic_file_gives_the_mode_open_would_give(tmp_path, umask_027):
    # tempfile.mkstemp creates 0600; a published file follows the umask as open() does.
    with _fileio.atomic_file(tmp_path / "out.bin", "wb") as f:
        f.write(b"x")
    with open(tmp_path / "plain.bin", "wb") as f:
        f.write(b"x")
    assert _mode(tmp_path / "out.bin") == _mode(tmp_path / "plain.bin") == 0o640


def test_atomic_file_keeps_the_mode_of_the_file_it_replaces(tmp_path):
    path = tmp_path / "shared.txt"
    path.write_text("old")
    os.chmod(path, 0o604)
    with _fileio.atomic_file(path, "w") as f:
        f.write("new")
    assert path.read_text() == "new" and _mode(path) == 0o604


def test_versioned_directory_gives_the_modes_mkdir_would_give(tmp_path, umask_027):
    def write(directory):
        with open(os.path.join(directory, "a.txt"), "w") as f:
            f.write("a")

    model = tmp_path / "model"
    for _ in range(2):  # the first save builds the directory, the second adds a version
        version = _fileio.write_versioned_directory(str(model), write)
        assert _mode(version) == 0o750
        assert _mode(os.path.join(version, "a.txt")) == 0o640
        assert _mode(model / _fileio.POINTER_FILE) == 0o640
    assert _mode(model) == 0o750


def test_a_short_write_of_ndarrays_names_the_file(tmp_path, monkeypatch):
    """MXNet reports a full disk as 'Check failed: ... FileStream.Write incomplete'."""
    import errno
    import mxnet as mx

    def full_disk(path, arrays):
        raise mx.base.MXNetError("Check failed: std::fwrite(ptr, 1, size, fp_) == size: "
                                 "FileStream.Write incomplete")
    monkeypatch.setattr(mx.nd, "save", full_disk)
    with pytest.raises(OSError, match="cut short .*disk full") as caught:
        _fileio.save_ndarrays(str(tmp_path / "net.params"), {"a": mx.nd.ones((2,))})
    assert caught.value.errno == errno.ENOSPC
    assert caught.value.filename == str(tmp_path / "net.params")
    # Through atomic_path (save_compact_parameters), the destination is named, not the
    # temporary beside it that was being written.
    with pytest.raises(OSError, match=r"could not write \S*/net.params: the write was cut short"):
        with _fileio.atomic_path(str(tmp_path / "net.params")) as tmp:
            _fileio.save_ndarrays(tmp, {"a": mx.nd.ones((2,))})
    assert os.listdir(tmp_path) == []


def test_writes_go_through_a_symbolic_link(tmp_path):
    # os.replace swapped the link for a file: the file it named kept the old content.
    target = tmp_path / "run-042.txt"
    target.write_text("old")
    link = tmp_path / "latest.txt"
    os.symlink(target.name, link)
    with _fileio.atomic_file(str(link)) as f:
        f.write("new")
    assert os.path.islink(link) and target.read_text() == "new"
    with _fileio.atomic_path(str(link)) as tmp:
        with open(tmp, "w") as f:
            f.write("newer")
    assert os.path.islink(link) and target.read_text() == "newer"


def test_two_first_saves_of_one_new_directory_both_land(tmp_path):
    """A first save that finishes while another is still writing: the other's temporary
    directory is alive (its lock is held), not a crash's leftover. It was removed, and the
    other save failed with its trained model lost; now it lands as the next version."""
    import threading
    target = str(tmp_path / "model")
    slow_started, fast_done = threading.Event(), threading.Event()
    errors = []

    def slow_write(directory):
        slow_started.set()
        assert fast_done.wait(30)
        with open(os.path.join(directory, "who"), "w") as f:
            f.write("slow")

    def fast_write(directory):
        with open(os.path.join(directory, "who"), "w") as f:
            f.write("fast")

    def save(write):
        try:
            _fileio.write_versioned_directory(target, write)
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    slow = threading.Thread(target=save, args=(slow_write,), daemon=True)
    slow.start()
    assert slow_started.wait(30)
    save(fast_write)
    fast_done.set()
    slow.join(30)
    assert not slow.is_alive() and errors == []
    assert _fileio._read_pointer(target) == "v-000002"
    with open(os.path.join(target, "v-000002", "who")) as f:
        assert f.read() == "slow"
    assert [n for n in os.listdir(tmp_path) if n != "model"] == []  # nothing left beside it


def test_a_killed_writers_temporary_is_removed_by_the_next_write(tmp_path):
    """A writer killed before its rename leaves its temporary; the next write of the same
    file removes it once that process is gone (checkpoints piled up two copies a kill),
    and leaves a live writer's alone."""
    import subprocess
    import sys
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    target = tmp_path / "net.params"
    left = tmp_path / (".net.params.tmp-%d-abc123de" % dead.pid)
    live = tmp_path / (".net.params.tmp-%d-def456gh" % os.getpid())
    # Names that only begin like one: a user's file, another file's live temporary,
    # a "pid" too large for a process id.
    lookalikes = [".net.params.tmp-%d-notes" % dead.pid,
                  ".net.params.tmp-%d-b.tmp-%d-abc123de" % (dead.pid, os.getpid()),
                  ".net.params.tmp-99999999999999999999-abc123de",
                  ".other.tmp-%d-abc123de" % dead.pid]
    for path in [left, live] + [tmp_path / name for name in lookalikes]:
        path.write_bytes(b"partial")
    with _fileio.atomic_file(str(target), "wb") as f:
        f.write(b"whole")
    assert target.read_bytes() == b"whole"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["net.params", live.name] + lookalikes)


def test_a_read_only_file_is_replaced_and_stays_read_only(tmp_path):
    """The temporary takes the destination's mode after it is written: a 0444 mode set
    before the writes refused them (for a user other than root)."""
    target = tmp_path / "pred.txt"
    target.write_text("old")
    os.chmod(target, 0o444)
    for write in ("file", "path"):
        if write == "file":
            with _fileio.atomic_file(str(target)) as f:
                f.write("new")
                assert stat.S_IMODE(os.fstat(f.fileno()).st_mode) == 0o600
        else:
            with _fileio.atomic_path(str(target)) as tmp:
                assert stat.S_IMODE(os.stat(tmp).st_mode) == 0o600
                with open(tmp, "w") as f:
                    f.write("newer")
        assert stat.S_IMODE(os.stat(target).st_mode) == 0o444
    assert target.read_text() == "newer"


def test_atomic_path_gives_a_name_to_write(tmp_path):
    """For writers that take a file name (mx.nd.save): all or nothing, as atomic_file."""
    target = tmp_path / "a.params"
    with _fileio.atomic_path(str(target)) as tmp:
        with open(tmp, "wb") as f:
            f.write(b"one")
        assert not target.exists()
    assert target.read_bytes() == b"one"
    with pytest.raises(RuntimeError):
        with _fileio.atomic_path(str(target)) as tmp:
            with open(tmp, "wb") as f:
                f.write(b"two")
            raise RuntimeError
    assert target.read_bytes() == b"one" and os.listdir(tmp_path) == ["a.params"]


def test_a_link_to_a_model_directory_is_that_directory(tmp_path):
    """Versions are written inside the link's target; the link was 'not a model
    directory', refused by save and by train --model-dir."""
    real, link = tmp_path / "real", tmp_path / "link"

    def write(text):
        def writer(directory):
            with open(os.path.join(directory, "f"), "w") as f:
                f.write(text)
        return writer

    _fileio.write_versioned_directory(str(real), write("one"))
    os.symlink(real, link)
    assert _fileio.versioned_directory_state(str(link)) == "versioned"
    _fileio.write_versioned_directory(str(link), write("two"))
    assert os.path.islink(link) and _fileio._read_pointer(str(real)) == "v-000002"
    assert (real / "v-000002" / "f").read_text() == "two"
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    assert _fileio.versioned_directory_state(str(tmp_path / "dangling")) == "other"


def test_an_error_without_a_file_name_is_given_the_directorys(tmp_path):
    """A full disk while json.dump writes: OSError(ENOSPC) named no file."""
    import errno

    def write(directory):
        raise OSError(errno.ENOSPC, "No space left on device")

    for existing in (False, True):
        target = tmp_path / ("m%d" % existing)
        if existing:
            _fileio.write_versioned_directory(str(target), lambda d: None)
        with pytest.raises(OSError, match=r"could not write .*m%d: No space left" % existing) \
                as info:
            _fileio.write_versioned_directory(str(target), write)
        assert info.value.errno == errno.ENOSPC


def test_a_temporary_that_cannot_be_made_is_named_by_its_destination(tmp_path, monkeypatch):
    # A read-only directory failed in mkstemp, before the rewrap: the message named
    # '.f.tmp-<pid>-xxxxxxxx'. (Tests run as root, whom a mode does not stop.)
    import errno
    import tempfile

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied",
                              str(tmp_path / ".f.tmp-1-abcdefgh"))
    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(PermissionError, match=r"could not write \S*/f: Permission denied") as info:
        with _fileio.atomic_file(str(tmp_path / "f")) as f:
            f.write("x")
    assert ".tmp-" not in str(info.value)
