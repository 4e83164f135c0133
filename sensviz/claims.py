"""Claims and their tests, apart from the page that prints them: numbers as text, a claim's interval and
verdict, its secondaries and survivorship, and the helpers each experiment's fidelity section writes with.

Each experiment (`sensviz.experiments.<name>`) writes its sections of the fidelity page with these: a `Claim`
is one quantity with a 95 % interval (`sensviz.stats`), the claimed sign or, for a flat claim, the equivalence
margin of its spec (`[equivalence.KEY]`), decided by `judge`; `Tables` is one experiment's sweep at one scale
(read by `sensviz.results.load`). Nothing here reads the experiment registry or the training code.

The convergence filter's threshold is `sensviz.convergence.CONVERGED_MSE` (written once): the sweeps'
`meets_filter` and the pages' `threshold` read it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import stats
from .convergence import CONVERGED_MSE
from .figures import TASK_COLORS

TASK_ORDER = tuple(TASK_COLORS)
TASK_NAMES = {"parity": "PARITY", "majority": "MAJORITY", "first": "FIRST", "mean": "MEAN"}

PROXY = "sharpness proxy ×4"
ACCURATE = 0.99
"""The secondary filter: final evaluation accuracy at least this (the paper's filter is on the MSE)."""
LIMIT = "lim L_ρ/ρ²"


# ----------------------------------------------------------------------------- numbers as text


def num(x, pad: bool = True) -> str:
    """A number with 3 significant digits, trailing zeros kept unless `pad` is False (integers as they
    are, text as it is; '—' for a missing value)."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    if isinstance(x, (str, bool, np.bool_)):
        return str(x)
    if isinstance(x, (int, np.integer)) or float(x).is_integer() and abs(x) < 1e6:
        return str(int(x))
    if abs(float(x)) >= 1000:
        return f"{x:.0f}"
    return f"{x:#.3g}".rstrip(".") if pad else f"{x:.3g}"  # 122.4 -> '122', not '122.'


def span(values) -> str:
    """'a' or 'a–b' for the range of some numbers."""
    values = pd.Series(values, dtype=float).dropna()
    if values.empty:
        return "—"
    low, high = num(values.min()), num(values.max())
    return low if low == high else f"{low}–{high}"


def listing(values) -> str:
    """'4, 6, 8, 10' (up to 6 values), else 'first–last (k values)'."""
    values = sorted(pd.Series(values).dropna().unique().tolist())
    if len(values) > 6:
        return f"{num(values[0], False)}–{num(values[-1], False)} ({len(values)} values)"
    return ", ".join(num(v, False) for v in values) or "—"


def interval_text(interval: stats.Interval | None) -> str:
    """'estimate [low, high]'."""
    if interval is None:
        return "—"
    return f"{num(interval.estimate)} [{num(interval.low)}, {num(interval.high)}]"


def mean_sd(values) -> str:
    values = pd.Series(values, dtype=float).dropna()
    if values.empty:
        return "—"
    if len(values) == 1:
        return f"{num(values.iloc[0])} (1 run)"
    return f"{num(values.mean())} ± {num(values.std())}"


def table(header: list[str], rows: list[list]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- claims


@dataclass
class Secondary:
    """A claim's named secondary analysis: the same quantity under another filter, error type or estimator."""

    label: str  # what differs from the primary, e.g. "HC3 errors"
    interval: stats.Interval | None
    reason: str = ""  # why there is no interval
    margin: float | None = None  # a flat secondary's own margin, where it has one (else the claim's)


def judge(interval: stats.Interval | None, direction: int, margin: float | None) -> str:
    """The page's rule: a flat claim (direction 0) with a margin by `stats.equivalence` (90 % interval
    inside ±margin: reproduced; 95 % interval wholly outside: differs); any other by `stats.verdict`
    (95 % interval excluding zero, on the claimed side or the other); no interval: not resolved."""
    if interval is None:
        return stats.UNRESOLVED
    if direction == 0 and margin is not None:
        return stats.equivalence(interval, margin)
    return stats.verdict(interval, direction)


@dataclass(frozen=True)
class Survival:
    """What the filter left of the runs behind a claim: kept / total per cell (and convergence steps) as
    text, and the cell that kept the smallest share when it dropped any ('n = 14: 3/6 kept')."""

    text: str
    weakest: str = ""
    kept: int = 0  # the runs the filter kept, in all cells

    def __str__(self) -> str:
        return self.text


@dataclass
class Claim:
    """One claim as tested: the interval of one quantity, the claimed sign (or, for a flat claim, its
    equivalence margin), the runs the filter kept of those it tested, and its secondary analyses."""

    experiment: str
    statement: str  # the claim, in words
    quantity: str  # what the interval is of
    direction: int  # +1: claimed above zero, -1: below, 0: no effect
    interval: stats.Interval | None
    reason: str = ""  # why there is no interval
    key: str = ""  # its label on every page, e.g. L1: the same claim has the same key at every scale
    paper: bool = True  # one of the paper's claims (counted in the tally); False: one of our own checks
    margin: dict | None = None  # a flat claim's `[equivalence.KEY]` entry of its spec (margin, units, reason)
    survivors: Survival | str = ""  # kept / total per cell and the kept runs' convergence steps
    secondaries: list[Secondary] = field(default_factory=list)

    @property
    def kept(self) -> int:
        """The runs the filter kept behind it (0 where its survivorship is words only)."""
        return getattr(self.survivors, "kept", 0)

    @property
    def margin_value(self) -> float | None:
        return float(self.margin["margin"]) if self.margin else None

    @property
    def verdict(self) -> str:
        return judge(self.interval, self.direction, self.margin_value)

    def secondary_verdict(self, s: Secondary) -> str:
        return judge(s.interval, self.direction, s.margin if s.margin is not None else self.margin_value)

    @property
    def fragile(self) -> list[str]:
        """The secondaries with an interval whose verdict differs from the primary's."""
        return [s.label for s in self.secondaries if s.interval is not None and self.secondary_verdict(s) != self.verdict]

    def needed(self) -> str:
        """The units that would resolve an unresolved claim by the page's rule, from the measured effect and
        variance (`stats.units_to_resolve`: a flat claim against its margin; never from 2 degrees of freedom
        or fewer)."""
        if self.interval is None:
            return self.reason
        if self.verdict != stats.UNRESOLVED:
            return "—"
        if self.direction == 0 and self.margin is None:
            return "no margin: a flat claim without one can only differ"
        half, why = stats.units_to_resolve(self.interval, self.direction, self.margin_value)
        if half is None:
            return why
        most, _ = stats.units_to_resolve(self.interval, self.direction, self.margin_value, power=0.8)
        now = f"{self.interval.units:.3g}"
        return (f"{half} {self.interval.unit} (now {now}; {most if most else f'more than {stats.MAX_UNITS}'} "
                "for 80 % power)")

    def margin_text(self) -> str:
        if not self.margin:
            return ""
        return f"±{num(self.margin_value, False)} {self.margin.get('units', '')}".strip()

    def secondaries_text(self) -> str:
        """Each secondary's interval and verdict, FRAGILE where its verdict differs from the primary's."""
        parts = []
        for s in self.secondaries:
            if s.interval is None:
                parts.append(f"{s.label}: — ({s.reason})")
                continue
            v = self.secondary_verdict(s)
            mark = " **fragile**" if s.label in self.fragile else ""
            parts.append(f"{s.label}: {interval_text(s.interval)}, {v}{mark}")
        return "; ".join(parts) or "—"


def attempt(test: Callable[[], stats.Interval]) -> tuple[stats.Interval | None, str]:
    """The test's interval, or None and the reason the tables cannot give it."""
    try:
        return test(), ""
    except (ValueError, KeyError, np.linalg.LinAlgError) as err:
        return None, f"missing column {err}" if isinstance(err, KeyError) else str(err)


def cell(test: Callable[[], stats.Interval]) -> str:
    """A table cell: the test's interval, or why there is none."""
    interval, reason = attempt(test)
    return interval_text(interval) if interval else f"— ({reason})"


def claim(experiment: str, statement: str, quantity: str, direction: int, test: Callable[[], stats.Interval],
          key: str = "", paper: bool = True, margin: dict | None = None, survivors: Survival | str = "",
          secondaries: dict[str, Callable[[], stats.Interval]] | None = None,
          secondary_margins: dict[str, dict | None] | None = None) -> Claim:
    """Run the test and its secondaries (label -> test); a table that cannot test the claim gives the reason
    instead of an interval. A flat claim is decided against `margin` (its spec's `[equivalence.KEY]`)."""
    found = []
    for label, other in (secondaries or {}).items():
        entry = (secondary_margins or {}).get(label)
        found.append(Secondary(label, *attempt(other), float(entry["margin"]) if entry else None))
    return Claim(experiment, statement, quantity, direction, *attempt(test), key=key, paper=paper, margin=margin,
                 survivors=survivors, secondaries=found)


def claims_table(claims: list[Claim]) -> str:
    """A section's claims with their keys, verdicts, survivorship, secondaries and the units to resolve."""
    rows = [[c.key + ("" if c.paper else " (ours)"), c.statement, c.quantity
             + (f" (margin {c.margin_text()}: {c.margin.get('reason', '')})" if c.margin else ""),
             interval_text(c.interval), c.interval.test if c.interval else "—", f"**{c.verdict}**",
             str(c.survivors) or "—", c.secondaries_text(), c.needed()] for c in claims]
    return table(["#", "claim", "quantity", "estimate [95 % interval]", "test", "verdict",
                  "kept / total (convergence step of the kept runs)", "secondaries", "to resolve (measured variance)"],
                 rows)


# ----------------------------------------------------------------------------- tables and setup


@dataclass
class Tables:
    """One experiment's sweep at the chosen scale, with the spec's paper scale beside it."""

    experiment: str
    runs: pd.DataFrame  # settings the spec left at their defaults filled in
    history: pd.DataFrame
    paper: pd.DataFrame | None  # the runs of the spec's `paper` scale (settings only), if found
    margins: dict = field(default_factory=dict)  # the spec's `[equivalence]` entries, by claim key

    def finished(self) -> pd.DataFrame:
        return self.runs[self.runs["status"] == "finished"] if "status" in self.runs else self.runs

    def kept(self, column: str = "converged") -> pd.DataFrame:
        done = self.finished()
        return done[done[column].fillna(False).astype(bool)] if column in done else done.iloc[0:0]

    def kept_accurate(self) -> pd.DataFrame:
        """The runs the secondary filter keeps: final evaluation accuracy >= `ACCURATE` where the task has
        an accuracy (MEAN has none: there the paper's MSE filter)."""
        done = self.finished()
        if "eval_accuracy" not in done:
            return done.iloc[0:0]
        accurate = done["eval_accuracy"] >= ACCURATE
        mse = done["converged"].fillna(False).astype(bool) if "converged" in done else False
        return done[accurate | (done["eval_accuracy"].isna() & mse)]

    def margin(self, key: str) -> dict | None:
        """A flat claim's equivalence margin (`[equivalence.KEY]` of the experiment's spec), if written down."""
        return self.margins.get(key)

    def survivors(self, rows: pd.DataFrame, by: list[str], column: str = "converged") -> Survival:
        """Kept / total per cell of `rows` (runs of this table) by the filter `column` and, for the paper's
        filter ("converged"), the step at which the kept runs first met it (`convergence_steps`), as
        'n = 4: 5/6, 8: 6/6; kept runs converged at step 500–1500 (median 750)', and the cell that kept the
        smallest share."""
        if rows.empty:
            return Survival("no runs")
        counts = stats.dropped(rows, by, column)
        names = [" ".join(task_name(row[b]) if b in ("task", "arch") else f"{b} = {num(row[b], False)}" for b in by)
                 + f": {int(row['kept'])}/{int(row['runs'])}" for _, row in counts.iterrows()]
        text = ", ".join(names)
        share = counts["kept"] / counts["runs"]
        weakest = f"{names[int(share.to_numpy().argmin())]} kept" if share.min() < 1 else ""
        kept = rows[rows[column].fillna(False).astype(bool) & (rows["status"] == "finished")] \
            if column in rows and "status" in rows else rows.iloc[0:0]
        steps = self.convergence_steps(kept) if column == "converged" else pd.Series(dtype=float)
        if len(steps):
            text += f"; kept runs converged at step {span(steps)} (median {num(steps.median(), False)})"
        return Survival(text, weakest, int(counts["kept"].sum()))

    def convergence_steps(self, kept: pd.DataFrame) -> pd.Series:
        """The step at which each kept run first met the filter, by run id: its `converged_step` where the
        table recorded one, else from the history; none for scratchpad models, whose filter (the
        autoregressive accuracy) is measured once, at the end. A table may hold both kinds of rows (a
        rerun's rows beside earlier ones)."""
        kept = kept[kept["arch"] != "scratchpad"] if "arch" in kept else kept
        if kept.empty:
            return pd.Series(dtype=float)
        recorded = (kept.set_index("run_id")["converged_step"] if "converged_step" in kept
                    else pd.Series(index=kept["run_id"], dtype=float))
        missing = recorded.index[recorded.isna()]
        if len(missing) and "eval_loss" in self.history:
            recorded.loc[missing] = first_met(self.history, threshold(self.runs)).reindex(missing).to_numpy()
        return recorded.dropna()


SETTING_LABELS = {
    "arch": "architecture", "d_model": "width d", "n_layers": "layers", "batch_size": "batch",
    "steps": "steps", "lr": "learning rate", "weight_decay": "weight decay", "n": "input length n",
    "train_size": "training inputs", "seed": "seeds", "proxy_draws": "proxy noise draws",
    "directions": "directions of L_ρ", "measure_every": "measured every (steps)",
}


def setting_text(frame: pd.DataFrame | None, column: str) -> str:
    """A setting's values in a runs table as the setup table shows them (seeds counted, lengths listed)."""
    if frame is None or column not in frame:
        return "—"
    if column == "seed":
        return num(frame["seed"].nunique())
    if column == "arch":
        return ", ".join(sorted(frame["arch"].dropna().unique()))
    return listing(frame[column])


def setup_table(t: Tables) -> str:
    rows = [[label, setting_text(t.runs, column), setting_text(t.paper, column)]
            for column, label in SETTING_LABELS.items() if column in t.runs]
    if "wall_s" in t.runs:
        rows.append(["wall time of the runs (sum, minutes)", num(t.runs["wall_s"].sum() / 60), "—"])
    return table(["setting", "these tables", "the spec's paper scale"], rows)


def threshold(runs: pd.DataFrame) -> float:
    """The filter's evaluation-MSE threshold on the runs' loss scale: `CONVERGED_MSE` on {0,1} targets, four times
    that on ±1 targets (the sweeps' `experiments.converged_mse`)."""
    scale = runs["pm1_scale"].dropna() if "pm1_scale" in runs else pd.Series(dtype=float)
    return CONVERGED_MSE * 4.0 / (scale.iloc[0] if len(scale) else 4.0)


def runs_line(t: Tables, by: list[str], column: str = "converged", rule: str | None = None) -> str:
    """Runs in the table, kept by the filter, dropped by it (which, with their evaluation MSE), failed,
    and how close the kept runs came to the filter's threshold."""
    limit = threshold(t.runs)
    rule = rule or f"final evaluation MSE < {num(limit, False)}, the paper's filter"
    counts = stats.dropped(t.runs, by, column)
    text = (f"**Runs:** {counts['runs'].sum()} in the table, {counts['finished'].sum()} finished, "
            f"{counts['kept'].sum()} kept ({rule})")
    dropped = counts[counts["dropped"] > 0]
    if len(dropped):
        done = t.runs[t.runs["status"] == "finished"]
        out = done[~done[column].fillna(False).astype(bool)]
        parts = [" ".join(f"{b} = {num(row[b], False)}" for b in by) + f" ×{int(row['dropped'])}"
                 for _, row in dropped.iterrows()]
        text += f"; dropped by the filter: {', '.join(parts)}"
        if "eval_loss" in out:
            text += f" (final evaluation MSE {span(out['eval_loss'])})"
    failed = t.runs[t.runs["status"] != "finished"] if "status" in t.runs else t.runs.iloc[0:0]
    if len(failed):
        errors = sorted(set(failed["error"].fillna("no error recorded").astype(str).str.slice(0, 120)))
        text += f"; {len(failed)} failed ({'; '.join(errors)})"
    kept = t.kept(column)
    mse = kept[kept["arch"] != "scratchpad"]["eval_loss"] if "eval_loss" in kept else pd.Series(dtype=float)
    if column == "converged" and len(mse):
        text += (f". The kept run closest to the threshold ended at evaluation MSE {num(mse.max())}, "
                 f"{num(limit - mse.max())} below it")
    pad = kept[kept["arch"] == "scratchpad"]
    if "autoregressive_accuracy" in pad and len(pad):
        text += (f"; the lowest autoregressive accuracy kept is {num(pad['autoregressive_accuracy'].min())}")
    return text + "."


def tasks_in(frame: pd.DataFrame) -> list[str]:
    """The tasks in a table, PARITY, MAJORITY, FIRST, MEAN first (`TASK_ORDER`), then others by name."""
    present = list(frame["task"].dropna().unique()) if "task" in frame else []
    return [task for task in TASK_ORDER if task in present] + sorted(set(present) - set(TASK_ORDER))


def task_name(task: str) -> str:
    """A task as the page names it ('PARITY'), or its label."""
    return TASK_NAMES.get(task, task)


def rows_where(frame: pd.DataFrame, **where) -> pd.DataFrame:
    """The rows of `frame` whose columns equal the given values."""
    mask = np.ones(len(frame), dtype=bool)
    for column, value in where.items():
        mask &= (frame[column] == value).to_numpy()
    return frame[mask]


def paper_lengths(t: Tables) -> str:
    """' (The spec's paper scale: n = ....)' when the spec has a paper scale with lengths, else ''."""
    if t.paper is None or "n" not in t.paper:
        return ""
    return f" (The spec's paper scale: n = {listing(t.paper['n'])}.)"



def phases_of(t: Tables, kept: pd.DataFrame) -> pd.DataFrame:
    """Per kept run: the fixed batch's convergence step and the measurements at the start, at
    convergence, at their peak and at the end."""
    limit = threshold(t.runs)
    rows = []
    for _, run in kept.sort_values(["weight_decay", "seed"]).iterrows():
        h = t.history[t.history["run_id"] == run["run_id"]].sort_values("step")
        if h.empty:
            continue
        below = h[h["loss"] < limit]
        at = below.iloc[0] if len(below) else None
        before = h[(h["step"] < at["step"]) & (h["loss"] >= 100 * limit)] if at is not None else h.iloc[0:0]
        rows.append({
            "seed": run["seed"], "weight_decay": run["weight_decay"], "steps": h["step"].iloc[-1],
            "converged_step": None if at is None else at["step"],
            "window": None if at is None or before.empty else at["step"] - before["step"].iloc[-1],
            **{f"{c}_{when}": (row[c] if row is not None else math.nan)
               for c in ("sharpness_proxy_pm1", "param_norm", "log_authors_blowup")
               for when, row in (("start", h.iloc[0]), ("converged", at), ("end", h.iloc[-1]))},
            "sharpness_proxy_pm1_peak": h["sharpness_proxy_pm1"].max(),
        })
    return pd.DataFrame(rows)



# ----------------------------------------------------------------------------- filters

def kept_by(frame: pd.DataFrame, rule: str) -> pd.Series:
    """The rows a pre-registered filter keeps (`sensviz.sweeps.FILTERS`)."""
    if rule == "converged":
        return frame["converged"].fillna(False).astype(bool)
    if rule == "ever_converged":
        return frame["converged_step"].notna()
    if rule == "relaxed":  # kept, and stopped relax_steps after it first met the filter where its arm relaxes
        relaxed = frame["stop_reason"] == "relaxed" if "stop_reason" in frame else False
        fixed = frame["relax_steps"].isna() if "relax_steps" in frame else True  # an arm that never relaxes: kept
        return frame["converged"].fillna(False).astype(bool) & (relaxed | fixed)
    return frame["eval_accuracy"].fillna(0) >= ACCURATE


def phase_difference(t: Tables, rows: pd.DataFrame, quantity: str) -> pd.Series:
    """One value per run of a difference "COLUMN@WHEN - COLUMN@WHEN" (`phases_of`: start, converged, end)."""
    phases = phases_of(t, rows)
    (a, at), (b, bt) = (term.strip().split("@") for term in quantity.split(" - "))
    return (phases[f"{a}_{at}"] - phases[f"{b}_{bt}"]).dropna() if len(phases) else pd.Series(dtype=float)


def first_met(history: pd.DataFrame, limit: float) -> pd.Series:
    """Per run id: the first evaluation step with evaluation MSE below `limit` and accuracy 1 (if any)."""
    accurate = history["eval_accuracy"].fillna(1.0) >= 1.0 if "eval_accuracy" in history else True
    met = history[(history["eval_loss"] < limit) & accurate]
    return met.groupby("run_id")["step"].min()
