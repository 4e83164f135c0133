"""Altair charts of sensviz's tidy tables, shared by the explorer's pages, the Lab and its handout.

Functions take a pandas DataFrame (from `sensviz.tables`, or a small frame of a page or chapter)
and return an Altair chart; they compute nothing beyond Altair's own encodings. Every chart has
tooltips with 3–4 significant digits and labelled axes, fits the main column of the app at a
1024-px-wide window (`WIDTH`), and is at least ~100 px tall. Several models in one chart (compare
mode, the Lab) are told apart by `model_colour`: a fixed colour per model label, a task's own colour
(PARITY's red) when the labels name different tasks. Compare mode draws two models on one colour
scale and one set of axes, so that equal colours and equal positions mean equal values.
"""

from __future__ import annotations

import re

import altair as alt
import pandas as pd

from .figures import COLORS, TASK_COLORS

WIDTH = 520
"""Width of a full-width chart: the app's main column beside the sidebar is about 560 px at 1024 px."""
MIN_HEIGHT = 100
"""No chart is flatter than this (a projector's reader must see its marks)."""
HEIGHT = 200
"""Height of the plot of a single chart (titles, legends and axes come on top of it)."""
FIT_X = alt.AutoSizeParams(type="fit-x", contains="padding")
"""A single chart's width includes its axes and legends (Streamlit stretches it to its column) and its
height is the plot's own: a legend or a long axis label never squeezes the plot."""
READABLE_PX = 14
"""Smallest text of a chart (tick labels included): readable on a projector and on paper."""
INK = "#333333"
"""Colour of a chart's text and axes: 12.6:1 against white (at least 4.5:1 is needed)."""
VALUE = ".4~g"
"""Tooltip format of values."""
PICK = "pick"
"""Name of the click selection of `cube_grids` (the vertex a user clicked)."""
FUNCTION_COLORS = alt.Scale(domain=["model", "target"], range=["#1f77b4", "#ff7f0e"])
"""The model's function and its target, in single-model charts."""


# ----------------------------------------------------------------------------- colours


def readable(chart):
    """A top-level chart with text of at least `READABLE_PX` and dark `INK` labels, axes and ticks."""
    return (chart.configure_axis(labelFontSize=READABLE_PX, titleFontSize=READABLE_PX + 1, labelColor=INK,
                                 titleColor=INK, domainColor=INK, tickColor=INK)
            .configure_legend(labelFontSize=READABLE_PX, titleFontSize=READABLE_PX + 1, labelColor=INK, titleColor=INK)
            .configure_title(fontSize=READABLE_PX + 2, color=INK)
            .configure_header(labelFontSize=READABLE_PX, titleFontSize=READABLE_PX + 1, labelColor=INK, titleColor=INK))


def _task_of(label) -> str | None:
    """The one task a model's label names (`PARITY`, `encoder-first-n8`), if it names exactly one."""
    found = [task for task in TASK_COLORS if task in re.split(r"[^a-z]+", str(label).lower())]
    return found[0] if len(found) == 1 else None


def model_colour(labels, field: str = "model", title: str = "") -> alt.Color:
    """A colour per model label: the colour of its task when every label names a different task
    (PARITY's red beside FIRST's green, as in the Experiments), else fixed by order of appearance."""
    order = list(dict.fromkeys(pd.Series(list(labels)).dropna()))
    tasks = [_task_of(label) for label in order]
    if all(tasks) and len(set(tasks)) == len(tasks):
        palette = [TASK_COLORS[task] for task in tasks]
    else:
        palette = [COLORS[i % len(COLORS)] for i in range(len(order))]
    long = sum(len(str(label)) + 4 for label in order) > 36  # one row would not fit half a column
    return alt.Color(f"{field}:N", title=title, scale=alt.Scale(domain=order, range=palette),
                     legend=alt.Legend(orient="top", labelLimit=400, columns=1 if long else alt.Undefined))


DASHES = ([1, 0], [7, 4], [2, 3], [9, 3, 2, 3])
SHAPES = ("circle", "square", "triangle-up", "diamond", "cross")
"""Line dashes and point shapes by series, in order: series stay apart in greyscale (on paper) too."""


def series_marks(labels, field: str, title: str = "", legend: alt.Legend | None = None) -> dict:
    """The strokeDash and shape encodings of a chart's series (in order of appearance), beside its colour:
    with the colour's field, title and legend, Vega-Lite draws one legend of all three."""
    order = list(dict.fromkeys(pd.Series(list(labels)).dropna()))
    legend = legend or alt.Legend(orient="top", labelLimit=400)
    return {"strokeDash": alt.StrokeDash(f"{field}:N", title=title, legend=legend,
                                         scale=alt.Scale(domain=order, range=[DASHES[i % 4] for i in range(len(order))])),
            "shape": alt.Shape(f"{field}:N", title=title, legend=legend,
                               scale=alt.Scale(domain=order, range=[SHAPES[i % 5] for i in range(len(order))]))}


