"""Training jobs on a Ray cluster, tested as deployed: a local cluster of two nodes of one CPU each and
two app processes (`tests/ray_app.py`, each a web server's job manager), every node and app process
with its own HOME and TMPDIR, sharing only the data folder ($SENSVIZ_DATA_DIR) and the cluster's
address. Jobs from both apps run on Ray and finish and each app opens the other's models; a Stop and
a Cancel pressed on the other app; a Ray worker killed mid-job fails its job with the reason and
keeps its last measurement; a local manager on the shared folder is refused; the queue's actor
killed is started again by the next call, and the job records on the folder survive it."""

import inspect
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import signal_handlers_restored
from helpers.server import wait_for as jobs_wait_for

from sensviz.executors import training_task_options
from server.jobs import RAY_ADDRESS, JobManager, JobStatus, RayJobManager
from server.worker import TrainRequest

ROOT = Path(__file__).resolve().parents[2]
CEILING_S = 600  # generous: a loaded 2-core machine starts a cluster and fresh interpreters
FAST = {"op_s": 1e-6, "flop_s": 1e-12}  # a fixed calibration (`budget.Calibration`): no measuring here
OPTIONS = {"capacity": 2, "threads": 1, "calibration": FAST}  # every app the same: any of them may start the queue
NODE = {"num_cpus": 1, "object_store_memory": 80 * 2**20}
pytestmark = pytest.mark.xdist_group("ray_cluster")  # one cluster for the module's tests under `pytest -n`


def request(steps: int, every: int = 10) -> TrainRequest:
    return TrainRequest(task="first", model={"arch": "encoder", "d_model": 8, "n_layers": 1, "n_heads": 2},
                        train={"n": 4, "steps": steps, "batch_size": 32, "lr": 3e-3, "eval_interval": 20, "seed": 0},
                        measure_every=every)


def own_home(folder: Path) -> dict[str, str]:
    """HOME and TMPDIR of one machine (a node or an app process), made under `folder`."""
    (folder / "tmp").mkdir(parents=True)
    return {"HOME": str(folder), "TMPDIR": str(folder / "tmp")}


class App:
    """An app process (`tests/ray_app.py`) with its own HOME and TMPDIR, on the data folder `data`, on
    the Ray cluster at `address` (None: local processes); its calls answer like a job manager's."""

    def __init__(self, folder: Path, data: Path, address: str | None, options: dict | None = None):
        env = {k: v for k, v in os.environ.items() if k != RAY_ADDRESS}
        env.update(own_home(folder), SENSVIZ_DATA_DIR=str(data), **({RAY_ADDRESS: address} if address else {}))
        self.log = folder / "app.log"
        with open(self.log, "w") as log:
            self.process = subprocess.Popen([sys.executable, str(ROOT / "tests" / "ray_app.py"), json.dumps(options or {})],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                            env=env, cwd=folder)
        self._ready = None

    def ready(self) -> dict:
        """The app's first line: {"ready": ...} or {"error": ...}."""
        if self._ready is None:
            self._ready = self._read()
        return self._ready

    def _read(self) -> dict:
        line = self.process.stdout.readline()
        assert line, f"the app process ended: {self.log.read_text()[-3000:]}"
        return json.loads(line)

    def __call__(self, *command):
        assert "ready" in self.ready(), self.ready()
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        reply = self._read()
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["ok"]

    def submit(self, owner: str, train: TrainRequest, address: str) -> str:
        return self("submit", owner, train.to_dict(), address)

    def status(self, job: str) -> JobStatus | None:
        found = self("status", job)
        return JobStatus(**found) if found is not None else None

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def wait_for(app: App, job_id: str, condition):
    return jobs_wait_for(app, job_id, condition, ceiling=CEILING_S)


