"""Kept models: checkpoints trained or uploaded in the explorer, kept on the server's disk.

Each kept model is a token: `<token>.json` (what it is, who kept it, when, which file) in
`<data dir>/kept/`, naming a data file `<file>.safetensors` there. The token is random
(`secrets.token_urlsafe`), not a content hash: the hash of a public file or a seeded run can be
computed by anyone, a token cannot, so a link (`model=trained:<token>`) shares one model on purpose
and listing another user's models is impossible. Only the owner lists or deletes a model. The bytes
are never trusted: every load validates them again (the app's `ui.cache.load`). No Streamlit here.

Fair shares of one disk (a class server: no student can push out another's models):

- Quota: each owner holds at most `quota` bytes ($SENSVIZ_KEPT_QUOTA_MB, default a quarter of the
  cap), counting their models' files, their metadata and whatever they hold elsewhere (the job
  manager counts their job folders: records, request, names, temporaries), and at most the
  `kept_models` limit of models. A keep over either evicts the owner's own models, least recently
  opened first, and never anyone else's; what still does not fit is refused.
- Cap: all files of the store together ($SENSVIZ_KEPT_CAP_MB, default 1024 MiB, temporaries
  included). When a new model does not fit, it is refused with the reason; nothing is evicted.
- Expiry: a model not opened for $SENSVIZ_KEPT_TTL_DAYS (default 30) is gone; opening it (`data`)
  restarts its clock (the metadata file's modification time).
- The same bytes kept again by the same owner (another name or input length) share one file; an
  identical keep (same kind and loading overrides) returns the model already kept. Another owner's
  equal bytes get their own file and token: no keep ever returns someone else's token.
- A listing stays cheap for everyone: a model's metadata (name, loading overrides) is at most the
  `kept_meta_bytes` limit, and each metadata file is parsed once (then found by its inode and size).
- Every check and write holds the store's lock, which holds across processes (`FolderLock`:
  several web servers and the Ray queue's actor keep models in one folder), so the cap and the
  quotas hold for all of them together.
- Every limit is checked before anything is written; a failed write leaves no file behind, and
  temporaries left by a crash are removed when the store opens.

Refusals raise `KeptRefused`, a file that cannot be read `KeptUnreadable`, each with one line for
the user.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sensviz.files import FolderLock, write_atomic
from sensviz.limits import LIMITS
from sensviz.text import short_label, without_hidden

KINDS = ("trained", "upload")
TOKEN = re.compile(r"[A-Za-z0-9_-]{16,64}")  # fullmatch: a trailing newline is no token
"""What a kept model's token (and its data file's stem) looks like (checked before any file is opened)."""
DEFAULT_CAP_MB = 1024
DEFAULT_QUOTA_SHARE = 4
"""Without $SENSVIZ_KEPT_QUOTA_MB, one owner may hold 1/4 of the cap."""
DEFAULT_TTL_DAYS = 30
MiB = 2**20
DAY_S = 86_400


class KeptRefused(Exception):
    """A model the store does not keep (over the quota or the cap, or the disk refused), with one line for the user."""


class KeptUnreadable(ValueError):
    """A kept model whose file cannot be read (damaged or replaced on the server), with one line for the user."""


def _setting(name: str, default: float) -> float:
    value = os.environ.get(name)
    try:
        number = float(value) if value else float(default)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {value[:40]!r}") from None
    if not number > 0:
        raise ValueError(f"{name} must be above 0, got {value}")
    return number


def cap_bytes() -> int:
    """The kept models' total size cap: $SENSVIZ_KEPT_CAP_MB MiB (default 1024)."""
    return int(_setting("SENSVIZ_KEPT_CAP_MB", DEFAULT_CAP_MB) * MiB)


def quota_bytes(cap: int) -> int:
    """What one owner may hold: $SENSVIZ_KEPT_QUOTA_MB MiB (default a quarter of the cap), at most the cap."""
    return min(cap, int(_setting("SENSVIZ_KEPT_QUOTA_MB", cap / DEFAULT_QUOTA_SHARE / MiB) * MiB))


