"""Sweeps in other processes: worker pools, Ray, and a sweep killed with its workers."""

from pathlib import Path

import pandas as pd
import pytest
from helpers.core import TINY, calls, sweep, write_spec
from helpers.server import alive, children_of
from sweep_jobs import toy_job

from sensviz import sweeps


@pytest.mark.parametrize("workers", [1, 2])
def test_local_sweep_end_to_end_and_resume(tmp_path, workers):
    spec = sweeps.load_spec(write_spec(tmp_path))
    out = tmp_path / "out"
    runs = sweeps.run_sweep(spec, out, toy_job, workers=workers)
    assert len(runs) == 4 and set(runs["status"]) == {"finished"}
    assert sorted(runs["value"]) == [40, 41, 60, 61]
    history = pd.read_parquet(out / "history.parquet")
    assert len(history) == 12 and set(history["run_id"]) == set(runs["run_id"])
    assert sorted(len(c) for c in calls(out)) == [2, 2]  # seeds grouped into jobs
    again = sweeps.run_sweep(spec, out, toy_job, workers=workers)
    assert len(calls(out)) == 2  # nothing re-ran
    assert again.sort_values("run_id")["value"].tolist() == runs.sort_values("run_id")["value"].tolist()


@pytest.mark.ray
def test_ray_executor_runs_a_tiny_sweep_on_a_local_instance(tmp_path, ray):
    spec = sweeps.load_spec(write_spec(tmp_path))
    runs = sweeps.run_sweep(spec, tmp_path / "out", toy_job, executor="ray", workers=2)
    assert len(runs) == 4 and set(runs["status"]) == {"finished"}
    assert sorted(runs["value"]) == [40, 41, 60, 61]
    assert not ray.is_initialized()  # the local instance it started is shut down


@pytest.mark.ray
def test_a_local_ray_sweep_starts_its_own_instance_beside_a_running_cluster(tmp_path, ray):
    """A cluster another process started on this machine (another test's, beside this one under
    pytest-xdist) is not joined: a sweep without an address starts its own local instance."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 80 * 2**20,
                                                           "include_dashboard": False})
    try:
        runs = sweeps.run_sweep(sweeps.load_spec(write_spec(tmp_path)), tmp_path / "out", toy_job,
                                executor="ray", workers=1)
    finally:
        cluster.shutdown()
    assert set(runs["status"]) == {"finished"}


KILL_SPEC = """
experiment = "toy"
[[grid]]
n = [1, 2]
seed = [0]
sleep = [0.1]
[[grid]]
n = [3, 4, 5, 6, 7, 8]
seed = [0]
sleep = [600.0]
"""
"""Two quick jobs, then jobs of 10 minutes: workers still there a minute after the kill were left behind."""


SWEEP_PROCESS = """
import sys
from sensviz import sweeps
from sweep_jobs import slow_job
sweeps.run_sweep(sweeps.load_spec(sys.argv[1]), sys.argv[2], slow_job, workers=2, threads=1)
"""


def _wait_for(condition, ceiling_s: float = 180.0) -> bool:
    import time

    end = time.monotonic() + ceiling_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@pytest.mark.slow
@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGKILL"])
def test_a_killed_sweep_leaves_no_worker_and_its_rerun_completes_with_the_same_results(tmp_path, signal_name):
    import os
    import signal
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    spec_path = write_spec(tmp_path, KILL_SPEC)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests")])}
    log = tmp_path / "stderr.txt"  # a file, not a pipe: a worker left behind would hold a pipe open
    with log.open("w") as stderr:
        proc = subprocess.Popen([sys.executable, "-c", SWEEP_PROCESS, str(spec_path), str(out)], env=env, stderr=stderr)
    try:
        # killed when the two quick jobs have finished and both workers are in a long one
        assert _wait_for(lambda: len(list((out / "runs").glob("*.json"))) == 2
                         and len((out / "pids.txt").read_text().split()) == 4 if (out / "pids.txt").exists() else False)
        descendants = children_of(proc.pid)
        assert len(descendants) >= 2  # two workers (and the resource tracker)
        proc.send_signal(getattr(signal, signal_name))
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = log.read_text()
    if signal_name == "SIGTERM":
        assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in stderr, stderr
    else:
        assert proc.returncode == -signal.SIGKILL
    left = [pid for pid in descendants if alive(pid)] if not _wait_for(
        lambda: not any(alive(pid) for pid in descendants), ceiling_s=60) else []
    for pid in left:  # a failing test leaves nothing running either
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind by the killed sweep: {left}"
    finished = {p.stem for p in (out / "runs").glob("*.json")}
    calls_before = len(calls(out))
    assert len(finished) == 2 and calls_before == 2

    if (out / "runs.parquet").exists():  # the tables agree with each other
        runs, history, _ = sweeps.read_results(out)
        assert set(history["run_id"]) <= set(runs["run_id"])

    spec = sweeps.load_spec(spec_path)
    rerun = sweeps.run_sweep(spec, out, toy_job, workers=2)
    assert len(calls(out)) - calls_before == 8 - len(finished)  # the finished runs were not run again
    clean = sweeps.run_sweep(spec, tmp_path / "clean", toy_job)
    key = ["run_id", "n", "seed", "status", "value"]
    assert rerun.sort_values("run_id")[key].reset_index(drop=True).equals(clean.sort_values("run_id")[key].reset_index(drop=True))
    _, history, _ = sweeps.read_results(out)
    _, clean_history, _ = sweeps.read_results(tmp_path / "clean")
    assert history.sort_values(["run_id", "step"]).reset_index(drop=True).equals(
        clean_history.sort_values(["run_id", "step"]).reset_index(drop=True))


@pytest.mark.ray
def test_ray_executor_runs_the_experiments(tmp_path, ray):
    runs = [{**TINY, "task": "first", "seed": s} for s in (0, 1)] + [{**TINY, "task": "parity", "n": 5}]
    table, _ = sweep("length_scaling", runs, tmp_path, executor="ray", workers=2)
    assert len(table) == 3 and set(table["status"]) == {"finished"}
    assert all((tmp_path / "checkpoints" / f"{rid}.safetensors").is_file() for rid in table.index)
    assert not ray.is_initialized()
