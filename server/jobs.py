"""Training jobs that belong to the server, not to a page: a queue, a cap, one process per run.

`JobManager` (one per server and data folder, `server.services.job_manager()`) runs each job in its
own process, at most `capacity` at once, and queues the rest in order. A run trains on `threads` torch
threads, a small one on one (`worker.run_threads`); by default the runs at once fill the machine's
cores, thread for thread: two small runs or one larger one (two threads) on two cores, so a class's
small runs use every core (they run at `worker.RUN_NICE`: the pages come first). Given a `capacity`
($SENSVIZ_MAX_JOBS or the argument), at most that many run, each with up to cores / capacity threads.
Each process is forked from the launcher (`worker.launcher`, a `python -m server.worker` interpreter with
torch and the trainer loaded; see there why not `multiprocessing`), so that a run starts at once, without
the seconds of CPU a fresh interpreter and torch's one-time costs take. The launcher is started ahead,
and started again if it ended, whenever a job waits in the queue or one more run would start now, not
while a full set of runs trains with nobody waiting, where its start-up's seconds of CPU would slow them
down. The manager holds a
lock on its jobs folder, so a second server on the same data folder is refused instead of taking
over the first one's jobs.

**Fair turns.** A user (owner id) has at most one job queued or running. Owner ids are easy to
come by (a session without a cookie gets a new one), so fairness is per client address (the page
passes it in): the queue takes turns across addresses (round robin: the address served longest
ago, or never, goes next, with its oldest job), so one address with many jobs waits behind every
other address's first. The queue holds at most `max_queue` jobs; when it is full, a job from an
address with fewer queued jobs (counting the new one) than the address with the most takes the
place of that address's newest queued job, which is cancelled with a message saying why.
`max_per_address` (default 60: a class of 60 behind one NAT shares one address, one run each) caps
the jobs one address has queued or running, so one address never holds the whole queue.

**Budgets.** Before a job is queued its time and peak memory are estimated (`server.budget`)
and checked against the server's budget per job (`SENSVIZ_JOB_BUDGET`); the worker's address
space is capped from the memory budget, and a run still going after the time budget is stopped
like Stop does (the last measurement is kept, and the job says so).

**Where the jobs run.** The manager starts each job on its executor (`sensviz.executors`): local
processes by default; with $SENSVIZ_RAY_ADDRESS (`job_manager`) a Ray cluster, where the manager
itself runs in a detached actor shared by every web server of the data folder (`RayJobManager`,
at the end of this module): there a Ray worker lost during a run fails its job with the reason and
keeps its last measurement.

A background thread starts queued jobs and collects finished ones; the finished model
is kept (`server.kept.KeptStore`, kind "trained") under its owner, and the job's `state.json`
records the outcome, so a reload (the job id is in the URL) finds it again, also after the
server restarted. The jobs an earlier server left queued or running are recovered by that thread
first, after the server answers (`_recover`: a run keeps its last measurement), and every job that
ends is told to `on_ended` (the server's classes record their runs then).

Stop ends the process at once and keeps the weights of its last measurement; Cancel removes a
queued job. Only the owner stops or cancels. An owner who was away when their run ended (a closed
browser, a restart) is told once, by their next session: `unseen` names that job until `mark_seen`.
No Streamlit here.

The background thread cannot die: any failure while collecting one job (its model refused by the
store, a full or unwritable disk, a worker that died, anything unexpected) fails that job with one
line in its `error`, and the manager serves the next one. Everything a job writes (request,
records, progress, weights, temporaries) counts against its owner's share of the kept-model store
(`KeptStore.elsewhere`); each owner keeps at most `MAX_FOLDERS` job folders (their own oldest
finished ones go first); temporaries a killed worker left are removed when its job is collected
and at start-up. A job's name is stored shortened (`sensviz.text.short_label`): the task label of
a `table` task can be 16 million characters, held once, in the job's `request.json`.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from sensviz.executors import LocalExecutor, RayExecutor, connect, import_ray, worker_env
from sensviz.files import write_atomic
from sensviz.text import short_label
from server import budget, limits, worker
from server.kept import KeptRefused, KeptStore

ROOT = Path(__file__).resolve().parents[1]
JOB_ID = re.compile(r"[A-Za-z0-9_-]{12,64}")  # fullmatch: a trailing newline is no id
ACTIVE = ("queued", "running")
MAX_QUEUE = 100
MAX_FOLDERS = 20
"""Job folders kept on disk per owner (their records feed the Train page's charts); the owner's oldest
finished ones go first, never another owner's."""
log = logging.getLogger(__name__)


class JobRefused(Exception):
    """A job that cannot be queued, with the reason for the user."""


STOPPED_BY_RESTART = "the server stopped during this run"
CANCELLED_BY_RESTART = "the server restarted before this run started"
"""How a run that a server restart ended begins its reason (`JobManager._recover`)."""


@dataclass
class JobStatus:
    """What a page shows of a job."""

    id: str
    owner: str
    name: str
    state: str  # queued, running, finished, stopped, failed, cancelled
    created: float
    position: int | None = None  # 1-based place in the queue while queued
    progress: dict = field(default_factory=dict)  # step, steps, loss, seconds, eval_loss, eval_accuracy
    reason: str | None = None  # how a finished or stopped run ended
    error: str | None = None
    kept: str | None = None  # the kept model's token
    steps: int | None = None
    seconds: float | None = None
    seen: bool = False  # its owner was shown how it ended (`JobManager.mark_seen`)
    rerun: str | None = None  # the job that ran it again after a server restart ended it (`JobManager.rerun`)
    resume_step: int | None = None  # a run a restart stopped: the step its snapshot lets it go on from
    continued_from: int | None = None  # a continuation (`JobManager.rerun`): the step its snapshot went on from

    def __post_init__(self):
        self.name = short_label(str(self.name))

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def ended_by_restart(self) -> bool:
        """Whether a server restart ended it: stopped while it ran, or cancelled while it waited."""
        return (self.reason or self.error or "").startswith((STOPPED_BY_RESTART, CANCELLED_BY_RESTART))


@dataclass
class _Job:
    status: JobStatus
    folder: Path
    process: subprocess.Popen | None = None
    stop_requested: bool = False
    address: str = ""  # the client address that submitted it (kept in memory only)
    seq: int = 0  # the order of submission
    estimate_s: float = 0.0  # the budget estimate of its time
    started: float | None = None  # time.monotonic() when it started running
    before_s: float = 0.0  # a continuation's: the seconds its run trained before the restart (its snapshot's)
    stop_why: str | None = None  # why the manager stopped it (over its time budget)
    device: str | None = None  # the device its request trains on (None: the model's default)
    collecting: bool = False  # its process ended and the manager's thread is keeping its model (`_collect`)
    threads: int = 1  # the torch threads it trains on (`worker.run_threads`, set when submitted; a recovered job never runs)


def _weights_step(path: Path, records: list[dict]) -> int | None:
    """The step of the weights a run's last measurement wrote, as their checkpoint says (the worker writes them before
    the measurement's record, so a run stopped in between has weights one record ahead), else the last record's;
    None without weights, or without either step."""
    from sensviz.checkpoints import CheckpointError, read_metadata

    if not path.is_file():
        return None
    try:
        step = (read_metadata(path).get("training") or {}).get("steps")
    except (OSError, CheckpointError):
        return None
    if isinstance(step, int):
        return step
    return records[-1]["step"] if records else None


def max_per_address() -> int:
    """A hard cap on the jobs one client address has queued or running: $SENSVIZ_MAX_JOBS_PER_ADDRESS, by
    default `limits.DEFAULT_JOBS_PER_ADDRESS` (ValueError, one line naming the variable, for a bad value)."""
    return max(1, int(limits.setting("SENSVIZ_MAX_JOBS_PER_ADDRESS", limits.DEFAULT_JOBS_PER_ADDRESS)))


_CALIBRATION: list[budget.Calibration] = []
_CALIBRATION_LOCK = threading.Lock()


def calibration() -> budget.Calibration:
    """This machine's `budget.Calibration`, once per server process: the one kept on this boot of the
    machine (`budget.kept_calibration`), else measured in a fresh interpreter (one torch thread there:
    the server's own torch settings stay as they are) and kept for the next server."""
    with _CALIBRATION_LOCK:
        if not _CALIBRATION:
            kept = budget.kept_calibration()
            try:
                if kept is None:
                    out = subprocess.run([sys.executable, "-m", "server.budget"], capture_output=True, text=True,
                                         cwd=ROOT, env=worker_env(), timeout=300, check=True).stdout
                    kept = budget.Calibration(**json.loads(out.strip().splitlines()[-1]))
                    budget.keep_calibration(kept)
            except (subprocess.SubprocessError, OSError, ValueError, IndexError, TypeError) as err:
                raise JobRefused(f"The server could not measure its own speed, which the budget per run needs "
                                 f"({type(err).__name__}); try again in a minute.") from None
            _CALIBRATION.append(kept)
        return _CALIBRATION[0]


def _calibrate_ahead() -> None:
    """`calibration()` ahead of the first submit; a failure is left for that submit to report."""
    with contextlib.suppress(JobRefused):
        calibration()


def _check_ahead() -> None:
    """`worker.check`'s one-time cost paid ahead of the first submit: its model on torch's meta device
    imports torch._dynamo (seconds of CPU)."""
    worker.check(worker.TrainRequest("parity", {"arch": "encoder", "d_model": 8, "n_layers": 1, "n_heads": 2},
                                     {"n": 4}))


AHEAD_JOIN_S = 60
"""At exit, how long the threads paying a manager's one-time costs ahead may still take."""


def configured_capacity() -> int | None:
    """$SENSVIZ_MAX_JOBS: the most runs at once (None when it is not set)."""
    configured = os.environ.get("SENSVIZ_MAX_JOBS")
    return max(1, int(configured)) if configured else None


DEFAULT_THREADS = 2
"""Without a configured capacity, the torch threads of a run that is not small (`worker.run_threads`)."""


class JobManager:
    """The server's training jobs, in folders under `root` (see the module docstring)."""

    def __init__(self, root: Path, store: KeptStore, capacity: int | None = None, threads: int | None = None,
                 max_queue: int = MAX_QUEUE, poll_s: float = 0.1, job_budget: budget.Budget | None = None,
                 per_address: int | None = None, calibration: budget.Calibration | None = None,
                 executor=None, on_ended: Callable[[str, JobManager], None] | None = None):
        """`job_budget`: the most one job may take (default `budget.server_budget()`); `per_address`:
        the hard cap per client address (default `max_per_address()`); `calibration`: this
        machine's (default: measured in the background from now on); `executor`: where the jobs run (default
        local processes, `sensviz.executors.LocalExecutor`); `on_ended(job_id, manager)`: told each
        job that ended (`_ended`), from the first recovered one on."""
        cores = os.cpu_count() or 1
        self.budget = job_budget or budget.server_budget()
        self.per_address = per_address if per_address is not None else max_per_address()
        self._calibration = calibration
        self._seq = 0
        self._turn = 0
        self._served: dict[str, int] = {}  # address -> the turn its last job started
        self.root = Path(root)
        self.store = store
        configured = capacity or configured_capacity()
        self.capacity = configured or cores
        self.threads = threads or (max(1, cores // configured) if configured else min(DEFAULT_THREADS, cores))
        self.cores = self.capacity * self.threads if configured else cores  # the threads its runs may use at once
        self.executor = executor or LocalExecutor(threads=self.threads, max_mib=self.budget.mib)
        self.max_queue = max_queue
        self.poll_s = poll_s
        self.jobs: dict[str, _Job] = {}
        self.queue: list[str] = []
        self.lock = threading.RLock()
        self._closed = threading.Event()
        self.recovered = threading.Event()  # set once the jobs of an earlier server run are recovered (`_recover`)
        self.on_ended = on_ended  # set before the thread starts: recovery already tells it
        self._owners: dict[str, str] = {}  # job folder name -> owner (read once from its state.json)
        self.root.mkdir(parents=True, exist_ok=True)
        self._folder_lock = open(self.root / ".lock", "w")  # noqa: SIM115 - held (and locked) while the manager lives
        try:
            fcntl.flock(self._folder_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._folder_lock.close()
            raise RuntimeError(f"another server runs the training jobs in {self.root}; give this one its own "
                               "SENSVIZ_DATA_DIR") from None
        store.elsewhere = self.folder_bytes
        self._keeping: set[Path] = set()  # weights being moved into the store, not counted in `folder_bytes`
        self._rerunning: set[str] = set()  # ended runs being queued again (`rerun`), outside the lock
        earlier = self._folders()  # an earlier server's jobs, recovered by the background thread
        # what the first submit would wait for (seconds), from now on in the background
        for ahead in (_check_ahead, *([] if calibration else [_calibrate_ahead])):
            thread = threading.Thread(target=ahead, daemon=True, name=f"sensviz{ahead.__name__}")
            thread.start()
            # a process that exits within seconds of starting a manager (a script, a test) waits for it: a
            # daemon thread still inside torch when the interpreter finalizes aborts the process (exit 134)
            atexit.register(thread.join, AHEAD_JOIN_S)
        self._thread = threading.Thread(target=self._loop, args=(earlier,), daemon=True, name="sensviz-jobs")
        self._thread.start()

    # ------------------------------------------------------------------ what pages call

    def submit(self, owner: str, request: worker.TrainRequest, address: str | None = None) -> str:
        """Queue a job for `owner`, sent from client `address`; its id. ValueError for bad settings or
        a job over the server's budget (both checked here, before queueing); JobRefused when the owner
        has a job queued or running, the address is at its cap, or the queue is full and the address
        has as many jobs waiting as any other (each message says when to try again)."""
        return self._queue(owner, request, address)

    def _queue(self, owner: str, request: worker.TrainRequest, address: str | None,
               resume: tuple[Path, int] | None = None) -> str:
        """`submit`; `resume`: the folder of a run a restart stopped and its snapshot's step, whose snapshot and
        records up to that step the new job's folder gets before it can start, to go on from there (`worker.SNAPSHOT`)."""
        task, settings, config = worker.check(request)
        found = budget.estimate(settings, config, request.measure_every, self._calibration or calibration(), task)
        budget.check(found, self.budget)
        before_s = _snapshot_seconds(resume[0]) if resume is not None else 0.0  # the run's time limit goes on
        address = address or "local"
        with self.lock:
            active = self.active(owner)
            if active is not None:
                raise JobRefused(f"You already have a training run {self.jobs[active].status.state} "
                                 f"({self.jobs[active].status.name}): stop or cancel it first.")
            mine = [j for j in self.jobs.values() if j.address == address and j.status.active]
            if len(mine) >= self.per_address:
                raise JobRefused(f"Your network address already has {len(mine)} training runs queued or running, the "
                                 f"most this server allows one address; try again when one of them has ended "
                                 f"({self._wait_hint(mine)}).")
            if len(self.queue) >= self.max_queue:
                self._make_room(address)
            self._seq += 1
            job_id = secrets.token_urlsafe(12)
            folder = self.root / job_id
            folder.mkdir(parents=True)
            write_atomic(folder / "request.json", json.dumps(request.to_dict()).encode())
            if resume is not None:
                try:
                    _carry_snapshot(*resume, folder)
                except OSError as err:
                    shutil.rmtree(folder, ignore_errors=True)
                    raise JobRefused(f"the run's snapshot could not be copied ({_one_line(err)}); try again") from None
            status = JobStatus(job_id, owner, request.name, "queued", time.time(),
                               continued_from=resume[1] if resume is not None else None)
            self.jobs[job_id] = _Job(status, folder, address=address, seq=self._seq, estimate_s=found.seconds,
                                     device=config.device, before_s=before_s,
                                     threads=worker.run_threads(found.params, config.batch_size, self.threads))
            self._write_state(self.jobs[job_id])
            self.queue.append(job_id)
            self._order_queue()
            self._start_queued()
        return job_id

    def rerun(self, job_id: str, owner: str, address: str | None = None) -> str:
        """Queue `owner`'s run `job_id`, which a server restart ended, again with the settings it had (its
        `request.json`): from its snapshot's step where it has one (`JobStatus.resume_step`; it goes on exactly as
        it would have), else from step 0; the new job's id. Once per run: the new id is written on the ended
        run (`JobStatus.rerun`), so a second tab's click queues nothing. JobRefused for a run that is not theirs,
        not ended by a restart, already run again, or whose settings were not kept; `submit`'s refusals. The
        settings are checked and priced without the manager's lock, as `submit`'s are."""
        with self.lock:
            job = self.jobs.get(job_id)
            if job is None:
                status = self._from_disk(job_id)
                job = _Job(status, self.root / job_id) if status is not None else None
            if job is None or job.status.owner != owner or not job.status.ended_by_restart:
                raise JobRefused("only your own run that a server restart ended can be run again")
            if job.status.rerun is not None or job_id in self._rerunning:
                raise JobRefused("this run was already run again (from another tab or window); see My models")
            self._rerunning.add(job_id)
        try:
            request = self.request(job_id)
            if request is None:
                raise JobRefused("this run's settings were not kept; fill in the Train form")
            carried = job.status.resume_step is not None and (job.folder / worker.SNAPSHOT).is_file()
            new_id = self._queue(owner, request, address, (job.folder, job.status.resume_step) if carried else None)
            with self.lock:
                if carried:  # carried over: not counted twice in the quota
                    (job.folder / worker.SNAPSHOT).unlink(missing_ok=True)
                job.status.rerun = new_id
                with contextlib.suppress(OSError):  # a full disk: a second click could queue it once more
                    self._write_state(job)
        finally:
            with self.lock:
                self._rerunning.discard(job_id)
        return new_id

    def status(self, job_id: str) -> JobStatus | None:
        """A snapshot of a job (None for an unknown id)."""
        with self.lock:
            job = self.jobs.get(job_id)
            if job is None:
                return self._from_disk(job_id)
            status = JobStatus(**asdict(job.status))
            if status.state == "queued":
                status.position = self.queue.index(job_id) + 1
        if status.state == "running":
            status.progress = _read_json(job.folder / "progress.json") or {}
        return status

    def active(self, owner: str) -> str | None:
        """The id of `owner`'s queued or running job, if any."""
        with self.lock:
            return next((i for i, j in self.jobs.items() if j.status.owner == owner and j.status.active), None)

    def unseen(self, owner: str) -> str | None:
        """The id of `owner`'s newest job when it has ended and they were not shown how (`mark_seen`): what a
        session of theirs says first when they come back (a closed browser, a restart), once. Only the newest:
        an older run was followed by a newer one. Read from the job folders (a restarted server's too)."""
        statuses = (self._from_disk(folder.name) for folder in self._folders() if self._owner_of(folder) == owner)
        newest = max((status for status in statuses if status is not None), key=lambda status: status.created,
                     default=None)
        if newest is None or newest.seen:
            return None
        # active on disk but not this manager's: an earlier server's run, being recovered (its outcome follows)
        return newest.id if not newest.active or newest.id not in self.jobs else None

    def mark_seen(self, job_id: str, owner: str) -> None:
        """`owner` was shown how their ended job `job_id` ended (`unseen` no longer names it); another owner's
        job (followed by its link), an active or an unknown one is left as it is."""
        with self.lock:
            job = self.jobs.get(job_id)
            if job is None:
                status = self._from_disk(job_id)
                job = _Job(status, self.root / job_id) if status is not None else None
            if job is None or job.status.owner != owner or job.status.active or job.status.seen:
                return
            job.status.seen = True
            with contextlib.suppress(OSError):  # a full disk: said again next time
                self._write_state(job)

    def records(self, job_id: str) -> list[dict]:
        """The job's measurement records so far (`sensviz.monitor.MeasurementCallback` records)."""
        return read_records(self.root, job_id)

    def request(self, job_id: str) -> worker.TrainRequest | None:
        """What the job was asked to do (None for an unknown id)."""
        return read_request(self.root, job_id)

    def folder_bytes(self, owner: str) -> int:
        """Bytes of `owner`'s job folders: what their jobs wrote, counted in their kept-model quota,
        less the weights being moved into the store right now (not counted twice). Takes no manager
        lock (the store calls it while keeping a model the manager's thread collects)."""
        return sum(_folder_size(folder, skip=self._keeping) for folder in self._folders() if self._owner_of(folder) == owner)

    def stop(self, job_id: str, owner: str) -> bool:
        """Stop a running job (its last measurement is kept) or cancel a queued one; only the owner may."""
        with self.lock:
            job = self.jobs.get(job_id)
            if job is None or job.status.owner != owner or not job.status.active:
                return False
            if job.status.state == "queued":
                job.status.seen = True  # the owner cancelled it: nothing to tell them later
                self._cancel(job, "cancelled while waiting in the queue")
                return True
            job.stop_requested = job.collecting = True  # collected here, not by the manager's thread
            job.process.terminate()
        job.process.wait(timeout=30)
        self._collect(job)
        with self.lock:
            self._start_queued()
        return True

    def close(self) -> None:
        """Stop the background thread and every process (tests; a server's processes exit with it)."""
        self._closed.set()
        with self.lock:
            for job in self.jobs.values():
                if job.process is not None and job.process.poll() is None:
                    job.process.terminate()
                    job.process.wait(timeout=30)
            self.executor.close()
        self._thread.join(timeout=5)
        self._folder_lock.close()

    # ------------------------------------------------------------------ the background thread

    def _loop(self, earlier: list[Path]) -> None:
        try:
            self._recover(earlier)  # after the server answers, and before any job of this one ends
        except Exception:  # noqa: BLE001 - the thread serves every user: it never dies
            log.exception("recovering the jobs of an earlier server run failed; the manager goes on")
        self.recovered.set()
        while not self._closed.wait(self.poll_s):
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - the thread serves every user: it never dies
                log.exception("the job manager's tick failed; it goes on")

    def tick(self) -> None:
        """Collect finished processes and start queued jobs while there is room. A failure fails
        only the job it concerns (`_collect`, `_fail`). The ended jobs are collected without the
        manager's lock: keeping a model takes the store's lock (held across replicas)."""
        with self.lock:
            self._stop_over_time()
            ended = [job for job in self.jobs.values()
                     if job.status.state == "running" and not job.collecting and job.process.poll() is not None]
            for job in ended:
                job.collecting = True
        for job in ended:
            self._collect(job)
        with self.lock:
            try:
                self._start_queued()
            except Exception as err:  # noqa: BLE001 - no process could be started (out of memory, processes, disk)
                for job in self.jobs.values():  # taken from the queue, not started
                    if job.status.state == "queued" and job.status.id not in self.queue:
                        self._fail(job, f"the server could not start the training process ({_one_line(err)})")
            if self.queue or self._fits(1):  # a job waits, or one would start now: a process waits for it
                self.executor.warm()

    def _fits(self, threads: int) -> bool:
        """Whether one more run on `threads` threads may start now: fewer than `capacity` run, and the
        running ones leave it that many of the manager's `cores`."""
        running = [j for j in self.jobs.values() if j.status.state == "running"]
        return len(running) < self.capacity and sum(j.threads for j in running) + threads <= self.cores

    def _start_queued(self) -> None:
        while self.queue and self._fits(self.jobs[self.queue[0]].threads) and not self._closed.is_set():
            job = self.jobs[self.queue.pop(0)]  # the queue is in the order of turns (`_order_queue`); closing: none
            self._turn += 1
            self._served[job.address] = self._turn
            job.process = self._start_process(job.folder, job.device)
            job.status.state = "running"
            job.started = time.monotonic()
            self._write_state(job)

    def _order_queue(self) -> None:
        """Put the queue in the order of turns: repeatedly the address whose last job started longest
        ago (never first; ties: the older waiting job), with its oldest waiting job."""
        waiting: dict[str, list[_Job]] = {}
        for job in sorted((self.jobs[i] for i in self.queue), key=lambda j: j.seq):
            waiting.setdefault(job.address, []).append(job)
        self._served = {a: t for a, t in self._served.items()
                        if a in waiting or any(j.address == a and j.status.active for j in self.jobs.values())}
        served, turn, order = dict(self._served), self._turn, []
        while waiting:
            address = min(waiting, key=lambda a: (served.get(a, -1), waiting[a][0].seq))
            order.append(waiting[address].pop(0).status.id)
            turn += 1
            served[address] = turn
            if not waiting[address]:
                del waiting[address]
        self.queue = order

    def _make_room(self, address: str) -> None:
        """The queue is full: cancel the newest waiting job of the address with the most waiting, when
        `address` (with its new job) would still have fewer; else JobRefused."""
        counts: dict[str, int] = {}
        for job_id in self.queue:
            counts[self.jobs[job_id].address] = counts.get(self.jobs[job_id].address, 0) + 1
        most = max(counts, key=lambda a: (counts[a], max(self.jobs[i].seq for i in self.queue
                                                          if self.jobs[i].address == a)))
        mine = counts.get(address, 0)
        if mine + 1 >= counts[most]:
            running = [j for j in self.jobs.values() if j.status.state == "running"]
            raise JobRefused(f"The server's queue is full ({len(self.queue)} runs waiting, {mine} of them from your "
                             f"network address, as many as any other); try again when a run has ended "
                             f"({self._wait_hint(running)}).")
        newest = max((self.jobs[i] for i in self.queue if self.jobs[i].address == most), key=lambda j: j.seq)
        self._cancel(newest, f"the queue was full and your network address had the most runs waiting "
                             f"({counts[most]} of {len(self.queue)}), so its newest one made room for a run from an "
                             f"address with fewer; try again when the queue is shorter")

    def _cancel(self, job: _Job, reason: str) -> None:
        self.queue.remove(job.status.id)
        (job.folder / worker.SNAPSHOT).unlink(missing_ok=True)  # a continuation that never ran: nothing to go on from
        job.status.state, job.status.reason = "cancelled", reason
        self._write_state(job)
        self._order_queue()

    def _wait_hint(self, jobs: list[_Job]) -> str:
        """When the first of `jobs` should have ended, by their budget estimates: 'in about 3 min'."""
        now = time.monotonic()
        left = [max(0.0, j.estimate_s - (now - j.started if j.started else 0.0)) for j in jobs]
        wait = max(60.0, min(left, default=0.0))
        return f"about {wait / 60:,.0f} min from now by the estimates"

    def _stop_over_time(self) -> None:
        """Stop every running job past the server's time budget (its last measurement is kept)."""
        now = time.monotonic()
        for job in list(self.jobs.values()):
            running = job.status.state == "running" and job.started is not None
            if running and self.budget.over(now - job.started, job.process, job.before_s):
                job.stop_requested = True
                limit = budget.duration(self.budget.seconds)
                job.stop_why = f"stopped at the server's time limit per run ({limit}; SENSVIZ_JOB_BUDGET)"
                job.process.terminate()  # collected once it has ended (`tick`)

    def _start_process(self, folder: Path, device: str | None = None):
        """Start the job in `folder` (training on `device`) on the executor; a handle like a `subprocess.Popen`."""
        return self.executor.start_worker(folder, device)

    def _collect(self, job: _Job) -> None:
        """A running job's process has ended (the caller set `job.collecting`): `_finish` it without the
        manager's lock, on a copy of its status that pages see at once when it is done; any failure
        fails this job alone, with one line, and its temporaries and the owner's surplus folders are
        removed either way."""
        done = replace(job, status=JobStatus(**asdict(job.status)))
        # it ended here: nothing to go on from, and the snapshot must not count against the quota its model is kept in
        (job.folder / worker.SNAPSHOT).unlink(missing_ok=True)
        try:
            self._finish(done)
        except KeptRefused as err:
            self._fail(done, f"the run ended, but its model was not kept: {err}")
        except Exception as err:  # noqa: BLE001 - one job's failure must not stop the manager
            log.exception("collecting job %s failed", job.status.id)
            self._fail(done, f"the server could not collect this run's result ({_one_line(err)})")
        with self.lock:
            job.status, job.collecting = done.status, False
        _remove_temporaries(job.folder)
        self._prune(job.status.owner)
        self._ended(job.status.id)

    def _ended(self, job_id: str) -> None:
        """Tell `on_ended` (the server's classes record their runs) that a job ended: it was collected, or
        recovered after a restart. Called holding no lock of the manager; a failure there is logged."""
        if self.on_ended is None:
            return
        try:
            self.on_ended(job_id, self)
        except Exception:  # noqa: BLE001 - the manager's thread serves every user: it never dies
            log.exception("recording the end of job %s failed", job_id)

    def _fail(self, job: _Job, error: str) -> None:
        """End a job as failed with a one-line error (its state file is written when the disk lets it)."""
        job.status.state, job.status.error = "failed", _one_line(error)
        with contextlib.suppress(OSError):
            self._write_state(job)

    def _finish(self, job: _Job) -> None:
        """A running job's process has ended: keep its model and record the outcome."""
        job.process.wait(timeout=30)
        outcome = _read_json(job.folder / "outcome.json") or {}
        status = job.status
        if outcome.get("state") == "finished" and (job.folder / "result.safetensors").is_file():
            status.state, status.reason = "finished", outcome["reason"]
            status.steps, status.seconds = outcome.get("steps"), outcome.get("seconds")
            self._keep(job, "result.safetensors")
        elif outcome.get("state") == "failed":
            status.state, status.error = "failed", _one_line(outcome.get("error") or "the training process failed")
        else:
            lost = None if job.stop_requested else getattr(job.process, "lost", None)  # a Ray worker or node that died
            why = job.stop_why or ("stopped" if job.stop_requested else lost
                                   or f"the training process ended unexpectedly (exit code {job.process.returncode})")
            self._keep_last(job, why)
            if lost:  # the job fails, saying why; the weights of its last measurement are kept all the same
                status.state, status.error = "failed", _one_line(status.reason)
        self._write_state(job)

    def _keep_last(self, job: _Job, why: str) -> None:
        """End a job with the weights of its last measurement, when there was one."""
        progress = _read_json(job.folder / "progress.json") or {}
        job.status.state = "stopped"
        measured = _weights_step(job.folder / "last.safetensors", self.records(job.status.id))
        if measured is not None:
            at = f" at step {progress['step']:,}" if progress.get("step") is not None else ""
            job.status.reason = f"{why}{at}; the weights of the last measurement (step {measured:,}) are kept"
            job.status.steps = measured
            self._keep(job, "last.safetensors")
        else:
            job.status.reason = f"{why} before the first measurement; there are no weights to keep"

    def _keep(self, job: _Job, file: str) -> None:
        """Move the weights into the store: kept first (`folder_bytes` does not count them meanwhile,
        so they are not counted twice against the owner's quota), deleted from the job folder once
        kept or refused, so a server that dies in between finds them again; `KeptRefused` when the
        store does not keep them."""
        path = job.folder / file
        self._keeping.add(path)
        try:
            job.status.kept = self.store.keep("trained", job.status.name, path.read_bytes(), job.status.owner,
                                              address=job.address).token
        except KeptRefused:
            self._drop_weights(job.folder)
            raise
        finally:
            self._keeping.discard(path)
        self._drop_weights(job.folder)

    @staticmethod
    def _drop_weights(folder: Path) -> None:
        for name in ("last.safetensors", "result.safetensors"):
            (folder / name).unlink(missing_ok=True)

    def _write_state(self, job: _Job) -> None:
        write_atomic(job.folder / "state.json", json.dumps(asdict(job.status)).encode())

    # ------------------------------------------------------------------ jobs of an earlier server run

    def _from_disk(self, job_id: str) -> JobStatus | None:
        if not JOB_ID.fullmatch(job_id or ""):
            return None
        data = _read_json(self.root / job_id / "state.json")
        try:  # a state written before `seen` existed: its owner is not told of it now
            return JobStatus(**{"seen": True, **data}) if isinstance(data, dict) else None
        except TypeError:  # not a state this manager wrote
            return None

    def _recover(self, earlier: list[Path]) -> None:
        """Jobs left queued or running by a server that stopped (`earlier`: the job folders there were
        when this manager started): keep what they measured (a failure fails that job alone);
        temporaries are removed and each owner's surplus folders. Runs in the manager's thread, after
        the server answers: keeping a model may wait for the store's lock, which another replica may hold."""
        for folder in earlier:
            _remove_temporaries(folder)
            status = self._from_disk(folder.name)
            if status is None or not status.active:
                continue
            job = _Job(status, folder)
            status.seen = False  # it ends now, with its owner away
            status.resume_step = _snapshot_step(folder)  # a continued run that waited still has the snapshot it carried
            if status.state == "queued":
                status.state, status.reason = "cancelled", CANCELLED_BY_RESTART
            else:
                snapshot = folder / worker.SNAPSHOT
                self._keeping.add(snapshot)  # kept for the owner to go on from: not counted against the model it keeps
                try:
                    self._keep_last(job, STOPPED_BY_RESTART)
                except KeptRefused as err:
                    self._fail(job, f"{STOPPED_BY_RESTART}, and its model was not kept: {err}")
                except Exception as err:  # noqa: BLE001 - one job's files must not stop the server's start
                    self._fail(job, f"{STOPPED_BY_RESTART} and could not recover it ({_one_line(err)})")
                finally:
                    self._keeping.discard(snapshot)
            with contextlib.suppress(OSError):
                self._write_state(job)
            self._ended(status.id)
        for owner in {self._owner_of(folder) for folder in self._folders()} - {None}:
            self._prune(owner)

    # ------------------------------------------------------------------ job folders and what they hold

    def _folders(self) -> list[Path]:
        """Every job folder."""
        try:
            return [p for p in self.root.iterdir() if p.is_dir() and JOB_ID.fullmatch(p.name)]
        except OSError:
            return []

    def _owner_of(self, folder: Path) -> str | None:
        if folder.name not in self._owners:
            data = _read_json(folder / "state.json")
            if not isinstance(data, dict) or not isinstance(data.get("owner"), str):
                return None  # not written yet (a job being submitted); asked again next time
            self._owners[folder.name] = data["owner"]
        return self._owners[folder.name]

    def _prune(self, owner: str) -> None:
        """Remove `owner`'s oldest finished job folders beyond `MAX_FOLDERS` (never another owner's)."""
        mine = [(f, self._from_disk(f.name)) for f in self._folders() if self._owner_of(f) == owner]
        done = sorted((status.created if status else 0.0, f) for f, status in mine if status is None or not status.active)
        for _, folder in done[: max(0, len(mine) - MAX_FOLDERS)]:
            shutil.rmtree(folder, ignore_errors=True)
            self._owners.pop(folder.name, None)


def read_records(root: Path, job_id: str) -> list[dict]:
    """The measurement records of the job `job_id` in the jobs folder `root` so far."""
    return worker.read_records(Path(root) / job_id) if JOB_ID.fullmatch(job_id or "") else []


def read_request(root: Path, job_id: str) -> worker.TrainRequest | None:
    """The request of the job `job_id` in the jobs folder `root` (None for an unknown id or an unreadable request)."""
    data = _read_json(Path(root) / job_id / "request.json") if JOB_ID.fullmatch(job_id or "") else None
    try:
        return worker.TrainRequest.from_dict(data) if isinstance(data, dict) else None
    except TypeError:  # fields of another version
        return None


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _one_line(err) -> str:
    """An error (or message) as one line of at most 300 characters."""
    text = " ".join(str(err).split()) or type(err).__name__
    if isinstance(err, BaseException) and not isinstance(err, (KeptRefused, ValueError)):
        text = f"{type(err).__name__}: {text}"
    return text if len(text) <= 300 else text[:297] + "..."


def _folder_size(folder: Path, skip: set[Path] | frozenset = frozenset()) -> int:
    """Bytes of the files in a job folder (temporaries included), except those in `skip`."""
    total = 0
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            if skip and Path(entry.path) in skip:
                continue
            with contextlib.suppress(OSError):
                total += entry.stat(follow_symlinks=False).st_size
    return total


def _snapshot_step(folder: Path) -> int | None:
    """The step of the snapshot in a job folder a restart ended (`worker.SNAPSHOT`) when this server's code can go
    on from it: the job's request, checked again, gives the snapshot's settings and a model of its shapes (an
    upgrade may have changed either). None without one; one that is unreadable or does not fit is removed (the
    run is then run again from step 0)."""
    from sensviz.snapshots import Snapshot

    path = folder / worker.SNAPSHOT
    if not path.is_file():
        return None
    try:
        snapshot = Snapshot.load(path)
        request = read_request(folder.parent, folder.name)
        if request is None:
            raise ValueError("no request")
        worker.check_snapshot(request, snapshot)
        return snapshot.step
    except ValueError:
        path.unlink(missing_ok=True)
        return None


def _snapshot_seconds(folder: Path) -> float:
    """The seconds the run of a job folder had trained when it wrote its snapshot (0 for one it cannot read)."""
    from sensviz.snapshots import Snapshot

    try:
        return float(Snapshot.load(folder / worker.SNAPSHOT).seconds)
    except ValueError:
        return 0.0


def _carry_snapshot(source: Path, step: int, folder: Path) -> None:
    """A stopped run's snapshot (of step `step`) and its records up to that step (a record written after it would
    come twice), copied into the new job's `folder`."""
    shutil.copyfile(source / worker.SNAPSHOT, folder / worker.SNAPSHOT)
    lines = [json.dumps(r) + "\n" for r in worker.read_records(source) if isinstance(r.get("step"), int) and r["step"] <= step]
    write_atomic(folder / "records.jsonl", "".join(lines).encode())


def _remove_temporaries(folder: Path) -> None:
    """Temporaries of writes interrupted by a killed worker (`write_atomic` names them `.<name>.<hex>.tmp`)."""
    with contextlib.suppress(OSError):
        for path in folder.glob(".*.tmp"):
            path.unlink(missing_ok=True)


# ---------------------------------------------------------------------- the queue on a Ray cluster

RAY_ADDRESS = "SENSVIZ_RAY_ADDRESS"
"""The environment variable naming the Ray cluster that runs the training jobs (unset: local processes)."""


def job_manager(root: Path, store: KeptStore, **options):
    """The server's job manager: on the Ray cluster at $SENSVIZ_RAY_ADDRESS when it is set (`RayJobManager`:
    several web servers may share the data folder), else local processes (`JobManager`: one server per folder).
    `options`: `JobManager`'s (capacity, threads, ...)."""
    address = os.environ.get(RAY_ADDRESS)
    return RayJobManager(root, store, address, **options) if address else JobManager(root, store, **options)


class _Queue:
    """The detached named actor that holds a data folder's queue: a `JobManager` whose jobs are Ray
    tasks (`RayExecutor`), so the order, fair turns, budgets and the one-job-per-owner and per-address
    checks are those of one manager, made atomically under its lock whichever web server asks."""

    def __init__(self, root: str, kept: dict, options: dict):
        job_budget = options.pop("job_budget", None) or budget.server_budget()
        threads = options.pop("threads", None) or 1
        executor = RayExecutor(cpus=threads, max_mib=job_budget.mib)
        capacity = options.pop("capacity", None) or int(os.environ.get("SENSVIZ_MAX_JOBS") or executor.capacity())
        self.manager = JobManager(Path(root), KeptStore(**kept), capacity=capacity, threads=threads,
                                  job_budget=job_budget, executor=executor, **options)

    def call(self, method: str, *args):
        """A `JobManager` call, its refusal returned as a value (the web server raises it again)."""
        try:
            return "ok", getattr(self.manager, method)(*args)
        except JobRefused as err:
            return "refused", str(err)
        except ValueError as err:
            return "invalid", str(err)

    def settings(self) -> dict:
        return {"capacity": self.manager.capacity, "budget": self.manager.budget}

    def close(self) -> None:
        self.manager.close()


class RayJobManager:
    """The calls of `JobManager` (submit, rerun, status, active, unseen, mark_seen, records, request, stop, close),
    answered by the data folder's queue on the Ray cluster at `address`: a detached actor named after the folder, started by
    the first web server that asks and shared by all of them; this process only serves pages.
    `options`: `JobManager`'s (capacity, threads, job_budget, max_queue, per_address, calibration),
    used by the web server that starts the actor. Records and kept models are read from the shared folder.

    When the queue's actor dies (killed, out of memory, its node lost), the next call of any web server
    starts a new one (or finds the one another server started) and asks again: the new queue takes
    over the job records on the folder (`JobManager._recover`: a job that was running is stopped with
    its last measurement kept, a queued one cancelled)."""

    def __init__(self, root: Path, store: KeptStore, address: str | None = None, **options):
        self.root, self.store = Path(root), store
        self._connected_here = connect(address)
        self.name = "sensviz-jobs-" + hashlib.sha256(str(self.root.resolve()).encode()).hexdigest()[:16]
        kept = store.settings()  # the actor's store has the same caps and the classes' pins
        self._queue_args = (str(self.root), kept, options)
        self.actor = self._start_queue()
        settings = self._ask("settings")
        self.capacity, self.budget = settings["capacity"], settings["budget"]
        store.elsewhere = self.folder_bytes

    def _start_queue(self):
        """The folder's queue: the running actor of that name, else a new one."""
        return import_ray().remote(_Queue).options(
            name=self.name, namespace="sensviz", lifetime="detached", get_if_exists=True, num_cpus=0, max_concurrency=16,
        ).remote(*self._queue_args)

    def _ask(self, method: str, *args):
        """The queue's answer to `method(*args)`, asked of a new queue when the actor died; JobRefused
        when the queue does not answer."""
        ray = import_ray()
        try:
            try:
                return ray.get(getattr(self.actor, method).remote(*args), timeout=120)
            except ray.exceptions.RayActorError:  # the actor died: a new queue takes over the folder
                self.actor = self._start_queue()
                return ray.get(getattr(self.actor, method).remote(*args), timeout=120)
        except (ray.exceptions.RayError, TimeoutError) as err:
            raise JobRefused(f"The training queue on the Ray cluster did not answer ({_one_line(err)}); "
                             "try again in a minute.") from None

    def _call(self, method: str, *args):
        kind, value = self._ask("call", method, *args)
        if kind == "refused":
            raise JobRefused(value)
        if kind == "invalid":
            raise ValueError(value)
        return value

    def submit(self, owner: str, request: worker.TrainRequest, address: str | None = None) -> str:
        return self._call("submit", owner, request, address)

    def status(self, job_id: str) -> JobStatus | None:
        return self._call("status", job_id)

    def active(self, owner: str) -> str | None:
        return self._call("active", owner)

    def unseen(self, owner: str) -> str | None:
        return self._call("unseen", owner)

    def mark_seen(self, job_id: str, owner: str) -> None:
        self._call("mark_seen", job_id, owner)

    def rerun(self, job_id: str, owner: str, address: str | None = None) -> str:
        return self._call("rerun", job_id, owner, address)

    def records(self, job_id: str) -> list[dict]:
        return read_records(self.root, job_id)

    def request(self, job_id: str) -> worker.TrainRequest | None:
        return read_request(self.root, job_id)

    def stop(self, job_id: str, owner: str) -> bool:
        return self._call("stop", job_id, owner)

    def folder_bytes(self, owner: str) -> int:
        return self._call("folder_bytes", owner)

    def close(self) -> None:
        """Disconnect this web server (the queue goes on serving the others)."""
        if self._connected_here:
            import_ray().shutdown()

    def end_queue(self) -> None:
        """End the queue itself: its running jobs are stopped as by Stop, and the actor is gone."""
        with contextlib.suppress(JobRefused):
            self._ask("close")
        import_ray().kill(self.actor)
