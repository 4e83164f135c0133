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
            tooltip=["block:N", "head:O", "query:O", "key:O", alt.Tooltip(f"{value}:Q", format=".4f")]
            + ([alt.Tooltip("weight:Q", format=".4f"), alt.Tooltip("weight_flipped:Q", format=".4f")] if diverging else []),
        )
        .properties(width=170, height=170)
        .facet(row=alt.Row("block:N", title="layer", sort=alt.SortField("layer")), column=alt.Column("head:O", title="head"))
        .properties(title=title)
    )


def cube_grid(table: pd.DataFrame, value: str, title: str, diverging: bool = False) -> alt.Chart:
    """The cube as a Karnaugh map (Gray-code rows and columns: neighbours are adjacent)."""
    scale = alt.Scale(scheme="redblue", domainMid=0, reverse=True) if diverging else alt.Scale(scheme="viridis")
    tooltip = ["vertex:Q", "bits:N", "weight:Q", alt.Tooltip("output:Q", format=".4f"), alt.Tooltip("s_model:Q", format=".3f")]
    if "s_target" in table:
        tooltip += ["target:Q", alt.Tooltip("s_target:Q", format=".3f")]
    rows, cols = int(table["row"].max()) + 1, int(table["col"].max()) + 1
    cell = max(6, min(48, 520 // max(rows, cols)))
    return (
        alt.Chart(table, title=title)
        .mark_rect(stroke="white", strokeWidth=0.5 if cell > 8 else 0, cursor="pointer")
        .encode(
            x=alt.X("col:O", title="column: Gray order of the last ⌊n/2⌋ bits", axis=alt.Axis(labels=False, ticks=False)),
            y=alt.Y("row:O", title="row: Gray order of the first ⌈n/2⌉ bits", axis=alt.Axis(labels=False, ticks=False)),
            color=alt.Color(f"{value}:Q", scale=scale, title=value),
            tooltip=tooltip,
        )
        .add_params(alt.selection_point(name=PICK, fields=["vertex"], on="click"))
        .properties(width=cols * cell, height=rows * cell)
    )


PICK = "pick"
"""Name of the click selection of `cube_grid` (the vertex a user clicked)."""


def histogram(table: pd.DataFrame, title: str) -> alt.Chart:
    """Fractions of inputs per bin of s(f,x): the model as filled bars, the target as outlined
    bars on top (both stay visible where they coincide)."""
    encoding = {
        "x": alt.X("bin_start:Q", bin="binned", title="s(f,x)"),
        "x2": "bin_end:Q",
        "y": alt.Y("fraction:Q", title="fraction of inputs", stack=None),
        "color": alt.Color("function:N", scale=FUNCTION_COLORS, title=""),
        "tooltip": ["function:N", alt.Tooltip("bin_start:Q", format=".3f"), alt.Tooltip("bin_end:Q", format=".3f"),
                    alt.Tooltip("fraction:Q", format=".4f")],
    }
    model = alt.Chart(table[table["function"] == "model"], title=title).mark_bar(opacity=0.75).encode(**encoding)
    target = alt.Chart(table[table["function"] == "target"]).mark_bar(fillOpacity=0, strokeWidth=2).encode(
        **{**encoding, "stroke": alt.Stroke("function:N", scale=FUNCTION_COLORS, legend=None)}
    )
    return model + target


def _x_axis(table: pd.DataFrame, x: str, title: str) -> alt.X:
    """A quantitative x axis; integer columns (positions, weights, degrees) get integer ticks."""
    integer = pd.api.types.is_integer_dtype(table[x])
    return alt.X(f"{x}:Q", title=title, axis=alt.Axis(tickMinStep=1, format="d") if integer else alt.Undefined)


def lines(table: pd.DataFrame, x: str, y: str, x_title: str, y_title: str, title: str, color: str = "function",
          error: str | None = None) -> alt.Chart:
    """A line per `color` group with points (and error bars of ± `error` when given)."""
    base = alt.Chart(table, title=title).encode(
        x=_x_axis(table, x, x_title),
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


def log_histogram(table: pd.DataFrame, x_title: str, title: str, color: str | None = None) -> alt.Chart:
    """A distribution over log10 bins (`log10_start`, `log10_end`, `fraction`): bars, or one step
    line per group when `color` names a grouping column."""
    tooltip = [alt.Tooltip("log10_start:Q", format=".3f"), alt.Tooltip("log10_end:Q", format=".3f"),
               alt.Tooltip("fraction:Q", format=".4f")]
    chart = alt.Chart(table, title=title)
    if color is None:
        return chart.mark_bar().encode(
            x=alt.X("log10_start:Q", bin="binned", title=x_title), x2="log10_end:Q",
            y=alt.Y("fraction:Q", title="fraction"), tooltip=tooltip,
        )
    return chart.mark_line(interpolate="step-after", point=True).encode(
        x=alt.X("log10_start:Q", title=x_title), y=alt.Y("fraction:Q", title="fraction"),
        color=alt.Color(f"{color}:N", title=""), tooltip=[f"{color}:N"] + tooltip,
    )


def per_ln_bars(table: pd.DataFrame, title: str) -> alt.Chart:
    """Mean and maximum of N per LayerNorm over the inputs."""
    long = table.melt(id_vars=["ln", "ln_name"], value_vars=["mean_N", "max_N"], var_name="statistic", value_name="N")
    return (
        alt.Chart(long, title=title)
        .mark_bar()
        .encode(
            x=alt.X("ln_name:N", sort=alt.SortField("ln"), title="LayerNorm k"),
            xOffset="statistic:N",
            y=alt.Y("N:Q", title="N_i^(k)"),
            color=alt.Color("statistic:N", title=""),
            tooltip=["ln_name:N", "statistic:N", alt.Tooltip("N:Q", format=".4g")],
        )
    )




def tradeoff_scatter(table: pd.DataFrame, title: str) -> alt.Chart:
    """Checkpoints by parameter norm against log E[Blowup²] (the paper's trade-off plane)."""
    return (
        alt.Chart(table, title=title)
        .mark_point(filled=True, size=80)
        .encode(
            x=alt.X("log_blowup_mean_sq:Q", title="log E[Blowup(x)²]", scale=alt.Scale(zero=False)),
            y=alt.Y("param_norm:Q", title="‖θ‖ (without positional encodings)", scale=alt.Scale(zero=False)),
            color=alt.Color("task:N", title="task"),
            shape=alt.Shape("arch:N", title="architecture"),
            tooltip=["file:N", "task:N", "n:Q", "arch:N", "d_model:Q", alt.Tooltip("accuracy:Q", format=".3f"),
                     alt.Tooltip("param_norm:Q", format=".3f"), alt.Tooltip("blowup_mean_sq:Q", format=".4g"),
                     alt.Tooltip("bound_rhs:Q", format=".4f", title="as_n/√(n log n) − H/n")],
        )
    )


def bound_by_length(table: pd.DataFrame, title: str) -> alt.Chart:
    """The bound's right-hand side as_n(f)/√(n log n) − H/n of each checkpoint's task and length."""
    return (
        alt.Chart(table, title=title)
        .mark_line(point=True)
        .encode(
            x=alt.X("n:Q", title="input length n"),
            y=alt.Y("bound_rhs:Q", title="as_n(f)/√(n log n) − H/n"),
            color=alt.Color("task:N", title="task"),
            tooltip=["task:N", "n:Q", alt.Tooltip("bound_rhs:Q", format=".4f")],
        )
    )


def sharpness_curve(table: pd.DataFrame, title: str) -> alt.Chart:
    """L_rho/rho² ± stderr against rho (log axis), with the exact small-rho limit as a rule."""
    band = table.assign(low=table["ratio"] - table["ratio_stderr"], high=table["ratio"] + table["ratio_stderr"])
    x = alt.X("rho:Q", scale=alt.Scale(type="log"), title="ρ (radius of the perturbation)")
    points = alt.Chart(band, title=title).mark_line(point=True).encode(
        x=x, y=alt.Y("ratio:Q", title="L_ρ / ρ²"),
        tooltip=[alt.Tooltip("rho:Q", format=".4g"), alt.Tooltip("ratio:Q", format=".5g"),
                 alt.Tooltip("ratio_stderr:Q", format=".3g"), alt.Tooltip("limit:Q", format=".5g")],
    )
    bars = alt.Chart(band).mark_errorbar().encode(x=x, y=alt.Y("low:Q", title="L_ρ / ρ²"), y2="high:Q")
    limit = alt.Chart(band.head(1)).mark_rule(strokeDash=[6, 4], color="#d62728").encode(
        y="limit:Q", tooltip=[alt.Tooltip("limit:Q", format=".5g", title="exact limit E‖∇T‖²/P")]
    )
    return points + bars + limit


def sharpness_at_radius(table: pd.DataFrame, title: str) -> alt.Chart:
    """L_rho with its error bar beside the first-order prediction rho^2 x the exact small-rho
    limit: one labelled bar each (`quantity`, `value`, `low`, `high`, `label`)."""
    base = alt.Chart(table, title=title).encode(y=alt.Y("quantity:N", title=None, sort=None,
                                                        axis=alt.Axis(labelLimit=260)))
    tooltip = ["quantity:N", alt.Tooltip("value:Q", format=".4g"), alt.Tooltip("low:Q", format=".4g"),
               alt.Tooltip("high:Q", format=".4g")]
    x_title = "mean squared change of the output, (T_θ+Δ(x) − T_θ(x))²"
    bars = base.mark_bar().encode(
        x=alt.X("value:Q", title=x_title),
        color=alt.Color("quantity:N", legend=None, scale=alt.Scale(range=["#1f77b4", "#d62728"])), tooltip=tooltip,
    )
    errors = base.mark_rule(strokeWidth=2, color="black").encode(x=alt.X("low:Q", title=x_title), x2="high:Q")
    labels = base.mark_text(align="left", dx=6, fontSize=13).encode(x=alt.X("high:Q", title=x_title), text="label:N")
    return (bars + errors + labels).properties(height=170)


def slice_line(table: pd.DataFrame, title: str, x_title: str = "α (step along the direction)") -> alt.Chart:
    """Loss (and accuracy) along a 1-D slice."""
    base = alt.Chart(table, title=title).encode(x=alt.X("alpha:Q", title=x_title))
    tooltip = [alt.Tooltip("alpha:Q", format=".3f"), alt.Tooltip("loss:Q", format=".5g"), alt.Tooltip("accuracy:Q", format=".3f")]
    loss = base.mark_line(point=True).encode(y=alt.Y("loss:Q", title="loss"), tooltip=tooltip)
    accuracy = base.mark_line(strokeDash=[4, 3], color="#2ca02c").encode(
        y=alt.Y("accuracy:Q", title="accuracy", scale=alt.Scale(domain=[0, 1])), tooltip=tooltip
    )
    return alt.layer(loss, accuracy).resolve_scale(y="independent")


def contour_chart(table: pd.DataFrame, segments: pd.DataFrame, title: str) -> alt.Chart:
    """A 2-D slice as filled squares with contour segments on a continuous α, β plane."""
    steps = table["alpha"].nunique()
    half = (table["alpha"].max() - table["alpha"].min()) / max(steps - 1, 1) / 2
    cells = table.assign(a0=table["alpha"] - half, a1=table["alpha"] + half, b0=table["beta"] - half,
                         b1=table["beta"] + half)
    x, y = alt.X("a0:Q", title="α (first direction)"), alt.Y("b0:Q", title="β (second direction)")
    heat = alt.Chart(cells, title=title).mark_rect().encode(
        x=x, x2="a1:Q", y=y, y2="b1:Q",
        color=alt.Color("loss:Q", scale=alt.Scale(scheme="viridis"), title="loss"),
        tooltip=[alt.Tooltip("alpha:Q", format=".3f"), alt.Tooltip("beta:Q", format=".3f"),
                 alt.Tooltip("loss:Q", format=".5g"), alt.Tooltip("accuracy:Q", format=".3f")],
    )
    lines = alt.Chart(segments).mark_rule(color="white", strokeWidth=1.2).encode(
        x="alpha:Q", y="beta:Q", x2="alpha2:Q", y2="beta2:Q", tooltip=[alt.Tooltip("level:Q", format=".4g", title="loss level")]
    )
    return (heat + lines).properties(width=480, height=480)


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
    ).properties(width=WIDTH, height=260)


def model_log_histograms(table: pd.DataFrame) -> alt.Chart:
    """Distributions over log10 bins (`log10_start`, `log10_end`, `fraction`) of several models, as steps."""
    return alt.Chart(table).mark_line(interpolate="step-after", point=True).encode(
        x=alt.X("log10_start:Q", title="log10 Blowup(x)"), y=alt.Y("fraction:Q", title="fraction of inputs"),
        color=model_colour(table["model"]),
        tooltip=["model:N", alt.Tooltip("log10_start:Q", format=".3~g"), alt.Tooltip("fraction:Q", format=VALUE)],
    ).properties(width=WIDTH, height=260)


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
            + base.mark_point(filled=True, size=60).encode(y="median:Q")).properties(width=WIDTH, height=280)


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
    return (lines + bars + limits + paper).properties(width=WIDTH, height=300)


def model_lines(table: pd.DataFrame, x: str, y: str, x_title: str, y_title: str) -> alt.Chart:
    """One line per model (`model` column) of y against x, e.g. loss slices of several models overlaid."""
    return alt.Chart(table).mark_line(point=True).encode(
        x=alt.X(f"{x}:Q", title=x_title), y=alt.Y(f"{y}:Q", title=y_title), color=model_colour(table["model"]),
        tooltip=["model:N", alt.Tooltip(f"{x}:Q", format=".3~g"), alt.Tooltip(f"{y}:Q", format=VALUE)],
    ).properties(width=WIDTH, height=280)


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
    mine = alt.Chart(models).mark_point(size=120, filled=True, color="#222").encode(
        x="n:Q", y="value:Q", tooltip=["model:N", "n:Q", alt.Tooltip("value:Q", format=VALUE)],
        shape=alt.Shape("model:N", title="", scale=alt.Scale(range=["diamond", "triangle-up", "square", "cross"]),
                        legend=alt.Legend(orient="top")))
    return (lines + bars + mine).properties(width=WIDTH, height=320)


def sensitivity_strip(table: pd.DataFrame) -> alt.Chart:
    """as_n of several functions (`function`, `as_n`): one row of dots per kind of function."""
    return alt.Chart(table).mark_tick(thickness=3, size=26).encode(
        x=alt.X("as_n:Q", title="average sensitivity as_n", scale=alt.Scale(zero=True)),
        y=alt.Y("function:N", title=None, sort=None, axis=alt.Axis(labelLimit=260)),
        color=alt.Color("function:N", legend=None),
        tooltip=["function:N", alt.Tooltip("as_n:Q", format=VALUE)],
    ).properties(width=WIDTH - 200, height=170)


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
        .properties(width=WIDTH, height=230)
    )
