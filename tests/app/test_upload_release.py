"""Uploads leave the server's memory: the upload cap of the config and of the loader agree, a refused
upload is removed from Streamlit's uploaded-file manager at once, and a closed tab's session is
dropped. The removal uses Streamlit internals (it offers no public call): these tests pin them to the
installed version and fail when they change."""

import asyncio
import inspect
import io
import os
import sys
import tempfile
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("SENSVIZ_DATA_DIR", tempfile.mkdtemp(prefix="sensviz-upload-"))

from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager  # noqa: E402
from streamlit.runtime.scriptrunner_utils.script_run_context import ScriptRunContext  # noqa: E402
from streamlit.runtime.uploaded_file_manager import UploadedFile, UploadedFileRec  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from sensviz.checkpoints import MB, SIZE_CAP, CheckpointError, load_checkpoint  # noqa: E402
from ui import registry, uploads  # noqa: E402

CONFIG = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())


def held(manager: MemoryUploadedFileManager) -> int:
    """The bytes the manager holds, as the server's /_stcore/metrics reports them."""
    return sum(stat.byte_length for stats in manager.get_stats().values() for stat in stats
               if stat.category_name == "UploadedFileManager")


def put(app, path: str, name: str, data: bytes) -> int:
    """The HTTP status of a browser's upload (a multipart PUT of one file, named as Chromium names it: the part
    and its file by the file's name) to the ASGI `app`."""
    boundary = "sensviz-test-boundary"
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{name}"\r\n'
            f"Content-Type: application/octet-stream\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    incoming = [{"type": "http.request", "body": body, "more_body": False}]
    sent = []

    async def receive():
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "PUT", "scheme": "http",
             "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
             "server": ("testserver", 80), "client": ("127.0.0.1", 5000),
             "headers": [(b"content-type", f"multipart/form-data; boundary={boundary}".encode()),
                         (b"content-length", str(len(body)).encode())]}
    asyncio.run(app(scope, receive, send))
    return next(m["status"] for m in sent if m["type"] == "http.response.start")


def test_the_upload_cap_of_the_config_is_the_loaders(monkeypatch):
    """One cap in bytes for everyone: the config's, in MB as the browser counts on Linux and macOS, is the
    loader's, and the loader says it in MB; the server's upload route reads it in MiB, so it takes what a
    browser counting 2^20 bytes to the MB sends, for the loader to refuse (checked with a 1 MiB cap: a file
    just under 1 MiB with its multipart framing is taken, 1 MiB and a byte refused)."""
    assert CONFIG["server"]["maxUploadSize"] * MB == SIZE_CAP == 64 * 10**6 < 64 * 2**20
    with pytest.raises(CheckpointError, match=r"over the 64 MB size cap"):
        load_checkpoint(io.BytesIO(b"\0" * (SIZE_CAP + 1)))
    from starlette.applications import Starlette
    from streamlit import config
    from streamlit.web.server.starlette.starlette_routes import create_upload_routes

    options = {"server.maxUploadSize": 1, "server.enableXsrfProtection": False}  # a browser without the cookie
    real = config.get_option
    monkeypatch.setattr(config, "get_option", lambda key: options[key] if key in options else real(key))
    manager = MemoryUploadedFileManager("/_stcore/upload_file")
    session = SimpleNamespace(is_active_session=lambda session_id: session_id == "s")
    app = Starlette(routes=create_upload_routes(session, manager, None))
    under = 2**20 - 1024  # the request's framing counts against the cap too
    assert put(app, "/_stcore/upload_file/s/f", "under.safetensors", b"x" * under) == 204
    assert put(app, "/_stcore/upload_file/s/g", "over.safetensors", b"x" * (2**20 + 1)) == 413
    assert held(manager) == under and manager.get_files("s", ["g"]) == []


def test_a_file_name_longer_than_a_file_can_have_reaches_the_app_as_one_it_refuses(monkeypatch):
    """Streamlit's upload route answers a 10,000-character name with 400 (the browser then shows only "AxiosError");
    behind `app.py`'s middleware the route takes it (204), and what reaches the route is the same body under
    `LONG_NAME`, its length declared right. A name of 254 bytes passes unchanged."""
    from starlette.applications import Starlette
    from streamlit import config
    from streamlit.web.server.starlette.starlette_routes import create_upload_routes

    from ui.upload_names import LONG_NAME, LongUploadNames

    real = config.get_option
    monkeypatch.setattr(config, "get_option",
                        lambda key: False if key == "server.enableXsrfProtection" else real(key))
    session = SimpleNamespace(is_active_session=lambda session_id: session_id == "s")
    routes = Starlette(routes=create_upload_routes(session, MemoryUploadedFileManager("/_stcore/upload_file"), None))
    data, long = b"\x10\x00" + b"x" * 100_000, "n" * 10_000 + ".safetensors"
    assert put(routes, "/_stcore/upload_file/s/a", long, data) == 400
    assert put(LongUploadNames(routes), "/_stcore/upload_file/s/b", long, data) == 204

    seen = []

    async def route(scope, receive, send):  # what the route is given
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        seen.append((dict(scope["headers"])[b"content-length"], body))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    for name, shown in ((long, LONG_NAME), ("é" * 121 + ".safetensors", "é" * 121 + ".safetensors")):  # 254 bytes
        assert put(LongUploadNames(route), "/_stcore/upload_file/s/c", name, data) == 204
        length, body = seen.pop()
        assert int(length) == len(body) and body.count(f'name="{shown}"'.encode()) == 2 and data in body


