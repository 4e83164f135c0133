"""Training jobs: their own processes, a cap and a queue, one job per owner, Stop keeps the last
measurement, workers that outlive no server, jobs of an earlier server run recovered."""

import json
import os
import secrets
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from helpers.core import SnapshotAt
from helpers.server import wait_for

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import sensviz as sv  # noqa: E402
from sensviz.executors import LocalExecutor  # noqa: E402
from server import budget, jobs, worker  # noqa: E402
from server.jobs import JobManager, JobRefused  # noqa: E402
from server.kept import KeptRefused, KeptStore  # noqa: E402
from server.worker import TrainRequest  # noqa: E402

CEILING_S = 300  # generous: the machine is shared


def request(steps: int = 200, n: int = 4, every: int = 50, **train) -> TrainRequest:
    return TrainRequest(task="first", model={"arch": "encoder", "d_model": 8, "n_layers": 1, "n_heads": 2},
                        train={"n": n, "steps": steps, "batch_size": 64, "lr": 3e-3, "eval_interval": 50, "seed": 0,
                               **train}, measure_every=every)


@pytest.fixture
def make_manager(tmp_path, monkeypatch):
    made = []

    def make(runs_jobs: bool = True, **kwargs) -> JobManager:
        """A manager on this test's folders; with `runs_jobs=False` (a test that starts no worker) it
        starts no process ahead either (each one loads torch: seconds of CPU for nothing)."""
        if not runs_jobs:
            monkeypatch.setattr(LocalExecutor, "warm", lambda self: None)
        store = KeptStore(tmp_path / "kept", cap=50 * 2**20)
        manager = JobManager(tmp_path / "jobs", store, **kwargs)
        made.append(manager)
        return manager

    yield make
    for manager in made:
        manager.close()


def test_a_job_trains_in_its_own_process_and_its_model_is_kept(make_manager):
    manager = make_manager(capacity=1, threads=1)
    ended = []
    manager.on_ended = lambda job, by: ended.append((job, by.status(job).state))  # the class store's hook
    job_id = manager.submit("alice", request(steps=150))
    status = wait_for(manager, job_id, lambda s: not s.active)
    assert status.state == "finished" and status.reason == "completed" and status.steps == 150
    deadline = time.monotonic() + CEILING_S
    while not ended and time.monotonic() < deadline:  # told right after the status is published
        time.sleep(0.05)
    assert ended == [(job_id, "finished")]  # told once, when collected, and the status already says so
    ck = sv.load_checkpoint(manager.store.data(status.kept))
    assert ck.task.label == "first" and ck.n == 4
    assert ck.metadata["training"]["request"]["task"] == "first"
    assert [k.token for k in manager.store.owned("alice")] == [status.kept]
    records = manager.records(job_id)
    assert records[0]["step"] == 0 and records[-1]["step"] == 150  # the first and the final weights are measured
    assert {"loss", "accuracy", "sharpness", "avg_sensitivity", "blowup_mean"} <= set(records[-1])
    assert manager.active("alice") is None


def test_early_stopping_at_the_target(make_manager):
    manager = make_manager(capacity=1, threads=1)
    job_id = manager.submit("alice", request(steps=5000, target_accuracy=1.0, target_loss=1e-2))
    status = wait_for(manager, job_id, lambda s: not s.active)
    assert status.state == "finished" and status.reason == "early_stop" and status.steps < 5000
    final = sv.load_checkpoint(manager.store.data(status.kept)).metadata["training"]["final"]
    assert final["eval_accuracy"] == 1.0 and final["eval_loss"] <= 1e-2


def test_bad_settings_are_refused_before_queueing(make_manager):
    manager = make_manager(runs_jobs=False, capacity=1)
    with pytest.raises(ValueError, match="n must be at most 24 \\(limit 'this server's'\\)"):
        manager.submit("alice", request(n=30))
    with pytest.raises(ValueError, match="steps must be at most 1,000,000 \\(limit 'train_steps'\\)"):
        manager.submit("alice", request(steps=10**9))
    with pytest.raises(ValueError, match="only for n=2"):
        manager.submit("alice", TrainRequest("table:0110", request().model, request().train))
    assert manager.active("alice") is None and not manager.queue


