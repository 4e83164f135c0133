"""Training jobs on a Ray cluster: two web servers (two `RayJobManager`s, standing in for two app
processes) share one data folder and one queue (a detached actor) on a local cluster of two nodes of
one CPU each. Jobs from both run on Ray and finish and each server opens the other's models; a Stop
and a Cancel pressed on the other server; a Ray worker killed mid-job fails its job with the reason
and keeps its last measurement; a local manager on the shared folder is refused."""

import os
import signal
from pathlib import Path

import pytest
from test_jobs import wait_for as jobs_wait_for

import sensviz as sv
from sensviz import budget
from sensviz.jobs import JobManager, RayJobManager
from sensviz.kept import KeptStore
from sensviz.worker import TrainRequest

pytestmark = pytest.mark.ray

CEILING_S = 600  # generous: a loaded 2-core machine starts a cluster and fresh interpreters
FAST = budget.Calibration(op_s=1e-6, flop_s=1e-12)
NODE = {"num_cpus": 1, "object_store_memory": 80 * 2**20}


def request(steps: int, every: int = 10) -> TrainRequest:
    return TrainRequest(task="first", model={"arch": "encoder", "d_model": 8, "n_layers": 1, "n_heads": 2},
                        train={"n": 4, "steps": steps, "batch_size": 32, "lr": 3e-3, "eval_interval": 20, "seed": 0},
                        measure_every=every)


def wait_for(manager, job_id: str, condition):
    return jobs_wait_for(manager, job_id, condition, ceiling=CEILING_S)


def worker_of(folder: Path) -> tuple[int, int]:
    """The pid of the training process working in `folder` and of its parent (the Ray worker)."""
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(folder) in (entry / "cmdline").read_bytes().decode(errors="replace"):
                return int(entry.name), int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
    raise AssertionError(f"no process works in {folder}")


@pytest.fixture
def cluster(ray, tmp_path):
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    try:
        cluster.add_node(**NODE)
        ray.init(address=cluster.address, log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_two_servers_share_one_queue_on_ray(cluster, tmp_path):
    data = tmp_path / "data"  # the shared SENSVIZ_DATA_DIR
    store_a, store_b = (KeptStore(data / "kept", cap=50 * 2**20) for _ in range(2))
    one = RayJobManager(data / "jobs", store_a, capacity=2, threads=1, calibration=FAST)
    try:
        two = RayJobManager(data / "jobs", store_b)
        assert two.name == one.name and two.capacity == 2

        with pytest.raises(RuntimeError, match="another server"):  # the local backend keeps its lock
            JobManager(data / "jobs", KeptStore(data / "kept", cap=50 * 2**20), calibration=FAST)

        alice = one.submit("alice", request(steps=40), "10.0.0.1")
        bob = two.submit("bob", request(steps=40), "10.0.0.2")
        done = {job: wait_for(one, job, lambda s: not s.active) for job in (alice, bob)}
        assert all(s.state == "finished" and s.kept for s in done.values()), done
        assert sv.load_checkpoint(store_b.data(done[alice].kept)).task.label == "first"  # opened on the other server
        assert sv.load_checkpoint(store_a.data(done[bob].kept)).task.label == "first"
        assert two.records(alice) and one.records(bob)

        carol = one.submit("carol", request(steps=100_000), "10.0.0.1")
        dave = two.submit("dave", request(steps=100_000), "10.0.0.2")
        for job in (carol, dave):
            wait_for(two, job, lambda s, job=job: s.state == "running" and one.records(job))
        frank = one.submit("frank", request(steps=40), "10.0.0.3")  # both nodes busy: it waits
        assert two.status(frank).state == "queued" and two.status(frank).position == 1
        with pytest.raises(Exception, match="already have a training run"):  # checked by the one queue
            two.submit("carol", request(steps=40), "10.0.0.9")
        assert not two.stop(frank, "mallory") and two.stop(frank, "frank")  # Cancel, on the other server
        assert one.status(frank).state == "cancelled"

        assert two.stop(carol, "carol")  # Stop, pressed on the other server than the one that started it
        stopped = one.status(carol)
        assert stopped.state == "stopped" and "last measurement" in stopped.reason and stopped.kept
        assert sv.load_checkpoint(store_b.data(stopped.kept)).task.label == "first"

        _, ray_worker = worker_of(data / "jobs" / dave)
        os.kill(ray_worker, signal.SIGKILL)  # the Ray worker running dave's job dies
        lost = wait_for(one, dave, lambda s: not s.active)
        assert lost.state == "failed" and "Ray worker running it was lost" in lost.error, lost
        assert "last measurement" in lost.error and lost.kept  # its last measurement is kept
    finally:
        one.end_queue()
