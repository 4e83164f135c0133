"""The session: every session-state key of the explorer is defined here (pages write none of their
own), with the accessors of the session's choices: the selected and compared models, the input
length per model, the training job followed, the models shared by a link.

The rest of the explorer's state lives by concern, each module using these keys: `ui.model_refs`
(which model), `ui.url_state` (the URL, and the pages' settings kept in the session), `ui.uploads`
(the uploads of this session), `server.services` (the server's folders, kept models and jobs),
`ui.owner_id` (who is who).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import streamlit as st

if TYPE_CHECKING:
    from ui.model_refs import ModelRef

# ----------------------------------------------------------------------------- session keys

SELECTED = "sv_selected"  # ModelRef of the selected model, or absent
COMPARE = "sv_compare"  # ModelRef of the model to compare with, or absent
ANALYSIS_N = "sv_analysis_n"  # {ModelRef: input length chosen for analysis}
CURRENT = "sv_current"  # this run's selection (ui.page.Selection), set by the frame before the page runs
OWNER = "sv_owner"  # this session's owner id
OWNER_UNSAVED = "sv_owner_unsaved"  # the owner id is not in a cookie yet: the frame sets it
URL_READ = "sv_url_read"  # the first run's URL has been read
URL_SETTINGS = "sv_url_settings"  # {param: raw value} of the first run's URL, for the pages' settings
PAGE_SETTINGS = "sv_settings"  # {(page id, param): (value, its default then)} the pages' settings (ui.page.Settings)
NOTICES = "sv_notices"  # this run's one-line notices about the URL
JOB = "sv_job"  # id of the training job this session follows
JOB_DONE = "sv_job_done"  # ids of finished jobs whose model this session has selected
AWAY_ASKED = "sv_away_asked"  # owner ids the server was asked about: a run of theirs that ended while they were away
UPLOADS = "sv_uploads"  # {(digest, overrides): token} uploads kept in this session
SHARED = "sv_shared"  # kept models of other owners opened by a link in this session
SHOW_SOURCE = "sv_show_source"  # the sidebar switches to this model source on its next run
LAB_PREDICTIONS = "sv_lab_predictions"  # {Lab chapter: the student's prediction (an option, or "skip")}
LAB_TOP = "sv_lab_top"  # the Lab turned a page: scroll to its top on this run
LAB_RESUME_ASKED = "sv_lab_resume_asked"  # the Lab offered to continue at the first chapter not yet revealed
PAGE = "sv_page"  # the url_path of the page this run draws, set by the router before the frame (ui.lab_state reads it)
UPLOAD_REFUSED = "sv_upload_refused"  # the one line about the last upload refused in this session
MOVED = "sv_moved"  # this session started on a server that did not hold the browser's earlier session (ui.moved)
MOVED_DISMISS = "sv_w_moved_dismiss"  # the moved notice read: not shown again in this session
UPLOAD_ROUND = "sv_upload_round"  # bumped when an upload is refused: the uploader starts empty again
INIT_REFUSED = "sv_init_refused"  # the one line about the Before training page's job the server just refused

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
JOB_RERUN = "sv_w_job_rerun"  # a run a server restart ended: queue it again with its own settings
TRAIN_BUTTON = "sv_w_train_button"
TRAIN_PRESET = "sv_w_train_preset"
TRAIN_STOP = "sv_w_train_stop"
INIT_TRAIN = "sv_w_init_train"  # Before training: train initialisation 0 as a server job
INIT_STOP = "sv_w_init_stop"
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


def first_time(key: str) -> bool:
    """True once a session for `LAB_RESUME_ASKED` (whether the Lab may offer a returning student their first open
    chapter)."""
    asked = st.session_state.get(key, False)
    st.session_state[key] = True
    return not asked


def not_asked_away(owners: tuple[str, ...]) -> tuple[str, ...]:
    """Those of `owners` this session has not yet asked the server about (`AWAY_ASKED`: whether a run of theirs
    ended while they were away; `asked_away` marks one): once a session for each owner id, so a browser that
    rejoined its class (`ui.classroom.my_runs`) is asked about its other browsers' runs too."""
    asked = st.session_state.get(AWAY_ASKED, ())
    return tuple(o for o in owners if o not in asked)


def asked_away(owner: str) -> None:
    st.session_state[AWAY_ASKED] = (*st.session_state.get(AWAY_ASKED, ()), owner)


def shared_refs() -> list[ModelRef]:
    """Other owners' kept models opened by a link in this session (listed with the user's own)."""
    return list(st.session_state.get(SHARED, []))


def add_shared(ref: ModelRef) -> None:
    shared = st.session_state.setdefault(SHARED, [])
    if ref not in shared:
        shared.append(ref)


# ----------------------------------------------------------------------------- class mode (ui.classroom, pages/class.py)
# One block for the class keys (issue 19), kept apart so that the registry's split can move it whole.

CLASS = "sv_class"  # the code of the class this session is in (from `class=` in the URL, or chosen)
CLASS_REJOIN = "sv_class_rejoin"  # {class code: the member's rejoin code}, shown after joining
CLASS_CREATED = "sv_class_created"  # {"code"} of the class this session just created (Home shows its class link);
# {} after "Create another class" (the form again)
CLASS_CODE_PENDING = "sv_class_code_pending"  # the instructor code was taken; it leaves st.query_params next run
CLASS_FILLED = "sv_class_filled"  # the assignment cell last filled into the Train form
CLASS_NAME = "sv_w_class_name"  # Home: the new class's name
CLASS_CREATE = "sv_w_class_create"
CLASS_CREATE_ANOTHER = "sv_w_class_create_another"  # Home, after a class was made: the form again
CLASS_JOIN_NAME = "sv_w_class_join_name"
CLASS_JOIN = "sv_w_class_join"
CLASS_REJOIN_CODE = "sv_w_class_rejoin_code"
CLASS_REJOIN_BUTTON = "sv_w_class_rejoin_button"
CLASS_TRAIN = "sv_w_class_train"  # the class page's "train my assignment"
CLASS_ASSIGN = "sv_w_class_assign"  # the instructor's "start the assignment"
CLASS_END = "sv_w_class_end"  # the instructor's "end the assignment"
CLASS_MEMBER = "sv_w_class_member"  # the instructor's chosen member (rename, remove)
CLASS_RENAME = "sv_w_class_rename"
CLASS_RENAME_BUTTON = "sv_w_class_rename_button"
CLASS_REMOVE = "sv_w_class_remove"
CLASS_MEMBER_REJOIN = "sv_w_class_member_rejoin"  # the instructor makes a new rejoin code for the chosen member
CLASS_CLOSE = "sv_w_class_close"
CLASS_DELETE = "sv_w_class_delete"
CLASS_READMIT = "sv_w_class_readmit"  # the instructor's "let the removed members join again"
CLASS_INSTRUCTOR_LINK = "sv_w_class_instructor_link"  # the instructor's "make a one-time instructor link"
CLASS_NEW_REJOIN = "sv_w_class_new_rejoin"  # a member's "show a rejoin code for another browser"


def class_key(*parts: object) -> str:
    """A widget of class mode with a variable part (a gallery row's button, a job's Stop): `sv_w_class_...`."""
    return widget_key("class", *parts)


def current_class() -> str | None:
    return st.session_state.get(CLASS)


def enter_class(code: str | None) -> None:
    st.session_state[CLASS] = code
