"""Tables and charts of initialisation studies: the distribution over inits, and where training goes from it.

The monitor (`sensviz.monitor.MeasurementCallback(quantities=(..., "scale_free"))`) records the
study's quantities of the model in training (`sensviz.init_study.scale_free_view`); here they meet
the distribution over random initialisations (`sensviz.init_study.InitStudy`) of the same
architecture at the same n:

- `band`: the 5 %, 50 % and 95 % quantiles over initialisations of one quantity, and the target's value;
- `path`: the run's trace of the same quantity, one row per measured step (and member of a batched run);
  `path_table`: every quantity's trace and the accuracy, one row per measured step;
- `path_chart`: the band drawn across the steps as the starting band, its median as a dashed line, the
  target as a solid rule, and the path between;
- `study_table`: one row per initialisation and init scale; `profile_table`: the mean degree profile
  per scale and the target's, for `sensviz.charts.degree_profiles`; `distribution_chart`: as_n of
  every initialisation per init scale, beside n/2 (a random Boolean function) and the target.

Quantities (`QUANTITIES`): `avg_sensitivity` (as_n of sign(T - median T)), `min_sensitivity`,
`attention_entropy` (over log n); the target has no attention, so only the first two have a target.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd
import torch

from .init_study import InitStudy

QUANTITIES = {
    "avg_sensitivity": ("scale_free_avg_sensitivity", "target_avg_sensitivity", "as_n(sign(T − median T))"),
    "min_sensitivity": ("scale_free_min_sensitivity", "target_min_sensitivity", "min_x s(f,x)"),
    "attention_entropy": ("attention_entropy", None, "attention entropy / log n"),
}
"""Quantity -> (the monitor's column, the study's target field or None, the axis title)."""


def _check(quantity: str) -> tuple[str, str | None, str]:
    if quantity not in QUANTITIES:
        raise ValueError(f"unknown quantity '{quantity}'; use one of {sorted(QUANTITIES)}")
    return QUANTITIES[quantity]


def band(study: InitStudy, quantity: str) -> dict:
    """The study's 5/50/95 % quantiles of `quantity` over initialisations, and the target's value (or None)."""
    _, target, _ = _check(quantity)
    values = getattr(study, quantity).double()
    low, median, high = torch.quantile(values, torch.tensor([0.05, 0.5, 0.95], dtype=torch.float64)).tolist()
    return {"quantity": quantity, "init_scale": study.init_scale, "n_inits": study.n_inits, "q05": low,
            "median": median, "q95": high, "target": None if target is None else getattr(study, target)}


def path(records: Sequence[dict], quantity: str) -> pd.DataFrame:
    """The monitor's trace of `quantity`: columns step, member, value (records that lack it are refused)."""
    column, _, _ = _check(quantity)
    missing = [r.get("step") for r in records if column not in r]
    if missing:
        raise ValueError(f"records at steps {missing[:5]} lack '{column}': measure the 'scale_free' quantity")
    return pd.DataFrame({"step": [r["step"] for r in records], "member": [r.get("member", 0) for r in records],
                         "value": [r[column] for r in records]})


def path_table(records: Sequence[dict]) -> pd.DataFrame:
    """The run's trace of every quantity and its accuracy: columns step, accuracy, avg_sensitivity, ... (a download)."""
    traces = {quantity: path(records, quantity)["value"] for quantity in QUANTITIES}
    return pd.DataFrame({"step": [r["step"] for r in records], "accuracy": [r.get("accuracy") for r in records],
                         **traces})


def path_chart(study: InitStudy, records: Sequence[dict], quantity: str, width: int = 520, height: int = 200):
    """The starting band of `study` across the steps, its median, the target and the run's path (Altair)."""
    _, _, title = _check(quantity)
    found, trace = band(study, quantity), path(records, quantity)
    span = pd.DataFrame([{**found, "from": trace["step"].min(), "to": trace["step"].max(),
                          "label": f"{study.n_inits} random inits (5–95 %), scale {study.init_scale:g}"}])
    x = alt.X("step:Q", title="training step")
    layers = [
        alt.Chart(span).mark_rect(opacity=0.25, color="#888888").encode(
            x=alt.X("from:Q", title="training step"), x2="to:Q", y=alt.Y("q05:Q", title=title), y2="q95:Q",
            tooltip=["label:N", alt.Tooltip("q05:Q", format=".4~g"), alt.Tooltip("q95:Q", format=".4~g")]),
        alt.Chart(span).mark_rule(strokeDash=[4, 3], color="#555555").encode(
            y="median:Q", tooltip=[alt.Tooltip("median:Q", title="median of the inits", format=".4~g")]),
        alt.Chart(trace).mark_line(point=True, color="#1f77b4").encode(
            x=x, y="value:Q", detail="member:N",
            tooltip=["step:Q", "member:N", alt.Tooltip("value:Q", format=".4~g")]),
    ]
    if found["target"] is not None:
        layers.append(alt.Chart(span).mark_rule(color="#d62728").encode(
            y="target:Q", tooltip=[alt.Tooltip("target:Q", title=f"target ({study.task})", format=".4~g")]))
    return alt.layer(*layers).properties(width=width, height=height,
                                         title=f"{title}: from the initialisation band to the target")


def study_table(studies: Sequence[InitStudy]) -> pd.DataFrame:
    """One row per initialisation and study: init_scale, init, avg_sensitivity, min_sensitivity, attention_entropy."""
    return pd.concat([pd.DataFrame({"init_scale": s.init_scale, "init": range(s.seed, s.seed + s.n_inits),
                                    **{q: getattr(s, q).numpy() for q in QUANTITIES}}) for s in studies],
                     ignore_index=True)


def profile_table(studies: Sequence[InitStudy]) -> pd.DataFrame:
    """The mean degree profile over initialisations per init scale, and the target's (columns model, degree, weight)."""
    rows = [{"model": f"inits, scale {s.init_scale:g}", "degree": k, "weight": w}
            for s in studies for k, w in enumerate(s.degree_profile.mean(dim=0).tolist())]
    first = studies[0]
    if first.target_degree_profile is not None:
        rows += [{"model": f"target ({first.task})", "degree": k, "weight": w}
                 for k, w in enumerate(first.target_degree_profile.tolist())]
    return pd.DataFrame(rows)


def distribution_chart(table: pd.DataFrame, n: int, target: float | None, width: int = 520) -> alt.LayerChart:
    """as_n of every initialisation (`study_table`), one row per init scale, with n/2 and the target as rules."""
    marks = pd.DataFrame([{"value": n / 2, "what": "n/2: a random Boolean function"}]
                         + ([] if target is None else [{"value": target, "what": "the target"}]))
    ticks = alt.Chart(table).mark_tick(opacity=0.5, thickness=2).encode(
        x=alt.X("avg_sensitivity:Q", title="as_n(sign(T − median T)) per initialisation",
                scale=alt.Scale(domain=[0, n])),
        y=alt.Y("init_scale:O", title="init scale"),
        tooltip=["init_scale:O", "init:Q", alt.Tooltip("avg_sensitivity:Q", format=".4~g")])
    rules = alt.Chart(marks).mark_rule(strokeWidth=2).encode(
        x="value:Q", color=alt.Color("what:N", title="", scale=alt.Scale(range=["#555555", "#d62728"])),
        tooltip=["what:N", alt.Tooltip("value:Q", format=".4~g")])
    return alt.layer(ticks, rules).properties(width=width, height=max(100, 40 * table["init_scale"].nunique()))
