"""A class of websocket members (`benchmarks/load.py`) doing the length-scaling assignment together.

On a fresh server and data folder: an instructor's class is created and the assignment started (the
library's `ClassStore`, on the server's own data folder); `--members` members join it (each with an
owner id signed by the server's secret, in its cookie, from its own loopback address, so the queue
sees one address per member), open `/train?class=<code>` (the form arrives filled with their cell)
and press Train at once. While the runs go on, every member browses: the Class page (its gallery and
chart collect the finished runs) and the Sensitivity page, one after the other, until every run is in
the class's table. Prints the time from the presses until every run is in the class chart, the
members' page times while they wait (median, 90th percentile, slowest), how the runs ended, the
verdict on the class's table and the server's peak memory.

    python benchmarks/class_mode.py --members 30
    python benchmarks/class_mode.py --members 30 --capacity 2 [--ray]   # two runs at once, local or on Ray

Not run by .ci/run (the assignment's 30 runs train for about 12 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=30)
    parser.add_argument("--capacity", type=int, help="runs at once (SENSVIZ_MAX_JOBS; default: the server's, "
                        "one per two cores); with --ray, also the cluster's nodes of one CPU each")
    parser.add_argument("--ray", action="store_true", help="run the jobs on a local Ray cluster on this machine "
                        "(`executor.ray_cluster`)")
    args = parser.parse_args(argv)
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
