"""One training job in its own process: `sensviz.training.train` with live measurements, talking
to the server only through files in the job's folder. No Streamlit here (the process imports torch
and sensviz only).

The process is forked from the server's *launcher* (`launcher`), a fresh interpreter started as
`python -m server.worker --launcher` (by `sensviz.executors`), not a `multiprocessing` child:
Streamlit runs each page script as `__main__`, and a multiprocessing "spawn" child re-runs the
parent's `__main__` — here the whole app, with its own job manager. The launcher loads torch and the
trainer once, so a run starts at once, without the seconds of CPU that a fresh interpreter and
torch's one-time costs take per run. `python -m server.worker FOLDER` runs one job in a fresh
interpreter (a run on a GPU, a Ray task).
A request may name the monitor's quantities (cheap ones of its model only, checked before queueing) and scale
the initial parameters (`init_scale`): the Before training page's "where training goes" is such a job
(`sensviz.init_training.path_job`: the scale-free quantities of an initialisation study, traced as it trains).
With `--max-mib` (the server's memory budget per job) its address space is capped before the job
starts (`limit_memory`), and a run that needs more fails with one line saying so.

Files in the job folder (`server.jobs` reads them; every write is atomic or an appended line):

- `request.json`   the `TrainRequest` (written by the server before the process starts)
- `progress.json`  step, steps, training loss, the last evaluation, seconds (about 4 times a second)
- `records.jsonl`  one measurement record per line (`sensviz.monitor.MeasurementCallback`)
- `last.safetensors`  the weights of the last measurement (what Stop keeps), with its job's id
- `resume.snapshot`  where the run stood at its last measurement (`sensviz.snapshots`; models of at most
                   `SNAPSHOT_MAX_BYTES`): a job folder that holds one when its process starts goes on from it
                   (a run a server restart stopped, continued by `JobManager.rerun`), bit for bit as the run
                   would have gone on
- `result.safetensors`  the final checkpoint, with its training history, its request and its job's id
- `outcome.json`   how the run ended: finished (stop reason, steps, seconds) or failed (the error)

Measurements cost at most as much time as the training itself: one is taken every
`measure_every` steps only while the time spent measuring stays below the time spent training
(and always at step 0 and for the final weights). The process exits when the server that
started it is gone (its parent pid changes).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sensviz.processes import exit_with_parent

MAX_LIVE_N = 24
"""Longest input the explorer trains on (the positional range of the models it builds)."""
LIVE_LIMITS = {"d_model": 256, "n_layers": 6, "n_heads": 8, "d_ff": 1024, "max_len": 64, "n": MAX_LIVE_N,
               "min_n": MAX_LIVE_N, "steps": 100_000, "batch_size": 4096, "eval_interval": 100_000,
               "eval_size": 16_384, "train_size": 2**MAX_LIVE_N, "measure_every": 100_000}
"""A shared server's own, tighter caps on top of the library's limits (`sensviz.limits`, checked by the
settings themselves; each cap is at most its limit, tests/server/test_budget.py checks): a class pressing Train
at once must not fill the machine. Every model field the Train form takes is capped, so the largest
model it builds (a scratchpad, d = 256, 6 + 6 layers, d_ff = 1024: about 11 M parameters) stays under
the library's `n_params` limit; time and memory are then bounded by the server's budget per job
(`server.budget`)."""
SMALL_WORK = 5e7
"""Parameters x batch size below which a run trains on one torch thread: small models are bound by
per-operation overhead, and a second thread made PARITY n = 8 (d = 32, batch 256) slower here
(19 ms a step on two threads, 13 ms on one); larger models use every thread the manager gives."""
PROGRESS_EVERY_S = 0.25
SNAPSHOT = "resume.snapshot"
"""The file in a job folder a run goes on from (see the module docstring)."""
SNAPSHOT_MAX_BYTES = 16 * 2**20
"""Largest snapshot a run writes at its measurements (about four copies of its parameters,
`sensviz.snapshots.bytes_for`: models of up to about a million parameters; the class's have tens of thousands).
A larger model's run is run again from step 0 after a restart: its job folder counts in its owner's quota."""


LIVE_INPUTS = 256
"""Landscape inputs of a live run's measurements (`live_settings`)."""
LIVE_DIRECTIONS = 16
"""Random directions of a live run's L_rho (`live_settings`): its standard error shrinks as one over their
square root, and a class's slope comparison (`server.assignments`) reaches its power with 16."""
RUN_NICE = 10
"""A run's niceness: the server's pages come before the runs when both want a core (runs take what
the pages leave, so a class training two runs at once on two cores still browses at speed)."""


def live_settings():
    """What live runs measure: everyone's defaults (`sensviz.measure`) on `LIVE_INPUTS` inputs and
    `LIVE_DIRECTIONS` directions (a function, not a constant: this module imports torch lazily)."""
    from sensviz.measure import MeasureSettings

    return MeasureSettings(measure_inputs=LIVE_INPUTS, directions=LIVE_DIRECTIONS)


def run_threads(params: int, batch_size: int, threads: int) -> int:
    """The torch threads a run trains on: one for small work (`SMALL_WORK`), else the `threads` it is given.
    The job manager counts them to know how many runs fit the machine's cores."""
    return 1 if params * batch_size < SMALL_WORK else max(1, threads)


@dataclass(frozen=True)
class TrainRequest:
    """What a training job is asked to do: the task, the model, the trainer's settings
    (`sensviz.training.TrainConfig` fields) and how often to measure."""

    task: str  # a task label, e.g. "parity" or "sparse_parity:k=3,seed=0"
    model: dict = field(default_factory=dict)  # `sensviz.models.ModelSettings` fields: arch, d_model, ...
    train: dict = field(default_factory=dict)  # `sensviz.training.TrainConfig` fields: n, steps, batch_size, ...
    measure_every: int = 100
    quantities: list[str] | None = None  # what the monitor measures (`sensviz.measure` names); None: `live_settings`' defaults
    init_scale: float = 1.0  # the initial parameters but the LayerNorms' times this (`sensviz.init_study.scale_init`)

    @property
    def name(self) -> str:
        return (f"{self.task}-n{self.train.get('n')}-{self.model.get('arch', 'encoder')}-d{self.model.get('d_model')}"
                f"-seed{self.train.get('seed', 0)}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> TrainRequest:
        return cls(**data)


def _check_live_limits(request: TrainRequest) -> None:
    """The shared server's caps (`LIVE_LIMITS`), after the settings' own checks."""
    from sensviz.limits import LIMITS, Limit, check_int

    values = {**request.model, **request.train, "measure_every": request.measure_every}
    for name, high in LIVE_LIMITS.items():
        if values.get(name) is not None:
            low = LIMITS[name].low if name in LIMITS else 1  # d_ff may be 0 (= d_model)
            check_int(name, values[name], Limit("this server's", low, high, "live training"))


def check(request: TrainRequest):
    """The task, model settings and training config of a request; ValueError with the reason for bad
    values. Builds no tensor (the model's shapes come from torch's meta device), so the server calls
    it before queueing a job and bad settings are refused at once."""
    import dataclasses

    import torch

    import sensviz as sv
    from sensviz.configs import build
    from sensviz.limits import check_int
    from sensviz.models import ModelSettings
    from sensviz.training import TrainConfig

    task = sv.get_task(request.task)
    train = dict(request.train)
    if not task.boolean:
        train["target_accuracy"] = None  # accuracy is not defined for a real-valued target
    config = build(TrainConfig, train)
    settings = build(ModelSettings, request.model)
    _check_live_limits(request)
    settings = dataclasses.replace(settings, max_len=settings.max_len or max(config.n, MAX_LIVE_N))
    with torch.device("meta"):
        shapes = settings.build(config.n)
    check_int("parameters of the model", shapes.n_params(positional=True), "n_params")
    config.check(shapes, task)
    _check_measurements(request, shapes)
    return task, settings, config


def _check_measurements(request: TrainRequest, model) -> None:
    """The monitor's quantities (registry names that apply to the model and cost at most "cheap": the budget
    counts a cheap measurement) and the init scale (`sensviz.init_study.INIT_SCALE`)."""
    from sensviz.init_study import INIT_SCALE
    from sensviz.limits import check_float
    from sensviz.measure import COSTS, QUANTITIES
    from sensviz.text import short_label

    check_float("init_scale", request.init_scale, INIT_SCALE)
    if request.quantities is None:
        return
    if not isinstance(request.quantities, (list, tuple)) or not all(isinstance(q, str) for q in request.quantities):
        raise ValueError("quantities must be a list of quantity names")
    for name in request.quantities:
        found = QUANTITIES.get(name)
        if found is None:
            raise ValueError(f"unknown quantity '{short_label(name)}'; known: {', '.join(QUANTITIES)}")
        if COSTS.index(found.cost) > COSTS.index("cheap") or not found.applies(model):
            raise ValueError(f"a live run measures cheap quantities of its model only, not '{name}'")


def check_snapshot(request: TrainRequest, snapshot) -> None:
    """ValueError unless this code trains `request` as the run that wrote `snapshot` (`sensviz.snapshots`) did: the
    same settings, a step within them, and weights of the same names and shapes (built on torch's meta device)."""
    import torch

    _, settings, config = check(request)
    if snapshot.config != config.to_dict() or not 0 < snapshot.step <= config.steps:
        raise ValueError("the snapshot is of other settings")
    with torch.device("meta"):
        shapes = {name: tuple(value.shape) for name, value in settings.build(config.n).state_dict().items()}
    if shapes != {name: tuple(value.shape) for name, value in snapshot.weights.items()}:
        raise ValueError("the snapshot's weights are not this model's")


def prepare(request: TrainRequest):
    """The model (built, its initial parameters scaled by `init_scale`), task and training config of a request,
    after `check`."""
    from sensviz.init_study import scale_init

    task, settings, config = check(request)
    return scale_init(settings.build(config.n, seed=config.seed), request.init_scale), task, config


def write_json(path: Path, value) -> None:
    from sensviz.files import write_atomic

    write_atomic(path, json.dumps(value).encode())


def read_records(folder: Path) -> list[dict]:
    """The measurement records in the job folder `folder` so far (`records.jsonl`; a line still being written ends them)."""
    try:
        lines = (folder / "records.jsonl").read_text().splitlines()
    except OSError:
        return []
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:  # a line still being written
            break
    return records


def _live_callback(folder: Path, request: TrainRequest):
    """The callback that measures (within the time budget) and writes progress and records."""
    from sensviz.checkpoints import checkpoint_bytes
    from sensviz.files import write_atomic
    from sensviz.monitor import MeasurementCallback

    class Live(MeasurementCallback):
        def __init__(self):
            super().__init__(every=request.measure_every, settings=live_settings(), quantities=request.quantities)
            self.measuring_s = 0.0
            self.last_progress = 0.0
            self.last_eval: dict = {}
            self.snapshots = None  # whether this run's model is small enough (`SNAPSHOT_MAX_BYTES`), known at its start
            self.records_file = open(folder / "records.jsonl", "a")  # noqa: SIM115 - appended to until on_end

        def resume(self, snapshot) -> None:
            """Go on from `snapshot`: the records so far (copied into the folder with it) and the time measured."""
            self.records = read_records(folder)
            self.measuring_s = float(snapshot.extra.get("measuring_s", 0.0))
            if snapshot.history:
                self.on_eval(None, snapshot.history[-1])  # the progress shows the last evaluation until the next

        def _snapshot(self, state) -> None:
            """Where the run stands, for a restart (`SNAPSHOT`), when its model is small enough; its time counts as
            measuring."""
            from sensviz.snapshots import bytes_for

            if self.snapshots is None:
                self.snapshots = bytes_for(state.model.n_params()) <= SNAPSHOT_MAX_BYTES
            if self.snapshots:
                start = time.perf_counter()
                snapshot = state.snapshot()
                snapshot.extra["measuring_s"] = self.measuring_s
                snapshot.save(folder / SNAPSHOT)
                self.measuring_s += time.perf_counter() - start

        def _record(self, state, model, step):
            start = time.perf_counter()
            super()._record(state, model, step)
            data = checkpoint_bytes(model, task=state.task, n=state.config.n, encoding=state.config.encoding,
                                    training={"trainer": "sensviz.training (explorer job)", "steps": step,
                                              "config": state.config.to_dict(), "request": request.to_dict(),
                                              "history": state.history, "job": folder.name})
            write_atomic(folder / "last.safetensors", data)
            self.records_file.write(json.dumps(self.records[-1]) + "\n")
            self.records_file.flush()
            self.measuring_s += time.perf_counter() - start

        def on_step(self, state):
            training_s = state.elapsed - self.measuring_s
            if state.step % self.every == 0 and self.measuring_s <= training_s:
                self._record(state, state.model, state.step)
                self._snapshot(state)  # after the record: a continued run's records are those up to its step
            now = time.perf_counter()
            if now - self.last_progress >= PROGRESS_EVERY_S or state.step == state.total_steps:
                self.last_progress = now
                write_json(folder / "progress.json", {"step": state.step, "steps": state.total_steps, "loss": state.loss,
                                                      "seconds": state.elapsed, **self.last_eval})

        def on_eval(self, state, record):
            self.last_eval = {"eval_loss": record.get("eval_loss"), "eval_accuracy": record.get("eval_accuracy"),
                              "eval_step": record.get("step")}

        def on_end(self, state, result):
            super().on_end(state, result)
            self.records_file.close()

    return Live()


def _warm_up() -> None:
    """Import the trainer and take one tiny measurement: torch's one-time costs (vmap,
    functional_call) are paid before a job arrives, not in its first measurement."""
    import sensviz as sv
    from sensviz.monitor import MeasurementCallback
    from sensviz.training import TrainConfig

    model = sv.build_model("encoder", d_model=8, n_layers=1, n_heads=2, max_len=2, seed=0)
    MeasurementCallback(every=1, settings=live_settings()).measure(model, sv.get_task("parity"), TrainConfig(n=2), 0)


def limit_memory(max_mib: float) -> int:
    """Cap this process's address space at what it uses now plus twice `max_mib` (the job's memory
    budget: the estimate is within 2x of the peak, and address space runs ahead of resident memory);
    an allocation beyond it fails (MemoryError, or torch's "can't allocate memory"). The limit in bytes."""
    import resource

    used = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limit = used + int(2 * max_mib * 2**20)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    return limit


def _out_of_memory(err: Exception) -> bool:
    text = str(err).lower()
    return isinstance(err, MemoryError) or "can't allocate memory" in text or "not enough memory" in text


def launcher(threads: int, parent_pid: int, max_mib: float | None = None) -> None:
    """The server's launcher: load torch and the trainer once, then run each job in a child forked from
    this warm process (`run`, with `threads` and `max_mib`). One JSON object a line, both ways:

    - in (stdin): `{"run": K, "folder": F}` starts job K on folder F, in a process group of its own;
      `{"stop": K}` and `{"kill": K}` send that group (the run and any process it started) SIGTERM or
      SIGKILL while it runs (only this process knows that its pid is still its child's);
    - out (stdout, nothing else is written there: the jobs' output goes to stderr):
      `{"started": K, "pid": P}`, and `{"ended": K, "code": C}` as it ends (C as `Popen.returncode`).

    It ends when stdin closes and its children have ended, or when the server is gone (its children
    then end too: each ends with its parent). Torch runs on one thread here and starts no thread pool
    before a fork; each child sets its own threads. CUDA is never touched here (a child forked from a
    process that initialized CUDA cannot use it): a job on a GPU gets a fresh interpreter instead."""
    answers = os.dup(1)
    os.dup2(2, 1)  # stdout carries the answers only
    import select
    import signal

    import torch

    exit_with_parent(parent_pid)
    torch.set_num_threads(1)
    _warm_up()
    wake_read, wake_write = os.pipe()  # a child's end (SIGCHLD) wakes the select below
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)

    def answer(message: dict) -> None:
        try:
            os.write(answers, (json.dumps(message) + "\n").encode())
        except OSError:  # the server is gone
            os._exit(1)

    def child(folder: str) -> None:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in (answers, wake_read, wake_write):
            os.close(fd)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        code = 1
        try:  # never back into the loop below: a child ends here
            run(folder, threads, os.getppid(), max_mib)
            code = 0
        except BaseException:  # noqa: BLE001 - `run` reports its own errors; this is Ctrl-C or worse
            traceback.print_exc()
        finally:
            _exit_now(code)

    jobs: dict[int, int] = {}  # pid -> job number, while the child is not reaped
    pending, reading = b"", True
    while reading or jobs:
        ready, _, _ = select.select([0, wake_read] if reading else [wake_read], [], [])
        if wake_read in ready:
            os.read(wake_read, 4096)
        if 0 in ready:
            data = os.read(0, 65536)
            reading, pending = bool(data), pending + data
            *lines, pending = pending.split(b"\n")
            for message in map(json.loads, filter(None, lines)):
                if "run" in message:
                    pid = os.fork()
                    if pid == 0:
                        os.setpgid(0, 0)  # its own process group: Stop ends whatever the run started too
                        child(message["folder"])
                    with contextlib.suppress(OSError):  # set on both sides of the fork: no window without it
                        os.setpgid(pid, pid)
                    jobs[pid] = message["run"]
                    answer({"started": message["run"], "pid": pid})
                for pid in [p for p, k in jobs.items() if k in (message.get("stop"), message.get("kill"))]:
                    with contextlib.suppress(ProcessLookupError):  # the group ended (its leader waits to be reaped)
                        os.killpg(pid, signal.SIGTERM if "stop" in message else signal.SIGKILL)
        while jobs:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            with contextlib.suppress(ProcessLookupError):  # what the run started and left (one ignoring SIGTERM) ends too
                os.killpg(pid, signal.SIGKILL)
            answer({"ended": jobs.pop(pid), "code": os.waitstatus_to_exitcode(status)})


def run(folder: str, threads: int, parent_pid: int, max_mib: float | None = None) -> None:
    """The job process: train as `request.json` asks and write the files described above, within
    `max_mib` of memory (`limit_memory`) when given."""
    exit_with_parent(parent_pid)
    with contextlib.suppress(OSError):
        os.nice(RUN_NICE)
    folder = Path(folder)
    try:
        import torch

        import sensviz.monitor  # noqa: F401 - loaded before the memory cap, with the rest of the trainer
        from sensviz.checkpoints import checkpoint_bytes
        from sensviz.files import write_atomic
        from sensviz.snapshots import Snapshot
        from sensviz.training import train

        if max_mib is not None:
            limit_memory(max_mib)

        request = TrainRequest.from_dict(json.loads((folder / "request.json").read_text()))
        model, task, config = prepare(request)
        torch.set_num_threads(run_threads(model.n_params(), config.batch_size, threads))
        live = _live_callback(folder, request)
        resume = Snapshot.load(folder / SNAPSHOT) if (folder / SNAPSHOT).is_file() else None
        if resume is not None:
            live.resume(resume)
        result = train(model, task, config, [live], resume=resume)
        summary = result.summary(with_history=True)
        data = checkpoint_bytes(result.model, task=task, n=config.n, encoding=config.encoding,
                                training={**summary, "request": request.to_dict(), "job": folder.name,
                                          **({"continued_from": resume.step} if resume is not None else {})})
        write_atomic(folder / "result.safetensors", data)
        write_json(folder / "outcome.json", {"state": "finished", "reason": result.stop_reason, "steps": result.steps,
                                             "seconds": result.wall_time, "measuring_seconds": live.measuring_s,
                                             "final": result.final})
    except Exception as err:  # noqa: BLE001 - any failure is reported to the user through the outcome file
        error = f"{type(err).__name__}: {err}"
        if max_mib is not None and _out_of_memory(err):
            error = f"the run needed more memory than this server gives one run ({max_mib:,.0f} MiB; SENSVIZ_JOB_BUDGET)"
        write_json(folder / "outcome.json", {"state": "failed", "error": error})


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="one training job of the sensviz explorer (started by server.jobs)")
    parser.add_argument("folder", nargs="?", help="the job's folder (not with --launcher)")
    parser.add_argument("--launcher", action="store_true", help="load torch once, then fork a process per job (`launcher`)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads at most")
    parser.add_argument("--parent", type=int, required=True, help="exit when this process (the server) is gone")
    parser.add_argument("--max-mib", type=float, help="the job's memory budget (its address space is capped from it)")
    args = parser.parse_args(argv)
    if args.launcher:
        launcher(args.threads, args.parent, args.max_mib)
    else:
        run(args.folder, args.threads, args.parent, args.max_mib)
    _exit_now(0)


def _exit_now(code: int) -> None:
    """Every file is written and closed: end now, without the interpreter's teardown (about 1 s with torch
    loaded), so the server collects the run that much sooner."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
