"""The cost of rejecting hostile checkpoint files and arguments, printed as a table.

    python benchmarks/hostile.py            # every case of tests/hostile_cases.py, one row each
    python benchmarks/hostile.py --summary  # one row per family, and the worst case

All cases are loaded in one child process (torch at one thread); `extra MB` is the peak resident
memory of the call above the resident memory before it (the peak is reset before every case). The targets (issue 12): every case
rejected with one line, under 2 s and 300 MB.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import hostile_cases  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summary", action="store_true", help="one row per family")
    args = parser.parse_args()
    cases = hostile_cases.cases()
    with tempfile.TemporaryDirectory() as folder:
        rows = hostile_cases.measure(cases, Path(folder))
    if args.summary:
        print(f"{'family':28} {'cases':>5} {'rejected':>8} {'max cpu s':>9} {'max wall s':>10}")
        for family in dict.fromkeys(r["family"] for r in rows):
            part = [r for r in rows if r["family"] == family]
            print(f"{family:28} {len(part):5d} {sum(r['outcome'] == 'rejected' for r in part):8d} "
                  f"{max(r['cpu_s'] for r in part):9.3f} {max(r['wall_s'] for r in part):10.3f}")
    else:
        print(f"{'family':28} {'case':52} {'outcome':>9} {'cpu s':>7} {'wall s':>7} {'extra MB':>8}")
        for r in rows:
            print(f"{r['family']:28} {r['name'][:52]:52} {r['outcome'][:9]:>9} {r['cpu_s']:7.3f} {r['wall_s']:7.3f} "
                  f"{r['extra_mb']:8.1f}")
    worst = max(rows, key=lambda r: r["wall_s"])
    clean = sum(r["outcome"] == "rejected" for r in rows)
    print(f"\n{clean}/{len(rows)} rejected cleanly; slowest: {worst['name']} ({worst['family']}): "
          f"{worst['cpu_s']:.3f} s CPU, {worst['wall_s']:.3f} s wall; "
          f"largest extra memory: {max(r['extra_mb'] for r in rows):.1f} MB")
    if clean != len(rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