def _series(table: pd.DataFrame) -> tuple[str, alt.Color]:
    """What tells a chart's lines or bars apart: the `model` column (compare mode, the Lab: a colour
    per model), else `function` (one model: its function and its target)."""
    if "model" in table:
        return "model", model_colour(table["model"])
    return "function", alt.Color("function:N", scale=FUNCTION_COLORS, title="", legend=alt.Legend(orient="top"))


def _models(table: pd.DataFrame) -> list:
    """The model labels of a table in their order (one unnamed model when there is no `model` column)."""
    return list(dict.fromkeys(table["model"])) if "model" in table else [None]


def _rows(table: pd.DataFrame, model) -> pd.DataFrame:
    return table if model is None else table[table["model"] == model]


def _log_ticks(low: float, high: float, count: int = 4) -> list[float]:
    """About `count` readable values (2 significant digits) spread evenly on a log scale over [low, high]."""
    if not (low > 0 and high > low):
        return [float(f"{max(low, high):.2g}")] if max(low, high) > 0 else []
    ticks = [low * (high / low) ** (i / (count - 1)) for i in range(count)]
    return list(dict.fromkeys(float(f"{t:.2g}") for t in ticks))


def _single(chart, height: int = HEIGHT):
    """A single chart `WIDTH` wide, axes and legends included, with a plot `height` tall."""
    return chart.properties(width=WIDTH, height=height, autosize=FIT_X)


# ----------------------------------------------------------------------------- the cube


CUBE_COLOURINGS = {
    "s_model": "s(f,x) of the model",
    "s_target": "s(f,x) of the target",
    "s_difference": "s(model) − s(target)",
    "output_pm1": "output (±1 scale)",
}
"""What a cube grid can be coloured by (columns of `sensviz.tables.vertex_table`) and the legend's title."""


def cube_scale_words(value: str, n: int) -> str:
    """How `cube_grids` colours `value`, in words for a caption (tested against the drawn legend)."""
    if value == "s_difference":
        return f"one range −{n}..{n} around 0 (red: the model is more sensitive there than the target; blue: less)"
    if value == "output_pm1":
        return "one range around 0 fitted to the outputs (dark: −1, light: +1)"
    return f"the fixed range 0..{n} (0: no flip changes f(x); {n}: every flip does)"


