"""Kept models: checkpoints trained or uploaded in the explorer, kept on the server's disk.

Each kept model is a token: `<token>.json` (what it is, who kept it, when, which file) in
`<data dir>/kept/`, naming a data file `<file>.safetensors` there. The token is random
(`secrets.token_urlsafe`), not a content hash: the hash of a public file or a seeded run can be
computed by anyone, a token cannot, so a link (`model=trained:<token>`) shares one model on purpose
and listing another user's models is impossible. Only the owner lists or deletes a model. The bytes
are never trusted: every load validates them again (the app's `ui.cache.load`). No Streamlit here.

Fair shares of one disk (a class server: an owner id costs nothing, a browser without a cookie is a
new owner, so what one network address holds is bounded too; the settings are `server.limits`'s):

- Quota: each owner holds at most `quota` bytes ($SENSVIZ_KEPT_QUOTA_MB, default a quarter of the
  cap), counting their models' files, their metadata and whatever they hold elsewhere (the job
  manager counts their job folders: records, request, names, temporaries), and at most the
  `kept_models` limit of models. A keep over either evicts the owner's own models, least recently
  opened first (pinned ones never); what still does not fit is refused.
- Address quota: the owners of one network address hold at most `address_quota` bytes together
  ($SENSVIZ_KEPT_ADDRESS_QUOTA_MB, default half the cap: a class of 60 behind one NAT keeps 8 MiB
  each); a keep over it is refused, nobody's model evicted. The server's own machine has none.
- Cap: all files of the store together ($SENSVIZ_KEPT_CAP_MB, default 1024 MiB, temporaries
  included). When a new model does not fit, models of the holders (an address, or an owner on the
  server's own machine) that hold more than the keeper's holder will go, largest holder first; when
  nobody holds more, the keep is refused with the reason. So the store never refuses everyone
  while one holder has more than its share, and a flood of identities from one address pushes out
  nobody but itself.
- Classes: the models in an open class's gallery are pinned (`pins`): neither evicted for their
  owner's quota nor expired, each class's earliest up to its own cap ($SENSVIZ_KEPT_CLASS_MB,
  default a quarter of the cap); they count against the quota, the address quota and the cap like
  any other. A class that is closed, or that nobody changed for $SENSVIZ_CLASS_IDLE_DAYS days, pins nothing.
- Expiry: a model not opened for $SENSVIZ_KEPT_TTL_DAYS (default 30) is gone; opening it (`data`)
  restarts its clock (the metadata file's modification time).
- The same bytes kept again by the same owner are the same model (its name and loading overrides
  become the new ones): one file kept under many names or input lengths is one model, in the store
  and in a class's gallery. Another owner's equal bytes get their own file and token: no keep ever
  returns someone else's token.
- A listing stays cheap for everyone: a model's metadata (name, loading overrides) is at most the
  `kept_meta_bytes` limit, and each metadata file is parsed once (then found by its inode and size).
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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from sensviz.files import FolderLock, write_atomic
from sensviz.text import short_label, without_hidden
from server import owners
from server.limits import LIMITS, MiB, address_quota_bytes, cap_bytes, class_bytes, quota_bytes, ttl_seconds

KINDS = ("trained", "upload")
TOKEN = re.compile(r"[A-Za-z0-9_-]{16,64}")  # fullmatch: a trailing newline is no token
"""What a kept model's token (and its data file's stem) looks like (checked before any file is opened)."""
PINS_FRESH_S = 2.0
"""How long the store reuses the set of pinned models before asking the classes again."""


class KeptRefused(Exception):
    """A model the store does not keep (over the quota or the cap, or the disk refused), with one line for the user."""


class KeptUnreadable(ValueError):
    """A kept model whose file cannot be read (damaged or replaced on the server), with one line for the user."""


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
    address: str = ""  # the network address it was kept from, signed (`server.owners.address_key`; "": localhost)


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
    owner, `address_quota` per network address, each gone `ttl_s` seconds after it was last opened
    (see the module docstring).

    `elsewhere(owner)`, when set, is the bytes an owner holds outside the store (the job manager
    sets it to count their job folders); `pins()`, when set, is the models of the open classes (token ->
    class code: `server.classes.ClassStore.pins`), of which each class pins at most `class_cap` bytes,
    its earliest first: a pinned model is neither evicted for its owner's quota nor expired, and still
    counts against the quota and the caps. `classes`, the class store's folder, gives a store built
    elsewhere (the Ray queue's actor, from `settings()`) the same pins. `clock` is the time (tests pass
    a fake one); `secret` signs addresses (default: the data folder's, `server.owners.owner_secret`)."""

    def __init__(self, root: Path, cap: int | None = None, quota: int | None = None, ttl_s: float | None = None,
                 clock: Callable[[], float] = time.time, address_quota: int | None = None,
                 class_cap: int | None = None, classes: Path | str | None = None, secret: bytes | None = None):
        self.root = Path(root)
        self.cap = cap if cap is not None else cap_bytes()
        self.quota = min(self.cap, quota if quota is not None else quota_bytes(self.cap))
        self.address_quota = min(self.cap, address_quota if address_quota is not None else address_quota_bytes(self.cap))
        self.class_cap = min(self.cap, class_cap if class_cap is not None else class_bytes(self.cap))
        self.ttl_s = ttl_s if ttl_s is not None else ttl_seconds()
        self.clock = clock
        self.classes = Path(classes) if classes is not None else None
        self._secret = secret
        self.elsewhere: Callable[[str], int] | None = None
        self.pins: Callable[[], dict[str, str]] | None = self._class_pins() if self.classes else None
        self.lock = FolderLock(self.root)  # across the web servers and the Ray queue on one data folder
        self.last_created = 0.0
        self._parsed: dict[str, tuple[tuple[int, int], Kept]] = {}  # token -> ((inode, size), its metadata)
        self._pinned: tuple[float, frozenset[str]] = (-1.0, frozenset())  # when found, the pinned tokens
        with self.lock:
            self._remove_temporaries()
            self._expire()

    def settings(self) -> dict:
        """What builds this store again in another process (`KeptStore(**settings)`: the Ray queue's actor),
        its pins included."""
        return {"root": str(self.root), "cap": self.cap, "quota": self.quota, "ttl_s": self.ttl_s,
                "address_quota": self.address_quota, "class_cap": self.class_cap,
                "classes": str(self.classes) if self.classes else None}

    def _class_pins(self) -> Callable[[], dict[str, str]]:
        from server.classes import ClassStore  # only here: the classes need nothing of this module

        classes = ClassStore(self.classes, self.secret(), clock=self.clock)
        return classes.pins

    def secret(self) -> bytes:
        """The key that signs addresses: the one given, else the data folder's (the store's parent folder)."""
        if self._secret is None:
            self._secret = owners.owner_secret(self.root.parent)
        return self._secret

    def address_key(self, address: str | None) -> str:
        """A network address as the store keeps it (signed: no file names anyone's address); "" for the
        server's own machine ("local", or none given), which no address quota holds back."""
        return owners.address_key(self.secret(), address) if address and address != "local" else ""

    # ------------------------------------------------------------------ keeping

    def keep(self, kind: str, name: str, data: bytes, owner: str, overrides: dict | None = None,
             address: str | None = None) -> Kept:
        """Keep `data` for `owner`, sent from the network `address`, under a random token; the same bytes
        kept again by the owner are the same model (its name and loading overrides become the new ones).
        Evicts the owner's own least recently opened models to fit the quota, and, when the store is full,
        models of whoever holds more than the keeper will (see `_fit`); `KeptRefused` (one line) when it
        is over the owner's or the address's quota or finds no room. Nothing is written before every
        check passed."""
        if kind not in KINDS:
            raise ValueError(f"unknown kind '{kind}'")
        name = short_label(without_hidden(str(name)))  # "report\u202egnp.safetensors" would read reversed
        overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
        if len(data) > self.quota:
            raise KeptRefused(f"{name} ({_mib(len(data))}) is more than one user may keep on this server "
                              f"({_mib(self.quota)}, SENSVIZ_KEPT_QUOTA_MB)")
        digest = hashlib.sha256(data).hexdigest()
        stem = hashlib.sha256(f"{owner}\0{digest}".encode()).hexdigest()[:40]  # this owner's copy of these bytes
        key = self.address_key(address)
        with self.lock:
            self._expire()
            everyone = self._all()
            mine = [k for k in everyone if k.owner == owner]
            same = next((k for k in mine if k.digest == digest and k.kind == kind and self._file(k).is_file()), None)
            if same is not None:
                return self._relabel(same, name, overrides)
            self.last_created = max(self.clock(), self.last_created + 1e-6)  # strictly increasing
            kept = Kept(secrets.token_urlsafe(12), kind, name, owner, self.last_created, len(data), overrides, digest,
                        stem, key)
            meta = self._meta_bytes(kept)
            self._fit(kept, len(meta), mine, everyone)
            self._write(kept, data, meta, new_file=not self._file(kept).is_file())
        return kept

    def _meta_bytes(self, kept: Kept) -> bytes:
        meta = json.dumps(asdict(kept)).encode()
        if len(meta) > LIMITS["kept_meta_bytes"].high:
            raise KeptRefused(f"{kept.name} was not kept: its name and loading settings take {len(meta):,} bytes, more "
                              f"than {LIMITS['kept_meta_bytes'].high:,} (limit 'kept_meta_bytes')")
        return meta

    def _relabel(self, same: Kept, name: str, overrides: dict) -> Kept:
        """The owner's model of these bytes, under its new name and loading overrides (one model, not two:
        a file kept again under other metadata adds nothing to the store or to a class's gallery)."""
        if (same.name, same.overrides) != (name, overrides):
            changed = replace(same, name=name, overrides=overrides)
            try:
                write_atomic(self._meta(same.token), self._meta_bytes(changed))
            except OSError as err:
                raise KeptRefused(f"{name} was not kept: the server could not write it "
                                  f"({err.strerror or type(err).__name__})") from None
            same = changed
        self._touch(same.token)
        return same

    def _fit(self, kept: Kept, meta_size: int, mine: list[Kept], everyone: list[Kept]) -> None:
        """Make room for `kept` or refuse it (`KeptRefused`, nothing evicted):

        1. the owner's quota and the `kept_models` limit: the owner's own least recently opened models that
           are not pinned go first;
        2. the address's quota: the owners of one network address together (a class behind one NAT shares
           it; the server's own machine has none) are refused past it, nobody's model is evicted for it;
        3. the cap: when the store is full, models of the holders (network addresses, or owners on the server's
           own machine) that hold more than the keeper's holder will after this keep go, the largest holder's
           largest owner's least recently opened first (pinned ones last): so the store never refuses everyone
           while one holder has more than its share, and a holder can only push out holders larger than itself."""
        elsewhere = self.elsewhere(kept.owner) if self.elsewhere else 0
        pinned = self._pinned_tokens(everyone)
        staying = sorted(mine, key=lambda k: (k.token in pinned, self._opened(k)))  # pinned ones last, never popped
        need = meta_size + kept.size
        while staying and staying[0].token not in pinned and (
                self._bytes(staying) + elsewhere + need > self.quota or len(staying) >= LIMITS["kept_models"].high):
            staying.pop(0)
        if self._bytes(staying) + elsewhere + need > self.quota:
            raise KeptRefused(f"{kept.name} ({_mib(kept.size)}) does not fit in your share of the server "
                              f"({_mib(self._bytes(mine) + elsewhere)} of {_mib(self.quota)} held, training records "
                              "included): delete some of your models or wait for your training run to end")
        gone = [k for k in mine if k not in staying]
        others = [k for k in everyone if k.owner != kept.owner]
        if kept.address:
            neighbours = self._bytes([k for k in others if k.address == kept.address])
            if neighbours + self._bytes(staying) + need > self.address_quota:
                raise KeptRefused(f"{kept.name} ({_mib(kept.size)}) was not kept: the models kept from your network "
                                  f"address take {_mib(neighbours + self._bytes(staying))} of the "
                                  f"{_mib(self.address_quota)} one address may hold (SENSVIZ_KEPT_ADDRESS_QUOTA_MB); "
                                  "delete models you no longer need")
        total = self.total() - (self._bytes(mine) - self._bytes(staying))
        if total + need > self.cap:
            gone += self._make_room(kept, need, total + need - self.cap, staying, others, pinned)
        for old in gone:
            self._remove(old.token, old)

    def _make_room(self, kept: Kept, need: int, over: int, staying: list[Kept], others: list[Kept],
                   pinned: frozenset[str]) -> list[Kept]:
        """Others' models that free `over` bytes, each taken from the largest holder that, without it, still
        holds as much as the keeper's holder will (with the `need` bytes of this keep: so two holders never
        push each other out in turn); `KeptRefused` when they cannot free enough."""
        held: dict[str, list[Kept]] = {}
        for k in others:
            held.setdefault(_holder(k), []).append(k)
        keeper = self._bytes(staying + held.pop(_holder(kept), [])) + need
        sizes = {h: self._bytes(models) for h, models in held.items()}
        chosen, freed = [], 0
        while freed < over:
            found = None
            for h in sorted(sizes, key=lambda x: -sizes[x]):  # the largest holder first
                if not held[h]:
                    continue
                by_owner: dict[str, int] = {}
                for k in held[h]:
                    by_owner[k.owner] = by_owner.get(k.owner, 0) + k.size
                victim = min(held[h], key=lambda k: (-by_owner[k.owner], k.token in pinned, self._opened(k)))
                if sizes[h] - self._bytes([victim]) >= keeper:  # it still holds as much as the keeper will
                    found = h, victim
                    break
            if found is None:
                raise KeptRefused(f"{kept.name} ({_mib(kept.size)}) was not kept: the server's model store is full "
                                  f"({_mib(self.total())} of {_mib(self.cap)}) and nobody holds more than you would; "
                                  "delete models you no longer need, or try again later")
            h, victim = found
            held[h].remove(victim)
            size = self._bytes([victim])
            sizes[h] -= size
            freed += size
            chosen.append(victim)
        return chosen

    def _bytes(self, models: list[Kept]) -> int:
        """Bytes of these models: their data files (each once) and their metadata."""
        return sum(map(_size, {self._file(k) for k in models} | {self._meta(k.token) for k in models}))

    def _write(self, kept: Kept, data: bytes, meta: bytes, new_file: bool) -> None:
        """The data file (unless the owner's model of another kind holds these bytes), then the metadata; on
        a failure nothing new is left (`write_atomic` removes its temporary) and `KeptRefused` says why."""
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            if new_file:
                write_atomic(self._file(kept), data)
            write_atomic(self._meta(kept.token), meta)
            self._touch(kept.token)
            self._pinned = (-1.0, frozenset())
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

    def _pinned_tokens(self, everyone: list[Kept] | None = None) -> frozenset[str]:
        """The models the open classes pin (`pins`), each class's earliest first up to `class_cap` bytes: a
        class's later models count against its owner's quota like any other. Found again after
        `PINS_FRESH_S` seconds, after a write, or when `everyone` (the store's models) is given."""
        if self.pins is None:
            return frozenset()
        now = self.clock()
        stamp, tokens = self._pinned
        if everyone is None and 0 <= now - stamp <= PINS_FRESH_S:
            return tokens
        classes = self.pins()
        if everyone is None:
            everyone = [k for k in map(self._read, self._stems()) if k is not None]
        in_class: dict[str, list[Kept]] = {}
        for k in everyone:
            if k.token in classes:
                in_class.setdefault(classes[k.token], []).append(k)
        found = set()
        for models in in_class.values():
            held = 0
            for k in sorted(models, key=lambda k: k.created):
                held += self._bytes([k])
                if held > self.class_cap:
                    break
                found.add(k.token)
        self._pinned = (now, frozenset(found))
        return self._pinned[1]

    def _expired(self, kept: Kept) -> bool:
        return self._opened(kept) + self.ttl_s < self.clock() and kept.token not in self._pinned_tokens()

    def _stems(self) -> list[str]:
        """The tokens of the metadata files in the store (their names checked, nothing read)."""
        if not self.root.is_dir():
            return []
        return [path.stem for path in self.root.glob("*.json") if TOKEN.fullmatch(path.stem)]

    def _touch(self, token: str) -> None:
        now = self.clock()
        with contextlib.suppress(OSError):  # the model stays readable; it only expires sooner
            os.utime(self._meta(token), (now, now))

    def _expire(self) -> None:
        """Remove the models nobody opened within the TTL (those an open class pins stay)."""
        for kept in map(self._read, self._stems()):
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
        self._pinned = (-1.0, frozenset())
        if kept is not None and not any(other.file == kept.file for other in self._all() if other.file):
            _delete(self._file(kept))

    def _file(self, kept: Kept) -> Path:
        return self.root / f"{kept.file or kept.token}.safetensors"

    def _meta(self, token: str) -> Path:
        return self.root / f"{token}.json"


def _holder(kept: Kept) -> str:
    """Who holds a model when the store is full: its network address, or its owner on the server's own machine."""
    return f"address {kept.address}" if kept.address else f"owner {kept.owner}"


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
