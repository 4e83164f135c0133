"""A scale's pre-registered analysis and the flat claims' equivalence margins, applied to its tables.

`decide(spec, scale, tables)` reads the spec (`sweeps.load_spec`: the scale's runs, its
`[scales.NAME.analysis]` and the spec's `[equivalence]` margins) and a sweep folder's tables
(`sweeps.read_results`, finished or still filling) and returns a `Decision`:

- per pre-registered claim, the primary test as written down (arm, runs, filter, quantity, estimator,
  error type, alpha): estimate, 1 - alpha interval and verdict (`stats.decide`; the claimed direction
  is the sign of the smallest effect); every secondary (the primary with one thing changed: arm,
  filter, error type or a covariate), marked fragile where its verdict differs from the primary's;
  the survivorship per cell (runs planned, in the table, finished, kept, and the convergence steps of
  the kept runs); the power the design had at its smallest effect (`stats.slope_power` /
  `stats.mean_power` at the kept runs it was sized for, with the standard tables' variance, as
  `sizing.design_power`) and the power of the kept runs so far; the units that would resolve an
  unresolved primary (`stats.units_to_resolve`); and, for a quantity measured at convergence, the
  same test under the authors' alignment (the first step with fixed-batch loss below 0.01 instead of
  our 0.001: `AUTHORS_ALIGNMENT_MSE`), beside the pre-registered tests, not one of them;
- per flat claim with a margin (`[equivalence.NAME]`) and per arm: the OLS slope, its verdict by
  `stats.equivalence` (90 % interval inside ±margin: reproduced; 95 % interval wholly outside:
  differs), the smallest margin its 90 % interval would pass, and the old verdict against zero;
- how many of the planned runs are in. Rows of another spec (another `spec_hash`) are left out and counted.

Estimators: `ols_slope`, `curvature` (a flat claim with a `margin`: two one-sided tests), `slope_difference` and
`welch` (the runs against their `versus` runs), `mean` (a per-run difference). An analysis with
`familywise = "holm"` decides its primaries together (`familywise`: reproduced only where Holm's step-down
rejects); one with `paired` sets beside each claim that names another arm the arms' paired difference, seed by
seed (`_paired`).

Runs belong to an arm and a claim by their planned settings (the spec's runs, matched by run id), so
columns a table leaves empty for some runs do not matter. Quantities: a column of the runs table, or
for a per-run difference "COLUMN@WHEN - COLUMN@WHEN" (WHEN: start, converged, end) measurements of
the history table (`per_run`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from . import stats
from .claims import kept_by, threshold
from .convergence import CONVERGED_MSE
from .results import with_defaults
from .sizing import design_power
from .sweeps import SweepSpec, load_spec, read_results, run_id, settings_key

AUTHORS_ALIGNMENT_MSE = 0.01
"""The authors align training dynamics on the first step with fixed-batch MSE below 0.01 ({0,1} targets); ours: 0.001."""
WHEN = ("start", "converged", "end")
"""The points of a run's history a per-run difference may name."""


@dataclass
class Test:
    """One test of a claim: the primary, a secondary or a definition beside them."""

    label: str  # "primary", or what changed ("arm = fixed", ...)
    kept: int  # the runs (values) the test used
    interval: stats.Interval | None
    verdict: str
    reason: str = ""  # why there is no interval
    fragile: bool | None = None  # a secondary whose verdict differs from the primary's (None: not comparable)
    bounds: tuple[float, float] | None = None  # the interval that decides: 1 - alpha, for a flat claim 1 - 2 alpha


@dataclass
class Cell:
    """Survivorship in one cell of a claim's runs (a level of x, or all of them)."""

    level: str
    planned: int
    in_table: int
    finished: int
    kept: int
    converged_steps: list  # of the kept runs, sorted (None where a kept run has none)


