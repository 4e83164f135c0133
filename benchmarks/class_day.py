"""A whole class session on one server, with its edges: late joiners, a look-alike name, removed
students, a restart while runs train, and an instructor who ends the assignment.

On a fresh data folder: the instructor's class (its instructor a headless Chromium, on the Class
page from start to end) and `--members` websocket members (`benchmarks/load.py`'s `Session`, each
from its own loopback address with its own signed owner id). All but `--late` join, one of them
first trying a look-alike of another's name ("Аlice" in Cyrillic beside "Alice"), which is refused;
the instructor starts the length-scaling assignment; the late members join; everyone keeps the Train
page open and presses Train whenever it holds their assignment run and they have no run going, as a
student would after a run ends or is cancelled. After `--restart-after` finished runs the server is
sent SIGTERM and started again on the same port and data folder (the instructor's browser reconnects
by itself); `--removed` members are removed meanwhile. When the class's table holds every planned run
the instructor presses "End the assignment" and reads the verdict.

Prints: the time from the first press to the verdict on the instructor's screen, the members' page
times (median, 90th percentile, slowest, errors, of which during the restart), the restart (SIGTERM
to exit, start to ready), and what was lost: finished runs without their kept model or their row, and
runs that were interrupted and trained again.

    python benchmarks/class_day.py                      # 30 members, 3 late, 2 removed
    python benchmarks/class_day.py --members 12 --late 1 --removed 1

Not run by .ci/run (the assignment's 30 runs train for about 12 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from class_load import address  # noqa: E402
from load import ROOT, Session, free_port, served  # noqa: E402

sys.path.insert(0, str(ROOT))
import pandas as pd  # noqa: E402
import websockets  # noqa: E402

from sensviz.sweeps import read_results  # noqa: E402
from server import assignments, owners  # noqa: E402
from server.classes import ClassRefused, ClassStore  # noqa: E402
from server.kept import KeptStore, cap_bytes  # noqa: E402

CEILING_S = 3 * 3600
CHROMIUM = "/usr/bin/chromium"
LOOK_ALIKE = "\u0410lice"  # a Cyrillic capital A


@dataclass
class Day:
    base: str
    pages: list[float] = field(default_factory=list)
    page_errors: int = 0
    restart_errors: int = 0  # page errors while the server was down
    presses: int = 0
    refused_names: list[str] = field(default_factory=list)
    restarting: bool = False
    first_press: float | None = None
    verdict_s: float = float("nan")
    verdict: str = ""
    stop_s: float = float("nan")
    ready_s: float = float("nan")
    done: asyncio.Event = field(default_factory=asyncio.Event)


def class_table(store: ClassStore, code: str) -> pd.DataFrame:
    try:
        return read_results(store.sweep_folder(code))[0]
    except (ValueError, OSError):  # no run yet, or a table being replaced
        return pd.DataFrame()


def job_state(data: Path, job: str) -> str | None:
    try:
        return json.loads((data / "jobs" / job / "state.json").read_text()).get("state")
    except (OSError, ValueError):
        return None


def busy(data: Path, store: ClassStore, code: str, member: str) -> bool:
    """Whether the member has a run queued or running (what their page's job panel shows them)."""
    found = store.get(code)
    return any(e["member"] == member and job_state(data, job) in ("queued", "running") for job, e in found.jobs.items())


async def member(day: Day, data: Path, store: ClassStore, code: str, k: int, cookie: str, member_id: str) -> None:
    """A student with the Train page open: presses Train whenever it holds their assignment and nothing of theirs runs."""
    while not day.done.is_set():
        if store.get(code).member(member_id) is None:
            return  # removed: the page says so; they stop
        try:
            async with Session(day.base, cookies={"sensviz_owner": cookie}, local_addr=(address(k), 0)) as session:
                opened = await session.open(f"train?class={code}")
                day.pages.append(opened.seconds)
                day.page_errors += not opened.ok
                filled = any("assignment is filled in" in t for t in opened.texts)
                if filled and "Train" in opened.buttons and not busy(data, store, code, member_id):
                    day.first_press = day.first_press or time.perf_counter()
                    await session.press(opened.buttons["Train"])
                    day.presses += 1
        except (OSError, websockets.exceptions.WebSocketException):  # the server is down (the restart), or dropped it
            day.page_errors += 1
            day.restart_errors += day.restarting
        await asyncio.sleep(3.0)


async def instructor(day: Day, cookie: str, code: str, store: ClassStore) -> None:
    """The instructor's Chromium on the Class page: starts the assignment, ends it when every planned run is in."""
    from playwright.async_api import async_playwright

    a = assignments.LENGTH_SCALING
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = await browser.new_context(viewport={"width": 1024, "height": 768})
        host = day.base.split("//")[1].split(":")[0]
        await context.add_cookies([{"name": "sensviz_owner", "value": cookie, "domain": host, "path": "/"}])
        page = await context.new_page()
        await page.goto(f"{day.base}/class?class={code}", wait_until="domcontentloaded")
        await page.get_by_role("button", name="Start the length-scaling assignment").click(timeout=120_000)
        await page.get_by_role("button", name="End the assignment").wait_for(timeout=120_000)
        while assignments.missing_runs(a, class_table(store, code)):
            await asyncio.sleep(2.0)
        await page.goto(f"{day.base}/class?class={code}", wait_until="domcontentloaded")  # the server may have restarted
        await page.get_by_role("button", name="End the assignment").click(timeout=120_000)
        verdict = page.get_by_text("Verdict:").first
        await verdict.wait_for(timeout=120_000)
        day.verdict_s = time.perf_counter() - day.first_press
        day.verdict = await verdict.inner_text()
        day.done.set()
        await browser.close()


async def restart(day: Day, process, store: ClassStore, code: str, teacher: str, after: int, removed: list[str],
                  log: Path, env: dict, port: int, stack: contextlib.ExitStack) -> None:
    """SIGTERM once `after` runs are in the class's table (removing members meanwhile), then the same start again."""
    while len(class_table(store, code)) < after and not day.done.is_set():
        await asyncio.sleep(1.0)
    for member_id in removed:
        store.remove(code, teacher, member_id)
    day.restarting = True
    stopped = time.perf_counter()
    process.send_signal(signal.SIGTERM)
    while process.poll() is None:
        await asyncio.sleep(0.05)
    day.stop_s = time.perf_counter() - stopped
    started = time.perf_counter()
    stack.enter_context(served(log.with_suffix(".restarted.log"), env=env, port=port))
    day.ready_s = time.perf_counter() - started
    day.restarting = False
    print(f"restart after {after} runs: SIGTERM to exit {day.stop_s:.1f} s, start to ready {day.ready_s:.1f} s", flush=True)


async def session_day(args, data: Path, env: dict, port: int, stack: contextlib.ExitStack, process, base: str) -> Day:
    day = Day(base)
    secret = owners.owner_secret(data)
    store = ClassStore(data / "classes", secret)
    teacher = owners.mint_owner(secret)
    found = store.create("Class day", teacher)
    cookies = [owners.mint_owner(secret) for _ in range(args.members)]
    ids: dict[int, str] = {}
    for k in range(args.members - args.late):
        name = "Alice" if k == 0 else f"student {k}"
        if k == 1:  # a look-alike of Alice's name: refused, then another
            try:
                store.join(found.code, LOOK_ALIKE, cookies[k])
            except ClassRefused as err:
                day.refused_names.append(str(err))
            name = "Alicia"
        ids[k] = store.join(found.code, name, cookies[k])[0].id
    teacher_task = asyncio.create_task(instructor(day, teacher, found.code, store))
    while store.get(found.code).assignment is None:
        await asyncio.sleep(0.5)
    for k in range(args.members - args.late, args.members):
        ids[k] = store.join(found.code, f"late student {k}", cookies[k])[0].id
    members = [asyncio.create_task(member(day, data, store, found.code, k, cookies[k], ids[k])) for k in ids]
    removed = [ids[k] for k in list(ids)[2 : 2 + args.removed]]
    await restart(day, process, store, found.code, teacher, args.restart_after, removed,
                  ROOT / "artifacts" / "streamlit-class-day.log", env, port, stack)
    await asyncio.wait_for(teacher_task, CEILING_S)
    await asyncio.gather(*members)
    report_losses(day, data, store, found.code)
    return day


def report_losses(day: Day, data: Path, store: ClassStore, code: str) -> None:
    found = store.get(code)
    kept = KeptStore(data / "kept", cap_bytes())
    states = {job: json.loads((data / "jobs" / job / "state.json").read_text()) for job in found.jobs}
    finished = [s for s in states.values() if s["state"] == "finished"]
    lost_models = [s["id"] for s in finished if not s.get("kept") or kept.info(s["kept"]) is None]
    rows = class_table(store, code)
    recorded = set(rows["run_id"]) if len(rows) else set()
    interrupted = [s for s in states.values() if "server stopped during this run" in (s.get("reason") or "")]
    cancelled = [s for s in states.values() if "restarted before this run started" in (s.get("reason") or "")]
    print(f"jobs {len(states)}: {pd.Series([s['state'] for s in states.values()]).value_counts().to_dict()}; "
          f"rows in the class's table {len(recorded)}")
    print(f"finished runs without their kept model: {len(lost_models)}; interrupted by the restart and kept at their "
          f"last measurement: {len(interrupted)} ({sum(bool(s.get('kept')) for s in interrupted)} kept); "
          f"queued runs cancelled by the restart: {len(cancelled)}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=30)
    parser.add_argument("--late", type=int, default=3, help="members who join after the assignment started")
    parser.add_argument("--removed", type=int, default=2, help="members the instructor removes before the restart")
    parser.add_argument("--restart-after", type=int, default=5, help="SIGTERM once this many runs are in the class's table")
    args = parser.parse_args(argv)
    if not 2 + args.removed <= args.members - args.late:
        parser.error("--removed: at most --members minus --late minus 2 (Alice and the look-alike stay)")
    with tempfile.TemporaryDirectory(prefix="sensviz-class-day-") as tmp, contextlib.ExitStack() as stack:
        data, port = Path(tmp), free_port()
        env = {"SENSVIZ_DATA_DIR": tmp}
        base, process = stack.enter_context(served(ROOT / "artifacts" / "streamlit-class-day.log", env=env, port=port))
        day = asyncio.run(session_day(args, data, env, port, stack, process, base))
    pages = sorted(day.pages) or [float("nan")]
    print(f"members {args.members} ({args.late} late, {args.removed} removed); look-alike names refused: "
          f"{len(day.refused_names)} ({day.refused_names[:1]}); Train pressed {day.presses} times")
    print(f"restart: SIGTERM to exit {day.stop_s:.1f} s, start to ready {day.ready_s:.1f} s")
    print(f"from the first press to the verdict on the instructor's screen: {day.verdict_s:.0f} s "
          f"({day.verdict_s / 60:.1f} min): {day.verdict!r}")
    print(f"page times: {len(day.pages)} pages, median {statistics.median(pages):.2f} s, 90th percentile "
          f"{pages[int(0.9 * (len(pages) - 1))]:.2f} s, slowest {pages[-1]:.2f} s; errors {day.page_errors} "
          f"({day.restart_errors} while the server restarted)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
