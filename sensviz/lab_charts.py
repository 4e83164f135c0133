"""The Lab's own charts, where the explorer's (`sensviz.charts`) would give the answer away or hide a mark.

`ticks`: every chart's x axis with at most one tick per `TICK_PX` of the width it is drawn at (Streamlit stretches a
single or layered chart to its column: 564 px in a 1024 px window, 747 px in a 1280 px one) and Vega's overlap
rule on with room between labels, so two tick labels never touch ("−5.0−4.5") at any width.

`strip`: as_n of several kinds of function on one axis that always spans every possible value, 0 to n, so
the axis's extent says nothing about a mark left out before the reveal, and a mark at n is drawn whole;
each kind in its own colour and shape, so two kinds never share a colour (on screen or printed in grey); a kind that
names a task ("trained PARITY model") in that task's colour, as in every other chart.

A series keeps its colour, shape and dash before and after the reveal and from chart to chart: `fixed_domain` and
`length_scaling` give the explorer's range-only scales their domain. `radius_ticks` ticks chapter 4's log radius axis.
"""

from __future__ import annotations

import math
import re

import altair as alt
import pandas as pd

from . import charts
from .figures import COLORS as SERIES_COLOURS
from .figures import TASK_COLORS

SHAPES = ("circle", "square", "triangle-up", "diamond", "cross", "triangle-down")
COLOURS = ("#6b6b6b", SERIES_COLOURS[0], "#d35400", "#111111", "#7b3294", "#1b7837")
"""The strip's kinds that name no task, in order: grey, then the first series colour of the other charts (chapter 7's
random transformers are that blue in its degree chart too), orange, black, purple, green."""
EDGE_PX = 14  # room beyond 0 and n, so a mark at either end is drawn whole
TICK_PX = 90
"""Width per x-axis tick: Vega-Lite's own default is one per 40 px, too dense for 14 px labels of four to six
characters ("−4.5", "−0.05": 34 to 43 px in DejaVu Sans); d3's round steps give at most √2 as many ticks as asked
for, so they stay at least 63 px apart."""
LABEL_GAP_PX = 6
"""Least room between two tick labels of one axis: Vega hides every other label until they keep it."""
COMPOUND = ("concat", "hconcat", "vconcat")


def ticks(chart):
    """The top-level `chart` with its x axes' tick count following the plot's width, one tick per `TICK_PX` at most,
    and its labels kept apart (`LABEL_GAP_PX`, overlap removed; the end labels centred on their ticks, not flush
    with the axis's ends, where Vega-Lite's default puts them half a label nearer their neighbours). A single or
    layered chart is stretched to its column: its count is an expression of its drawn width; the views of a
    concatenated or faceted chart keep their own widths: the count for the narrowest."""
    widths = _view_widths(chart)
    count = {"expr": f"ceil(width / {TICK_PX})"} if widths is None else max(2, math.ceil(min(widths) / TICK_PX))
    axis = {**_config(chart, "axis"), "labelOverlap": True, "labelSeparation": LABEL_GAP_PX}
    axis_x = {**_config(chart, "axisX"), "tickCount": count, "labelFlush": False}
    return chart.configure_axis(**axis).configure_axisX(**axis_x)  # each replaces its part of the config: kept above


def _view_widths(chart) -> list[float] | None:
    """The declared widths of a compound chart's views (None: a single or layered chart, drawn at its column's width)."""
    if isinstance(chart, alt.FacetChart):
        return [chart.spec.width if isinstance(chart.spec.width, (int, float)) else charts.WIDTH]
    parts = next((getattr(chart, name) for name in COMPOUND if getattr(chart, name, alt.Undefined) is not alt.Undefined), None)
    if parts is None:
        return None
    return [w for part in parts for w in (_view_widths(part) or
                                          [part.width if isinstance(part.width, (int, float)) else charts.WIDTH])]


def _config(chart, part: str) -> dict:
    """One part of a chart's config as a dict ({} when unset)."""
    found = alt.Undefined if chart.config is alt.Undefined else getattr(chart.config, part, alt.Undefined)
    return {} if found is alt.Undefined else found.to_dict(validate=False)


