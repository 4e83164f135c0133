"""The explorer's state in one place: session keys, model references, kept models, the owner,
training jobs, and the URL state of every view.

**Models** are named by `ModelRef`: a zoo checkpoint (`model=encoder-parity-n8`, pinned to its
content as `encoder-parity-n8~<sha256 prefix>`), or a kept model (`model=trained:<token>`,
`model=upload:<token>`, `sensviz.kept`). The selection lives in the session and in the URL.

**URL state.** Every view is a link: the public parameters `model`, `compare`, `n` and `job`, the
same on every page, and each page's own settings (`setting` / `set_setting`). On the first run of
a session (a link, a reload) the URL says what to show; afterwards the session does, and every run
writes the URL again (Streamlit clears the query string on a page switch). A bad or stale
parameter becomes a one-line notice and the default.

**Who is who.** A random owner id lives in a browser cookie (set by a tiny script) and is read
back through `st.context.cookies` when the next session connects; without cookies (AppTest) the
session keeps its own. The owner lists and deletes their kept models and has at most one training
job. Every session-state key of the app is defined here; pages write none of their own.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import sys
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from sensviz.jobs import JobManager
from sensviz.kept import KeptStore, cap_bytes, data_dir
from sensviz.text import quoted

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")

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


# ----------------------------------------------------------------------------- paths and singletons


def checkpoint_dir() -> Path:
    """Where pretrained checkpoints are listed from: checkpoints/, or $SENSVIZ_CHECKPOINT_DIR."""
    return Path(os.environ.get("SENSVIZ_CHECKPOINT_DIR", ROOT / "checkpoints"))


def results_roots() -> list[Path]:
    """The folders the Experiments page may open sweeps under: $SENSVIZ_RESULTS_DIRS (os.pathsep-separated),
    else the shipped results `experiments/results/` and `$SENSVIZ_DATA_DIR/sweeps`. The first holds
    the shipped results (`<scale>/<experiment>/`)."""
    configured = os.environ.get("SENSVIZ_RESULTS_DIRS")
    if configured:
        return [Path(part) for part in configured.split(os.pathsep) if part]
    return [ROOT / "experiments" / "results", data_dir() / "sweeps"]


def results_dir() -> Path:
    """Where the shipped sweep results live: the first of `results_roots()`."""
    return results_roots()[0]


FOLDER_CHARS = 1024
"""The longest sweep folder a user may type (checked before any file system call)."""
FOLDER_PART_CHARS = 255
"""The longest name of one folder in it (the file systems' own limit)."""
NOT_A_RESULTS_FOLDER = ("That folder is not a sweep folder under this server's results folders: give the folder a sweep "
                        "wrote (its --out) relative to them, e.g. quick/tradeoff.")


def sweep_folder(text: str) -> Path:
    """The sweep folder a user typed, resolved (symbolic links followed) and inside one of
    `results_roots()`: an absolute path there, or a path relative to a root (the first that has it).
    ValueError with one line that quotes no path of the server for anything else: too long, `~`,
    `..` or a link out of the roots, a missing folder."""
    text = text.strip()
    if not text or len(text) > FOLDER_CHARS or "\x00" in text or text.startswith("~"):
        raise ValueError(NOT_A_RESULTS_FOLDER)
    if any(len(part) > FOLDER_PART_CHARS for part in text.split("/")):
        raise ValueError(NOT_A_RESULTS_FOLDER)
    for root in results_roots():
        try:
            base = root.resolve()
            found = (base / text).resolve()
        except (OSError, RuntimeError):  # a loop of links, a name the file system refuses
            continue
        if found.is_relative_to(base) and (found / "runs.parquet").is_file():
            return found
    raise ValueError(NOT_A_RESULTS_FOLDER)


# The server's kept models and job manager, one per process. Held outside this module so that
# Streamlit reloading an edited module does not start a second manager on the same jobs folder.
_HOLDER = sys.modules.setdefault("_sensviz_explorer_singletons", types.ModuleType("_sensviz_explorer_singletons"))
if not hasattr(_HOLDER, "values"):
    _HOLDER.values, _HOLDER.lock = {}, threading.Lock()
_SINGLETONS: dict[str, object] = _HOLDER.values
_SINGLETONS_LOCK: threading.Lock = _HOLDER.lock


def kept_store() -> KeptStore:
    """The server's kept models (one per process: not a cache, so clearing caches keeps it)."""
    with _SINGLETONS_LOCK:
        if "kept" not in _SINGLETONS:
            _SINGLETONS["kept"] = KeptStore(data_dir() / "kept", cap_bytes())
        return _SINGLETONS["kept"]


def job_manager() -> JobManager:
    """The server's training jobs (one manager per process, with its queue and its cap)."""
    store = kept_store()
    with _SINGLETONS_LOCK:
        if "jobs" not in _SINGLETONS:
            _SINGLETONS["jobs"] = JobManager(data_dir() / "jobs", store)
        return _SINGLETONS["jobs"]


# ----------------------------------------------------------------------------- model references

KINDS = ("zoo", "trained", "upload")
ZOO_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,120}$")
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


@st.cache_data(show_spinner=False, max_entries=256)
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    return digest(Path(path).read_bytes())


def zoo_ref(stem: str) -> ModelRef:
    """The reference of a zoo checkpoint by its file stem (ValueError when there is none)."""
    if not ZOO_NAME.match(stem):
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


