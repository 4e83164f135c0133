"""Declarative sweeps: a TOML spec expands to runs, an executor runs them, results become tables.

A spec (TOML) names an experiment (a run function from `sensviz.experiments`) and its settings:

    experiment = "length_scaling"
    batch = ["seed", "task"]   # optional: settings that may differ within one job (default: the caller's)
    [defaults]                 # every run's settings
    arch = "encoder"
    d_model = 32
    [grid]                     # the Cartesian product of these lists
    task = ["parity", "first"]
    n = [4, 6, 8]
    seed = [0, 1, 2]
    [random]                   # optional random search: `samples` draws per grid point
    samples = 4
    seed = 0
    lr = {log_uniform = [1e-4, 5e-4]}
    weight_decay = {uniform = [0.0, 0.4]}
    [scales.paper]             # named overrides of the defaults: `--scale paper`
    d_model = 128
    [scales.paper.grid]        # a scale may also replace grid lists (and [scales.NAME.random] rules)
    n = [4, 8, 12, 16, 20, 25, 30]

`[[grid]]` (an array of tables) instead of `[grid]` gives several grids whose runs are pooled,
e.g. one per architecture with its own lengths; a scale's `grid` then replaces the whole array.

A scale may pre-register its analysis (`[scales.NAME.analysis]`, `check_analysis`): its arms (the
settings that pick each arm's runs: the arms must split the scale's runs between them) and, per
claim, the primary test (arm, runs, filter, quantity, estimator, error type, alpha, power, the
smallest effect the power was computed for) and the secondaries named in advance (each the primary
with one thing changed: arm, filter, error type or a covariate).

Identity: a spec's hash (`SweepSpec.hash`) is the sha256 of the canonical JSON of its experiment,
scale, every run's settings (sorted by run id) and the scale's analysis table: comments and the
TOML's layout do not change it; any change of what runs or how it is analysed does. A sweep writes
it into every run record and the runs table (`spec_hash`) and, with the experiment and scale, into
`OUT/spec.json` (the folder's identity). `run_sweep` refuses a folder that holds results (a runs
table or run records) of another sweep: without an identity, of another experiment or scale, or of
another spec hash (a grid with points added or removed, changed settings or a changed analysis is
another sweep and needs its own folder). A folder written before spec hashes (an identity without
one) is resumed when every run of its runs table is a run of this spec. Run records missing from a
folder whose tables were committed without them (`runs/` is not committed) are rebuilt from the
tables before resuming, so the finished runs are kept, not rerun.

A spec is validated whole before anything runs: unknown keys (at the top, in a scale, in a
random rule), empty or wrongly typed values, a setting whose values mix types across runs; and
its number of runs is counted before the grid is expanded: above the cap of 10,000 runs
(`sensviz.limits`, `runs`) it needs an explicit `max_runs` (`sensviz sweep --max-runs N`).

Each run's settings are a flat dict; its `run_id` is a hash of them, so rerunning a sweep skips
runs that already finished (their results are files in `OUT/runs/`), retries failed ones, and an
interrupted sweep loses nothing already finished. Runs that differ only in `seed` form one job, so
an experiment can train those seeds together in one batched run; `run_sweep(..., batch=...)` (or
the spec's `batch`) names more settings that may differ within a job, e.g. the learning rates of a
random search. Results: `OUT/runs.parquet` (one row per run: settings, status, error, final
metrics, wall and CPU time) and `OUT/history.parquet` (per-step measurements), rewritten after every job
and holding the runs of the spec just run; each run's checkpoint in `OUT/checkpoints/`.
The history table is replaced before the runs table, and `read_results` keeps only the history
of the runs in the runs table, so the two agree however a sweep was interrupted.

Pairs and stops: a scale's analysis may name `paired` settings (the arms of one seed: a job never splits
them, `jobs`), a `stop` rule (`run_sweep` starts no job once the rows' CPU time reaches its CPU-hours), and
`run_sweep` takes an `order` of its jobs, a `deadline` and the `device` its rows will be computed on (a folder
of another kind of device is refused, `check_device`).

Stopping: SIGTERM ends a sweep as Ctrl-C does (the local pool's workers are ended with it), and
local workers watch their parent process and exit as soon as it is gone (even after SIGKILL).
"""

from __future__ import annotations

import copy
import difflib
import functools
import hashlib
import itertools
import json
import math
import random
import signal
import sys
import threading
import time
import tomllib
import traceback
from collections.abc import Callable, Iterable
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .executors import make
from .files import write_atomic
from .limits import check_int, check_run_count

RANDOM_KINDS = ("uniform", "log_uniform", "int_uniform", "choice")
SPEC_KEYS = ("experiment", "name", "description", "batch", "defaults", "grid", "random", "scales", "equivalence")
"""Every key a spec may have at its top level."""
ESTIMATORS = {"ols_slope": "OLS slope of the quantity in `x` over the selected runs, t(N - 2)",
              "mean": "mean of one value per run (a per-seed difference), one-sample t(k - 1)",
              "curvature": "OLS quadratic term of the quantity in `x`, t(N - 3)",
              "slope_difference": "OLS slope in `x` of the runs minus that of the `versus` runs, Welch-Satterthwaite t",
              "welch": "mean of the runs minus mean of the `versus` runs, Welch t",
              "offset_difference": "how far the `group` runs lie above the line of the quantity in `x` through all the "
                                   "runs (OLS with a group indicator), at the last of two `levels` minus at the first"}
