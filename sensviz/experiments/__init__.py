"""The paper's experiments as sweep jobs: train small transformers, then measure what each figure plots.

`run_job(experiment, runs, out)` is the job function of `sensviz.sweeps`: it trains the runs of a
job together where it can (`train_many`: seeds, tasks, learning rates and weight decays of one
architecture, size and training config share one vmapped run), measures every trained model,
writes each run's checkpoint to `OUT/checkpoints/<run_id>.safetensors`, and returns per run
`{"metrics": {...}, "history": [...]}` or `{"error": ..., "traceback": ...}`. A run whose settings
are invalid fails alone; the others go on. Each experiment is one `Experiment` entry of `REGISTRY`
(its job function, batch fields, defaults and own settings) plus its TOML in experiments/; its
figures (`sensviz.figures.FIGURES`) and fidelity claims (`sensviz.fidelity.SECTIONS`) are still
keyed by its name there. Experiments (paper/experiments.md):

- `length_scaling` (Fig. 1, 5-8): PARITY, MAJORITY, FIRST, MEAN over input lengths n; sharpness
  against n beside the theorem's lower bound
      lim_{rho->0} liminf_n L_{rho,n}(T) >= liminf_n as_n(T) / (2n) - L exp(-Omega(d));
- `tradeoff` (Fig. 2, 9, 10): the same runs over a random search of learning rate and weight
  decay; param_norm against log Blowup, with the bound C E[Blowup^2] >= as_n / sqrt(n log n) - H/n;
- `dynamics` (Fig. 3, 12-14): PARITY measured every `measure_every` steps on one fixed batch with
  the same noise draws and directions each time (`sensviz.monitor.MeasurementCallback`);
- `scratchpad` (Fig. 11): PARITY with `arch = "scratchpad"` (the encoder-decoder writing the
  running parity; its measured function is the last step) against the plain encoder;
- `generalization` (Fig. 4, 15): a random function at length n, trained on `train_size` fixed
  inputs until it fits; the learned truth table's as_n against random completions of the same
  training data (seeded by the run's seed), and each of the learned table and one completion
  retrained on the whole cube (a `table:` task) to measure its sharpness.

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
  LayerNorms of the max over positions of 1/std, Bessel-corrected, no eps).
- `param_norm`: L2 norm of every parameter except positional encodings.
- `converged`: the paper's filter, final evaluation MSE < 0.001 (scratchpad models: autoregressive
  accuracy > 0.999); figures keep converged runs and say how many they dropped. `converged_step`:
  the first evaluation that met the filter (that MSE and accuracy 1), and
  `steps_since_converged`: the steps trained after it (with `relax_steps`, that many).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path

import torch

from . import cube
from .analysis import cube_outputs
from .base import TracedModel
from .configs import build as build_settings
from .configs import check, setting, split
from .measure import RADIUS_FRACTIONS, Measurement, MeasureSettings, columns, default_quantities, measure
from .models import ModelSettings
from .monitor import MeasurementCallback
from .sweeps import failure, run_id
from .tasks import ZERO_ONE, Task, TruthTable, get_task
from .training import PER_MODEL_FIELDS, TrainConfig, TrainingData, TrainResult, _stream_seed, train_many

CONVERGED_MSE = 1e-3
"""The paper's convergence filter: final evaluation MSE below this."""
CONVERGED_AUTOREGRESSIVE = 0.999
"""The scratchpad figure's filter: autoregressive accuracy above this."""


@dataclass
class SweepSettings:
    """The settings of a sweep run that are neither the model, the training nor the measurement."""

    task: str | None = setting(None, "the task label (the generalization experiment: default random:seed=<seed>)")
    batch_models: int = setting(16, "at most this many models in one train_many run (memory)", limit="batch_models")
    radii: bool = setting(False, "also measure L_rho at several radii (sensviz.measure.RADIUS_FRACTIONS of rho)")

    def __post_init__(self):
        check(self)


@dataclass
class DynamicsSettings:
    measure_every: int = setting(100, "measure every this many steps", limit="train_steps")

    def __post_init__(self):
        check(self)


