"""The norm/blowup trade-off (the paper's Fig. 2, 9, 10): the length-scaling runs over a random
search of learning rate and weight decay; param_norm against log Blowup, with the bound

    C E[Blowup^2] >= as_n / sqrt(n log n) - H/n.

The runs train together (`train_and_measure`); learning rate and weight decay may differ within a job.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from .. import stats
from ..claims import (
    Claim,
    Tables,
    attempt,
    cell,
    claim,
    claims_table,
    listing,
    num,
    rows_where,
    runs_line,
    setup_table,
    table,
    task_name,
    tasks_in,
)
from ..convergence import MSE_RULE
from ..figures import (
    FIT_X,
    NOTHING,
    PANEL,
    SINGLE,
    VALUE,
    ExperimentFigure,
    finished,
    keep,
    long_form,
    placeholder,
    summarise,
    task_colour,
    tick_format,
)
from . import TRAIN_AND_MEASURE, Experiment

# ----------------------------------------------------------------------------- the figures


def figures(runs: pd.DataFrame, history: pd.DataFrame) -> list[ExperimentFigure]:
    """param_norm against log blowup per kept run (both aggregates), and the bound's right-hand side per task."""
    kept, note = keep(runs, ["task", "n"], MSE_RULE)
    points = long_form(kept, ["run_id", "task", "n", "lr", "weight_decay", "param_norm"],
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
                                                                      format=tick_format(bound["n"]))),
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


# ----------------------------------------------------------------------------- the fidelity page


def section(t: Tables) -> tuple[str, list[Claim]]:
    """Section 2 of the fidelity page: the correlations within each task and n, PARITY's offset (T1, ...)."""
    kept = t.kept()
    tasks, lengths = tasks_in(kept), sorted(kept["n"].unique()) if len(kept) else []
    x, y = "log_authors_blowup", "param_norm"
    group_rows = []
    for task in tasks:
        for n in lengths:
            rows = rows_where(kept, task=task, n=n)
            r, _ = attempt(lambda rows=rows: stats.correlation(rows[x], rows[y]))
            group_rows.append([task_name(task), num(n), len(rows),
                               cell(lambda rows=rows: stats.correlation(rows[x], rows[y])),
                               stats.verdict(r, -1) if r else stats.UNRESOLVED,
                               cell(lambda rows=rows: stats.correlation(rows["log_blowup_mean_sq"], rows[y])),
                               cell(lambda rows=rows: stats.slope(rows[x], rows[y], "runs"))])
    claims = _claims(t, lengths)
    bound = t.runs[t.runs["status"] == "finished"]
    bound_rows = [[task_name(task)] + [num(rows_where(bound, task=task, n=n)["bound_rhs"].mean()) for n in lengths]
                  for task in tasks] if "bound_rhs" in bound else []
    text = [
        "## 2. The norm/blowup trade-off (Fig. 2, 9, 10)",
        "**The paper:** converged runs lie on a downward band, the parameter norm falling roughly linearly in "
        "log(blowup); PARITY needs more norm or more blowup than the other tasks, more so at larger n.",
        setup_table(t),
        runs_line(t, ["task", "n"]),
        _selection(t, lengths),
        "Within each task and length (Fisher z intervals of r over the kept runs; OLS slope of param_norm in "
        "log Blowup):",
        table(["task", "n", "kept runs", "r, published code's log Blowup [95 %]", "verdict (r < 0)",
               "r, our log E[Blowup²] [95 %]", "slope [95 %]"], group_rows),
        claims_table(claims),
    ]
    if bound_rows:
        text += ["The bound's right-hand side as_n/√(n log n) − H/n per task (how much C · E[Blowup²] the theorem "
                 "demands; from the truth tables, no filter):",
                 table(["task"] + [f"n = {num(n)}" for n in lengths], bound_rows)]
    return "\n\n".join(text), claims


def _tests(kept: pd.DataFrame, lengths: list) -> dict[str, tuple]:
    """Per claim key: (statement, quantity, direction, test) over the runs `kept`: T1 the band, T2... the
    offsets at each length, then the growth of the offset from the first length to the last."""
    x, y = "log_authors_blowup", "param_norm"
    found = {"T1": ("Converged runs lie on a downward band (norm falls as log blowup rises)",
                    "correlation of param_norm with log Blowup (published code's) within each task and n", -1,
                    lambda: stats.correlation(kept[x], kept[y], groups=kept["task"] + "/" + kept["n"].astype(str)))}

    def offset(n):
        rows = rows_where(kept, n=n)
        return stats.offset(rows[x], rows[y], rows["task"] == "parity")

    for i, n in enumerate(lengths):
        found[f"T{i + 2}"] = (f"PARITY needs more norm at the same blowup (n = {num(n)})",
                              "PARITY's offset above the line through all tasks' runs (param_norm units)", +1,
                              lambda n=n: offset(n))
    if len(lengths) >= 2:
        found[f"T{len(lengths) + 2}"] = ("… more so at larger n",
                                         f"offset at n = {num(lengths[-1])} − offset at n = {num(lengths[0])}", +1,
                                         lambda: stats.difference(offset(lengths[-1]), offset(lengths[0])))
    return found


def _claims(t: Tables, lengths: list) -> list[Claim]:
    """T1... over the kept runs, with the accuracy filter as their secondary and the survivors per task and
    n (of the offset's length for T2..., of every length for the band and the growth)."""
    accurate = _tests(t.kept_accurate(), lengths)
    done = t.finished()
    at = {f"T{i + 2}": rows_where(done, n=n) for i, n in enumerate(lengths)}
    return [claim("tradeoff", statement, quantity, direction, test, key=key,
                  survivors=t.survivors(at.get(key, done), ["task", "n"]),
                  secondaries={"accuracy ≥ 0.99 filter": accurate[key][3]})
            for key, (statement, quantity, direction, test) in _tests(t.kept(), lengths).items()]


def _selection(t: Tables, lengths: list) -> str:
    """Which learning rates the convergence filter kept for PARITY at the largest n."""
    if not lengths or "lr" not in t.runs:
        return ""
    done = t.runs[t.runs["status"] == "finished"]
    rows = rows_where(done, task="parity", n=lengths[-1])
    passed = rows["converged"].fillna(False).astype(bool)
    if passed.all() or not passed.any():
        return ""
    ranks = rows["lr"].rank()[passed].astype(int).tolist()
    return (f"The filter selects: of the {len(rows)} PARITY runs at n = {num(lengths[-1])}, the {passed.sum()} that "
            f"converged drew learning rates {listing(rows['lr'][passed])} (ranks {', '.join(map(str, sorted(ranks)))} "
            f"of {len(rows)}, lowest first) and weight decays {listing(rows['weight_decay'][passed])}; the dropped "
            f"ones drew {listing(rows['lr'][~passed])}.")


# ----------------------------------------------------------------------------- the registration

EXPERIMENT = Experiment("tradeoff", 2, TRAIN_AND_MEASURE, ("seed", "task", "lr", "weight_decay"), figures, (section,))
