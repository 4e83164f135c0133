"""The fidelity page (docs/fidelity.md): the paper's claims beside what the shipped result tables show.

`render(folder, scale)` reads the sweep tables under `folder/<scale>/<experiment>/` (as
`experiments/results/` ships them) and returns the whole page as markdown; `write_page` writes it
(`sensviz fidelity experiments/results --out docs/fidelity.md --scale standard`). Each experiment
writes its own sections (`Experiment.sections`, in its module of `sensviz.experiments`) with the
helpers here: numbers as text, claims and their tables, the setup and runs lines. Every number on
the page is computed in code: from the runs and history tables, from the specs' `paper` scale (the
paper's setup, `experiments/<experiment>.toml`), their `[equivalence]` margins and the experiments'
constants. Each claim has a key that is the same at every scale (L1, ...; our own checks, R1 and R2,
are kept out of the tally) and is decided by one test of `sensviz.stats` (`judge`: `stats.verdict`,
a flat claim with a margin by `stats.equivalence`); beside it the runs the filter kept per cell, its
named secondary analyses (fragile where their verdict differs) and, where the tables cannot decide
it, the units that would (`stats.units_to_resolve`). The page opens with its bottom line and five
lines per experiment (`lead`), and sets the other scales' verdicts beside each claim.

A finished pre-registered sweep (`folder/decide/<experiment>`: a spec's `[scales.decide]`, run to the
end) is not one of the page's scales: its tables are decided by the analysis written down in the spec
(`sensviz.preregistered`), and the page sets that decision first in the experiment's lines, in the
bottom line, beside each claim it decides and in a section of its own (`decisions`).

Columns read beyond those every table has (`sensviz.experiments` writes them): the length-scaling
runs may carry L_rho at fractions f of the proxy's radius rho_proxy = proxy_eps sqrt(P),
`sharpness_pm1_x{f}`, `sharpness_pm1_x{f}_stderr` and `sharpness_rho_x{f}` (f written as 0.01, 0.1,
0.3, 1); without them the page shows the two radii every table has (the limit and rho_proxy). The
scratchpad runs may carry `sharpness_proxy_last_pm1` (the last decoder step); then
`sharpness_proxy_pm1` is the mean over all decoder steps (the authors' convention), else it is the
last step.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from . import stats
from .experiments import CONVERGED_MSE, TRAIN_TOGETHER, registry
from .experiments import defaults as experiment_defaults
from .figures import TASK_COLORS
from .report import SCALES, write_text
from .sweeps import load_spec, read_results

TASK_ORDER = tuple(TASK_COLORS)
TASK_NAMES = {"parity": "PARITY", "majority": "MAJORITY", "first": "FIRST", "mean": "MEAN"}

DECIDE = "decide"
"""The pre-registered scale: its folder under the results holds finished sweeps decided by `sensviz.preregistered`."""

MARKER = ("<!-- written by `sensviz fidelity` from the {scale}-scale tables (scale: {scale}); "
          "edit sensviz/fidelity.py, not this page -->")
"""The page's first line; `scale_of` reads the scale back from it."""

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
        return Survival(text, weakest)

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
            recorded.loc[missing] = _first_met(self.history, threshold(self.runs)).reindex(missing).to_numpy()
        return recorded.dropna()


def _with_defaults(experiment: str, runs: pd.DataFrame) -> pd.DataFrame:
    defaults = {k: v for k, v in experiment_defaults(experiment).items() if v is not None and k not in runs}
    return runs.assign(**defaults)


def load(folder: Path, experiment: str) -> Tables | None:
    """The experiment's tables under `folder` (one scale's folder), or None when it has none."""
    path = folder / experiment
    if not (path / "runs.parquet").is_file():
        return None
    runs, history, spec = read_results(path)
    source = folder.parent.parent / Path(spec.get("source") or f"{experiment}.toml").name
    try:
        found = load_spec(source, "paper")
        paper, margins = _with_defaults(experiment, pd.DataFrame(found.runs)), dict(found.equivalence or {})
    except ValueError:
        paper, margins = None, {}
    return Tables(experiment, _with_defaults(experiment, runs), history, paper, margins)


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
    """The filter's evaluation-MSE threshold (`experiments.converged_mse`): 0.001 on {0,1} targets."""
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



# ----------------------------------------------------------------------------- the page


