"""The fidelity page (docs/fidelity.md): the paper's claims beside what the shipped result tables show.

`render(folder, scale)` reads the sweep tables under `folder/<scale>/<experiment>/` (as
`experiments/results/` ships them) and returns the whole page as markdown; `write_page` writes it
(`sensviz fidelity experiments/results --out docs/fidelity.md --scale standard`). Every number on
the page is computed here: from the runs and history tables, from the specs' `paper` scale (the
paper's setup, `experiments/<experiment>.toml`) and from the experiments' constants. Each claim is
decided by one test of `sensviz.stats` under the rule of `stats.verdict`; where the tables cannot
decide it, the page gives the seeds the measured variance says would.

Columns read beyond those every table has (`sensviz.experiments` writes them): the length-scaling
runs may carry L_rho at fractions f of the proxy's radius rho_proxy = proxy_eps sqrt(P),
`sharpness_pm1_x{f}`, `sharpness_pm1_x{f}_stderr` and `sharpness_rho_x{f}` (f written as 0.01, 0.1,
0.3, 1); without them the page shows the two radii every table has (the limit and rho_proxy). The
scratchpad runs may carry `sharpness_proxy_last_pm1` (the last decoder step); then
`sharpness_proxy_pm1` is the mean over all decoder steps (the authors' convention), else it is the
last step.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from . import stats
from .experiments import CONVERGED_AUTOREGRESSIVE, CONVERGED_MSE, EXPERIMENTS, TRAIN_TOGETHER
from .experiments import defaults as experiment_defaults
from .figures import TASK_COLORS
from .models import build_model
from .report import SCALES, write_text
from .sweeps import load_spec, read_results

TASK_ORDER = tuple(TASK_COLORS)
TASK_NAMES = {"parity": "PARITY", "majority": "MAJORITY", "first": "FIRST", "mean": "MEAN"}

MARKER = ("<!-- written by `sensviz fidelity` from the {scale}-scale tables (scale: {scale}); "
          "edit sensviz/fidelity.py, not this page -->")
"""The page's first line; `scale_of` reads the scale back from it."""

PROXY = "sharpness proxy ×4"
LIMIT = "lim L_ρ/ρ²"


# ----------------------------------------------------------------------------- numbers as text


def num(x, pad: bool = True) -> str:
    """A number with 3 significant digits, trailing zeros kept unless `pad` is False (integers as they
    are, text as it is; '—' for a missing value)."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    if isinstance(x, (str, bool, np.bool_)):
        return str(x)
    if isinstance(x, (int, np.integer)) or float(x).is_integer() and abs(x) < 1e6:
        return str(int(x))
    if abs(float(x)) >= 1000:
        return f"{x:.0f}"
    return f"{x:#.3g}" if pad else f"{x:.3g}"


def span(values) -> str:
    """'a' or 'a–b' for the range of some numbers."""
    values = pd.Series(values, dtype=float).dropna()
    if values.empty:
        return "—"
    low, high = num(values.min()), num(values.max())
    return low if low == high else f"{low}–{high}"


def listing(values) -> str:
    """'4, 6, 8, 10' (up to 6 values), else 'first–last (k values)'."""
    values = sorted(pd.Series(values).dropna().unique().tolist())
    if len(values) > 6:
        return f"{num(values[0], False)}–{num(values[-1], False)} ({len(values)} values)"
    return ", ".join(num(v, False) for v in values) or "—"


def interval_text(interval: stats.Interval | None) -> str:
    """'estimate [low, high]'."""
    if interval is None:
        return "—"
    return f"{num(interval.estimate)} [{num(interval.low)}, {num(interval.high)}]"


def mean_sd(values) -> str:
    values = pd.Series(values, dtype=float).dropna()
    if values.empty:
        return "—"
    if len(values) == 1:
        return f"{num(values.iloc[0])} (1 run)"
    return f"{num(values.mean())} ± {num(values.std())}"


def table(header: list[str], rows: list[list]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- claims


@dataclass
class Claim:
    """One claim of the paper as tested: the interval of one quantity and the claimed sign."""

    experiment: str
    statement: str  # the paper's claim, in words
    quantity: str  # what the interval is of
    direction: int  # +1: claimed above zero, -1: below, 0: no effect
    interval: stats.Interval | None
    reason: str = ""  # why there is no interval
    key: str = ""  # its label on the page, e.g. L1

    @property
    def verdict(self) -> str:
        return stats.verdict(self.interval, self.direction) if self.interval else stats.UNRESOLVED

    def needed(self) -> str:
        """The units that would decide an unresolved claim, from the measured effect and variance."""
        if self.interval is None:
            return self.reason
        if self.verdict != stats.UNRESOLVED:
            return "—"
        half, most = self.interval.units_needed(0.5), self.interval.units_needed(0.8)
        if half is None:
            return "no effect measured" if self.interval.estimate == 0 else f"more than {stats.MAX_UNITS}"
        now = f"{self.interval.units:.3g}"
        return (f"{half} {self.interval.unit} (now {now}; {most if most else f'more than {stats.MAX_UNITS}'} "
                "for 80 % power)")


def attempt(test: Callable[[], stats.Interval]) -> tuple[stats.Interval | None, str]:
    """The test's interval, or None and the reason the tables cannot give it."""
    try:
        return test(), ""
    except (ValueError, KeyError, np.linalg.LinAlgError) as err:
        return None, f"missing column {err}" if isinstance(err, KeyError) else str(err)


def cell(test: Callable[[], stats.Interval]) -> str:
    """A table cell: the test's interval, or why there is none."""
    interval, reason = attempt(test)
    return interval_text(interval) if interval else f"— ({reason})"


def claim(experiment: str, statement: str, quantity: str, direction: int,
          test: Callable[[], stats.Interval]) -> Claim:
    """Run the test; a table that cannot test the claim gives the reason instead of an interval."""
    return Claim(experiment, statement, quantity, direction, *attempt(test))


