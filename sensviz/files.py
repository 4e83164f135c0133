"""Files on disk: one way to write a file so that no reader ever sees half of it.

Every writer of the library (checkpoints, sweep records and tables, the kept-model store, the
training jobs' files) goes through `write_atomic`: the bytes go to a temporary file beside the
target, which then replaces the target in one step (`os.replace`), so a reader sees the old
content or the new one, and a failure leaves the target as it was.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that a reader sees the old content or the new one, never half of it."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
