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
from ..fidelity import (
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
from ..figures import COLORS, NOTHING, TASK_COLORS, ExperimentFigure, colour, keep, panels, placeholder, summarise
from . import CONVERGED_AUTOREGRESSIVE, Experiment, train_and_measure

# ----------------------------------------------------------------------------- the figure


METRICS = {
    "sharpness_proxy_pm1": "sharpness proxy ×4 (per step)",
    "sharpness_limit_pm1": "lim L_ρ/ρ² (exact, per step)",
    "sharpness_pm1": "L_ρ on the ±1 scale (per step)",
    "log_blowup_mean": "E log Blowup (ours)",
    "param_norm": "param_norm",
}
RULE = "MSE < 0.001 for the encoder, autoregressive accuracy > 0.999 with a scratchpad"


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


def section(t: Tables) -> tuple[str, list[Claim]]:
    """Section 4 of the fidelity page: the trends in n with and without a scratchpad and their claims (S1, ...)."""
    kept = t.kept()
    encoder, pad = rows_where(kept, arch="encoder"), rows_where(kept, arch="scratchpad")
    metrics = _scratchpad_metrics(kept)

    def encoder_slope():
        return stats.slope(np.log2(encoder["n"]), encoder["sharpness_proxy_pm1"], "seeds per n")

    claims = [claim("scratchpad", "Without a scratchpad, sharpness grows with n",
                    f"slope of the encoder's {PROXY} in log2 n", +1, encoder_slope)]
    for column, label in metrics.items():
        claims.append(claim("scratchpad", "With a scratchpad, the per-step sharpness stays flat in n",
                            f"slope in log2 n of the {label}", 0,
                            lambda column=column: stats.slope(np.log2(pad["n"]), pad[column])))
        claims.append(claim("scratchpad", "The scratchpad's sharpness grows more slowly than the encoder's",
                            f"slope difference in log2 n, encoder − scratchpad ({label})", +1,
                            lambda column=column: stats.difference(encoder_slope(),
                                                                   stats.slope(np.log2(pad["n"]), pad[column]))))
    claims.append(claim("scratchpad", "With a scratchpad, the blowup stays flat in n",
                        "slope of the scratchpad's E log Blowup in log2 n", 0,
                        lambda: stats.slope(np.log2(pad["n"]), pad["log_blowup_mean"])))
    columns = {**metrics, "log_blowup_mean": "E log Blowup (ours)", "param_norm": "param_norm"}
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
        claims_table(claims, "S"),
    ]
    return "\n\n".join(text), claims


# ----------------------------------------------------------------------------- the registration

EXPERIMENT = Experiment("scratchpad", 4, train_and_measure, ("seed",), figures, (section,), {"task": "parity"})
