"""sensviz.files: the one atomic write, and the checks that refuse a place that must not be written."""

import os
import stat

import pytest
from helpers.core import leftovers, read_only

from sensviz.files import check_file, check_folder, write_atomic


def test_write_atomic_writes_bytes_or_through_a_writer_and_keeps_the_mode(tmp_path):
    target = tmp_path / "a.bin"
    assert write_atomic(target, b"one") == target and target.read_bytes() == b"one"
    assert stat.S_IMODE(target.stat().st_mode) & 0o044  # an ordinary file, not a private temporary (0600)
    target.chmod(0o600)
    write_atomic(target, lambda file: file.write(b"two"))
    assert target.read_bytes() == b"two" and stat.S_IMODE(target.stat().st_mode) == 0o600
    write_atomic(tmp_path / "new" / "deeper" / "b.bin", b"x")  # missing folders are made
    assert (tmp_path / "new" / "deeper" / "b.bin").read_bytes() == b"x"
    assert leftovers(tmp_path) == ["a.bin", "new"]


def test_a_failing_writer_leaves_the_old_file_and_nothing_else(tmp_path):
    target = tmp_path / "a.bin"
    target.write_bytes(b"old")

    def failing(file):
        file.write(b"half of the new content")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, failing)
    assert target.read_bytes() == b"old" and leftovers(tmp_path) == ["a.bin"]
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C in the middle of a write
        write_atomic(tmp_path / "made" / "b.bin", lambda file: (_ for _ in ()).throw(KeyboardInterrupt))
    assert leftovers(tmp_path) == ["a.bin"]  # neither a temporary nor the folder made for it


def test_a_read_only_folder_is_refused_and_left_as_it_was(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    (folder / "a.bin").write_bytes(b"old")
    with read_only(folder):
        with pytest.raises(ValueError, match="cannot write in the folder"):
            check_file(folder / "new.bin")
        with pytest.raises(ValueError, match="cannot write in the folder"):
            write_atomic(folder / "a.bin", b"new")
        with pytest.raises(ValueError, match="cannot write in this folder"):
            check_folder(folder)
    assert leftovers(folder) == ["a.bin"] and (folder / "a.bin").read_bytes() == b"old"


def test_devices_fifos_folders_and_links_to_them_are_refused_untouched(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "to-null").symlink_to("/dev/null")
    (tmp_path / "to-fifo").symlink_to(fifo)
    (tmp_path / "dir").mkdir()
    for path, kind in [("/dev/null", "a character device"), (fifo, "a fifo"), (tmp_path / "dir", "a folder"),
                       (tmp_path / "to-null", "a character device"), (tmp_path / "to-fifo", "a fifo")]:
        with pytest.raises(ValueError, match=f"is {kind}; name a regular file or a new path"):
            write_atomic(path, b"x")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and stat.S_ISFIFO(fifo.stat().st_mode)
    assert (tmp_path / "to-null").is_symlink() and (tmp_path / "to-fifo").is_symlink()
    assert leftovers(tmp_path / "dir") == []


def test_a_link_to_a_file_is_written_through_and_stays_a_link(tmp_path):
    (tmp_path / "real.txt").write_text("old")
    (tmp_path / "link.txt").symlink_to("real.txt")
    write_atomic(tmp_path / "link.txt", b"new")
    assert (tmp_path / "link.txt").is_symlink() and (tmp_path / "real.txt").read_text() == "new"


def test_suffix_and_folder_checks(tmp_path):
    with pytest.raises(ValueError, match="must end in .npz"):
        check_file(tmp_path / "dump", ".npz")
    assert check_file(tmp_path / "dump.npz", ".npz") == tmp_path / "dump.npz"
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="is a file; name a folder"):
        check_folder(tmp_path / "file")
    with pytest.raises(ValueError, match="is a character device; name a folder"):
        check_folder("/dev/null")
    with pytest.raises(ValueError, match="file is not a folder|Not a directory"):
        check_file(tmp_path / "file" / "inside.txt")
    assert check_folder(tmp_path / "new" / "results") == tmp_path / "new" / "results"
    assert not (tmp_path / "new").exists()  # a check makes nothing


def test_a_path_that_cannot_be_written_is_refused_before_any_work(tmp_path):
    from sensviz.files import check_writable

    assert check_writable(tmp_path / "new" / "deeper" / "m.safetensors") == tmp_path / "new" / "deeper" / "m.safetensors"
    assert not (tmp_path / "new").exists()  # the probe's folders are gone again
    with pytest.raises(ValueError, match="cannot write"):
        check_writable("/proc/x.safetensors")