@dataclass
class ClaimResult:
    """A claim as the pre-registered analysis (or its equivalence margin) decides it."""

    name: str
    statement: str
    direction: int  # +1, -1; 0 for a flat claim (decided against `margin`)
    alpha: float
    primary: Test
    secondaries: list[Test] = field(default_factory=list)
    beside: list[Test] = field(default_factory=list)  # the authors' definitions, not pre-registered
    cells: list[Cell] = field(default_factory=list)
    margin: float | None = None
    units: str = ""  # the margin's units, for a flat claim
    reason: str = ""  # the margin's reason
    equivalent_within: float | None = None  # the smallest margin the 90 % interval passes (flat claims)
    against_zero: str = ""  # a flat claim's verdict under the old two-sided test against zero
    power_design: float | None = None
    power_now: float | None = None
    power_basis: str = ""
    to_resolve: str = ""
    p_value: float | None = None  # the primary's (`stats.p_value`), with a familywise analysis
    holm: tuple[bool, float] | None = None  # (rejected by Holm's step-down, the level its p value met or missed)
    holm_verdict: str = ""  # the verdict after Holm: reproduced only when rejected


@dataclass
class Decision:
    spec: str
    scale: str | None
    spec_hash: str
    planned: int
    in_table: int
    finished: int
    other_spec_rows: int
    claims: list[ClaimResult]
    flat: list[ClaimResult]

    @property
    def complete(self) -> bool:
        return self.finished == self.planned


# ----------------------------------------------------------------------------- quantities


def authors_limit(runs: pd.DataFrame) -> float:
    """The fixed-batch loss below which the authors' alignment counts a run as converged, on the runs'
    loss scale (`claims.threshold` is ours, 0.001 on {0,1} targets; theirs is 0.01)."""
    return threshold(runs) * AUTHORS_ALIGNMENT_MSE / CONVERGED_MSE


def _term(text: str) -> tuple[str, str]:
    column, _, when = text.strip().partition("@")
    if when not in WHEN:
        raise ValueError(f"'{text.strip()}' must read COLUMN@WHEN with WHEN one of {', '.join(WHEN)}")
    return column, when


def per_run(history: pd.DataFrame, run_ids, quantity: str, limit: float) -> pd.Series:
    """One value per run of "COLUMN@WHEN - COLUMN@WHEN" from the history table: `start` is the first
    measurement, `end` the last, `converged` the first with fixed-batch `loss` below `limit` (a run
    that never gets there has no value). Indexed by run id."""
    (a, at), (b, bt) = (_term(t) for t in quantity.split(" - "))
    values = {}
    mine = history[history["run_id"].isin(set(run_ids))]
    for rid, h in mine.groupby("run_id", sort=True):
        h = h.sort_values("step")
        below = h[h["loss"] < limit]
        points = {"start": h.iloc[0], "end": h.iloc[-1], "converged": below.iloc[0] if len(below) else None}
        if points[at] is not None and points[bt] is not None:
            values[rid] = float(points[at][a]) - float(points[bt][b])
    return pd.Series(values, dtype=float)


def _x(rows: pd.DataFrame, column: str, scale: str | None) -> pd.Series:
    return np.log2(rows[column].astype(float)) if scale == "log2" else rows[column].astype(float)


# ----------------------------------------------------------------------------- tests


def _finish(test: Test, direction: int, alpha: float, margin: float | None) -> Test:
    if test.interval is not None:
        test.verdict = stats.decide(test.interval, direction, alpha, margin)
        test.bounds = test.interval.bounds(1 - alpha if direction else 1 - 2 * alpha)
    return test


def _attempt(label: str, kept: int, make) -> Test:
    try:
        return Test(label, kept, make(), stats.UNRESOLVED)
    except (ValueError, KeyError, np.linalg.LinAlgError) as err:
        reason = f"missing column {err}" if isinstance(err, KeyError) else str(err)
        return Test(label, kept, None, stats.UNRESOLVED, reason)


