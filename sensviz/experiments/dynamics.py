"""Training dynamics (the paper's Fig. 3, 12-14): PARITY measured every `measure_every` steps on one
fixed batch with the same noise draws and directions each time (`sensviz.monitor.MeasurementCallback`).

The figure draws every measured quantity over training, one line per run; the fidelity page tests
the phases: sharpness rising into the minimum, then weight decay shrinking the norm while the
blowup grows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import altair as alt
import pandas as pd

from .. import stats
from ..claims import (
    PROXY,
    Claim,
    Tables,
    claim,
    claims_table,
    num,
    phases_of,
    rows_where,
    runs_line,
    setting_text,
    setup_table,
    span,
    table,
    threshold,
)
from ..configs import check, setting
from ..convergence import MSE_RULE
from ..figures import COLUMNS, NOTHING, PANEL, VALUE, ExperimentFigure, colour, keep, long_form, placeholder, thin
from . import Experiment

if TYPE_CHECKING:
    from ..experiment_jobs import Run
    from ..training import TrainResult

# ----------------------------------------------------------------------------- the settings


@dataclass
class DynamicsSettings:
    """The dynamics experiment's own setting."""

    measure_every: int = setting(100, "measure every this many steps", limit="train_steps")

    def __post_init__(self):
        check(self)


# ----------------------------------------------------------------------------- the job


def job(experiment: str, batch: list[Run], out: Path) -> list[dict]:
    """PARITY measured every `measure_every` steps on a fixed batch, the same draws every time."""
    from ..experiment_jobs import alone, pm1_scale, quantities, save_checkpoint, train_batch, training_metrics
    from ..monitor import MeasurementCallback  # torch: only where a job runs

    first = batch[0]
    monitor = MeasurementCallback(every=first.extra.measure_every, settings=first.measure,
                                  quantities=quantities(first, first.model))
    trained = train_batch(batch, callbacks=[monitor])
    frame = monitor.frame()

    def one(member: int, run: Run, result: TrainResult) -> dict:
        save_checkpoint(out, run, result)
        scale = pm1_scale(run.config)
        rows = frame[frame["member"] == member].drop(columns=["member"]).sort_values("step")
        for name in ("sharpness", "sharpness_limit", "sharpness_proxy"):
            rows[f"{name}_pm1"] = scale * rows[name]
        rows["log_authors_blowup"] = rows["authors_blowup"].map(math.log)
        history = rows.to_dict("records")
        final = history[-1]
        peak = rows.loc[rows["sharpness_proxy_pm1"].idxmax()]
        values = {
            **training_metrics(result),
            **{k: final[k] for k in ("param_norm", "avg_sensitivity", "blowup_mean", "log_blowup_mean",
                                     "authors_blowup", "sharpness_pm1", "sharpness_limit_pm1", "sharpness_proxy_pm1")},
            "pm1_scale": scale,
            "peak_sharpness_proxy_pm1": float(peak["sharpness_proxy_pm1"]),
            "peak_step": int(peak["step"]),
            "initial_sharpness_proxy_pm1": float(rows["sharpness_proxy_pm1"].iloc[0]),
        }
        return {"metrics": values, "history": history}

    return [alone(one, member, run, result) for member, (run, result) in enumerate(zip(batch, trained))]


# ----------------------------------------------------------------------------- the figure


METRICS = {
    "log10_loss": "log10 loss (MSE, fixed batch)",
    "sharpness_proxy_pm1": "sharpness proxy ×4 (the paper's)",
    "sharpness_limit_pm1": "lim L_ρ/ρ² (exact, ±1 scale)",
    "log_authors_blowup": "log Blowup (published code's aggregate)",
    "log_blowup_mean": "E log Blowup (ours)",
    "param_norm": "param_norm",
}


def figures(runs: pd.DataFrame, history: pd.DataFrame) -> list[ExperimentFigure]:
    """Every measured quantity over training, one line per kept run, coloured by weight decay."""
    if history.empty or "run_id" not in history:
        raise ValueError("this dynamics sweep has no per-step measurements (its history.parquet is empty)")
    kept, note = keep(runs, ["weight_decay"], MSE_RULE)
    rows = history[history["run_id"].isin(kept["run_id"])].copy()
    rows["log10_loss"] = rows["loss"].clip(lower=1e-12).map(math.log10)
    rows = rows.merge(kept[["run_id", "seed", "weight_decay"]], on="run_id")
    rows = thin(rows, len(METRICS))
    table = long_form(rows, ["run_id", "seed", "weight_decay", "step"], METRICS)
    chart = (
        alt.Chart(table)
        .mark_line(opacity=0.8)
        .encode(
            x=alt.X("step:Q", title="training step"),
            y=alt.Y("value:Q", title=None, scale=alt.Scale(zero=False)),
            color=colour("weight_decay", "weight decay", sorted(table["weight_decay"].unique())),
            detail="run_id:N",
            tooltip=["weight_decay:N", "seed:N", "step:Q", "metric:N", alt.Tooltip("value:Q", format=VALUE)],
        )
        .properties(**PANEL)
        .facet(facet=alt.Facet("metric:N", sort=list(METRICS.values()), title=None,
                               header=alt.Header(labelFontWeight="bold")), columns=COLUMNS)
        .resolve_scale(y="independent")
        .resolve_axis(x="independent")
        .properties(title="PARITY over training, measured on one fixed batch")
    ) if len(table) else placeholder(NOTHING)
    return [ExperimentFigure(
        key="dynamics",
        title="Training dynamics on PARITY",
        explanation=(
            "The paper: the loss falls in a short window; sharpness jumps around convergence, as the model "
            "enters a steep PARITY minimum together with a LayerNorm blowup; afterwards weight decay shrinks the "
            "parameter norm while the blowup grows, tracing the norm/blowup trade-off. Every run is measured "
            "every few steps on one fixed batch with the same noise draws and directions each time. One line per "
            "run, coloured by weight decay."
        ),
        chart=chart, data=table, note=note,
    )]


