"""Sizing a pre-registered design from earlier tables: the seeds each claim's primary test needs for its power
(`design_power`), the CPU-hours of its arms (`design_cost`), both as text (`design_report`, `sensviz design`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from . import stats
from .claims import first_met, kept_by, num, phase_difference, rows_where, threshold
from .experiments import TRAIN_TOGETHER
from .experiments import defaults as experiment_defaults
from .results import load
from .sweeps import load_spec


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
        rows = rows_where(done, **claim["runs"])
        keep = kept_by(rows, claim["filter"]) if claim["filter"] != "ever_converged" or claim["estimator"] == "ols_slope" \
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
            values = phase_difference(t, rows[keep], claim["quantity"])  # ever_converged: runs whose phases have a convergence
            sd = float(values.std(ddof=1))
            design = stats.mean_design(sd, args[0], len(values) / len(rows), *args[1:])
            basis = f"{len(values)} of {len(rows)} runs kept"
        out[name] = {**design, "sd": sd, "basis": basis, "effect": args[0], "alpha": args[1], "power": args[2]}
    return out


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
    first = first_met(t.history, threshold(runs)) if "eval_loss" in t.history else pd.Series(dtype=float)
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
