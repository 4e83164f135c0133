"""The paper's experiments as sweep jobs: train small transformers, then measure what each figure plots.

`run_job(experiment, runs, out)` is the job function of `sensviz.sweeps`: it trains the runs of a
job together where it can (`train_many`: seeds, tasks, learning rates and weight decays of one
architecture, size and training config share one vmapped run), measures every trained model,
writes each run's checkpoint to `OUT/checkpoints/<run_id>.safetensors`, and returns per run
`{"metrics": {...}, "history": [...]}` or `{"error": ..., "traceback": ...}`. A run whose settings
are invalid fails alone; the others go on. That machinery needs torch and lives in `sensviz.experiment_jobs`
(its names, `JOB_NAMES`, read here as before, are imported on first use); this registry, its settings and
defaults (`sensviz.settings`) need no torch, so the results kit that reads them loads none.

Each experiment is one module of this package and its TOML in experiments/: the module's
`EXPERIMENT` (an `Experiment`) holds its job function (or its 'module:function' name), batch fields, defaults and
own settings, its figures (drawn with the primitives of `sensviz.figures`), its fidelity sections (written with the
claims and helpers of `sensviz.claims`) and, where a Lab chapter reads its shipped results, that chapter's
data (`LabData`). Nothing here imports the results loading or the pages above it (`sensviz.results`,
`sensviz.fidelity`, ...): they read this registry. `registry()` finds the modules the first time it is asked, in their `order`;
nothing else lists them. Adding an experiment is adding a module `<name>.py` with `EXPERIMENT` and
`experiments/<name>.toml`. The experiments (paper/experiments.md): `length_scaling` (Fig. 1, 5-8),
`tradeoff` (Fig. 2, 9, 10), `dynamics` (Fig. 3, 12-14), `scratchpad` (Fig. 11) and
`generalization` (Fig. 4, 15); each module's docstring says what it runs.

Metric conventions (every figure's):
- `sharpness_proxy`: the paper's loss-space proxy, mean L(theta + Delta) - L(theta) with Delta ~
  N(0, eps^2) per non-positional coordinate (eps = `proxy_eps` = 0.02); `sharpness_proxy_pm1` is
  it on the ±1 scale, x4 for MSE on {0,1} targets (what the paper plots).
- `sharpness`: our L_rho (uniform directions on the sphere of radius rho; rho defaults to
  eps sqrt(P), the proxy's typical |Delta|), `sharpness_limit` its exact small-rho limit
  lim L_rho / rho^2 = E_x |grad T(x)|^2 / P; `_pm1` columns on the ±1 scale (x4 for {0,1} targets).
- `bound` = as_n(T) / (2n), with as_n(T) of the model's real output on the ±1 scale (influence form).
- `blowup_*`: ours (N = 1/sqrt(var + eps), tau = max_w (1 + N), Blowup = prod_k tau);
  `authors_blowup`: the published code's plotted aggregate (mean over inputs of the product over
  LayerNorms of the max over positions of 1/std, Bessel-corrected, no eps); for the scratchpad model
  `authors_encoder_blowup` and `authors_decoder_blowup`, the same per stack over its layers' norm1
  and norm2, as the authors' Fig. 11 plots it (`log_*`: their logs).
- `param_norm`: L2 norm of every parameter except positional encodings.
- `converged` ("kept"): the final evaluation meets the convergence filter (`meets_filter`: MSE < 0.001
  and, Boolean tasks, accuracy 1; scratchpad models: autoregressive accuracy > 0.999); figures keep
  converged runs and say how many they dropped. `converged_step`: the first evaluation that met the
  same filter, and `steps_since_converged`: the steps trained after it. `relaxed`: the run stopped
  `relax_steps` after its early-stopping targets were first met (with `FILTER_TARGETS`, the filter).
- `device`: where the numbers were computed (`device_label`).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from functools import cache
from pathlib import Path

from ..configs import check, setting
from ..files import data_dir
from ..settings import PER_MEMBER_STOPPING, PER_MODEL_FIELDS, MeasureSettings, ModelSettings, TrainConfig
from ..settings import named as _named

PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def results_roots() -> list[Path]:
    """The folders sweep results are read from: $SENSVIZ_RESULTS_DIRS (os.pathsep-separated), else the
    shipped results `experiments/results/` and `$SENSVIZ_DATA_DIR/sweeps`. The first holds the shipped
    results (`<scale>/<experiment>/`): the app's Experiments page opens sweeps under any of them."""
    configured = os.environ.get("SENSVIZ_RESULTS_DIRS")
    if configured:
        return [Path(part) for part in configured.split(os.pathsep) if part]
    return [PACKAGE_ROOT / "experiments" / "results", data_dir() / "sweeps"]


def results_dir() -> Path:
    """Where the shipped sweep results live: the first of `results_roots()`."""
    return results_roots()[0]


@dataclass
class SweepSettings:
    """The settings of a sweep run that are neither the model, the training nor the measurement."""

    task: str | None = setting(None, "the task label (the generalization experiment: default random:seed=<seed>)")
    batch_models: int = setting(16, "at most this many models in one train_many run (memory)", limit="batch_models")
    radii: bool = setting(False, "also measure L_rho at several radii (sensviz.measure.RADIUS_FRACTIONS of rho)")

    def __post_init__(self):
        check(self)


PARTS = {"sweep": SweepSettings, "model": ModelSettings, "train": TrainConfig, "measure": MeasureSettings}
"""The settings every experiment has, by part (a flat run dict is split among them)."""

