"""The Experiments page's first render, printed as a table (a benchmark, not a test).

    python benchmarks/experiments_page.py [--repeats 3]

Serves `app.py` (`streamlit run`, a fresh data folder) and opens the Experiments page by URL in a fresh websocket
session (`benchmarks/load.py`): once with nothing stored (the page computes the findings of the shipped tables and
stores them, `sensviz.findings.stored`), then `--repeats` times on a cold server cache (cleared before each page,
as a fresh server's: the stored table is read back), each followed by a cached re-render in the same session.
Beside them, in the same run and process, the baseline: computing the one table for a page view
(`sensviz.findings.findings` and `table`, what every first render cost before the table was stored). Target: first
render <= 1 s on a quiet machine. The machine's load average is printed with the table.
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

from sensviz import findings  # noqa: E402

FIRST_TARGET_S = 1.0
URL = "experiments"


def open_page(base: str) -> tuple[float, float, bool]:
    """(first render, cached re-render, no exception) of the page in a fresh session."""
    first, cached = asyncio.run(load.open_once(base, URL, reruns=1))
    return first.seconds, cached.seconds, first.ok and cached.ok


def baseline() -> float:
    """Seconds to compute the one table of the shipped results in this process (nothing cached)."""
    start = time.perf_counter()
    findings.table(findings.findings(ROOT / "experiments" / "results"))
    return time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="first renders with the table stored")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    env = {"SENSVIZ_DATA_DIR": tempfile.mkdtemp(prefix="sensviz-bench-")}
    rows = []
    with load.served(ROOT / "artifacts" / "streamlit-bench-experiments.log", env=env) as (base, _):
        load.open_many(base, ["about"])  # import the server's modules once
        load.clear_caches(base)
        rows.append(("nothing stored yet (computes and stores)", *open_page(base)))
        for i in range(args.repeats):
            load.clear_caches(base)
            rows.append((f"stored, cold server cache ({i + 1})", *open_page(base)))
    computed = baseline()
    load_after = os.getloadavg()
    print(f"{'Experiments page':<44} {'first (s)':>10} {'cached (s)':>11}  ok")
    for name, first, cached, ok in rows:
        print(f"{name:<44} {first:>10.2f} {cached:>11.2f}  {'yes' if ok else 'NO'}")
    print(f"{'baseline: the one table computed per view':<44} {computed:>10.2f} {'—':>11}")
    stored = [first for name, first, _, _ in rows[1:]]
    met = max(stored) <= FIRST_TARGET_S
    print(f"target: first render <= {FIRST_TARGET_S} s with the table stored: {'met' if met else 'NOT met'} "
          f"(worst {max(stored):.2f} s)")
    print(f"load average (1, 5, 15 min) before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}, on {os.cpu_count()} cores")
    return 0 if met and all(ok for *_, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