def strip(table: pd.DataFrame, n: int, kinds: tuple[str, ...]) -> alt.Chart:
    """as_n of the functions in `table` (`function`, `as_n`), one row per kind, on an axis from 0 to `n`:
    `kinds` fixes each kind's colour and shape (the same kind looks the same with or without the others)."""
    kinds = tuple(kinds)
    shown = [k for k in kinds if k in set(table["function"])]
    style = {"domain": list(kinds), "range": kind_colours(kinds)}
    return alt.Chart(table).mark_point(size=70, filled=True, opacity=0.8).encode(
        x=alt.X("as_n:Q", title="average sensitivity as_n (0 to n)",
                scale=alt.Scale(domain=[0, n], nice=False, padding=EDGE_PX)),
        y=alt.Y("function:N", title=None, sort=shown, axis=alt.Axis(labelLimit=300)),
        color=alt.Color("function:N", scale=alt.Scale(**style), legend=None),
        shape=alt.Shape("function:N", scale=alt.Scale(domain=list(kinds), range=list(SHAPES[: len(kinds)])), legend=None),
        tooltip=["function:N", alt.Tooltip("as_n:Q", format=charts.VALUE)],
    ).properties(width=charts.WIDTH, height=30 * max(len(shown), 2) + 40, autosize=charts.FIT_X)


def kind_colours(kinds: tuple[str, ...]) -> list[str]:
    """A colour per kind: its task's (`figures.TASK_COLORS`) where its label names one task in capitals, else the
    next of `COLOURS`."""
    found, free = [], iter(COLOURS)
    for kind in kinds:
        tasks = [w.lower() for w in re.findall(r"[A-Z]{4,}", kind) if w.lower() in TASK_COLORS]
        found.append(TASK_COLORS[tasks[0]] if len(tasks) == 1 else next(free))
    return found


SINGLE_COLOURS = ("#222222", "#e8590c", "#7048e8", "#0c8599")
"""Chapter 5's single models: the pretrained ones black, a student's own in a colour of its own, so that a model
trained like the pretrained one (same point) still shows on top of it."""


def length_scaling(points: pd.DataFrame, models: pd.DataFrame) -> alt.LayerChart:
    """Chapter 5's chart: `charts.length_scaling` with one legend for the tasks (colour and dash: no second legend
    of the same tasks by shape) and one, below the plot, for the single models (their own shape and fill scales,
    not shared with the tasks; below, so that a long model name never pushes the legends past the chart's width)."""
    chart = charts.length_scaling(points, models).resolve_scale(shape="independent", fill="independent")
    chart.layer[0].encoding.shape.legend = None
    single = chart.layer[2].encoding
    legend = alt.Legend(orient="bottom", labelLimit=charts.WIDTH - 80)  # one legend: shape and fill share it
    single.shape.title = "single models"
    single.shape.legend = legend
    names = list(dict.fromkeys(models["model"])) if len(models) else []
    if names:  # each model's shape and colour fixed by its place, as with the tasks (not Vega's order of appearance)
        single.shape["scale"] = alt.Scale(domain=names, range=list(single.shape["scale"]["range"])[: len(names)])
        single.fill = alt.Fill("model:N", title="single models", legend=legend,
                               scale=alt.Scale(domain=names, range=list(SINGLE_COLOURS[: len(names)])))
    return chart


def radius_ticks(chart: alt.LayerChart, radii) -> alt.LayerChart:
    """Chapter 4's `charts.radius_curves` with its log radius axis ticked at the measured radii only (a log axis's
    own ticks, 1 to 9 per decade, crowd "0.01 0.02 0.03" at the Lab's width)."""
    axis = alt.Axis(values=sorted(float(r) for r in radii), format=".2~g")
    for layer in chart.layer:
        x = layer.encoding.x
        if x is not alt.Undefined and (getattr(x, "field", None) == "rho" or getattr(x, "shorthand", None) == "rho:Q"):
            x.axis = axis
    return chart


def fixed_domain(chart: alt.LayerChart, field: str, domain, colours) -> alt.LayerChart:
    """A layered chart whose colour by `field` maps `domain` to `colours` in that order, in every layer (a scale with
    a range alone colours by Vega's order of appearance, which changes with the values shown)."""
    for layer in chart.layer:
        colour = layer.encoding.color
        if colour is not alt.Undefined and getattr(colour, "shorthand", None) in (field, f"{field}:N"):
            colour["scale"] = alt.Scale(domain=list(domain), range=list(colours))
    return chart