ERRORS = {"classical": "the classical (homoscedastic) standard error", "HC3": "heteroscedasticity-robust (HC3)"}
FILTERS = {"converged": "kept at the end: the final evaluation meets the convergence filter",
           "ever_converged": "met the convergence filter at some evaluation (converged_step is set)",
           "accuracy_0.99": "final evaluation accuracy >= 0.99",
           "relaxed": "kept, and relaxed: stopped relax_steps after it first met the filter (converged and relaxed); "
                      "in an arm that never relaxes (no relax_steps), kept"}
CLAIM_KEYS = {"statement": str, "primary_arm": str, "runs": dict, "filter": str, "quantity": str, "x": str,
              "estimator": str, "error": str, "alpha": float, "power": float, "smallest_effect": float,
              "power_command": str, "secondaries": list, "versus": dict, "margin": float, "x_scale": str,
              "group": dict, "levels": dict}
"""The keys of a pre-registered claim and their types (`x` only with a slope or curvature, `versus` only with a
difference; `margin`: a flat claim, decided by two one-sided tests against ±margin, its power computed at
`smallest_effect`, the true value assumed; `x_scale = "log2"`: the slope or curvature in log2 x; `group` and
`levels = {SETTING = [first, last]}` with the offset difference)."""
OPTIONAL_CLAIM_KEYS = ("x", "versus", "margin", "x_scale", "group", "levels")
ANALYSIS_KEYS = {"arms": dict, "claims": dict, "paired": list, "familywise": str, "stop": dict, "rank": list,
                 "sized_from": dict}
"""A scale's analysis: `arms` and `claims` (required); `paired`, the settings in which the arms of one seed differ
(a job never splits them: they train as members of one run); `familywise = "holm"`, Holm's step-down across the
primaries; `stop`, the rule for when the sweep stops (`cpu_hours`, and its `rule` in words); `rank`, the claims in
the order their runs go first; `sized_from`, the exploratory scale and tables the design was sized from
(`sensviz.confirm`: its sizing and the sweep's order)."""
SECONDARY_KEYS = ("arm", "filter", "error", "covariate")
"""What a secondary test may change in its claim's primary."""
EQUIVALENCE_KEYS = {"statement": str, "runs": dict, "filter": str, "quantity": str, "x": str, "margin": float,
                    "units": str, "reason": str}
"""The keys of a flat claim's equivalence margin (`[equivalence.NAME]`), each required; `x_scale` ("log2") and `fixed`
are optional (`fixed`: when the margin was written, {commit, date, seen}: the scales whose tables of its runs held
two or more levels of x by then, on which its verdicts come after the data: `sensviz.findings`)."""
FIXED_KEYS = {"commit": str, "date": str, "seen": list}
"""The keys of a margin's `fixed` record."""


@dataclass
class SweepSpec:
    """A parsed sweep: the experiment's name and the settings of every run."""

    experiment: str
    runs: list[dict]
    name: str = ""
    source: str = ""
    description: str = ""
    batch: tuple[str, ...] | None = None  # the spec's `batch`: settings that may differ within a job
    scale: str | None = None  # the named scale the runs were expanded with (None: the defaults)
    analysis: dict | None = None  # the scale's pre-registered analysis, if it has one
    equivalence: dict | None = None  # the flat claims' margins ([equivalence]); not part of the hash

    @property
    def hash(self) -> str:
        """The spec's identity (module docstring): sha256 of experiment, scale, runs and analysis."""
        canonical = {"experiment": self.experiment, "scale": self.scale, "analysis": self.analysis,
                     "runs": sorted(self.runs, key=run_id)}
        return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()


def run_id(settings: dict) -> str:
    """A stable short id of a run's settings (sha256 of their sorted JSON, 12 hex digits)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]


# ----------------------------------------------------------------------------- validation


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_number(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) or isinstance(value, float) and math.isfinite(value)


def _check_setting(where: str, value) -> None:
    """A setting's value: a string, a boolean, an integer or a finite float."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: {value} is not a finite number")
    if not isinstance(value, (str, bool, int, float)):
        raise ValueError(f"{where} must be a string, a number or a boolean, got {_shown(value)}")


def _check_settings(where: str, table) -> None:
    if not isinstance(table, dict):
        raise ValueError(f"{where} must be a table of settings ([{where}]), got {_shown(table)}")
    for key, value in table.items():
        _check_setting(f"{where}.{key}", value)


def _check_grid(where: str, grid) -> None:
    tables = grid if isinstance(grid, list) and grid else [grid]
    for table in tables:
        if not isinstance(table, dict):
            raise ValueError(f"{where} must be a table ([grid]) or an array of tables ([[grid]]), got {_shown(grid)}")
        for key, values in table.items():
            if not isinstance(values, list) or not values:
                raise ValueError(f"{where}.{key} must be a non-empty list, got {_shown(values)}")
            for value in values:
                _check_setting(f"{where}.{key}", value)


def _check_rule(where: str, rule) -> None:
    if not isinstance(rule, dict) or len(rule) != 1 or next(iter(rule)) not in RANDOM_KINDS:
        raise ValueError(f"{where} must be one of {{{', '.join(RANDOM_KINDS)} = [...]}}, got {_shown(rule)}")
    kind, args = next(iter(rule.items()))
    if kind == "choice":
        if not isinstance(args, list) or not args:
            raise ValueError(f"{where}: choice takes a non-empty list of values, got {_shown(args)}")
        for value in args:
            _check_setting(f"{where}.choice", value)
        return
    integers = kind == "int_uniform"
    if not (isinstance(args, list) and len(args) == 2
            and all(_is_number(a) and (not integers or isinstance(a, int)) for a in args)):
        what = "two integers" if integers else "two finite numbers"
        raise ValueError(f"{where}: {kind} takes [low, high], {what}; got {_shown(args)}")
    low, high = args
    if low > high:
        raise ValueError(f"{where}: {kind} needs low <= high, got [{low}, {high}]")
    if kind == "log_uniform" and low <= 0:
        raise ValueError(f"{where}: log_uniform bounds must be positive, got [{low}, {high}]")


