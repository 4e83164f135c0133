"""A confirmatory design sized from an exploratory one (issue 37): its claims, their power, seeds and cost.

A scale whose analysis names `sized_from = {scale = "...", tables = "..."}` (an exploratory scale of the same
spec and the folder of its tables) is sized here. Each claim's pre-registered primary test (arm, runs, filter,
quantity, estimator, error; `preregistered`) is first applied to the exploratory tables: the exploratory
estimate, with its standard error se at its units (kept runs per level of n, or per group).

- **Level.** Holm's step-down compares the smallest of m p values with alpha / m; a design sized at alpha / m
  has its power at every step of the procedure (`level`).
- **Effect.** Half the exploratory estimate (`HALF`): the design is powered for an effect half as large as the
  one the exploratory tables suggest (they picked these claims, so their estimates are biased upwards).
- **Units.** A directional claim: the fewest kept units k with P(estimate / se_k > t_{1 - level/2}) >= power at
  that effect, se_k = se sqrt(units / k) (`stats.Interval.fewest_units`). A flat claim, two one-sided tests
  against ±margin (`stats.p_value`), at the true value its spec's `smallest_effect` states (half the exploratory
  estimate where that is inside the margin): the fewest k with P(margin - |value| > t_{1 - level} se_k) >= power
  (the nearer bound decides; `stats.power_with`).
- **Seeds.** Per cell (task, n) of the claim: ceil(k / keep rate / draws), the keep rate of that cell and arm in
  the exploratory tables under the claim's filter, the draws of a random search per seed (an offset difference's
  k, the kept runs of all its tasks at the last level, is shared among that level's cells). The first arm of
  `arms` is the base, which every seed runs (the fixed budget); a claim on another arm plans its seeds there and in
  the base arm, as pairs (`grid`).
- **Cost.** The two arms of a seed train as two members of one vmapped run (`docs/pairing.md`), which steps
  until its last member stops: a pair costs twice the longer of the two arms' time per run in that cell, a base
  run alone its own (`seconds_per_seed`: the tables' recorded `wall_s`, a job's time over its runs, per step, times
  the design's steps). CPU-hours per claim: alone, and what it adds to the claims ranked before it
  (`analysis.rank`).
- **Order.** The sweep runs a sized design's jobs by (the first ranked claim that needs the run, its seed)
  (`order`): a sweep stopped early holds whole claims, each with seeds in every cell it needs.

`report` prints the design; `state` sets its rows so far beside the exploratory verdicts (the fidelity pages).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from . import stats
from .claims import kept_by
from .preregistered import _Tables, _test, decide
from .sweeps import SweepSpec, load_spec, spent_hours

HALF = 0.5
"""The effect the design is powered for, as a fraction of the exploratory estimate."""


@dataclass
class ClaimSize:
    """One claim of a confirmatory design, sized from the exploratory tables."""

    name: str
    statement: str
    arm: str  # the primary test's arm
    direction: int  # +1, -1; 0 for a flat claim (two one-sided tests against ±margin)
    margin: float | None
    exploratory: str  # the exploratory estimate and interval, in words
    verdict: str  # the exploratory tables' verdict under the claim's own rule (unadjusted)
    interval: stats.Interval | None
    effect: float | None  # the value the power is computed at
    level: float  # alpha / m
    power: float
    units: int | None  # kept units per level (or per group) for that power
    keep: dict = field(default_factory=dict)  # (task, n) -> keep rate in the exploratory tables
    seeds: dict = field(default_factory=dict)  # (task, n) -> seeds
    reason: str = ""  # why there is no size
    kept: int = 0  # the runs the exploratory test kept

    def _distance(self) -> tuple[float, float]:
        """(the distance of `effect` from the bound it must clear, the t quantile of that bound)."""
        if self.direction == 0:
            return self.margin - abs(self.effect), 1 - self.level
        return abs(self.effect), 1 - self.level / 2

    def power_at(self, units: float) -> float:
        """The power at `units` kept units (per level or per group) at `effect` and `level`."""
        if self.interval is None or self.effect is None:
            return math.nan
        return stats.power_with(self.interval, units, *self._distance())

    def sized(self) -> ClaimSize:
        """Set `units`, the fewest for `power` at `effect` and `level` (or `reason`, why none); returns itself."""
        distance, quantile = self._distance()
        self.units = self.interval.fewest_units(distance, quantile, self.power) if distance > 0 else None
        if self.units is None:
            self.reason = "the effect cannot be powered (it sits at or beyond the margin, or needs too many runs)"
        return self


def _picks(claim: dict) -> list[dict]:
    """The settings that pick a claim's runs: its `runs`, and its `versus` runs."""
    return [claim["runs"]] + ([claim["versus"]] if "versus" in claim else [])


