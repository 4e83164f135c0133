"""The paper's experiments as sweep jobs: train small transformers, then measure what each figure plots.

`run_job(experiment, runs, out)` is the job function of `sensviz.sweeps`: it trains the runs of a
job together where it can (`train_many`: seeds, tasks, learning rates and weight decays of one
architecture, size and training config share one vmapped run), measures every trained model,
writes each run's checkpoint to `OUT/checkpoints/<run_id>.safetensors`, and returns per run
`{"metrics": {...}, "history": [...]}` or `{"error": ..., "traceback": ...}`. A run whose settings
are invalid fails alone; the others go on.

Each experiment is one module of this package and its TOML in experiments/: the module's
`EXPERIMENT` (an `Experiment`) holds its job function, batch fields, defaults and own settings, its
figures (drawn with the primitives of `sensviz.figures`), its fidelity sections (written with the
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
import math
import os
import pkgutil
import platform
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields, replace
from functools import cache
from pathlib import Path

import torch

from sensviz.files import data_dir

from ..base import TracedModel
from ..blowup import STACKS
from ..configs import build as build_settings
from ..configs import check, setting, split
from ..convergence import CONVERGED_AUTOREGRESSIVE, CONVERGED_MSE
from ..measure import RADIUS_FRACTIONS, Measurement, MeasureSettings, columns, default_quantities, measure
from ..models import ModelSettings
from ..sweeps import failure, run_id
from ..tasks import ZERO_ONE, Task, get_task
from ..training import PER_MEMBER_STOPPING, PER_MODEL_FIELDS, TrainConfig, TrainResult, train_many

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


def _named(name: str) -> Callable:
    """The function a "module:function" name names."""
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


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
    runner: Callable[[str, list, Path], list[dict]]
    batch_fields: tuple[str, ...]
    figures: Callable
    sections: tuple[Callable, ...]
    defaults: dict = field(default_factory=dict)
    extra: type | None = None
    task: Callable[[SweepSettings, TrainConfig], str] | None = None
    lab: LabData | None = None


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


def __getattr__(name: str):
    """`REGISTRY`, `EXPERIMENTS` (the names, in order) and `BATCH_FIELDS` (per experiment, the settings
    that may differ between the runs of one sweep job): views of `registry()`, read when first used
    (the experiment modules are imported by `registry()`, not by this module)."""
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


@dataclass
class Run:
    """One run, validated and ready to train: its settings as given, each part built, the task, the model."""

    experiment: str
    settings: dict  # as in the spec (its run_id is a hash of these)
    sweep: SweepSettings
    model_settings: ModelSettings
    config: TrainConfig
    measure: MeasureSettings
    extra: object | None  # the experiment's own settings (`Experiment.extra`), if any
    task: Task
    model: TracedModel | None = None  # built by `prepare(..., build=True)`

    def flat(self) -> dict:
        """Every setting with its default filled in, as one flat dict."""
        parts = (self.sweep, self.model_settings, self.config, self.measure) + ((self.extra,) if self.extra else ())
        return {f.name: getattr(part, f.name) for part in parts for f in fields(part)}


def defaults(experiment: str) -> dict:
    """Every setting of an experiment with its default (`None` where a run must give it)."""
    values = {f.name: f.default for part in _parts(experiment).values() for f in fields(part)
              if f.default is not MISSING}
    return {**values, **SWEEP_DEFAULTS, **get_experiment(experiment).defaults}


def prepare(experiment: str, settings: dict, build: bool = True) -> Run:
    """Split and validate a run's settings (unknown, missing or invalid ones raise ValueError with the
    reason) and, with `build`, make its model: the one function the sweeps, the CLI and the app use."""
    found = get_experiment(experiment)
    parts = _parts(experiment)
    values = {**SWEEP_DEFAULTS, **found.defaults, **settings}
    split_values = split(values, parts, experiment)
    built = {name: build_settings(parts[name], split_values[name], experiment) for name in parts}
    sweep, config = built["sweep"], built["train"]
    if found.task is not None:
        label = found.task(sweep, config)
    elif sweep.task is None:
        raise ValueError(f"{experiment}: every run needs ['task']")
    else:
        label = sweep.task
    run = Run(experiment, settings, sweep, built["model"], config, built["measure"], built.get("extra"),
              get_task(label))
    run.task.check_n(config.n)
    if build:
        run.model = run.model_settings.build(config.n, seed=config.seed)
        config.check(run.model, run.task)
    return run


def check_spec(experiment: str, runs: list[dict]) -> None:
    """Raise ValueError when a run of the spec names an unknown experiment or setting, misses one,
    or gives one an invalid value. Models are built on the `meta` device (shapes, no memory), once
    per distinct architecture, size, length and task, so that a config that cannot work (heads that
    do not divide d_model, a scratchpad on another task) stops the sweep before it starts."""
    seen = set()
    for settings in runs:
        run = prepare(experiment, settings, build=False)
        key = (repr(run.model_settings), run.config.n, run.config.min_n, run.task.label)
        if key not in seen:
            seen.add(key)
            with torch.device("meta"):
                model = run.model_settings.build(run.config.n)
            run.config.check(model, run.task)


# ----------------------------------------------------------------------------- the job function


def run_job(experiment: str, runs: list[dict], out: str) -> list[dict]:
    """The sweeps job function: one result per run, in order (see the module docstring)."""
    results: list[dict | None] = [None] * len(runs)
    prepared: list[tuple[int, Run]] = []
    for i, settings in enumerate(runs):
        try:
            prepared.append((i, prepare(experiment, settings)))
        except Exception as err:  # a run that cannot start fails alone
            results[i] = failure(err)
    groups: dict[str, list[tuple[int, Run]]] = {}
    for i, run in prepared:
        key = repr(sorted((k, v) for k, v in run.flat().items() if k not in TRAIN_TOGETHER))
        groups.setdefault(key, []).append((i, run))
    for group in groups.values():
        size = group[0][1].sweep.batch_models
        for start in range(0, len(group), size):
            indices, batch = zip(*group[start : start + size])
            try:
                found = get_experiment(experiment).runner(experiment, list(batch), Path(out))
            except Exception as err:  # a batch that fails to train does not stop the others
                found = [failure(err) for _ in batch]
            for i, result in zip(indices, found):
                results[i] = result
    return results


def alone(fn, *args) -> dict:
    """fn(*args), or the failure of that one run: a model that trained with the others but cannot
    be measured or saved fails alone."""
    try:
        return fn(*args)
    except Exception as err:
        return failure(err)


def train_batch(batch: list[Run], configs: list[TrainConfig] | None = None, callbacks=()) -> list[TrainResult]:
    """Train the models of a batch of runs together (`train_many`), with their own configs unless given."""
    return train_many([r.model for r in batch], [r.task for r in batch], configs or [r.config for r in batch], callbacks)


def save_checkpoint(out: Path, run: Run, result: TrainResult, suffix: str = "") -> None:
    """Write a trained run's checkpoint to `out/checkpoints/<run_id><suffix>.safetensors`."""
    path = out / "checkpoints" / f"{run_id(run.settings)}{suffix}.safetensors"
    result.save(path, extra={"sweep": {"experiment": run.experiment, "settings": run.settings}}, with_time=False)