def scales(folder) -> list[str]:
    """The scales under a results folder (subfolders holding at least one sweep), smallest first."""
    folder = Path(folder)
    found = sorted({p.parent.parent.name for p in folder.glob("*/*/runs.parquet")} - {DECIDE}) if folder.is_dir() else []
    return sorted(found, key=lambda s: (SCALES.index(s) if s in SCALES else len(SCALES), s))


def decisions(folder) -> dict:
    """The finished pre-registered sweeps under a results folder (`folder/decide/<experiment>`, run under
    the spec `experiments/<experiment>.toml` beside it), each decided by the analysis its spec wrote down:
    `preregistered.Decision` by experiment. The variance the design was sized from: `folder/standard`."""
    from . import preregistered  # it imports this module's helpers

    folder = Path(folder)
    found = {}
    for experiment in registry():
        tables = folder / DECIDE / experiment
        spec = folder.parent / f"{experiment}.toml"
        if (tables / "runs.parquet").is_file() and spec.is_file():
            standard = folder / "standard" if (folder / "standard").is_dir() else None
            decision = preregistered.decide(spec, DECIDE, tables, standard)
            # named as the page's commands name it, wherever the folder was given from
            found[experiment] = replace(decision, spec=f"{folder.parent.name}/{spec.name}")
    return found


CONFIRM = "confirm"
"""The second pre-registered design's scale (issue 37): its rows in `folder/confirm/<experiment>` once finished,
in `experiments/running/confirm/<experiment>` while its sweep runs."""


def confirm_designs(folder) -> dict[str, tuple[Path, Path]]:
    """Per experiment whose spec has a sized `[scales.confirm]` (`sensviz.confirm`): (its spec, the folder of its
    rows: the finished one under `folder`, else the running one beside it, whether or not a row is in yet)."""
    folder = Path(folder)
    found = {}
    for experiment in registry():
        spec = folder.parent / f"{experiment}.toml"
        if spec.is_file() and "sized_from" in _confirm_analysis(spec):
            done = folder / CONFIRM / experiment
            found[experiment] = (spec, done if done.is_dir() else folder.parent / "running" / CONFIRM / experiment)
    return found


def _confirm_analysis(spec: Path) -> set[str]:
    """The keys of the spec's `[scales.confirm.analysis]` (none without one)."""
    return set(tomllib.loads(spec.read_text()).get("scales", {}).get(CONFIRM, {}).get("analysis", {}))


def confirm_section(folder) -> tuple[str, str]:
    """(the bottom line's sentences, the section) of the second pre-registered designs: per claim the exploratory
    verdict of the tables it was sized from beside the design's state (`confirm.state`), and the power each had."""
    from . import confirm

    lines, parts = [], []
    for experiment, (spec, rows) in confirm_designs(folder).items():
        state = confirm.state(spec, CONFIRM, rows)
        source = load_spec(spec, CONFIRM).analysis["sized_from"]["scale"]
        where = "/".join(rows.parts[-4:])
        lines.append(f" A second pre-registered design (`{CONFIRM}` scale of {experiment}) has {state['rows in'].iloc[0]} "
                     f"runs in ({where}).")
        parts.append(
            f"**{experiment.replace('_', ' ').capitalize()}**, `[scales.{CONFIRM}]`, sized from the `{source}` tables "
            "at 80 % power for half each exploratory estimate (a flat claim: at its `smallest_effect`), level α/m, "
            f"Holm's step-down across its {len(state)} primaries (`docs/confirm.md`). Rows: `{where}`. The power at "
            f"that effect and level: *then*, of the `{source}` tables' own kept runs (not designed for these claims); "
            "*designed*, of the planned kept runs; *now*, of the runs kept so far. CPU-hours: the rows of the claim's "
            "runs so far (a row two claims share counts for each).\n\n"
            + table(["claim", "statement", f"exploratory (`{source}`)", "power then", "power designed", "rows in",
                     "estimate so far", "after Holm", "power now", "CPU-hours"],
                    [[r["claim"], r["statement"], r["exploratory"], num(r["power then"]), num(r["power designed"]),
                      r["rows in"], r["confirm estimate"], f"**{r['after Holm']}**",
                      num(r["power now"]) if r["power now"] == r["power now"] else "—", num(r["CPU-hours"])]
                     for r in state.to_dict("records")]))
    if not parts:
        return "", ""
    parts.append(gpu_slice_line(folder))
    return "".join(lines), "\n\n".join(["## A second pre-registered design (issue 37)",
                                          "The claims earlier tables only suggest (exploratory there), tested again "
                                          "on new seeds under an analysis written down before its first row."] + parts)


