"""Altair charts of sensviz's tidy tables, shared by the explorer's pages, the Lab and its handout.

Functions take a pandas DataFrame (from `sensviz.tables`, or a small frame of a page or chapter)
and return an Altair chart; they compute nothing beyond Altair's own encodings. Every chart has
tooltips with 3–4 significant digits and labelled axes, fits the main column of the app at a
1024-px-wide window (`WIDTH`), and is at least ~100 px tall. Several models in one chart (compare
mode, the Lab) are told apart by `model_colour`: a fixed colour per model label, PARITY's red first.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from .figures import COLORS, TASK_COLORS

WIDTH = 520
"""Width of a full-width chart: the app's main column beside the sidebar is about 560 px at 1024 px."""
VALUE = ".4~g"
"""Tooltip format of values."""


def model_colour(labels, field: str = "model", title: str = "") -> alt.Color:
    """A colour per model label, fixed by order of appearance; labels named after a task take its colour."""
    order = list(dict.fromkeys(pd.Series(list(labels)).dropna()))
    palette = [TASK_COLORS.get(str(label).lower(), COLORS[i % len(COLORS)]) for i, label in enumerate(order)]
    return alt.Color(f"{field}:N", title=title, scale=alt.Scale(domain=order, range=palette),
                     legend=alt.Legend(orient="top"))


