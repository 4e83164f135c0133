"""A class pressing Train at once, its runs on the local executor vs on Ray, on this machine; and a
class of 200 on a cluster.

    python benchmarks/executor.py --members 30

`--members` websocket members (`benchmarks/class_load.py`'s honest students, each from its own
loopback address: the queue sees one address per member) open the Train page of a fresh server and
press Train (the preset PARITY n = 8 run) at once, then open the Sensitivity, Landscape and Lab pages
while their runs wait or train, and wait for their runs to end. First on a server whose jobs run in
local processes (`SENSVIZ_MAX_JOBS=--capacity`, one torch thread each), then on a server pointed at a
local Ray cluster (`ray.cluster_utils`) of `--capacity` nodes of one CPU each, on this machine
(`SENSVIZ_RAY_ADDRESS`: the queue is the detached actor, each run a Ray task). Prints, per backend,
the time until every run has ended, the members' page times meanwhile (median, slowest), the
server's peak memory and CPU seconds (its own; its child processes', with the runs on the local
backend). Both use the same cores, but not alike: Ray starts its workers at nice +15 (its
`worker_niceness`) and with OMP_NUM_THREADS=1, so the pages get ahead of the runs, and its queue
runs in a process of its own, not in the web server's; on a shared machine run both orders
(`--ray-first`).

Then it trains the preset once in this process on one torch thread and, from that run's CPU time
plus the per-job cost measured on Ray, prints the time for 200 students on k nodes of 16 cores (one
run per core, each on one thread). A GPU node changes the table only for runs that train on cuda
(`training_task_options` gives each such run one GPU): then a node runs one at a time per GPU, each
at the GPU's speed; the preset's tiny model (d_model 32, batch 256) would hardly use one. Not
measured here (no GPU). Not run by .ci/run (minutes of training).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from class_load import Outcome, _warm, run_class  # noqa: E402
from load import ROOT, served  # noqa: E402

sys.path.insert(0, str(ROOT))
from server import worker  # noqa: E402
from server.jobs import RAY_ADDRESS  # noqa: E402

PRESET = worker.TrainRequest(task="parity", model={"arch": "encoder", "d_model": 32, "n_layers": 2, "n_heads": 2},
                             train={"n": 8, "batch_size": 256, "lr": 3e-3, "steps": 3000, "seed": 0, "eval_interval": 25,
                                    "target_accuracy": 1.0, "target_loss": 0.001},  # the Train page's preset
                             measure_every=50)


@contextlib.contextmanager
def ray_cluster(nodes: int):
    """A local Ray cluster of `nodes` nodes of one CPU each (on this machine); yields its address."""
    from ray.cluster_utils import Cluster

    node = {"num_cpus": 1, "object_store_memory": 80 * 2**20}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    try:
        for _ in range(nodes - 1):
            cluster.add_node(**node)
        yield cluster.address
    finally:
        cluster.shutdown()


def server_cpu_s(pid: int) -> tuple[float, float]:
    """CPU seconds of the server process itself, and of its child processes with theirs (the local
    backend's launcher and the runs it forked, which it has reaped; its calibration)."""
    own, ended = _cpu_s(pid)
    live = [int(child) for task in Path(f"/proc/{pid}/task").iterdir() for child in (task / "children").read_text().split()]
    return own, ended + sum(sum(_cpu_s(child)) for child in live)


def _cpu_s(pid: int) -> tuple[float, float]:
    """A process's CPU seconds and those of its ended (reaped) children."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) / os.sysconf("SC_CLK_TCK") for x in fields[11:15])
    return utime + stime, cutime + cstime


def measure(backend: str, members: int, capacity: int) -> tuple[Outcome, float, tuple[float, float]]:
    """A class of `members` on a fresh server and data folder whose jobs run on `backend`; what the
    members saw, the seconds from the first page to the end of the last run and `server_cpu_s`."""
    with tempfile.TemporaryDirectory(prefix="sensviz-executor-") as tmp, contextlib.ExitStack() as stack:
        env = {"SENSVIZ_DATA_DIR": tmp, "SENSVIZ_MAX_JOBS": str(capacity)}
        if backend == "ray":
            env[RAY_ADDRESS] = stack.enter_context(ray_cluster(capacity))
        base, proc = stack.enter_context(served(ROOT / "artifacts" / f"streamlit-executor-{backend}.log", env=env))
        asyncio.run(_warm(base))
        start = time.perf_counter()
        out = asyncio.run(run_class(base, proc.pid, Path(tmp), members, 0, 1))
        return out, time.perf_counter() - start, server_cpu_s(proc.pid)


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
    parser.add_argument("--members", type=int, default=30, help="members pressing Train at once (at most 250)")
    parser.add_argument("--capacity", type=int, default=2, help="runs at once (Ray: nodes of one CPU)")
    parser.add_argument("--students", type=int, default=200)
    parser.add_argument("--ray-first", action="store_true", help="run Ray first (on a busy machine the order matters)")
    args = parser.parse_args()
    rows = {}
    for backend in ("local", "ray")[:: -1 if args.ray_first else 1]:
        rows[backend] = measure(backend, args.members, args.capacity)
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())  # the machine is shared: how busy it was
        print(f"{backend}: {rows[backend][1]:.1f} s, load average after it {load}", flush=True)
    print(f"\n{args.members} members press Train (PARITY n = 8 preset) at once, {args.capacity} runs at once, "
          f"on this machine ({os.cpu_count()} cores)\n")
    print("| executor | all runs ended (s) | last press-to-end (s) | pages | median page (s) | slowest page (s) "
          "| page errors | server peak MiB | server CPU s (own / its children) | ended |\n"
          "|---|---|---|---|---|---|---|---|---|---|")
    for backend, (out, wall, cpu) in rows.items():
        pages = sorted(out.pages)
        ended = {s: out.states.count(s) for s in sorted(set(out.states))}
        print(f"| {backend} | {wall:.1f} | {max(out.trained, default=float('nan')):.1f} | {len(pages)} "
              f"| {pages[len(pages) // 2]:.2f} | {pages[-1]:.2f} | {out.page_errors} | {out.peak_mib:.0f} "
              f"| {cpu[0]:.0f} / {cpu[1]:.0f} | {ended} |")
    local_s, ray_s = (rows[name][1] for name in ("local", "ray"))
    overhead = (ray_s - local_s) * args.capacity / args.members  # extra seconds of a run slot per job
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