def gpu_slice_line(folder) -> str:
    """Where the paper-width slice of L1 (`experiments/gpu_slice.py`) stands: its rows and their devices, or that it
    is ready and not run."""
    rows = Path(folder).parent / "running" / "gpu_slice" / "length_scaling" / "runs.parquet"
    script = "`experiments/gpu_slice.py` (L1 at the authors' width, learning rate and batch, on one GPU)"
    if not rows.is_file():
        return f"**The paper-width slice** {script} is ready and has not run (no rows)."
    table = pd.read_parquet(rows)
    devices = ", ".join(sorted(set(table["device"].dropna()))) if "device" in table else "—"
    return (f"**The paper-width slice** {script}: {int((table['status'] == 'finished').sum())} runs in "
            f"({', '.join(str(int(n)) for n in sorted(table['n'].unique()))} as n), on {devices}.")


def decided_line(d) -> str:
    """A decision's claims in one line: '`decide` scale, all 17 runs in: D2 reproduced 0.636 [0.32, 0.951] ...'."""
    from . import preregistered

    state = f"all {d.planned} runs in" if d.complete else f"{d.finished} of {d.planned} runs in"
    return f"the pre-registered `{DECIDE}` scale, {state}: " + "; ".join(
        f"{c.name} {c.primary.verdict} {preregistered.estimate_text(c.primary)} ({c.primary.kept} runs)"
        for c in d.claims)


def scale_of(page: str) -> str | None:
    """The scale a page was written for (from its first line)."""
    found = re.search(r"\(scale: ([^)]+)\)", page.splitlines()[0]) if page else None
    return found.group(1) if found else None


def default_scale(present: list[str]) -> str:
    """The largest named scale present (`SCALES`), else the last one found."""
    named = [s for s in present if s in SCALES]
    return (named or present)[-1]


def page_path(scale: str, present: list[str]) -> str:
    """Where the page of one scale lives: `docs/fidelity.md` for the default scale (the largest
    present), `docs/fidelity-<scale>.md` for each other one."""
    return "docs/fidelity.md" if scale == default_scale(present) else f"docs/fidelity-{scale}.md"


def collect(folder: Path, scale: str) -> tuple[list[str], list[Claim], list[str], dict[str, Tables]]:
    """One scale's sections, claims, the experiments without tables, and the tables of the others."""
    sections, claims, missing, found = [], [], [], {}
    for experiment, registered in registry().items():
        tables = load(folder / scale, experiment)
        if tables is None:
            missing.append(experiment)
            continue
        found[experiment] = tables
        for section in registered.sections:
            try:
                text, some = section(tables)
            except KeyError as err:  # e.g. a class's table: the live monitor's `sharpness`, not the sweeps' columns
                raise ValueError(f"{folder / scale}: the {experiment} tables lack the column {err} that the fidelity "
                                 "page reads (tables of another kind, e.g. a class's: its verdict is on the Class page)"
                                 ) from None
            sections.append(text)
            claims += some
    keys = [c.key for c in claims]
    if len(set(keys)) != len(keys) or not all(keys):
        raise ValueError(f"claim keys must be given and unique on a page, got {keys}")
    return sections, claims, missing, found


def tally(claims: list[Claim]) -> dict[str, int]:
    """The paper's claims (not our own checks) by verdict."""
    return {v: sum(c.verdict == v for c in claims if c.paper) for v in (stats.REPRODUCED, stats.DIFFERS, stats.UNRESOLVED)}


def why(c: Claim) -> str:
    """Why a claim does not hold at this scale, in numbers: its interval against zero or its margin."""
    if c.interval is None:
        return f"{c.key}: {c.reason}"
    if c.direction == 0 and c.margin:
        level, side = (0.95, "lies beyond") if c.verdict == stats.DIFFERS else (0.9, "reaches past")
        low, high = c.interval.bounds(level)
        return (f"{c.key}: {num(c.interval.estimate)}, {num(100 * level, False)} % interval [{num(low)}, {num(high)}] "
                f"{side} ±{num(c.margin_value, False)}")
    where = "on the other side of zero" if c.verdict == stats.DIFFERS else "includes zero"
    weakest = getattr(c.survivors, "weakest", "")
    return f"{c.key}: {interval_text(c.interval)} {where}" + (f", with {weakest}" if weakest else "")