@dataclass
class GeneralizationSettings:
    completions: int = setting(16, "random completions of the training data whose as_n is compared",
                               limit="samples")
    retrain_steps: int = setting(3000, "steps of retraining the learned table and a completion on the whole cube",
                                 limit="train_steps")

    def __post_init__(self):
        check(self)


PARTS = {"sweep": SweepSettings, "model": ModelSettings, "train": TrainConfig, "measure": MeasureSettings}
"""The settings every experiment has, by part (a flat run dict is split among them)."""

SWEEP_DEFAULTS = {"steps": 2000, "batch_size": 256, "lr": 1e-3, "eval_interval": 250}
"""Where the experiments' quick training differs from `TrainConfig`'s paper defaults (d = 32 and
the other sizes are `ModelSettings`' own defaults)."""

TRAIN_TOGETHER = ("task",) + PER_MODEL_FIELDS
"""Settings that may differ between the models of one `train_many` run (at most `batch_models` of them)."""


@dataclass(frozen=True)
class Experiment:
    """One experiment as the sweeps run it: its job function for a batch of runs (`runner`), the
    settings that may differ between the runs of one sweep job (`batch_fields`, `sweeps.jobs`), its
    defaults on top of `SWEEP_DEFAULTS` and the parts' own, and its own settings (`extra`), if any."""

    name: str
    runner: Callable[[str, list, Path], list[dict]]
    batch_fields: tuple[str, ...]
    defaults: dict = field(default_factory=dict)
    extra: type | None = None


# ----------------------------------------------------------------------------- settings



def get_experiment(name: str) -> Experiment:
    """The registered experiment `name` (ValueError naming the known ones otherwise)."""
    if name not in REGISTRY:
        raise ValueError(f"unknown experiment '{name}'; use one of {', '.join(EXPERIMENTS)}")
    return REGISTRY[name]


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
    parts = _parts(experiment)
    values = {**SWEEP_DEFAULTS, **get_experiment(experiment).defaults, **settings}
    split_values = split(values, parts, experiment)
    built = {name: build_settings(parts[name], split_values[name], experiment) for name in parts}
    sweep, config = built["sweep"], built["train"]
    if experiment == "generalization":
        if config.train_size is None:
            raise ValueError("generalization: every run needs ['train_size']")
        label = sweep.task or f"random:seed={config.seed}"
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


def _alone(fn, *args) -> dict:
    """fn(*args), or the failure of that one run: a model that trained with the others but cannot
    be measured or saved fails alone."""
    try:
        return fn(*args)
    except Exception as err:
        return failure(err)


def _train(batch: list[Run], configs: list[TrainConfig] | None = None, callbacks=()) -> list[TrainResult]:
    return train_many([r.model for r in batch], [r.task for r in batch], configs or [r.config for r in batch], callbacks)


def _checkpoint(out: Path, run: Run, result: TrainResult, suffix: str = "") -> None:
    path = out / "checkpoints" / f"{run_id(run.settings)}{suffix}.safetensors"
    result.save(path, extra={"sweep": {"experiment": run.experiment, "settings": run.settings}}, with_time=False)


def converged_mse(config: TrainConfig) -> float:
    """The convergence filter's threshold on this run's evaluation MSE: `CONVERGED_MSE` on {0,1}
    targets (the paper's), four times that on ±1 targets (the same fit, on twice the scale)."""
    return CONVERGED_MSE * 4.0 / pm1_scale(config)


def converged_step(result: TrainResult) -> int | None:
    """The first evaluation step at which the run met the convergence filter: the trainer's own when it
    trained with early-stopping targets (`relax_steps` counts from it), else the first evaluation
    with evaluation MSE below `converged_mse` and (Boolean tasks) accuracy 1."""
    if result.config.target_accuracy is not None or result.config.target_loss is not None:
        return result.converged_step
    limit = converged_mse(result.config)
    fitted = [r["step"] for r in result.history
              if r["eval_loss"] < limit and (r.get("eval_accuracy") is None or r["eval_accuracy"] >= 1.0)]
    return fitted[0] if fitted else None


