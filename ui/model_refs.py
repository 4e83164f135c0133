"""Which model: `ModelRef`, a zoo checkpoint (`model=encoder-parity-n8`, pinned to its content as
`encoder-parity-n8~<sha256 prefix>`) or a kept model (`model=trained:<token>`, `model=upload:<token>`,
`server.kept`), resolved from a link and checked against the files it names."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from server.services import checkpoint_dir, kept_store
from ui.memo import memo

KINDS = ("zoo", "trained", "upload")
ZOO_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,120}")
PIN = 12
"""Hex digits of a zoo checkpoint's sha256 kept in a link (`encoder-parity-n8~<pin>`; `~` needs no escaping in a URL)."""


@dataclass(frozen=True)
class ModelRef:
    """Which model, identified by content: a zoo file (`key` its stem) or a kept model (`key`
    its token), the sha256 of its bytes, and the loading overrides of an upload."""

    kind: str
    key: str
    digest: str
    name: str = field(default="", compare=False)  # for people: the zoo stem, the run or the uploaded file
    n_heads: int | None = None
    task: str | None = None
    n: int | None = None

    @property
    def param(self) -> str:
        """The value of `model=` (or `compare=`) that links to this model."""
        return f"{self.key}~{self.digest[:PIN]}" if self.kind == "zoo" else f"{self.kind}:{self.key}"

    @property
    def label(self) -> str:
        return self.name if self.kind == "zoo" else f"{self.name} ({self.kind})"

    @property
    def overrides(self) -> dict:
        return {k: v for k, v in (("n_heads", self.n_heads), ("task", self.task), ("n", self.n)) if v is not None}


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@memo
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    return digest(Path(path).read_bytes())


def zoo_ref(stem: str) -> ModelRef:
    """The reference of a zoo checkpoint by its file stem (ValueError when there is none)."""
    if not ZOO_NAME.fullmatch(stem):
        raise ValueError(f"'{stem}' is not a checkpoint name")
    path = checkpoint_dir() / f"{stem}.safetensors"
    if not path.is_file():
        raise ValueError(f"there is no pretrained checkpoint '{stem}'")
    stat = path.stat()
    return ModelRef("zoo", stem, _file_digest(str(path), stat.st_mtime_ns, stat.st_size), name=stem)


def kept_ref(kind: str, token: str) -> ModelRef:
    """The reference of a kept model (ValueError when it is gone or the kind is wrong)."""
    kept = kept_store().info(token)
    if kept is None or kept.kind != kind:
        raise ValueError(f"there is no kept model '{kind}:{token}' (deleted, evicted to make room, or a mistyped link)")
    data = kept_store().data(token)
    return ModelRef(kind, token, digest(data), name=kept.name, **kept.overrides)


def resolve(value: str) -> tuple[ModelRef, str | None]:
    """The model a `model=` value names, and a notice when a pinned zoo checkpoint changed since
    the link was made. ValueError (the reason, for the user) when it names no model."""
    kind, sep, token = value.partition(":")
    if sep:
        if kind not in ("trained", "upload"):
            raise ValueError(f"'{kind}' is not a kind of model (use trained:<token> or upload:<token>)")
        return kept_ref(kind, token), None
    stem, _, pin = value.partition("~")
    ref = zoo_ref(stem.removesuffix(".safetensors"))
    if pin and not ref.digest.startswith(pin.lower()):
        return ref, (f"The pretrained checkpoint {stem} was rebuilt since this link was made (its content was "
                     f"{pin[:PIN]}…, now {ref.digest[:PIN]}…): the numbers may differ from the ones shared.")
    return ref, None


def unchanged(ref: ModelRef) -> bool:
    """The model's file is still there with the content the reference names (cheap: a stat for a
    zoo file, the metadata of a kept model, whose files are written once)."""
    if ref.kind == "zoo":
        path = checkpoint_dir() / f"{ref.key}.safetensors"
        try:
            stat = path.stat()
        except OSError:
            return False
        return _file_digest(str(path), stat.st_mtime_ns, stat.st_size) == ref.digest
    return kept_store().info(ref.key) is not None


def model_bytes(ref: ModelRef) -> bytes:
    """The checkpoint bytes of a model (KeyError when a kept model is gone, OSError for a zoo file)."""
    if ref.kind == "zoo":
        return (checkpoint_dir() / f"{ref.key}.safetensors").read_bytes()
    return kept_store().data(ref.key)
