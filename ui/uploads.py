"""The uploads of a session: the uploads it kept (by digest and loading overrides), the uploader's
key (a new one after a refused upload), the one line about the last refused upload, and the two
places where the explorer reaches into Streamlit's uploaded-file manager (a session holds its newest
upload only; a refused upload's bytes leave the server's memory at once). The keys are
`ui.registry`'s."""

from __future__ import annotations

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from ui import registry


def kept_upload(key: tuple) -> str | None:
    """The token of an upload this session kept already (key: its digest and loading overrides)."""
    return st.session_state.get(registry.UPLOADS, {}).get(key)


def remember_upload(key: tuple, token: str) -> None:
    st.session_state.setdefault(registry.UPLOADS, {})[key] = token


def upload_key() -> str:
    """The key of the uploader: a new one after each refused upload, so the browser shows it empty."""
    return f"{registry.UPLOAD_FILE}_{st.session_state.get(registry.UPLOAD_ROUND, 0)}"


def refuse_upload(uploaded, message: str) -> None:
    """Forget a refused upload: its bytes leave the server's memory now (not when the session ends)
    and the script reruns with a new, empty uploader, so that Streamlit also drops the old widget's
    value (it holds the file too); `message` stays until the next upload."""
    release_upload(uploaded)
    st.session_state[registry.UPLOAD_REFUSED] = message
    st.session_state[registry.UPLOAD_ROUND] = st.session_state.get(registry.UPLOAD_ROUND, 0) + 1
    st.rerun()


def refused_upload() -> str | None:
    """The one line about the last refused upload (None when the last upload was kept, or none was refused)."""
    return st.session_state.get(registry.UPLOAD_REFUSED)


def accept_upload() -> None:
    """An upload was kept: the line about an earlier refused one goes."""
    st.session_state.pop(registry.UPLOAD_REFUSED, None)


def hold_newest_upload_only() -> None:
    """Let a session hold at most its newest upload in Streamlit's memory: the sidebar's uploader
    takes one file, yet the upload endpoint accepts any number per session (a script can send them
    without the widget), each held until the session ends. Streamlit has no setting for it: this
    wraps `MemoryUploadedFileManager.add_file` (once per process) to remove the session's other
    files first; tests/app/test_upload_release.py pins it to the installed Streamlit."""
    from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager

    add = MemoryUploadedFileManager.add_file
    if getattr(add, "newest_only", False):
        return

    def add_file(self, session_id: str, file) -> None:
        for other in [k for k in self.file_storage.get(session_id, {}) if k != file.file_id]:
            self.remove_file(session_id, other)
        add(self, session_id, file)

    add_file.newest_only = True
    MemoryUploadedFileManager.add_file = add_file


def release_upload(uploaded) -> None:
    """Remove an uploaded file's bytes from Streamlit's uploaded-file manager. Streamlit has no public
    call for it: this is the manager of the script run's context (`ScriptRunContext.uploaded_file_mgr`,
    a `MemoryUploadedFileManager` on the server and in AppTest) and its `remove_file(session_id,
    file_id)`, the call behind the uploader's own delete request; tests/app/test_upload_release.py pins
    it to the installed Streamlit."""
    ctx = get_script_run_ctx()
    if ctx is not None:
        ctx.uploaded_file_mgr.remove_file(ctx.session_id, uploaded.file_id)
