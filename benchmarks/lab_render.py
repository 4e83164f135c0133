"""The Lab's chapters on a fresh server: how long each chapter's first render takes, and a cached one.

For every chapter, a fresh `streamlit run app.py` (`benchmarks/load.py`'s `served`) and websocket
sessions that open `lab?chapter=K` as a student's browser does:

- start: from starting the server to its first answer (`app.py`'s start-up, `ui.serve`, is in it: the
  app's imports and every chapter's first view);
- fresh: the first session the new server ever serves;
- chapter cold: on another fresh server that has served one other page (`about`) first (the start-up
  has drawn every chapter's first view already, so it reads like fresh);
- cached: one more fresh session opening the chapter once the server has drawn it;
- load models: that session skipping the prediction, then pressing "Load this chapter's models" (the sidebar
  then shows them);

each with 1 session, and (`--sessions 30`) with 30 sessions arriving at once (median and slowest).
Times are wall clock from sending the request to the end of the script run; on a shared machine they
include the other processes' load, which the table's heading states (`os.getloadavg`). Beside each
wall time, in brackets, the CPU seconds the server process spent meanwhile (all its threads: the
warm-up's too), which the other processes' load does not inflate.

    python benchmarks/lab_render.py                 # 1 session, every chapter
    python benchmarks/lab_render.py --sessions 1 30 --chapters 1 4
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load import ROOT, Session, open_many, served  # noqa: E402

from sensviz import lab  # noqa: E402

SETUP = "Load this chapter's models"
SKIP = "Skip"


def url(number: int) -> str:
    return f"lab?chapter={number}"


async def _press_setup(base: str, number: int, pid: int) -> str:
    """One fresh session opens the chapter, skips its prediction (the setup button comes with the answer) and
    presses its setup button: the press's `timed` result."""
    async with Session(base) as session:
        opened = await session.open(url(number))
        assert opened.ok, (opened.status, opened.exceptions)
        opened = await session.press(opened.buttons[SKIP])
        assert opened.ok, (opened.status, opened.exceptions)
        before = cpu_seconds(pid)
        pressed = await session.press(opened.buttons[SETUP])
        assert pressed.ok, (pressed.status, pressed.exceptions)
        return f"{pressed.seconds:.2f} ({cpu_seconds(pid) - before:.2f})"


def crowd(base: str, number: int, sessions: int) -> list[float]:
    """`sessions` fresh sessions open the chapter at once: each one's seconds (all must finish cleanly)."""
    runs = open_many(base, [url(number)] * sessions)
    bad = [r for r in runs if not r.ok]
    assert not bad, [(r.status, r.exceptions[:1]) for r in bad[:3]]
    return [r.seconds for r in runs]


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) a process has spent so far, all its threads (Linux: /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(pid: int, work) -> str:
    """`work()`'s wall seconds (one, or median/slowest of many) and the server's CPU seconds meanwhile."""
    before = cpu_seconds(pid)
    found = work()
    times = found if isinstance(found, list) else [found]
    wall = f"{times[0]:.2f}" if len(times) == 1 else f"{statistics.median(times):.2f}/{max(times):.2f}"
    return f"{wall} ({cpu_seconds(pid) - before:.2f})"


def measure(number: int, sessions: int, log: Path) -> dict[str, str]:
    """One chapter with `sessions` sessions at a time: start, fresh, chapter cold, cached, load models."""
    row = {}
    started = time.perf_counter()
    with served(log) as (base, server):
        row["start"] = f"{time.perf_counter() - started:.2f} ({cpu_seconds(server.pid):.2f})"
        row["fresh"] = timed(server.pid, lambda: crowd(base, number, sessions))
        row["cached"] = timed(server.pid, lambda: crowd(base, number, sessions))
        row["load models"] = asyncio.run(_press_setup(base, number, server.pid))
    with served(log) as (base, server):
        open_many(base, ["about"])
        row["chapter cold"] = timed(server.pid, lambda: crowd(base, number, sessions))
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1], help="sessions at once (default 1)")
    parser.add_argument("--chapters", type=int, nargs="+", default=[c.number for c in lab.CHAPTERS])
    args = parser.parse_args(argv)
    log = ROOT / "artifacts" / "lab-render.log"
    columns = ("start", "fresh", "chapter cold", "cached", "load models")
    for sessions in args.sessions:
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        print("\nstreamlit run app.py: "
              f"{sessions} session(s) at once; wall seconds{' (median/slowest)' if sessions > 1 else ''} "
              f"(server CPU seconds); "
              f"load average before: {load} on {os.cpu_count()} cores")
        print(f"{'chapter':<30}" + "".join(f"{c:>20}" for c in columns))
        for number in args.chapters:
            row = measure(number, sessions, log)
            title = f"{number}. {lab.chapter(number).title}"[:29]
            print(f"{title:<30}" + "".join(f"{row[c]:>20}" for c in columns), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
