"""Files on disk: one way to write a file so that no reader ever sees half of it.

Every writer of the library and of the `sensviz` command (checkpoints, sweep records and tables,
the zoo manifest, reports and handouts, inspect dumps, slices, the kept-model store, the training
jobs' files) goes through `write_atomic`: the bytes go to a new temporary file beside the target,
which then replaces the target in one step (`os.replace`), so a reader sees the old content or
the new one, and a failure (an error, Ctrl-C) leaves the target as it was and no temporary file.

`FolderLock` lets the stores on a shared data folder (the kept models, the classes: several web
servers and the Ray queue's process on one folder) change their files one writer at a time.

`check_file` and `check_folder` refuse, in one line, a place that must not be written: a device,
a fifo, a socket, a folder where a file is wanted (or a file where a folder is), a link to one of
those, or a folder that cannot be written. The command checks its output paths with them before
any work starts; `write_atomic` checks again just before it writes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

Writer = Callable[[BinaryIO], object]
"""Writes a file's content into an open binary file, e.g. `lambda f: frame.to_parquet(f)`."""


def _kind(mode: int) -> str:
    """What kind of file `mode` describes, in words."""
    kinds = ((stat.S_ISREG, "a file"), (stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a fifo"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _existing_ancestor(path: Path) -> Path:
    """The nearest folder above `path` that exists (`path` itself excluded)."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    return parent


def _check_writable_folder(path: Path, shown) -> None:
    """`path`'s folder, or the nearest existing folder above it, is a folder this process can write."""
    folder = _existing_ancestor(path)
    if not folder.is_dir():
        raise ValueError(f"{shown}: {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{shown}: cannot write in the folder {folder}")


def _resolve(path, wanted: str, kind: Callable[[int], bool]) -> tuple[Path, bool]:
    """`path`'s target (a link followed) and whether it exists; ValueError in one line when it exists
    but is not what `kind` accepts (`wanted`: what to name instead)."""
    target = Path(os.path.realpath(path))
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        return target, False
    except OSError as err:
        raise ValueError(f"{path}: {err.strerror}") from None
    if not kind(mode):
        link = f" (a link to {target})" if target != Path(os.path.abspath(path)) else ""
        raise ValueError(f"{path}{link} is {_kind(mode)}; name {wanted} or a new path")
    return target, True


def check_file(path, suffix: str | None = None) -> Path:
    """The file that writing `path` replaces (a link's target): a regular file or a new path in a
    folder that can be written, else ValueError in one line; `suffix` (e.g. ".npz"): the name must
    end in it."""
    if suffix is not None and not str(path).endswith(suffix):
        raise ValueError(f"{path}: the name must end in {suffix}")
    target, _ = _resolve(path, "a regular file", stat.S_ISREG)  # a link is written through: its target changes
    _check_writable_folder(target, path)
    return target


def check_folder(path) -> Path:
    """`path` as a folder to write files in: an existing folder (or a link to one) or a new path
    in a folder that can be written, else ValueError in one line."""
    target, exists = _resolve(path, "a folder", stat.S_ISDIR)
    if not exists:
        _check_writable_folder(target, path)
    elif not os.access(target, os.W_OK | os.X_OK):
        raise ValueError(f"{path}: cannot write in this folder")
    return target


def write_atomic(path, data: bytes | Writer) -> Path:
    """Write `data` (bytes, or a function that writes into an open binary file) to `path` so that a
    reader sees the old content or the new one, never half of it; returns `path`.

    Refuses (ValueError) what `check_file` refuses. Missing folders above `path` are made, and
    removed again if the write fails; on any failure no temporary file is left. A file that is
    replaced keeps its permissions; a new one gets the usual ones (not a temporary file's 0600).
    """
    target = check_file(path)
    made = _make_folders(target.parent)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "xb") as file:  # "x": a new file, never one (or a link) already there
            if callable(data):
                data(file)
            else:
                file.write(data)
        if target.exists():
            os.chmod(tmp, stat.S_IMODE(target.stat().st_mode))
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        for folder in made:
            with contextlib.suppress(OSError):  # not empty (another writer's file is there): it stays
                folder.rmdir()
        raise
    return Path(path)


def check_writable(path) -> Path:
    """`path` when a file can be written there, checked before any work (a command that trains first
    and fails at the write loses the work): `check_file`'s checks, then a probe file made and removed
    in its folder (folders made for it are removed again); ValueError (one line) otherwise."""
    target = check_file(path)
    made: list[Path] = []
    try:
        made = _make_folders(target.parent)
        probe = target.with_name(f".{target.name}.{secrets.token_hex(4)}.probe")
        with open(probe, "xb"):
            pass
        probe.unlink()
    except OSError as err:
        raise ValueError(f"cannot write {path}: {err.strerror or err}") from None
    finally:
        for folder in made:
            with contextlib.suppress(OSError):
                folder.rmdir()
    return target


def _make_folders(folder: Path) -> list[Path]:
    """Make `folder` and any missing folders above it; returns those made, deepest first."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for made in reversed(missing):
        made.mkdir(exist_ok=True)
    return missing


class FolderLock:
    """A lock on a folder held across processes and threads: an `flock` on `<folder>/.lock` (made
    when missing), taken by the first `with` of a thread and given back by its last (reentrant
    within a thread). Every process on the folder (web servers on a shared data folder, the Ray
    queue's actor) that takes it before reading and writing the folder's files sees the others'
    changes and never loses one of them."""

    def __init__(self, folder):
        self.path = Path(folder) / ".lock"
        self._threads = threading.RLock()
        self._depth = 0
        self._file: BinaryIO | None = None

    def __enter__(self) -> FolderLock:
        self._threads.acquire()
        if self._depth == 0:
            try:
                _make_folders(self.path.parent)
                self._file = open(self.path, "ab")  # noqa: SIM115 - open while held; closing it gives the lock back
                fcntl.flock(self._file, fcntl.LOCK_EX)
            except BaseException:
                if self._file is not None:
                    self._file.close()
                    self._file = None
                self._threads.release()
                raise
        self._depth += 1
        return self

    def __exit__(self, *exc) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._file.close()
            self._file = None
        self._threads.release()


def data_dir() -> Path:
    """Where the explorer keeps models and training jobs: $SENSVIZ_DATA_DIR, or the user's cache
    directory ($XDG_CACHE_HOME or ~/.cache) / sensviz."""
    configured = os.environ.get("SENSVIZ_DATA_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sensviz"
