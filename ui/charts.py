"""Altair charts of sensviz's tidy tables: every chart has tooltips and labelled axes.

Functions take a pandas DataFrame from `sensviz.tables` (or a page's small frame) and return an
Altair chart; they compute nothing beyond Altair's own encodings.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

FUNCTION_COLORS = alt.Scale(domain=["model", "target"], range=["#1f77b4", "#ff7f0e"])


def attention_heatmaps(table: pd.DataFrame, value: str = "weight", title: str = "") -> alt.Chart:
    """One heatmap per (layer, head): query position down, key position across."""
    diverging = value == "change"
    scale = alt.Scale(scheme="redblue", domainMid=0, reverse=True) if diverging else alt.Scale(scheme="blues", domain=[0, 1])
    return (
        alt.Chart(table)
        .mark_rect()
        .encode(
            x=alt.X("key:O", title="key position j"),
            y=alt.Y("query:O", title="query position i"),
            color=alt.Color(f"{value}:Q", scale=scale, title="Δ weight" if diverging else "â_ij"),
            tooltip=["layer:O", "head:O", "query:O", "key:O", alt.Tooltip(f"{value}:Q", format=".4f")]
            + ([alt.Tooltip("weight:Q", format=".4f"), alt.Tooltip("weight_flipped:Q", format=".4f")] if diverging else []),
        )
        .properties(width=170, height=170)
        .facet(row=alt.Row("layer:O", title="layer"), column=alt.Column("head:O", title="head"))
        .properties(title=title)
    )


def cube_grid(table: pd.DataFrame, value: str, title: str, diverging: bool = False) -> alt.Chart:
    """The cube as a Karnaugh map (Gray-code rows and columns: neighbours are adjacent)."""
    scale = alt.Scale(scheme="redblue", domainMid=0, reverse=True) if diverging else alt.Scale(scheme="viridis")
    tooltip = ["vertex:Q", "bits:N", "weight:Q", alt.Tooltip("output:Q", format=".4f"), alt.Tooltip("s_model:Q", format=".3f")]
    if "s_target" in table:
        tooltip += ["target:Q", alt.Tooltip("s_target:Q", format=".3f")]
    return (
        alt.Chart(table, title=title)
        .mark_rect()
        .encode(
            x=alt.X("col:O", title="column (Gray order of the last ⌊n/2⌋ bits)", axis=alt.Axis(labels=False, ticks=False)),
            y=alt.Y("row:O", title="row (Gray order of the first ⌈n/2⌉ bits)", axis=alt.Axis(labels=False, ticks=False)),
            color=alt.Color(f"{value}:Q", scale=scale, title=value),
            tooltip=tooltip,
        )
        .properties(height=420)
    )


def histogram(table: pd.DataFrame, title: str) -> alt.Chart:
    """Fractions of inputs per bin of s(f,x), model and target side by side."""
    return (
        alt.Chart(table, title=title)
        .mark_bar(opacity=0.7)
        .encode(
            x=alt.X("bin_start:Q", bin="binned", title="s(f,x)"),
            x2="bin_end:Q",
            y=alt.Y("fraction:Q", title="fraction of inputs", stack=None),
            color=alt.Color("function:N", scale=FUNCTION_COLORS, title=""),
            tooltip=["function:N", alt.Tooltip("bin_start:Q", format=".3f"), alt.Tooltip("bin_end:Q", format=".3f"),
                     alt.Tooltip("fraction:Q", format=".4f")],
        )
    )


def lines(table: pd.DataFrame, x: str, y: str, x_title: str, y_title: str, title: str, color: str = "function",
          error: str | None = None) -> alt.Chart:
    """A line per `color` group with points (and error bars of ± `error` when given)."""
    base = alt.Chart(table, title=title).encode(
        x=alt.X(f"{x}:Q", title=x_title),
        color=alt.Color(f"{color}:N", scale=FUNCTION_COLORS if color == "function" else alt.Undefined, title=""),
    )
    tooltip = [f"{color}:N", f"{x}:Q", alt.Tooltip(f"{y}:Q", format=".4g")]
    chart = base.mark_line(point=True).encode(y=alt.Y(f"{y}:Q", title=y_title), tooltip=tooltip)
    if error:
        band = table.assign(_low=table[y] - table[error], _high=table[y] + table[error])
        chart = chart + alt.Chart(band).mark_errorbar().encode(
            x=f"{x}:Q", y=alt.Y("_low:Q", title=y_title), y2="_high:Q", color=alt.Color(f"{color}:N", legend=None)
        )
    return chart


def grouped_bars(table: pd.DataFrame, x: str, y: str, x_title: str, y_title: str, title: str) -> alt.Chart:
    """Bars per x, model and target side by side."""
    return (
        alt.Chart(table, title=title)
        .mark_bar()
        .encode(
            x=alt.X(f"{x}:O", title=x_title),
            xOffset="function:N",
            y=alt.Y(f"{y}:Q", title=y_title),
            color=alt.Color("function:N", scale=FUNCTION_COLORS, title=""),
            tooltip=["function:N", f"{x}:O", alt.Tooltip(f"{y}:Q", format=".4g")],
        )
    )


def ln_heatmap(table: pd.DataFrame, title: str) -> alt.Chart:
    """N_i^(k) for one input: positions across, LayerNorms (layer-major) down."""
    return (
        alt.Chart(table, title=title)
        .mark_rect()
        .encode(
            x=alt.X("position:O", title="position i"),
            y=alt.Y("ln_name:N", sort=alt.SortField("ln"), title="LayerNorm k"),
            color=alt.Color("ln_factor:Q", scale=alt.Scale(scheme="orangered", type="log"), title="N_i^(k)"),
            tooltip=["ln_name:N", "position:O", alt.Tooltip("ln_factor:Q", format=".4g")],
        )
    )