def _cells(spec: SweepSpec, arm: dict, claim: dict) -> dict[tuple[str, int], dict]:
    """The claim's cells (task, n) in the design's plan, each with the settings that pick its runs."""
    return {(s["task"], s["n"]): picks for picks in _picks(claim) for s in spec.runs
            if all(s.get(k) == v for k, v in {**arm, **picks}.items())}


def _keep_rates(t: _Tables, arm: dict, claim: dict, cells: dict) -> dict:
    rates = {}
    for (task, n), picks in sorted(cells.items()):
        rows = t.finished(t.ids(arm, picks, {"task": task, "n": n}))
        rates[(task, n)] = float(kept_by(rows, claim["filter"]).mean()) if len(rows) else math.nan
    return rates


def _draws(spec: SweepSpec, arm: dict) -> int:
    """Runs per seed in one cell of an arm: the random search's draws per grid point (1 without one)."""
    counts: dict = {}
    for s in spec.runs:
        if all(s.get(k) == v for k, v in arm.items()):
            key = (s["task"], s["n"], s["seed"])
            counts[key] = counts.get(key, 0) + 1
    return max(counts.values(), default=1)


def _tables(spec_path, spec: SweepSpec, root) -> _Tables:
    """The exploratory tables a design was sized from (`sized_from`), with the exploratory scale's plan."""
    source = spec.analysis["sized_from"]
    root = Path(root) if root is not None else Path(spec_path).resolve().parent.parent
    return _Tables(load_spec(spec_path, source["scale"]), root / source["tables"])


def size(spec_path, scale: str, root=None) -> list[ClaimSize]:
    """Every claim of the scale's analysis, sized from its `sized_from` tables (see the module docstring).
    `root`: where the tables' path is relative to (default: the spec's folder's parent, the repository)."""
    spec = load_spec(spec_path, scale)
    analysis = spec.analysis or {}
    if "sized_from" not in analysis:
        raise ValueError(f"{spec_path} --scale {scale}: its analysis names no exploratory tables (sized_from)")
    t = _tables(spec_path, spec, root)
    arms, claims = analysis["arms"], analysis["claims"]
    found = []
    for name, claim in claims.items():
        direction = 0 if "margin" in claim else (1 if claim["smallest_effect"] > 0 else -1)
        level = claim["alpha"] / len(claims)
        test, _ = _test(t, arms, claim, "exploratory", claim["primary_arm"], claim["filter"], claim["error"], None, t.limit)
        iv = test.interval
        verdict = stats.decide(iv, direction, claim["alpha"], claim.get("margin")) if iv else stats.UNRESOLVED
        text = "—" if iv is None else (f"{iv.estimate:.3g} [{iv.bounds(1 - claim['alpha'])[0]:.3g}, "
                                       f"{iv.bounds(1 - claim['alpha'])[1]:.3g}] ({iv.test}, {test.kept} runs)")
        effect = claim["smallest_effect"] if direction == 0 else None if iv is None else HALF * iv.center
        result = ClaimSize(name, claim["statement"], claim["primary_arm"], direction, claim.get("margin"), text, verdict, iv,
                           effect, level, claim["power"], None, reason=test.reason, kept=test.kept)
        result.keep = _keep_rates(t, arms[claim["primary_arm"]], claim, _cells(spec, arms[claim["primary_arm"]], claim))
        if iv is not None:
            result.sized()
        if result.units is not None:
            per_cell, draws = result.units, _draws(spec, arms[claim["primary_arm"]])
            if claim["estimator"] == "offset_difference":  # the units are all groups' kept runs at the last level
                (_, (_, last)), = claim["levels"].items()
                per_cell = result.units / sum(n == last for _, n in result.keep)
            result.seeds = {cell: math.ceil(per_cell / rate / draws - 1e-9) if rate > 0 else None
                            for cell, rate in result.keep.items()}
        found.append(result)
    return found


def grid(sizes: list[ClaimSize], arms: list[str]) -> dict[tuple[str, str, int], int]:
    """Seeds per (arm, task, n): per cell, the most any claim needs in its primary arm; the base arm (`arms[0]`)
    also holds every other arm's seeds (their pairs)."""
    seeds: dict[tuple[str, str, int], int] = {}
    for s in sizes:
        for (task, n), count in s.seeds.items():
            for arm in {s.arm, arms[0]}:
                if count is not None:
                    seeds[(arm, task, n)] = max(seeds.get((arm, task, n), 0), count)
    return dict(sorted(seeds.items()))


