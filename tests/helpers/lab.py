"""The Lab's shipped data, read as the chapters read it, and a fresh measurement compared with it."""

import math
from pathlib import Path

import pytest

from sensviz import lab

ROOT = Path(__file__).resolve().parents[2]


RESULTS = ROOT / "experiments" / "results"


SOURCES = lab.Sources.shipped(ROOT / "checkpoints", RESULTS)


def data(number: int) -> lab.Data:
    found = lab.stored(lab.chapter(number), SOURCES)
    assert found is not None, f"chapter {number}: checkpoints/lab-data.json is stale: run `sensviz lab-data`"
    return found


MEASURED_REL = 1e-5
"""A fresh float32 measurement against the shipped one: another CPU's kernels sum in another order (on
the machines here they differ by up to 1.2e-6 of the quantity's scale); a stale entry (another model,
other settings) differs by far more. The scale: the number itself, or a table column's largest value
(a model output near 0 carries the rounding of the O(1) sums it came from)."""


def same_measurement(fresh, shipped, scale: float | None = None) -> bool:
    """The same JSON structure, text and integers equal, floats within `MEASURED_REL` of their scale."""
    if isinstance(fresh, dict) and {"columns", "data"} <= fresh.keys():  # a table: compare column by column
        if not (isinstance(shipped, dict) and fresh["columns"] == shipped["columns"]
                and len(fresh["data"]) == len(shipped["data"])):
            return False
        for j in range(len(fresh["columns"])):
            values = [row[j] for row in shipped["data"]]
            numbers = [abs(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
            top = max(numbers, default=0.0)
            if not all(same_measurement(row[j], v, top) for row, v in zip(fresh["data"], values)):
                return False
        return True
    if isinstance(fresh, dict):
        return isinstance(shipped, dict) and fresh.keys() == shipped.keys() and all(
            same_measurement(fresh[k], shipped[k]) for k in fresh)
    if isinstance(fresh, list):
        return isinstance(shipped, list) and len(fresh) == len(shipped) and all(
            same_measurement(a, b) for a, b in zip(fresh, shipped))
    if isinstance(fresh, float) and isinstance(shipped, (int, float)):
        return fresh == pytest.approx(shipped, rel=MEASURED_REL, abs=MEASURED_REL * (scale or 0.0), nan_ok=True)
    return fresh == shipped