def claims_table(claims: list[Claim], prefix: str) -> str:
    """The section's claims, labelled prefix1, prefix2, ... (the labels the summary uses)."""
    for i, c in enumerate(claims):
        c.key = f"{prefix}{i + 1}"
    rows = [[c.key, c.statement, c.quantity, interval_text(c.interval), c.interval.test if c.interval else "—",
             f"**{c.verdict}**", c.needed()] for c in claims]
    return table(["#", "claim", "quantity", "estimate [95 % interval]", "test", "verdict",
                  "to resolve (measured variance)"], rows)


# ----------------------------------------------------------------------------- tables and setup


@dataclass
class Tables:
    """One experiment's sweep at the chosen scale, with the spec's paper scale beside it."""

    experiment: str
    runs: pd.DataFrame  # settings the spec left at their defaults filled in
    history: pd.DataFrame
    paper: pd.DataFrame | None  # the runs of the spec's `paper` scale (settings only), if found

    def kept(self, column: str = "converged") -> pd.DataFrame:
        done = self.runs[self.runs["status"] == "finished"] if "status" in self.runs else self.runs
        return done[done[column].fillna(False).astype(bool)] if column in done else done.iloc[0:0]


def _with_defaults(experiment: str, runs: pd.DataFrame) -> pd.DataFrame:
    defaults = {k: v for k, v in experiment_defaults(experiment).items() if v is not None and k not in runs}
    return runs.assign(**defaults)


def load(folder: Path, experiment: str) -> Tables | None:
    """The experiment's tables under `folder` (one scale's folder), or None when it has none."""
    path = folder / experiment
    if not (path / "runs.parquet").is_file():
        return None
    runs, history, spec = read_results(path)
    source = folder.parent.parent / Path(spec.get("source") or f"{experiment}.toml").name
    try:
        paper = _with_defaults(experiment, pd.DataFrame(load_spec(source, "paper").runs))
    except ValueError:
        paper = None
    return Tables(experiment, _with_defaults(experiment, runs), history, paper)


SETTING_LABELS = {
    "arch": "architecture", "d_model": "width d", "n_layers": "layers", "batch_size": "batch",
    "steps": "steps", "lr": "learning rate", "weight_decay": "weight decay", "n": "input length n",
    "train_size": "training inputs", "seed": "seeds", "proxy_draws": "proxy noise draws",
    "directions": "directions of L_ρ", "measure_every": "measured every (steps)",
}


def _setting(frame: pd.DataFrame | None, column: str) -> str:
    if frame is None or column not in frame:
        return "—"
    if column == "seed":
        return num(frame["seed"].nunique())
    if column == "arch":
        return ", ".join(sorted(frame["arch"].dropna().unique()))
    return listing(frame[column])


def setup_table(t: Tables) -> str:
    rows = [[label, _setting(t.runs, column), _setting(t.paper, column)]
            for column, label in SETTING_LABELS.items() if column in t.runs]
    if "wall_s" in t.runs:
        rows.append(["wall time of the runs (sum, minutes)", num(t.runs["wall_s"].sum() / 60), "—"])
    return table(["setting", "these tables", "the spec's paper scale"], rows)


def threshold(runs: pd.DataFrame) -> float:
    """The filter's evaluation-MSE threshold (`experiments.converged_mse`): 0.001 on {0,1} targets."""
    scale = runs["pm1_scale"].dropna() if "pm1_scale" in runs else pd.Series(dtype=float)
    return CONVERGED_MSE * 4.0 / (scale.iloc[0] if len(scale) else 4.0)


def runs_line(t: Tables, by: list[str], column: str = "converged", rule: str | None = None) -> str:
    """Runs in the table, kept by the filter, dropped by it (which, with their evaluation MSE), failed,
    and how close the kept runs came to the filter's threshold."""
    limit = threshold(t.runs)
    rule = rule or f"final evaluation MSE < {num(limit, False)}, the paper's filter"
    counts = stats.dropped(t.runs, by, column)
    text = (f"**Runs:** {counts['runs'].sum()} in the table, {counts['finished'].sum()} finished, "
            f"{counts['kept'].sum()} kept ({rule})")
    dropped = counts[counts["dropped"] > 0]
    if len(dropped):
        done = t.runs[t.runs["status"] == "finished"]
        out = done[~done[column].fillna(False).astype(bool)]
        parts = [" ".join(f"{b} = {num(row[b], False)}" for b in by) + f" ×{int(row['dropped'])}"
                 for _, row in dropped.iterrows()]
        text += f"; dropped by the filter: {', '.join(parts)}"
        if "eval_loss" in out:
            text += f" (final evaluation MSE {span(out['eval_loss'])})"
    failed = t.runs[t.runs["status"] != "finished"] if "status" in t.runs else t.runs.iloc[0:0]
    if len(failed):
        errors = sorted(set(failed["error"].fillna("no error recorded").astype(str).str.slice(0, 120)))
        text += f"; {len(failed)} failed ({'; '.join(errors)})"
    kept = t.kept(column)
    mse = kept[kept["arch"] != "scratchpad"]["eval_loss"] if "eval_loss" in kept else pd.Series(dtype=float)
    if column == "converged" and len(mse):
        text += (f". The kept run closest to the threshold ended at evaluation MSE {num(mse.max())}, "
                 f"{num(limit - mse.max())} below it")
    pad = kept[kept["arch"] == "scratchpad"]
    if "autoregressive_accuracy" in pad and len(pad):
        text += (f"; the lowest autoregressive accuracy kept is {num(pad['autoregressive_accuracy'].min())}")
    return text + "."


def _tasks(frame: pd.DataFrame) -> list[str]:
    present = list(frame["task"].dropna().unique()) if "task" in frame else []
    return [task for task in TASK_ORDER if task in present] + sorted(set(present) - set(TASK_ORDER))


def _name(task: str) -> str:
    return TASK_NAMES.get(task, task)


def _rows(frame: pd.DataFrame, **where) -> pd.DataFrame:
    mask = np.ones(len(frame), dtype=bool)
    for column, value in where.items():
        mask &= (frame[column] == value).to_numpy()
    return frame[mask]