def seconds_per_seed(spec_path, scale: str, root=None) -> dict[tuple[str, str, int], float]:
    """Seconds of one seed's runs per (arm, task, n): the mean recorded wall time of the exploratory tables' runs
    (`sized_from`) of that arm and cell that some claim's runs are, per step, times the design's steps there and
    its draws per seed."""
    spec = load_spec(spec_path, scale)
    t = _tables(spec_path, spec, root)
    done = t.finished(set(t.plan))
    claims = spec.analysis["claims"].values()
    found = {}
    for arm, picks in spec.analysis["arms"].items():
        mine = set().union(*(t.ids(picks, p) for claim in claims for p in _picks(claim)))
        planned = pd.DataFrame([s for s in spec.runs if all(s.get(k) == v for k, v in picks.items())])
        for (task, n), group in done[done["run_id"].isin(mine)].groupby(["task", "n"]):
            steps = planned[(planned["task"] == task) & (planned["n"] == n)]["steps"].mean()
            found[(arm, task, int(n))] = float((group["wall_s"] / group["steps"]).mean() * steps * _draws(spec, picks))
    return found


def cpu_hours(cells: dict[tuple[str, str, int], int], seconds: dict, arms: list[str]) -> float:
    """CPU-hours of a grid: per cell a pair (a seed in the base arm and another) costs twice the longer arm's
    time (one vmapped run steps until its last member stops), a base run alone its own time."""
    total = 0.0
    for (arm, task, n), count in cells.items():
        if arm != arms[0]:
            continue
        pairs = max((cells.get((other, task, n), 0) for other in arms[1:]), default=0)
        longest = max(seconds[(a, task, n)] for a in arms)
        total += pairs * 2 * longest + (count - pairs) * seconds[(arms[0], task, n)]
    return total / 3600


def costs(sizes: list[ClaimSize], seconds: dict, arms: list[str], rank: list[str]) -> dict[str, tuple[float, float]]:
    """Per claim: (CPU-hours of its own grid alone, CPU-hours it adds to the claims ranked before it)."""
    found, before = {}, 0.0
    by_name = {s.name: s for s in sizes}
    ranked = [by_name[name] for name in rank] + [s for s in sizes if s.name not in rank]
    for i, s in enumerate(ranked):
        upto = cpu_hours(grid(ranked[: i + 1], arms), seconds, arms)
        found[s.name] = (cpu_hours(grid([s], arms), seconds, arms), upto - before)
        before = upto
    return found


def order(spec_path, scale: str, root=None):
    """The sweep's order of a sized design's runs: a function of a run's settings giving (the place in `rank` of
    the first claim that needs it, its seed); runs no claim needs go last."""
    spec = load_spec(spec_path, scale)
    rank = list(spec.analysis.get("rank", []))
    by_name = {s.name: s for s in size(spec_path, scale, root)}
    first = {}
    for s in spec.runs:
        cell = (s["task"], s["n"])
        first[cell] = min(first.get(cell, s["seed"]), s["seed"])
    ranked = [by_name[name] for name in rank] + [s for s in by_name.values() if s.name not in rank]
    arms = spec.analysis["arms"]

    def key(settings: dict) -> tuple[int, int]:
        cell = (settings["task"], settings["n"])
        for place, s in enumerate(ranked):
            count = s.seeds.get(cell)
            if count is not None and settings["seed"] < first[cell] + count and any(
                    all(settings.get(k) == v for k, v in arms[arm].items()) for arm in {s.arm, list(arms)[0]}):
                return place, settings["seed"]
        return len(ranked), settings["seed"]

    return key