# ----------------------------------------------------------------------------- the owner

OWNER_COOKIE = "sensviz_owner"
_OWNER_ID = re.compile(r"^[A-Za-z0-9_-]{16,64}$")


def owner() -> str:
    """This browser's owner id: from its cookie, else a new one (the frame then saves it)."""
    if OWNER not in st.session_state:
        cookie = st.context.cookies.get(OWNER_COOKIE)
        if isinstance(cookie, str) and _OWNER_ID.match(cookie):  # no cookies under AppTest
            st.session_state[OWNER] = cookie
        else:
            st.session_state[OWNER] = secrets.token_urlsafe(16)
            st.session_state[OWNER_UNSAVED] = True
    return st.session_state[OWNER]


def owner_cookie_script() -> str | None:
    """The script that stores a new owner id in the browser (None when it came from the cookie)."""
    if not st.session_state.get(OWNER_UNSAVED):
        return None
    return (f"<script>document.cookie = '{OWNER_COOKIE}={owner()}; Path=/; Max-Age=31536000; SameSite=Strict';"
            "</script>")


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


def release_upload(uploaded) -> None:
    """Remove an uploaded file's bytes from Streamlit's uploaded-file manager. Streamlit has no public
    call for it: this is the manager of the script run's context (`ScriptRunContext.uploaded_file_mgr`,
    a `MemoryUploadedFileManager` on the server and in AppTest) and its `remove_file(session_id,
    file_id)`, the call behind the uploader's own delete request; tests/test_upload_release.py pins
    it to the installed Streamlit."""
    ctx = get_script_run_ctx()
    if ctx is not None:
        ctx.uploaded_file_mgr.remove_file(ctx.session_id, uploaded.file_id)


# ----------------------------------------------------------------------------- URL state

PUBLIC = ("model", "compare", "n", "job")
"""The parameters every page shares."""
URL_VALUE_CHARS = 1000
"""The longest URL parameter (name or value) read; a longer one is a notice, before any parsing."""


def read_url() -> dict[str, str] | None:
    """On the first run of a session: the URL's public parameters (the page's own are kept for
    `setting`); None on later runs, where the session says what to show."""
    if st.session_state.get(URL_READ):
        return None
    st.session_state[URL_READ] = True
    st.session_state[NOTICES] = []
    incoming = {}
    for name, value in st.query_params.to_dict().items():
        if len(name) > URL_VALUE_CHARS or len(value) > URL_VALUE_CHARS:
            notice(f"{quoted(name)}={quoted(value)} was not used: longer than {URL_VALUE_CHARS:,} characters.")
            write_url({name: None})
        else:
            incoming[name] = value
    st.session_state[URL_SETTINGS] = {k: v for k, v in incoming.items() if k not in PUBLIC}
    return {k: v for k, v in incoming.items() if k in PUBLIC}


def write_url(values: dict[str, str | None]) -> None:
    """Put these parameters in the URL (None removes one); unchanged ones send nothing."""
    for name, value in values.items():
        if value is None:
            if name in st.query_params:
                del st.query_params[name]
        elif st.query_params.get(name) != value:
            st.query_params[name] = value


def keep_only(allowed: tuple[str, ...]) -> None:
    """Remove the URL parameters of other pages (a browser clears them on a page switch; be sure)."""
    write_url({name: None for name in list(st.query_params) if name not in PUBLIC and name not in allowed})


def check_url_params(allowed: tuple[str, ...]) -> None:
    """Notice (and drop) parameters of the first run's URL that this page does not know."""
    unknown = [k for k in st.session_state.get(URL_SETTINGS, {}) if k not in allowed]
    if not unknown:
        return
    named = ", ".join(quoted(name, 40) for name in unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "")
    notice(f"{named} {'is' if len(unknown) == 1 else 'are'} not a setting of this page; ignored.")
    for name in unknown:
        st.session_state[URL_SETTINGS].pop(name)
        write_url({name: None})


def notice(text: str) -> None:
    """A one-line notice about the URL, shown at the top of the page as markdown: every value of the
    URL in it is quoted with `sensviz.text.quoted` (escaped, one bounded line)."""
    st.session_state.setdefault(NOTICES, []).append(text)


def take_notices() -> list[str]:
    return st.session_state.pop(NOTICES, [])


def setting(page: str, param: str, default: T, parse: Callable[[str], T]) -> T:
    """A page setting: what the session chose last (a setting left at its default follows the
    default, which may depend on the model), else the first run's URL value (`parse` raises
    ValueError for a bad one: notice, and the default), else `default`."""
    settings = st.session_state.setdefault(SETTINGS, {})
    if (page, param) in settings:
        value, old_default = settings[(page, param)]
        return default if value == old_default else value
    raw = st.session_state.get(URL_SETTINGS, {}).pop(param, None)
    value = default
    if raw is not None:
        try:
            value = parse(raw)
        except ValueError as err:
            notice(f"{param}={quoted(raw)} was not used: {quoted(err, 200)}. Showing the default.")
    settings[(page, param)] = (value, default)
    return value


def set_setting(page: str, param: str, value, default, fmt: Callable[[object], str] = str) -> None:
    """Remember a page setting and put it in the URL (left out when it is the default)."""
    st.session_state.setdefault(SETTINGS, {})[(page, param)] = (value, default)
    write_url({param: None if value == default else fmt(value)})
