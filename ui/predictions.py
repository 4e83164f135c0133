"""The Lab's locked predictions, kept on the server under the browser's signed owner id (`ui.owner_id`).

A chapter's prediction is locked when its answer is revealed: the first one is the one scored, and
nothing a browser sends afterwards (another choice, an older link's `predict=`) changes it. One JSON
file per owner in `<data folder>/lab-answers/`, named by the sha256 of the owner id, written whole
(`sensviz.files.write_atomic`) under the folder's lock, so two tabs revealing at once keep the first.

`answers_token` signs every locked chapter (answer and time of the reveal) with the server's secret
(`server.owners.sign`, purpose "lab-answers"): the "my answers" link an instructor can trust;
`read_token` gives them back only when the signature checks.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

from sensviz.files import FolderLock, data_dir, write_atomic
from server.owners import sign, verify

FOLDER = "lab-answers"
PURPOSE = "lab-answers"
MAX_TOKEN = 4000  # characters: seven chapters' longest answers with their times take 515


def _folder(root: Path | None = None) -> Path:
    return Path(root or data_dir()) / FOLDER


def _file(owner: str, root: Path | None = None) -> Path:
    return _folder(root) / f"{hashlib.sha256(owner.encode()).hexdigest()[:32]}.json"


def locked(owner: str, root: Path | None = None) -> dict[int, dict]:
    """The owner's locked chapters: {chapter: {"answer": option or "skip", "revealed": ISO time (UTC)}}."""
    try:
        raw = json.loads(_file(owner, root).read_text())
    except (OSError, ValueError):
        return {}
    return {int(k): v for k, v in raw.items() if isinstance(v, dict) and {"answer", "revealed"} <= v.keys()}


def lock(owner: str, chapter: int, answer: str, root: Path | None = None, now: datetime | None = None) -> dict:
    """Lock the owner's prediction of `chapter` (the first lock stays: a later one returns it unchanged)."""
    folder = _folder(root)
    folder.mkdir(parents=True, exist_ok=True)
    with FolderLock(folder):
        found = locked(owner, root)
        if chapter not in found:
            when = (now or datetime.now(UTC)).isoformat(timespec="seconds")
            found[chapter] = {"answer": answer, "revealed": when}
            text = json.dumps({str(k): v for k, v in sorted(found.items())}, ensure_ascii=False)
            write_atomic(_file(owner, root), text.encode())
    return found[chapter]


def answers_token(answers: dict[int, dict], secret: bytes) -> str:
    """Every locked chapter, signed by the server: `payload.signature` (URL-safe)."""
    body = json.dumps({str(k): [v["answer"], v["revealed"]] for k, v in sorted(answers.items())},
                      ensure_ascii=False, separators=(",", ":"))
    payload = base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")
    return f"{payload}.{sign(secret, PURPOSE, payload)}"


def read_token(token: object, secret: bytes) -> dict[int, dict] | None:
    """The answers a token carries when this server signed it, else None (forged, altered or malformed)."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN or token.count(".") != 1:
        return None
    payload, signed = token.split(".")
    if not verify(secret, PURPOSE, payload, signed):
        return None
    try:
        raw = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return {int(k): {"answer": str(v[0]), "revealed": str(v[1])} for k, v in raw.items()}
    except (ValueError, binascii.Error, TypeError, IndexError, AttributeError):
        return None