def ttl_seconds() -> float:
    """How long a model that nobody opens is kept: $SENSVIZ_KEPT_TTL_DAYS days (default 30)."""
    return _setting("SENSVIZ_KEPT_TTL_DAYS", DEFAULT_TTL_DAYS) * DAY_S


@dataclass(frozen=True)
class Kept:
    """One kept model (its metadata; the bytes are read with `KeptStore.data`)."""

    token: str
    kind: str  # "trained" or "upload"
    name: str  # a label for people: the run's name or the uploaded file's name (shortened: `short_label`)
    owner: str
    created: float  # time when kept
    size: int  # bytes
    overrides: dict = field(default_factory=dict)  # loading overrides of an upload: n_heads, task, n
    digest: str = ""  # sha256 of the bytes
    file: str = ""  # the data file's stem (files kept before there was this field: the token)


def _read_regular(path: Path, size: int) -> bytes:
    """The bytes of `path` when it is a regular file (not a link, a FIFO, a device, a folder) of exactly
    `size` bytes; OSError otherwise, before reading anything (a file replaced on the server never hangs
    a page or fills its memory)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as file:
        found = os.fstat(file.fileno())
        if not stat.S_ISREG(found.st_mode):
            raise OSError("its file was replaced on the server by something that is not a file")
        if found.st_size != size:
            raise OSError(f"its file was replaced on the server ({found.st_size:,} bytes, not {size:,})")
        return file.read(size)


def _mib(size: int) -> str:
    """A size for people: `151.0 MiB`, `12.3 KiB`."""
    return f"{size / MiB:,.1f} MiB" if size >= MiB / 10 else f"{size / 1024:,.1f} KiB"


class KeptStore:
    """The kept models in `root` (created on first use): at most `cap` bytes in all, `quota` per
    owner, each gone `ttl_s` seconds after it was last opened (see the module docstring).

    `elsewhere(owner)`, when set, is the bytes an owner holds outside the store (the job manager
    sets it to count their job folders); `pinned(token)`, when set, marks models that are neither
    evicted nor expired (`server.classes`: the models of an open class; they still count against
    the quota and the cap); `clock` is the time (tests pass a fake one)."""

    def __init__(self, root: Path, cap: int, quota: int | None = None, ttl_s: float | None = None,
                 clock: Callable[[], float] = time.time):
        self.root = Path(root)
        self.cap = cap
        self.quota = min(cap, quota if quota is not None else quota_bytes(cap))
        self.ttl_s = ttl_s if ttl_s is not None else ttl_seconds()
        self.clock = clock
        self.elsewhere: Callable[[str], int] | None = None
        self.pinned: Callable[[str], bool] | None = None  # tokens neither evicted nor expired (an open class's models)
        self.lock = FolderLock(self.root)  # across the web servers and the Ray queue on one data folder
        self.last_created = 0.0
        self._parsed: dict[str, tuple[tuple[int, int], Kept]] = {}  # token -> ((inode, size), its metadata)
        with self.lock:
            self._remove_temporaries()
            self._expire()

    # ------------------------------------------------------------------ keeping

    def keep(self, kind: str, name: str, data: bytes, owner: str, overrides: dict | None = None) -> Kept:
        """Keep `data` for `owner` under a random token (or return the owner's identical model).
        Evicts the owner's own least recently opened models to fit the quota; `KeptRefused` (one
        line) when it is over the quota or the cap, or the disk refuses it. Nothing is written before
        every check passed."""
        if kind not in KINDS:
            raise ValueError(f"unknown kind '{kind}'")
        name = short_label(without_hidden(str(name)))  # "report\u202egnp.safetensors" would read reversed
        overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
        if len(data) > self.quota:
            raise KeptRefused(f"{name} ({_mib(len(data))}) is more than one user may keep on this server "
                              f"({_mib(self.quota)}, SENSVIZ_KEPT_QUOTA_MB)")
        digest = hashlib.sha256(data).hexdigest()
        stem = hashlib.sha256(f"{owner}\0{digest}".encode()).hexdigest()[:40]  # this owner's copy of these bytes
        with self.lock:
            self._expire()
            mine = [k for k in self._all() if k.owner == owner]
            same = next((k for k in mine if k.digest == digest and k.kind == kind and k.overrides == overrides), None)
            if same is not None and self._file(same).is_file():
                self._touch(same.token)
                return same
            self.last_created = max(self.clock(), self.last_created + 1e-6)  # strictly increasing
            kept = Kept(secrets.token_urlsafe(12), kind, name, owner, self.last_created, len(data), overrides, digest, stem)
            meta = json.dumps(asdict(kept)).encode()
            if len(meta) > LIMITS["kept_meta_bytes"].high:
                raise KeptRefused(f"{name} was not kept: its name and loading settings take {len(meta):,} bytes, more than "
                                  f"{LIMITS['kept_meta_bytes'].high:,} (limit 'kept_meta_bytes')")
            self._fit(kept, len(meta), mine)
            self._write(kept, data, meta, new_file=not any(k.file == stem for k in self._all() if k.owner == owner))
        return kept

    def _fit(self, kept: Kept, meta_size: int, mine: list[Kept]) -> None:
        """Check the quota and the cap, then evict the owner's own least recently opened models
        that have to go; `KeptRefused` (nothing evicted) when the model cannot fit."""
        elsewhere = self.elsewhere(kept.owner) if self.elsewhere else 0
        staying = sorted(mine, key=lambda k: (self._is_pinned(k), self._opened(k)))  # pinned ones last, never popped

        def need() -> int:  # its metadata, and its data unless one of the staying models holds the same bytes
            return meta_size + (0 if any(k.file == kept.file for k in staying) else kept.size)

        while staying and not self._is_pinned(staying[0]) and (self._bytes(staying) + elsewhere + need() > self.quota
                           or len(staying) >= LIMITS["kept_models"].high):
            staying.pop(0)
        held = self._bytes(mine) + elsewhere
        if self._bytes(staying) + elsewhere + need() > self.quota:
            raise KeptRefused(f"{kept.name} ({_mib(kept.size)}) does not fit in your share of the server "
                              f"({_mib(held)} of {_mib(self.quota)} held, training records included): "
                              "delete some of your models or wait for your training run to end")
        total = self.total() - (self._bytes(mine) - self._bytes(staying))
        if total + need() > self.cap:
            raise KeptRefused(f"{kept.name} ({_mib(kept.size)}) was not kept: the server's model store is full "
                              f"({_mib(total)} of {_mib(self.cap)}); delete models you no longer need, or try again later")
        for old in mine:
            if old not in staying:
                self._remove(old.token, old)

    def _bytes(self, models: list[Kept]) -> int:
        """Bytes of these models: their data files (each once) and their metadata."""
        return sum(map(_size, {self._file(k) for k in models} | {self._meta(k.token) for k in models}))

    def _write(self, kept: Kept, data: bytes, meta: bytes, new_file: bool) -> None:
        """The data file (unless one of the owner's models holds these bytes), then the metadata; on
        a failure nothing new is left (`write_atomic` removes its temporary) and `KeptRefused` says why."""
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            if new_file:
                write_atomic(self._file(kept), data)
            write_atomic(self._meta(kept.token), meta)
            self._touch(kept.token)
        except OSError as err:
            _delete(self._meta(kept.token))
            if new_file:
                _delete(self._file(kept))
            raise KeptRefused(f"{kept.name} was not kept: the server could not write it "
                              f"({err.strerror or type(err).__name__})") from None

    # ------------------------------------------------------------------ reading

    def info(self, token: str) -> Kept | None:
        """The model kept under `token`, or None (bad token, never kept, expired, evicted or deleted)."""
        if not TOKEN.fullmatch(token or ""):
            return None
        kept = self._read(token)
        if kept is None or not TOKEN.fullmatch(kept.file or kept.token) or self._expired(kept):
            return None
        return kept

    def _read(self, token: str) -> Kept | None:
        """A metadata file, parsed once: it is written once (by replacing), so its inode and size identify it."""
        try:
            stat = self._meta(token).stat()
            key = (stat.st_ino, stat.st_size)
            if token in self._parsed and self._parsed[token][0] == key:
                return self._parsed[token][1]
            kept = Kept(**json.loads(self._meta(token).read_text()))
        except (OSError, ValueError, TypeError):
            self._parsed.pop(token, None)
            return None
        self._parsed[token] = (key, kept)
        return kept

    def data(self, token: str) -> bytes:
        """The bytes of a kept model (opening it restarts its expiry clock); KeyError when it is gone,
        `KeptUnreadable` when its file is there but cannot be read (the loader validates the bytes)."""
        kept = self.info(token)
        if kept is None:
            raise KeyError(token)
        try:
            data = _read_regular(self._file(kept), kept.size)
        except FileNotFoundError:
            raise KeyError(token) from None
        except OSError as err:
            raise KeptUnreadable(f"kept model unreadable ({err.strerror or err}); "
                                 "it cannot be opened, choose another model") from None
        self._touch(token)
        return data

    def owned(self, owner: str) -> list[Kept]:
        """The models `owner` kept, newest first."""
        return sorted((k for k in self._all() if k.owner == owner), key=lambda k: k.created, reverse=True)

    def delete(self, token: str, owner: str) -> bool:
        """Delete a model; only its owner may. True when it was deleted."""
        kept = self.info(token)
        if kept is None or kept.owner != owner:
            return False
        with self.lock:
            self._remove(token)
        return True

    def usage(self, owner: str) -> int:
        """Bytes `owner` holds: their models' files (each once) and metadata, and what they hold elsewhere."""
        return self._bytes([k for k in self._all() if k.owner == owner]) + (self.elsewhere(owner) if self.elsewhere else 0)

    def total(self) -> int:
        """Bytes of every file in the store (temporaries and anything else included)."""
        if not self.root.is_dir():
            return 0
        return sum(_size(path) for path in self.root.iterdir())

    # ------------------------------------------------------------------ housekeeping

    def _all(self) -> list[Kept]:
        if not self.root.is_dir():
            return []
        found = (self.info(path.stem) for path in self.root.glob("*.json"))
        return [k for k in found if k is not None]

    def _opened(self, kept: Kept) -> float:
        try:
            return self._meta(kept.token).stat().st_mtime
        except OSError:
            return kept.created

    def _is_pinned(self, kept: Kept) -> bool:
        return bool(self.pinned and self.pinned(kept.token))

    def _expired(self, kept: Kept) -> bool:
        return self._opened(kept) + self.ttl_s < self.clock() and not self._is_pinned(kept)

    def _touch(self, token: str) -> None:
        now = self.clock()
        with contextlib.suppress(OSError):  # the model stays readable; it only expires sooner
            os.utime(self._meta(token), (now, now))

    def _expire(self) -> None:
        """Remove the models nobody opened within the TTL."""
        if not self.root.is_dir():
            return
        for path in self.root.glob("*.json"):
            kept = self._read(path.stem) if TOKEN.fullmatch(path.stem) else None
            if kept is not None and self._expired(kept):
                self._remove(kept.token, kept)

    def _remove_temporaries(self) -> None:
        """Temporaries of writes a crash interrupted (`write_atomic` names them `.<name>.<hex>.tmp`)."""
        if self.root.is_dir():
            for path in self.root.glob(".*.tmp"):
                _delete(path)

    def _remove(self, token: str, kept: Kept | None = None) -> None:
        """Remove a model's metadata, and its data file unless another of the owner's models shares it."""
        kept = kept or self.info(token)
        _delete(self._meta(token))
        self._parsed.pop(token, None)
        if kept is not None and not any(other.file == kept.file for other in self._all() if other.file):
            _delete(self._file(kept))

    def _file(self, kept: Kept) -> Path:
        return self.root / f"{kept.file or kept.token}.safetensors"

    def _meta(self, token: str) -> Path:
        return self.root / f"{token}.json"


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _delete(path: Path) -> None:
    """Remove a file, or a directory found where a file should be (never raises: the store keeps serving)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