@pytest.mark.slow  # integration: three worker processes, each loading torch
def test_one_job_per_owner_a_queue_behind_the_cap_stop_and_cancel(make_manager):
    manager = make_manager(capacity=1, threads=1)
    long = manager.submit("alice", request(steps=100_000, every=25))
    wait_for(manager, long, lambda s: s.state == "running" and len(manager.records(long)) >= 2)
    with pytest.raises(JobRefused, match="already have a training run running"):
        manager.submit("alice", request())
    short = manager.submit("bob", request(steps=100))
    carol = manager.submit("carol", request(steps=100))
    assert manager.status(short).state == "queued" and manager.status(short).position == 1
    assert manager.status(carol).position == 2
    assert not manager.stop(long, "bob")  # only the owner stops a run
    assert manager.stop(carol, "carol")  # a queued job is cancelled
    assert manager.status(carol).state == "cancelled"
    assert manager.unseen("carol") is None  # she cancelled it herself: nothing to tell her later

    assert manager.stop(long, "alice")
    stopped = manager.status(long)
    assert stopped.state == "stopped" and "weights of the last measurement" in stopped.reason
    assert not stopped.ended_by_restart  # its owner stopped it: nothing to offer again
    last = manager.records(long)[-1]["step"]
    ck = sv.load_checkpoint(manager.store.data(stopped.kept))
    # the kept weights are those of the last measurement, and the status says which: the worker writes a
    # measurement's weights before its record, so a Stop in between keeps weights one record ahead
    assert ck.metadata["training"]["steps"] == stopped.steps in (last, last + 25) and last >= 25
    assert f"(step {stopped.steps:,})" in stopped.reason

    done = wait_for(manager, short, lambda s: not s.active)  # the queued job ran once there was room
    assert done.state == "finished" and done.steps == 100