def _cube_grid(table: pd.DataFrame, value: str, n: int, title: str, cell: int) -> alt.Chart:
    """One model's cube as a Karnaugh map on the fixed colour domain [0, n]; a dot marks f(x) = 1."""
    rows_bits = (n + 1) // 2
    frame = table.assign(row_bits=table["bits"].str[:rows_bits], col_bits=table["bits"].str[rows_bits:])
    row_order = frame.sort_values("row")["row_bits"].drop_duplicates().tolist()
    col_order = frame.sort_values("col")["col_bits"].drop_duplicates().tolist()
    x = alt.X("col_bits:O", sort=col_order, title=f"bits {rows_bits + 1}..{n}",
              axis=alt.Axis(labelAngle=-90, labelFontSize=9))
    y = alt.Y("row_bits:O", sort=row_order, title=f"bits 1..{rows_bits}", axis=alt.Axis(labelFontSize=9))
    tooltip = ["bits:N", "vertex:Q", alt.Tooltip("output:Q", format=VALUE), alt.Tooltip(f"{value}:Q", format=".3~g")]
    if "target" in frame:
        tooltip.append("target:Q")
    cells = alt.Chart(frame, title=title).mark_rect(stroke="white", strokeWidth=0.5).encode(
        x=x, y=y, tooltip=tooltip,
        color=alt.Color(f"{value}:Q", title="s(f,x)", scale=alt.Scale(domain=[0, n], scheme="viridis"),
                        legend=alt.Legend(orient="top", gradientLength=160)),
    )
    layers = [cells]
    if "target" in frame:
        ones = frame[frame["target"] > 0.5]
        layers.append(alt.Chart(ones).mark_circle(size=max(4, cell * cell // 10), color="white", opacity=0.8)
                      .encode(x=x, y=y))
    side = cell * len(row_order)
    return alt.layer(*layers).properties(width=cell * len(col_order), height=side)


def cube_grids(tables: dict[str, pd.DataFrame], value: str, n: int) -> alt.HConcatChart:
    """The cubes of several models side by side on one colour scale [0, n] (equal colours, equal s)."""
    cell = max(6, min(30, (WIDTH // max(len(tables), 1) - 60) // 2 ** (n // 2)))
    return alt.hconcat(*[_cube_grid(t, value, n, label, cell) for label, t in tables.items()]).resolve_scale(
        color="shared")


def degree_profiles(table: pd.DataFrame) -> alt.Chart:
    """Fourier degree profiles d_k of several models (`model`, `degree`, `weight`) as grouped bars."""
    return alt.Chart(table).mark_bar().encode(
        x=alt.X("degree:O", title="degree k"), xOffset="model:N",
        y=alt.Y("weight:Q", title="d_k = Σ λ_P² over |P| = k", scale=alt.Scale(domain=[0, 1])),
        color=model_colour(table["model"]),
        tooltip=["model:N", "degree:O", alt.Tooltip("weight:Q", format=VALUE)],
    ).properties(width=WIDTH, height=200)


def model_log_histograms(table: pd.DataFrame) -> alt.Chart:
    """Distributions over log10 bins (`log10_start`, `log10_end`, `fraction`) of several models, as steps."""
    return alt.Chart(table).mark_line(interpolate="step-after", point=True).encode(
        x=alt.X("log10_start:Q", title="log10 Blowup(x)"), y=alt.Y("fraction:Q", title="fraction of inputs"),
        color=model_colour(table["model"]),
        tooltip=["model:N", alt.Tooltip("log10_start:Q", format=".3~g"), alt.Tooltip("fraction:Q", format=VALUE)],
    ).properties(width=WIDTH, height=200)


def blowup_by_sensitivity(table: pd.DataFrame) -> alt.Chart:
    """Blowup(x) of the inputs with each s(f,x) (`function`, `s`, `q10`, `median`, `q90`): median and range."""
    colour = model_colour(table["function"], "function")
    base = alt.Chart(table).encode(
        x=alt.X("s:Q", title="s(f,x) of the same input", scale=alt.Scale(nice=True, padding=12)),
        color=colour,
        tooltip=["function:N", alt.Tooltip("s:Q", format=".3~g"), "count:Q", alt.Tooltip("median:Q", format=VALUE),
                 alt.Tooltip("q10:Q", format=VALUE), alt.Tooltip("q90:Q", format=VALUE)],
    )
    y = alt.Y("q10:Q", title="Blowup(x)", scale=alt.Scale(type="log", padding=12))
    return (base.mark_rule(strokeWidth=2).encode(y=y, y2="q90:Q")
            + base.mark_point(filled=True, size=60).encode(y="median:Q")).properties(width=WIDTH, height=220)


def radius_curves(table: pd.DataFrame, paper_rho: float) -> alt.LayerChart:
    """L_rho/rho^2 against rho per model (`model`, `rho`, `ratio`, `low`, `high`, `limit`), log axes; dashed:
    each model's exact small-rho limit; the grey rule: the paper's radius."""
    colour = model_colour(table["model"])
    x = alt.X("rho:Q", title="radius ρ", scale=alt.Scale(type="log"))
    y = alt.Y("ratio:Q", title="L_ρ / ρ²", scale=alt.Scale(type="log"))
    tooltip = ["model:N", alt.Tooltip("rho:Q", format=".3~g"), alt.Tooltip("ratio:Q", format=VALUE),
               alt.Tooltip("limit:Q", format=VALUE, title="small-ρ limit")]
    lines = alt.Chart(table).mark_line(point=True).encode(x=x, y=y, color=colour, tooltip=tooltip)
    bars = alt.Chart(table).mark_rule().encode(x=x, y=alt.Y("low:Q", scale=alt.Scale(type="log")), y2="high:Q",
                                               color=colour)
    limits = alt.Chart(table.drop_duplicates("model")).mark_rule(strokeDash=[6, 4]).encode(
        y="limit:Q", color=colour, tooltip=["model:N", alt.Tooltip("limit:Q", format=VALUE, title="small-ρ limit")])
    paper = alt.Chart(pd.DataFrame({"rho": [paper_rho]})).mark_rule(color="#888").encode(
        x="rho:Q", tooltip=[alt.Tooltip("rho:Q", format=".3~g", title="the paper's radius 0.02·√P")])
    return (lines + bars + limits + paper).properties(width=WIDTH, height=240)


def model_lines(table: pd.DataFrame, x: str, y: str, x_title: str, y_title: str) -> alt.Chart:
    """One line per model (`model` column) of y against x, e.g. loss slices of several models overlaid."""
    return alt.Chart(table).mark_line(point=True).encode(
        x=alt.X(f"{x}:Q", title=x_title), y=alt.Y(f"{y}:Q", title=y_title), color=model_colour(table["model"]),
        tooltip=["model:N", alt.Tooltip(f"{x}:Q", format=".3~g"), alt.Tooltip(f"{y}:Q", format=VALUE)],
    ).properties(width=WIDTH, height=220)


def length_scaling(points: pd.DataFrame, models: pd.DataFrame) -> alt.LayerChart:
    """Sharpness against n per task (`task`, `n`, `mean`, `low`, `high`) with single models as diamonds
    (`model`, `task`, `n`, `value`)."""
    order = [t for t in TASK_COLORS if t in set(points["task"])]
    colour = alt.Color("task:N", title="task", scale=alt.Scale(domain=order, range=[TASK_COLORS[t] for t in order]),
                       legend=alt.Legend(orient="top", labelExpr="upper(datum.label)"))
    x = alt.X("n:Q", title="input length n", axis=alt.Axis(tickMinStep=1, format="d"))
    y = alt.Y("mean:Q", title="sharpness proxy ×4")
    tooltip = ["task:N", "n:Q", alt.Tooltip("mean:Q", format=VALUE), alt.Tooltip("stderr:Q", format=".2~g"),
               "count:Q"]
    lines = alt.Chart(points).mark_line(point=True).encode(x=x, y=y, color=colour, tooltip=tooltip)
    bars = alt.Chart(points).mark_rule().encode(x=x, y="low:Q", y2="high:Q", color=colour)
    mine = alt.Chart(models).mark_point(shape="diamond", size=110, filled=True, color="#222").encode(
        x="n:Q", y="value:Q", tooltip=["model:N", "n:Q", alt.Tooltip("value:Q", format=VALUE)])
    return (lines + bars + mine).properties(width=WIDTH, height=260)


def sensitivity_strip(table: pd.DataFrame) -> alt.Chart:
    """as_n of several functions (`function`, `as_n`): one row of dots per kind of function."""
    return alt.Chart(table).mark_tick(thickness=3, size=26).encode(
        x=alt.X("as_n:Q", title="average sensitivity as_n", scale=alt.Scale(zero=True)),
        y=alt.Y("function:N", title=None, sort=None, axis=alt.Axis(labelLimit=260)),
        color=alt.Color("function:N", legend=None),
        tooltip=["function:N", alt.Tooltip("as_n:Q", format=VALUE)],
    ).properties(width=WIDTH - 200, height=130)


def training_curves(table: pd.DataFrame, title: str = "", columns: int = 3) -> alt.FacetChart:
    """Each measurement over the training steps (`step`, `metric`, `value`, `stderr`), one small panel per metric."""
    base = alt.Chart(table).encode(
        x=alt.X("step:Q", title="training step"),
        tooltip=["metric:N", "step:Q", alt.Tooltip("value:Q", format=VALUE), alt.Tooltip("stderr:Q", format=".2~g")],
    )
    width = (WIDTH - 40 * columns) // columns
    line = base.mark_line(point=True).encode(y=alt.Y("value:Q", title=None, scale=alt.Scale(zero=False)))
    return (
        line.properties(width=width, height=140)
        .facet(facet=alt.Facet("metric:N", title=None), columns=columns)
        .resolve_scale(y="independent")
        .properties(title=title)
    )


def degree_history(table: pd.DataFrame, title: str = "") -> alt.Chart:
    """The Fourier degree profile d_k of the model over training (`step`, `degree`, `weight`)."""
    return (
        alt.Chart(table, title=title)
        .mark_rect()
        .encode(
            x=alt.X("step:O", title="training step", axis=alt.Axis(labelAngle=-90)),
            y=alt.Y("degree:O", title="degree k", sort="descending"),
            color=alt.Color("weight:Q", scale=alt.Scale(scheme="greens", domain=[0, 1]), title="d_k"),
            tooltip=["step:O", "degree:O", alt.Tooltip("weight:Q", format=VALUE)],
        )
        .properties(width=WIDTH, height=180)
    )