class _Tables:
    """The tables of one sweep folder, with the spec's plan: which runs each arm and claim holds."""

    def __init__(self, spec: SweepSpec, folder):
        runs, self.history, _ = read_results(folder)
        if "run_id" not in runs:  # a sweep that has not finished a run yet
            runs = pd.DataFrame({"run_id": pd.Series(dtype=str), "status": pd.Series(dtype=str)})
        self.other = 0
        if "spec_hash" in runs:
            other = runs["spec_hash"].notna() & (runs["spec_hash"] != spec.hash)
            self.other, runs = int(other.sum()), runs[~other]
        self.plan = {run_id(s): s for s in spec.runs}
        runs = runs[runs["run_id"].isin(set(self.plan))]
        self.runs = with_defaults(spec.experiment, runs).reset_index(drop=True)
        self.limit = threshold(self.runs) if len(self.runs) else CONVERGED_MSE

    def ids(self, *picks: dict) -> set[str]:
        return {rid for rid, s in self.plan.items() if all(s.get(k) == v for p in picks for k, v in p.items())}

    def finished(self, ids: set[str]) -> pd.DataFrame:
        rows = self.runs[self.runs["run_id"].isin(ids)]
        return rows[rows["status"] == "finished"] if "status" in rows else rows

    def cells(self, ids: set[str], kept_ids: set[str], x: str | None) -> list[Cell]:
        """Survivorship per level of x (all runs in one cell without x)."""
        plan = pd.DataFrame([{"run_id": rid, "level": self.plan[rid].get(x) if x else "all"} for rid in sorted(ids)])
        present = self.runs[self.runs["run_id"].isin(ids)].set_index("run_id")
        done = set(self.finished(ids)["run_id"])
        cells = []
        for level, group in plan.groupby("level", sort=True):
            members = list(group["run_id"])
            kept = [rid for rid in members if rid in kept_ids]
            steps = sorted((present.loc[rid].get("converged_step") for rid in kept), key=lambda v: (_missing(v), v or 0))
            cells.append(Cell(str(level), len(members), sum(rid in present.index for rid in members),
                              sum(rid in done for rid in members), len(kept),
                              [None if _missing(v) else int(v) for v in steps]))
        return cells


def _missing(value) -> bool:
    return value is None or isinstance(value, float) and math.isnan(value)


def _test(t: _Tables, arms: dict, claim: dict, label: str, arm: str, rule: str, error: str,
          covariate: str | None, limit: float) -> tuple[Test, set[str]]:
    """One test of a pre-registered claim under the given arm, filter, error type and covariate."""
    ids = t.ids(arms[arm], claim["runs"])
    rows = t.finished(ids)
    rows = rows[kept_by(rows, rule)] if len(rows) else rows
    quantity, estimator = claim["quantity"], claim["estimator"]
    if estimator == "mean":
        values = per_run(t.history, rows["run_id"], quantity, limit) if len(rows) else pd.Series(dtype=float)
        return _attempt(label, len(values), lambda: stats.mean(values)), set(values.index)
    versus = pd.DataFrame()
    if "versus" in claim:
        versus = t.finished(t.ids(arms[arm], claim["versus"]))
        versus = versus[kept_by(versus, rule)] if len(versus) else versus
    columns = ([claim["x"]] if "x" in claim else []) + [quantity] + ([covariate] if covariate else [])
    missing = [c for c in columns if c not in rows or len(versus) and c not in versus]
    if missing:
        return Test(label, 0, None, stats.UNRESOLVED, f"missing column(s) {missing}"), set()
    usable = rows.dropna(subset=columns)
    other = versus.dropna(subset=columns) if len(versus) else versus
    x, y = (_x(usable, claim["x"], claim.get("x_scale")) if "x" in claim else None), usable[quantity].astype(float)

    def fit() -> stats.Interval:
        if estimator == "offset_difference":
            (setting, (first, last)), = claim["levels"].items()
            group = usable[list(claim["group"])].eq(pd.Series(claim["group"])).all(axis=1)

            def offset(level):
                at = usable[setting] == level
                return stats.offset(x[at], y[at], group[at])

            return stats.difference(offset(last), offset(first))
        if estimator == "welch":
            return stats.welch(y, other[quantity].astype(float) if len(other) else [], "seeds per group")
        if estimator == "slope_difference":
            if not len(other):
                raise ValueError("no kept runs to compare with")
            return stats.difference(stats.slope(x, y, error=error), stats.slope(
                _x(other, claim["x"], claim.get("x_scale")), other[quantity].astype(float), error=error))
        if estimator == "curvature":
            return stats.curvature(x, y, error=error)
        if covariate:
            return stats.slope_given(x, y, usable[covariate].astype(float), error=error)
        return stats.slope(x, y, error=error)

    kept = set(usable["run_id"]) | (set(other["run_id"]) if len(other) else set())
    return _attempt(label, len(kept), fit), kept