PARENT = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {root!r})
    from pathlib import Path
    from server.jobs import JobManager
    from server.kept import KeptStore
    from server.worker import TrainRequest
    if __name__ == "__main__":
        manager = JobManager(Path({root_jobs!r}), KeptStore(Path({root_kept!r}), 2**26), capacity=1, threads=1)
        job = manager.submit("alice", TrainRequest("first", {{"arch": "encoder", "d_model": 8, "n_layers": 1, "n_heads": 2}},
                                                   {{"n": 4, "steps": 100000, "batch_size": 64}}, 1000))
        while manager.status(job).state != "running" or manager.jobs[job].process.pid is None:
            time.sleep(0.1)
        print(manager.jobs[job].process.pid, manager.executor._launcher.process.pid, flush=True)
        time.sleep(600)
    """
)


@pytest.mark.slow  # integration: a server process (torch loaded) killed, and its launcher and worker
def test_a_worker_exits_when_the_server_dies(tmp_path):
    script = tmp_path / "server.py"
    script.write_text(PARENT.format(root=str(ROOT), root_jobs=str(tmp_path / "jobs"), root_kept=str(tmp_path / "kept")))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        worker_pid, launcher_pid = map(int, parent.stdout.readline().split())
        os.kill(worker_pid, 0)  # the worker runs
    finally:
        parent.send_signal(signal.SIGKILL)  # the server dies without cleaning up
        parent.wait()
    deadline = time.monotonic() + CEILING_S
    while alive(worker_pid) or alive(launcher_pid):
        assert time.monotonic() < deadline, "the launcher or the worker outlived its server"
        time.sleep(0.2)


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by init) counts as gone
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def test_jobs_of_an_earlier_server_run_are_recovered(make_manager, tmp_path):
    model = sv.build_model("encoder", d_model=8, n_layers=1, n_heads=2, max_len=24, seed=0)
    running = tmp_path / "jobs" / "runningjob000000"
    running.mkdir(parents=True)
    (running / "last.safetensors").write_bytes(sv.checkpoint_bytes(model, task="first", n=4))
    (running / "records.jsonl").write_text(json.dumps({"step": 75}) + "\n")
    (running / "progress.json").write_text(json.dumps({"step": 90, "steps": 100}))
    queued = tmp_path / "jobs" / "queuedjob0000000"
    queued.mkdir()
    for folder, state in ((running, "running"), (queued, "queued")):
        (folder / "state.json").write_text(json.dumps({"id": folder.name, "owner": "alice", "name": "m", "state": state,
                                                       "created": 0.0}))
    manager = make_manager(runs_jobs=False, capacity=1)  # recovers them in its thread, after it answers
    recovered = wait_for(manager, running.name, lambda s: not s.active)
    assert recovered.state == "stopped" and "step 75" in recovered.reason and recovered.ended_by_restart
    assert sv.load_checkpoint(manager.store.data(recovered.kept)).task.label == "first"
    assert not (running / "last.safetensors").exists()  # in the store now, not counted twice
    cancelled = wait_for(manager, queued.name, lambda s: not s.active)
    assert cancelled.state == "cancelled" and cancelled.ended_by_restart
    assert manager.status("no-such-job-id") is None and manager.status("../../etc") is None


def test_an_owner_away_when_their_run_ended_is_told_once_also_after_a_restart(make_manager, tmp_path):
    """`unseen` names an owner's newest job once it ended, until `mark_seen` by that owner; the mark is kept
    in the job's folder (a restarted server knows it), and a run the restart stopped is news to its owner,
    also while it is being recovered. A state written before the mark existed is not news."""
    folders = tmp_path / "jobs"

    def job(job_id: str, owner: str, created: float, state: str, **seen) -> Path:
        folder = folders / job_id
        folder.mkdir(parents=True)
        (folder / "state.json").write_text(json.dumps({"id": job_id, "owner": owner, "name": "m", "state": state,
                                                       "created": created, **seen}))
        return folder

    job("alicesolderrun0", "alice", 1.0, "finished", seen=False)
    job("alicesnewestrun", "alice", 2.0, "failed", seen=False)
    job("bobsrun00000000", "bob", 3.0, "finished", seen=False)
    job("carolsrun000000", "carol", 3.0, "finished")  # from before the mark: said long ago
    manager = make_manager(runs_jobs=False, capacity=1)
    assert manager.unseen("alice") == "alicesnewestrun" and manager.unseen("bob") == "bobsrun00000000"
    assert manager.unseen("carol") is None and manager.unseen("dave") is None
    manager.mark_seen("alicesnewestrun", "bob")  # not bob's (followed by its link): left as it is
    manager.mark_seen("no-such-job-id", "alice")
    assert manager.unseen("alice") == "alicesnewestrun"
    manager.mark_seen("alicesnewestrun", "alice")
    assert manager.unseen("alice") is None  # nor the older run: the newer one came after it
    manager.close()

    model = sv.build_model("encoder", d_model=8, n_layers=1, n_heads=2, max_len=24, seed=0)
    running = job("alicesrunning00", "alice", 4.0, "running", seen=False)  # training when the server stopped
    (running / "last.safetensors").write_bytes(sv.checkpoint_bytes(model, task="first", n=4))
    (running / "records.jsonl").write_text(json.dumps({"step": 75}) + "\n")
    restarted = make_manager(runs_jobs=False, capacity=1)
    assert restarted.unseen("alice") == running.name  # recovered or not yet: a page follows it to its outcome
    assert wait_for(restarted, running.name, lambda s: not s.active).state == "stopped"
    assert restarted.unseen("alice") == running.name and restarted.unseen("bob") == "bobsrun00000000"
    restarted.mark_seen(running.name, "alice")
    assert restarted.unseen("alice") is None and restarted.status(running.name).seen


def test_a_second_server_on_the_same_data_folder_is_refused(make_manager):
    make_manager(runs_jobs=False, capacity=1)
    with pytest.raises(RuntimeError, match="another server runs the training jobs"):
        make_manager(runs_jobs=False, capacity=1)


@pytest.mark.slow  # integration: seven worker processes, each loading torch
def test_no_failure_of_one_job_stops_the_manager(make_manager, monkeypatch):
    """Each failure while collecting a job fails that job with one line; the next user's job runs."""
    from server import jobs as jobs_module
    from server import kept as kept_module

    manager = make_manager(capacity=1, threads=1)
    store = manager.store

    def run(owner: str, **train) -> jobs.JobStatus:
        job_id = manager.submit(owner, request(steps=20, every=10, **train))
        return wait_for(manager, job_id, lambda s: not s.active)

    def one_line(status, *parts):
        assert status.state == "failed" and "\n" not in status.error, status
        assert all(part in status.error for part in parts), status.error

    store.quota = 1000  # the owner's share is too small: the store refuses the model
    one_line(run("alice"), "the run ended, but its model was not kept", "is more than one user may keep")
    store.quota = store.cap

    with monkeypatch.context() as patch:  # the store's disk is full
        patch.setattr(kept_module, "write_atomic", lambda path, data: (_ for _ in ()).throw(OSError(28, "No space left")))
        one_line(run("bob"), "was not kept", "could not write it (No space left)")
    assert not [p for p in store.root.iterdir() if p.name.endswith(".tmp")]

    with monkeypatch.context() as patch:  # anything unexpected while collecting
        patch.setattr(manager, "_keep", lambda job, file: (_ for _ in ()).throw(RuntimeError("boom")))
        one_line(run("carol"), "could not collect this run's result (RuntimeError: boom)")

    real_write = jobs_module.write_atomic
    job_of = {}

    def disk_full_for_dave(path, data):  # dave's job folder becomes unwritable once his run is collected
        job = manager.jobs.get(path.parent.name)
        collected = job is not None and job.process is not None and job.process.poll() is not None
        if path.parent.name == job_of.get("dave") and path.name == "state.json" and collected:
            raise OSError(28, "No space left on device")
        real_write(path, data)

    with monkeypatch.context() as patch:
        patch.setattr(jobs_module, "write_atomic", disk_full_for_dave)
        job_of["dave"] = manager.submit("dave", request(steps=20, every=10))
        one_line(wait_for(manager, job_of["dave"], lambda s: not s.active), "No space left on device")

    erin = manager.submit("erin", request(steps=100_000, every=10))  # the worker dies
    wait_for(manager, erin, lambda s: s.state == "running" and manager.records(erin))
    os.kill(manager.jobs[erin].process.pid, signal.SIGKILL)
    killed = wait_for(manager, erin, lambda s: not s.active)
    assert killed.state == "stopped" and "ended unexpectedly" in killed.reason and killed.kept

    grace = manager.submit("grace", request(steps=100_000, every=10))  # the launcher dies, and with it her run
    wait_for(manager, grace, lambda s: s.state == "running" and manager.records(grace))
    launcher, run_pid = manager.executor._launcher.process, manager.jobs[grace].process.pid
    assert _parent(run_pid) == launcher.pid  # every run is forked from the launcher
    assert os.getpriority(os.PRIO_PROCESS, run_pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + worker.RUN_NICE)
    launcher.kill()
    lost = wait_for(manager, grace, lambda s: not s.active)
    one_line(lost, "the server's training launcher ended (exit code -9) during the run", "last measurement")
    assert lost.kept

    done = run("frank")  # and the next user's job runs to completion (on a launcher started again)
    assert done.state == "finished" and sv.load_checkpoint(store.data(done.kept)).task.label == "first"
    assert manager._thread.is_alive()