def distance(t: Tables) -> str:
    """These tables' scale against the spec's paper scale, setting by setting (from the specs)."""
    if t.paper is None:
        return "the spec has no paper scale"
    parts = [f"{label} {setting_text(t.runs, column)} against {setting_text(t.paper, column)}"
             for column, label in SETTING_LABELS.items() if column in ("d_model", "n", "seed", "steps", "train_size")
             and column in t.runs and column in t.paper and setting_text(t.runs, column) != setting_text(t.paper, column)]
    kept = t.kept()
    if {"proxy_rho", "param_norm"} <= set(kept) and len(kept):
        parts.append(f"the proxy's radius ρ_proxy/‖θ‖ = {span(kept['proxy_rho'] / kept['param_norm'])} here")
    return "; ".join(parts) or "the same settings"


def lead(experiment: str, claims: list[Claim], t: Tables, decision=None) -> str:
    """An experiment's five lines: what holds, what does not (and why), what is not resolved (and what
    would resolve it), which verdicts are fragile, and the distance to the paper's scale; first, where a
    pre-registered sweep of it has finished (`decision`), what that decided."""
    mine = [c for c in claims if c.experiment == experiment]

    def keys(verdict):
        return [c for c in mine if c.verdict == verdict]

    holds = ", ".join(f"{c.key}{'' if c.paper else ' (ours)'} {c.statement}" for c in keys(stats.REPRODUCED))
    differs = "; ".join(why(c) for c in keys(stats.DIFFERS))
    open_ = "; ".join(f"{why(c)} (to resolve: {c.needed()})" for c in keys(stats.UNRESOLVED))
    fragile = "; ".join(f"{c.key} under {', '.join(c.fragile)}" for c in mine if c.fragile)
    title = experiment.replace("_", " ").capitalize()
    return "\n".join([
        f"**{title}.**",
        *([f"- Decided by {decided_line(decision)}."] if decision else []),
        f"- Holds: {holds or 'none'}.",
        f"- Does not hold: {differs or 'none'}.",
        f"- Not resolved: {open_ or 'none'}.",
        f"- Fragile (a secondary analysis reaches another verdict): {fragile or 'none'}.",
        f"- Distance to the paper's scale: {distance(t)}.",
    ])


def build(folder, scale: str | None = None) -> tuple[str, list[Claim]]:
    """The fidelity page for one scale of the results folder (default: `default_scale`) and its claims."""
    folder = Path(folder)
    present = scales(folder)
    if not present:
        raise ValueError(f"{folder}: no results here (expected <scale>/<experiment>/runs.parquet)")
    scale = scale or default_scale(present)
    if scale not in present:
        raise ValueError(f"{folder}: no '{scale}' scale here; found {', '.join(present)}")
    root = f"{folder.parent.name}/{folder.name}" if folder.parent.name else folder.name
    sections, claims, missing, tables = collect(folder, scale)
    others = {s: {c.key: c for c in collect(folder, s)[1]} for s in present if s != scale}
    decided = decisions(folder)
    confirm_line, confirm_part = confirm_section(folder)
    counts = tally(claims)
    paper = [c for c in claims if c.paper]
    ours = [c for c in claims if not c.paper]
    unresolved = [c for c in claims if c.verdict == stats.UNRESOLVED]
    command = f"sensviz fidelity {root} --out {page_path(scale, present)} --scale {scale}"
    links = [f"[`{s}`]({Path(page_path(s, present)).name})" for s in others]
    page = [
        MARKER.format(scale=scale),
        f"# Fidelity: the paper's claims beside the shipped `{scale}`-scale runs",
        f"**Bottom line.** Of the paper's {len(paper)} claims tested here, {counts[stats.REPRODUCED]} are reproduced, "
        f"{counts[stats.DIFFERS]} differ and {counts[stats.UNRESOLVED]} are not resolved at this scale; "
        f"{sum(bool(c.fragile) for c in paper)} of the verdicts are fragile (a named secondary analysis reaches another)."
        + (f" Our own checks, not counted: {', '.join(f'{c.key} ({c.verdict})' for c in ours)}." if ours else "")
        + (f" No tables at this scale for: {', '.join(missing)}." if missing else "")
        + "".join(f" Decided by {decided_line(d)}." for d in decided.values()) + confirm_line,
        "\n\n".join(lead(experiment, claims, t, decided.get(experiment)) for experiment, t in tables.items()),
        "## Verdicts",
        _summary(claims, others, decided),
    ]
    if unresolved:
        page.append("**What would resolve the rest** (from the measured effect and variance, by the page's rule): "
                    + "; ".join(f"{c.key}, {c.needed()}" for c in unresolved) + ".")
    page += [
        "## About this page",
        "Hahn & Rofin, *Why are Sensitive Functions Hard for Transformers?* (ACL 2024), make five experimental "
        f"claims. `experiments/*.toml` runs each of them as a sweep; `{root}/{scale}/` holds the tables of the "
        f"`{scale}` scale. This page is written by `{command}` from those tables: every number on it is computed "
        "from them (the paper's setup from the specs' `paper` scale, the flat claims' margins from their "
        "`[equivalence]` tables), and a test regenerates it and fails if this file differs. The Experiments page of "
        "the app and `sensviz report` draw the same tables."
        + (f" The same claims at the other shipped scales: {', '.join(links)}." if links else ""),
        "Each section sets the scale's settings beside the spec's `paper` scale. Everything else follows the "
        "paper's code: the post-LN encoder with concatenated embeddings, MSE on {0,1} targets, fresh uniform "
        "inputs every step, the sharpness proxy (Gaussian noise of std eps on every non-positional parameter, the "
        "loss increase on the ±1 scale), the published code's blowup aggregate, and the convergence filter. Where "
        "the width differs, so does the proxy's radius, so sharpness magnitudes compare only within one scale: "
        "compare trends.",
        "## How each claim is decided",
        METHOD,
    ]
    page += [decided_section(folder, decided)] if decided else []
    page += [confirm_part]
    page += sections
    page += [
        "## Reproducing this page",
        "```bash\n"
        + "\n".join(f"sensviz sweep experiments/{e}.toml --out {root}/{scale}/{e}"
                    + (f" --scale {scale}" if scale != "quick" else "") + " --workers 2"
                    for e in registry() if e not in missing)
        + f"\n{command}\n```",
    ]
    return "\n\n".join(part for part in page if part) + "\n", claims


