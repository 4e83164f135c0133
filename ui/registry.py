"""The session: every session-state key of the explorer is defined here (pages write none of their
own), with the accessors of the session's state: the selected and compared models, the input length
per model, the training job followed, the models shared by a link, the uploads kept.

The rest of the explorer's state lives by concern: `ui.model_refs` (which model), `ui.server` (the
server's folders, kept models and jobs), `ui.owner_id` (who is who), `ui.url_state` (the URL).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

if TYPE_CHECKING:
    from ui.model_refs import ModelRef

# ----------------------------------------------------------------------------- session keys

SELECTED = "sv_selected"  # ModelRef of the selected model, or absent
COMPARE = "sv_compare"  # ModelRef of the model to compare with, or absent
ANALYSIS_N = "sv_analysis_n"  # {ModelRef: input length chosen for analysis}
PAGE = "sv_page"  # the id of the page this session draws (ui.page.begin), for its settings and callbacks
CURRENT = "sv_current"  # this run's selection (ui.page.Selection), set by the frame before the page runs
OWNER = "sv_owner"  # this session's owner id
OWNER_UNSAVED = "sv_owner_unsaved"  # the owner id is not in a cookie yet: the frame sets it
URL_READ = "sv_url_read"  # the first run's URL has been read
URL_SETTINGS = "sv_url_settings"  # {param: raw value} of the first run's URL, for the page settings
SETTINGS = "sv_settings"  # {(page, param): value} page settings, kept across page switches
NOTICES = "sv_notices"  # this run's one-line notices about the URL
JOB = "sv_job"  # id of the training job this session follows
JOB_DONE = "sv_job_done"  # ids of finished jobs whose model this session has selected
UPLOADS = "sv_uploads"  # {(digest, overrides): token} uploads kept in this session
SHARED = "sv_shared"  # kept models of other owners opened by a link in this session
SHOW_SOURCE = "sv_show_source"  # the sidebar switches to this model source on its next run
LAB_PREDICTIONS = "sv_lab_predictions"  # {Lab chapter: the student's prediction (an option, or "skip")}
LAB_REVEALED = "sv_lab_revealed"  # Lab chapters whose answer this session revealed
LAB_TOP = "sv_lab_top"  # the Lab turned a page: scroll to its top on this run
UPLOAD_REFUSED = "sv_upload_refused"  # the one line about the last upload refused in this session
UPLOAD_ROUND = "sv_upload_round"  # bumped when an upload is refused: the uploader starts empty again

# widget keys: the sidebar
SOURCE = "sv_w_source"
ZOO_TASKS = "sv_w_zoo_tasks"
ZOO_ARCHS = "sv_w_zoo_archs"
ZOO_N = "sv_w_zoo_n"
ZOO_FILE = "sv_w_zoo_file"
UPLOAD_FILE = "sv_w_upload"
UPLOAD_HEADS = "sv_w_upload_heads"
UPLOAD_TASK = "sv_w_upload_task"
UPLOAD_N = "sv_w_upload_n"
MINE = "sv_w_mine"
COMPARE_WITH = "sv_w_compare_with"
DELETE = "sv_w_delete"
DOWNLOAD = "sv_w_download_ck"
JOB_STOP = "sv_w_job_stop"
TRAIN_BUTTON = "sv_w_train_button"
TRAIN_PRESET = "sv_w_train_preset"
TRAIN_STOP = "sv_w_train_stop"
EXP_SOURCE = "sv_w_exp_source"
EXP_FOLDER = "sv_w_exp_folder"


def widget_key(*parts: object) -> str:
    """The key of a widget: `sv_w_` and its parts (a page, a setting, an input length...)."""
    return "sv_w_" + "_".join(str(p) for p in parts)


# ----------------------------------------------------------------------------- the selection


def selected() -> ModelRef | None:
    return st.session_state.get(SELECTED)


def select(ref: ModelRef | None, show: bool = False) -> None:
    """Make `ref` the selected model (None: none); with `show`, the sidebar also switches to its source."""
    if ref is None:
        st.session_state.pop(SELECTED, None)
        return
    st.session_state[SELECTED] = ref
    if show:
        st.session_state[SHOW_SOURCE] = ref.kind


def compared() -> ModelRef | None:
    return st.session_state.get(COMPARE)


def set_compared(ref: ModelRef | None) -> None:
    if ref is None:
        st.session_state.pop(COMPARE, None)
    else:
        st.session_state[COMPARE] = ref


def analysis_n(ref: ModelRef) -> int | None:
    """The input length chosen for this model in this session (None: its default)."""
    return st.session_state.get(ANALYSIS_N, {}).get(ref)


def set_analysis_n(ref: ModelRef, n: int) -> None:
    st.session_state.setdefault(ANALYSIS_N, {})[ref] = n


def followed_job() -> str | None:
    return st.session_state.get(JOB)


def follow_job(job_id: str | None) -> None:
    if job_id is None:
        st.session_state.pop(JOB, None)
    else:
        st.session_state[JOB] = job_id


def job_done(job_id: str) -> bool:
    """Whether this session has already selected the model of this finished job."""
    return job_id in st.session_state.get(JOB_DONE, set())


def mark_job_done(job_id: str) -> None:
    st.session_state.setdefault(JOB_DONE, set()).add(job_id)


def shared_refs() -> list[ModelRef]:
    """Other owners' kept models opened by a link in this session (listed with the user's own)."""
    return list(st.session_state.get(SHARED, []))


def add_shared(ref: ModelRef) -> None:
    shared = st.session_state.setdefault(SHARED, [])
    if ref not in shared:
        shared.append(ref)


def kept_upload(key: tuple) -> str | None:
    """The token of an upload this session kept already (key: its digest and loading overrides)."""
    return st.session_state.get(UPLOADS, {}).get(key)


def remember_upload(key: tuple, token: str) -> None:
    st.session_state.setdefault(UPLOADS, {})[key] = token


def upload_key() -> str:
    """The key of the uploader: a new one after each refused upload, so the browser shows it empty."""
    return f"{UPLOAD_FILE}_{st.session_state.get(UPLOAD_ROUND, 0)}"


def refuse_upload(uploaded, message: str) -> None:
    """Forget a refused upload: its bytes leave the server's memory now (not when the session ends)
    and the script reruns with a new, empty uploader, so that Streamlit also drops the old widget's
    value (it holds the file too); `message` stays until the next upload."""
    release_upload(uploaded)
    st.session_state[UPLOAD_REFUSED] = message
    st.session_state[UPLOAD_ROUND] = st.session_state.get(UPLOAD_ROUND, 0) + 1
    st.rerun()


def refused_upload() -> str | None:
    """The one line about the last refused upload (None when the last upload was kept, or none was refused)."""
    return st.session_state.get(UPLOAD_REFUSED)


def accept_upload() -> None:
    """An upload was kept: the line about an earlier refused one goes."""
    st.session_state.pop(UPLOAD_REFUSED, None)


def hold_newest_upload_only() -> None:
    """Let a session hold at most its newest upload in Streamlit's memory: the sidebar's uploader
    takes one file, yet the upload endpoint accepts any number per session (a script can send them
    without the widget), each held until the session ends. Streamlit has no setting for it: this
    wraps `MemoryUploadedFileManager.add_file` (once per process) to remove the session's other
    files first; tests/test_upload_release.py pins it to the installed Streamlit."""
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
    file_id)`, the call behind the uploader's own delete request; tests/test_upload_release.py pins
    it to the installed Streamlit."""
    ctx = get_script_run_ctx()
    if ctx is not None:
        ctx.uploaded_file_mgr.remove_file(ctx.session_id, uploaded.file_id)