def test_job_folders_count_against_their_owner_and_only_their_own_are_pruned(make_manager, tmp_path):
    from server.jobs import MAX_FOLDERS

    for owner, count in (("alice", MAX_FOLDERS + 5), ("bob", 3)):
        for i in range(count):
            folder = tmp_path / "jobs" / f"{owner}job{i:010d}"
            folder.mkdir(parents=True)
            (folder / "state.json").write_text(json.dumps({"id": folder.name, "owner": owner, "name": "m",
                                                           "state": "finished", "created": float(i)}))
            (folder / "records.jsonl").write_text("x" * 1000)
            (folder / ".records.jsonl.0123abcd.tmp").write_text("y" * 500)  # left by a killed worker
    manager = make_manager(runs_jobs=False, capacity=1)
    assert manager.recovered.wait(CEILING_S)  # pruned in the manager's thread, after it answers
    folders = sorted(p.name for p in (tmp_path / "jobs").iterdir() if p.is_dir())
    assert [f for f in folders if f.startswith("bob")] == [f"bobjob{i:010d}" for i in range(3)]
    assert [f for f in folders if f.startswith("alice")] == [f"alicejob{i:010d}" for i in range(5, MAX_FOLDERS + 5)]
    assert not list((tmp_path / "jobs").glob("*/*.tmp"))
    assert manager.folder_bytes("bob") == 3 * (1000 + len((tmp_path / "jobs" / "bobjob0000000000" / "state.json").read_bytes()))
    assert manager.store.usage("bob") == manager.folder_bytes("bob")  # counted in the owner's quota
    manager.store.quota = manager.folder_bytes("alice") + 100
    with pytest.raises(KeptRefused, match="training records included"):
        manager.store.keep("upload", "x.safetensors", b"z" * 200, "alice")