METHOD = (
    "Each claim is one quantity with a 95 % confidence interval. A directional claim is **reproduced** iff the "
    "interval excludes zero in the claimed direction, **differs** iff it excludes zero in the other direction, "
    "else **not resolved at this scale**. A flat claim (\"stays flat\") is decided as equivalence against its "
    "margin m, an absolute number in the quantity's units written down with its reason in the spec's "
    "`[equivalence]` table: **reproduced** when the 90 % interval lies inside ±m, **differs** when the 95 % "
    "interval lies wholly outside ±m, else not resolved (`stats.equivalence`). A flat claim without a margin (L2, "
    "\"linear\") can only differ or stay unresolved. The unit of replication is an independently trained model (a "
    "seed at one setting): the scatter between seeds is the error, never the noise draws or directions within a "
    "run. The tests (`sensviz.stats`): the OLS slope of a quantity in n over the kept runs, with its t(N − 2) "
    "interval (classical standard errors); the quadratic term of an OLS parabola, t(N − 3); Welch's interval for a "
    "difference between two groups; a one-sample t interval over seeds for paired differences; the difference of "
    "two independent estimates with Welch-Satterthwaite degrees of freedom; Pearson's r with Fisher's z interval "
    "(pooled within groups where the claim is within each task and n); and the offset of one task above the line "
    "shared with the others (OLS with a task indicator). Every test keeps the runs that pass the paper's "
    "convergence filter.\n\n"
    "Beside every claim: the runs kept of those run, per cell, and the step at which the kept runs first met the "
    "filter (where the tables record it), and its **secondaries**, named analyses of the same quantity: the "
    f"accuracy ≥ {ACCURATE} filter in place of the MSE filter (MEAN, which has no accuracy, keeps the MSE filter), "
    "heteroscedasticity-robust (HC3) standard errors for slopes, every run that ever converged for the dynamics, "
    "the last decoder step for the scratchpad, intervals clustered by function for the generalization "
    "correlation. A claim is marked **fragile** where a secondary's verdict differs from the primary's; the tally "
    "counts the primary only, and only the paper's claims (our own checks, such as R1 and R2, are listed apart).\n\n"
    "Where a claim is not resolved, \"to resolve\" gives the units (seeds per setting, functions or runs) at which "
    "the measured effect and variance would resolve it by the same rule (`stats.units_to_resolve`: a flat claim "
    "against its margin, never extrapolated from 2 degrees of freedom or fewer); in brackets the units the tables "
    "hold now and those for an 80 % chance of it."
)


