"""Assignments: the paper's length-scaling experiment, run by a class together (numpy/pandas only).

The instructor starts the assignment; each member is dealt one cell of the grid (a task, an n and a
seed), in an order that covers every setting before any gets a second seed (`Assignment.deal`): the
next cell nobody has finished or is training (`Assignment.deal_open`), so a member who finished
takes the next unclaimed run and a class of any size completes the grid. A member's Train form arrives
filled with the cell's settings (`Assignment.request`), and each finished run is a row of the
class's sweep folder (`record`, the tables of `sensviz sweep`). `verdict` decides the claim on that
table with `sensviz.stats` by the fidelity page's rule.

**The grid** (`LENGTH_SCALING`): PARITY against FIRST at n = 4 and 8, the standard scale's model and
trainer (encoder, d = 32, 2 layers, 2 heads, batch 256, lr 1e-3, weight decay 0.1) for a fixed
1,200 steps, measured every 500 steps (the live monitor's L_rho: 8 directions, 256 inputs); 11 seeds
of PARITY and 4 of FIRST at each n: 30 runs. The claim is the fidelity page's L-claim "PARITY's
sharpness grows faster than FIRST's": the difference of the OLS slopes of `sharpness` in n,
direction +1. Both numbers below are computed by `plan(LENGTH_SCALING)` from the findings' tables
(`TABLES`: experiments/results/standard/length_scaling, 96 runs, and the decide scale's runs,
experiments/results/decide/length_scaling) and one measured class run per n:

- **time**: a class run is small (`server.worker.run_threads`: one torch thread), so this 2-core server
  trains two at once (`server.jobs`: runs fill the cores; `RUNS_AT_ONCE`), at a lower priority than the
  pages: the class's wall time is the sum of its runs' times over two. A run's time is its steps times the
  CPU seconds per step of a single class run at its n, measured here (`MEASURED_STEP_S`, with its
  evaluations, measurements and checkpoints: `python benchmarks/class_mode.py --step-times`; the tables'
  times are no guide, `seconds_per_step`):
  15 x 1,200 x 6.9 ms + 15 x 1,200 x 8.0 ms over 2 = **134 s, 2.2 minutes** for 30 runs (`CLASS_MINUTES`
  allowed; the pages the members open while they wait take the rest of the cores:
  `benchmarks/class_mode.py` measures the whole);
- **power**: per task, the residual standard deviation of `sharpness` pooled over the tables' kept
  runs (the paper's filter: converged) at n = 4 and 8, the live monitor's extra measurement noise
  added (each table's stderr times sqrt(its directions / the live monitor's, `server.worker.LIVE_DIRECTIONS`
  = 16)); the expected kept runs (`keep_rate`: the tables' runs that met the filter by step 1,200; PARITY at
  n = 8: 0.77, the others 1.0); the effect the tables measured: the power of the two-sided t test at 5 % on
  the difference of slopes (Welch-Satterthwaite degrees of freedom) is above **0.99**, and **0.84** at half
  that effect (0.75 with the 8 directions the live monitor took before). (The tables' runs trained 4,000 or
  6,000 steps: at 1,200 the class measures models that have relaxed less, whose spread may be larger;
  11 + 4 seeds rather than 9 + 6 because PARITY's spread is four times FIRST's.)

`plan` prints both numbers with their inputs (`python -m server.assignments`); tests check them.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from sensviz import stats
from sensviz.convergence import CONVERGED_MSE

from .worker import LIVE_DIRECTIONS

ROOT = Path(__file__).resolve().parents[1]
TABLES = (ROOT / "experiments/results/standard/length_scaling", ROOT / "experiments/results/decide/length_scaling")
"""The findings' tables the grid is chosen from (runs.parquet of `sensviz sweep`)."""
CLASS_MINUTES = 5
"""The class's runs must end within this many minutes (the class's verdict within a lecture's exercise)."""
RUNS_AT_ONCE = 2
"""Class runs training at once on the 2-core server the plan is made for (`server.jobs`: small runs fill
the cores)."""
MEASURED_STEP_S = {4: 0.0069, 8: 0.0080}
"""CPU seconds per step of one live class run on this server (`server.worker.run`, one torch thread:
evaluation every 100 steps, measurements every 500 with `LIVE_DIRECTIONS`, checkpoints), printed by
`python benchmarks/class_mode.py --step-times` (PARITY, the best of three seeds) on 2026-12-05 with the
LayerNorm and AdamW fused (`sensviz.base.LayerNorm`, `sensviz.training.adamw`): 6.9 and 8.0 ms, and
6.0 / 7.0 and 5.7 / 6.8 ms in two later runs (this machine's speed drifts); the largest is kept. Before
either was fused the same command took 9.6 and 10.9 ms, and with the LayerNorm alone 7.0 / 8.6 and
6.7 / 8.2 ms, each run back to back with one of the fused code."""


