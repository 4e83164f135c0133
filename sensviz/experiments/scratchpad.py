"""Scratchpad (the paper's Fig. 11): PARITY with `arch = "scratchpad"` (the encoder-decoder writing
the running parity; its measured function is the last step) against the plain encoder.

The runs train together (`train_and_measure`); a scratchpad run's filter is its autoregressive
accuracy (`CONVERGED_AUTOREGRESSIVE`). The figure and the fidelity page compare the per-step
sharpness's trend in n with the encoder's.
"""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from .. import stats
from ..claims import (
    PROXY,
    Claim,
    Tables,
    claim,
    claims_table,
    listing,
    mean_sd,
    num,
    paper_lengths,
    rows_where,
    runs_line,
    setup_table,
    table,
    threshold,
)
from ..convergence import CONVERGED_AUTOREGRESSIVE, CONVERGED_MSE
from ..figures import COLORS, NOTHING, TASK_COLORS, ExperimentFigure, colour, keep, panels, placeholder, summarise
from ..settings import STACKS
from . import TRAIN_AND_MEASURE, Experiment

# ----------------------------------------------------------------------------- the figure


METRICS = {
    "sharpness_proxy_pm1": "sharpness proxy ×4 (per step)",
    "sharpness_limit_pm1": "lim L_ρ/ρ² (exact, per step)",
    "sharpness_pm1": "L_ρ on the ±1 scale (per step)",
    "log_blowup_mean": "E log Blowup (ours)",
    "authors_encoder_blowup": "Blowup, encoder stack (authors')",
    "authors_decoder_blowup": "Blowup, decoder stack (authors')",
    "param_norm": "param_norm",
}
RULE = f"MSE < {CONVERGED_MSE:g} for the encoder, autoregressive accuracy > {CONVERGED_AUTOREGRESSIVE:g} with a scratchpad"