# ----------------------------------------------------------------------------- the fidelity page


def _tests(t: Tables, kept: pd.DataFrame) -> dict[str, tuple]:
    """Per claim key (D1, ... in order, from the weight decays in the table): (statement, quantity,
    direction, test, weight decays it reads) over the phases of the runs `kept`."""
    phases = phases_of(t, kept)
    decays = sorted(t.finished()["weight_decay"].unique())

    def at(decay):
        return rows_where(phases, weight_decay=decay) if len(phases) else phases

    found = [(f"Sharpness rises into the minimum (weight decay {num(decay, False)})",
              f"{PROXY} at convergence − at step 0, per seed", +1,
              lambda p=at(decay): stats.mean(p["sharpness_proxy_pm1_converged"] - p["sharpness_proxy_pm1_start"]),
              [decay]) for decay in decays]
    for decay in [d for d in decays if d > 0]:
        found += [(f"After convergence weight decay {num(decay, False)} shrinks the norm",
                   "param_norm at the end − at convergence, per seed", -1,
                   lambda p=at(decay): stats.mean(p["param_norm_end"] - p["param_norm_converged"]), [decay]),
                  (f"… while the blowup grows (weight decay {num(decay, False)})",
                   "log Blowup (published code's) at the end − at convergence, per seed", +1,
                   lambda p=at(decay): stats.mean(p["log_authors_blowup_end"] - p["log_authors_blowup_converged"]),
                   [decay])]
    if len(decays) >= 2:
        low, high = at(decays[0]), at(decays[-1])
        changed = f"weight decay {num(decays[-1], False)} − {num(decays[0], False)}"
        found += [("Weight decay ends at a smaller norm …", f"final param_norm, {changed}", -1,
                   lambda: stats.welch(high["param_norm_end"], low["param_norm_end"]), decays),
                  ("… and a larger blowup", f"final log Blowup (published code's), {changed}", +1,
                   lambda: stats.welch(high["log_authors_blowup_end"], low["log_authors_blowup_end"]), decays)]
    return {f"D{i + 1}": test for i, test in enumerate(found)}


def _claims(t: Tables) -> list[Claim]:
    """D1... over the runs kept at the end, with two secondaries: every run that ever met the filter
    (`converged_step`, the issue's survivorship question) and the accuracy filter."""
    done = t.finished()
    ever = done[done["converged_step"].notna()] if "converged_step" in done else done.iloc[0:0]
    secondaries = {"every run that ever converged": _tests(t, ever), "accuracy ≥ 0.99 filter": _tests(t, t.kept_accurate())}
    return [claim("dynamics", statement, quantity, direction, test, key=key,
                  survivors=t.survivors(done[done["weight_decay"].isin(decays)], ["weight_decay"]),
                  secondaries={label: tests[key][3] for label, tests in secondaries.items()})
            for key, (statement, quantity, direction, test, decays) in _tests(t, t.kept()).items()]


def section(t: Tables) -> tuple[str, list[Claim]]:
    """Section 3 of the fidelity page: the phases of training, per kept run, and their claims (D1, ...)."""
    kept = t.kept()
    phases = phases_of(t, kept)
    limit = threshold(t.runs)
    claims = _claims(t)
    run_rows = [[num(r["seed"]), num(r["weight_decay"], False), num(r["converged_step"]), num(r["window"]),
                 f"{num(r['sharpness_proxy_pm1_start'])} / {num(r['sharpness_proxy_pm1_converged'])} / "
                 f"{num(r['sharpness_proxy_pm1_peak'])} / {num(r['sharpness_proxy_pm1_end'])}",
                 f"{num(r['param_norm_start'])} / {num(r['param_norm_converged'])} / {num(r['param_norm_end'])}",
                 f"{num(math.exp(r['log_authors_blowup_converged']))} / {num(math.exp(r['log_authors_blowup_end']))}"]
                for _, r in phases.iterrows()]
    steps = phases["steps"].max() if len(phases) else math.nan
    text = [
        "## 3. Training dynamics on PARITY (Fig. 3, 12–14)",
        "**The paper:** the loss falls in a short window; sharpness jumps around convergence as the model enters a "
        "steep PARITY minimum, together with LayerNorm blowup; afterwards weight decay shrinks the parameter norm "
        "while the blowup grows.",
        setup_table(t),
        runs_line(t, ["weight_decay", "seed"]),
        f"Per kept run, measured on one fixed batch with the same noise draws at every step: the step at which the "
        f"fixed batch's MSE first falls below {num(limit, False)} (convergence), the steps since its last value above "
        f"{num(100 * limit, False)} (the window), and the measurements at step 0 / convergence / peak / end:",
        table(["seed", "weight decay", "converged at step", "window (steps)", f"{PROXY}: start / conv. / peak / end",
               "param_norm: start / conv. / end", "Blowup (published code's): conv. / end"], run_rows),
        (f"The loss falls within {span(phases['window'])} steps of training runs of {num(steps)} steps; after "
         f"convergence {span(steps - phases['converged_step'])} steps remain (the spec's paper scale trains "
         f"{setting_text(t.paper, 'steps')} steps)." if len(phases) else ""),
        claims_table(claims),
    ]
    return "\n\n".join(text), claims


# ----------------------------------------------------------------------------- the registration

EXPERIMENT = Experiment("dynamics", 3, job, ("seed",), figures, (section,),
                        {"task": "parity", "measure_inputs": 256}, DynamicsSettings)