@dataclass(frozen=True, eq=False)
class Assignment:
    """A grid of (task, n, seed) cells with shared model and trainer settings, and the claim it decides."""

    name: str
    title: str
    tasks: tuple[str, str]  # (the task the claim is about, the one it is compared with)
    lengths: tuple[int, ...]
    seeds: dict[str, int]  # seeds per n, per task
    settings: dict = field(default_factory=dict)  # model and trainer settings of every run
    measure_every: int = 500
    quantity: str = "sharpness"
    seed_base: int = 20_000  # seeds from here on: disjoint from every sweep scale's (the confirm scale's 1000+ too)
    lab_chapter: int | None = None  # the Lab chapter whose question its chart answers (held with that chapter's reveal)

    def cells(self) -> list[dict]:
        """The grid in dealing order: the first seed of every setting, then the second, ..."""
        rounds = max(self.seeds.values())
        return [{"task": task, "n": n, "seed": self.seed_base + r}
                for r in range(rounds) for task in self.tasks if r < self.seeds[task] for n in self.lengths]

    def deal(self, seat: int) -> dict:
        """The cell of the member in `seat` (0, 1, ...): beyond the grid, the grid again with new seeds."""
        cells = self.cells()
        cell = dict(cells[seat % len(cells)])
        cell["seed"] += (seat // len(cells)) * max(self.seeds.values())
        return cell

    def deal_open(self, seats: dict[str, int], done: list[dict], held: dict[str, dict]) -> dict[str, dict]:
        """Cells for members (`seats`: member id -> seat, in the order they joined) when `done` cells are finished
        and `held` ones (member id -> cell) are queued or running: a member holding a cell keeps it; a member whose
        own cell (`deal(seat)`) is neither done nor held gets that one, so the run a member was told to train does
        not change while others finish theirs (or after a restart stopped it); each other member in turn gets the
        next cell in dealing order that is neither done, held nor dealt, beyond the grid the grid again with new
        seeds."""
        taken = {_key(c) for c in done} | {_key(c) for c in held.values()}
        dealt = dict(held)
        for member, seat in seats.items():
            own = self.deal(seat)
            if member not in dealt and _key(own) not in taken:
                dealt[member] = own
                taken.add(_key(own))
        turn = 0
        for member in seats:
            if member in dealt:
                continue
            while _key(cell := self.deal(turn)) in taken:
                turn += 1
            dealt[member], turn = cell, turn + 1
        return dealt

    def request(self, cell: dict) -> dict:
        """Every Train-form field of a cell's run (`ui.train_form.fill`): its task, n and seed and the shared settings."""
        return {**self.settings, "task": cell["task"], "n": cell["n"], "seed": cell["seed"],
                "measure_every": self.measure_every, "early_stop": False}

    def run_settings(self, cell: dict) -> dict:
        """A run's settings as a row of the class's sweep table."""
        return {**self.settings, "task": cell["task"], "n": cell["n"], "seed": cell["seed"]}


def _key(cell: dict) -> tuple:
    return cell["task"], cell["n"], cell["seed"]


LENGTH_SCALING = Assignment(
    name="length_scaling",
    title="Length scaling: does PARITY's sharpness grow with n faster than FIRST's?",
    tasks=("parity", "first"),
    lengths=(4, 8),
    seeds={"parity": 11, "first": 4},
    settings={"arch": "encoder", "d_model": 32, "n_layers": 2, "n_heads": 2, "batch_size": 256, "lr": 1e-3,
              "weight_decay": 0.1, "steps": 1200, "eval_interval": 100},
    lab_chapter=5,  # "Does PARITY's sharpness grow with n?"
)
ASSIGNMENTS = {LENGTH_SCALING.name: LENGTH_SCALING}


# ----------------------------------------------------------------------------- the plan


def read_tables(folders=TABLES) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The findings' runs tables and their training histories (with each run's task and n), each one
    frame (a column `table` names the folder)."""
    runs, history = [], []
    for folder in map(Path, folders):
        if (folder / "runs.parquet").is_file():
            table = pd.read_parquet(folder / "runs.parquet").assign(table=folder.parent.name)
            runs.append(table)
            history.append(pd.read_parquet(folder / "history.parquet").assign(table=folder.parent.name)
                           .merge(table[["run_id", "task", "n"]], on="run_id"))
    if not runs:
        raise ValueError("none of the findings' tables is here: " + ", ".join(str(f) for f in folders))
    return pd.concat(runs, ignore_index=True), pd.concat(history, ignore_index=True)


def seconds_per_step(runs: pd.DataFrame, n: int) -> float:
    """CPU seconds per training step of one class run at `n`: the class run measured here (`MEASURED_STEP_S`);
    for an n not measured, the tables' median of wall_s / steps_trained (an upper bound at best: their sweeps
    ran niced beside other work, wall time up to five times their CPU time, and trained several seeds vmapped
    in one job)."""
    if n in MEASURED_STEP_S:
        return MEASURED_STEP_S[n]
    rows = runs[(runs["n"] == n) & (runs["status"] == "finished")]
    if rows.empty:
        raise ValueError(f"no run at n = {n} in the findings' tables")
    return float((rows["wall_s"] / rows["steps_trained"]).groupby(rows["table"]).median().max())


def plan_seconds(a: Assignment, runs: pd.DataFrame) -> float:
    """The class's training time: every cell's steps times the seconds per step at its n, `RUNS_AT_ONCE` at a time."""
    return sum(a.settings["steps"] * seconds_per_step(runs, cell["n"]) for cell in a.cells()) / RUNS_AT_ONCE


def _kept(runs: pd.DataFrame) -> pd.DataFrame:
    done = runs[runs["status"] == "finished"]
    return done[done["converged"].fillna(False).astype(bool)]


def spread(a: Assignment, runs: pd.DataFrame, task: str) -> float:
    """The residual standard deviation of the quantity for `task` at the assignment's lengths: the
    within-cell variance pooled over the tables' kept runs, plus the live monitor's measurement noise."""
    rows = _kept(runs)
    rows = rows[(rows["task"] == task) & rows["n"].isin(a.lengths)]
    groups = rows.groupby(["table", "n"])[a.quantity]
    dof = (groups.count() - 1).clip(lower=0)
    pooled = float((groups.var(ddof=1).fillna(0) * dof).sum() / dof.sum())
    stderr = rows[f"{a.quantity}_stderr"] * np.sqrt(rows["directions"] / LIVE_DIRECTIONS)
    return math.sqrt(pooled + float((stderr**2).mean()))


def keep_rate(a: Assignment, history: pd.DataFrame, task: str, n: int) -> float:
    """The fraction of the tables' runs at (task, n) that meet the paper's filter (evaluation MSE below
    `CONVERGED_MSE`) at their last evaluation within the assignment's steps (a lower bound: the tables
    evaluate every 50 or 500 steps)."""
    rows = history[(history["task"] == task) & (history["n"] == n) & (history["step"] <= a.settings["steps"])]
    if rows.empty:
        raise ValueError(f"no training history of {task} at n = {n} in the findings' tables")
    last = rows.sort_values("step").groupby(["table", "run_id"]).tail(1)
    return float((last["eval_loss"] < CONVERGED_MSE).mean())


def table_slope(a: Assignment, runs: pd.DataFrame, task: str) -> float:
    """The tables' slope of the quantity in n for `task` over the assignment's lengths (kept runs, OLS)."""
    rows = _kept(runs)
    rows = rows[(rows["task"] == task) & rows["n"].isin(a.lengths)]
    return stats.slope(rows["n"], rows[a.quantity]).estimate


def slope_se(a: Assignment, sd: float, kept: dict[int, float]) -> float:
    """Standard error of an OLS slope with `kept[n]` runs at each n and residual standard deviation `sd`."""
    total = sum(kept.values())
    center = sum(n * k for n, k in kept.items()) / total
    return sd / math.sqrt(sum(k * (n - center) ** 2 for n, k in kept.items()))


def power(a: Assignment, runs: pd.DataFrame, history: pd.DataFrame, effect_scale: float = 1.0,
          kept_runs: dict | None = None) -> float:
    """The power of the two-sided t test at 5 % on the difference of the two tasks' slopes, at the
    tables' effect times `effect_scale` (fixed before any class run: never the class's own estimate),
    with `kept_runs[(task, n)]` kept runs (default: the grid's expected ones), Welch-Satterthwaite df."""
    ses, dfs = [], []
    for task in a.tasks:
        kept = {n: kept_runs[(task, n)] if kept_runs is not None else a.seeds[task] * keep_rate(a, history, task, n)
                for n in a.lengths}
        ses.append(slope_se(a, spread(a, runs, task), kept))
        dfs.append(sum(kept.values()) - 2)
    effect = effect_scale * (table_slope(a, runs, a.tasks[0]) - table_slope(a, runs, a.tasks[1]))
    v = [s * s for s in ses]
    df = (v[0] + v[1]) ** 2 / (v[0] ** 2 / dfs[0] + v[1] ** 2 / dfs[1])
    critical = stats.t_quantile(0.975, df)
    delta = abs(effect) / math.sqrt(v[0] + v[1])
    return 1.0 - stats.t_cdf(critical - delta, df) + stats.t_cdf(-critical - delta, df)


def plan(a: Assignment = LENGTH_SCALING, folders=TABLES) -> dict:
    """The assignment's two numbers from the findings' tables: `seconds` (the class's wall time for
    its runs) and `power` (at the tables' effect; `power_half` at half of it), with their inputs."""
    runs, history = read_tables(folders)
    return {"runs": len(a.cells()), "seconds": plan_seconds(a, runs), "limit_s": CLASS_MINUTES * 60,
            "seconds_per_step": {n: seconds_per_step(runs, n) for n in a.lengths},
            "sd": {task: spread(a, runs, task) for task in a.tasks},
            "slope": {task: table_slope(a, runs, task) for task in a.tasks},
            "keep": {(task, n): keep_rate(a, history, task, n) for task in a.tasks for n in a.lengths},
            "power": power(a, runs, history), "power_half": power(a, runs, history, 0.5)}


def describe(found: dict) -> str:
    """The plan in one paragraph for people."""
    steps = ", ".join(f"n = {n}: {s * 1000:.1f} ms" for n, s in found["seconds_per_step"].items())
    return (f"{found['runs']} runs take about {found['seconds'] / 60:.1f} minutes of this server's time, training "
            f"{RUNS_AT_ONCE} runs at once (the plan's limit: {found['limit_s'] / 60:.0f} minutes; CPU seconds per step of a "
            "class run measured here, "
            f"{steps}); the class's slope comparison has {found['power']:.1%} power at the effect the tables measured "
            f"({found['power_half']:.0%} at half of it).")


def dealing(a: Assignment, members: int) -> str:
    """How the grid's runs fall to a class of `members` (`Assignment.deal_open`: one run at a time each, the next
    cell to whoever finished), in one sentence for the instructor: until the grid is covered once (the deal goes on
    with new seeds after it)."""
    runs = len(a.cells())
    what = (f"The assignment is {runs} runs ({' and '.join(t.upper() for t in a.tasks)} at n = "
            f"{' and '.join(map(str, a.lengths))}), dealt one at a time: each member trains one, then the next free one")
    if members == 0:
        return what + "; nobody has joined yet."
    if members == 1:
        return what + "; the one member trains all of them."
    if members >= runs:
        return what + f"; with {members} members, one run each covers them (runs beyond {runs} repeat the grid with new seeds)."
    low, high = runs // members, -(-runs // members)
    each = f"{low}" if low == high else f"{low} or {high}"
    return what + (f"; with {members} members, each trains about {each} of them (whoever finishes first takes the next; "
                   "then the grid again with new seeds).")


@functools.lru_cache(maxsize=1)
def _tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    return read_tables()


def design_power(a: Assignment, kept_runs: dict) -> float:
    """The power the class's runs gave the design at the findings' tables' effect (`power`)."""
    runs, history = _tables()
    return power(a, runs, history, kept_runs=kept_runs)


@functools.lru_cache(maxsize=8)
def describe_short(a: Assignment) -> str:
    """`describe(plan(a))`, computed once per process (the tables are read once)."""
    try:
        return describe(plan(a))
    except (ValueError, OSError, KeyError) as err:
        return f"The plan's numbers could not be computed here: {err}"


# ----------------------------------------------------------------------------- the class's table and verdict


MONITOR_ONLY = {"member"}
"""Fields of the monitor's records that are not the run's results: `member` is the model's place in a
vmapped batch (always 0 for a class run), not the class member (the class's table would read as such)."""


def record(a: Assignment, cell: dict, records: list[dict], state: str, error: str | None, steps: int | None,
           seconds: float | None, ended_at: float | None = None, member: tuple[str, str] | None = None) -> dict:
    """One run of the class as a sweep record (`sensviz.sweeps` writes and reads them): its settings,
    status, the last measurement's values (the final weights: loss, accuracy, sharpness, ...) and
    converged, the paper's filter on that measurement's MSE (over the whole cube: the live monitor
    measures on 256 inputs, the cube up to n = 8), and `ended_at` (when it was collected: `counted`
    keeps a cell's latest). Only a run that trained to its end is "finished": a stopped, cancelled
    or failed run is "failed", with the reason. `member`: the member's (id, display name), a column of
    both tables (`member`, `member_name`)."""
    last = dict(records[-1]) if records else {}
    metrics = {k: v for k, v in last.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in MONITOR_ONLY}
    loss = last.get("loss")
    who = {"member": member[0], "member_name": member[1]} if member else {}
    metrics.update({"steps_trained": steps if steps is not None else last.get("step"), "train_seconds": seconds,
                    "converged": bool(loss is not None and loss < CONVERGED_MSE), "ended_at": ended_at, **who})
    history = [{"step": r.get("step"), **{k: r.get(k) for k in ("loss", "accuracy", a.quantity, "param_norm")}, **who}
               for r in records]
    failed = state != "finished" or not records
    reason = error or (f"the run was {state} before it finished" if state != "finished" else "the run measured nothing")
    return {"settings": a.run_settings(cell), "status": "failed" if failed else "finished",
            "error": reason if failed else None, "metrics": metrics, "history": history, "wall_s": seconds or 0.0}


@dataclass(frozen=True)
class Verdict:
    """The class's decision: the interval (None before a fit is possible), the verdict's words and the missing runs."""

    interval: stats.Interval | None
    verdict: str  # stats.REPRODUCED, DIFFERS or UNRESOLVED
    text: str
    missing: dict  # {(task, n): runs still to come}

    @property
    def reason(self) -> str:
        """The text without its leading "not yet resolved: " (what a heading that already says so leaves to say)."""
        return self.text.removeprefix(NOT_YET)


NOT_YET = "not yet resolved: "


def counted(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs the verdict counts: each cell (task, n, seed: one member's) once, its latest finished
    run (by `ended_at`), converged or not; a rerun adds a row to the class's table, it replaces nothing,
    and stopped or failed runs count for nothing."""
    if not len(runs):
        return runs
    done = runs[runs["status"] == "finished"]
    if "ended_at" in done:
        done = done.sort_values("ended_at", kind="stable", na_position="first")
    return done.drop_duplicates(["task", "n", "seed"], keep="last")


def missing_runs(a: Assignment, runs: pd.DataFrame) -> dict:
    """Planned runs not yet finished in the class's table, per (task, n) (each cell counted once: `counted`)."""
    done = counted(runs)
    have = done.groupby(["task", "n"]).size() if len(done) else pd.Series(dtype=int)
    return {(t, n): a.seeds[t] - int(have.get((t, n), 0)) for t in a.tasks for n in a.lengths
            if a.seeds[t] > int(have.get((t, n), 0))}


def _at(missing: dict) -> str:
    lengths = sorted({n for _, n in missing})
    return f"{sum(missing.values())} more runs at n = {' and '.join(map(str, lengths))}"


def verdict(a: Assignment, runs: pd.DataFrame, ended: bool = False) -> Verdict:
    """The claim decided on the class's runs table by the fidelity page's rule (`sensviz.stats.verdict`):
    the difference of the OLS slopes (kept runs), once every planned run is in; before that, or while
    the interval includes zero, how many runs are still needed and at which n. Each member's cell counts
    once: its latest finished run, converged or not (`counted`; the slopes use the converged ones).
    `ended`: the instructor ended the assignment, so the runs in are all there will be (`ended_verdict`)."""
    interval = None
    kept = _kept(counted(runs)) if len(runs) else runs
    try:
        slopes = [stats.slope(kept[kept["task"] == t]["n"], kept[kept["task"] == t][a.quantity]) for t in a.tasks]
        interval = stats.difference(*slopes)
    except (ValueError, KeyError):
        pass
    if ended:
        return ended_verdict(a, kept, interval)
    missing = missing_runs(a, runs)
    if missing:
        return Verdict(interval, stats.UNRESOLVED, f"{NOT_YET}{_at(missing)}", missing)
    found = stats.verdict(interval, +1) if interval is not None else stats.UNRESOLVED
    if found == stats.REPRODUCED:
        return Verdict(interval, found, "the class reproduced the paper's claim", {})
    if found == stats.DIFFERS:
        return Verdict(interval, found, "the class's runs differ from the paper's claim", {})
    needed = interval.units_needed(0.8) if interval is not None else None
    more = {(a.tasks[0], n): max(1, (needed or 0) - int(interval.units)) if interval is not None else a.seeds[a.tasks[0]]
            for n in a.lengths}
    text = f"{NOT_YET}{_at(more)}" if needed is not None or interval is None else \
        f"{NOT_YET}the class's effect is too small to be resolved by more runs"
    return Verdict(interval, found, text, more)


def ended_verdict(a: Assignment, kept: pd.DataFrame, interval: stats.Interval | None) -> Verdict:
    """The verdict of an assignment the instructor ended, on the kept runs it got: "not resolved" while a
    task and n have fewer than 2 kept runs (no slope's spread can be estimated), else the fidelity
    page's rule, with the power those runs gave the design at the effect fixed in advance (`design_power`)."""
    counts = kept.groupby(["task", "n"]).size() if len(kept) else pd.Series(dtype=int)
    have = {(t, n): int(counts.get((t, n), 0)) for t in a.tasks for n in a.lengths}
    short = [f"{t} at n = {n}" for (t, n), k in have.items() if k < 2]
    if short or interval is None:
        return Verdict(interval, stats.UNRESOLVED, "not resolved: fewer than 2 converged runs of " + ", ".join(short), {})
    try:
        said = f"; with these runs the design had {design_power(a, have):.0%} power at the effect fixed in advance"
    except (ValueError, OSError, KeyError):  # the findings' tables are not on this server
        said = ""
    found = stats.verdict(interval, +1)
    words = {stats.REPRODUCED: "the class reproduced the paper's claim",
             stats.DIFFERS: "the class's runs differ from the paper's claim"}.get(found, "not resolved by the class's runs")
    return Verdict(interval, found, words + said, {})


if __name__ == "__main__":
    found = plan()
    print(describe(found))
    print(found)
