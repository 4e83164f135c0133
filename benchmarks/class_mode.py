"""A class of websocket members (`benchmarks/load.py`) doing the length-scaling assignment together.

On a fresh server and data folder: an instructor's class is created and the assignment started (the
library's `ClassStore`, on the server's own data folder); `--members` members join it (each with an
owner id signed by the server's secret, in its cookie, from its own loopback address, so the queue
sees one address per member), open `/train?class=<code>` (the form arrives filled with their cell)
and press Train at once. While the runs go on, every member browses: the Class page (its gallery and
chart collect the finished runs) and the Sensitivity page, one after the other, until every run is in
the class's table. Prints the time from the presses until every run is in the class chart, the
members' page times while they wait (median, 90th percentile, slowest), how the runs ended, the
verdict on the class's table (the table is kept in artifacts/class-mode-runs.csv) and the server's
peak memory; then the work the runs did: the FLOPs of one
training step at each n (forward and backward, counted by torch's `FlopCounterMode`; measurements and
evaluations not counted), those of one run of each cell kind, the class's total (each run's steps as
trained) and the share of this machine's measured matmul rate (float32, every core) that total over the
wall time achieves.

    python benchmarks/class_mode.py --members 30
    python benchmarks/class_mode.py --members 30 --capacity 2 [--ray]   # two runs at once, local or on Ray
    python benchmarks/class_mode.py --step-times   # the plan's CPU seconds per step of one class run, no server

Not run by .ci/run (the assignment's 30 runs train for about 12 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from class_load import address, watch_memory  # noqa: E402
from executor import ray_cluster  # noqa: E402
from load import ROOT, Session, served  # noqa: E402

sys.path.insert(0, str(ROOT))
import pandas as pd  # noqa: E402

from server import assignments, owners  # noqa: E402
from server.classes import ClassStore  # noqa: E402
from server.jobs import RAY_ADDRESS  # noqa: E402

CEILING_S = 3600


@dataclass
class Outcome:
    pages: list[float] = field(default_factory=list)  # seconds per page run while the class trains
    page_errors: int = 0
    pressed: list[str] = field(default_factory=list)  # per member: the job's id, or what the page said instead
    all_in_s: float = float("nan")  # from the presses until every run is in the class's table
    peak_mib: float = 0.0
    runs: pd.DataFrame | None = None


def class_rows(store: ClassStore, code: str) -> int:
    path = store.sweep_folder(code) / "runs.parquet"
    try:
        return len(pd.read_parquet(path)) if path.is_file() else 0
    except (OSError, ValueError):  # replaced while read
        return 0


async def member(base: str, k: int, cookie: str, code: str, out: Outcome, go: asyncio.Event, done: asyncio.Event) -> None:
    cookies = {"sensviz_owner": cookie}
    async with Session(base, cookies=cookies, local_addr=(address(k), 0)) as session:
        opened = await session.open(f"train?class={code}")
        await go.wait()
        if "Train" not in opened.buttons:
            out.pressed.append("no Train button: " + " / ".join(opened.texts)[:200])
            return
        pressed = await session.press(opened.buttons["Train"])
        out.pressed.append("job" if "job=" in pressed.query_string else "refused: " + " / ".join(pressed.texts)[:200])
    pages = [f"class?class={code}", f"sensitivity?model=encoder-parity-n8&class={code}"]
    i = 0
    while not done.is_set():
        async with Session(base, cookies=cookies, local_addr=(address(k), 0)) as session:
            run = await session.open(pages[i % len(pages)])
        out.pages.append(run.seconds)
        out.page_errors += not run.ok
        i += 1
        await asyncio.sleep(2.0)


async def run_class(base: str, pid: int, data: Path, members: int) -> Outcome:
    out = Outcome()
    secret = owners.owner_secret(data)
    store = ClassStore(data / "classes", secret)
    found = store.create("benchmark class", "instructor")
    store.start_assignment(found.code, "instructor", assignments.LENGTH_SCALING.name)
    cookies = [owners.mint_owner(secret) for _ in range(members)]
    for k, cookie in enumerate(cookies):
        store.join(found.code, f"member {k + 1}", cookie)
    go, done, stop_watch = asyncio.Event(), asyncio.Event(), asyncio.Event()
    watcher = asyncio.create_task(watch_memory(pid, out, stop_watch))
    tasks = [asyncio.create_task(member(base, k, c, found.code, out, go, done)) for k, c in enumerate(cookies)]
    await asyncio.sleep(5.0)  # every member has the filled-in form open
    start = time.perf_counter()
    go.set()
    while time.perf_counter() - start < CEILING_S:
        jobs = store.get(found.code).jobs
        if len(out.pressed) == members and class_rows(store, found.code) >= sum(p == "job" for p in out.pressed) \
                and all(e["recorded"] for e in jobs.values()):
            out.all_in_s = time.perf_counter() - start
            break
        await asyncio.sleep(2.0)
    done.set()
    await asyncio.gather(*tasks)
    stop_watch.set()
    await watcher
    path = store.sweep_folder(found.code) / "runs.parquet"
    out.runs = pd.read_parquet(path) if path.is_file() else pd.DataFrame()
    return out


def step_flops(a: assignments.Assignment, n: int) -> float:
    """FLOPs of one training step of the assignment's model at length n: forward and backward of a batch
    (torch's `FlopCounterMode`: matrix products, the work that bounds the runs from below)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    import sensviz as sv
    from sensviz.losses import loss_value

    s = a.settings
    model = sv.build_model(s["arch"], d_model=s["d_model"], n_layers=s["n_layers"], n_heads=s["n_heads"], max_len=n, seed=0)
    bits = torch.randint(0, 2, (s["batch_size"], n), generator=torch.Generator().manual_seed(0))
    with FlopCounterMode(display=False) as counter:
        loss_value(model.training_outputs(bits).reshape(-1), bits[:, 0].float(), "mse").backward()
    return float(counter.get_total_flops())


def step_seconds(a: assignments.Assignment, n: int, seed: int = 0) -> float:
    """CPU seconds per step of one class run of PARITY at length n, trained by the server's job function
    (`server.worker.run`: the request the Class page submits, its torch threads, its live monitor with
    evaluations, measurements and checkpoints, in a scratch folder) in this process, at the worker's niceness: the figure
    `server.assignments.MEASURED_STEP_S` records."""
    import json

    from server import worker
    from ui.classroom import canonical_request

    request = canonical_request(a, {"task": "parity", "n": n, "seed": seed})
    with tempfile.TemporaryDirectory(prefix="sensviz-class-run-") as folder:
        (Path(folder) / "request.json").write_text(json.dumps(request.to_dict()))
        start = time.process_time()
        worker.run(folder, os.cpu_count() or 1, os.getppid())
        seconds = time.process_time() - start
        outcome = json.loads((Path(folder) / "outcome.json").read_text())
    if outcome["state"] != "finished":
        raise RuntimeError(f"the class run failed: {outcome.get('error')}")
    return seconds / outcome["steps"]


def matmul_rate(size: int = 1024, repeats: int = 20) -> float:
    """This machine's float32 matmul rate (FLOP/s) on every core: the best of `repeats` products of two
    size x size matrices."""
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    x, y = torch.randn(size, size), torch.randn(size, size)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(x, y)
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 / best


def report_flops(runs: pd.DataFrame, seconds: float) -> None:
    """The runs' training FLOPs and the share of the machine's matmul rate they achieved over `seconds`."""
    a = assignments.LENGTH_SCALING
    per_step = {n: step_flops(a, n) for n in a.lengths}
    kinds = runs.groupby(["task", "n"])["steps_trained"].median() if len(runs) else pd.Series(dtype=float)
    print("FLOPs of one training step: " + ", ".join(f"n = {n}: {f / 1e6:.1f} M" for n, f in per_step.items())
          + "; of one run (median steps): " + ", ".join(f"{t} n = {n}: {steps:.0f} steps, {steps * per_step[n] / 1e9:.1f} G"
                                                       for (t, n), steps in kinds.items()))
    total = float(sum(per_step[int(n)] * steps for n, steps in zip(runs["n"], runs["steps_trained"]))) if len(runs) else 0.0
    rate = matmul_rate()
    print(f"the class's runs: {total / 1e12:.2f} TFLOP in {seconds:.0f} s = {total / seconds / 1e9:.1f} GFLOP/s; "
          f"this machine's measured matmul rate {rate / 1e9:.1f} GFLOP/s ({os.cpu_count()} cores): "
          f"{total / seconds / rate:.1%} of it (at that rate the runs' FLOPs take {total / rate:.0f} s)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=30)
    parser.add_argument("--capacity", type=int, help="runs at once (SENSVIZ_MAX_JOBS; default: the server's, "
                        "one per two cores); with --ray, also the cluster's nodes of one CPU each")
    parser.add_argument("--ray", action="store_true", help="run the jobs on a local Ray cluster on this machine "
                        "(`executor.ray_cluster`)")
    parser.add_argument("--step-times", action="store_true", help="only the CPU seconds per step of one class run "
                        "at each n (the plan's `MEASURED_STEP_S`), best of three, in this process; no server")
    args = parser.parse_args(argv)
    if args.step_times:
        a = assignments.LENGTH_SCALING
        for n in a.lengths:
            best = min(step_seconds(a, n, seed) for seed in range(3))
            print(f"class run, parity n = {n}: {best * 1000:.1f} ms CPU per step (best of 3; the plan uses "
                  f"{assignments.MEASURED_STEP_S[n] * 1000:.1f} ms)")
        return 0
    capacity = args.capacity or (2 if args.ray else None)
    with tempfile.TemporaryDirectory(prefix="sensviz-class-mode-") as tmp, contextlib.ExitStack() as stack:
        data = Path(tmp)
        env = {"SENSVIZ_DATA_DIR": tmp} | ({"SENSVIZ_MAX_JOBS": str(capacity)} if capacity else {})
        if args.ray:
            env[RAY_ADDRESS] = stack.enter_context(ray_cluster(capacity))
        base, proc = stack.enter_context(served(ROOT / "artifacts" / "streamlit-class-mode.log", env=env))
        out = asyncio.run(run_class(base, proc.pid, data, args.members))
    print(f"executor: {'Ray' if args.ray else 'local processes'}, {capacity or 'the default number of'} runs at once")
    pages = sorted(out.pages) or [float("nan")]
    a = assignments.LENGTH_SCALING
    ended = out.runs["status"].value_counts().to_dict() if len(out.runs) else {}
    print(f"members {args.members}: pressed Train {out.pressed.count('job')} "
          f"(other answers: {[p for p in out.pressed if p != 'job']})")
    print(f"every run in the class chart after {out.all_in_s:.0f} s ({out.all_in_s / 60:.1f} min); runs {ended}")
    print(f"page times while training: {len(out.pages)} pages, median {statistics.median(pages):.2f} s, "
          f"90th percentile {pages[int(0.9 * (len(pages) - 1))]:.2f} s, slowest {pages[-1]:.2f} s, errors {out.page_errors}")
    print(f"server peak memory {out.peak_mib:.0f} MiB")
    if len(out.runs):
        print("verdict on the class's table:", assignments.verdict(a, out.runs).text)
        kept = ROOT / "artifacts" / "class-mode-runs.csv"  # the data folder goes with the benchmark: its table stays here
        out.runs.to_csv(kept, index=False)
        print(f"the class's runs table: {kept.relative_to(ROOT)}")
        report_flops(out.runs, out.all_in_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
