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
    with pytest.raises(OSError, match="could not write .*net.params: .*disk full") as caught:
        _fileio.save_ndarrays(str(tmp_path / "net.params"), {"a": mx.nd.ones((2,))})
    assert caught.value.errno == errno.ENOSPC
