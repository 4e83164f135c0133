"""Paper-style figures of the experiments' result tables (Altair), for the app and the HTML report.

Each experiment draws its own figures (`Experiment.figures`, in its module of `sensviz.experiments`)
with what this module shares: run selection and the filter's note (`keep`), summaries, colours and
panels; `sensviz.results.figures(experiment, runs, history)` calls them by name (this module reads
no registry). An experiment's figures take the tables of its sweep (`sensviz.sweeps.read_results`: one
row per run with settings and final metrics, and the per-step history) and return `ExperimentFigure`s: the chart, a title, a short
explanation of the paper's claim and how to read the chart, the small aggregated table behind it,
and a note saying which runs it kept. Every figure applies the paper's
convergence filter (final evaluation MSE < 0.001; scratchpad models: autoregressive accuracy
> 0.999, the `converged` column of `sensviz.experiments`) and says how many runs it dropped.
Sharpness is shown on the ±1 scale (x4 for MSE on {0,1} targets), as the paper plots it; error
bars are ± one standard error over seeds.

Every chart reads at a 1024-px window, in the app beside its sidebar as in the report: multi-panel
figures are two panels wide (at most `MAX_WIDTH` px with their axes), legends sit on top, single
charts fit their width (`autosize` fit-x: the given width includes axes and legends, the height is
the plot's), colours are fixed per task with PARITY the strongest, and every tooltip prints 3-4
significant digits and the mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import altair as alt
import pandas as pd

MAX_ROWS = 5000
"""Altair's default row limit: longer per-step tables are thinned to fewer steps."""

MAX_WIDTH = 560
"""Widest figure, axes and legends included: the app's main column beside its sidebar at a 1024-px window."""
PANEL = {"width": 200, "height": 140}
"""One panel of a multi-panel figure; `COLUMNS` of them side by side."""
COLUMNS = 2
SINGLE = {"width": 520, "height": 220}
"""A single chart: its width includes axes and legends (fit-x), its height is the plot's."""
FIT_X = alt.AutoSizeParams(type="fit-x", contains="padding")

TASK_COLORS = {"parity": "#b2182b", "majority": "#4393c3", "first": "#3a923a", "mean": "#9970ab"}
"""A fixed colour per task, in the order the legends list them; PARITY, the paper's key task, the strongest
(darkest) and every one dark enough to read on white (contrast at least 3:1)."""
COLORS = ("#2166ac", "#b2182b", "#3a923a", "#9970ab", "#c66a00", "#35978f", "#525252")
"""Colours, in order, of other categories (weight decays, models, functions)."""
VALUE, ERROR = ".4~g", ".2~g"
"""Tooltip formats: values to 4 significant digits, standard errors to 2."""

@dataclass
class ExperimentFigure:
    """One chart of an experiment, with what it shows and the data behind it."""

    key: str  # a short id, also the CSV file name of `data`
    title: str
    explanation: str  # the paper's claim and how to read the chart (plain text)
    chart: alt.TopLevelMixin
    data: pd.DataFrame  # the table the chart draws
    note: str  # which runs were kept, dropped by the convergence filter, or failed


# ----------------------------------------------------------------------------- run selection