# ----------------------------------------------------------------------------- 1. length scaling

LENGTH_SLOPES = {
    "sharpness_proxy_pm1": f"{PROXY} (the paper's estimator)",
    "sharpness_pm1": "L_ρ at ρ_proxy, ±1 scale",
    "sharpness_limit_pm1": f"{LIMIT} (exact, first-order part)",
    "log_authors_blowup": "log Blowup (published code's aggregate)",
    "param_norm": "param_norm",
}


def length_scaling(t: Tables) -> tuple[str, list[Claim]]:
    kept = t.kept()
    tasks = _tasks(kept)
    lengths = sorted(kept["n"].unique()) if len(kept) else []
    parity = _rows(kept, task="parity")
    proxy_rows = [[num(n)] + [mean_sd(_rows(kept, task=task, n=n)["sharpness_proxy_pm1"]) for task in tasks]
                  for n in lengths]
    slope_rows = []
    for column, label in LENGTH_SLOPES.items():
        if column not in kept:
            continue
        cells = [cell(lambda rows=_rows(kept, task=task): stats.slope(rows["n"], rows[column])) for task in tasks]
        slope_rows.append([label] + cells)

    def parity_slope(column="sharpness_proxy_pm1"):
        return stats.slope(parity["n"], parity[column])

    claims = [
        claim("length_scaling", "PARITY's sharpness grows with n", f"slope of the {PROXY} in n, PARITY", +1,
              parity_slope),
        claim("length_scaling", "… roughly linearly (no curvature)", f"quadratic term of the {PROXY} in n, PARITY", 0,
              lambda: stats.curvature(parity["n"], parity["sharpness_proxy_pm1"])),
    ]
    for task in tasks:
        if task == "parity":
            continue
        rows = _rows(kept, task=task)
        claims.append(claim("length_scaling", f"{_name(task)}'s sharpness stays flat",
                            f"slope of the {PROXY} in n, {_name(task)}", 0,
                            lambda rows=rows: stats.slope(rows["n"], rows["sharpness_proxy_pm1"])))
        claims.append(claim("length_scaling", f"PARITY's sharpness grows faster than {_name(task)}'s",
                            f"difference of the slopes, PARITY − {_name(task)}", +1,
                            lambda rows=rows: stats.difference(parity_slope(),
                                                               stats.slope(rows["n"], rows["sharpness_proxy_pm1"]))))
    claims.append(claim("length_scaling", "LayerNorm blowup rises with n for PARITY",
                        "slope of log Blowup (published code's aggregate) in n, PARITY", +1,
                        lambda: parity_slope("log_authors_blowup")))

    bound_rows = [[_name(task)] + [num(_rows(kept, task=task, n=n)["bound"].mean()) for n in lengths]
                  for task in tasks] if "bound" in kept else []
    text = [
        "## 1. Length scaling (Fig. 1, 5–8)",
        "**The paper:** the sharpness of trained transformers grows with n for PARITY, roughly linearly, and "
        "stays small and flat for MAJORITY, FIRST and MEAN; LayerNorm blowup rises for PARITY."
        + _paper_lengths(t),
        setup_table(t),
        runs_line(t, ["task", "n"]),
        f"The {PROXY} (mean ± standard deviation over the kept seeds):",
        table(["n"] + [_name(task) for task in tasks], proxy_rows),
        "Slopes in n per task (per unit of n, OLS over the kept runs, 95 % interval):",
        table(["quantity"] + [_name(task) for task in tasks], slope_rows),
        claims_table(claims, "L"),
    ]
    if bound_rows:
        text += [
            "**The bound.** The theorem's right-hand side as_n(T)/(2n), with as_n of each trained model's output "
            "(mean over the kept runs):",
            table(["task"] + [f"n = {num(n)}" for n in lengths], bound_rows),
            _bound_reading(kept, lengths),
        ]
    return "\n\n".join(text), claims


def _paper_lengths(t: Tables) -> str:
    if t.paper is None or "n" not in t.paper:
        return ""
    return f" (The spec's paper scale: n = {listing(t.paper['n'])}.)"


def _bound_reading(kept: pd.DataFrame, lengths: list) -> str:
    parity = _rows(kept, task="parity", n=lengths[-1]) if lengths else kept.iloc[0:0]
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
    kept = t.kept()
    both = [n for n in sorted(kept["n"].unique()) if {"parity", "first"} <= set(_rows(kept, n=n)["task"])]
    last = both[-1] if both else None  # the largest n with kept runs of both tasks
    measured = radii(kept)
    parity, first = (kept["task"] == "parity") & (kept["n"] == last), (kept["task"] == "first") & (kept["n"] == last)
    fractions = [m[0] for m in measured]
    main = {0.0, 1.0 if 1.0 in fractions else max(fractions, default=0.0)}  # the limit and the proxy's radius
    rows, claims, separate = [], [], {stats.REPRODUCED: [], stats.DIFFERS: [], stats.UNRESOLVED: []}
    for fraction, label, value, rho, error in measured:
        found = claim("length_scaling", f"PARITY is sharper than FIRST at radius {label}",
                      f"PARITY − FIRST of L_ρ/ρ² at n = {num(last)}", +1,
                      lambda value=value: stats.welch(value[parity], value[first], "seeds per task"))
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
        claims_table(claims, "R"),
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
    model = build_model(s["arch"], d_model=int(s["d_model"]), n_layers=int(s["n_layers"]), n_heads=int(s["n_heads"]),
                        max_len=int(s["n"]), d_ff=int(s["d_ff"]), seed=0)
    p = model.n_params()
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


# ----------------------------------------------------------------------------- 2. trade-off