@pytest.mark.slow  # integration: a 16 MiB request trained at n=24 in a worker
def test_a_table_task_at_the_largest_n_trains_is_kept_and_loads(make_manager):
    import torch

    from server.worker import MAX_LIVE_N

    bits = "".join("01"[b] for b in torch.randint(0, 2, (2**MAX_LIVE_N,), generator=torch.Generator().manual_seed(0)).tolist())
    manager = make_manager(capacity=1, threads=1)
    manager.store.quota = manager.store.cap  # the request (the 16 MiB table) counts against the owner
    job_id = manager.submit("alice", TrainRequest(f"table:{bits}", request().model,
                                                  {**request().train, "n": MAX_LIVE_N, "steps": 10}, measure_every=5))
    status = wait_for(manager, job_id, lambda s: not s.active)
    assert status.state == "finished", status
    assert len(status.name) <= sv.limits.LIMITS["label_chars"].high
    assert status.name.startswith(f"table:{bits[:32]}") and "(16,777,243 chars)#" in status.name
    assert (manager.root / job_id / "state.json").stat().st_size < 4096
    data = manager.store.data(status.kept)
    ck = sv.load_checkpoint(data)
    assert ck.task.label == f"table:{bits}" and ck.n == MAX_LIVE_N
    assert manager.store.info(status.kept).name == status.name
    assert manager.folder_bytes("alice") > 2**24  # the request holds the table once, and counts


# ---------------------------------------------------------------- fairness, budgets and limits (issue 17)

FAST = budget.Calibration(op_s=1e-6, flop_s=1e-12)
"""A calibration for tests that are not about the estimate: no subprocess measures this machine."""


class _Idle:
    """Stands in for a worker process that never ends (the queue tests start no training)."""

    returncode = None

    def poll(self):
        return None

    def terminate(self):
        self.returncode = -15

    def wait(self, timeout=None):
        return self.returncode


def queue_manager(make_manager, monkeypatch, **kwargs) -> JobManager:
    """A manager with one run always going (an idle stand-in), so that submitted jobs stay queued."""
    manager = make_manager(runs_jobs=False, capacity=1, threads=1, calibration=FAST, **kwargs)
    monkeypatch.setattr(manager, "_start_process", lambda folder, device=None: _Idle())
    manager.submit("runner", request(), "10.0.0.99")
    return manager


class _Asked:
    """An executor whose workers never end (`_Idle`), recording whether it was asked for its launcher
    (`warm`) since it last started a worker."""

    def __init__(self):
        self.asked = False

    def warm(self):
        self.asked = True

    def start_worker(self, folder, device=None):
        self.asked = False
        return _Idle()

    def close(self):
        pass


def test_the_launcher_is_asked_for_only_where_a_run_could_start_on_it(make_manager):
    """A free slot or a job in the queue asks for the launcher (started ahead, or again if it ended);
    one run training with nobody waiting (capacity 1) does not, whose start-up's seconds of CPU would
    slow that run down."""
    executor = _Asked()
    manager = make_manager(runs_jobs=False, capacity=1, threads=1, calibration=FAST, executor=executor)
    manager.tick()
    assert executor.asked  # nothing runs: the next run starts at once
    alice = manager.submit("alice", request(), "10.0.0.1")
    manager.tick()
    assert manager.status(alice).state == "running" and not executor.asked
    bob = manager.submit("bob", request(), "10.0.0.2")
    manager.tick()
    assert manager.status(bob).state == "queued" and executor.asked  # bob's run will start at once
    manager.stop(alice, "alice")
    manager.tick()
    assert manager.status(bob).state == "running" and not executor.asked
    manager.stop(bob, "bob")
    manager.tick()
    assert executor.asked


