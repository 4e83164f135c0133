"""An upload whose file name no file can have: refused by the sidebar in one line, not by a bare HTTP 400.

Streamlit's uploader sends the file's name in a multipart header; a name of thousands of characters (a crafted
request: a file on disk has at most `NAME_MAX_BYTES`) makes the form parser answer 400 before the app sees the file,
and the browser then shows only "AxiosError: Request failed with status code 400". `LongUploadNames` (an ASGI
middleware of `app.py`'s server) replaces such a name with `LONG_NAME`, which no browser sends (a file's name has
no "/"), before the parser reads it; the sidebar refuses an upload of that name with `LONG_NAME_REFUSED`. Only the
first part's headers are read ahead (at most `HEAD_BYTES`); the rest of the body streams through as it comes.
"""

from __future__ import annotations

import re

UPLOAD_PATH = "/_stcore/upload_file/"
NAME_MAX_BYTES = 255
"""The longest file name Linux and macOS allow (NAME_MAX), in bytes of UTF-8."""
HEAD_BYTES = 1 << 20
"""The most of a body read ahead to find its first part's headers."""
LONG_NAME = "name/too/long.safetensors"
"""What a longer name becomes: a file's name never holds "/"."""
LONG_NAME_REFUSED = (f"This file cannot be used: its name is over {NAME_MAX_BYTES} bytes, longer than a file on disk can "
                     "have. Rename it and upload it again.")
_NAMES = re.compile(rb'(?<![\w-])((?:file)?name\*?=)("(?:[^"\\\r\n]|\\.)*"|[^;\r\n]*)', re.I)
"""A `name=` or `filename=` parameter of a part's headers (the browser's uploader puts the file's name in both)."""


def shorten(head: bytes) -> bytes:
    """The multipart headers with each name (the part's and its file's) over `NAME_MAX_BYTES` replaced by
    `LONG_NAME`."""
    def one(match: re.Match) -> bytes:
        value = match.group(2).strip(b'"')
        return match.group(0) if len(value) <= NAME_MAX_BYTES else match.group(1) + b'"' + LONG_NAME.encode() + b'"'

    return _NAMES.sub(one, head)


class LongUploadNames:
    """ASGI middleware: in an upload's body, a file name over `NAME_MAX_BYTES` becomes `LONG_NAME`."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "PUT" or UPLOAD_PATH not in scope.get("path", ""):
            return await self.app(scope, receive, send)
        head, more = b"", True
        while more and b"\r\n\r\n" not in head and len(head) < HEAD_BYTES:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: let the app see it
                return await self.app(scope, _replay([message]), send)
            head, more = head + message.get("body", b""), message.get("more_body", False)
        ends = head.find(b"\r\n\r\n")
        if ends < 0:
            return await self.app(scope, _replay([_chunk(head, more)], receive), send)
        new_head = shorten(head[:ends])
        body = new_head + head[ends:]
        scope = {**scope, "headers": _content_length(scope["headers"], len(head) - len(body))}
        return await self.app(scope, _replay([_chunk(body, more)], receive), send)


def _chunk(body: bytes, more: bool) -> dict:
    return {"type": "http.request", "body": body, "more_body": more}


def _content_length(headers, shorter_by: int) -> list:
    """The request's headers with its content-length less `shorter_by`."""
    if not shorter_by:
        return headers
    return [(k, str(int(v) - shorter_by).encode()) if k.lower() == b"content-length" else (k, v) for k, v in headers]


async def _gone() -> dict:
    return {"type": "http.disconnect"}


def _replay(first: list[dict], rest=_gone):
    """A `receive` that gives `first`'s messages, then `rest`'s."""
    queue = list(first)

    async def receive():
        if queue:
            return queue.pop(0)
        return await rest()

    return receive
