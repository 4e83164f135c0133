"""Paper-style figures of the experiments' result tables (Altair), for the app and the HTML report.

Each experiment's function takes the tables of its sweep (`sensviz.sweeps.read_results`: one row
per run with settings and final metrics, and the per-step history) and returns `ExperimentFigure`s: the
chart, a title, a short explanation of the paper's claim and how to read the chart, the small
aggregated table behind it, and a note saying which runs it kept. Every figure applies the paper's
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

from .experiments import defaults as experiment_defaults

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


MSE_RULE = "final evaluation MSE < 0.001, the paper's filter"
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


def _tick_format(values: pd.Series) -> str:
    """Integers as integers (never '1e+1'), other numbers to 3 significant digits."""
    return "d" if (values.dropna() == values.dropna().round()).all() else ".3~g"


def panels(table: pd.DataFrame, x: str, x_title: str, color: alt.Color, order: list[str],
           x_scale: alt.Scale | None = None) -> alt.FacetChart:
    """One panel per metric (independent y axes, `COLUMNS` wide, each with its own x axis so that a
    short last row draws no empty axis): mean ± stderr against x, a line per colour; the x axis is
    labelled at the measured values of x."""
    x_enc = alt.X(f"{x}:Q", title=x_title, scale=x_scale or alt.Scale(zero=False),
                  axis=alt.Axis(values=sorted(table[x].unique().tolist()), format=_tick_format(table[x])))
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


def _long(frame: pd.DataFrame, id_vars: list[str], metrics: dict[str, str]) -> pd.DataFrame:
    present = {k: v for k, v in metrics.items() if k in frame}
    long = frame[id_vars + list(present)].melt(id_vars=id_vars, var_name="metric", value_name="value")
    long["metric"] = long["metric"].map(present)
    return long.dropna(subset=["value"])


def _thin(history: pd.DataFrame, per_row: int) -> pd.DataFrame:
    """Every k-th measured step so that the long table stays under MAX_ROWS rows."""
    steps = sorted(history["step"].unique())
    rows = len(history) * per_row
    if rows <= MAX_ROWS:
        return history
    stride = math.ceil(rows / MAX_ROWS)
    return history[history["step"].isin(steps[::stride] + steps[-1:])]


# ----------------------------------------------------------------------------- the experiments

LENGTH_METRICS = {
    "sharpness_proxy_pm1": "sharpness proxy ×4 (the paper's)",
    "sharpness_pm1": "L_ρ on the ±1 scale (ours)",
    "sharpness_limit_pm1": "lim L_ρ/ρ² (exact, ±1 scale)",
    "bound": "bound as_n(T)/(2n)",
    "log_authors_blowup": "log Blowup (published code's aggregate)",
    "param_norm": "param_norm",
}


def length_scaling(runs: pd.DataFrame, history: pd.DataFrame) -> list[ExperimentFigure]:
    kept, note = keep(runs, ["task", "n"], MSE_RULE)
    table = summarise(kept, ["task", "n"], LENGTH_METRICS)
    chart = panels(table, "n", "input length n", task_colour(table["task"]), list(LENGTH_METRICS.values())).properties(
        title="Sharpness, blowup and norm against input length") if len(table) else placeholder(NOTHING)
    return [ExperimentFigure(
        key="length_scaling",
        title="Length scaling: sharpness against n",
        explanation=(
            "The paper: the sharpness of trained transformers grows with n for PARITY (roughly linearly over "
            "n = 4..30) and stays small and flat for MAJORITY, FIRST and MEAN; LayerNorm blowup rises for PARITY. "
            "The theorem bounds the sharpness from below by as_n(T)/(2n) as n → ∞ before ρ → 0: 1/2 for a model "
            "computing PARITY, about 1/(2n) for FIRST. Read the bound's panel for its shape per task, not its "
            "magnitude against the finite-n, finite-ρ measurements beside it. The proxy is the paper's estimator "
            "(Gaussian noise of std 0.02 per coordinate, loss increase ×4); L_ρ perturbs the output with "
            "directions on the sphere of the same typical radius; its exact small-ρ limit needs no random draws."
        ),
        chart=chart, data=table, note=note,
    )]


def tradeoff(runs: pd.DataFrame, history: pd.DataFrame) -> list[ExperimentFigure]:
    kept, note = keep(runs, ["task", "n"], MSE_RULE)
    points = _long(kept, ["run_id", "task", "n", "lr", "weight_decay", "param_norm"],
                   {"log_blowup_mean_sq": "ours: log E[Blowup(x)²]",
                    "log_authors_blowup": "published code: log mean Π max 1/std"})
    points = points.rename(columns={"metric": "blowup", "value": "log_blowup"})
    scatter = (
        alt.Chart(points)
        .mark_point(filled=True, size=60, opacity=0.8)
        .encode(
            x=alt.X("log_blowup:Q", title="log blowup", scale=alt.Scale(zero=False)),
            y=alt.Y("param_norm:Q", title="param_norm", scale=alt.Scale(zero=False)),
            color=task_colour(points["task"]),
            tooltip=["task:N", "n:Q", alt.Tooltip("lr:Q", format=".3~g"), alt.Tooltip("weight_decay:Q", format=".3~g"),
                     alt.Tooltip("param_norm:Q", format=VALUE), alt.Tooltip("log_blowup:Q", format=VALUE)],
        )
        .properties(width=PANEL["width"], height=170)
        .facet(row=alt.Row("n:O", title=None, header=alt.Header(labelExpr="'n = ' + datum.value", labelAngle=0,
                                                                  labelAlign="right", labelFontWeight="bold")),
               column=alt.Column("blowup:N", title=None, header=alt.Header(labelFontWeight="bold", labelLimit=240)))
        .resolve_scale(x="independent")
        .properties(title="param_norm against log blowup, one point per converged run")
    ) if len(points) else placeholder(NOTHING)
    bound = summarise(finished(runs), ["task", "n"], {"bound_rhs": "as_n/√(n log n) − H/n"})
    bound_chart = (
        alt.Chart(bound)
        .mark_line(point=True)
        .encode(x=alt.X("n:Q", title="input length n", axis=alt.Axis(values=sorted(bound["n"].unique().tolist()),
                                                                      format=_tick_format(bound["n"]))),
                y=alt.Y("mean:Q", title="as_n(f)/√(n log n) − H/n", axis=alt.Axis(format=".3~g")),
                color=task_colour(bound["task"]),
                tooltip=["task:N", "n:Q", alt.Tooltip("mean:Q", format=VALUE), "count:Q"])
        .properties(**SINGLE, autosize=FIT_X, title="the bound's right-hand side per task")
    ) if len(bound) else placeholder("No finished run has the bound's right-hand side.")
    return [
        ExperimentFigure(
            key="tradeoff",
            title="Trade-off: parameter norm against LayerNorm blowup",
            explanation=(
                "The paper: converged PARITY runs lie on a downward band — the parameter norm falls roughly "
                "linearly in log(blowup) — and PARITY needs more norm or more blowup than the other tasks, more "
                "so at larger n. The theorem: C · E[Blowup(x)²] ≥ as_n(f)/√(n log n) − H/n with C growing with "
                "the parameters, so a sensitive function must pay with norm, blowup or both. Each point is one "
                "run of the random search over learning rate and weight decay; the top row uses our Blowup "
                "(N = 1/√(var + ε), τ = max(1 + N)), the bottom row the aggregate the published code plots."
            ),
            chart=scatter, data=points, note=note,
        ),
        ExperimentFigure(
            key="tradeoff_bound",
            title="The bound's right-hand side",
            explanation=(
                "as_n(f)/√(n log n) − H/n for each task: large for PARITY (as_n = n) and growing with n, near or "
                "below zero for FIRST and MEAN — how much C · E[Blowup²] the theorem demands."
            ),
            chart=bound_chart, data=bound, note="Computed from each task's truth table; no filter applies.",
        ),
    ]


DYNAMICS_METRICS = {
    "log10_loss": "log10 loss (MSE, fixed batch)",
    "sharpness_proxy_pm1": "sharpness proxy ×4 (the paper's)",
    "sharpness_limit_pm1": "lim L_ρ/ρ² (exact, ±1 scale)",
    "log_authors_blowup": "log Blowup (published code's aggregate)",
    "log_blowup_mean": "E log Blowup (ours)",
    "param_norm": "param_norm",
}


def dynamics(runs: pd.DataFrame, history: pd.DataFrame) -> list[ExperimentFigure]:
    if history.empty or "run_id" not in history:
        raise ValueError("this dynamics sweep has no per-step measurements (its history.parquet is empty)")
    kept, note = keep(runs, ["weight_decay"], MSE_RULE)
    rows = history[history["run_id"].isin(kept["run_id"])].copy()
    rows["log10_loss"] = rows["loss"].clip(lower=1e-12).map(math.log10)
    rows = rows.merge(kept[["run_id", "seed", "weight_decay"]], on="run_id")
    rows = _thin(rows, len(DYNAMICS_METRICS))
    table = _long(rows, ["run_id", "seed", "weight_decay", "step"], DYNAMICS_METRICS)
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
        .facet(facet=alt.Facet("metric:N", sort=list(DYNAMICS_METRICS.values()), title=None,
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


SCRATCHPAD_METRICS = {
    "sharpness_proxy_pm1": "sharpness proxy ×4 (per step)",
    "sharpness_limit_pm1": "lim L_ρ/ρ² (exact, per step)",
    "sharpness_pm1": "L_ρ on the ±1 scale (per step)",
    "log_blowup_mean": "E log Blowup (ours)",
    "param_norm": "param_norm",
}
SCRATCHPAD_RULE = "MSE < 0.001 for the encoder, autoregressive accuracy > 0.999 with a scratchpad"


def scratchpad(runs: pd.DataFrame, history: pd.DataFrame) -> list[ExperimentFigure]:
    kept, note = keep(runs, ["arch", "n"], SCRATCHPAD_RULE)
    kept = kept.assign(model=kept["arch"].map({"scratchpad": "with scratchpad", "encoder": "without (encoder)"}))
    table = summarise(kept, ["model", "n"], SCRATCHPAD_METRICS)
    models = {"without (encoder)": TASK_COLORS["parity"], "with scratchpad": COLORS[0]}
    chart = panels(table, "n", "input length n (log scale)", colour("model", "PARITY", models, models),
                   list(SCRATCHPAD_METRICS.values()), x_scale=alt.Scale(type="log", base=2)).properties(
        title="Per-step sharpness against n") if len(table) else placeholder(NOTHING)
    return [ExperimentFigure(
        key="scratchpad",
        title="Scratchpad: per-step sharpness against n",
        explanation=(
            "The paper: with a scratchpad (the decoder writes the running parity y_t = x_1 ⊕ … ⊕ x_t, one "
            "symbol per step) each step has constant sensitivity, so the per-step sharpness and blowup stay flat "
            "as n grows (up to n = 1024), while the encoder computing PARITY in one step gets sharper. The "
            "measured function of the scratchpad model is its last step under teacher forcing (the step that "
            "outputs PARITY(x)). The proxy uses the same noise std for both models; their parameter counts differ."
        ),
        chart=chart, data=table, note=note,
    )]


def generalization(runs: pd.DataFrame, history: pd.DataFrame) -> list[ExperimentFigure]:
    kept, note = keep(runs, ["train_size"], "the training set fitted: MSE < 0.001 on it")
    n = int(kept["n"].iloc[0]) if len(kept) and "n" in kept else None
    compare = summarise(kept, ["train_size"], {"as_learned": "learned by the transformer",
                                               "as_completion_mean": "random completions of the same data",
                                               "as_target": "the random target function"})
    fits = {"learned by the transformer": COLORS[0], "random completions of the same data": COLORS[1],
            "the random target function": COLORS[-1]}
    base = alt.Chart(compare).encode(
        x=alt.X("train_size:O", title="training inputs", axis=alt.Axis(labelAngle=0)),
        color=colour("metric", None, fits, fits, direction="vertical"),
        xOffset=alt.XOffset("metric:N", sort=list(fits)),
        tooltip=["train_size:O", "metric:N", alt.Tooltip("mean:Q", format=VALUE), alt.Tooltip("stderr:Q", format=ERROR),
                 "count:Q"],
    )
    layers = [
        base.mark_point(filled=True, size=80).encode(
            y=alt.Y("mean:Q", title="average sensitivity as_n", scale=alt.Scale(zero=True))),
        base.mark_errorbar().encode(y=alt.Y("low:Q", title="average sensitivity as_n"), y2="high:Q"),
    ]
    if n is not None:
        layers.append(alt.Chart(pd.DataFrame({"half": [n / 2]})).mark_rule(strokeDash=[4, 4], color="gray")
                      .encode(y="half:Q",
                              tooltip=[alt.Tooltip("half:Q", title="n/2 (a random function)", format="~g")]))
    compare_chart = alt.layer(*layers).properties(**SINGLE, autosize=FIT_X,
                                                  title="as_n of the learned extrapolation vs. other fits") \
        if len(compare) else placeholder(NOTHING)

    retrained = []
    for kind, as_column, label in (("learned", "as_learned", "learned"),
                                   ("completion", "as_completion_retrained", "random completion")):
        part = finished(runs)
        part = part[converged(part, f"{kind}_converged")] if f"{kind}_converged" in part else part.iloc[0:0]
        retrained.append(pd.DataFrame({
            "run_id": part["run_id"], "train_size": part["train_size"], "function": label,
            "as_n": part[as_column], "sharpness_proxy_pm1": part[f"{kind}_sharpness_proxy_pm1"],
            "sharpness_limit_pm1": part[f"{kind}_sharpness_limit_pm1"],
        }))
    points = pd.concat(retrained, ignore_index=True)
    functions = {"learned": COLORS[0], "random completion": COLORS[1]}
    total = 2 * len(finished(runs))
    retrain_note = (f"{len(points)} of {total} retrained models kept (fitted the whole cube: "
                    f"MSE < 0.001); the learned table of every finished run and one random completion of its data.")
    sharp_chart = (
        alt.Chart(points)
        .mark_point(filled=True, size=70)
        .encode(
            x=alt.X("as_n:Q", title="average sensitivity as_n of the function"),
            y=alt.Y("sharpness_proxy_pm1:Q", title="sharpness proxy ×4 after retraining on the whole cube"),
            color=colour("function", None, functions, functions),
            shape=alt.Shape("train_size:O", title="training inputs", legend=legend()),
            tooltip=["function:N", "train_size:O", alt.Tooltip("as_n:Q", format=VALUE),
                     alt.Tooltip("sharpness_proxy_pm1:Q", format=VALUE),
                     alt.Tooltip("sharpness_limit_pm1:Q", format=VALUE)],
        )
        .properties(**SINGLE, autosize=FIT_X, title="Sharper minima for more sensitive functions")
    ) if len(points) else placeholder(NOTHING)
    return [
        ExperimentFigure(
            key="generalization",
            title="Generalization: the sensitivity of what is learned",
            explanation=(
                "The paper: trained on a few fixed inputs of a random function, a transformer extrapolates to "
                "the rest of the cube with a function of clearly lower average sensitivity than random "
                "completions of the same data (a random function has as_n ≈ n/2, the dashed line), lowest with "
                "the fewest training inputs. The learned table is read off the model on every input (thresholded "
                "at 0.5); the completions agree with the data and are uniformly random elsewhere (seeded)."
            ),
            chart=compare_chart, data=compare, note=note,
        ),
        ExperimentFigure(
            key="generalization_sharpness",
            title="Generalization: sharpness against sensitivity",
            explanation=(
                "The paper: retrained on the whole cube, functions of higher average sensitivity sit in sharper "
                "minima. Each learned table and one random completion per run is trained from scratch on all "
                "inputs, then measured with the paper's proxy (×4)."
            ),
            chart=sharp_chart, data=points, note=retrain_note,
        ),
    ]


FIGURES = {
    "length_scaling": length_scaling,
    "tradeoff": tradeoff,
    "dynamics": dynamics,
    "scratchpad": scratchpad,
    "generalization": generalization,
}


def figures(experiment: str, runs: pd.DataFrame, history: pd.DataFrame) -> list[ExperimentFigure]:
    """Every figure of an experiment's results; ValueError for an unknown experiment or no finished run.

    Settings the spec left at the experiment's defaults (absent from the runs table) are filled in."""
    if experiment not in FIGURES:
        raise ValueError(f"no figures for experiment '{experiment}'; known: {', '.join(FIGURES)}")
    if finished(runs).empty:
        raise ValueError(f"this {experiment} sweep has no finished runs yet")
    defaults = {k: v for k, v in experiment_defaults(experiment).items() if v is not None and k not in runs}
    return FIGURES[experiment](runs.assign(**defaults), history)