def _check_random(where: str, search) -> None:
    if not isinstance(search, dict):
        raise ValueError(f"{where} must be a table ([{where}]), got {_shown(search)}")
    for key, rule in search.items():
        if key == "samples":
            check_int(f"{where}.samples", rule, "max_runs")
        elif key == "seed":
            check_int(f"{where}.seed", rule, "seed")
        else:
            _check_rule(f"{where}.{key}", rule)


def _check_scales(scales) -> None:
    if not isinstance(scales, dict):
        raise ValueError(f"scales must be a table of named scales ([scales.NAME]), got {_shown(scales)}")
    for name, scale in scales.items():
        where = f"scales.{name}"
        if not isinstance(scale, dict):
            raise ValueError(f"{where} must be a table ([{where}]) of settings, grid and random, got {_shown(scale)}")
        for key, value in scale.items():
            if key == "grid":
                _check_grid(f"{where}.grid", value)
            elif key == "analysis":
                check_analysis(f"{where}.analysis", value)
            elif key == "random":
                _check_random(f"{where}.random", value)
            elif isinstance(value, dict):
                raise ValueError(f"{where}.{key} is a table; a scale holds settings, [{where}.grid], [{where}.random] "
                                 f"and [{where}.analysis]")
            else:
                _check_setting(f"{where}.{key}", value)


def _check_claim(where: str, claim, arms: dict) -> None:
    """A pre-registered claim: its keys (`_check_claim_keys`), then its values and its secondaries."""
    _check_claim_keys(where, claim)
    _check_claim_values(where, claim, arms)
    for i, secondary in enumerate(claim["secondaries"]):
        _check_secondary(f"{where}.secondaries[{i}]", secondary, arms)


