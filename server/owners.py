"""The server's signing of ids it hands out (no Streamlit here).

One secret per data folder (`owner_secret`: 32 random bytes in `$SENSVIZ_DATA_DIR/owner_secret`,
mode 0600) signs everything a browser holds for the server: owner ids (`mint_owner`,
`verified_owner`: `id.HMAC(secret, id)`, read back from a cookie by `ui.owner_id`) and the class
codes of `server.classes` (`sign`, `verify`: the same HMAC over a purpose and a value, so an
owner id can never pass for a class's instructor code or the other way round), and the network
addresses the classes and the kept-model store count by (`address_key`). A value whose
signature does not check counts as absent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
from pathlib import Path

from sensviz.files import data_dir

OWNER_SECRET = "owner_secret"
_OWNER_ID = re.compile(r"([A-Za-z0-9_-]{16,64})\.([A-Za-z0-9_-]{43})")


def owner_secret(folder: Path | None = None) -> bytes:
    """The server's key: `owner_secret` in the data folder (`$SENSVIZ_DATA_DIR`), created once with
    mode 0600 (32 random bytes) and read afterwards."""
    path = Path(folder or data_dir()) / OWNER_SECRET
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes()
    with os.fdopen(fd, "wb") as file:
        file.write(secrets.token_bytes(32))
    return path.read_bytes()


def signature(secret: bytes, message: str) -> str:
    """HMAC-SHA256 of `message` under `secret`, URL-safe base64 without padding (43 characters)."""
    digest = hmac.new(secret, message.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def sign(secret: bytes, purpose: str, value: str) -> str:
    """The signature of `value` for one `purpose` (e.g. "instructor"): a value signed for one purpose
    does not verify for another."""
    return signature(secret, f"{purpose}\0{value}")


def verify(secret: bytes, purpose: str, value: str, signed: object) -> bool:
    """Whether `signed` is `sign(secret, purpose, value)` (compared in constant time)."""
    return isinstance(signed, str) and hmac.compare_digest(signed.encode(), sign(secret, purpose, value).encode())


def address_key(secret: bytes, address: str) -> str:
    """A client's network address as the server's files keep it: signed (22 characters), so that no file
    names anyone's address and nobody can tell two addresses' keys apart without the secret."""
    return sign(secret, "address", address)[:22]


def mint_owner(secret: bytes) -> str:
    """A new owner id, `id.HMAC(secret, id)`: only this server makes ids that `verified_owner` accepts."""
    ident = secrets.token_urlsafe(16)
    return f"{ident}.{signature(secret, ident)}"


def verified_owner(cookie: object, secret: bytes) -> str | None:
    """The owner id in a cookie when the server minted it (its HMAC checks), else None: a missing,
    malformed or forged cookie counts as absent."""
    match = _OWNER_ID.fullmatch(cookie) if isinstance(cookie, str) else None  # `$` would let a trailing newline in
    if match is None or not hmac.compare_digest(match.group(2), signature(secret, match.group(1))):
        return None
    return cookie