def tradeoff(t: Tables) -> tuple[str, list[Claim]]:
    kept = t.kept()
    tasks, lengths = _tasks(kept), sorted(kept["n"].unique()) if len(kept) else []
    x, y = "log_authors_blowup", "param_norm"
    group_rows = []
    for task in tasks:
        for n in lengths:
            rows = _rows(kept, task=task, n=n)
            r, _ = attempt(lambda rows=rows: stats.correlation(rows[x], rows[y]))
            group_rows.append([_name(task), num(n), len(rows),
                               cell(lambda rows=rows: stats.correlation(rows[x], rows[y])),
                               stats.verdict(r, -1) if r else stats.UNRESOLVED,
                               cell(lambda rows=rows: stats.correlation(rows["log_blowup_mean_sq"], rows[y])),
                               cell(lambda rows=rows: stats.slope(rows[x], rows[y], "runs"))])
    claims = [claim("tradeoff", "Converged runs lie on a downward band (norm falls as log blowup rises)",
                    "correlation of param_norm with log Blowup (published code's) within each task and n", -1,
                    lambda: stats.correlation(kept[x], kept[y], groups=kept["task"] + "/" + kept["n"].astype(str)))]
    offsets = {}
    for n in lengths:
        rows = _rows(kept, n=n)
        offsets[n] = claim("tradeoff", f"PARITY needs more norm at the same blowup (n = {num(n)})",
                           "PARITY's offset above the line through all tasks' runs (param_norm units)", +1,
                           lambda rows=rows: stats.offset(rows[x], rows[y], rows["task"] == "parity"))
        claims.append(offsets[n])
    if len(lengths) >= 2 and offsets[lengths[0]].interval and offsets[lengths[-1]].interval:
        claims.append(claim("tradeoff", "… more so at larger n",
                            f"offset at n = {num(lengths[-1])} − offset at n = {num(lengths[0])}", +1,
                            lambda: stats.difference(offsets[lengths[-1]].interval, offsets[lengths[0]].interval)))
    bound = t.runs[t.runs["status"] == "finished"]
    bound_rows = [[_name(task)] + [num(_rows(bound, task=task, n=n)["bound_rhs"].mean()) for n in lengths]
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
        claims_table(claims, "T"),
    ]
    if bound_rows:
        text += ["The bound's right-hand side as_n/√(n log n) − H/n per task (how much C · E[Blowup²] the theorem "
                 "demands; from the truth tables, no filter):",
                 table(["task"] + [f"n = {num(n)}" for n in lengths], bound_rows)]
    return "\n\n".join(text), claims


def _selection(t: Tables, lengths: list) -> str:
    """Which learning rates the convergence filter kept for PARITY at the largest n."""
    if not lengths or "lr" not in t.runs:
        return ""
    done = t.runs[t.runs["status"] == "finished"]
    rows = _rows(done, task="parity", n=lengths[-1])
    passed = rows["converged"].fillna(False).astype(bool)
    if passed.all() or not passed.any():
        return ""
    ranks = rows["lr"].rank()[passed].astype(int).tolist()
    return (f"The filter selects: of the {len(rows)} PARITY runs at n = {num(lengths[-1])}, the {passed.sum()} that "
            f"converged drew learning rates {listing(rows['lr'][passed])} (ranks {', '.join(map(str, sorted(ranks)))} "
            f"of {len(rows)}, lowest first) and weight decays {listing(rows['weight_decay'][passed])}; the dropped "
            f"ones drew {listing(rows['lr'][~passed])}.")


# ----------------------------------------------------------------------------- 3. dynamics


def _phases(t: Tables, kept: pd.DataFrame) -> pd.DataFrame:
    """Per kept run: the fixed batch's convergence step and the measurements at the start, at
    convergence, at their peak and at the end."""
    limit = threshold(t.runs)
    rows = []
    for _, run in kept.sort_values(["weight_decay", "seed"]).iterrows():
        h = t.history[t.history["run_id"] == run["run_id"]].sort_values("step")
        if h.empty:
            continue
        below = h[h["loss"] < limit]
        at = below.iloc[0] if len(below) else None
        before = h[(h["step"] < at["step"]) & (h["loss"] >= 100 * limit)] if at is not None else h.iloc[0:0]
        rows.append({
            "seed": run["seed"], "weight_decay": run["weight_decay"], "steps": h["step"].iloc[-1],
            "converged_step": None if at is None else at["step"],
            "window": None if at is None or before.empty else at["step"] - before["step"].iloc[-1],
            **{f"{c}_{when}": (row[c] if row is not None else math.nan)
               for c in ("sharpness_proxy_pm1", "param_norm", "log_authors_blowup")
               for when, row in (("start", h.iloc[0]), ("converged", at), ("end", h.iloc[-1]))},
            "sharpness_proxy_pm1_peak": h["sharpness_proxy_pm1"].max(),
        })
    return pd.DataFrame(rows)