SWEEP_DEFAULTS = {"steps": 2000, "batch_size": 256, "lr": 1e-3, "eval_interval": 250}
"""Where the experiments' quick training differs from `TrainConfig`'s paper defaults (d = 32 and
the other sizes are `ModelSettings`' own defaults)."""

TRAIN_TOGETHER = ("task",) + PER_MODEL_FIELDS + PER_MEMBER_STOPPING
"""Settings that may differ between the models of one `train_many` run (at most `batch_models` of them): the
arms of one seed (their steps, targets and relaxation) train together, paired."""


@dataclass(frozen=True)
class LabData:
    """What a Lab chapter takes from an experiment's shipped results, as two functions named "module:function"
    (they read the results with the analyses above this registry, which it never imports): `folder(results)`
    -> (the sweep folder it reads, its scale; cheap: the Lab hashes its runs table) and `measure(results)` ->
    (numbers, tables) it draws."""

    folder_of: str
    measure_of: str

    def folder(self, results: Path) -> tuple[Path, str]:
        return _named(self.folder_of)(results)

    def measure(self, results: Path) -> tuple[dict, dict]:
        return _named(self.measure_of)(results)




@dataclass(frozen=True)
class Experiment:
    """One experiment, everything about it in one place (its module's `EXPERIMENT`):

    - as the sweeps run it: its job function for a batch of runs (`runner`), the settings that may
      differ between the runs of one sweep job (`batch_fields`, `sweeps.jobs`), its defaults on top
      of `SWEEP_DEFAULTS` and the parts' own, its own settings (`extra`), if any, and `task`, which
      picks a run's task label from its sweep and training settings (None: every run names its task);
    - as the results are read: `figures(runs, history)` -> `sensviz.figures.ExperimentFigure`s,
      `sections`, each `section(tables)` -> (markdown, claims) of the fidelity page
      (`sensviz.claims.Tables`), and `lab`, the data a Lab chapter takes from its results, if any;
    - `order`: where it comes in the README, the app, the report and the fidelity page."""

    name: str
    order: int
    runner: Callable[[str, list, Path], list[dict]] | str  # or "module:function", imported when a job runs
    batch_fields: tuple[str, ...]
    figures: Callable
    sections: tuple[Callable, ...]
    defaults: dict = field(default_factory=dict)
    extra: type | None = None
    task: Callable[[SweepSettings, TrainConfig], str] | None = None
    lab: LabData | None = None

    @property
    def job(self) -> Callable[[str, list, Path], list[dict]]:
        """The job function (`runner`, imported by its "module:function" name where it is one)."""
        return _named(self.runner) if isinstance(self.runner, str) else self.runner


# ----------------------------------------------------------------------------- the registry


@cache
def registry() -> dict[str, Experiment]:
    """Every experiment, by name, in its `order`: the `EXPERIMENT` of each module of this package
    (a module `<name>.py` registers the experiment `<name>`), found once."""
    found: dict[str, Experiment] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        experiment = getattr(importlib.import_module(f"{__name__}.{info.name}"), "EXPERIMENT", None)
        if experiment is None:
            continue
        if not isinstance(experiment, Experiment) or experiment.name != info.name:
            raise TypeError(f"{__name__}.{info.name}: EXPERIMENT must be an Experiment named '{info.name}'")
        found[experiment.name] = experiment
    return dict(sorted(found.items(), key=lambda item: (item[1].order, item[0])))


JOBS = "sensviz.experiment_jobs"
"""The module of the job machinery (torch): a run prepared, a batch trained together, each model measured."""
TRAIN_AND_MEASURE = f"{JOBS}:train_and_measure"
"""The job of length_scaling, tradeoff and scratchpad, by name: train the batch together, then measure each model."""
JOB_NAMES = ("Run", "prepare", "check_spec", "run_job", "alone", "train_batch", "save_checkpoint", "converged_mse",
             "meets_filter", "FILTER_TARGETS", "converged_step", "device_label", "processor_name", "training_metrics",
             "pm1_scale", "quantities", "metrics", "measure_run", "train_and_measure", "train_many")
"""The names of `JOBS` read here as before it moved out of this package (imported on first use)."""


def __getattr__(name: str):
    """`REGISTRY`, `EXPERIMENTS` (the names, in order) and `BATCH_FIELDS` (per experiment, the settings
    that may differ between the runs of one sweep job): views of `registry()`, read when first used
    (the experiment modules are imported by `registry()`, not by this module); and the job machinery's
    names (`JOB_NAMES`), from `JOBS` (torch), imported on first use."""
    if name in JOB_NAMES:
        return getattr(importlib.import_module(JOBS), name)
    if name == "REGISTRY":
        return registry()
    if name == "EXPERIMENTS":
        return tuple(registry())
    if name == "BATCH_FIELDS":
        return {key: e.batch_fields for key, e in registry().items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_experiment(name: str) -> Experiment:
    """The registered experiment `name` (ValueError naming the known ones otherwise)."""
    found = registry()
    if name not in found:
        raise ValueError(f"unknown experiment '{name}'; use one of {', '.join(found)}")
    return found[name]


# ----------------------------------------------------------------------------- settings


def _parts(experiment: str) -> dict[str, type]:
    extra = get_experiment(experiment).extra
    return {**PARTS, **({"extra": extra} if extra else {})}


def defaults(experiment: str) -> dict:
    """Every setting of an experiment with its default (`None` where a run must give it)."""
    values = {f.name: f.default for part in _parts(experiment).values() for f in fields(part)
              if f.default is not MISSING}
    return {**values, **SWEEP_DEFAULTS, **get_experiment(experiment).defaults}
