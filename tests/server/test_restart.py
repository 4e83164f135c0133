"""Restarts are routine: a server that stopped (SIGTERM, SIGKILL, a crash) while a run trained starts
again at once, keeps that run's last measurement, and never blocks on recovering it."""

import asyncio
import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "deploy"))

import load  # noqa: E402
import torch  # noqa: E402
from department import student  # noqa: E402
from helpers.core import SnapshotAt  # noqa: E402

import sensviz as sv  # noqa: E402
from sensviz.training import train  # noqa: E402
from server import assignments, owners, worker  # noqa: E402
from server.classes import ClassStore  # noqa: E402
from server.kept import KeptStore  # noqa: E402
from ui.moved import NOTICE, NOTICE_LOCAL  # noqa: E402

CEILING_S = 120  # generous: the machine is shared; a deadlock never ends


def interrupted_run(data: Path, owner: str = "alice", job_id: str = "runningjob000000") -> Path:
    """A data folder as a server leaves it when it stops mid-run: `owner` already holds a kept model,
    and their job's folder says "running", with a measurement and its weights."""
    model = sv.build_model("encoder", d_model=8, n_layers=1, n_heads=2, max_len=24, seed=0)
    KeptStore(data / "kept", cap=50 * 2**20).keep("trained", "earlier", sv.checkpoint_bytes(model, task="parity", n=4), owner)
    folder = data / "jobs" / job_id
    folder.mkdir(parents=True)
    (folder / "last.safetensors").write_bytes(sv.checkpoint_bytes(model, task="first", n=4))
    (folder / "records.jsonl").write_text(json.dumps({"step": 75}) + "\n")
    (folder / "progress.json").write_text(json.dumps({"step": 90, "steps": 100}))
    (folder / "state.json").write_text(json.dumps({"id": job_id, "owner": owner, "name": "m", "state": "running",
                                                   "created": 0.0}))
    return folder


