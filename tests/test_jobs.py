"""Training jobs: their own processes, a cap and a queue, one job per owner, Stop keeps the last
measurement, workers that outlive no server, jobs of an earlier server run recovered."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sensviz as sv  # noqa: E402
from sensviz.jobs import JobManager, JobRefused  # noqa: E402
from sensviz.kept import KeptStore  # noqa: E402
from sensviz.worker import TrainRequest  # noqa: E402

CEILING_S = 300  # generous: the machine is shared


def request(steps: int = 200, n: int = 4, every: int = 50, **train) -> TrainRequest:
    return TrainRequest(task="first", model={"arch": "encoder", "d_model": 8, "n_layers": 1, "n_heads": 2},
                        train={"n": n, "steps": steps, "batch_size": 64, "lr": 3e-3, "eval_interval": 50, "seed": 0,
                               **train}, measure_every=every)


def wait_for(manager: JobManager, job_id: str, condition, ceiling: float = CEILING_S):
    deadline = time.monotonic() + ceiling
    while True:
        status = manager.status(job_id)
        if condition(status):
            return status
        assert time.monotonic() < deadline, f"gave up waiting; last status {status}"
        time.sleep(0.2)


@pytest.fixture
def make_manager(tmp_path):
    made = []

    def make(**kwargs) -> JobManager:
        store = KeptStore(tmp_path / "kept", cap=50 * 2**20)
        manager = JobManager(tmp_path / "jobs", store, **kwargs)
        made.append(manager)
        return manager

    yield make
    for manager in made:
        manager.close()


def test_a_job_trains_in_its_own_process_and_its_model_is_kept(make_manager):
    manager = make_manager(capacity=1, threads=1)
    job_id = manager.submit("alice", request(steps=150))
    status = wait_for(manager, job_id, lambda s: not s.active)
    assert status.state == "finished" and status.reason == "completed" and status.steps == 150
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
    manager = make_manager(capacity=1)
    with pytest.raises(ValueError, match="n must be at most 24 \\(limit 'this server's'\\)"):
        manager.submit("alice", request(n=30))
    with pytest.raises(ValueError, match="steps must be at most 1,000,000 \\(limit 'train_steps'\\)"):
        manager.submit("alice", request(steps=10**9))
    with pytest.raises(ValueError, match="only for n=2"):
        manager.submit("alice", TrainRequest("table:0110", request().model, request().train))
    assert manager.active("alice") is None and not manager.queue


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

    assert manager.stop(long, "alice")
    stopped = manager.status(long)
    assert stopped.state == "stopped" and "weights of the last measurement" in stopped.reason
    last = manager.records(long)[-1]["step"]
    assert stopped.steps == last and last >= 25
    ck = sv.load_checkpoint(manager.store.data(stopped.kept))
    assert ck.metadata["training"]["steps"] == last  # the kept weights are those of the last measurement

    done = wait_for(manager, short, lambda s: not s.active)  # the queued job ran once there was room
    assert done.state == "finished" and done.steps == 100


PARENT = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {root!r})
    from pathlib import Path
    from sensviz.jobs import JobManager
    from sensviz.kept import KeptStore
    from sensviz.worker import TrainRequest
    if __name__ == "__main__":
        manager = JobManager(Path({root_jobs!r}), KeptStore(Path({root_kept!r}), 2**26), capacity=1, threads=1)
        job = manager.submit("alice", TrainRequest("first", {{"arch": "encoder", "d_model": 8, "n_layers": 1, "n_heads": 2}},
                                                   {{"n": 4, "steps": 100000, "batch_size": 64}}, 1000))
        while manager.status(job).state != "running":
            time.sleep(0.1)
        print(manager.jobs[job].process.pid, flush=True)
        time.sleep(600)
    """
)


def test_a_worker_exits_when_the_server_dies(tmp_path):
    script = tmp_path / "server.py"
    script.write_text(PARENT.format(root=str(ROOT), root_jobs=str(tmp_path / "jobs"), root_kept=str(tmp_path / "kept")))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        worker_pid = int(parent.stdout.readline())
        os.kill(worker_pid, 0)  # the worker runs
    finally:
        parent.send_signal(signal.SIGKILL)  # the server dies without cleaning up
        parent.wait()
    deadline = time.monotonic() + CEILING_S
    while _alive(worker_pid):
        assert time.monotonic() < deadline, "the worker outlived its server"
        time.sleep(0.2)


def _alive(pid: int) -> bool:
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
    manager = make_manager(capacity=1)
    recovered = manager.status(running.name)
    assert recovered.state == "stopped" and "step 75" in recovered.reason
    assert sv.load_checkpoint(manager.store.data(recovered.kept)).task.label == "first"
    assert manager.status(queued.name).state == "cancelled"
    assert manager.status("no-such-job-id") is None and manager.status("../../etc") is None


def test_a_second_server_on_the_same_data_folder_is_refused(make_manager):
    make_manager(capacity=1)
    with pytest.raises(RuntimeError, match="another server runs the training jobs"):
        make_manager(capacity=1)


def test_no_failure_of_one_job_stops_the_manager(make_manager, monkeypatch):
    """Each failure while collecting a job fails that job with one line; the next user's job runs."""
    from sensviz import jobs as jobs_module
    from sensviz import kept as kept_module

    manager = make_manager(capacity=1, threads=1)
    store = manager.store

    def run(owner: str, **train) -> sv.jobs.JobStatus:
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

    done = run("frank")  # and the next user's job runs to completion
    assert done.state == "finished" and sv.load_checkpoint(store.data(done.kept)).task.label == "first"
    assert manager._thread.is_alive()


def test_job_folders_count_against_their_owner_and_only_their_own_are_pruned(make_manager, tmp_path):
    from sensviz.jobs import MAX_FOLDERS

    for owner, count in (("alice", MAX_FOLDERS + 5), ("bob", 3)):
        for i in range(count):
            folder = tmp_path / "jobs" / f"{owner}job{i:010d}"
            folder.mkdir(parents=True)
            (folder / "state.json").write_text(json.dumps({"id": folder.name, "owner": owner, "name": "m",
                                                           "state": "finished", "created": float(i)}))
            (folder / "records.jsonl").write_text("x" * 1000)
            (folder / ".records.jsonl.0123abcd.tmp").write_text("y" * 500)  # left by a killed worker
    manager = make_manager(capacity=1)
    folders = sorted(p.name for p in (tmp_path / "jobs").iterdir() if p.is_dir())
    assert [f for f in folders if f.startswith("bob")] == [f"bobjob{i:010d}" for i in range(3)]
    assert [f for f in folders if f.startswith("alice")] == [f"alicejob{i:010d}" for i in range(5, MAX_FOLDERS + 5)]
    assert not list((tmp_path / "jobs").glob("*/*.tmp"))
    assert manager.folder_bytes("bob") == 3 * (1000 + len((tmp_path / "jobs" / "bobjob0000000000" / "state.json").read_bytes()))
    assert manager.store.usage("bob") == manager.folder_bytes("bob")  # counted in the owner's quota
    manager.store.quota = manager.folder_bytes("alice") + 100
    with pytest.raises(sv.kept.KeptRefused, match="training records included"):
        manager.store.keep("upload", "x.safetensors", b"z" * 200, "alice")


def test_a_table_task_at_the_largest_n_trains_is_kept_and_loads(make_manager):
    import torch

    from sensviz.worker import MAX_LIVE_N

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