def _check_claim_keys(where: str, claim) -> None:
    """A table with the keys its estimator needs, each of its type."""
    if not isinstance(claim, dict):
        raise ValueError(f"{where} must be a table ([{where}]), got {_shown(claim)}")
    unknown = sorted(set(claim) - set(CLAIM_KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; a claim has {', '.join(CLAIM_KEYS)}")
    with_x, with_versus = ("ols_slope", "curvature", "slope_difference", "offset_difference"), ("slope_difference", "welch")
    needed = [k for k in CLAIM_KEYS if k not in claim and k not in OPTIONAL_CLAIM_KEYS]
    needed += ["x"] * ("x" not in claim and claim.get("estimator") in with_x)
    needed += ["versus"] * ("versus" not in claim and claim.get("estimator") in with_versus)
    needed += [k for k in ("group", "levels") if k not in claim and claim.get("estimator") == "offset_difference"]
    if needed:
        raise ValueError(f"{where}: missing {needed}")
    for key, kind in CLAIM_KEYS.items():
        value = claim.get(key)
        if key in claim and not (isinstance(value, kind) or kind is float and _is_number(value)):
            raise ValueError(f"{where}.{key} must be a {kind.__name__}, got {_shown(value)}")


def _check_claim_values(where: str, claim: dict, arms: dict) -> None:
    """The claim's runs and settings, its margin, levels, scale, choices among the named options and probabilities."""
    _check_settings(f"{where}.runs", claim["runs"])
    if "versus" in claim:
        _check_settings(f"{where}.versus", claim["versus"])
    if "margin" in claim and not claim["margin"] > 0:
        raise ValueError(f"{where}.margin must be positive, got {claim['margin']}")
    levels = claim.get("levels", {"n": [0, 1]})
    if not (len(levels) == 1 and isinstance(next(iter(levels.values())), list) and len(next(iter(levels.values()))) == 2):
        raise ValueError(f"{where}.levels must name one setting and its two levels, first and last, got {_shown(levels)}")
    if claim.get("x_scale", "log2") != "log2":
        raise ValueError(f"{where}.x_scale must be \"log2\" (or absent: x itself), got {_shown(claim['x_scale'])}")
    for key, allowed in (("estimator", ESTIMATORS), ("error", ERRORS), ("filter", FILTERS), ("primary_arm", arms)):
        if claim[key] not in allowed:
            raise ValueError(f"{where}.{key} must be one of {', '.join(allowed)}; got {_shown(claim[key])}")
    for key in ("alpha", "power"):
        if not 0 < claim[key] < 1:
            raise ValueError(f"{where}.{key} must lie in (0, 1), got {claim[key]}")
    if claim["smallest_effect"] == 0 and "margin" not in claim:
        raise ValueError(f"{where}.smallest_effect must not be 0 (the power is computed for it)")


def _check_secondary(here: str, secondary, arms: dict) -> None:
    """A secondary analysis: one key of the primary changed, to an allowed value."""
    if not isinstance(secondary, dict) or len(secondary) != 1 or next(iter(secondary)) not in SECONDARY_KEYS:
        raise ValueError(f"{here} must change one of {', '.join(SECONDARY_KEYS)} of the primary, "
                         f"e.g. {{filter = \"accuracy_0.99\"}}; got {_shown(secondary)}")
    key, value = next(iter(secondary.items()))
    allowed = {"arm": arms, "filter": FILTERS, "error": ERRORS}.get(key)
    if not isinstance(value, str) or allowed is not None and value not in allowed:
        raise ValueError(f"{here}.{key} must be one of {', '.join(allowed or ['a setting or metric name'])}; "
                         f"got {_shown(value)}")


def check_analysis(where: str, analysis) -> None:
    """A scale's pre-registered analysis: `arms` (name -> the settings that pick its runs) and
    `claims` (name -> one primary test and its secondaries, `CLAIM_KEYS`). ValueError says what is wrong."""
    if not isinstance(analysis, dict) or not {"arms", "claims"} <= set(analysis) <= set(ANALYSIS_KEYS):
        raise ValueError(f"{where} must hold [{where}.arms] and [{where}.claims.NAME] tables (and optionally "
                         f"{', '.join(list(ANALYSIS_KEYS)[2:])}), got {_shown(analysis)}")
    for key, kind in ANALYSIS_KEYS.items():
        if key in analysis and not isinstance(analysis[key], kind):
            raise ValueError(f"{where}.{key} must be a {kind.__name__}, got {_shown(analysis[key])}")
    if not all(isinstance(name, str) for name in analysis.get("paired", [])):
        raise ValueError(f"{where}.paired must list setting names, got {_shown(analysis['paired'])}")
    unknown = [name for name in analysis.get("rank", []) if name not in analysis["claims"]]
    if unknown:
        raise ValueError(f"{where}.rank names claims it does not hold: {unknown}")
    if "sized_from" in analysis and not (set(analysis["sized_from"]) == {"scale", "tables"}
                                         and all(isinstance(v, str) for v in analysis["sized_from"].values())):
        raise ValueError(f"{where}.sized_from must give the exploratory scale and its tables' folder, "
                         f"got {_shown(analysis['sized_from'])}")
    if analysis.get("familywise", "holm") != "holm":
        raise ValueError(f"{where}.familywise must be \"holm\", got {_shown(analysis['familywise'])}")
    if "stop" in analysis and not (_is_number(analysis["stop"].get("cpu_hours")) and analysis["stop"]["cpu_hours"] > 0
                                   and isinstance(analysis["stop"].get("rule"), str)):
        raise ValueError(f"{where}.stop must give cpu_hours (positive) and its rule in words, got {_shown(analysis['stop'])}")
    arms, claims = analysis["arms"], analysis["claims"]
    if not isinstance(arms, dict) or not arms:
        raise ValueError(f"{where}.arms must name at least one arm (arm = {{setting = value}}), got {_shown(arms)}")
    for name, picks in arms.items():
        _check_settings(f"{where}.arms.{name}", picks)
    if not isinstance(claims, dict) or not claims:
        raise ValueError(f"{where}.claims must hold at least one claim ([{where}.claims.NAME]), got {_shown(claims)}")
    for name, claim in claims.items():
        _check_claim(f"{where}.claims.{name}", claim, arms)


def check_equivalence(table) -> None:
    """The flat claims' margins, `[equivalence.NAME]` with `EQUIVALENCE_KEYS`: the slope of `quantity` in
    `x` (in log2 x with x_scale = "log2") over the runs `runs` kept by `filter` is flat within ±margin,
    in `units`, for `reason`. Written outside the scales, so they do not enter any spec hash."""
    if not isinstance(table, dict) or not table:
        raise ValueError(f"equivalence must hold [equivalence.NAME] tables, got {_shown(table)}")
    for name, entry in table.items():
        where = f"equivalence.{name}"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be a table ([{where}]), got {_shown(entry)}")
        unknown = sorted(set(entry) - set(EQUIVALENCE_KEYS) - {"x_scale", "fixed"})
        missing = [k for k in EQUIVALENCE_KEYS if k not in entry]
        if unknown or missing:
            raise ValueError(f"{where}: unknown {unknown}, missing {missing}; it has {', '.join(EQUIVALENCE_KEYS)} "
                             "and optionally x_scale and fixed")
        fixed = entry.get("fixed", {})
        if not isinstance(fixed, dict) or fixed and (set(fixed) != set(FIXED_KEYS) or not all(
                isinstance(fixed[k], kind) for k, kind in FIXED_KEYS.items())):
            raise ValueError(f"{where}.fixed must be {{commit = \"...\", date = \"...\", seen = [scales]}}, "
                             f"got {_shown(fixed)}")
        for key, kind in EQUIVALENCE_KEYS.items():
            value = entry[key]
            if not (isinstance(value, kind) and not isinstance(value, bool) or kind is float and _is_number(value)):
                raise ValueError(f"{where}.{key} must be a {kind.__name__}, got {_shown(value)}")
        _check_settings(f"{where}.runs", entry["runs"])
        if entry["filter"] not in FILTERS:
            raise ValueError(f"{where}.filter must be one of {', '.join(FILTERS)}; got {_shown(entry['filter'])}")
        if not entry["margin"] > 0:
            raise ValueError(f"{where}.margin must be positive, got {entry['margin']}")
        if entry.get("x_scale", "log2") != "log2":
            raise ValueError(f"{where}.x_scale must be \"log2\" (or absent: x itself), got {_shown(entry['x_scale'])}")


def _picks(settings: dict, picks: dict) -> bool:
    return all(settings.get(key) == value for key, value in picks.items())


def _check_arms(analysis: dict, runs: list[dict]) -> None:
    """Every run is in exactly one arm, every arm and every claim selects runs."""
    arms = analysis["arms"]
    for settings in runs:
        inside = [name for name, picks in arms.items() if _picks(settings, picks)]
        if len(inside) != 1:
            raise ValueError(f"analysis: run {_short(settings)} is in {len(inside)} arms ({inside}); the arms must "
                             "split the scale's runs")
    for name, claim in analysis["claims"].items():
        for arm in [claim["primary_arm"]] + [s["arm"] for s in claim["secondaries"] if "arm" in s]:
            if not any(_picks(r, arms[arm]) and _picks(r, claim["runs"]) for r in runs):
                raise ValueError(f"analysis.claims.{name}: no run of arm '{arm}' matches its runs {claim['runs']}")


def check_spec_data(data: dict) -> None:
    """Raise ValueError, with the first problem, for a spec (parsed TOML) that is not valid as a whole:
    unknown top-level keys, tables or rules, empty lists, values of the wrong type."""
    unknown = sorted(set(data) - set(SPEC_KEYS))
    if unknown:
        close = [m for key in unknown for m in difflib.get_close_matches(key, SPEC_KEYS, n=1)]
        hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
        raise ValueError(f"unknown top-level key(s) {unknown}{hint}; a spec has {', '.join(SPEC_KEYS)}")
    if "experiment" not in data:
        raise ValueError("the spec must name its experiment (experiment = \"...\")")
    for key in ("experiment", "name", "description"):
        if key in data and not isinstance(data[key], str):
            raise ValueError(f"{key} must be a string, got {_shown(data[key])}")
    batch = data.get("batch")
    if batch is not None and (not isinstance(batch, list) or not all(isinstance(b, str) for b in batch)):
        raise ValueError(f"batch must be a list of setting names, got {batch!r}")
    _check_settings("defaults", data.get("defaults", {}))
    if "grid" in data:
        _check_grid("grid", data["grid"])
    _check_random("random", data.get("random", {}))
    _check_scales(data.get("scales", {}))
    if "equivalence" in data:
        check_equivalence(data["equivalence"])


def _check_columns(runs: list[dict]) -> None:
    """Every setting holds one kind of value across the runs (one column of the runs table)."""
    kinds: dict[str, dict[str, object]] = {}
    for settings in runs:
        for key, value in settings.items():
            kind = "boolean" if isinstance(value, bool) else "string" if isinstance(value, str) else "number"
            kinds.setdefault(key, {}).setdefault(kind, value)
    for key, seen in kinds.items():
        if len(seen) > 1:
            examples = ", ".join(_shown(v) for v in seen.values())
            raise ValueError(f"setting '{key}' mixes {' and '.join(sorted(seen))} values across runs ({examples}); "
                             "each setting is one column of the results table")


# ----------------------------------------------------------------------------- expansion


def _draw(rule, rng: random.Random):
    kind, args = next(iter(rule.items()))
    if kind == "choice":
        return rng.choice(list(args))
    low, high = args
    if kind == "uniform":
        return rng.uniform(low, high)
    if kind == "log_uniform":
        return math.exp(rng.uniform(math.log(low), math.log(high)))
    return rng.randint(int(low), int(high))


def _grid_points(grid) -> list[dict]:
    """The points of one grid table (the Cartesian product of its lists), or of an array of them (pooled)."""
    if isinstance(grid, list):
        return [point for table in grid for point in _grid_points(table)]
    return [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())]


def _count_points(grid) -> int:
    """len(_grid_points(grid)), without making them."""
    if isinstance(grid, list):
        return sum(_count_points(table) for table in grid)
    return math.prod(len(values) for values in grid.values())


def _with_scale(data: dict, scale: str) -> tuple[dict, object, dict]:
    """Defaults, grid and random rules with the scale's overrides applied."""
    scales = data.get("scales", {})
    if scale not in scales:
        raise ValueError(f"unknown scale '{scale}'; this spec has {sorted(scales) or 'no scales'}")
    overrides = dict(scales[scale])
    overrides.pop("analysis", None)
    grid, search = data.get("grid", {}), dict(data.get("random", {}))
    if "grid" in overrides:
        new = overrides.pop("grid")
        grid = {**grid, **new} if isinstance(grid, dict) and isinstance(new, dict) else new
    search.update(overrides.pop("random", {}))
    return {**data.get("defaults", {}), **overrides}, grid, search


def _plan(data: dict, scale: str | None) -> tuple[dict, object, dict, int, int]:
    """Defaults, grid, random rules, draws per grid point and the random search's seed."""
    if scale:
        defaults, grid, search = _with_scale(data, scale)
    else:
        defaults, grid, search = dict(data.get("defaults", {})), data.get("grid", {}), dict(data.get("random", {}))
    samples = search.pop("samples", 1 if not search else 0)
    seed = search.pop("seed", 0)
    if search and samples < 1:
        raise ValueError("random search needs samples >= 1")
    return defaults, grid, search, samples if search else 1, seed


def count_runs(data: dict, scale: str | None = None) -> int:
    """How many runs `expand` makes of a valid spec, counted without making them."""
    _, grid, _, draws, _ = _plan(data, scale)
    return max(_count_points(grid), 1) * draws


def expand(data: dict, scale: str | None = None, max_runs: int | None = None) -> list[dict]:
    """Every run's settings: defaults (with the scale's overrides), times the grid, times random draws.

    The spec is validated whole and its runs counted first: above the `runs` limit (10,000) it
    needs `max_runs`. ValueError says what is wrong.
    """
    check_spec_data(data)
    check_run_count(count_runs(data, scale), max_runs)
    defaults, grid, search, draws, seed = _plan(data, scale)
    points = _grid_points(grid) or [{}]
    rng = random.Random(seed)
    runs = []
    for point in points:
        for _ in range(draws):
            drawn = {name: _draw(rule, rng) for name, rule in search.items()}
            runs.append({**defaults, **point, **drawn})
    _check_columns(runs)
    analysis = data.get("scales", {}).get(scale, {}).get("analysis") if scale else None
    if analysis:
        _check_arms(analysis, runs)
    return runs


def load_spec(path, scale: str | None = None, max_runs: int | None = None) -> SweepSpec:
    """Parse and validate a TOML sweep spec; ValueError with the reason for a bad one.

    `max_runs`: the most runs the spec may expand to, needed above the `runs` limit (10,000).
    A file read before and unchanged since (same size and modification time) is not parsed again;
    every call returns its own copy.
    """
    path = Path(path)
    try:
        status = path.stat()
    except FileNotFoundError:
        raise ValueError(f"{path}: no such sweep spec") from None
    except OSError as err:
        raise ValueError(f"{path}: cannot read it ({err.strerror or err})") from None
    check_int(f"{path}: the spec's size in bytes", status.st_size, "spec_bytes")
    spec = _parse_spec(str(path), status.st_mtime_ns, status.st_size, scale, max_runs)
    return copy.deepcopy(spec)


@functools.lru_cache(maxsize=64)
def _parse_spec(path: str, mtime_ns: int, size: int, scale: str | None, max_runs: int | None) -> SweepSpec:
    """`load_spec`'s parse, remembered by the file's identity (its path, modification time and size)."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such sweep spec") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not valid TOML ({err})") from None
    except RecursionError:
        raise ValueError(f"{path}: not valid TOML (it nests too deeply)") from None
    except OSError as err:
        raise ValueError(f"{path}: cannot read it ({err.strerror or err})") from None
    try:
        runs = expand(data, scale, max_runs)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    batch = data.get("batch")
    return SweepSpec(
        experiment=data["experiment"],
        runs=runs,
        name=data.get("name", Path(path).stem),
        source=path,
        description=data.get("description", ""),
        batch=tuple(batch) if batch is not None else None,
        scale=scale,
        analysis=data["scales"][scale].get("analysis") if scale else None,
        equivalence=data.get("equivalence"),
    )


def settings_key(settings: dict, leave_out: set[str]) -> str:
    """A run's settings without `leave_out`, as canonical JSON: equal for runs that differ only there (the runs of
    one job; with the paired settings left out, the arms of one seed)."""
    return json.dumps({k: v for k, v in settings.items() if k not in leave_out}, sort_keys=True)


def jobs(runs: Iterable[dict], batch: Iterable[str] = ("seed",), paired: Iterable[str] = ()) -> list[list[dict]]:
    """Runs grouped into jobs: runs whose settings differ only in the `batch` fields share a job, at
    most `batch_models` of them when the runs set it (a job is the unit that is recorded when it ends,
    so small jobs let an interrupted sweep keep more of its work). With `paired` (the settings in which
    the arms of one seed differ; they must be batch fields), the runs that differ only in those sit
    side by side in one job, never split (a pair larger than `batch_models` is a job of its own)."""
    batch, paired = set(batch) | set(paired), set(paired)
    groups: dict[str, dict[str, list[dict]]] = {}
    for settings in runs:
        group = groups.setdefault(settings_key(settings, batch), {})
        group.setdefault(settings_key(settings, paired), []).append(settings)
    found = []
    for group in groups.values():
        units = list(group.values())
        size = units[0][0].get("batch_models") or sum(len(u) for u in units)
        job: list[dict] = []
        for unit in units:
            if job and len(job) + len(unit) > size:
                found.append(job)
                job = []
            job = job + unit
        found.append(job)
    return found


# ----------------------------------------------------------------------------- execution
# A job function takes (experiment, list of run settings, out dir) and returns one result per run:
# {"metrics": {...}, "history": [{...}, ...]} or {"error": "...", "traceback": "..."}.

JobFunction = Callable[[str, list[dict], str], list[dict]]


def _record(out: Path, settings: dict, result: dict, wall_s: float, spec_hash: str | None = None,
            cpu_s: float | None = None) -> None:
    rid = run_id(settings)
    record = {
        "run_id": rid,
        "settings": settings,
        "status": "failed" if "error" in result else "finished",
        "error": result.get("error"),
        "traceback": result.get("traceback"),
        "metrics": result.get("metrics", {}),
        "history": result.get("history", []),
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        "spec_hash": spec_hash,
    }
    write_atomic(out / "runs" / f"{rid}.json", json.dumps(record, default=float).encode())


def finished_ids(out: Path) -> set[str]:
    """Ids of the runs in `out` that finished (failed runs are not finished: they are retried)."""
    done = set()
    for path in (out / "runs").glob("*.json"):
        try:
            if json.loads(path.read_text())["status"] == "finished":
                done.add(path.stem)
        except (json.JSONDecodeError, KeyError, OSError):
            continue
    return done


def failure(err: Exception) -> dict:
    """The result of a run that failed with `err` (call it in the `except` block: it keeps the traceback)."""
    return {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}


def _guarded(job_fn: JobFunction, experiment: str, job: list[dict], out: str):
    """Run a job in a worker; a crash becomes an error result for each of its runs. Returns the results, and the
    job's wall time and CPU time (of every thread of the process that ran it) per run."""
    start, cpu = time.perf_counter(), time.process_time()
    try:
        results = job_fn(experiment, job, out)
    except Exception as err:  # a failing run must not stop the sweep
        results = [failure(err) for _ in job]
    size = max(len(job), 1)
    return results, (time.perf_counter() - start) / size, (time.process_time() - cpu) / size


