"""What the explorer's server holds, one per process: its folders (pretrained checkpoints, sweep
results, a sweep folder a user names), the kept-model store, the training job manager and the classes. The
results folders are the library's (`sensviz.experiments.results_roots`, `results_dir`), the Lab's too."""

from __future__ import annotations

import os
import sys
import threading
import types
from pathlib import Path

from sensviz.experiments import results_dir, results_roots  # noqa: F401 (the folders: the library's, read here)
from sensviz.files import data_dir
from server import jobs
from server.classes import ClassStore
from server.jobs import JobManager
from server.kept import KeptStore
from server.owners import owner_secret

ROOT = Path(__file__).resolve().parents[1]


def checkpoint_dir() -> Path:
    """Where pretrained checkpoints are listed from: checkpoints/, or $SENSVIZ_CHECKPOINT_DIR."""
    return Path(os.environ.get("SENSVIZ_CHECKPOINT_DIR", ROOT / "checkpoints"))


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


# The server's one-per-process objects. Held outside this module so that Streamlit reloading an
# edited module does not start a second manager on the same jobs folder.
#
# Lock order (the only locks this server takes, outermost first; a thread may take a later one while
# holding an earlier one, never the reverse):
#   1. a singleton's build lock, one per name (`_one`), held only while that one object is built.
#      A build may ask for the singletons before it in `BUILD_ORDER`, never after: the job manager's
#      build asks for the class and kept stores, the kept store's `pins` asks for the class store
#      only when it is called, after every build.
#   2. `JobManager.lock`, held for the manager's own bookkeeping; never while it calls into a store
#      (the manager keeps a finished run's model, and recovers an earlier server's runs, without it).
#   3. a store's folder lock (`ClassStore.lock`, `KeptStore.lock`: flocks shared with the other
#      replicas): while one is held, code reads another store only through its lock-free reads
#      (`ClassStore.pins`, `JobManager.folder_bytes`) or the manager's own short reads
#      (`JobManager.status`, `records`), which take only the manager's lock and call nothing else.
#      So the class store may ask the manager (`ClassStore.sync` under the class lock), and the
#      manager tells the class store that a job ended (`on_ended`) holding none of its locks.
BUILD_ORDER = ("owner_secret", "classes", "kept", "jobs")  # the kept store's build asks for the secret
_HOLDER = sys.modules.setdefault("_sensviz_explorer_singletons", types.ModuleType("_sensviz_explorer_singletons"))
if not hasattr(_HOLDER, "builds"):
    _HOLDER.values, _HOLDER.builds = {}, {name: threading.Lock() for name in BUILD_ORDER}
_SINGLETONS: dict[str, object] = _HOLDER.values


def _one(name: str, build):
    """The process's one `name` (of `BUILD_ORDER`), built by `build()` on first use under its own lock."""
    with _HOLDER.builds[name]:
        if name not in _SINGLETONS:
            _SINGLETONS[name] = build()
        return _SINGLETONS[name]


def server_secret() -> bytes:
    """The server's signing key (`server.owners.owner_secret`), read once per server process."""
    return _one("owner_secret", owner_secret)


def kept_store() -> KeptStore:
    """The server's kept models (one per process: not a cache, so clearing caches keeps it)."""

    def build() -> KeptStore:
        store = KeptStore(data_dir() / "kept", classes=data_dir() / "classes", secret=server_secret())
        store.pins = lambda: class_store().pins()  # an open class's models stay (the process's one class store)
        return store

    return _one("kept", build)


def class_store() -> ClassStore:
    """The server's classes (`server.classes`, in `$SENSVIZ_DATA_DIR/classes`, outside the results roots)."""
    return _one("classes", lambda: ClassStore(data_dir() / "classes", server_secret()))


def job_manager() -> JobManager:
    """The server's training jobs (one manager per process, with its queue and its cap)."""
    store, classes = kept_store(), class_store()

    def build():
        if os.environ.get(jobs.RAY_ADDRESS):  # on Ray a class's run is recorded when a member's page looks
            return jobs.job_manager(data_dir() / "jobs", store)
        return JobManager(data_dir() / "jobs", store, on_ended=classes.record_ended)  # recorded when its job ends

    return _one("jobs", build)
