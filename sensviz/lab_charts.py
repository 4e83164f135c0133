"""The Lab's own charts, where the explorer's (`sensviz.charts`) would give the answer away or hide a mark.

`strip`: as_n of several kinds of function on one axis that always spans every possible value, 0 to n, so
the axis's extent says nothing about a mark left out before the reveal, and a mark at n is drawn whole;
each kind in its own colour and shape, so two kinds never share a colour (on screen or printed in grey).
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from . import charts

SHAPES = ("circle", "square", "triangle-up", "diamond", "cross", "triangle-down")
COLOURS = ("#6b6b6b", "#1f5fa8", "#d35400", "#111111", "#7b3294", "#1b7837")
EDGE_PX = 14  # room beyond 0 and n, so a mark at either end is drawn whole


def strip(table: pd.DataFrame, n: int, kinds: tuple[str, ...]) -> alt.Chart:
    """as_n of the functions in `table` (`function`, `as_n`), one row per kind, on an axis from 0 to `n`:
    `kinds` fixes each kind's colour and shape (the same kind looks the same with or without the others)."""
    kinds = tuple(kinds)
    shown = [k for k in kinds if k in set(table["function"])]
    style = {"domain": list(kinds), "range": list(COLOURS[: len(kinds)])}
    return alt.Chart(table).mark_point(size=70, filled=True, opacity=0.8).encode(
        x=alt.X("as_n:Q", title="average sensitivity as_n (0 to n)",
                scale=alt.Scale(domain=[0, n], nice=False, padding=EDGE_PX)),
        y=alt.Y("function:N", title=None, sort=shown, axis=alt.Axis(labelLimit=300)),
        color=alt.Color("function:N", scale=alt.Scale(**style), legend=None),
        shape=alt.Shape("function:N", scale=alt.Scale(domain=list(kinds), range=list(SHAPES[: len(kinds)])), legend=None),
        tooltip=["function:N", alt.Tooltip("as_n:Q", format=charts.VALUE)],
    ).properties(width=charts.WIDTH, height=30 * max(len(shown), 2) + 40, autosize=charts.FIT_X)


def length_scaling(points: pd.DataFrame, models: pd.DataFrame) -> alt.LayerChart:
    """Chapter 5's chart: `charts.length_scaling` with one legend for the tasks (colour and dash: no second legend
    of the same tasks by shape) and one for the single models (their own shape scale, not shared with the tasks)."""
    chart = charts.length_scaling(points, models).resolve_scale(shape="independent")
    chart.layer[0].encoding.shape.legend = None
    chart.layer[2].encoding.shape.title = "single models"
    return chart