def cube_grids(tables: dict[str, pd.DataFrame], value: str = "s_model", n: int | None = None,
               title: str = "") -> alt.ConcatChart:
    """The cubes of one or more models (`sensviz.tables.vertex_table`, by label) as Karnaugh maps:
    Gray-code rows and columns labelled with their bit patterns, so that inputs one bit apart are
    adjacent. All on one colour scale, so that equal colours mean equal values: s(f,x) on the fixed
    domain [0, n] (PARITY, n everywhere, and FIRST, 1 everywhere, look different), a difference of
    sensitivities on [−n, n] (diverging around 0) and the ±1 output on a symmetric range fitted to the
    data (dark to light, so that −1 and +1 differ on a greyscale print too). A dot marks each input
    where the target is 1. A click selects the vertex (`PICK`); side by side while the cells stay
    readable, else one under the other."""
    n = n or max(len(t["bits"].iloc[0]) for t in tables.values())
    if value == "output_pm1":
        reach = max(1.0, *(float(t[value].abs().max()) for t in tables.values()))
        scale = alt.Scale(domain=[-reach, reach], scheme="cividis")  # dark to light: −1 and +1 apart in greyscale too
    elif value == "s_difference":
        scale = alt.Scale(domain=[-n, n], scheme="redblue", reverse=True)
    else:
        scale = alt.Scale(domain=[0, n], scheme="viridis")
    colour = alt.Color(f"{value}:Q", title=CUBE_COLOURINGS.get(value, value), scale=scale,
                       legend=alt.Legend(orient="top", gradientLength=200, titleLimit=300))
    columns = max(2 ** (len(t["bits"].iloc[0]) // 2) for t in tables.values())
    across = max(6, min(30, (WIDTH // len(tables) - 70) // columns))
    if len(tables) > 1 and across < 8:  # too small side by side: one under the other
        cell, concat = max(6, min(30, (WIDTH - 70) // columns)), alt.vconcat
    else:
        cell, concat = across, alt.hconcat
    views = [_cube_grid(table, value, colour, label, cell, f"cube_{i}") for i, (label, table) in enumerate(tables.items())]
    pick = alt.TopLevelSelectionParameter(
        name=PICK, select=alt.PointSelectionConfig(type="point", fields=["vertex"], on="click"),
        views=[f"cube_{i}" for i in range(len(tables))])
    return concat(*views, title=title).resolve_scale(color="shared").properties(params=[pick])


def _cube_grid(table: pd.DataFrame, value: str, colour: alt.Color, title: str, cell: int, name: str) -> alt.LayerChart:
    """One model's cube: cells coloured by `value`, bit patterns on the axes, a dot where the target is 1."""
    n = len(table["bits"].iloc[0])
    row_bits = (n + 1) // 2
    frame = table.assign(row_bits=table["bits"].str[:row_bits], col_bits=table["bits"].str[row_bits:])
    row_order = frame.sort_values("row")["row_bits"].drop_duplicates().tolist()
    col_order = frame.sort_values("col")["col_bits"].drop_duplicates().tolist()
    font = READABLE_PX  # labelOverlap leaves out the labels that would collide
    x = alt.X("col_bits:O", sort=col_order, title=f"bits {row_bits + 1}..{n} (Gray order)" if n > 1 else "",
              axis=alt.Axis(labelAngle=-90, labelFontSize=font, labelOverlap=True))
    y = alt.Y("row_bits:O", sort=row_order, title=f"bits 1..{row_bits} (Gray order)",
              axis=alt.Axis(labelFontSize=font, labelOverlap=True))
    tooltip = ["bits:N", "vertex:Q", alt.Tooltip("weight:Q", title="bits set to 1"), alt.Tooltip("output:Q", format=VALUE)]
    if "s_model" in frame:  # a cube drawn without it (the Lab before a prediction) tells nothing of it
        tooltip.append(alt.Tooltip("s_model:Q", format=".3~g", title="s(model, x)"))
    if "s_target" in frame:
        tooltip += ["target:Q", alt.Tooltip("s_target:Q", format=".3~g", title="s(target, x)")]
    cells = (alt.Chart(frame).mark_rect(stroke="white", strokeWidth=0.5 if cell > 8 else 0, cursor="pointer")
             .encode(x=x, y=y, color=colour, tooltip=tooltip).properties(name=name))
    layers = [cells]
    if "target" in frame and frame["target"].isin([0, 1, -1]).all():
        ones = frame[frame["target"] > 0]
        layers.append(alt.Chart(ones).mark_circle(size=max(6, cell * cell // 8), color="white", opacity=0.9,
                                                  stroke="#333", strokeWidth=0.6)
                      .encode(x=x, y=y, tooltip=tooltip))
    return alt.layer(*layers, title=title).properties(width=cell * len(col_order),
                                                      height=max(MIN_HEIGHT, cell * len(row_order)))


# ----------------------------------------------------------------------------- sensitivity


def histogram(table: pd.DataFrame, title: str = "") -> alt.LayerChart:
    """Fractions of inputs per bin of s(f,x) (`bin_start`, `bin_end`, `fraction`): of one model and its
    target (`function`: the model filled, the target outlined on top, both visible where they
    coincide), or of several models (`model`), translucent, on the same axes."""
    field, colour = _series(table)
    encoding = {
        "x": alt.X("bin_start:Q", bin="binned", title="s(f,x)"),
        "x2": "bin_end:Q",
        "y": alt.Y("fraction:Q", title="fraction of inputs", stack=None),
        "color": colour,
        "tooltip": [f"{field}:N", alt.Tooltip("bin_start:Q", format=".3~g"), alt.Tooltip("bin_end:Q", format=".3~g"),
                    alt.Tooltip("fraction:Q", format=VALUE)],
    }
    if field == "model":
        return _single(alt.layer(alt.Chart(table).mark_bar(opacity=0.55).encode(**encoding), title=title))
    model = alt.Chart(table[table["function"] == "model"]).mark_bar(opacity=0.75).encode(**encoding)
    target = alt.Chart(table[table["function"] == "target"]).mark_bar(fillOpacity=0, strokeWidth=2).encode(
        **{**encoding, "stroke": alt.Stroke("function:N", scale=FUNCTION_COLORS, legend=None)})
    return _single(alt.layer(model, target, title=title))


def _x_axis(table: pd.DataFrame, x: str, title: str) -> alt.X:
    """A quantitative x axis; integer columns (positions, weights, degrees) get integer ticks."""
    integer = pd.api.types.is_integer_dtype(table[x])
    return alt.X(f"{x}:Q", title=title, axis=alt.Axis(tickMinStep=1, format="d") if integer else alt.Undefined)


def lines(table: pd.DataFrame, x: str, y: str, x_title: str, y_title: str, title: str = "",
          error: str | None = None, height: int = HEIGHT) -> alt.LayerChart:
    """A line with points per model (`model` column) or per function (`function`: model and target),
    with error bars of ± `error` when given."""
    field, colour = _series(table)
    tooltip = [f"{field}:N", alt.Tooltip(f"{x}:Q", format=".4~g"), alt.Tooltip(f"{y}:Q", format=VALUE)]
    layers = [alt.Chart(table).mark_line(point=True).encode(x=_x_axis(table, x, x_title),
                                                            y=alt.Y(f"{y}:Q", title=y_title), color=colour,
                                                            tooltip=tooltip, **series_marks(table[field], field))]
    if error:
        band = table.assign(_low=table[y] - table[error], _high=table[y] + table[error])
        layers.append(alt.Chart(band).mark_errorbar().encode(x=f"{x}:Q", y=alt.Y("_low:Q", title=y_title),
                                                             y2="_high:Q", color=colour))
    return _single(alt.layer(*layers, title=title), height)


def model_lines(table: pd.DataFrame, x: str, y: str, x_title: str, y_title: str) -> alt.LayerChart:
    """One line per model (`model` column) of y against x, e.g. loss slices of several models overlaid."""
    return lines(table, x, y, x_title, y_title)


def degree_profiles(table: pd.DataFrame, title: str = "") -> alt.Chart:
    """Fourier degree profiles d_k (`degree`, `weight`) as grouped bars: of several models (`model`),
    or of one model and its target (`function`)."""
    field, colour = _series(table)
    top = max(1.0, float(table["weight"].max()))
    return _single(alt.Chart(table, title=title).mark_bar(stroke=INK, strokeWidth=1.5).encode(
        x=alt.X("degree:O", title="degree k", axis=alt.Axis(labelAngle=0)), xOffset=f"{field}:N",
        y=alt.Y("weight:Q", title="d_k = Σ λ_P² over |P| = k", scale=alt.Scale(domain=[0, top])),
        color=colour, strokeDash=series_marks(table[field], field)["strokeDash"],
        tooltip=[f"{field}:N", "degree:O", alt.Tooltip("weight:Q", format=VALUE)],
    ))


# ----------------------------------------------------------------------------- attention


def attention_heatmaps(table: pd.DataFrame, value: str = "weight", title: str = "", bits: str | None = None,
                       fixed: bool = False) -> alt.FacetChart:
    """One heatmap per (model,) layer and head (`sensviz.tables.attention_table`, with a `model` column
    for several models): query position i down, key position j across. Every panel on one colour
    scale, so that equal colours mean equal weights: fitted to the weights shown (`fixed`: 0..1);
    a change (`value="change"`) diverges around 0 on a symmetric range. With `bits` (the input x),
    each position's label shows its bit."""
    values = table[value]
    if value == "change":
        reach = max(float(values.abs().max()), 1e-9)
        scale = alt.Scale(scheme="redblue", domain=[-reach, reach], reverse=True)
    elif fixed:
        scale = alt.Scale(scheme="blues", domain=[0, 1])
    else:
        scale = alt.Scale(scheme="blues", domain=[float(values.min()), float(values.max())])
    prefix = table["model"] + " · " if "model" in table else ""
    panels = table.assign(panel=prefix + table["block"] + " · head " + table["head"].astype(str))
    heads = table["head"].nunique()
    columns = max(1, min(heads, WIDTH // 200))
    side = max(110, min(260, (WIDTH - 70) // columns - 20))
    positions = int(table["key"].max()) + 1
    font = 11 if side / positions >= 14 else 9
    label = alt.Undefined if bits is None else f"datum.value + ': ' + substring('{bits}', datum.value, datum.value + 1)"
    x_axis = alt.Axis(labelExpr=label, labelFontSize=font, labelAngle=0 if bits is None else -90)
    y_axis = alt.Axis(labelExpr=label, labelFontSize=font)
    suffix = "" if bits is None else ": bit"
    tooltip = (["model:N"] if "model" in table else []) + [
        "block:N", "head:O", "query:O", "key:O", alt.Tooltip(f"{value}:Q", format=VALUE)]
    if value == "change":
        tooltip += [alt.Tooltip("weight:Q", format=VALUE), alt.Tooltip("weight_flipped:Q", format=VALUE)]
    return (
        alt.Chart(panels)
        .mark_rect()
        .encode(
            x=alt.X("key:O", title=f"key position j{suffix}", axis=x_axis),
            y=alt.Y("query:O", title=f"query position i{suffix}", axis=y_axis),
            color=alt.Color(f"{value}:Q", scale=scale, title="Δ weight" if value == "change" else "â_ij",
                            legend=alt.Legend(orient="top", gradientLength=200, format=".3~g")),
            tooltip=tooltip,
        )
        .properties(width=side, height=side)
        .facet(facet=alt.Facet("panel:N", title=None, sort=list(dict.fromkeys(panels["panel"])),
                               header=alt.Header(labelLimit=side + 40)), columns=columns)
        .properties(title=title)
    )


# ----------------------------------------------------------------------------- LayerNorm


def ln_heatmap(table: pd.DataFrame, title: str = "") -> alt.FacetChart:
    """N_i^(k) for one input (`sensviz.tables.ln_factor_table`; a `model` column for several models, one
    panel each): positions across, LayerNorms (layer-major) down, on one log colour scale with
    readable legend values."""
    low, high = float(table["ln_factor"].min()), float(table["ln_factor"].max())
    positions = int(table["position"].max()) + 1
    cell = max(12, min(40, (WIDTH - 140) // positions))
    rows = table.groupby("model")["ln"].nunique().max() if "model" in table else table["ln"].nunique()
    panels = table if "model" in table else table.assign(model="")
    return (
        alt.Chart(panels)
        .mark_rect()
        .encode(
            x=alt.X("position:O", title="position i", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("ln_name:N", sort=alt.SortField("ln"), title="LayerNorm k"),
            color=alt.Color("ln_factor:Q", title="N_i^(k)",
                            scale=alt.Scale(scheme="orangered", type="log", domain=[low, high]),
                            legend=alt.Legend(orient="top", values=_log_ticks(low, high), format=".3~g",
                                              gradientLength=200)),
            tooltip=["model:N", "ln_name:N", "position:O", alt.Tooltip("ln_factor:Q", format=VALUE)],
        )
        .properties(width=cell * positions, height=max(MIN_HEIGHT, 22 * rows))
        .facet(row=alt.Row("model:N", title=None, sort=_models(panels),
                           header=alt.Header(labelAngle=0, labelOrient="top", labelAnchor="start")))
        .resolve_scale(y="independent")
        .properties(title=title)
    )


def log_histogram(table: pd.DataFrame, x_title: str, title: str = "", color: str | None = None) -> alt.Chart:
    """A distribution over log10 bins (`log10_start`, `log10_end`, `fraction`): bars, or one step
    line per group when `color` names a grouping column (`model`: a colour per model); with a
    `model` column and another grouping, one panel per model on shared axes."""
    tooltip = ([f"{color}:N"] if color else []) + [alt.Tooltip("log10_start:Q", format=".3~g"),
                                                   alt.Tooltip("log10_end:Q", format=".3~g"),
                                                   alt.Tooltip("fraction:Q", format=VALUE)]
    chart = alt.Chart(table)
    if color is None:
        return _single(chart.mark_bar().encode(
            x=alt.X("log10_start:Q", bin="binned", title=x_title), x2="log10_end:Q",
            y=alt.Y("fraction:Q", title="fraction"), tooltip=tooltip,
        ).properties(title=title))
    colour = model_colour(table["model"]) if color == "model" else alt.Color(
        f"{color}:N", title="", legend=alt.Legend(orient="top", labelLimit=200))
    marks = series_marks(table[color], color) if color == "model" else {}
    steps = chart.mark_line(interpolate="step-after", point=True).encode(
        x=alt.X("log10_start:Q", title=x_title), y=alt.Y("fraction:Q", title="fraction"), color=colour,
        tooltip=(["model:N"] if "model" in table and color != "model" else []) + tooltip, **marks)
    if "model" in table and color != "model":
        return steps.properties(width=WIDTH - 60, height=140).facet(
            row=alt.Row("model:N", title=None, sort=_models(table))).properties(title=title)
    return _single(steps.properties(title=title))


def model_log_histograms(table: pd.DataFrame, title: str = "") -> alt.Chart:
    """Distributions of Blowup(x) over log10 bins (`log10_start`, `log10_end`, `fraction`) of several models, as steps."""
    return log_histogram(table, "log10 Blowup(x)", title, color="model")


def short_names(names) -> dict[str, str]:
    """Module names without the dotted prefix they all share, an index read as a layer's ("encoders.layers.0.norm1"
    among layer 0 and 1's LayerNorms: "layer 0 norm1"), so that an axis can label every one of them."""
    names = list(dict.fromkeys(names))
    parts = [name.split(".") for name in names]
    shared = 0
    while len(names) > 1 and all(len(p) > shared + 1 and p[shared] == parts[0][shared] for p in parts):
        shared += 1
    return {name: " ".join(f"layer {w}" if w.isdigit() else w for w in (p[shared:] if len(names) > 1 else p[-1:]))
            for name, p in zip(names, parts)}


def per_ln_bars(table: pd.DataFrame, title: str = "") -> alt.Chart:
    """Mean and maximum of N per LayerNorm over the inputs (`sensviz.tables.per_ln_table`): side by side
    for one model; with a `model` column, the models side by side on one axis, a panel per statistic. Each
    LayerNorm is labelled by its short name (`short_names`; the full one in the tooltip)."""
    ids = ["ln", "ln_name"] + (["model"] if "model" in table else [])
    short = short_names(table.sort_values("ln")["ln_name"])
    long = table.rename(columns={"mean_N": "mean of N", "max_N": "maximum of N"}).melt(
        id_vars=ids, value_vars=["mean of N", "maximum of N"], var_name="statistic", value_name="N")
    long = long.assign(layernorm=long["ln_name"].map(short))
    x = alt.X("layernorm:N", sort=list(short.values()), title="LayerNorm k",
              axis=alt.Axis(labelAngle=0 if len(short) <= 6 else -45))
    tooltip = ids[1:] + ["statistic:N", alt.Tooltip("N:Q", format=VALUE)]
    if "model" not in table:
        return _single(alt.Chart(long, title=title).mark_bar().encode(
            x=x, xOffset="statistic:N", y=alt.Y("N:Q", title="N_i^(k)"),
            color=alt.Color("statistic:N", title="", legend=alt.Legend(orient="top")), tooltip=tooltip,
        ))
    return alt.Chart(long).mark_bar(stroke=INK, strokeWidth=1.5).encode(  # each panel's header names its statistic
        x=x, xOffset="model:N", y=alt.Y("N:Q", title=None), color=model_colour(long["model"]), tooltip=tooltip,
        strokeDash=series_marks(long["model"], "model")["strokeDash"],
    ).properties(width=WIDTH - 90, height=140).facet(row=alt.Row("statistic:N", title=None, sort=None)).properties(
        title=title)


def blowup_by_sensitivity(table: pd.DataFrame) -> alt.LayerChart:
    """Blowup(x) of the inputs with each s(f,x) (`function`, `s`, `q10`, `median`, `q90`): median and
    10–90 % range, on axes padded so that no point sits on the edge."""
    colour = model_colour(table["function"], "function")
    low, high = float(table["s"].min()), float(table["s"].max())
    margin = max(0.5, 0.06 * (high - low))
    base = alt.Chart(table).encode(
        x=alt.X("s:Q", title="s(f,x) of the same input", scale=alt.Scale(domain=[low - margin, high + margin],
                                                                          nice=False)),
        color=colour,
        tooltip=["function:N", alt.Tooltip("s:Q", format=".3~g"), "count:Q", alt.Tooltip("median:Q", format=VALUE),
                 alt.Tooltip("q10:Q", format=VALUE), alt.Tooltip("q90:Q", format=VALUE)],
    )
    bottom, top = float(table["q10"].min()), float(table["q90"].max())
    y = alt.Y("q10:Q", title="Blowup(x)", scale=alt.Scale(type="log", domain=[bottom / 1.15, top * 1.15], nice=False))
    return _single(base.mark_rule(strokeWidth=2).encode(y=y, y2="q90:Q")
                   + base.mark_point(filled=True, size=60).encode(y="median:Q"))


def tradeoff_scatter(table: pd.DataFrame, title: str) -> alt.Chart:
    """Checkpoints by parameter norm against log E[Blowup²] (the paper's trade-off plane)."""
    return _single(
        alt.Chart(table, title=title)
        .mark_point(filled=True, size=80)
        .encode(
            x=alt.X("log_blowup_mean_sq:Q", title="log E[Blowup(x)²]", scale=alt.Scale(zero=False)),
            y=alt.Y("param_norm:Q", title="‖θ‖ (without positional encodings)", scale=alt.Scale(zero=False)),
            color=alt.Color("task:N", title="task", legend=alt.Legend(orient="top")),
            shape=alt.Shape("arch:N", title="architecture", legend=alt.Legend(orient="top")),
            tooltip=["file:N", "task:N", "n:Q", "arch:N", "d_model:Q", alt.Tooltip("accuracy:Q", format=".3f"),
                     alt.Tooltip("param_norm:Q", format=".3f"), alt.Tooltip("blowup_mean_sq:Q", format=".4g"),
                     alt.Tooltip("bound_rhs:Q", format=".4f", title="as_n/√(n log n) − H/n")],
        )
    )


def bound_by_length(table: pd.DataFrame, title: str) -> alt.Chart:
    """The bound's right-hand side as_n(f)/√(n log n) − H/n of each checkpoint's task and length."""
    return _single(
        alt.Chart(table, title=title)
        .mark_line(point=True)
        .encode(
            x=alt.X("n:Q", title="input length n"),
            y=alt.Y("bound_rhs:Q", title="as_n(f)/√(n log n) − H/n"),
            color=alt.Color("task:N", title="task", legend=alt.Legend(orient="top")),
            tooltip=["task:N", "n:Q", alt.Tooltip("bound_rhs:Q", format=".4f")],
        )
    )


# ----------------------------------------------------------------------------- the landscape


def sharpness_at_radius(table: pd.DataFrame, title: str = "") -> alt.LayerChart:
    """L_rho with its error bar beside the first-order prediction rho^2 x the exact small-rho
    limit: one labelled bar each (`quantity`, `value`, `low`, `high`, `label`); with a `model`
    column, the models one under the other on the same axis."""
    compare = "model" in table
    y = alt.Y("model:N" if compare else "quantity:N", title=None, sort=_models(table) if compare else None,
              axis=alt.Axis(labelLimit=260))
    base = alt.Chart(table).encode(y=y, yOffset=alt.YOffset("quantity:N", sort=None) if compare else alt.Undefined)
    tooltip = (["model:N"] if compare else []) + [
        "quantity:N", alt.Tooltip("value:Q", format=VALUE), alt.Tooltip("low:Q", format=VALUE),
        alt.Tooltip("high:Q", format=VALUE)]
    x_title = "mean squared change of the output, (T_θ+Δ(x) − T_θ(x))²"
    legend = alt.Legend(orient="top", labelLimit=400, title=None) if compare else None
    room = alt.Scale(domain=[0, 1.6 * float(table["high"].max())], nice=False)  # the labels right of the bars fit
    bars = base.mark_bar().encode(
        x=alt.X("value:Q", title=x_title, scale=room),
        color=alt.Color("quantity:N", legend=legend, sort=None, scale=alt.Scale(range=["#1f77b4", "#d62728"])),
        tooltip=tooltip,
    )
    errors = base.mark_rule(strokeWidth=2, color="black").encode(x=alt.X("low:Q", title=x_title), x2="high:Q",
                                                                 tooltip=tooltip)
    labels = base.mark_text(align="left", dx=6, fontSize=13).encode(x=alt.X("high:Q", title=x_title),
                                                                    text="label:N", tooltip=tooltip)
    rows = len(table)
    return _single(alt.layer(bars, errors, labels, title=title), max(MIN_HEIGHT, 45 * rows))


def radius_curves(table: pd.DataFrame, paper_rho, title: str = "") -> alt.LayerChart:
    """L_rho/rho^2 against rho (`rho`, `ratio`, and `low`/`high` or `ratio_stderr`, `limit`; a
    `model` column for several models), log axes; dashed: each model's exact small-rho limit; grey
    rules: the paper's radius (`paper_rho`, one value or one per model)."""
    if "low" not in table:
        table = table.assign(low=table["ratio"] - table["ratio_stderr"], high=table["ratio"] + table["ratio_stderr"])
    table = table.assign(low=table["low"].clip(lower=table["ratio"] / 10))  # a log axis: an error bar through 0 stops at ratio/10
    if "model" not in table:
        table = table.assign(model="this model")
    colour = model_colour(table["model"])
    x = alt.X("rho:Q", title="radius ρ", scale=alt.Scale(type="log"))
    y = alt.Y("ratio:Q", title="L_ρ / ρ²", scale=alt.Scale(type="log", nice=False, padding=10))  # fitted, not to decades
    tooltip = ["model:N", alt.Tooltip("rho:Q", format=".3~g"), alt.Tooltip("ratio:Q", format=VALUE),
               alt.Tooltip("limit:Q", format=VALUE, title="small-ρ limit")]
    lines_ = alt.Chart(table).mark_line(point=True).encode(x=x, y=y, color=colour, tooltip=tooltip,
                                                           **series_marks(table["model"], "model"))
    bars = alt.Chart(table).mark_rule().encode(x=x, y=alt.Y("low:Q", scale=alt.Scale(type="log")), y2="high:Q",
                                               color=colour, tooltip=tooltip)
    limits = alt.Chart(table.drop_duplicates("model")).mark_rule(strokeDash=[6, 4]).encode(
        y="limit:Q", color=colour, tooltip=["model:N", alt.Tooltip("limit:Q", format=VALUE, title="small-ρ limit")])
    radii = sorted(set(paper_rho if isinstance(paper_rho, (list, tuple)) else [paper_rho]))
    paper = alt.Chart(pd.DataFrame({"rho": radii})).mark_rule(color="#888").encode(
        x="rho:Q", tooltip=[alt.Tooltip("rho:Q", format=".3~g", title="the paper's radius 0.02·√P")])
    return _single(alt.layer(lines_, bars, limits, paper, title=title), HEIGHT + 20)


def slice_line(table: pd.DataFrame, title: str = "", x_title: str = "α (step along the direction)",
               task: str = "") -> alt.VConcatChart:
    """The loss and the accuracy along a 1-D slice or the line between two models (`alpha`, `loss`,
    `accuracy`; a `model` column for several models): two panels on one α axis, each titled with
    what it shows and on which task."""
    on = f" on {task}" if task else ""
    field = "model" if "model" in table else None
    colour = model_colour(table["model"]) if field else alt.value("#1f77b4")
    tooltip = ([f"{field}:N"] if field else []) + [alt.Tooltip("alpha:Q", format=".3~g"),
                                                    alt.Tooltip("loss:Q", format=VALUE),
                                                    alt.Tooltip("accuracy:Q", format=".3~g")]
    x = alt.X("alpha:Q", title=x_title)
    loss = alt.Chart(table, title=f"loss{on}").mark_line(point=True).encode(
        x=x, y=alt.Y("loss:Q", title="loss"), color=colour, tooltip=tooltip).properties(width=WIDTH - 60, height=170)
    accuracy = alt.Chart(table, title=f"accuracy{on}").mark_line(point=True, strokeDash=[4, 3]).encode(
        x=x, y=alt.Y("accuracy:Q", title="accuracy", scale=alt.Scale(domain=[0, 1])), color=colour,
        tooltip=tooltip).properties(width=WIDTH - 60, height=MIN_HEIGHT + 20)
    return alt.vconcat(loss, accuracy, title=title)


def contour_chart(table: pd.DataFrame, segments: pd.DataFrame, title: str = "") -> alt.VConcatChart:
    """2-D slices as filled squares with contour segments on continuous α, β planes (a `model` column
    in both tables for several models: one plane each, one under the other, on one colour scale)."""
    models = _models(table)
    side = min(440, WIDTH - 80) if len(models) == 1 else min(360, WIDTH - 80)
    scale = alt.Scale(scheme="viridis", domain=[float(table["loss"].min()), float(table["loss"].max())])
    views = []
    for model in models:
        plane, lines_ = _rows(table, model), _rows(segments, model)
        steps = plane["alpha"].nunique()
        half = (plane["alpha"].max() - plane["alpha"].min()) / max(steps - 1, 1) / 2
        cells = plane.assign(a0=plane["alpha"] - half, a1=plane["alpha"] + half, b0=plane["beta"] - half,
                             b1=plane["beta"] + half)
        x, y = alt.X("a0:Q", title="α (first direction)"), alt.Y("b0:Q", title="β (second direction)")
        heat = alt.Chart(cells).mark_rect().encode(
            x=x, x2="a1:Q", y=y, y2="b1:Q",
            color=alt.Color("loss:Q", scale=scale, title="loss", legend=alt.Legend(orient="top", format=".3~g")),
            tooltip=[alt.Tooltip("alpha:Q", format=".3~g"), alt.Tooltip("beta:Q", format=".3~g"),
                     alt.Tooltip("loss:Q", format=VALUE), alt.Tooltip("accuracy:Q", format=".3~g")],
        )
        contour = alt.Chart(lines_).mark_rule(color="white", strokeWidth=1.2).encode(
            x="alpha:Q", y="beta:Q", x2="alpha2:Q", y2="beta2:Q",
            tooltip=[alt.Tooltip("level:Q", format=VALUE, title="loss level")])
        views.append(alt.layer(heat, contour, title=model or "").properties(width=side, height=side))
    return alt.vconcat(*views, title=title).resolve_scale(color="shared")


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
    marks = series_marks(order, "task", "task", alt.Legend(orient="top", labelExpr="upper(datum.label)"))
    lines = alt.Chart(points).mark_line(point=True).encode(x=x, y=y, color=colour, tooltip=tooltip, **marks)
    bars = alt.Chart(points).mark_rule().encode(x=x, y="low:Q", y2="high:Q", color=colour)
    mine = alt.Chart(models).mark_point(size=120, filled=True, color="#222").encode(
        x="n:Q", y="value:Q", tooltip=["model:N", "n:Q", alt.Tooltip("value:Q", format=VALUE)],
        shape=alt.Shape("model:N", title="", scale=alt.Scale(range=["diamond", "triangle-up", "square", "cross"]),
                        legend=alt.Legend(orient="top")))
    return _single(lines + bars + mine, HEIGHT + 40)


def sensitivity_strip(table: pd.DataFrame) -> alt.Chart:
    """as_n of several functions (`function`, `as_n`): one row of dots per kind of function."""
    return _single(alt.Chart(table).mark_tick(thickness=3, size=26).encode(
        x=alt.X("as_n:Q", title="average sensitivity as_n", scale=alt.Scale(zero=True)),
        y=alt.Y("function:N", title=None, sort=None, axis=alt.Axis(labelLimit=260)),
        color=alt.Color("function:N", legend=None),
        tooltip=["function:N", alt.Tooltip("as_n:Q", format=VALUE)],
    ), 130)


def training_curves(table: pd.DataFrame, title: str = "", columns: int = 3, log_loss: bool = False,
                    marks: dict[int, str] | None = None) -> alt.ConcatChart:
    """Each measurement over the training steps (`step`, `metric`, `value`, `stderr`), one small panel per
    metric with its own y axis (the loss on a log axis with `log_loss`); with a `run` column, one line per run;
    `marks` (step -> what happened there, e.g. where a run went on after a restart): a dashed rule in each panel."""
    width = (WIDTH - 60 * columns) // columns
    tooltip = ["metric:N", "step:Q", alt.Tooltip("value:Q", format=VALUE), alt.Tooltip("stderr:Q", format=".2~g")]
    runs = {} if "run" not in table else {"color": alt.Color("run:N", title="", legend=alt.Legend(orient="top"))}
    panels = []
    for metric in dict.fromkeys(table["metric"]):
        log = log_loss and metric == "loss"
        y = alt.Y("value:Q", title=None, scale=alt.Scale(type="log") if log else alt.Scale(zero=False))
        panels.append(alt.Chart(table[table["metric"] == metric], title=f"{metric} (log axis)" if log else metric)
                      .mark_line(point=True)
                      .encode(x=alt.X("step:Q", title="training step"), y=y, tooltip=tooltip + (["run:N"] if runs else []),
                              **runs)
                      .properties(width=width, height=140))
    if marks:
        notes = pd.DataFrame({"step": list(marks), "note": list(marks.values())})
        rule = alt.Chart(notes).mark_rule(color="#555555", strokeDash=[4, 3], strokeWidth=1.5).encode(
            x="step:Q", tooltip=["note:N", "step:Q"])
        panels = [panel + rule for panel in panels]
    return alt.concat(*panels, columns=columns, title=title)


def degree_history(table: pd.DataFrame, title: str = "") -> alt.Chart:
    """The Fourier degree profile d_k of the model over training (`step`, `degree`, `weight`)."""
    return _single(
        alt.Chart(table, title=title)
        .mark_rect()
        .encode(
            x=alt.X("step:O", title="training step", axis=alt.Axis(labelAngle=-90)),
            y=alt.Y("degree:O", title="degree k", sort="descending"),
            color=alt.Color("weight:Q", scale=alt.Scale(scheme="greens", domain=[0, 1]), title="d_k",
                            legend=alt.Legend(orient="top")),
            tooltip=["step:O", "degree:O", alt.Tooltip("weight:Q", format=VALUE)],
        )
    )