def processes(text: str, home: Path | None = None) -> list[tuple[int, int]]:
    """(pid, parent pid) of each process whose command line has `text` (and, given `home`, whose HOME lies
    under it: one cluster's processes, not another test's Ray on the same machine)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if not (entry.name.isdigit() and text in (entry / "cmdline").read_bytes().decode(errors="replace")):
                continue
            if home is not None and not any(v.startswith(f"HOME={home}".encode()) for v in
                                            (entry / "environ").read_bytes().split(b"\0")):
                continue
            found.append((int(entry.name), int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])))
        except OSError:
            continue
    return found


@contextmanager
def cluster_token():
    """A token of the test's cluster's own (Ray's token authentication, on by default) in $RAY_AUTH_TOKEN
    of this process, so of every node and app process started from it: with a HOME of its own, a
    machine does not find the token that `ray.init` saved in ~/.ray (a department gives each machine
    its cluster's token)."""
    from ray._private.authentication_test_utils import reset_auth_token_state  # Ray's own: drops the cached token

    before = os.environ.get("RAY_AUTH_TOKEN")
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    reset_auth_token_state()
    try:
        yield
    finally:
        os.environ.pop("RAY_AUTH_TOKEN")
        if before is not None:
            os.environ["RAY_AUTH_TOKEN"] = before
        reset_auth_token_state()


@pytest.fixture(scope="module")
def cluster(ray_module, tmp_path_factory):
    """A local Ray cluster of two nodes of one CPU each, each node with its own HOME and TMPDIR
    (its raylet's environment, which its workers inherit)."""
    from ray.cluster_utils import Cluster

    nodes = tmp_path_factory.mktemp("nodes")
    with signal_handlers_restored(), cluster_token():
        cluster = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False,
                                                                "env_vars": own_home(nodes / "head")})
        try:
            cluster.add_node(**NODE, env_vars=own_home(nodes / "second"))
            cluster.homes = nodes  # every node's HOME is under it, so its workers' too
            yield cluster
        finally:
            cluster.shutdown()


@pytest.fixture
def apps(cluster, tmp_path):
    """Start app processes on this test's shared data folder (`tmp_path / "data"`); all are ended after it."""
    made = []

    def start(name: str, address: str | None = cluster.address) -> App:
        made.append(App(tmp_path / name, tmp_path / "data", address, OPTIONS))
        return made[-1]

    yield start
    for app in made:
        app.close()


@pytest.mark.ray
def test_two_app_processes_share_one_queue_on_ray(apps, tmp_path):
    one, two = apps("one"), apps("two")
    try:
        assert one.ready()["ready"] == two.ready()["ready"] == {"capacity": 2, "kind": "RayJobManager"}
        local = apps("local", address=None)  # the local backend on the shared folder: refused (read below)

        alice = one.submit("alice", request(steps=40), "10.0.0.1")
        bob = two.submit("bob", request(steps=40), "10.0.0.2")
        done = {job: wait_for(one, job, lambda s: not s.active) for job in (alice, bob)}
        assert all(s.state == "finished" and s.kept for s in done.values()), done
        assert two("open", done[alice].kept) == "first" and one("open", done[bob].kept) == "first"  # the other's models
        assert two("records", alice) and one("records", bob)
        assert "another server runs the training jobs" in local.ready()["error"]

        carol = one.submit("carol", request(steps=100_000), "10.0.0.1")
        dave = two.submit("dave", request(steps=100_000), "10.0.0.2")
        for job in (carol, dave):
            wait_for(two, job, lambda s, job=job: s.state == "running" and one("records", job))
        frank = one.submit("frank", request(steps=40), "10.0.0.3")  # both nodes busy: it waits
        assert two.status(frank).state == "queued" and two.status(frank).position == 1
        with pytest.raises(RuntimeError, match="already have a training run"):  # checked by the one queue
            two.submit("carol", request(steps=40), "10.0.0.9")
        assert not two("stop", frank, "mallory") and two("stop", frank, "frank")  # Cancel, on the other app
        assert one.status(frank).state == "cancelled"

        assert two("stop", carol, "carol")  # Stop, pressed on the other app than the one that started it
        stopped = one.status(carol)
        assert stopped.state == "stopped" and "last measurement" in stopped.reason and stopped.kept
        assert two("open", stopped.kept) == "first"

        [(_, ray_worker)] = processes(str(tmp_path / "data" / "jobs" / dave))
        os.kill(ray_worker, signal.SIGKILL)  # the Ray worker running dave's job dies
        lost = wait_for(one, dave, lambda s: not s.active)
        assert lost.state == "failed" and "Ray worker running it was lost" in lost.error, lost
        assert "last measurement" in lost.error and lost.kept  # its last measurement is kept
    finally:
        one("end_queue")


