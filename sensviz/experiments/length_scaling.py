"""Length scaling (the paper's Fig. 1, 5-8): PARITY, MAJORITY, FIRST, MEAN over input lengths n;
sharpness against n beside the theorem's lower bound

    lim_{rho->0} liminf_n L_{rho,n}(T) >= liminf_n as_n(T) / (2n) - L exp(-Omega(d)).

The runs train together and are measured at their own n (`train_and_measure`). The figure plots the
metrics against n per task; the fidelity page tests the slopes in n and at which radius PARITY is
sharper than FIRST; the Lab's chapter 5 draws the kept runs' proxy against n with the page's verdict.
"""

from __future__ import annotations

import math
import re

import pandas as pd

from .. import stats
from ..claims import (
    LIMIT,
    PROXY,
    Claim,
    Tables,
    cell,
    claim,
    claims_table,
    interval_text,
    listing,
    mean_sd,
    num,
    paper_lengths,
    rows_where,
    runs_line,
    setup_table,
    span,
    table,
    task_name,
    tasks_in,
)
from ..convergence import MSE_RULE
from ..figures import NOTHING, ExperimentFigure, keep, panels, placeholder, summarise, task_colour
from ..settings import ModelSettings
from . import TRAIN_AND_MEASURE, Experiment, LabData

# ----------------------------------------------------------------------------- the figure


METRICS = {
    "sharpness_proxy_pm1": "sharpness proxy ×4 (the paper's)",
    "sharpness_pm1": "L_ρ on the ±1 scale (ours)",
    "sharpness_limit_pm1": "lim L_ρ/ρ² (exact, ±1 scale)",
    "bound": "bound as_n(T)/(2n)",
    "log_authors_blowup": "log Blowup (published code's aggregate)",
    "param_norm": "param_norm",
}


