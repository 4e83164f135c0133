"""Training jobs on the local executor vs on Ray, on this machine; and a class of 200 on a cluster.

    python benchmarks/executor.py --jobs 30

submits `--jobs` runs of the Train page's preset (PARITY n = 8), one per student (owner and client
address of its own, as if all pressed Train at once), first to the local job manager, then to a
`RayJobManager` on a local Ray cluster of `--capacity` nodes of one CPU each (`ray.cluster_utils`),
both running `--capacity` jobs at once, and prints the time until every run has ended and the
median and slowest time from pressing Train to a run's end. Ray cannot be faster here (the same
cores); the difference is its cost. Then it trains the preset once in this process on one torch
thread and, from that run's CPU time plus the per-job cost measured on Ray, prints the time for
200 students on k nodes of 16 cores (one run per core, each on one thread). The budget check uses
a fixed calibration (this is not about the estimate). Not run by .ci/run (minutes of training).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sensviz import budget, worker  # noqa: E402
from sensviz.jobs import JobManager, RayJobManager  # noqa: E402
from sensviz.kept import KeptStore  # noqa: E402

CALIBRATION = budget.Calibration(op_s=1e-6, flop_s=1e-12)
PRESET = worker.TrainRequest(task="parity", model={"arch": "encoder", "d_model": 32, "n_layers": 2, "n_heads": 2},
                             train={"n": 8, "batch_size": 256, "lr": 3e-3, "steps": 3000, "seed": 0, "eval_interval": 25,
                                    "target_accuracy": 1.0, "target_loss": 0.001},  # the form's early stopping
                             measure_every=50)
CEILING_S = 3600


def run_class(manager, jobs: int) -> dict:
    """Submit `jobs` runs at once (one owner and address each); times until each and all have ended."""
    start = time.monotonic()
    ids = [manager.submit(f"student{i}", PRESET, f"127.0.0.{i + 2}") for i in range(jobs)]
    ended: dict[str, float] = {}
    states: dict[str, str] = {}
    while len(ended) < jobs:
        assert time.monotonic() - start < CEILING_S, "gave up waiting for the runs"
        for job in ids:
            if job not in ended:
                status = manager.status(job)
                if not status.active:
                    ended[job], states[job] = time.monotonic() - start, status.state
        time.sleep(0.2)
    times = sorted(ended.values())
    return {"all_s": times[-1], "median_s": statistics.median(times), "finished": list(states.values()).count("finished")}


def local(jobs: int, capacity: int, data: Path) -> dict:
    manager = JobManager(data / "jobs", KeptStore(data / "kept", 2**30), capacity=capacity, threads=1,
                         calibration=CALIBRATION)
    try:
        return run_class(manager, jobs)
    finally:
        manager.close()


def on_ray(jobs: int, capacity: int, data: Path) -> dict:
    import ray
    from ray.cluster_utils import Cluster

    node = {"num_cpus": 1, "object_store_memory": 80 * 2**20}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    manager = None
    try:
        for _ in range(capacity - 1):
            cluster.add_node(**node)
        ray.init(address=cluster.address, log_to_driver=False)
        manager = RayJobManager(data / "jobs", KeptStore(data / "kept", 2**30), capacity=capacity, threads=1,
                                calibration=CALIBRATION)
        return run_class(manager, jobs)
    finally:
        if manager is not None:
            manager.end_queue()
        ray.shutdown()
        cluster.shutdown()


def one_run_cpu_s() -> float:
    """CPU seconds of one preset run (with its live measurements) on one torch thread, in this process."""
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "request.json").write_text(json.dumps(PRESET.to_dict()))
        start = time.process_time()
        worker.run(folder, threads=1, parent_pid=os.getppid())
        cpu = time.process_time() - start
        outcome = json.loads((Path(folder) / "outcome.json").read_text())
        assert outcome["state"] == "finished", outcome
        return cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--capacity", type=int, default=2, help="runs at once (Ray: nodes of one CPU)")
    parser.add_argument("--students", type=int, default=200)
    parser.add_argument("--ray-first", action="store_true", help="run Ray first (on a busy machine the order matters)")
    args = parser.parse_args()
    rows = []
    for name, backend in (("local", local), ("ray", on_ray))[:: -1 if args.ray_first else 1]:
        with tempfile.TemporaryDirectory() as data:
            found = backend(args.jobs, args.capacity, Path(data))
        rows.append((name, found))
        print(f"{name}: {found}", flush=True)
    print(f"\n{args.jobs} runs of the PARITY n = 8 preset, {args.capacity} at once, on this machine\n")
    print("| executor | all ended (s) | median press-to-end (s) | finished |\n|---|---|---|---|")
    for name, found in rows:
        print(f"| {name} | {found['all_s']:.1f} | {found['median_s']:.1f} | {found['finished']}/{args.jobs} |")
    local_s, ray_s = (dict(rows)[name]["all_s"] for name in ("local", "ray"))
    overhead = (ray_s - local_s) * args.capacity / args.jobs  # extra seconds of a run slot per job
    print(f"\nRay's cost over local: {ray_s - local_s:+.1f} s in all ({ray_s / local_s:.2f}x), "
          f"{overhead:+.2f} s per job and run slot")
    cpu = one_run_cpu_s()
    per_run = cpu + max(0.0, overhead)
    print(f"\none run at one thread: {cpu:.1f} CPU s; with Ray's per-job cost: {per_run:.1f} s\n")
    print(f"| nodes of 16 cores | runs at once | waves | {args.students} students done (s) |\n|---|---|---|---|")
    for k in (1, 2, 4, 8, 13):
        waves = math.ceil(args.students / (16 * k))
        print(f"| {k} | {16 * k} | {waves} | {waves * per_run:.0f} |")


if __name__ == "__main__":
    main()