def _claim(t: _Tables, spec: SweepSpec, name: str, claim: dict, standard) -> ClaimResult:
    arms = spec.analysis["arms"]
    margin = claim.get("margin")
    direction = 0 if margin is not None else 1 if claim["smallest_effect"] > 0 else -1
    alpha = claim["alpha"]
    primary_settings = {"arm": claim["primary_arm"], "filter": claim["filter"], "error": claim["error"],
                        "covariate": None}

    def run(label: str, change: dict, limit: float = t.limit) -> tuple[Test, set[str]]:
        s = {**primary_settings, **change}
        test, kept = _test(t, arms, claim, label, s["arm"], s["filter"], s["error"], s["covariate"], limit)
        return _finish(test, direction, alpha, margin), kept

    primary, kept_ids = run("primary", {})
    result = ClaimResult(name, claim["statement"], direction, alpha, primary, margin=margin)
    if primary.interval is not None:
        result.p_value = stats.p_value(primary.interval, direction, margin)
    for change in claim["secondaries"]:
        (key, value), = change.items()
        test, _ = run(f"{key} = {value}", change)
        comparable = test.interval is not None and primary.interval is not None
        test.fragile = (test.verdict != primary.verdict) if comparable else None
        result.secondaries.append(test)
    for change in claim["secondaries"]:
        if "arm" in change and spec.analysis.get("paired"):
            result.beside.append(_paired(t, spec.analysis, claim, change["arm"]))
    if "@converged" in claim["quantity"]:
        authors = authors_limit(t.runs) if len(t.runs) else AUTHORS_ALIGNMENT_MSE
        test, _ = run(f"the authors' alignment: fixed-batch MSE < {AUTHORS_ALIGNMENT_MSE:g} (ours {CONVERGED_MSE:g})",
                      {}, authors)
        result.beside.append(test)
    ids = t.ids(arms[claim["primary_arm"]], claim["runs"]) | (t.ids(arms[claim["primary_arm"]], claim["versus"])
                                                             if "versus" in claim else set())
    result.cells = t.cells(ids, kept_ids, claim.get("x"))
    if "sized_from" in spec.analysis:
        result.power_basis = "sized from exploratory tables: `sensviz.confirm.report`"
    else:
        _power(result, spec, name, claim, standard)
    if primary.interval is not None and primary.verdict == stats.UNRESOLVED:
        units, why = stats.units_to_resolve(primary.interval, direction, margin, alpha)
        result.to_resolve = f"{units} {primary.interval.unit} (now {primary.interval.units:.3g})" if units else why
    return result