# ----------------------------------------------------------------------------- class mode (ui.classroom, pages/class.py)
# One block for the class keys (issue 19), kept apart so that the registry's split can move it whole.

CLASS = "sv_class"  # the code of the class this session is in (from `class=` in the URL, or chosen)
CLASS_REJOIN = "sv_class_rejoin"  # {class code: the member's rejoin code}, shown after joining
CLASS_CREATED = "sv_class_created"  # {"code", "private"} of the class this session just created (Home shows its links)
CLASS_FILLED = "sv_class_filled"  # the assignment cell last filled into the Train form
CLASS_NAME = "sv_w_class_name"  # Home: the new class's name
CLASS_CREATE = "sv_w_class_create"
CLASS_JOIN_NAME = "sv_w_class_join_name"
CLASS_JOIN = "sv_w_class_join"
CLASS_REJOIN_CODE = "sv_w_class_rejoin_code"
CLASS_REJOIN_BUTTON = "sv_w_class_rejoin_button"
CLASS_TRAIN = "sv_w_class_train"  # the class page's "train my assignment"
CLASS_ASSIGN = "sv_w_class_assign"  # the instructor's "start the assignment"
CLASS_MEMBER = "sv_w_class_member"  # the instructor's chosen member (rename, remove)
CLASS_RENAME = "sv_w_class_rename"
CLASS_RENAME_BUTTON = "sv_w_class_rename_button"
CLASS_REMOVE = "sv_w_class_remove"
CLASS_CLOSE = "sv_w_class_close"
CLASS_DELETE = "sv_w_class_delete"


def class_key(*parts: object) -> str:
    """A widget of class mode with a variable part (a gallery row's button, a job's Stop): `sv_w_class_...`."""
    return widget_key("class", *parts)


def current_class() -> str | None:
    return st.session_state.get(CLASS)


def enter_class(code: str | None) -> None:
    st.session_state[CLASS] = code
