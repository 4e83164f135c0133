"""The Experiments page's first render, printed as a table (a benchmark, not a test).

    python benchmarks/experiments_page.py [--repeats 3]

Serves `app.py` (`streamlit run`, a fresh data folder) and opens the Experiments page by URL in a fresh websocket
session (`benchmarks/load.py`), each time on a fresh server process, as a student meets it: the server answers after
its start-up (`ui.serve`), and the page opens once its background warm-up has ended (the server's CPU time stops
growing), so the page's own cost is what is timed. First with nothing stored (the page computes the findings of the
shipped tables and its figures, and stores them: `sensviz.findings.stored`, `sensviz.results.stored_figures`), then
`--repeats` times with them stored (a new server each time: nothing of the page in its memory, its modules not
imported yet), each followed by a cached re-render in the same session; and once more on a fresh server whose
background warm-up is still running (a student who opens the page just after the server answered; not the target:
the warm-up shares the CPU). Wall seconds as the client saw them, CPU seconds of the server process (all its threads)
over the same span. Beside them, in the same run, the baseline: computing the one table for a page view
(`sensviz.findings.findings` and `table`, what every first render cost before the table was stored), timed in this
process. Target: first render <= 1 s on a quiet machine. The machine's load average is printed with the table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import load  # noqa: E402

FIRST_TARGET_S = 1.0
URL = "experiments"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far, every thread's (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def wait_idle(pid: int, quiet: float = 0.05, window: float = 1.0, timeout: float = 600) -> float:
    """Wait until the process uses less than `quiet` CPU seconds in `window` seconds (its warm-up ended); the wait."""
    start = time.perf_counter()
    before = cpu_seconds(pid)
    while time.perf_counter() - start < timeout:
        time.sleep(window)
        now = cpu_seconds(pid)
        if now - before < quiet:
            break
        before = now
    return time.perf_counter() - start


def open_page(base: str, pid: int) -> tuple[float, float, float, float, bool]:
    """(first render wall, its server CPU, cached re-render wall, its server CPU, no exception) in a fresh session."""

    async def both():
        async with load.Session(base) as session:
            c0 = cpu_seconds(pid)
            first = await session.open(URL)
            c1 = cpu_seconds(pid)
            cached = await session.rerun()
            return first, c1 - c0, cached, cpu_seconds(pid) - c1

    first, first_cpu, cached, cached_cpu = asyncio.run(both())
    return first.seconds, first_cpu, cached.seconds, cached_cpu, first.ok and cached.ok


def fresh_server(env: dict, name: str, idle: bool = True) -> tuple[float, float, float, float, bool]:
    """A new server process, its background warm-up waited out (`idle`) or not, then the page opened once and
    re-rendered."""
    with load.served(ROOT / "artifacts" / f"streamlit-bench-experiments-{name}.log", env=env) as (base, proc):
        if idle:
            wait_idle(proc.pid)
        return open_page(base, proc.pid)


def baseline() -> tuple[float, float]:
    """(wall, CPU) seconds to compute the one table of the shipped results in this process (nothing cached)."""
    from sensviz import findings

    start, cpu = time.perf_counter(), time.process_time()
    findings.table(findings.findings(ROOT / "experiments" / "results"))
    return time.perf_counter() - start, time.process_time() - cpu


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="fresh servers opening the page with the table stored")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    env = {"SENSVIZ_DATA_DIR": tempfile.mkdtemp(prefix="sensviz-bench-")}
    rows = [("nothing stored yet (computes and stores)", *fresh_server(env, "first"))]
    for i in range(args.repeats):
        rows.append((f"stored, fresh server ({i + 1})", *fresh_server(env, f"stored-{i + 1}")))
    busy = ("stored, fresh server, its warm-up running", *fresh_server(env, "busy", idle=False))
    computed, computed_cpu = baseline()
    load_after = os.getloadavg()
    print(f"{'Experiments page, fresh server':<44} {'first (s)':>10} {'CPU (s)':>8} {'cached (s)':>11} {'CPU (s)':>8}  ok")
    for name, first, first_cpu, cached, cached_cpu, ok in rows:
        print(f"{name:<44} {first:>10.2f} {first_cpu:>8.2f} {cached:>11.2f} {cached_cpu:>8.2f}  {'yes' if ok else 'NO'}")
    name, first, first_cpu, cached, cached_cpu, ok = busy
    print(f"{name:<44} {first:>10.2f} {first_cpu:>8.2f} {cached:>11.2f} {cached_cpu:>8.2f}  {'yes' if ok else 'NO'}"
          "  (CPU: the whole server's, its warm-up's too)")
    print(f"{'baseline: the one table computed per view':<44} {computed:>10.2f} {computed_cpu:>8.2f} {'—':>11} {'—':>8}")
    stored = [first for _, first, *_ in rows[1:]]
    met = max(stored) <= FIRST_TARGET_S
    print(f"target: first render <= {FIRST_TARGET_S} s with the table stored: {'met' if met else 'NOT met'} "
          f"(worst {max(stored):.2f} s)")
    print(f"load average (1, 5, 15 min) before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}, on {os.cpu_count()} cores")
    return 0 if met and all(row[-1] for row in [*rows, busy]) else 1


if __name__ == "__main__":
    sys.exit(main())