def figures(runs: pd.DataFrame, history: pd.DataFrame) -> list[ExperimentFigure]:
    """The `METRICS` against n, one panel each, a line per task (mean ± standard error over kept seeds)."""
    kept, note = keep(runs, ["task", "n"], MSE_RULE)
    table = summarise(kept, ["task", "n"], METRICS)
    chart = panels(table, "n", "input length n", task_colour(table["task"]), list(METRICS.values())).properties(
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


# ----------------------------------------------------------------------------- the fidelity page


SLOPES = {
    "sharpness_proxy_pm1": f"{PROXY} (the paper's estimator)",
    "sharpness_pm1": "L_ρ at ρ_proxy, ±1 scale",
    "sharpness_limit_pm1": f"{LIMIT} (exact, first-order part)",
    "log_authors_blowup": "log Blowup (published code's aggregate)",
    "param_norm": "param_norm",
}


FLAT_KEYS = {"majority": ("L3", "L4"), "first": ("L5", "L6"), "mean": ("L7", "L8")}
"""Each other task's claims (stays flat; PARITY grows faster): the same keys at every scale."""


def _tests(kept: pd.DataFrame, error: str) -> dict[str, tuple]:
    """Per claim key: (statement, quantity, direction, test) over the runs `kept`, slopes with `error`."""
    parity = rows_where(kept, task="parity")

    def slope(rows, column="sharpness_proxy_pm1"):
        return stats.slope(rows["n"], rows[column], error=error)

    found = {
        "L1": ("PARITY's sharpness grows with n", f"slope of the {PROXY} in n, PARITY", +1, lambda: slope(parity)),
        "L2": ("… roughly linearly (no curvature)", f"quadratic term of the {PROXY} in n, PARITY", 0,
               lambda: stats.curvature(parity["n"], parity["sharpness_proxy_pm1"], error=error)),
    }
    for task, (flat, faster) in FLAT_KEYS.items():
        rows = rows_where(kept, task=task)
        found[flat] = (f"{task_name(task)}'s sharpness stays flat", f"slope of the {PROXY} in n, {task_name(task)}", 0,
                       lambda rows=rows: slope(rows))
        found[faster] = (f"PARITY's sharpness grows faster than {task_name(task)}'s",
                         f"difference of the slopes, PARITY − {task_name(task)}", +1,
                         lambda rows=rows: stats.difference(slope(parity), slope(rows)))
    found["L9"] = ("LayerNorm blowup rises with n for PARITY",
                   "slope of log Blowup (published code's aggregate) in n, PARITY", +1,
                   lambda: slope(parity, "log_authors_blowup"))
    return found


def _claims(t: Tables, tasks: list[str]) -> list[Claim]:
    """L1-L9 over the kept runs, each with its secondaries (the accuracy filter, HC3 errors) and survivors."""
    primary = _tests(t.kept(), "classical")
    secondaries = {"accuracy ≥ 0.99 filter": _tests(t.kept_accurate(), "classical"), "HC3 errors": _tests(t.kept(), "HC3")}
    done = t.finished()
    claims = []
    for key, (statement, quantity, direction, test) in primary.items():
        task = next((task for task, keys in FLAT_KEYS.items() if key in keys), None)
        if task is not None and task not in tasks:
            continue
        scope = ["parity"] if task is None else [task] if key == FLAT_KEYS[task][0] else ["parity", task]
        rows = done[done["task"].isin(scope)]
        claims.append(claim("length_scaling", statement, quantity, direction, test, key=key, margin=t.margin(key),
                            survivors=t.survivors(rows, ["task", "n"] if len(scope) > 1 else ["n"]),
                            secondaries={label: tests[key][3] for label, tests in secondaries.items()}))
    return claims


def section(t: Tables) -> tuple[str, list[Claim]]:
    """Section 1 of the fidelity page: the slopes in n per task and their claims (L1, ...), and the bound."""
    kept = t.kept()
    tasks = tasks_in(kept)
    lengths = sorted(kept["n"].unique()) if len(kept) else []
    proxy_rows = [[num(n)] + [mean_sd(rows_where(kept, task=task, n=n)["sharpness_proxy_pm1"]) for task in tasks]
                  for n in lengths]
    slope_rows = []
    for column, label in SLOPES.items():
        if column not in kept:
            continue
        cells = [cell(lambda rows=rows_where(kept, task=task): stats.slope(rows["n"], rows[column])) for task in tasks]
        slope_rows.append([label] + cells)
    claims = _claims(t, tasks)

    bound_rows = [[task_name(task)] + [num(rows_where(kept, task=task, n=n)["bound"].mean()) for n in lengths]
                  for task in tasks] if "bound" in kept else []
    text = [
        "## 1. Length scaling (Fig. 1, 5–8)",
        "**The paper:** the sharpness of trained transformers grows with n for PARITY, roughly linearly, and "
        "stays small and flat for MAJORITY, FIRST and MEAN; LayerNorm blowup rises for PARITY."
        + paper_lengths(t),
        setup_table(t),
        runs_line(t, ["task", "n"]),
        f"The {PROXY} (mean ± standard deviation over the kept seeds):",
        table(["n"] + [task_name(task) for task in tasks], proxy_rows),
        "Slopes in n per task (per unit of n, OLS over the kept runs, 95 % interval):",
        table(["quantity"] + [task_name(task) for task in tasks], slope_rows),
        claims_table(claims),
    ]
    if bound_rows:
        text += [
            "**The bound.** The theorem's right-hand side as_n(T)/(2n), with as_n of each trained model's output "
            "(mean over the kept runs):",
            table(["task"] + [f"n = {num(n)}" for n in lengths], bound_rows),
            _bound_reading(kept, lengths),
        ]
    return "\n\n".join(text), claims


def _bound_reading(kept: pd.DataFrame, lengths: list) -> str:
    parity = rows_where(kept, task="parity", n=lengths[-1]) if lengths else kept.iloc[0:0]
    if parity.empty or "sharpness_pm1" not in parity:
        return ""
    bound, measured = parity["bound"].mean(), parity["sharpness_pm1"].mean()
    side = "below" if measured < bound else "above"
    return (f"At n = {num(lengths[-1])} the PARITY models' L_ρ at ρ_proxy ({num(measured)}) is {side} their bound "
            f"({num(bound)}). The theorem bounds L_ρ as n → ∞ before ρ → 0, so it does not bound a measurement at "
            "finite n; what it predicts, and what the table above tests, is PARITY's sharpness climbing with n "
            "while the other tasks' bound, and their sharpness, stays small.")


# ----------------------------------------------------------------------------- the right radius


RADIUS_COLUMN = re.compile(r"sharpness_pm1_x([0-9.]+)")


def radii(runs: pd.DataFrame) -> list[tuple[float, str, pd.Series, pd.Series, pd.Series | None]]:
    """(fraction f of rho_proxy, label, L_rho / rho^2, rho, relative stderr over directions) per radius
    the runs were measured at, smallest first; f = 0 is the exact limit."""
    found = []
    if "sharpness_limit_pm1" in runs:
        zero = pd.Series(0.0, index=runs.index)
        found.append((0.0, "ρ → 0 (exact limit)", runs["sharpness_limit_pm1"], zero, None))
    tokens = {m.group(1): float(m.group(1)) for c in runs.columns if (m := RADIUS_COLUMN.fullmatch(c))}
    for token, fraction in tokens.items():
        value, rho = runs[f"sharpness_pm1_x{token}"], runs[f"sharpness_rho_x{token}"]
        error = runs.get(f"sharpness_pm1_x{token}_stderr")
        label = "ρ_proxy" if fraction == 1 else f"{token} ρ_proxy"
        found.append((fraction, label, value / rho**2, rho, None if error is None else error / value))
    if 1.0 not in tokens.values() and {"sharpness_pm1", "sharpness_rho", "proxy_rho"} <= set(runs):
        fraction = float((runs["sharpness_rho"] / runs["proxy_rho"]).median())
        error = runs["sharpness_stderr"] / runs["sharpness"] if {"sharpness_stderr", "sharpness"} <= set(runs) else None
        label = "ρ_proxy" if fraction == 1 else f"{num(fraction, False)} ρ_proxy"
        found.append((fraction, label, runs["sharpness_pm1"] / runs["sharpness_rho"] ** 2,
                      runs["sharpness_rho"], error))
    return sorted(found, key=lambda item: item[0])


def right_radius(t: Tables) -> tuple[str, list[Claim]]:
    """The fidelity page's radius subsection: PARITY against FIRST at each measured radius (R1, R2)."""
    kept = t.kept()
    both = [n for n in sorted(kept["n"].unique()) if {"parity", "first"} <= set(rows_where(kept, n=n)["task"])]
    last = both[-1] if both else None  # the largest n with kept runs of both tasks
    measured = radii(kept)
    parity, first = (kept["task"] == "parity") & (kept["n"] == last), (kept["task"] == "first") & (kept["n"] == last)
    fractions = [m[0] for m in measured]
    main = {0.0, 1.0 if 1.0 in fractions else max(fractions, default=0.0)}  # the limit and the proxy's radius
    rows, claims, separate = [], [], {stats.REPRODUCED: [], stats.DIFFERS: [], stats.UNRESOLVED: []}
    accurate = t.kept_accurate()
    accurate = accurate[accurate["n"] == last]
    at_last = t.finished()
    survivors = t.survivors(at_last[(at_last["n"] == last) & at_last["task"].isin(["parity", "first"])], ["task"])
    others = {f: v for f, _, v, _, _ in radii(accurate)}
    for fraction, label, value, rho, error in measured:
        found = claim("length_scaling", f"PARITY is sharper than FIRST at radius {label}",
                      f"PARITY − FIRST of L_ρ/ρ² at n = {num(last)}", +1,
                      lambda value=value: stats.welch(value[parity], value[first], "seeds per task"),
                      key="R1" if fraction == 0 else "R2", paper=False, survivors=survivors,
                      secondaries={"accuracy ≥ 0.99 filter": lambda fraction=fraction: stats.welch(
                          others[fraction][accurate["task"] == "parity"], others[fraction][accurate["task"] == "first"],
                          "seeds per task")})
        on_parity = kept["task"] == "parity"
        grows = cell(lambda value=value: stats.slope(kept["n"][on_parity], value[on_parity]))
        separate[found.verdict].append(label)
        p, f = value[parity].mean(), value[first].mean()
        rows.append([label, num(rho[parity | first].mean()) if fraction else "0", num(p), num(f),
                     num(p / f) if f else "—", interval_text(found.interval), f"**{found.verdict}**",
                     grows,
                     "—" if error is None else f"{num(100 * error[parity | first].median())} %"])
        if fraction in main:
            claims.append(found)
    text = [
        "### Sharpness at the right radius",
        "The theorem is about a fixed radius as n grows: "
        "lim_{ρ→0} liminf_{n→∞} L_{ρ,n}(T) ≥ liminf_n as_n(T)/(2n) − L exp(−Ω(d)), with n → ∞ taken first. "
        "L_ρ = E_x E_{|Δ|=ρ} (T_{θ+Δ}(x) − T_θ(x))² at a finite radius is the paper's sharpness; its exact "
        "small-ρ limit lim_{ρ→0} L_ρ/ρ² = E_x‖∇_θ T(x)‖²/P (fixed n, ρ → 0) is its "
        "first-order part, so L_ρ ≈ limit · ρ² only for small ρ, and the limit alone is not the claim. The "
        "paper's proxy perturbs every coordinate by Gaussian noise of std eps, of typical length "
        f"ρ_proxy = eps √P{_rho_context(kept)}.{_paper_rho(t)}",
        f"L_ρ/ρ² at each measured radius, PARITY against FIRST at the largest n with both, n = {num(last)} "
        "(means over the kept seeds; the difference with Welch's interval; PARITY's slope in n by OLS; direction "
        "noise is the median standard error over directions relative to L_ρ):",
        table(["radius", "ρ", "PARITY", "FIRST", "PARITY / FIRST", "PARITY − FIRST [95 %]", "verdict",
               "PARITY's slope in n [95 %]", "direction noise"], rows),
        _separation(separate, last),
        claims_table(claims),
    ]
    if len(measured) <= 2:
        text.append("These tables measure L_ρ at ρ_proxy and its limit only: the radii between them (the columns "
                    "`sharpness_pm1_x{f}` for fractions f of ρ_proxy) are not in them.")
    largest = [m for m in measured if m[0] == max(main)]
    if largest and largest[0][0] > 0 and "sharpness_limit_pm1" in kept:
        value = largest[0][2] / kept["sharpness_limit_pm1"]
        text.append(f"At {largest[0][1]}, L_ρ/ρ² is {num(value[parity].mean())} times the exact limit for PARITY and "
                    f"{num(value[first].mean())} times for FIRST at n = {num(last)} (means over seeds): the part "
                    "beyond first order, which only the finite radius measures.")
    small = [m for m in measured if 0 < m[0] < 1]
    if small and "sharpness_limit_pm1" in kept:
        fraction, label, value, _, _ = small[0]
        ratio = value / kept["sharpness_limit_pm1"]
        text.append(f"At the smallest radius, {label}, L_ρ/ρ² is {span(ratio)} times the exact limit over the kept "
                    f"runs (median {num(ratio.median())}): there L_ρ ≈ limit · ρ², as the first-order part predicts.")
    return "\n\n".join(text), claims


def _rho_context(kept: pd.DataFrame) -> str:
    if not {"proxy_rho", "param_norm", "n_params", "proxy_eps"} <= set(kept) or kept.empty:
        return ""
    return (f" = {span(kept['proxy_rho'])} here (eps = {listing(kept['proxy_eps'])}, "
            f"P = {listing(kept['n_params'])}), against ‖θ‖ = {span(kept['param_norm'])}: "
            f"ρ_proxy/‖θ‖ = {span(kept['proxy_rho'] / kept['param_norm'])}")


def _paper_rho(t: Tables) -> str:
    """ρ_proxy at the spec's paper scale, from the parameter count of its model."""
    if t.paper is None or t.paper.empty or not {"arch", "d_model", "proxy_eps"} <= set(t.paper):
        return ""
    s = t.paper.iloc[0]
    p = ModelSettings(s["arch"], d_model=int(s["d_model"]), n_layers=int(s["n_layers"]), n_heads=int(s["n_heads"]),
                      d_ff=int(s["d_ff"])).n_params(int(s["n"]))
    return (f" At the spec's paper scale (d = {num(s['d_model'], False)}) P = {p} and ρ_proxy = "
            f"{num(s['proxy_eps'] * math.sqrt(p))}: sharpness magnitudes compare only within one scale, trends across.")


def _separation(separate: dict, last) -> str:
    parts = []
    if separate[stats.REPRODUCED]:
        parts.append(f"PARITY is resolved above FIRST at n = {num(last)} at {', '.join(separate[stats.REPRODUCED])}")
    if separate[stats.DIFFERS]:
        parts.append(f"FIRST is resolved above PARITY at {', '.join(separate[stats.DIFFERS])}")
    if separate[stats.UNRESOLVED]:
        parts.append(f"the difference is not resolved at {', '.join(separate[stats.UNRESOLVED])}")
    return ("**Which radius separates the tasks:** " + "; ".join(parts) + ". The claim rests on the finite radius; "
            "the limit is reported as its first-order part.") if parts else ""


# ----------------------------------------------------------------------------- the registration

EXPERIMENT = Experiment("length_scaling", 1, TRAIN_AND_MEASURE, ("seed", "task"), figures, (section, right_radius),
                        lab=LabData("sensviz.findings:lab_folder", "sensviz.findings:lab_data"))