def finished(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs that finished (failed runs have no metrics)."""
    if "status" not in runs:
        return runs
    return runs[runs["status"] == "finished"]


def converged(runs: pd.DataFrame, column: str = "converged") -> pd.Series:
    """The convergence filter as a boolean mask (missing values count as not converged)."""
    return runs[column].fillna(False).astype(bool)


def _describe(runs: pd.DataFrame, by: list[str]) -> str:
    groups = runs.groupby(by, dropna=False).size()
    parts = []
    for key, count in groups.items():
        key = key if isinstance(key, tuple) else (key,)
        parts.append(" ".join(f"{name}={value}" for name, value in zip(by, key)) + f" ×{count}")
    return ", ".join(parts)


def keep(runs: pd.DataFrame, by: list[str], rule: str, column: str = "converged") -> tuple[pd.DataFrame, str]:
    """The finished runs that pass the convergence filter, and a note: kept, dropped (by group), failed."""
    done = finished(runs)
    mask = converged(done, column) if len(done) else pd.Series(dtype=bool)
    kept, dropped = done[mask], done[~mask]
    note = f"{len(kept)} of {len(done)} finished runs kept ({rule})"
    if len(dropped):
        note += f"; dropped: {_describe(dropped, [b for b in by if b in dropped])}"
    failed = len(runs) - len(done)
    if failed:
        note += f"; {failed} run(s) failed (see the error column of runs.parquet)"
    return kept, note + "."


NOTHING = "No run passed the convergence filter: nothing to draw (see the note)."


# ----------------------------------------------------------------------------- shared charts


def placeholder(message: str) -> alt.Chart:
    """A chart that only says why there is nothing to draw (e.g. no run passed the filter)."""
    return (alt.Chart(pd.DataFrame({"message": [message]})).mark_text(size=14, color="gray")
            .encode(text="message:N").properties(width=SINGLE["width"], height=60))


def legend(**options) -> alt.Legend:
    """A legend on top of the chart, where it takes height, not width."""
    return alt.Legend(**{"orient": "top", "direction": "horizontal", "labelLimit": 260, "titleLimit": 260, **options})


def colour(field: str, title: str | None, values, palette: dict | None = None, **legend_options) -> alt.Color:
    """A nominal colour with a fixed domain (`values` in order) and fixed colours: `palette[value]`
    where given, else `COLORS` in turn."""
    values = list(dict.fromkeys(values))
    spare = iter(c for c in COLORS if c not in (palette or {}).values())
    colours = [(palette or {}).get(v) or next(spare, "#525252") for v in values]
    return alt.Color(f"{field}:N", title=title, scale=alt.Scale(domain=values, range=colours),
                     legend=legend(**legend_options))


def task_colour(tasks) -> alt.Color:
    """The task's colour: `TASK_COLORS` in their order, PARITY first; other tasks after them."""
    present = set(pd.Series(list(tasks)).dropna())
    order = [t for t in TASK_COLORS if t in present] + sorted(present - set(TASK_COLORS))
    return colour("task", "task", order, TASK_COLORS, labelExpr="upper(datum.label)")


def summarise(runs: pd.DataFrame, by: list[str], metrics: dict[str, str]) -> pd.DataFrame:
    """Mean, standard error and count of each metric per group, in long form:
    columns `by`..., metric (the label), mean, stderr, low, high, count."""
    rows = []
    for key, group in runs.groupby(by, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        for column, label in metrics.items():
            values = pd.to_numeric(group[column], errors="coerce").dropna() if column in group else pd.Series(dtype=float)
            if values.empty:
                continue
            stderr = values.std() / math.sqrt(len(values)) if len(values) > 1 else 0.0
            rows.append({**dict(zip(by, key)), "metric": label, "mean": values.mean(), "stderr": stderr,
                         "low": values.mean() - stderr, "high": values.mean() + stderr, "count": len(values)})
    return pd.DataFrame(rows, columns=[*by, "metric", "mean", "stderr", "low", "high", "count"])


def tick_format(values: pd.Series) -> str:
    """Integers as integers (never '1e+1'), other numbers to 3 significant digits."""
    return "d" if (values.dropna() == values.dropna().round()).all() else ".3~g"


def panels(table: pd.DataFrame, x: str, x_title: str, color: alt.Color, order: list[str],
           x_scale: alt.Scale | None = None) -> alt.FacetChart:
    """One panel per metric (independent y axes, `COLUMNS` wide, each with its own x axis so that a
    short last row draws no empty axis): mean ± stderr against x, a line per colour; the x axis is
    labelled at the measured values of x."""
    x_enc = alt.X(f"{x}:Q", title=x_title, scale=x_scale or alt.Scale(zero=False),
                  axis=alt.Axis(values=sorted(table[x].unique().tolist()), format=tick_format(table[x])))
    named = color.to_dict()
    tooltip = [alt.Tooltip(f"{named['field']}:N", title=named.get("title")), alt.Tooltip(f"{x}:Q", format="~g"),
               "metric:N", alt.Tooltip("mean:Q", format=VALUE), alt.Tooltip("stderr:Q", format=ERROR), "count:Q"]
    base = alt.Chart().encode(x=x_enc, color=color, tooltip=tooltip)
    lines = base.mark_line(point=True).encode(
        y=alt.Y("mean:Q", title=None, scale=alt.Scale(zero=False), axis=alt.Axis(format=".3~g")))
    bars = base.mark_errorbar().encode(y="low:Q", y2="high:Q")
    return (
        alt.layer(lines, bars, data=table)
        .properties(**PANEL)
        .facet(facet=alt.Facet("metric:N", sort=order, title=None, header=alt.Header(labelFontWeight="bold")),
               columns=COLUMNS)
        .resolve_scale(y="independent")
        .resolve_axis(x="independent")
    )


def long_form(frame: pd.DataFrame, id_vars: list[str], metrics: dict[str, str]) -> pd.DataFrame:
    """The metrics present in `frame` in long form: the `id_vars`, `metric` (the label) and `value`, missing values dropped."""
    present = {k: v for k, v in metrics.items() if k in frame}
    long = frame[id_vars + list(present)].melt(id_vars=id_vars, var_name="metric", value_name="value")
    long["metric"] = long["metric"].map(present)
    return long.dropna(subset=["value"])


def thin(history: pd.DataFrame, per_row: int) -> pd.DataFrame:
    """Every k-th measured step so that the long table stays under MAX_ROWS rows."""
    steps = sorted(history["step"].unique())
    rows = len(history) * per_row
    if rows <= MAX_ROWS:
        return history
    stride = math.ceil(rows / MAX_ROWS)
    return history[history["step"].isin(steps[::stride] + steps[-1:])]
