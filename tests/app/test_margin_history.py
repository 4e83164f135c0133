"""Each equivalence margin's record against the repository's history, as git tells it: the commit that
fixed it, its date, and the tables it had seen."""

import io
import subprocess
import tomllib
from pathlib import Path

import pandas as pd
import pytest

from sensviz import claims

ROOT = Path(__file__).resolve().parents[2]


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, check=True).stdout.decode()


def levels_at(commit: str, experiment: str, scale: str, entry: dict) -> int:
    """How many levels of the margin's x its runs had in the scale's tables at a commit (0: no tables there)."""
    for folder in (f"experiments/results/{scale}", f"experiments/running/{scale}"):
        try:
            data = subprocess.run(["git", "show", f"{commit}:{folder}/{experiment}/runs.parquet"], cwd=ROOT,
                                  capture_output=True, check=True).stdout
        except subprocess.CalledProcessError:
            continue
        runs = pd.read_parquet(io.BytesIO(data))
        if entry["quantity"] not in runs:  # measured only later: the margin came before its data
            return 0
        rows = claims.rows_where(runs, **entry["runs"]).dropna(subset=[entry["quantity"]])
        return rows[entry["x"]].nunique()
    return 0


@pytest.mark.parametrize("experiment", ["length_scaling", "scratchpad"])
def test_each_margin_records_the_commit_that_fixed_it_and_the_tables_it_had_seen(experiment):
    """The record against the history: its commit wrote the margin at its date, and `seen` names exactly the
    scales whose tables held its quantity at two or more levels of x of its runs then (a slope could be taken)."""
    spec = tomllib.loads((ROOT / "experiments" / f"{experiment}.toml").read_text())
    for name, entry in spec["equivalence"].items():
        fixed = entry["fixed"]
        assert git("log", "-1", "--format=%aI", fixed["commit"]).strip().replace("+00:00", "Z") == fixed["date"]
        assert f"[equivalence.{name}]" in git("show", f"{fixed['commit']}:experiments/{experiment}.toml"), name
        seen = [s for s in ("quick", "standard", "decide") if levels_at(fixed["commit"], experiment, s, entry) >= 2]
        assert seen == fixed["seen"], (name, seen)