def _paired(t: _Tables, analysis: dict, claim: dict, other: str) -> Test:
    """The two arms of each seed, paired: per seed and level kept in both arms (final evaluation meets the filter),
    the primary arm's quantity minus the other's; with `x`, the OLS slope of that difference in x (how the arm
    changes the claim's slope, seed by seed), else its mean. Beside the pre-registered tests, not one of them:
    "differs" says the arms differ."""
    arms, primary = analysis["arms"], claim["primary_arm"]
    label = f"paired arms, {primary} − {other}, seeds kept in both"
    quantity, x = claim["quantity"], claim.get("x")
    missing = [c for c in [quantity] + ([x] if x else []) if c not in t.runs]
    if missing:
        return Test(label, 0, None, stats.UNRESOLVED, f"missing column(s) {missing}")
    kept = {}
    for arm in (primary, other):
        found = t.finished(t.ids(arms[arm], claim["runs"]))
        found = found[kept_by(found, "converged")] if len(found) else found
        kept[arm] = {settings_key(t.plan[rid], set(analysis["paired"])): row
                     for rid, row in found.set_index("run_id").iterrows()}
    shared = sorted(set(kept[primary]) & set(kept[other]))
    diff = pd.Series([float(kept[primary][k][quantity]) - float(kept[other][k][quantity]) for k in shared], dtype=float)
    if x is None:
        test = _attempt(label, len(shared), lambda: stats.mean(diff))
    else:
        levels = _x(pd.DataFrame({x: [float(kept[primary][k][x]) for k in shared]}), x, claim.get("x_scale"))
        test = _attempt(label, len(shared), lambda: stats.slope(levels, diff))
    if test.interval is not None:
        test.verdict, test.bounds = stats.verdict(test.interval, 0), test.interval.bounds(0.95)
    return test


def _power(result: ClaimResult, spec: SweepSpec, name: str, claim: dict, standard) -> None:
    """The power at the smallest effect: of the kept runs the design was sized for, and of those kept so far
    (both with the standard tables' variance)."""
    if standard is None:
        result.power_basis = "no standard tables to take the variance from"
        return
    try:
        design = design_power(spec.source, spec.scale, standard)[name]
    except (ValueError, KeyError, OSError) as err:
        result.power_basis = f"no power: {err}"
        return
    effect, alpha, sd = claim["smallest_effect"], claim["alpha"], design["sd"]
    if claim["estimator"] == "ols_slope":
        levels = [float(c.level) for c in result.cells]
        result.power_design = stats.slope_power({x: design["kept_per_level"] for x in levels}, sd, effect, alpha)
        result.power_now = stats.slope_power({float(c.level): c.kept for c in result.cells}, sd, effect, alpha)
        sized = f"{design['kept_per_level']} kept per level"
    else:
        result.power_design = stats.mean_power(design["kept"], sd, effect, alpha)
        result.power_now = stats.mean_power(result.primary.kept, sd, effect, alpha)
        sized = f"{design['kept']} kept runs"
    where = "/".join(Path(standard).parts[-3:])  # e.g. experiments/results/standard, wherever it was given from
    result.power_basis = (f"smallest effect {effect:g} at alpha {alpha:g}; sd {sd:.3g} from {where} "
                          f"({design['basis']}); sized for {sized}")


def _flat(t: _Tables, spec: SweepSpec, name: str, entry: dict, arm: str | None, picks: dict) -> ClaimResult:
    alpha, margin = 0.05, float(entry["margin"])
    ids = t.ids(picks, entry["runs"])
    rows = t.finished(ids)
    rows = rows[kept_by(rows, entry["filter"])] if len(rows) else rows
    label = "primary" if arm is None else f"arm {arm}"
    if entry["quantity"] not in rows or entry["x"] not in rows:
        test = Test(label, 0, None, stats.UNRESOLVED, f"missing column(s) {[entry['quantity'], entry['x']]}")
        kept_ids: set[str] = set()
    else:
        usable = rows.dropna(subset=[entry["x"], entry["quantity"]])
        x, y = _x(usable, entry["x"], entry.get("x_scale")), usable[entry["quantity"]].astype(float)
        unit = "seeds per n"
        test = _attempt(label, len(usable), lambda: stats.slope(x, y, unit))
        kept_ids = set(usable["run_id"])
    result = ClaimResult(name if arm is None else f"{name} ({arm})", entry["statement"], 0, alpha,
                         _finish(test, 0, alpha, margin), margin=margin, units=entry["units"], reason=entry["reason"])
    result.cells = t.cells(ids, kept_ids, entry["x"])
    if test.interval is not None:
        low, high = test.interval.bounds(1 - 2 * alpha)
        result.equivalent_within = max(abs(low), abs(high))
        result.against_zero = stats.verdict(test.interval, 0)
        if test.verdict == stats.UNRESOLVED:
            units, why = stats.units_to_resolve(test.interval, 0, margin, alpha)
            result.to_resolve = f"{units} {test.interval.unit} (now {test.interval.units:.3g})" if units else why
    return result


