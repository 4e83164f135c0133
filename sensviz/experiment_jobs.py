"""The experiments' sweep jobs: a run's settings validated and its model built (`prepare`), the runs of a job
trained together (`train_batch`), each trained model measured (`measure_run`, `metrics`) and saved, and the
convergence filter (`meets_filter`). `run_job(experiment, runs, out)` is the job function of `sensviz.sweeps`
(see `sensviz.experiments` for what a job returns and the metric conventions); it dispatches each batch to its
experiment's job (`Experiment.job`). This is the torch half of the experiments: the registry
(`sensviz.experiments`), which the results kit reads, stays torch-free, and reads these names from here on first
use.
"""

from __future__ import annotations

import math
import platform
from dataclasses import dataclass, fields, replace
from functools import cache
from pathlib import Path

import torch

from .base import TracedModel
from .blowup import STACKS
from .configs import build as build_settings
from .configs import split
from .convergence import CONVERGED_AUTOREGRESSIVE, CONVERGED_MSE
from .experiments import SWEEP_DEFAULTS, TRAIN_TOGETHER, SweepSettings, _parts, get_experiment
from .measure import RADIUS_FRACTIONS, Measurement, MeasureSettings, columns, default_quantities, measure
from .models import ModelSettings
from .sweeps import failure, run_id
from .tasks import ZERO_ONE, Task, get_task
from .training import TrainConfig, TrainResult, train_many


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
                found = get_experiment(experiment).job(experiment, list(batch), Path(out))
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