def render(folder, scale: str | None = None) -> str:
    """The fidelity page (markdown) for one scale of the results folder."""
    return build(folder, scale)[0]


def decided_section(folder: Path, decided: dict) -> str:
    """The finished pre-registered sweeps, each as `sensviz decide` reports it (`preregistered.text`)."""
    from . import preregistered

    root = f"{folder.parent.name}/{folder.name}" if folder.parent.name else folder.name
    parts = ["## Decided by pre-registered designs",
             f"Each finished sweep of a spec's `[scales.{DECIDE}]` (seeds disjoint from every other scale's, its "
             "analysis written into the spec before the first run: one primary test per claim, its secondaries, the "
             "smallest effect the seeds were sized for) decided by that analysis, as `sensviz decide` prints it. "
             "Its verdict stands beside the claims above, never pooled with these tables."]
    for experiment, d in decided.items():
        command = (f"sensviz decide experiments/{experiment}.toml --scale {DECIDE} --tables {root}/{DECIDE}/{experiment}"
                   f" --standard {root}/standard")
        parts.append(f"**{experiment.replace('_', ' ').capitalize()}** (`{command}`):\n\n"
                     f"```text\n{preregistered.text(d).rstrip()}\n```")
    return "\n\n".join(parts)


def verdict_table(claims: list[Claim], others: dict[str, dict[str, Claim]], decided: dict | None = None) -> pd.DataFrame:
    """Every claim by key: its primary estimate and verdict here, at the other scales (`others`: per scale,
    its claims by key), as a finished pre-registered sweep decided it (`decided`: `decisions`, where one
    is given) and the secondaries under which it is fragile."""
    from . import preregistered

    by_key = {c.name: c for d in (decided or {}).values() for c in d.claims}
    rows = []
    for c in claims:
        rule = f"equivalence within {c.margin_text()}" if c.direction == 0 and c.margin else (
            "95 % interval against zero, two-sided" if c.direction == 0 else "95 % interval against zero")
        rows.append({"#": c.key + ("" if c.paper else " (ours)"), "experiment": c.experiment, "claim": c.statement,
                     "decided by": rule, "estimate [95 % interval]": interval_text(c.interval), "verdict": c.verdict,
                     **{f"at the {s} scale": f"{interval_text(o[c.key].interval)} {o[c.key].verdict}"
                        if c.key in o else "not tested" for s, o in others.items()},
                     **({f"pre-registered ({DECIDE})": f"{preregistered.estimate_text(by_key[c.key].primary)} "
                         f"{by_key[c.key].primary.verdict}" if c.key in by_key else "—"} if by_key else {}),
                     "fragile under": ", ".join(c.fragile) or "—"})
    return pd.DataFrame(rows)


def decision_table(decided: dict) -> pd.DataFrame:
    """The claims of finished pre-registered sweeps (`decisions`) as their analyses decide them: the primary
    test, its estimate, interval and verdict, and the secondaries whose verdict differs."""
    from . import preregistered

    rows = []
    for experiment, d in decided.items():
        for c in d.claims + d.flat:
            test = c.primary.interval.test if c.primary.interval else c.primary.reason
            level = 1 - c.alpha if c.direction else 1 - 2 * c.alpha
            rows.append({"#": c.name, "experiment": experiment, "claim": c.statement,
                         "decided by": f"pre-registered primary: {test}, {100 * level:g} % interval",
                         "estimate [interval]": preregistered.estimate_text(c.primary), "verdict": c.primary.verdict,
                         "runs kept": c.primary.kept,
                         "fragile under": ", ".join(s.label for s in c.secondaries if s.fragile) or "—"})
    return pd.DataFrame(rows)


def verdicts(folder, scale: str) -> pd.DataFrame:
    """The claims of one scale of a results folder as its fidelity page decides them (`verdict_table`,
    with the other scales present beside it): what the app's Experiments page shows. The pre-registered
    scale (`DECIDE`): as its analysis decides them (`decision_table`)."""
    folder = Path(folder)
    if scale == DECIDE:
        return decision_table(decisions(folder))
    claims = collect(folder, scale)[1]
    others = {s: {c.key: c for c in collect(folder, s)[1]} for s in scales(folder) if s != scale}
    return verdict_table(claims, others, decisions(folder))