def converged_mse(config: TrainConfig) -> float:
    """The convergence filter's threshold on this run's evaluation MSE: `CONVERGED_MSE` on {0,1}
    targets (the paper's), four times that on ±1 targets (the same fit, on twice the scale)."""
    return CONVERGED_MSE * 4.0 / pm1_scale(config)


def meets_filter(record: dict, config: TrainConfig) -> bool:
    """The convergence filter, the one definition of "kept" and of where relaxing starts: an evaluation
    with MSE below `converged_mse` and (Boolean tasks) accuracy 1. A run is kept when its final evaluation
    meets it; `FILTER_TARGETS` make the trainer's early-stopping targets the same rule (`relax_steps`
    then count from the first evaluation that meets it)."""
    accuracy = record.get("eval_accuracy")
    return bool(record["eval_loss"] < converged_mse(config) and (accuracy is None or accuracy >= 1.0))


FILTER_TARGETS = {"target_accuracy": 1.0, "target_loss": CONVERGED_MSE}
"""The trainer's early-stopping targets that are `meets_filter` on {0,1} targets (a Boolean task; MEAN,
real-valued, takes `target_loss` alone)."""


def converged_step(result: TrainResult) -> int | None:
    """The first evaluation step at which the run met the convergence filter (`meets_filter`)."""
    return next((r["step"] for r in result.history if meets_filter(r, result.config)), None)


def device_label(device: torch.device) -> str:
    """Where a run's numbers were computed, as the runs table records it (`device`): the device type,
    and on a CPU the instruction set torch dispatches to and the processor's name (the last bits of a
    vmapped run differ between them), on a GPU its name; and torch's version. Two arms of one seed are
    paired only on one device, and an arm is not pooled across devices."""
    if device.type == "cuda":
        where = torch.cuda.get_device_name(device)
    else:
        where = f"{torch.backends.cpu.get_cpu_capability()}, {processor_name()}"
    return f"{device.type} ({where}; torch {torch.__version__})"