def dynamics(t: Tables) -> tuple[str, list[Claim]]:
    kept = t.kept()
    phases = _phases(t, kept)
    limit = threshold(t.runs)
    decays = sorted(phases["weight_decay"].unique()) if len(phases) else []
    claims = []
    for decay in decays:
        p = _rows(phases, weight_decay=decay)
        claims.append(claim("dynamics", f"Sharpness rises into the minimum (weight decay {num(decay, False)})",
                            f"{PROXY} at convergence − at step 0, per seed", +1,
                            lambda p=p: stats.mean(p["sharpness_proxy_pm1_converged"]
                                                   - p["sharpness_proxy_pm1_start"])))
    for decay in [d for d in decays if d > 0]:
        p = _rows(phases, weight_decay=decay)
        claims.append(claim("dynamics", f"After convergence weight decay {num(decay, False)} shrinks the norm",
                            "param_norm at the end − at convergence, per seed", -1,
                            lambda p=p: stats.mean(p["param_norm_end"] - p["param_norm_converged"])))
        claims.append(claim("dynamics", f"… while the blowup grows (weight decay {num(decay, False)})",
                            "log Blowup (published code's) at the end − at convergence, per seed", +1,
                            lambda p=p: stats.mean(p["log_authors_blowup_end"] - p["log_authors_blowup_converged"])))
    if len(decays) >= 2:
        low, high = _rows(phases, weight_decay=decays[0]), _rows(phases, weight_decay=decays[-1])
        claims.append(claim("dynamics", "Weight decay ends at a smaller norm …",
                            f"final param_norm, weight decay {num(decays[-1], False)} − {num(decays[0], False)}", -1,
                            lambda: stats.welch(high["param_norm_end"], low["param_norm_end"])))
        claims.append(claim("dynamics", "… and a larger blowup",
                            f"final log Blowup (published code's), weight decay {num(decays[-1], False)} − "
                            f"{num(decays[0], False)}", +1,
                            lambda: stats.welch(high["log_authors_blowup_end"], low["log_authors_blowup_end"])))
    run_rows = [[num(r["seed"]), num(r["weight_decay"], False), num(r["converged_step"]), num(r["window"]),
                 f"{num(r['sharpness_proxy_pm1_start'])} / {num(r['sharpness_proxy_pm1_converged'])} / "
                 f"{num(r['sharpness_proxy_pm1_peak'])} / {num(r['sharpness_proxy_pm1_end'])}",
                 f"{num(r['param_norm_start'])} / {num(r['param_norm_converged'])} / {num(r['param_norm_end'])}",
                 f"{num(math.exp(r['log_authors_blowup_converged']))} / {num(math.exp(r['log_authors_blowup_end']))}"]
                for _, r in phases.iterrows()]
    steps = phases["steps"].max() if len(phases) else math.nan
    text = [
        "## 3. Training dynamics on PARITY (Fig. 3, 12–14)",
        "**The paper:** the loss falls in a short window; sharpness jumps around convergence as the model enters a "
        "steep PARITY minimum, together with LayerNorm blowup; afterwards weight decay shrinks the parameter norm "
        "while the blowup grows.",
        setup_table(t),
        runs_line(t, ["weight_decay", "seed"]),
        f"Per kept run, measured on one fixed batch with the same noise draws at every step: the step at which the "
        f"fixed batch's MSE first falls below {num(limit, False)} (convergence), the steps since its last value above "
        f"{num(100 * limit, False)} (the window), and the measurements at step 0 / convergence / peak / end:",
        table(["seed", "weight decay", "converged at step", "window (steps)", f"{PROXY}: start / conv. / peak / end",
               "param_norm: start / conv. / end", "Blowup (published code's): conv. / end"], run_rows),
        (f"The loss falls within {span(phases['window'])} steps of training runs of {num(steps)} steps; after "
         f"convergence {span(steps - phases['converged_step'])} steps remain (the spec's paper scale trains "
         f"{_setting(t.paper, 'steps')} steps)." if len(phases) else ""),
        claims_table(claims, "D"),
    ]
    return "\n\n".join(text), claims


# ----------------------------------------------------------------------------- 4. scratchpad


def _scratchpad_metrics(runs: pd.DataFrame) -> dict[str, str]:
    if "sharpness_proxy_last_pm1" in runs:
        return {"sharpness_proxy_pm1": f"{PROXY}, mean over all decoder steps (the authors' convention)",
                "sharpness_proxy_last_pm1": f"{PROXY}, last decoder step"}
    return {"sharpness_proxy_pm1": f"{PROXY}, last decoder step"}