def _summary(claims: list[Claim], others: dict[str, dict[str, Claim]], decided: dict) -> str:
    frame = verdict_table(claims, others, decided).drop(columns="experiment")
    frame["verdict"] = "**" + frame["verdict"] + "**"
    return table(list(frame.columns), frame.values.tolist())


def write_page(folder, out, scale: str | None = None) -> dict:
    """Write the fidelity page of `folder` (e.g. experiments/results) for one scale to `out`; a summary."""
    page, claims = build(folder, scale)
    out = write_text(out, page)
    return {"written": str(out), "scale": scale_of(page), "claims": sum(c.paper for c in claims),
            "own checks": sum(not c.paper for c in claims), **tally(claims)}


# ----------------------------------------------------------------------------- sizing a pre-registered design

def _kept_by(frame: pd.DataFrame, rule: str) -> pd.Series:
    """The rows a pre-registered filter keeps (`sensviz.sweeps.FILTERS`)."""
    if rule == "converged":
        return frame["converged"].fillna(False).astype(bool)
    if rule == "ever_converged":
        return frame["converged_step"].notna()
    if rule == "relaxed":  # kept, and stopped relax_steps after it first met the filter
        relaxed = frame["stop_reason"] == "relaxed" if "stop_reason" in frame else False
        return frame["converged"].fillna(False).astype(bool) & relaxed
    return frame["eval_accuracy"].fillna(0) >= 0.99


def _per_run(t: Tables, rows: pd.DataFrame, quantity: str) -> pd.Series:
    """One value per run of a difference "COLUMN@WHEN - COLUMN@WHEN" (`_phases`: start, converged, end)."""
    phases = phases_of(t, rows)
    (a, at), (b, bt) = (term.strip().split("@") for term in quantity.split(" - "))
    return (phases[f"{a}_{at}"] - phases[f"{b}_{bt}"]).dropna() if len(phases) else pd.Series(dtype=float)


def design_power(spec, scale: str, folder) -> dict[str, dict]:
    """Per pre-registered claim of the spec's `scale`: the seeds its primary test needs for its power at
    its smallest effect and alpha, from the variance and the keep rate in the tables under `folder`
    (one scale's results, e.g. experiments/results/standard): `stats.slope_design` (the residual
    standard deviation of the OLS fit over the kept runs, the keep rate per level) or `stats.mean_design`
    (the standard deviation of the per-run values, the share of runs kept)."""
    found = load_spec(spec, scale)
    t = load(Path(folder), found.experiment)
    if t is None or not found.analysis:
        raise ValueError(f"no {found.experiment} tables under {folder}, or no analysis in scale '{scale}'")
    done = t.runs[t.runs["status"] == "finished"]
    out = {}
    for name, claim in found.analysis["claims"].items():
        rows = rows_where(done, **claim["runs"])
        keep = _kept_by(rows, claim["filter"]) if claim["filter"] != "ever_converged" or claim["estimator"] == "ols_slope" \
            else pd.Series(True, index=rows.index)
        args = (claim["smallest_effect"], claim["alpha"], claim["power"])
        if claim["estimator"] == "ols_slope":
            kept, x = rows[keep], claim["x"]
            coef = np.polyfit(kept[x], kept[claim["quantity"]], 1)
            residual = kept[claim["quantity"]] - np.polyval(coef, kept[x])
            sd = float(np.sqrt((residual**2).sum() / (len(kept) - 2)))
            rates = keep.groupby(rows[x]).mean()
            design = stats.slope_design(list(rates.index), list(rates.values), sd, *args)
            design["seeds"] = {int(level): seeds for level, seeds in design["seeds"].items()}
            basis = f"{len(kept)} of {len(rows)} runs kept, per {x}: " + ", ".join(
                f"{num(level, False)}: {num(rate)}" for level, rate in rates.items())
        else:
            values = _per_run(t, rows[keep], claim["quantity"])  # ever_converged: runs whose phases have a convergence
            sd = float(values.std(ddof=1))
            design = stats.mean_design(sd, args[0], len(values) / len(rows), *args[1:])
            basis = f"{len(values)} of {len(rows)} runs kept"
        out[name] = {**design, "sd": sd, "basis": basis, "effect": args[0], "alpha": args[1], "power": args[2]}
    return out


