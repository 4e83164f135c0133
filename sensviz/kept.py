"""Kept models: checkpoints trained or uploaded in the explorer, kept on the server's disk.

Each kept model is a file `<token>.safetensors` beside `<token>.json` (what it is, who kept it,
when) in `<data dir>/kept/`. The token is random (`secrets.token_urlsafe`), not a content hash:
the hash of a public file or a seeded run can be computed by anyone, a token cannot, so a link
(`model=trained:<token>`) shares one model on purpose and listing another user's models is
impossible. The total size is capped (`SENSVIZ_KEPT_CAP_MB`, default 1024 MiB); keeping a new
model evicts the oldest ones over the cap. Only the owner lists or deletes a model. The bytes are
never trusted: every load validates them again (the app's `ui.cache.load`). No Streamlit here.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sensviz.files import write_atomic

KINDS = ("trained", "upload")
TOKEN = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
"""What a kept model's token looks like (checked before any file is opened)."""
DEFAULT_CAP_MB = 1024


def data_dir() -> Path:
    """Where the explorer keeps models and training jobs: $SENSVIZ_DATA_DIR, or the user's cache
    directory ($XDG_CACHE_HOME or ~/.cache) / sensviz."""
    configured = os.environ.get("SENSVIZ_DATA_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sensviz"


def cap_bytes() -> int:
    """The kept models' total size cap: $SENSVIZ_KEPT_CAP_MB MiB (default 1024)."""
    return int(float(os.environ.get("SENSVIZ_KEPT_CAP_MB", DEFAULT_CAP_MB)) * 2**20)


@dataclass(frozen=True)
class Kept:
    """One kept model (its metadata; the bytes are read with `KeptStore.data`)."""

    token: str
    kind: str  # "trained" or "upload"
    name: str  # a label for people: the run's name or the uploaded file's name
    owner: str
    created: float  # time.time() when kept
    size: int  # bytes
    overrides: dict = field(default_factory=dict)  # loading overrides of an upload: n_heads, task, n


class KeptStore:
    """The kept models in `root` (created on first use), at most `cap` bytes in all."""

    def __init__(self, root: Path, cap: int):
        self.root = Path(root)
        self.cap = cap
        self.lock = threading.Lock()
        self.last_created = 0.0

    def keep(self, kind: str, name: str, data: bytes, owner: str, overrides: dict | None = None) -> Kept:
        """Keep `data` under a new random token; evicts the oldest models over the cap."""
        if kind not in KINDS:
            raise ValueError(f"unknown kind '{kind}'")
        if len(data) > self.cap:
            raise ValueError(f"{name}: {len(data) / 2**20:.1f} MiB is more than the server keeps ({self.cap / 2**20:.0f} MiB)")
        with self.lock:
            self.last_created = max(time.time(), self.last_created + 1e-6)  # strictly increasing: eviction order
            kept = Kept(secrets.token_urlsafe(12), kind, name, owner, self.last_created, len(data),
                        {k: v for k, v in (overrides or {}).items() if v is not None})
            self.root.mkdir(parents=True, exist_ok=True)
            write_atomic(self._file(kept.token), data)
            write_atomic(self._meta(kept.token), json.dumps(asdict(kept)).encode())
            self._evict(keep=kept.token)
        return kept

    def info(self, token: str) -> Kept | None:
        """The model kept under `token`, or None (bad token, never kept, evicted or deleted)."""
        if not TOKEN.match(token or ""):
            return None
        try:
            return Kept(**json.loads(self._meta(token).read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def data(self, token: str) -> bytes:
        """The bytes of a kept model; KeyError when it is gone."""
        if self.info(token) is None:
            raise KeyError(token)
        try:
            return self._file(token).read_bytes()
        except OSError:
            raise KeyError(token) from None

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

    def total(self) -> int:
        return sum(k.size for k in self._all())

    def _all(self) -> list[Kept]:
        if not self.root.is_dir():
            return []
        found = (self.info(path.stem) for path in self.root.glob("*.json"))
        return [k for k in found if k is not None]

    def _evict(self, keep: str) -> None:
        models = sorted(self._all(), key=lambda k: k.created)
        total = sum(k.size for k in models)
        for old in models:
            if total <= self.cap:
                break
            if old.token != keep:
                self._remove(old.token)
                total -= old.size

    def _remove(self, token: str) -> None:
        for path in (self._meta(token), self._file(token)):
            path.unlink(missing_ok=True)

    def _file(self, token: str) -> Path:
        return self.root / f"{token}.safetensors"

    def _meta(self, token: str) -> Path:
        return self.root / f"{token}.json"