@contextmanager
def _sigterm_as_exit():
    """In the main thread: SIGTERM raises SystemExit(143), so a sweep stops as on Ctrl-C (its `finally`
    blocks end the workers) instead of dying with its workers left running."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, _frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def run_sweep(
    spec: SweepSpec,
    out,
    job_fn: JobFunction,
    executor: str = "local",
    workers: int = 1,
    address: str | None = None,
    log=sys.stderr,
    batch: Iterable[str] = ("seed",),
    threads: int | None = None,
    order: Callable[[dict], tuple] | None = None,
    deadline: float | None = None,
    device: str | None = None,
) -> pd.DataFrame:
    """Run every unfinished run of the spec and return the runs table (also written to `out`).

    `batch`: the settings that may differ between the runs of one job (`jobs`); `threads`: torch
    threads per local worker process (default: the CPU count divided by `workers`), and of this
    process when it runs the jobs itself (`workers` = 1); `order`: a key of a run's settings, the jobs
    start in the order of their runs' smallest key (a sized design's rank: `sensviz.confirm.order`);
    `deadline` (a `time.monotonic()` value): no job starts that would end after it, were it as long as the
    longest so far (the first always starts); `device` (a `device` label of the rows this process will
    write): refuse a folder whose rows were computed on another kind of device (`check_device`).
    """
    out = Path(out)
    check_folder(out, spec)
    if device is not None:
        check_device(out, device)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    (out / "checkpoints").mkdir(exist_ok=True)
    write_identity(out, spec)
    restore_records(out, spec)
    ids = {run_id(s) for s in spec.runs}
    done = finished_ids(out)
    todo = [s for s in spec.runs if run_id(s) not in done]
    paired = (spec.analysis or {}).get("paired", ())
    pending = jobs(todo, batch, paired)
    if order is not None:
        pending.sort(key=lambda job: min(order(s) for s in job))
    print(f"sweep {spec.name}: {len(spec.runs)} runs, {len(spec.runs) - len(todo)} already finished, "
          f"{len(todo)} to run in {len(pending)} jobs ({executor}, {workers} workers)", file=log, flush=True)
    completed = 0
    cap = ((spec.analysis or {}).get("stop") or {}).get("cpu_hours")
    longest = 0.0

    def collect(job: list[dict], results: list[dict], wall_s: float, cpu_s: float) -> None:
        nonlocal completed, longest
        longest = max(longest, wall_s * len(job))
        for settings, result in zip(job, results):
            _record(out, settings, result, wall_s, spec.hash, cpu_s)
            completed += 1
            status = f"FAILED: {result['error']}" if "error" in result else "ok"
            print(f"[{completed}/{len(todo)}] {run_id(settings)} {_short(settings)} {status}", file=log, flush=True)
        table = write_tables(out, ids)  # after every job: the tables of an interrupted sweep hold what finished
        if cap is not None and spent_hours(table) >= cap:
            raise _StopRule(spent_hours(table))
        if deadline is not None and time.monotonic() + longest > deadline:
            print(f"sweep {spec.name}: stopped at its deadline (the next job, as long as the longest so far, "
                  f"{longest:.0f} s, would end after it)", file=log, flush=True)
            raise _StopRule(spent_hours(table))

    with _sigterm_as_exit():
        if cap is not None and spent_hours(write_tables(out, ids)) >= cap:
            pending = []
        run = functools.partial(_guarded, job_fn, spec.experiment, out=str(out))
        with suppress(_StopRule):  # the stop rule's CPU-hours are spent: no further job starts
            make(executor, workers=workers, threads=threads, address=address).run_each(run, pending,
                                                                                      lambda job, done: collect(job, *done))
        table = write_tables(out, ids)
        if cap is not None and spent_hours(table) >= cap:
            print(f"sweep {spec.name}: stopped by its stop rule, {spent_hours(table):.1f} CPU-hours spent "
                  f"(at most {cap:g}): {(spec.analysis['stop'] or {}).get('rule', '')}", file=log, flush=True)
        return table


class _StopRule(Exception):
    """Raised from a finished job's collection when the sweep's CPU-hours reach its stop rule's, or its deadline
    leaves no time for another job."""


def device_kind(label: str) -> str:
    """What an arm may not mix (`check_device`): "cpu" for any CPU, else the device with its name ("cuda (NVIDIA
    H100 80GB HBM3)"), without torch's version. Rows of different CPUs may share an arm: the arms of one seed are
    paired inside one job, and seeds are independent units wherever they ran."""
    kind, _, rest = label.partition(" (")
    return kind if kind == "cpu" else f"{kind} ({rest.split(';')[0].rstrip(')')})"


def check_device(out, device: str) -> None:
    """Raise ValueError (one line) when the folder's rows were computed on another kind of device than `device`
    (`device_kind`): an arm refuses to mix devices."""
    path = Path(out) / "runs.parquet"
    if not path.is_file():
        return
    table = pd.read_parquet(path)
    held = {device_kind(str(label)) for label in table.get("device", pd.Series(dtype=str)).dropna()}
    other = held - {device_kind(device)}
    if other:
        raise ValueError(f"{out} holds rows computed on {', '.join(sorted(other))}; this process computes on "
                         f"{device_kind(device)}: an arm does not mix devices; give another --out")


def spent_hours(table: pd.DataFrame) -> float:
    """The CPU-hours a sweep's rows took: the sum of their `cpu_s` (a job's CPU time over its runs), over 3,600; a
    row written before `cpu_s` was recorded counts its `wall_s` (a job's wall time over its runs)."""
    if "wall_s" not in table:
        return 0.0
    seconds = table["cpu_s"].fillna(table["wall_s"]) if "cpu_s" in table else table["wall_s"]
    return float(seconds.sum()) / 3600


def _held(out: Path) -> tuple[set[str], set[str]]:
    """The run ids of the folder's runs table and of its run records."""
    table = set(pd.read_parquet(out / "runs.parquet", columns=["run_id"])["run_id"]) if (out / "runs.parquet").is_file() \
        else set()
    return table, {path.stem for path in (out / "runs").glob("*.json")}


def check_folder(out, spec: SweepSpec) -> None:
    """Raise ValueError (one line) when `out` holds results of another sweep than `spec` (module docstring)."""
    out = Path(out)
    table, records = _held(out)
    if not table and not records:
        return
    try:
        identity = json.loads((out / "spec.json").read_text())
    except (OSError, json.JSONDecodeError):
        raise ValueError(f"{out} holds sweep results but no readable identity (spec.json); give another --out") from None
    where = f"{out} holds results of"
    if identity.get("experiment") != spec.experiment:
        raise ValueError(f"{where} the experiment '{identity.get('experiment')}', not '{spec.experiment}'; give another --out")
    if identity.get("scale") != spec.scale:
        raise ValueError(f"{where} the scale '{identity.get('scale') or 'quick'}', not '{spec.scale or 'quick'}'; "
                         "give another --out")
    held = identity.get("spec_hash")
    if held is not None and held != spec.hash:
        raise ValueError(f"{where} another spec (hash {held[:12]}, this one {spec.hash[:12]}): a changed grid, "
                         "settings or analysis is another sweep; give another --out")
    if held is None and not table <= {run_id(s) for s in spec.runs}:
        raise ValueError(f"{where} {len(table - {run_id(s) for s in spec.runs})} runs that are not runs of this spec; "
                         "give another --out")


def shown_source(source: str) -> str:
    """A spec's path as a sweep folder records it (pages show it): a relative path within the folder it ran
    from as given (`experiments/length_scaling.toml`), else only its file name (no path of the machine)."""
    path = Path(source)
    return source if not path.is_absolute() and ".." not in path.parts else path.name


def write_identity(out, spec: SweepSpec) -> None:
    """Write `out/spec.json`: the spec's experiment, name, source (`shown_source`), scale, description and hash."""
    identity = {"experiment": spec.experiment, "name": spec.name, "source": shown_source(spec.source), "scale": spec.scale,
                "description": spec.description, "spec_hash": spec.hash}
    write_atomic(Path(out) / "spec.json", (json.dumps(identity, indent=2) + "\n").encode())


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


def _present(row: dict) -> dict:
    return {k: _plain(v) for k, v in row.items() if not (np.isscalar(v) and pd.isna(v)) and v is not None}


def restore_records(out, spec: SweepSpec) -> int:
    """Rebuild the run records (`out/runs/ID.json`) of the runs table's rows of this spec that have
    none (a committed folder: its tables without `runs/`), so that resuming keeps them; returns how many."""
    out = Path(out)
    if not (out / "runs.parquet").is_file():
        return 0
    settings = {run_id(s): s for s in spec.runs}
    table = pd.read_parquet(out / "runs.parquet")
    missing = table[table["run_id"].isin(set(settings) - {p.stem for p in (out / "runs").glob("*.json")})]
    if missing.empty:
        return 0
    history = pd.read_parquet(out / "history.parquet") if (out / "history.parquet").is_file() else pd.DataFrame()
    steps = {rid: rows.drop(columns=["run_id"]) for rid, rows in history.groupby("run_id")} if len(history) else {}
    fixed = {"run_id", "status", "error", "wall_s", "cpu_s", "spec_hash"}
    for row in missing.to_dict("records"):
        rid = row["run_id"]
        values = _present(row)
        record = {"run_id": rid, "settings": settings[rid], "status": row["status"], "error": values.get("error"),
                  "traceback": None,  # a metric may share a setting's name (measure_inputs: the inputs used)
                  "metrics": {k: v for k, v in values.items()
                              if k not in fixed and (k not in settings[rid] or v != settings[rid][k])},
                  "history": [_present(r) for r in steps[rid].to_dict("records")] if rid in steps else [],
                  "wall_s": values.get("wall_s"), "cpu_s": values.get("cpu_s"), "spec_hash": values.get("spec_hash")}
        write_atomic(out / "runs" / f"{rid}.json", json.dumps(record, default=float).encode())
    return len(missing)


def _short(settings: dict) -> str:
    keys = ("task", "n", "arch", "d_model", "seed")
    return " ".join(f"{k}={settings[k]}" for k in keys if k in settings)


def write_tables(out, ids: set[str] | None = None) -> pd.DataFrame:
    """Gather `out/runs/*.json` into `runs.parquet` and `history.parquet`; return the runs table.

    `ids`: only these runs (the current spec's), so that records of another spec or scale run
    into the same folder earlier stay on disk (and are reused if asked for again) but out of
    the tables."""
    out = Path(out)
    rows, history = [], []
    for path in sorted((out / "runs").glob("*.json")):
        if ids is not None and path.stem not in ids:
            continue
        record = json.loads(path.read_text())
        rows.append({"run_id": record["run_id"], **record["settings"], "status": record["status"],
                     "error": record["error"], **record["metrics"], "wall_s": record["wall_s"], "cpu_s": record.get("cpu_s"),
                     "spec_hash": record.get("spec_hash")})
        history.extend({"run_id": record["run_id"], **step} for step in record["history"])
    runs = pd.DataFrame(rows)
    # history first, runs last: `read_results` keeps the history of the runs in the runs table
    for frame, name in ((pd.DataFrame(history), "history.parquet"), (runs, "runs.parquet")):
        write_atomic(out / name, lambda file, frame=frame: frame.to_parquet(file, index=False))  # never half a table
    return runs


def read_results(out) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """A finished sweep's runs table, history table and spec summary."""
    out = Path(out)
    if not (out / "runs.parquet").is_file():
        raise ValueError(f"{out}: not a sweep folder (no runs.parquet)")
    spec = json.loads((out / "spec.json").read_text()) if (out / "spec.json").is_file() else {}
    runs = pd.read_parquet(out / "runs.parquet")  # first: `write_tables` replaces it last
    history_path = out / "history.parquet"
    history = pd.read_parquet(history_path) if history_path.is_file() else pd.DataFrame()
    if len(history) and "run_id" in runs:  # a newer history (a sweep stopped, or running, between the two)
        history = history[history["run_id"].isin(runs["run_id"])].reset_index(drop=True)
    return runs, history, spec