def familywise(claims: list[ClaimResult], alpha: float) -> None:
    """Holm's step-down across the claims' primaries (`stats.holm`, a missing p value counts as 1): each claim's
    `holm` and its verdict after it, reproduced only when rejected; a claim Holm does not reject keeps "differs"
    where its own test says so (a finding against the claim, outside the family's error control), else it is
    not resolved."""
    found = stats.holm({c.name: c.p_value if c.p_value is not None else math.nan for c in claims}, alpha)
    for c in claims:
        c.holm = found[c.name]
        c.holm_verdict = stats.REPRODUCED if c.holm[0] else \
            stats.DIFFERS if c.primary.verdict == stats.DIFFERS else stats.UNRESOLVED


def decide(spec_path, scale: str | None, tables, standard=None) -> Decision:
    """Apply the spec's pre-registered analysis of `scale` and its equivalence margins to the tables in
    the folder `tables` (see the module docstring). `standard`: the tables the design's variance came
    from (default: results/standard beside the spec), for the power; None where there are none."""
    spec = load_spec(spec_path, scale)
    if standard is None:
        found = Path(spec_path).parent / "results" / "standard"
        standard = found if found.is_dir() else None
    t = _Tables(spec, tables)
    claims = []
    if spec.analysis:
        claims = [_claim(t, spec, name, claim, standard) for name, claim in spec.analysis["claims"].items()]
        if spec.analysis.get("familywise") == "holm":
            familywise(claims, min(c.alpha for c in claims))
    arms = spec.analysis["arms"] if spec.analysis else {None: {}}
    flat = [_flat(t, spec, name, entry, arm, picks) for name, entry in (spec.equivalence or {}).items()
            for arm, picks in arms.items()]
    done = t.finished(set(t.plan))
    return Decision(str(spec_path), scale, spec.hash, len(t.plan), len(t.runs), len(done), t.other, claims, flat)


# ----------------------------------------------------------------------------- output


def _g(value, digits: int = 3) -> str:
    return "—" if value is None or isinstance(value, float) and not math.isfinite(value) else f"{value:.{digits}g}"


def estimate_text(test: Test) -> str:
    """A test's estimate and interval, '0.636 [0.32, 0.951]' (or why there is none)."""
    if test.interval is None:
        return f"— ({test.reason})"
    low, high = test.bounds
    return f"{_g(test.interval.estimate)} [{_g(low)}, {_g(high)}]"


def _steps(cell: Cell) -> str:
    known = [s for s in cell.converged_steps if s is not None]
    text = f"{min(known)}–{max(known)} (median {int(np.median(known))})" if known else "—"
    unknown = len(cell.converged_steps) - len(known)
    return text + (f", {unknown} kept without one" if unknown else "")