def test_by_default_runs_fill_the_cores_thread_for_thread(make_manager, monkeypatch):
    """Without a configured capacity, small runs (one torch thread) start while cores are free, a larger run
    (`threads` threads) waits for as many; a configured capacity of 1 keeps one run at a time."""
    monkeypatch.delenv("SENSVIZ_MAX_JOBS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    executor = _Asked()
    manager = make_manager(runs_jobs=False, calibration=FAST, executor=executor)
    assert (manager.capacity, manager.threads, manager.cores) == (2, 2, 2)
    small = [manager.submit(f"s{k}", request(), f"10.0.0.{k}") for k in range(3)]  # d = 8, batch 64: small
    wide = TrainRequest(task="first", model={"arch": "encoder", "d_model": 64, "n_layers": 2, "n_heads": 2},
                        train={"n": 8, "steps": 200, "batch_size": 1024}, measure_every=50)
    large = manager.submit("large", wide, "10.0.0.9")  # about 1e5 parameters x 1024 strings: not small
    assert manager.jobs[large].threads == 2 and {manager.jobs[j].threads for j in small} == {1}
    manager.tick()
    assert [manager.status(j).state for j in (*small, large)] == ["running", "running", "queued", "queued"]
    manager.stop(small[0], "s0")
    manager.tick()
    assert [manager.status(j).state for j in (*small, large)] == ["stopped", "running", "running", "queued"]
    manager.stop(small[1], "s1")
    manager.tick()
    assert manager.status(large).state == "queued"  # one core free: the two-thread run waits for the second
    manager.stop(small[2], "s2")
    manager.tick()
    assert manager.status(large).state == "running"
    manager.close()
    monkeypatch.setenv("SENSVIZ_MAX_JOBS", "1")
    one = make_manager(runs_jobs=False, calibration=FAST, executor=_Asked())
    assert (one.capacity, one.threads, one.cores) == (1, 2, 2)


def names(manager: JobManager) -> list[str]:
    return [manager.jobs[i].status.owner for i in manager.queue]


def test_the_queue_takes_turns_across_addresses(make_manager, monkeypatch):
    manager = queue_manager(make_manager, monkeypatch)
    for k in range(3):
        manager.submit(f"a{k}", request(), "10.0.0.1")  # one address, three fresh owner ids
    manager.submit("b0", request(), "10.0.0.2")
    manager.submit("c0", request(), "10.0.0.3")
    manager.submit("b1", request(), "10.0.0.2")
    assert names(manager) == ["a0", "b0", "c0", "a1", "b1", "a2"]
    assert manager.status(manager.active("c0")).position == 3
    manager.stop(manager.active("runner"), "runner")  # a0 starts: 10.0.0.1 was served last now
    assert names(manager) == ["b0", "c0", "a1", "b1", "a2"]
    manager.submit("d0", request(), "10.0.0.4")  # a new address goes before everyone's second run
    assert names(manager) == ["b0", "c0", "d0", "a1", "b1", "a2"]


def test_a_full_queue_bumps_the_newest_job_of_the_busiest_address(make_manager, monkeypatch):
    manager = queue_manager(make_manager, monkeypatch, max_queue=4)
    flood = [manager.submit(f"a{k}", request(), "10.0.0.1") for k in range(4)]
    with pytest.raises(JobRefused, match=r"queue is full \(4 runs waiting, 4 of them from your network address.*"
                                         r"try again when a run has ended \(about \d+ min from now"):
        manager.submit("a4", request(), "10.0.0.1")
    honest = manager.submit("student", request(), "10.0.0.2")
    bumped = manager.status(flood[-1])
    assert bumped.state == "cancelled" and "queue was full and your network address had the most runs" in bumped.reason
    assert manager.status(honest).position == 2  # after the first of 10.0.0.1, before its others
    manager.submit("student2", request(), "10.0.0.2")  # 2 against 3 afterwards: still fewer
    assert manager.status(flood[2]).state == "cancelled"
    with pytest.raises(JobRefused, match="as many as any other"):  # 3 against 2: no more bumping
        manager.submit("student3", request(), "10.0.0.2")
    assert len(manager.queue) == 4


def test_a_hard_cap_per_address_is_a_server_setting(make_manager, monkeypatch):
    manager = queue_manager(make_manager, monkeypatch, per_address=2)
    manager.submit("a0", request(), "10.0.0.1")
    manager.submit("a1", request(), "10.0.0.1")
    with pytest.raises(JobRefused, match="already has 2 training runs queued or running.*try again when one"):
        manager.submit("a2", request(), "10.0.0.1")
    manager.submit("b0", request(), "10.0.0.2")
    monkeypatch.setenv("SENSVIZ_MAX_JOBS_PER_ADDRESS", "3")
    assert jobs.max_per_address() == 3
    monkeypatch.delenv("SENSVIZ_MAX_JOBS_PER_ADDRESS")
    assert jobs.max_per_address() == 60  # a class of 60 behind one NAT, one run each
    monkeypatch.setenv("SENSVIZ_MAX_JOBS_PER_ADDRESS", "many")
    with pytest.raises(ValueError, match="SENSVIZ_MAX_JOBS_PER_ADDRESS must be a number"):
        jobs.max_per_address()


def test_the_machine_is_measured_when_the_manager_starts_not_on_the_first_train(make_manager, monkeypatch):
    measured = threading.Event()
    monkeypatch.setattr(jobs, "calibration", lambda: measured.set() or FAST)
    make_manager(runs_jobs=False, capacity=1)
    assert measured.wait(30)  # in the background, before anyone submits


def test_jobs_over_the_budget_are_refused_before_queueing(make_manager):
    manager = make_manager(runs_jobs=False, capacity=1, calibration=FAST, job_budget=budget.Budget(seconds=60, mib=4096))
    slow = budget.Calibration(op_s=1e-3, flop_s=1e-9)  # a machine a thousand times slower
    manager._calibration = slow
    with pytest.raises(ValueError, match=r"over the server's budget per run \(60 s and 4,096 MiB; SENSVIZ_JOB_BUDGET\): "
                                         r"time: about [\d.,]+ (s|min|h) against 60 s"):
        manager.submit("alice", request(steps=5000))
    manager._calibration = FAST
    manager.budget = budget.Budget(seconds=60, mib=10)
    with pytest.raises(ValueError, match=r"memory: about [\d,]+ MiB against 10 MiB"):
        manager.submit("alice", TrainRequest("parity", {"arch": "encoder", "d_model": 256, "n_layers": 6, "n_heads": 8},
                                             {"n": 24, "steps": 1, "batch_size": 4096}))
    with pytest.raises(ValueError, match="d_ff must be at most 1,024 \\(limit 'this server's'\\)"):
        manager.submit("alice", TrainRequest("parity", {"arch": "scratchpad", "d_model": 256, "n_layers": 6,
                                                        "n_heads": 8, "d_ff": 16384}, {"n": 24}))
    assert not manager.queue and not manager.jobs


def test_a_run_past_the_time_budget_is_stopped_and_keeps_its_last_measurement(make_manager):
    manager = make_manager(capacity=1, threads=1, calibration=FAST)
    job_id = manager.submit("alice", request(steps=100_000, every=25))
    wait_for(manager, job_id, lambda s: s.state == "running" and len(manager.records(job_id)) >= 2)
    manager.budget = budget.Budget(seconds=1e-3, mib=manager.budget.mib)  # the limit passes now, whatever the load
    status = wait_for(manager, job_id, lambda s: not s.active)
    assert status.state == "stopped" and status.reason.startswith("stopped at the server's time limit per run")
    assert "the weights of the last measurement" in status.reason and status.kept is not None


def test_a_worker_over_its_memory_budget_fails_with_one_line(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    big = TrainRequest("parity", {"arch": "encoder", "d_model": 128, "n_layers": 4, "n_heads": 8},
                       {"n": 24, "steps": 5, "batch_size": 4096}, 100)
    (folder / "request.json").write_text(json.dumps(big.to_dict()))
    subprocess.run([sys.executable, "-m", "server.worker", str(folder), "--parent", str(os.getpid()), "--max-mib", "40"],
                   cwd=ROOT, check=True, timeout=CEILING_S, env={**os.environ, "OMP_NUM_THREADS": "1"})
    outcome = json.loads((folder / "outcome.json").read_text())
    assert outcome == {"state": "failed", "error": "the run needed more memory than this server gives one run (40 MiB; "
                                                   "SENSVIZ_JOB_BUDGET)"}


def test_owner_ids_are_minted_by_the_server_and_forged_cookies_count_as_absent(tmp_path):
    from server import owners as owner_id

    secret = owner_id.owner_secret(tmp_path)
    assert (tmp_path / "owner_secret").stat().st_mode & 0o777 == 0o600 and len(secret) == 32
    assert owner_id.owner_secret(tmp_path) == secret  # created once
    minted = owner_id.mint_owner(secret)
    assert owner_id.verified_owner(minted, secret) == minted
    ident, signature = minted.split(".")
    wrong = "A" if signature[0] != "A" else "B"
    forged = [
        None, "", secrets.token_urlsafe(16),  # missing, empty, random (the old unsigned kind)
        f"{ident}.{wrong}{signature[1:]}",  # a valid-looking id with a wrong HMAC
        f"{secrets.token_urlsafe(16)}.{signature}",  # someone's signature on another id
        owner_id.mint_owner(b"another server's secret"),
        minted + "x", f"{ident}.{signature}.{signature}", ["list"], 12345,
    ]
    for cookie in forged:
        assert owner_id.verified_owner(cookie, secret) is None, cookie


def test_a_launcher_that_ends_at_once_is_not_started_again_on_every_tick(monkeypatch):
    """The manager asks for the launcher each tick: one that cannot start (it ends at once) is started
    again only after `RESPAWN_S`, not ten times a second; a job given to it ends at once, saying why."""
    from sensviz import executors

    monkeypatch.setattr(executors, "worker_command", lambda *args, **kwargs: [sys.executable, "-c", "pass"])
    executor = LocalExecutor(threads=1)
    executor.warm()
    first = executor._launcher
    first.process.wait(timeout=60)
    for _ in range(10):
        executor.warm()
    assert executor._launcher is first  # ended, and not started again yet
    monkeypatch.setattr(executors, "RESPAWN_S", 0.0)
    executor.warm()
    assert executor._launcher is not first
    executor._launcher.process.wait(timeout=60)
    job = executor._launcher.start(Path("unused"))
    assert job.wait(timeout=60) == -signal.SIGKILL and "launcher ended (exit code 0)" in job.lost
    executor.close()


@pytest.mark.slow  # a launcher (torch loaded) and two runs
def test_runs_fork_from_one_launcher_which_stops_and_kills_them(tmp_path):
    """Two runs are children of the same launcher, each in a process group of its own; Stop ends one with
    SIGTERM, the kill that a wait which ran out sends ends the other with SIGKILL (both to the run's group)."""
    executor = LocalExecutor(threads=1)
    try:
        runs = []
        for name in ("one", "two"):
            folder = tmp_path / name
            folder.mkdir()
            (folder / "request.json").write_text(json.dumps(request(steps=100_000).to_dict()))
            runs.append(executor.start_worker(folder))
        deadline = time.monotonic() + CEILING_S
        while any(run.pid is None for run in runs):
            assert time.monotonic() < deadline, "the launcher never started the runs"
            time.sleep(0.1)
        assert _parent(runs[0].pid) == _parent(runs[1].pid) == executor._launcher.process.pid
        assert [os.getpgid(run.pid) for run in runs] == [run.pid for run in runs]  # each leads its own group: Stop ends it all
        runs[0].terminate()
        assert runs[0].wait(timeout=CEILING_S) == -signal.SIGTERM and runs[0].lost is None
        executor._launcher.send({"kill": runs[1].number})
        assert runs[1].wait(timeout=CEILING_S) == -signal.SIGKILL
    finally:
        executor.close()


def test_a_run_that_has_not_ended_when_the_wait_runs_out_is_killed():
    from types import SimpleNamespace

    from sensviz.executors import LaunchedJob

    sent = []
    run = LaunchedJob(SimpleNamespace(send=sent.append), 7)
    assert run.wait(timeout=0.01) is None and sent == [{"kill": 7}]
    run.end(-signal.SIGKILL)
    assert run.wait(timeout=0.01) == run.poll() == -signal.SIGKILL and sent == [{"kill": 7}]


def test_a_run_continued_after_a_restart_keeps_the_time_it_had_trained_against_its_time_limit(make_manager):
    """The time limit per run holds for the run, not for each of its parts: a continuation starts with the seconds
    its snapshot had trained (here, beyond the limit already), so a restart does not buy a run a second budget."""
    from sensviz.training import train

    manager = make_manager(capacity=1, threads=1, calibration=FAST)
    asked = request(steps=400, every=20)  # its snapshot: after step 20, past the limit already before the restart
    folder = manager.root / "stoppedbyrestart0"
    folder.mkdir(parents=True)
    (folder / "request.json").write_text(json.dumps(asked.to_dict()))

    model, task, config = worker.prepare(asked)
    train(model, task, config, [SnapshotAt(20, folder / worker.SNAPSHOT, seconds=manager.budget.seconds + 60)])
    (folder / "state.json").write_text(json.dumps({
        "id": folder.name, "owner": "alice", "name": asked.name, "state": "stopped", "created": 1.0,
        "reason": f"{jobs.STOPPED_BY_RESTART} at step 25; the weights of the last measurement (step 20) are kept",
        "resume_step": 20}))
    again = manager.rerun(folder.name, "alice")
    status = wait_for(manager, again, lambda s: not s.active)
    assert status.state == "stopped" and status.reason.startswith("stopped at the server's time limit per run"), status