def _training_metrics(result: TrainResult) -> dict:
    final = result.final
    step = converged_step(result)
    return {"steps_trained": result.steps, "stop_reason": result.stop_reason, "train_seconds": result.wall_time,
            "eval_loss": final["eval_loss"], "eval_accuracy": final.get("eval_accuracy"),
            "converged": bool(final["eval_loss"] < converged_mse(result.config)),
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


# ----------------------------------------------------------------------------- the experiments


def _train_and_measure(experiment: str, batch: list[Run], out: Path) -> list[dict]:
    """length_scaling, tradeoff, scratchpad: train the batch together, then measure each model."""

    def one(run: Run, result: TrainResult) -> dict:
        _checkpoint(out, run, result)
        values = {**_training_metrics(result), **measure_run(run, result.model, run.task, run.config)}
        if result.model.multi_step:
            values["converged"] = bool(values["autoregressive_accuracy"] > CONVERGED_AUTOREGRESSIVE)
        return {"metrics": values, "history": result.history}

    return [_alone(one, run, result) for run, result in zip(batch, _train(batch))]


def _dynamics(experiment: str, batch: list[Run], out: Path) -> list[dict]:
    """PARITY measured every `measure_every` steps on a fixed batch, the same draws every time."""
    first = batch[0]
    monitor = MeasurementCallback(every=first.extra.measure_every, settings=first.measure,
                                  quantities=quantities(first, first.model))
    trained = _train(batch, callbacks=[monitor])
    frame = monitor.frame()

    def one(member: int, run: Run, result: TrainResult) -> dict:
        _checkpoint(out, run, result)
        scale = pm1_scale(run.config)
        rows = frame[frame["member"] == member].drop(columns=["member"]).sort_values("step")
        for name in ("sharpness", "sharpness_limit", "sharpness_proxy"):
            rows[f"{name}_pm1"] = scale * rows[name]
        rows["log_authors_blowup"] = rows["authors_blowup"].map(math.log)
        history = rows.to_dict("records")
        final = history[-1]
        peak = rows.loc[rows["sharpness_proxy_pm1"].idxmax()]
        values = {
            **_training_metrics(result),
            **{k: final[k] for k in ("param_norm", "avg_sensitivity", "blowup_mean", "log_blowup_mean",
                                     "authors_blowup", "sharpness_pm1", "sharpness_limit_pm1", "sharpness_proxy_pm1")},
            "pm1_scale": scale,
            "peak_sharpness_proxy_pm1": float(peak["sharpness_proxy_pm1"]),
            "peak_step": int(peak["step"]),
            "initial_sharpness_proxy_pm1": float(rows["sharpness_proxy_pm1"].iloc[0]),
        }
        return {"metrics": values, "history": history}

    return [_alone(one, member, run, result) for member, (run, result) in enumerate(zip(batch, trained))]


def completions(task: Task, n: int, train_set: torch.Tensor, count: int, seed: int) -> torch.Tensor:
    """`count` random functions that agree with `task` on the vertices `train_set` and are uniformly
    random elsewhere: `[count, 2**n]` in {0,1}, vertex order. Drawn from a stream of their own
    (`seed` hashed with "completions"), not the stream of `random:seed=<seed>` itself."""
    generator = torch.Generator().manual_seed(_stream_seed(seed, "completions"))
    tables = torch.randint(0, 2, (count, 2**n), generator=generator).float()
    tables[:, train_set] = task.values(n)[train_set]
    return tables


def _as_n(table01: torch.Tensor) -> float:
    return cube.analyze(2.0 * table01.double() - 1.0).avg_sensitivity


def _table_task(table01: torch.Tensor) -> TruthTable:
    return TruthTable(bits="".join("1" if v > 0.5 else "0" for v in table01.tolist()))


def _generalization(experiment: str, batch: list[Run], out: Path) -> list[dict]:
    """Fit a restricted training set, read the learned function, compare it with random completions,
    then retrain the learned table and one completion on the whole cube and measure their sharpness."""
    n, size = batch[0].config.n, batch[0].sweep.batch_models
    fitted = _train(batch)

    def compare(run: Run, result: TrainResult) -> dict:
        _checkpoint(out, run, result)
        table = run.config.encoding.decide(cube_outputs(result.model, n))  # [2**n] in {0,1}
        train_set = TrainingData(run.config).train_set
        options = completions(run.task, n, train_set, run.extra.completions, run.config.seed)
        as_options = torch.tensor([_as_n(t) for t in options])
        as_learned = _as_n(table)
        values = {
            **_training_metrics(result),
            "heldout_accuracy": result.final.get("heldout_accuracy"),
            "fits": bool(result.final["eval_accuracy"] == 1.0),
            "as_learned": as_learned,
            "as_target": _as_n(run.task.values(n)),
            "as_completion_mean": as_options.mean().item(),
            "as_completion_std": as_options.std().item() if len(as_options) > 1 else None,
            "as_completion_min": as_options.min().item(),
            "completions_more_sensitive": (as_options > as_learned).float().mean().item(),
            "as_completion_retrained": as_options[0].item(),
        }
        history = [{**record, "phase": "fit"} for record in result.history]
        return {"metrics": values, "history": history, "retrain": {"learned": table, "completion": options[0]}}

    results = [_alone(compare, run, result) for run, result in zip(batch, fitted)]
    # retrain the learned table and one completion of every run that got this far on the whole cube,
    # in batches of at most batch_models
    retrain = [(k, kind, _retraining(run, table))
               for k, (run, result) in enumerate(zip(batch, results)) if "retrain" in result
               for kind, table in result.pop("retrain").items()]
    for start in range(0, len(retrain), size):
        chunk = retrain[start : start + size]
        for (k, kind, again), result in zip(chunk, _train([r for _, _, r in chunk])):
            results[k] = _alone(_add_retrained, results[k], kind, again, result, out)
    return results


def _retraining(run: Run, table01: torch.Tensor) -> Run:
    """The run that retrains a truth table on the whole cube: a fresh model, `retrain_steps` steps."""
    config = replace(run.config, steps=run.extra.retrain_steps, train_size=None)
    model = run.model_settings.build(config.n, seed=config.seed)
    return replace(run, config=config, task=_table_task(table01), model=model)


def _add_retrained(found: dict, kind: str, again: Run, result: TrainResult, out: Path) -> dict:
    """A generalization run's result with one retrained table's checkpoint, metrics and history added."""
    if "error" in found:  # the other table of this run already failed
        return found
    _checkpoint(out, again, result, suffix=f"-{kind}")
    measured = {**_training_metrics(result), **measure_run(again, result.model, again.task, again.config)}
    found["metrics"].update({f"{kind}_{key}": value for key, value in measured.items()})
    found["history"] += [{**record, "phase": f"retrain_{kind}"} for record in result.history]
    return found


# ----------------------------------------------------------------------------- the registry


REGISTRY = {e.name: e for e in (
    Experiment("length_scaling", _train_and_measure, ("seed", "task")),
    Experiment("tradeoff", _train_and_measure, ("seed", "task", "lr", "weight_decay")),
    Experiment("dynamics", _dynamics, ("seed",), {"task": "parity", "measure_inputs": 256}, DynamicsSettings),
    Experiment("scratchpad", _train_and_measure, ("seed",), {"task": "parity"}),
    Experiment("generalization", _generalization, ("seed",),
               {"lr": 3e-3, "steps": 3000, "eval_interval": 100, "target_accuracy": 1.0, "target_loss": CONVERGED_MSE},
               GeneralizationSettings),
)}
"""Every experiment, registered once, in the order the README, the app and the report present them."""

EXPERIMENTS = tuple(REGISTRY)
"""The experiments' names, in order."""

BATCH_FIELDS = {name: e.batch_fields for name, e in REGISTRY.items()}
"""Per experiment, the settings that may differ between the runs of one sweep job (the CLI's `sweep`)."""