def claim_lines(c: ClaimResult) -> list[str]:
    """A claim's result as plain text lines."""
    level = 1 - c.alpha if c.direction else 1 - 2 * c.alpha
    test = c.primary.interval.test if c.primary.interval else "—"
    lines = [f"{c.name}: {c.statement}",
             f"  primary: {estimate_text(c.primary)} ({level:.0%} interval; {test}; {c.primary.kept} runs) -> "
             f"{c.primary.verdict}"]
    if c.margin is not None:
        wide = c.primary.interval.bounds(1 - c.alpha) if c.primary.interval else (None, None)
        lines.append(f"  {1 - c.alpha:.0%} interval [{_g(wide[0])}, {_g(wide[1])}]; margin ±{_g(c.margin)} {c.units} "
                     f"({c.reason}); equivalent within ±{_g(c.equivalent_within)}; against zero (the old test): "
                     f"{c.against_zero or '—'}")
    for s in c.secondaries:
        mark = {True: "  FRAGILE", False: "", None: "  (not comparable)"}[s.fragile]
        lines.append(f"  secondary {s.label}: {estimate_text(s)} ({s.kept} runs) -> {s.verdict}{mark}")
    for s in c.beside:
        lines.append(f"  beside, {s.label}: {estimate_text(s)} ({s.kept} runs) -> {s.verdict}")
    lines.append("  kept/total per cell: " + "; ".join(
        f"{cell.level}: {cell.kept}/{cell.planned} (in {cell.in_table}, finished {cell.finished}; converged at {_steps(cell)})"
        for cell in c.cells))
    if c.holm is not None:
        p = "—" if c.p_value is None else f"{c.p_value:.3g}"
        lines.append(f"  Holm: p {p} against {c.holm[1]:.3g} -> {c.holm_verdict}")
    if c.power_basis:
        lines.append(f"  power at the smallest effect: designed {_g(c.power_design, 2)}, with the runs kept so far "
                     f"{_g(c.power_now, 2)} ({c.power_basis})")
    if c.to_resolve:
        lines.append(f"  to resolve (measured effect and variance): {c.to_resolve}")
    return lines


def text(d: Decision) -> str:
    """The decision as a plain-text report."""
    state = "all runs in" if d.complete else f"partial: {d.finished} of {d.planned} planned runs finished"
    lines = [f"{d.spec} --scale {d.scale}: {state} ({d.in_table} in the table; spec hash {d.spec_hash[:12]}"
             + (f"; {d.other_spec_rows} rows of another spec left out" if d.other_spec_rows else "") + ")"]
    for c in d.claims + d.flat:
        lines += [""] + claim_lines(c)
    return "\n".join(lines) + "\n"


def _test_dict(test: Test) -> dict:
    iv = test.interval
    return {"label": test.label, "runs": test.kept, "verdict": test.verdict, "fragile": test.fragile,
            "estimate": iv.estimate if iv else None, "low": test.bounds[0] if iv else None,
            "high": test.bounds[1] if iv else None, "test": iv.test if iv else None, "reason": test.reason}


def to_dict(d: Decision) -> dict:
    """The decision as plain data (JSON)."""
    def claim(c: ClaimResult) -> dict:
        return {"name": c.name, "statement": c.statement, "direction": c.direction, "alpha": c.alpha,
                "primary": _test_dict(c.primary), "secondaries": [_test_dict(s) for s in c.secondaries],
                "beside": [_test_dict(s) for s in c.beside], "margin": c.margin, "units": c.units,
                "equivalent_within": c.equivalent_within, "against_zero": c.against_zero,
                "cells": [vars(cell) for cell in c.cells], "power_design": c.power_design, "power_now": c.power_now,
                "power_basis": c.power_basis, "to_resolve": c.to_resolve, "p_value": c.p_value,
                "holm": list(c.holm) if c.holm else None, "holm_verdict": c.holm_verdict}

    return {"spec": d.spec, "scale": d.scale, "spec_hash": d.spec_hash, "planned": d.planned, "in_table": d.in_table,
            "finished": d.finished, "complete": d.complete, "other_spec_rows": d.other_spec_rows,
            "claims": [claim(c) for c in d.claims], "flat": [claim(c) for c in d.flat]}