def test_the_servers_job_manager_starts_when_the_interrupted_runs_owner_holds_a_kept_model(tmp_path):
    """The explorer's singletons (`server.services`) built as a starting server builds them: keeping the
    interrupted run's weights asks the class store whether the owner's models are pinned. With one
    lock held across the job manager's build, that call deadlocked the start for good."""
    folder = interrupted_run(tmp_path)
    script = textwrap.dedent("""
        import time
        from server import services
        manager = services.job_manager()
        deadline = time.monotonic() + 60
        while manager.status("runningjob000000").state == "running" and time.monotonic() < deadline:
            time.sleep(0.05)
        status = manager.status("runningjob000000")
        print(status.state, status.kept is not None, flush=True)
        manager.close()
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=CEILING_S,
                          env={**os.environ, "SENSVIZ_DATA_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["stopped", "True"]
    assert not (folder / "last.safetensors").exists()  # moved into the store, not counted twice


def test_the_manager_answers_before_it_recovers_an_earlier_servers_run(tmp_path, monkeypatch):
    """Recovery waits for the store (whose lock another replica may hold); the manager answers meanwhile."""
    from sensviz.executors import LocalExecutor
    from server.jobs import JobManager

    monkeypatch.setattr(LocalExecutor, "warm", lambda self: None)  # starts no process
    interrupted_run(tmp_path)
    store = KeptStore(tmp_path / "kept", cap=50 * 2**20)
    release, keep = threading.Event(), store.keep
    monkeypatch.setattr(store, "keep", lambda *args, **kw: (release.wait(CEILING_S), keep(*args, **kw))[1])
    manager = JobManager(tmp_path / "jobs", store, capacity=1)
    try:
        assert manager.status("runningjob000000").state == "running" and not manager.recovered.is_set()
        release.set()
        assert manager.recovered.wait(CEILING_S)
        status = manager.status("runningjob000000")
        assert status.state == "stopped" and status.kept and "step 75" in status.reason
    finally:
        release.set()
        manager.close()


def _stopped_with_snapshot(data: Path, job_id: str, state: str, request: worker.TrainRequest, at: int = 20) -> Path:
    """A job folder a restart left `state` ("running", or "queued": a continuation that waited), with the
    snapshot of its request's run after step `at`, and its records."""
    folder = interrupted_run(data, job_id=job_id)
    (folder / "request.json").write_text(json.dumps(request.to_dict()))
    state_file = json.loads((folder / "state.json").read_text())
    (folder / "state.json").write_text(json.dumps({**state_file, "state": state}))
    model, task, config = worker.prepare(request)
    train(model, task, config, [SnapshotAt(at, folder / worker.SNAPSHOT)])
    return folder


def test_a_restart_keeps_each_snapshot_this_code_can_go_on_from_and_no_other(tmp_path, monkeypatch):
    """After a restart: a running run's snapshot gives its step to go on from, and a continuation that was still
    waiting keeps the snapshot it carried (a second restart loses no steps); a snapshot this code cannot go on from
    (here: of other settings, as after an upgrade) is removed, and its run is run again from step 0. While the run's
    last measurement is kept, its snapshot does not count against the owner's quota."""
    from sensviz.executors import LocalExecutor
    from server.jobs import JobManager

    monkeypatch.setattr(LocalExecutor, "warm", lambda self: None)
    asked = worker.TrainRequest(task="first", model={"arch": "encoder", "d_model": 8, "n_layers": 1, "n_heads": 2},
                                train={"n": 4, "steps": 30, "batch_size": 16, "lr": 3e-3, "eval_interval": 10},
                                measure_every=10)
    running = _stopped_with_snapshot(tmp_path, "runningjob000000", "running", asked)
    waiting = _stopped_with_snapshot(tmp_path, "waitingjob000000", "queued", asked, at=10)
    upgraded = _stopped_with_snapshot(tmp_path, "upgradedjob00000", "running", asked)
    other = worker.TrainRequest(**{**asked.to_dict(), "train": {**asked.train, "lr": 1e-3}})
    (upgraded / "request.json").write_text(json.dumps(other.to_dict()))  # the snapshot's settings differ now
    manager = JobManager(tmp_path / "jobs", KeptStore(tmp_path / "kept", cap=50 * 2**20), capacity=1)
    try:
        assert manager.recovered.wait(CEILING_S)
        first, second, third = (manager.status(f.name) for f in (running, waiting, upgraded))
        assert (first.state, first.resume_step) == ("stopped", 20) and first.kept, first
        assert (second.state, second.resume_step) == ("cancelled", 10) and second.ended_by_restart
        assert third.resume_step is None and third.kept and not (upgraded / worker.SNAPSHOT).exists()
        assert (running / worker.SNAPSHOT).exists() and (waiting / worker.SNAPSHOT).exists()
    finally:
        manager.close()


def test_keeping_a_stopped_runs_measurement_does_not_count_its_snapshot(tmp_path, monkeypatch):
    """The owner's quota counts their job folders; while a restart keeps a run's last measurement, neither those
    weights (moving into the store) nor the run's snapshot (kept to go on from) count against it."""
    from sensviz.executors import LocalExecutor
    from server.jobs import JobManager

    monkeypatch.setattr(LocalExecutor, "warm", lambda self: None)
    asked = worker.TrainRequest(task="first", model={"arch": "encoder", "d_model": 8, "n_layers": 1, "n_heads": 2},
                                train={"n": 4, "steps": 30, "batch_size": 16, "lr": 3e-3, "eval_interval": 10},
                                measure_every=10)
    folder = _stopped_with_snapshot(tmp_path, "runningjob000000", "running", asked)
    sizes = {path.name: path.stat().st_size for path in folder.iterdir()}
    expected = sum(sizes.values()) - sizes["last.safetensors"] - sizes[worker.SNAPSHOT]
    store, held = KeptStore(tmp_path / "kept", cap=50 * 2**20), []
    keep = store.keep
    monkeypatch.setattr(store, "keep", lambda *args, **kw: (held.append(store.elsewhere("alice")), keep(*args, **kw))[1])
    manager = JobManager(tmp_path / "jobs", store, capacity=1)
    try:
        assert manager.recovered.wait(CEILING_S)
        assert held == [expected] and manager.status(folder.name).resume_step == 20
        assert manager.folder_bytes("alice") >= sizes[worker.SNAPSHOT]  # afterwards it counts, until continued
    finally:
        manager.close()


def _train_a_class_run(base: str, data: Path) -> tuple[str, str, str]:
    """A class whose member (holding a kept model already) presses Train on the assignment, and a second
    member whose run waits behind it (one run at a time); returns the class code, the running job's id
    once it has its first measurement, and the queued job's id."""
    secret = owners.owner_secret(data)
    store = ClassStore(data / "classes", secret)
    found = store.create("Physics 101", "instructor")
    store.start_assignment(found.code, "instructor", assignments.LENGTH_SCALING.name)
    cookies = [owners.mint_owner(secret) for _ in range(2)]
    for name, cookie in zip(("alice", "bob"), cookies):
        store.join(found.code, name, cookie)
    model = sv.build_model("encoder", d_model=8, n_layers=1, n_heads=2, max_len=24, seed=0)
    KeptStore(data / "kept", cap=1024 * 2**20).keep("trained", "earlier", sv.checkpoint_bytes(model, task="parity", n=4),
                                                   cookies[0])

    async def press(cookie: str) -> str:
        async with load.Session(base, cookies={"sensviz_owner": cookie}) as session:
            opened = await session.open(f"train?class={found.code}")
            pressed = await session.press(opened.buttons["Train"])
            return parse_qs(pressed.query_string)["job"][0]

    job = asyncio.run(press(cookies[0]))
    queued = asyncio.run(press(cookies[1]))
    deadline = time.monotonic() + CEILING_S
    files = ("records.jsonl", "last.safetensors", worker.SNAPSHOT)  # a measurement after step 0 wrote its snapshot
    while not all((data / "jobs" / job / name).is_file() for name in files):
        assert time.monotonic() < deadline, "the run never measured"
        time.sleep(0.2)
    return found.code, job, queued, cookies[0]


def _continue(base: str, cookie: str, job: str, step: int) -> str:
    """The run's owner opens its link after the restart and presses "Continue from step …"; the new job's id."""
    async def press() -> str:
        async with load.Session(base, cookies={"sensviz_owner": cookie}) as session:
            opened = await session.open(f"train?job={job}")
            pressed = await session.press(opened.buttons[f"Continue from step {step:,}"])
            return parse_qs(pressed.query_string)["job"][0]

    return asyncio.run(press())


def _trained_alone(request: dict) -> list[torch.Tensor]:
    """The weights the run's request trains to in one process, never interrupted (on one thread, as the job)."""
    model, task, config = worker.prepare(worker.TrainRequest.from_dict(request))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(model, task, config)
    finally:
        torch.set_num_threads(threads)
    return [p.detach() for p in model.parameters()]


class _NoneRunning:
    """The job manager's answer after the restart: no run of the class is queued or running."""

    def status(self, job_id):
        return None


def _unlocked(data: Path) -> bool:
    """Whether every lock on the data folder is free (a server that ended released them)."""
    for name in ("jobs", "kept", "classes"):
        with open(data / name / ".lock", "a") as file:
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False
    return True


@pytest.mark.server
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL])
def test_a_server_stopped_while_a_class_run_trains_starts_again_and_keeps_the_run(tmp_path, stop):
    log_path = ROOT / "artifacts" / f"streamlit-restart-{stop.name}.log"
    env = {"SENSVIZ_DATA_DIR": str(tmp_path), "SENSVIZ_MAX_JOBS": "1"}
    with load.served(log_path, env=env) as (base, process):
        code, job, queued, alice = _train_a_class_run(base, tmp_path)
        stopped = time.monotonic()
        process.send_signal(stop)
        process.wait(timeout=CEILING_S)
        ended_s = time.monotonic() - stopped
    log = log_path.read_text()
    assert "Traceback" not in log, log[-3000:]
    if stop == signal.SIGTERM:
        assert process.returncode == 0 and "SIGTERM received, the server stops now" in log
        assert ended_s < 10, ended_s
    assert _unlocked(tmp_path)
    started = time.monotonic()
    with load.served(log_path.with_suffix(".again.log"), env=env) as (base, _):
        ready_s = time.monotonic() - started
        deadline = time.monotonic() + CEILING_S
        while (status := json.loads((tmp_path / "jobs" / job / "state.json").read_text()))["state"] == "running":
            assert time.monotonic() < deadline, status
            time.sleep(0.2)
        assert status["state"] == "stopped" and "the server stopped during this run" in status["reason"], status
        assert status["kept"] and KeptStore(tmp_path / "kept", cap=1024 * 2**20).data(status["kept"])
        store = ClassStore(tmp_path / "classes", owners.owner_secret(tmp_path))
        while not store.get(code).jobs[queued]["recorded"]:  # recorded in the class when the restart ended it
            assert time.monotonic() < deadline
            time.sleep(0.2)
        found = store.get(code)
        assert [m.get("name") for m in found.members] == ["alice", "bob"] and {job, queued} <= set(found.jobs)
        assert json.loads((tmp_path / "jobs" / queued / "state.json").read_text())["state"] == "cancelled"
        dealt = store.deal(code, _NoneRunning())
        cells = sorted(tuple(c.values()) for c in dealt.values())
        assert cells == sorted(tuple(found.jobs[j]["assignment"].values()) for j in (job, queued))  # dealt again
        opened = asyncio.run(load.open_once(base, f"class?class={code}"))[0]
        assert opened.ok, (opened.status, opened.exceptions)

        async def reconnect():  # a page of the stopped server, reconnecting as Streamlit's browser code does
            async with student(base, resume="a-session-of-the-stopped-server") as page:
                return await page.open(f"train?job={job}")

        moved = asyncio.run(reconnect())
        assert moved.ok and NOTICE_LOCAL in moved.texts and NOTICE not in moved.texts, moved.texts  # no "goes on"

        # the owner continues the run from its snapshot: it ends as the run would have without the restart
        assert status["resume_step"] in (500, 1000), status  # the assignment measures every 500 of 1,200 steps
        again = _continue(base, alice, job, status["resume_step"])
        while (ended := json.loads((tmp_path / "jobs" / again / "state.json").read_text()))["state"] in ("queued", "running"):
            assert time.monotonic() < deadline + CEILING_S, ended
            time.sleep(0.2)
        assert ended["state"] == "finished" and ended["steps"] == 1200, ended
        assert json.loads((tmp_path / "jobs" / job / "state.json").read_text())["rerun"] == again
        assert not (tmp_path / "jobs" / job / worker.SNAPSHOT).exists()  # carried over, not counted twice
        continued = sv.load_checkpoint(KeptStore(tmp_path / "kept", cap=1024 * 2**20).data(ended["kept"]))
        request = json.loads((tmp_path / "jobs" / again / "request.json").read_text())
        assert request == json.loads((tmp_path / "jobs" / job / "request.json").read_text())
        alone = _trained_alone(request)
        assert all(torch.equal(p, q) for p, q in zip(continued.model.parameters(), alone))  # bit for bit
        assert continued.metadata["training"]["continued_from"] == status["resume_step"]  # not trained from step 0
        steps = [r["step"] for r in worker.read_records(tmp_path / "jobs" / again)]
        assert steps == sorted(set(steps)) and steps[0] == 0 and steps[-1] == 1200  # the records once each, all of them
        assert store.get(code).jobs[again]["assignment"] == found.jobs[job]["assignment"]  # the class's run, its cell
        gallery = {m["job"] for m in store.get(code).models}
        assert again in gallery and job not in gallery  # the stopped part left the gallery when the run went on
    print(f"{stop.name}: ended in {ended_s:.1f} s, ready again in {ready_s:.1f} s")