@pytest.mark.ray
def test_a_killed_queue_is_started_again_and_the_records_survive(apps, cluster, tmp_path):
    one, two = apps("one"), apps("two")
    try:
        erin = two.submit("erin", request(steps=100_000), "10.0.0.2")
        wait_for(one, erin, lambda s: s.state == "running" and one("records", erin))
        [(queue, _)] = processes("ray::_Queue", home=cluster.homes)  # not another test's cluster's queue
        os.kill(queue, signal.SIGKILL)  # the queue's actor dies, with a job running

        bob = one.submit("bob", request(steps=40), "10.0.0.3")  # the next call starts a new queue, which runs it
        [(again, _)] = processes("ray::_Queue", home=cluster.homes)
        assert again != queue
        after = two.status(erin)  # the other app's next call finds the new queue: erin's record survived
        assert after.state == "stopped" and "server stopped during this run" in after.reason and after.kept, after
        assert one("open", after.kept) == "first" and one("records", erin)
        ended = time.monotonic() + CEILING_S  # its task ended with its owner, the old queue: nothing trains on
        while processes(str(tmp_path / "data" / "jobs" / erin)):
            assert time.monotonic() < ended, "the job's worker outlived the queue that started it"
            time.sleep(0.5)
        assert wait_for(two, bob, lambda s: not s.active).state == "finished"
    finally:
        one("end_queue")


@pytest.mark.parametrize(("device", "cluster_gpus", "gpus"), [
    ("cuda", 1, 1), ("cuda:0", 4, 1), ("cuda", 0, 0), (None, 2, 0), ("cpu", 1, 0), ("cudax", 1, 0)])
def test_a_training_task_asks_for_a_gpu_only_when_it_trains_on_cuda_and_the_cluster_has_one(device, cluster_gpus, gpus):
    assert training_task_options(2, device, cluster_gpus) == {"num_cpus": 2, "num_gpus": gpus, "max_retries": 0}


@pytest.mark.ray
@pytest.mark.server
def test_a_server_on_ray_ends_on_sigterm_with_one_line(cluster, tmp_path):
    """Connecting to Ray installs Ray's own SIGTERM handler (a traceback on exit); the server's start puts its
    own back (`ui.serve.stop_now`): SIGTERM ends it at once, one line in its log."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import load

    log = tmp_path / "served.log"
    env = {**own_home(tmp_path / "server"), "SENSVIZ_DATA_DIR": str(tmp_path / "data"), RAY_ADDRESS: cluster.address}
    with load.served(log, env=env, timeout=CEILING_S) as (_, process):
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    text = log.read_text()
    assert process.returncode == 0 and "SIGTERM received, the server stops now" in text and "Traceback" not in text, text[-3000:]


def test_the_ray_queue_answers_every_call_a_page_makes_of_a_local_one():
    """The pages call one manager's methods whichever queue serves them: RayJobManager has each public method of
    JobManager (less `tick`, the local manager's own loop), with the same parameters."""
    local = {name: f for name, f in vars(JobManager).items() if callable(f) and not name.startswith("_")}
    remote = vars(RayJobManager)
    assert set(local) - {"tick"} <= set(remote), set(local) - set(remote)
    for name in set(local) - {"tick", "close"}:
        assert inspect.signature(local[name]) == inspect.signature(remote[name]), name