def _first_met(history: pd.DataFrame, limit: float) -> pd.Series:
    """Per run id: the first evaluation step with evaluation MSE below `limit` and accuracy 1 (if any)."""
    accurate = history["eval_accuracy"].fillna(1.0) >= 1.0 if "eval_accuracy" in history else True
    met = history[(history["eval_loss"] < limit) & accurate]
    return met.groupby("run_id")["step"].min()


def design_cost(spec, scale: str, folder) -> pd.DataFrame:
    """Runs and estimated CPU-hours per arm of the spec's `scale`, from the wall time per run and step
    of the tables under `folder` at the same task, n and weight decay, times the steps: a fixed arm's
    `steps`; in a relax arm a run's expected steps are the latest first step at which the tables' runs
    of the same settings met the filter, plus `relax_steps` (`steps` if one of them never met it: in a
    batch of many seeds one such run is likely), and the models trained together
    (`experiments.TRAIN_TOGETHER`, at most `batch_models`) all step until the last of them stops.
    The upper bound: every run trains its `steps`."""
    found = load_spec(spec, scale)
    t = load(Path(folder), found.experiment)
    runs = t.runs[t.runs["status"] == "finished"]
    keys = [k for k in ("task", "n", "weight_decay") if k in runs]
    first = _first_met(t.history, threshold(runs)) if "eval_loss" in t.history else pd.Series(dtype=float)
    runs = runs.assign(first_met=runs["run_id"].map(first).fillna(math.inf), per_step=runs["wall_s"] / runs["steps"])
    base = runs.groupby(keys).agg(per_step=("per_step", "mean"), first_met=("first_met", "max"))

    def at(s: dict) -> pd.Series:
        return base.loc[tuple(s[k] for k in keys)] if len(keys) > 1 else base.loc[s[keys[0]]]

    def steps(s: dict) -> float:
        met = at(s)["first_met"]
        return min(s["steps"], met + s["relax_steps"]) if s.get("relax_steps") is not None and math.isfinite(met) \
            else s["steps"]

    rows = []
    for arm, picks in found.analysis["arms"].items():
        mine = [s for s in found.runs if all(s.get(k) == v for k, v in picks.items())]
        groups: dict[str, list[dict]] = {}
        for s in mine:
            groups.setdefault(repr(sorted((k, v) for k, v in s.items() if k not in TRAIN_TOGETHER)), []).append(s)
        expected = 0.0
        for group in groups.values():
            size = group[0].get("batch_models", experiment_defaults(found.experiment)["batch_models"])
            for start in range(0, len(group), size):
                batch = group[start : start + size]
                longest = max(steps(s) for s in batch)
                expected += sum(at(s)["per_step"] for s in batch) * longest / 3600
        bound = sum(at(s)["per_step"] * s["steps"] for s in mine) / 3600
        rows.append({"arm": arm, "runs": len(mine), "cpu_hours_expected": round(expected, 2),
                     "cpu_hours_at_most": round(bound, 2)})
    return pd.DataFrame(rows)


def design_report(spec, scale: str, folder=None) -> str:
    """The power and cost of a pre-registered scale, as text (the numbers its spec's comments quote)."""
    folder = folder or Path(spec).parent / "results" / "standard"
    lines = [f"{spec} --scale {scale}, sized from {folder}:"]
    for name, d in design_power(spec, scale, folder).items():
        target = d.get("kept_per_level", d.get("kept"))
        seeds = d["seeds"] if isinstance(d["seeds"], int) else ", ".join(f"{k}: {v}" for k, v in d["seeds"].items())
        lines.append(f"  {name}: smallest effect {num(d['effect'], False)}, alpha {num(d['alpha'], False)}, power "
                     f"{num(d['power'], False)}; sd {num(d['sd'])} ({d['basis']}); needs {target} kept "
                     f"{'per level' if 'kept_per_level' in d else 'runs'} (se {num(d['se'])}, df {d['df']}): seeds {seeds}")
    cost = design_cost(spec, scale, folder)
    for _, row in cost.iterrows():
        lines.append(f"  arm {row['arm']}: {row['runs']} runs, about {row['cpu_hours_expected']} CPU-hours "
                     f"(at most {row['cpu_hours_at_most']})")
    lines.append(f"  total: {cost['runs'].sum()} runs, about {round(cost['cpu_hours_expected'].sum(), 2)} CPU-hours "
                 f"(at most {round(cost['cpu_hours_at_most'].sum(), 2)})")
    return "\n".join(lines)