def report(spec_path, scale: str, root=None) -> str:
    """The design as text: per claim the exploratory estimate, its verdict, the effect and level it is sized for,
    the units and the power, seeds per cell, and the CPU-hours (alone, and added in rank order); the grid."""
    sizes = size(spec_path, scale, root)
    spec = load_spec(spec_path, scale)
    arms, rank = list(spec.analysis["arms"]), list(spec.analysis.get("rank", []))
    seconds = seconds_per_seed(spec_path, scale, root)
    spent = costs(sizes, seconds, arms, rank)
    lines = [f"{spec_path} --scale {scale}, sized from the {spec.analysis['sized_from']['scale']} tables "
             f"({spec.analysis['sized_from']['tables']}): power at half the exploratory estimate (a flat claim: at its "
             f"smallest_effect), level alpha/m (m = {len(sizes)} primaries, Holm)"]
    for s in sorted(sizes, key=lambda s: rank.index(s.name) if s.name in rank else len(rank)):
        rule = f"flat within ±{s.margin:g} (two one-sided tests)" if s.direction == 0 else \
            ("directional, > 0" if s.direction > 0 else "directional, < 0")
        lines.append(f"  {s.name} ({rule}; {s.arm} arm): exploratory {s.exploratory} -> {s.verdict}")
        if s.units is None:
            lines.append(f"    not sized: {s.reason}")
            continue
        per = ", ".join(f"{task} n={n}: {count} (keep {s.keep[(task, n)]:.2f})" for (task, n), count in s.seeds.items())
        lines.append(f"    sized for {s.effect:.3g} at level {s.level:.4g}: {s.units} kept per "
                     f"{'group' if s.interval.unit == 'seeds per group' else 'level'} for power "
                     f"{s.power_at(s.units):.2f}; seeds {per}")
        alone, added = spent[s.name]
        lines.append(f"    about {alone:.1f} CPU-hours alone, {added:.1f} added in rank order")
    cells = grid(sizes, arms)
    lines.append("  grid (seeds per arm and cell): " + "; ".join(f"{arm} {task} n={n}: {count}"
                                                                for (arm, task, n), count in cells.items()))
    runs = sum(count * _draws(spec, spec.analysis["arms"][arm]) for (arm, _, _), count in cells.items())
    lines.append(f"  total: {runs} runs, about {cpu_hours(cells, seconds, arms):.1f} CPU-hours")
    return "\n".join(lines)


def state(spec_path, scale: str, tables, root=None) -> pd.DataFrame:
    """The design beside the exploratory verdicts, one row per claim: the exploratory estimate and verdict, the
    power the exploratory tables had for half their own estimate at level alpha/m (they were not designed for
    these claims), the power the design was sized for, the rows in so far, the estimate on them, the claim's own
    verdict and Holm's, the power at the units kept so far, and the CPU-hours of the rows of its runs so far (both
    arms; a row two claims share counts for each). `tables`: the sweep folder of the design's rows (one that does
    not exist yet: no row in)."""
    spec_path = str(spec_path)
    sizes = size(spec_path, scale, root)
    folder = Path(tables)
    if not (folder / "runs.parquet").is_file():
        decision = None
    else:
        decision = {c.name: c for c in decide(spec_path, scale, folder).claims}
    spec = load_spec(spec_path, scale)
    planned = len(spec.runs)
    finished = 0 if decision is None else int(rows_in(spec_path, scale, folder)["finished"].sum())
    table = _Tables(spec, folder) if decision is not None else None
    rows = []
    for s in sizes:
        c = decision.get(s.name) if decision else None
        units_now = c.primary.interval.units if c and c.primary.interval else 0
        rows.append({
            "claim": s.name, "statement": s.statement, "exploratory": f"{s.exploratory} {s.verdict}",
            "power then": s.power_at(s.interval.units) if s.interval else math.nan,
            "power designed": s.power_at(s.units) if s.units else math.nan,
            "rows in": f"{finished} of {planned}",
            "confirm estimate": "—" if not c or not c.primary.interval else
            f"{c.primary.interval.estimate:.3g} ({c.primary.kept} runs) {c.primary.verdict}",
            "estimate": "—" if not c or not c.primary.interval else f"{c.primary.interval.estimate:.3g}",
            "kept": c.primary.kept if c and c.primary.interval else 0,
            "after Holm": c.holm_verdict if c and c.holm else stats.UNRESOLVED,
            "power now": s.power_at(units_now) if units_now else math.nan,
            "CPU-hours": 0.0 if table is None else spent_hours(table.finished(
                set().union(*(table.ids(p) for p in _picks(spec.analysis["claims"][s.name])))))})
    return pd.DataFrame(rows)


def rows_in(spec_path, scale: str, tables) -> pd.DataFrame:
    """Per cell (task, n) and arm: the runs planned and finished so far in `tables` (a sweep folder)."""
    spec = load_spec(spec_path, scale)
    t = _Tables(spec, tables)
    done = set(t.finished(set(t.plan))["run_id"])
    rows = []
    for arm, picks in spec.analysis["arms"].items():
        ids = t.ids(picks)
        frame = pd.DataFrame([{**t.plan[rid], "run_id": rid} for rid in ids])
        for (task, n), group in frame.groupby(["task", "n"]):
            rows.append({"arm": arm, "task": task, "n": int(n), "planned": len(group),
                         "finished": int(group["run_id"].isin(done).sum())})
    return pd.DataFrame(rows)
