"""Who is who: a random owner id, signed by the server (`id.HMAC(secret, id)`, the secret kept with
mode 0600 in the data folder), lives in a browser cookie (set by a tiny script) and is read back
through `st.context.cookies` when the next session connects; a cookie whose signature does not
check counts as absent (a new id), and without cookies (AppTest) the session keeps its own. The
owner lists and deletes their kept models and has at most one training job. The job queue takes
turns by the client's address (`client_address`), since any script can send any cookie."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
from pathlib import Path

import streamlit as st

from sensviz.kept import data_dir
from ui.registry import OWNER, OWNER_UNSAVED
from ui.server import _SINGLETONS, _SINGLETONS_LOCK

OWNER_COOKIE = "sensviz_owner"
OWNER_SECRET = "owner_secret"
_OWNER_ID = re.compile(r"^([A-Za-z0-9_-]{16,64})\.([A-Za-z0-9_-]{43})$")


def owner_secret(folder: Path | None = None) -> bytes:
    """The server's key for owner ids: `owner_secret` in the data folder (`$SENSVIZ_DATA_DIR`),
    created once with mode 0600 (32 random bytes) and read afterwards."""
    path = Path(folder or data_dir()) / OWNER_SECRET
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes()
    with os.fdopen(fd, "wb") as file:
        file.write(secrets.token_bytes(32))
    return path.read_bytes()


def _owner_signature(secret: bytes, ident: str) -> str:
    digest = hmac.new(secret, ident.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def mint_owner(secret: bytes) -> str:
    """A new owner id, `id.HMAC(secret, id)`: only this server makes ids that `verified_owner` accepts."""
    ident = secrets.token_urlsafe(16)
    return f"{ident}.{_owner_signature(secret, ident)}"


def verified_owner(cookie: object, secret: bytes) -> str | None:
    """The owner id in a cookie when the server minted it (its HMAC checks), else None: a missing,
    malformed or forged cookie counts as absent."""
    match = _OWNER_ID.match(cookie) if isinstance(cookie, str) else None
    if match is None or not hmac.compare_digest(match.group(2), _owner_signature(secret, match.group(1))):
        return None
    return cookie


def _server_owner_secret() -> bytes:
    with _SINGLETONS_LOCK:
        if "owner_secret" not in _SINGLETONS:
            _SINGLETONS["owner_secret"] = owner_secret()
        return _SINGLETONS["owner_secret"]


def owner() -> str:
    """This browser's owner id: from its cookie when the server minted it, else a new one (the frame then saves it)."""
    if OWNER not in st.session_state:
        secret = _server_owner_secret()
        cookie = verified_owner(st.context.cookies.get(OWNER_COOKIE), secret)  # no cookies under AppTest
        st.session_state[OWNER] = cookie or mint_owner(secret)
        if cookie is None:
            st.session_state[OWNER_UNSAVED] = True
    return st.session_state[OWNER]


def client_address() -> str:
    """The address this session connects from (`st.context.ip_address`; "local" for localhost), which
    the job queue takes turns by. Behind a proxy it is what the README's class-server paragraph says."""
    return st.context.ip_address or "local"


def owner_cookie_script() -> str | None:
    """The script that stores a new owner id in the browser (None when it came from the cookie)."""
    if not st.session_state.get(OWNER_UNSAVED):
        return None
    return (f"<script>document.cookie = '{OWNER_COOKIE}={owner()}; Path=/; Max-Age=31536000; SameSite=Strict';"
            "</script>")