def test_a_closed_tabs_session_is_dropped_after_two_minutes():
    from streamlit import config

    assert CONFIG["server"]["disconnectedSessionTTL"] == 120
    assert "server.disconnectedSessionTTL" in config._config_options_template  # the option exists in this Streamlit


def test_the_internal_calls_that_free_an_upload_exist():
    """The server `streamlit run` starts holds uploads in a MemoryUploadedFileManager; remove_file(session_id,
    file_id) frees its bytes."""
    from streamlit.runtime import Runtime
    from streamlit.web.server.server import Server

    before = Runtime._instance
    Runtime._instance = None
    try:
        server = Server(str(ROOT / "app.py"), is_hello=False)  # built, not started: no port, no thread
        assert type(server._runtime.uploaded_file_mgr) is MemoryUploadedFileManager
    finally:
        Runtime._instance = before  # the runtime is one per process (AppTest puts back its own the same way)
    assert {"uploaded_file_mgr", "session_id"} <= set(inspect.signature(ScriptRunContext).parameters)
    assert list(inspect.signature(MemoryUploadedFileManager.remove_file).parameters) == ["self", "session_id", "file_id"]
    manager = MemoryUploadedFileManager("/upload")
    manager.add_file("s", UploadedFileRec("f", "big.safetensors", "application/octet-stream", b"x" * 1000))
    manager.add_file("t", UploadedFileRec("g", "other.safetensors", "application/octet-stream", b"y" * 10))
    assert held(manager) == 1010  # two sessions (a session holds its newest upload only: the router's wrapper)
    manager.remove_file("s", "f")
    assert manager.get_files("s", ["f"]) == [] and held(manager) == 10
    assert "file_id" in vars(UploadedFile(manager.get_files("t", ["g"])[0], {}))


def test_a_refused_upload_leaves_the_managers_memory_and_the_uploader_starts_empty(monkeypatch):
    removed = []
    original = MemoryUploadedFileManager.remove_file

    def remove_file(self, session_id, file_id):
        held = self.get_files(session_id, [file_id])
        original(self, session_id, file_id)
        removed.append((len(held[0].data) if held else None, self.get_files(session_id, [file_id])))

    monkeypatch.setattr(MemoryUploadedFileManager, "remove_file", remove_file)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.run()
    at.sidebar.segmented_control(key=registry.SOURCE).set_value("Upload").run()
    first_key = at.sidebar.file_uploader[0].key
    data = b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all" + b"\x00" * 100_000
    at.sidebar.file_uploader[0].upload("broken.safetensors", data, "application/octet-stream").run()
    assert not at.exception
    assert removed == [(len(data), [])]  # the bytes were held, and are gone
    assert [e.value.startswith("This file cannot be used") for e in at.sidebar.error] == [True]
    assert at.sidebar.file_uploader[0].key != first_key  # the run went on with a fresh, empty uploader
    assert first_key not in at.session_state  # and Streamlit dropped the old one's value, which held the file
    at.run()
    assert len(removed) == 1 and len(at.sidebar.error) == 1  # the line stays; nothing left to free


def test_a_session_holds_only_its_newest_upload():
    """A script can send any number of uploads into one session, never claimed by a widget: the
    session keeps only the newest (`uploads.hold_newest_upload_only`); other sessions keep theirs."""
    uploads.hold_newest_upload_only()
    uploads.hold_newest_upload_only()  # once: a second call does not wrap it again
    manager = MemoryUploadedFileManager("/_stcore/upload_file")
    for k in range(5):
        manager.add_file("attacker", UploadedFileRec(f"f{k}", "cap.safetensors", "application/octet-stream", b"x" * 1000))
    manager.add_file("student", UploadedFileRec("s", "mine.safetensors", "application/octet-stream", b"y" * 10))
    assert [f.file_id for f in manager.get_files("attacker", ["f0", "f1", "f2", "f3", "f4"])] == ["f4"]
    assert [f.file_id for f in manager.get_files("student", ["s"])] == ["s"]
    assert sum(len(f.data) for s in manager.file_storage.values() for f in s.values()) == 1010