def scratchpad(t: Tables) -> tuple[str, list[Claim]]:
    kept = t.kept()
    encoder, pad = _rows(kept, arch="encoder"), _rows(kept, arch="scratchpad")
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
            rows.append([arch, num(n)] + [mean_sd(_rows(frame, n=n)[c]) if c in frame else "—" for c in columns])
    params = ", ".join(f"{arch} P = {listing(frame['n_params'])}" for arch, frame in (("encoder", encoder),
                                                                                       ("scratchpad", pad))
                       if "n_params" in frame and len(frame))
    text = [
        "## 4. Scratchpad (Fig. 11)",
        "**The paper:** with a scratchpad (one decoder step per running-parity bit) the per-step sharpness and "
        "blowup stay flat in n, while the encoder computing PARITY in one step gets sharper."
        + _paper_lengths(t),
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


# ----------------------------------------------------------------------------- 5. generalization


def generalization(t: Tables) -> tuple[str, list[Claim]]:
    kept = t.kept()
    sizes = sorted(kept["train_size"].unique()) if len(kept) else []
    n = int(kept["n"].iloc[0]) if len(kept) else None
    claims = []
    for size in sizes:
        rows = _rows(kept, train_size=size)
        claims.append(claim("generalization", f"The learned function is less sensitive than random completions "
                                              f"({num(size)} inputs)",
                            "as_n learned − mean as_n of the completions, per function", -1,
                            lambda rows=rows: stats.mean(rows["as_learned"] - rows["as_completion_mean"], "functions")))
    claims.append(claim("generalization", "… least sensitive with the fewest training inputs",
                        "slope of the learned as_n in log2(training inputs)", +1,
                        lambda: stats.slope(np.log2(kept["train_size"]), kept["as_learned"], "functions per size")))
    done = t.runs[t.runs["status"] == "finished"]
    points = pd.concat([
        pd.DataFrame({"run_id": part["run_id"], "kind": kind, "as_n": part[as_column],
                      "sharpness": part[f"{kind}_sharpness_proxy_pm1"]})
        for kind, as_column in (("learned", "as_learned"), ("completion", "as_completion_retrained"))
        if f"{kind}_converged" in done
        for part in [done[done[f"{kind}_converged"].fillna(False).astype(bool)]]
    ] or [pd.DataFrame(columns=["run_id", "kind", "as_n", "sharpness"])], ignore_index=True)
    claims.append(claim("generalization", "More sensitive functions sit in sharper minima",
                        f"correlation of as_n with the {PROXY} over the retrained models", +1,
                        lambda: stats.correlation(points["as_n"], points["sharpness"])))
    both = points.pivot_table(index="run_id", columns="kind", values="sharpness").dropna()
    claims.append(claim("generalization", "… a completion's minimum is sharper than the learned function's",
                        f"{PROXY}, completion − learned, per function and training set", +1,
                        lambda: stats.mean(both["completion"] - both["learned"], "runs")))
    rows = []
    for size in sizes:
        r = _rows(kept, train_size=size)
        ids = set(r["run_id"])
        learned, completion = (points[(points["kind"] == k) & points["run_id"].isin(ids)]["sharpness"]
                               for k in ("learned", "completion"))
        rows.append([num(size), num(size / 2**n, False) if n else "—", mean_sd(r["as_learned"]),
                     mean_sd(r["as_completion_mean"]), mean_sd(r["as_target"]),
                     num(r["completions_more_sensitive"].mean()), mean_sd(learned), mean_sd(completion),
                     span(r["heldout_accuracy"])])
    retrained = (f"{len(points)} of {2 * len(done)} retrained models fitted the whole cube and are kept "
                 f"(learned: {int((points['kind'] == 'learned').sum())}, completions: "
                 f"{int((points['kind'] == 'completion').sum())})")
    missed = [f"the {kind} of training inputs = {num(r['train_size'])}, seed = {num(r['seed'])} (final MSE "
              f"{num(r.get(f'{kind}_eval_loss'))})"
              for kind in ("learned", "completion") if f"{kind}_converged" in done
              for _, r in done[~done[f"{kind}_converged"].fillna(False).astype(bool)].iterrows()]
    retrained += f"; dropped: {', '.join(missed)}." if missed else "."
    text = [
        "## 5. Generalization (Fig. 4, 15)",
        "**The paper:** trained on a few fixed inputs of a random function, a transformer extrapolates with a "
        "function of clearly lower average sensitivity than random completions of the same data (a random function "
        "has as_n ≈ n/2), lowest with the fewest inputs; retrained on the whole cube, more sensitive functions sit "
        "in sharper minima.",
        setup_table(t),
        runs_line(t, ["train_size"], rule=f"the training set fitted: MSE < {num(threshold(t.runs), False)} on it") + " "
        + retrained,
        f"Per training-set size (n = {num(n)}, n/2 = {num(n / 2, False) if n else '—'}; means ± standard deviations "
        "over the functions; the sharpness columns over the kept retrained models):",
        table(["training inputs", "fraction of the cube", "as_n learned", "as_n of the completions (mean)",
               "as_n of the target", "fraction of completions more sensitive", f"{PROXY} retrained: learned",
               "completion", "held-out accuracy"], rows),
        f"Held-out accuracy (on the inputs outside the training set) is {span(kept['heldout_accuracy'])}: the "
        "extrapolation is simple, not correct, as in the paper." if "heldout_accuracy" in kept else "",
        claims_table(claims, "G"),
    ]
    return "\n\n".join(text), claims


SECTIONS = {
    "length_scaling": [length_scaling, right_radius],
    "tradeoff": [tradeoff],
    "dynamics": [dynamics],
    "scratchpad": [scratchpad],
    "generalization": [generalization],
}


# ----------------------------------------------------------------------------- the page


def scales(folder) -> list[str]:
    """The scales under a results folder (subfolders holding at least one sweep), smallest first."""
    folder = Path(folder)
    found = sorted({p.parent.parent.name for p in folder.glob("*/*/runs.parquet")}) if folder.is_dir() else []
    return sorted(found, key=lambda s: (SCALES.index(s) if s in SCALES else len(SCALES), s))


def scale_of(page: str) -> str | None:
    """The scale a page was written for (from its first line)."""
    found = re.search(r"\(scale: ([^)]+)\)", page.splitlines()[0]) if page else None
    return found.group(1) if found else None


def default_scale(present: list[str]) -> str:
    """The largest named scale present (`SCALES`), else the last one found."""
    named = [s for s in present if s in SCALES]
    return (named or present)[-1]


def page_path(scale: str, present: list[str]) -> str:
    """Where the page of one scale lives: `docs/fidelity.md` for the default scale (the largest
    present), `docs/fidelity-<scale>.md` for each other one."""
    return "docs/fidelity.md" if scale == default_scale(present) else f"docs/fidelity-{scale}.md"


def build(folder, scale: str | None = None) -> tuple[str, list[Claim]]:
    """The fidelity page for one scale of the results folder (default: `default_scale`) and its claims."""
    folder = Path(folder)
    present = scales(folder)
    if not present:
        raise ValueError(f"{folder}: no results here (expected <scale>/<experiment>/runs.parquet)")
    scale = scale or default_scale(present)
    if scale not in present:
        raise ValueError(f"{folder}: no '{scale}' scale here; found {', '.join(present)}")
    root = f"{folder.parent.name}/{folder.name}" if folder.parent.name else folder.name
    sections, claims, missing = [], [], []
    for experiment in EXPERIMENTS:
        tables = load(folder / scale, experiment)
        if tables is None:
            missing.append(experiment)
            continue
        for section in SECTIONS[experiment]:
            text, found = section(tables)
            sections.append(text)
            claims += found
    counts = {v: sum(c.verdict == v for c in claims) for v in (stats.REPRODUCED, stats.DIFFERS, stats.UNRESOLVED)}
    unresolved = [c for c in claims if c.verdict == stats.UNRESOLVED]
    command = f"sensviz fidelity {root} --out {page_path(scale, present)} --scale {scale}"
    others = [f"[`{s}`]({Path(page_path(s, present)).name})" for s in present if s != scale]
    page = [
        MARKER.format(scale=scale),
        f"# Fidelity: the paper's claims beside the shipped `{scale}`-scale runs",
        "Hahn & Rofin, *Why are Sensitive Functions Hard for Transformers?* (ACL 2024), make five experimental "
        f"claims. `experiments/*.toml` runs each of them as a sweep; `{root}/{scale}/` holds the tables of the "
        f"`{scale}` scale. This page is written by `{command}` from those tables: every number on it is computed "
        "from them (the paper's setup from the specs' `paper` scale), and a test regenerates it and fails if this "
        "file differs. The Experiments page of the app and `sensviz report` draw the same tables."
        + (f" The same claims at the other shipped scales: {', '.join(others)}." if others else ""),
        "Each section sets the scale's settings beside the spec's `paper` scale. Everything else follows the "
        "paper's code: the post-LN encoder with concatenated embeddings, MSE on {0,1} targets, fresh uniform "
        "inputs every step, the sharpness proxy (Gaussian noise of std eps on every non-positional parameter, the "
        "loss increase on the ±1 scale), the published code's blowup aggregate, and the convergence filter. Where "
        "the width differs, so does the proxy's radius, so sharpness magnitudes compare only within one scale: "
        "compare trends.",
        "## How each claim is decided",
        METHOD,
        "## Verdicts",
        f"{len(claims)} claims: {counts[stats.REPRODUCED]} reproduced, {counts[stats.DIFFERS]} differ, "
        f"{counts[stats.UNRESOLVED]} not resolved at this scale."
        + (f" No tables at this scale for: {', '.join(missing)}." if missing else ""),
        _summary(claims),
    ]
    if unresolved:
        page.append("**What scale would decide the rest** (from the measured effect and variance): " + "; ".join(
            f"{c.key}, {c.needed()}" for c in unresolved) + ".")
    page += sections
    page += [
        "## Reproducing this page",
        "```bash\n"
        + "\n".join(f"sensviz sweep experiments/{e}.toml --out {root}/{scale}/{e}"
                    + (f" --scale {scale}" if scale != "quick" else "") + " --workers 2"
                    for e in EXPERIMENTS if e not in missing)
        + f"\n{command}\n```",
    ]
    return "\n\n".join(part for part in page if part) + "\n", claims


METHOD = (
    "Each claim is one quantity with a 95 % confidence interval, and one rule decides it: **reproduced** iff the "
    "interval excludes zero in the claimed direction, **differs** iff it excludes zero in the other direction, "
    "else **not resolved at this scale**. A claim of no effect (\"stays flat\", \"linear\") can therefore only "
    "differ or stay unresolved. The unit of replication is an independently trained model (a seed at one "
    "setting): the scatter between seeds is the error, never the noise draws or directions within a run. The "
    "tests (`sensviz.stats`): the OLS slope of a quantity in n over the kept runs, with its t(N − 2) interval "
    "(classical standard errors: the seed-to-seed variance is taken to be equal at every n); the quadratic term "
    "of an OLS parabola, t(N − 3), where \"linear\" is claimed; Welch's interval for a difference between two "
    "groups; a one-sample t interval over seeds for paired differences; the difference of two independent "
    "estimates with Welch-Satterthwaite degrees of freedom; Pearson's r with Fisher's z interval (pooled within "
    "groups where the claim is within each task and n); and the offset of one task above the line shared with "
    "the others (OLS with a task indicator). Every test keeps the runs that pass the paper's convergence filter "
    "and the page says which it dropped.\n\n"
    "Where a claim is not resolved, the last column of each section's table gives the units (seeds per setting, "
    "functions or runs), counted among the runs the filter keeps, at which the measured effect and the measured "
    "variance would give an interval that excludes zero (the standard error shrinking as 1/√units); in brackets "
    "the units the tables hold now (kept runs per setting, on average) and those for an 80 % chance of it."
)


def render(folder, scale: str | None = None) -> str:
    """The fidelity page (markdown) for one scale of the results folder."""
    return build(folder, scale)[0]


def _summary(claims: list[Claim]) -> str:
    rows = [[c.key, c.statement, c.quantity, interval_text(c.interval), f"**{c.verdict}**"] for c in claims]
    return table(["#", "claim", "quantity", "estimate [95 % interval]", "verdict"], rows)


def write_page(folder, out, scale: str | None = None) -> dict:
    """Write the fidelity page of `folder` (e.g. experiments/results) for one scale to `out`; a summary."""
    page, claims = build(folder, scale)
    out = write_text(out, page)
    verdicts = [c.verdict for c in claims]
    return {"written": str(out), "scale": scale_of(page), "claims": len(claims),
            **{v: verdicts.count(v) for v in (stats.REPRODUCED, stats.DIFFERS, stats.UNRESOLVED)}}


# ----------------------------------------------------------------------------- sizing a pre-registered design

def _kept_by(frame: pd.DataFrame, rule: str) -> pd.Series:
    """The rows a pre-registered filter keeps (`sensviz.sweeps.FILTERS`)."""
    if rule == "converged":
        return frame["converged"].fillna(False).astype(bool)
    if rule == "ever_converged":
        return frame["converged_step"].notna()
    return frame["eval_accuracy"].fillna(0) >= 0.99


def _per_run(t: Tables, rows: pd.DataFrame, quantity: str) -> pd.Series:
    """One value per run of a difference "COLUMN@WHEN - COLUMN@WHEN" (`_phases`: start, converged, end)."""
    phases = _phases(t, rows)
    (a, at), (b, bt) = (term.strip().split("@") for term in quantity.split(" - "))
    return (phases[f"{a}_{at}"] - phases[f"{b}_{bt}"]).dropna() if len(phases) else pd.Series(dtype=float)


def design_power(spec, scale: str, folder) -> dict[str, dict]:
    """Per pre-registered claim of the spec's `scale`: the seeds its primary test needs for its power at
    its smallest effect and alpha, from the variance and the keep rate in the tables under `folder`
    (one scale's results, e.g. experiments/results/standard): `stats.slope_design` (the residual
    standard deviation of the OLS fit over the kept runs, the keep rate per level) or `stats.mean_design`
    (the standard deviation of the per-run values, the share of runs kept)."""
    found = load_spec(spec, scale)
    t = load(Path(folder), found.experiment)
    if t is None or not found.analysis:
        raise ValueError(f"no {found.experiment} tables under {folder}, or no analysis in scale '{scale}'")
    done = t.runs[t.runs["status"] == "finished"]
    out = {}
    for name, claim in found.analysis["claims"].items():
        rows = _rows(done, **claim["runs"])
        keep = _kept_by(rows, claim["filter"]) if claim["filter"] != "ever_converged" or claim["estimator"] == "ols_slope" \
            else pd.Series(True, index=rows.index)
        args = (claim["smallest_effect"], claim["alpha"], claim["power"])
        if claim["estimator"] == "ols_slope":
            kept, x = rows[keep], claim["x"]
            coef = np.polyfit(kept[x], kept[claim["quantity"]], 1)
            residual = kept[claim["quantity"]] - np.polyval(coef, kept[x])
            sd = float(np.sqrt((residual**2).sum() / (len(kept) - 2)))
            rates = keep.groupby(rows[x]).mean()
            design = stats.slope_design(list(rates.index), list(rates.values), sd, *args)
            design["seeds"] = {int(level): seeds for level, seeds in design["seeds"].items()}
            basis = f"{len(kept)} of {len(rows)} runs kept, per {x}: " + ", ".join(
                f"{num(level, False)}: {num(rate)}" for level, rate in rates.items())
        else:
            values = _per_run(t, rows[keep], claim["quantity"])  # ever_converged: runs whose phases have a convergence
            sd = float(values.std(ddof=1))
            design = stats.mean_design(sd, args[0], len(values) / len(rows), *args[1:])
            basis = f"{len(values)} of {len(rows)} runs kept"
        out[name] = {**design, "sd": sd, "basis": basis, "effect": args[0], "alpha": args[1], "power": args[2]}
    return out


def _first_met(history: pd.DataFrame, limit: float) -> pd.Series:
    """Per run id: the first evaluation step with evaluation MSE below `limit` and accuracy 1 (if any)."""
    accurate = history["eval_accuracy"].fillna(1.0) >= 1.0 if "eval_accuracy" in history else True
    met = history[(history["eval_loss"] < limit) & accurate]
    return met.groupby("run_id")["step"].min()


def design_cost(spec, scale: str, folder) -> pd.DataFrame:
    """Runs and estimated CPU-hours per arm of the spec's `scale`, from the wall time per run and step
    of the tables under `folder` at the same task, n and weight decay, times the steps: a fixed arm's
    `steps`; in a relax arm a run's expected steps are the latest first step at which the tables' runs
    of the same settings met the filter, plus `relax_steps` (`steps` if one of them never met it: in a
    batch of many seeds one such run is likely), and the models trained together
    (`experiments.TRAIN_TOGETHER`, at most `batch_models`) all step until the last of them stops.
    The upper bound: every run trains its `steps`."""
    found = load_spec(spec, scale)
    t = load(Path(folder), found.experiment)
    runs = t.runs[t.runs["status"] == "finished"]
    keys = [k for k in ("task", "n", "weight_decay") if k in runs]
    first = _first_met(t.history, threshold(runs)) if "eval_loss" in t.history else pd.Series(dtype=float)
    runs = runs.assign(first_met=runs["run_id"].map(first).fillna(math.inf), per_step=runs["wall_s"] / runs["steps"])
    base = runs.groupby(keys).agg(per_step=("per_step", "mean"), first_met=("first_met", "max"))

    def at(s: dict) -> pd.Series:
        return base.loc[tuple(s[k] for k in keys)] if len(keys) > 1 else base.loc[s[keys[0]]]

    def steps(s: dict) -> float:
        met = at(s)["first_met"]
        return min(s["steps"], met + s["relax_steps"]) if s.get("relax_steps") is not None and math.isfinite(met) \
            else s["steps"]

    rows = []
    for arm, picks in found.analysis["arms"].items():
        mine = [s for s in found.runs if all(s.get(k) == v for k, v in picks.items())]
        groups: dict[str, list[dict]] = {}
        for s in mine:
            groups.setdefault(repr(sorted((k, v) for k, v in s.items() if k not in TRAIN_TOGETHER)), []).append(s)
        expected = 0.0
        for group in groups.values():
            size = group[0].get("batch_models", experiment_defaults(found.experiment)["batch_models"])
            for start in range(0, len(group), size):
                batch = group[start : start + size]
                longest = max(steps(s) for s in batch)
                expected += sum(at(s)["per_step"] for s in batch) * longest / 3600
        bound = sum(at(s)["per_step"] * s["steps"] for s in mine) / 3600
        rows.append({"arm": arm, "runs": len(mine), "cpu_hours_expected": round(expected, 2),
                     "cpu_hours_at_most": round(bound, 2)})
    return pd.DataFrame(rows)


def design_report(spec, scale: str, folder=None) -> str:
    """The power and cost of a pre-registered scale, as text (the numbers its spec's comments quote)."""
    folder = folder or Path(spec).parent / "results" / "standard"
    lines = [f"{spec} --scale {scale}, sized from {folder}:"]
    for name, d in design_power(spec, scale, folder).items():
        target = d.get("kept_per_level", d.get("kept"))
        seeds = d["seeds"] if isinstance(d["seeds"], int) else ", ".join(f"{k}: {v}" for k, v in d["seeds"].items())
        lines.append(f"  {name}: smallest effect {num(d['effect'], False)}, alpha {num(d['alpha'], False)}, power "
                     f"{num(d['power'], False)}; sd {num(d['sd'])} ({d['basis']}); needs {target} kept "
                     f"{'per level' if 'kept_per_level' in d else 'runs'} (se {num(d['se'])}, df {d['df']}): seeds {seeds}")
    cost = design_cost(spec, scale, folder)
    for _, row in cost.iterrows():
        lines.append(f"  arm {row['arm']}: {row['runs']} runs, about {row['cpu_hours_expected']} CPU-hours "
                     f"(at most {row['cpu_hours_at_most']})")
    lines.append(f"  total: {cost['runs'].sum()} runs, about {round(cost['cpu_hours_expected'].sum(), 2)} CPU-hours "
                 f"(at most {round(cost['cpu_hours_at_most'].sum(), 2)})")
    return "\n".join(lines)