@cache
def processor_name() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux, else the platform's)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def training_metrics(result: TrainResult) -> dict:
    """The runs table's columns about the training itself: steps, stop reason, time, final evaluation, convergence."""
    final = result.final
    step = converged_step(result)
    return {"steps_trained": result.steps, "stop_reason": result.stop_reason, "train_seconds": result.wall_time,
            "eval_loss": final["eval_loss"], "eval_accuracy": final.get("eval_accuracy"),
            "converged": meets_filter(final, result.config), "relaxed": result.stop_reason == "relaxed",
            "device": device_label(result.model.device),
            "converged_step": step, "steps_since_converged": None if step is None else result.steps - step}


# ----------------------------------------------------------------------------- measurements


def pm1_scale(config: TrainConfig) -> float:
    """Factor from the output's scale to the ±1 scale, squared: 4 for {0,1} targets, else 1."""
    return 4.0 if config.encoding is ZERO_ONE else 1.0


def quantities(run: Run, model: TracedModel) -> tuple[str, ...]:
    """What a run measures: the default quantities, the small-rho limit, and the radii if asked."""
    return default_quantities(model) + ("limit",) * model.multi_step + ("radii",) * run.sweep.radii

def metrics(found: Measurement, config: TrainConfig) -> dict:
    """The runs table's columns for one measurement of a trained model: every measured quantity's columns
    (`sensviz.measure.columns`), and the figures' names and ±1-scaled forms of them (see the module docstring)."""
    n, scale = found.n, pm1_scale(config)
    s, b, h, p = found.sensitivity, found.blowup, found.sharpness, found.proxy
    values = {
        "n_params": found.n_params,
        **columns(found),
        "as_model": s.avg_sensitivity,
        "as_model_real": s.avg_sensitivity_real,
        "as_task": s.task_avg_sensitivity,
        "as_exact": s.exact,
        "bound": s.avg_sensitivity_real / (2 * n),
        "bound_task": s.task_avg_sensitivity / (2 * n),
        "pm1_scale": scale,
        "measure_inputs": found.inputs["n_inputs"],
        "measure_exact": found.inputs["kind"] == "cube",
        "decoder_steps": found.settings.decoder_steps,
        "sharpness_proxy_pm1": scale * p.value,
        "proxy_eps": p.eps,
        "proxy_rho": p.rho,
        "sharpness_pm1": scale * h.value,
        "sharpness_limit_pm1": scale * found.limit.value,
        "log_blowup_mean_sq": math.log(b.mean_sq),
        "log_authors_blowup": math.log(b.authors["maxs_prod"]),
        **{f"log_authors_{stack}_blowup": math.log(b.authors[f"{stack}_maxs_prod"])
           for stack in STACKS if f"{stack}_maxs_prod" in b.authors},
        "bound_rhs": found.tradeoff.bound_rhs if found.tradeoff is not None else None,
    }
    for fraction, r in zip(RADIUS_FRACTIONS, found.radii or ()):
        values.update({f"sharpness_pm1_x{fraction:g}": scale * r.value,
                       f"sharpness_pm1_x{fraction:g}_stderr": scale * r.stderr})
    if found.notes:
        values["notes"] = "; ".join(f"{k}: {v}" for k, v in found.notes.items())
    return values


def measure_run(run: Run, model: TracedModel, task: Task, config: TrainConfig) -> dict:
    """What the figures plot, for a trained model at its training length: `metrics` of its measurement,
    and for the scratchpad also the proxy of the last decoder step alone (`sharpness_proxy_last*`)."""
    found = measure(model, task, config.n, run.measure, quantities(run, model), config.encoding)
    values = metrics(found, config)
    if model.multi_step:
        last = measure(model, task, config.n, replace(run.measure, decoder_steps="last"), ("proxy",), config.encoding)
        values.update(sharpness_proxy_last=last.proxy.value, sharpness_proxy_last_pm1=pm1_scale(config) * last.proxy.value)
    return values


# ----------------------------------------------------------------------------- the shared job


def train_and_measure(experiment: str, batch: list[Run], out: Path) -> list[dict]:
    """The job of length_scaling, tradeoff and scratchpad: train the batch together, then measure each model."""

    def one(run: Run, result: TrainResult) -> dict:
        save_checkpoint(out, run, result)
        values = {**training_metrics(result), **measure_run(run, result.model, run.task, run.config)}
        if result.model.multi_step:
            values["converged"] = bool(values["autoregressive_accuracy"] > CONVERGED_AUTOREGRESSIVE)
        return {"metrics": values, "history": result.history}

    return [alone(one, run, result) for run, result in zip(batch, train_batch(batch))]