def figures(runs: pd.DataFrame, history: pd.DataFrame) -> list[ExperimentFigure]:
    """The per-step `METRICS` against n (log scale), with and without a scratchpad."""
    kept, note = keep(runs, ["arch", "n"], RULE)
    kept = kept.assign(model=kept["arch"].map({"scratchpad": "with scratchpad", "encoder": "without (encoder)"}))
    table = summarise(kept, ["model", "n"], METRICS)
    models = {"without (encoder)": TASK_COLORS["parity"], "with scratchpad": COLORS[0]}
    chart = panels(table, "n", "input length n (log scale)", colour("model", "PARITY", models, models),
                   list(METRICS.values()), x_scale=alt.Scale(type="log", base=2)).properties(
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


# ----------------------------------------------------------------------------- the fidelity page


def _scratchpad_metrics(runs: pd.DataFrame) -> dict[str, str]:
    if "sharpness_proxy_last_pm1" in runs:
        return {"sharpness_proxy_pm1": f"{PROXY}, mean over all decoder steps (the authors' convention)",
                "sharpness_proxy_last_pm1": f"{PROXY}, last decoder step"}
    return {"sharpness_proxy_pm1": f"{PROXY}, last decoder step"}


def _slope(rows: pd.DataFrame, column: str, error: str) -> stats.Interval:
    """The OLS slope of `column` in log2 n over `rows`, with `error`."""
    return stats.slope(np.log2(rows["n"]), rows[column], "seeds per n", error=error)


def _tests(kept: pd.DataFrame, column: str, label: str, error: str) -> dict[str, tuple]:
    """Per claim key: (statement, quantity, direction, test) over the runs `kept`, the scratchpad's sharpness
    read from `column` (described by `label`), slopes in log2 n with `error`."""
    encoder, pad = rows_where(kept, arch="encoder"), rows_where(kept, arch="scratchpad")
    return {
        "S1": ("Without a scratchpad, sharpness grows with n", f"slope of the encoder's {PROXY} in log2 n", +1,
               lambda: _slope(encoder, "sharpness_proxy_pm1", error)),
        "S2": ("With a scratchpad, the per-step sharpness stays flat in n", f"slope in log2 n of the {label}", 0,
               lambda: _slope(pad, column, error)),
        "S3": ("The scratchpad's sharpness grows more slowly than the encoder's",
               f"slope difference in log2 n, encoder − scratchpad ({label})", +1,
               lambda: stats.difference(_slope(encoder, "sharpness_proxy_pm1", error), _slope(pad, column, error))),
        "S6": ("With a scratchpad, the blowup stays flat in n", "slope of the scratchpad's E log Blowup in log2 n", 0,
               lambda: _slope(pad, "log_blowup_mean", error)),
    }


STACK_BLOWUPS = {stack: (f"log_authors_{stack}_blowup", f"the authors' Fig. 11, {stack} stack") for stack in STACKS}
"""The authors' per-stack blowup (their Fig. 11's two curves): its log's column and S6's secondary's label."""


def _claims(t: Tables, metrics: dict[str, str]) -> list[Claim]:
    """S1, S2, S3, S6 over the kept runs, the scratchpad's sharpness by the first of `metrics` (the authors'
    convention where the tables have it); secondaries: HC3 errors, the last decoder step (with S4's margin: the
    former S4 and S5) where the primary is the mean over decoder steps, and for S6 the authors' blowup per stack
    (with the margins `[equivalence.S6_<stack>_stack]`) where the tables have it."""
    kept = t.kept()
    pad = rows_where(kept, arch="scratchpad")
    (column, label), *rest = metrics.items()
    primary = _tests(kept, column, label, "classical")
    secondaries = {"HC3 errors": ({key: test[3] for key, test in _tests(kept, column, label, "HC3").items()}, {})}
    for other, other_label in rest:
        secondaries["last decoder step"] = ({key: test[3] for key, test in _tests(kept, other, other_label, "classical").items()
                                             if key in ("S2", "S3")}, {"S2": t.margin("S4")})  # the claims it changes
    for stack, (blowup, stack_label) in STACK_BLOWUPS.items():
        if blowup in pad and pad[blowup].notna().any():
            secondaries[stack_label] = ({"S6": lambda c=blowup: _slope(pad, c, "classical")},
                                        {"S6": t.margin(f"S6_{stack}_stack")})
    done = t.finished()
    models = {"S1": ["encoder"], "S3": ["encoder", "scratchpad"]}  # the others read the scratchpad's runs
    return [claim("scratchpad", statement, quantity, direction, test, key=key, margin=t.margin(key),
                  survivors=t.survivors(done[done["arch"].isin(models.get(key, ["scratchpad"]))], ["arch", "n"]),
                  secondaries={name: tests[key] for name, (tests, _) in secondaries.items() if key in tests},
                  secondary_margins={name: margins.get(key) for name, (_, margins) in secondaries.items()})
            for key, (statement, quantity, direction, test) in primary.items()]


def section(t: Tables) -> tuple[str, list[Claim]]:
    """Section 4 of the fidelity page: the trends in n with and without a scratchpad and their claims (S1, ...)."""
    kept = t.kept()
    encoder, pad = rows_where(kept, arch="encoder"), rows_where(kept, arch="scratchpad")
    metrics = _scratchpad_metrics(kept)
    claims = _claims(t, metrics)
    columns = {**metrics, "log_blowup_mean": "E log Blowup (ours)",
               **{f"authors_{stack}_blowup": f"Blowup, {stack} stack (published code's, Fig. 11)"
                  for stack in STACKS if f"authors_{stack}_blowup" in pad}, "param_norm": "param_norm"}
    rows = []
    for arch, frame in (("encoder", encoder), ("scratchpad", pad)):
        for n in sorted(frame["n"].unique()):
            rows.append([arch, num(n)] + [mean_sd(rows_where(frame, n=n)[c]) if c in frame else "—" for c in columns])
    params = ", ".join(f"{arch} P = {listing(frame['n_params'])}" for arch, frame in (("encoder", encoder),
                                                                                       ("scratchpad", pad))
                       if "n_params" in frame and len(frame))
    text = [
        "## 4. Scratchpad (Fig. 11)",
        "**The paper:** with a scratchpad (one decoder step per running-parity bit) the per-step sharpness and "
        "blowup stay flat in n, while the encoder computing PARITY in one step gets sharper."
        + paper_lengths(t),
        setup_table(t),
        runs_line(t, ["arch", "n"], rule=f"MSE < {num(threshold(t.runs), False)} for the encoder, autoregressive "
                                         f"accuracy > {num(CONVERGED_AUTOREGRESSIVE)} with a scratchpad"),
        "Mean ± standard deviation over the kept seeds:",
        table(["model", "n"] + list(columns.values()), rows),
        f"The two models differ in size ({params}), so only their trends in n compare, not their values. Slopes "
        "are per doubling of n (OLS in log2 n).",
        claims_table(claims),
        "S4 and S5 of earlier pages (the same claims as S2 and S3 on the last decoder step) are S2's and S3's "
        "secondaries: one claim, counted once." if len(metrics) > 1 else "",
    ]
    return "\n\n".join(text), claims


# ----------------------------------------------------------------------------- the registration

EXPERIMENT = Experiment("scratchpad", 4, TRAIN_AND_MEASURE, ("seed",), figures, (section,), {"task": "parity"})