def test_a_snapshot_that_cannot_be_copied_refuses_the_continuation_in_one_line_and_leaves_no_folder(tmp_path,
                                                                                                    monkeypatch):
    from sensviz.executors import LocalExecutor
    from server import budget, jobs

    monkeypatch.setattr(LocalExecutor, "warm", lambda self: None)
    asked = worker.TrainRequest(task="first", model={"arch": "encoder", "d_model": 8, "n_layers": 1, "n_heads": 2},
                                train={"n": 4, "steps": 30, "batch_size": 16, "lr": 3e-3, "eval_interval": 10},
                                measure_every=10)
    folder = _stopped_with_snapshot(tmp_path, "runningjob000000", "running", asked)
    manager = jobs.JobManager(tmp_path / "jobs", KeptStore(tmp_path / "kept", cap=50 * 2**20), capacity=1,
                              calibration=budget.Calibration(op_s=1e-6, flop_s=1e-12))
    try:
        assert manager.recovered.wait(CEILING_S) and manager.status(folder.name).resume_step == 20
        before = {p.name for p in (tmp_path / "jobs").iterdir()}

        def full_disk(*args, **kwargs):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(jobs.shutil, "copyfile", full_disk)
        with pytest.raises(jobs.JobRefused, match="could not be copied .*No space left"):
            manager.rerun(folder.name, "alice")
        assert {p.name for p in (tmp_path / "jobs").iterdir()} == before  # no half-made job folder
        assert manager.status(folder.name).rerun is None and (folder / worker.SNAPSHOT).exists()  # it can try again
    finally:
        manager.close()
