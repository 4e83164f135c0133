"""The paper's experiments as sweep jobs: train small transformers, then measure what each figure plots.

`run_job(experiment, runs, out)` is the job function of `sensviz.sweeps`: it trains the runs of a
job together where it can (`train_many`: seeds, tasks, learning rates and weight decays of one
architecture, size and training config share one vmapped run), measures every trained model,
writes each run's checkpoint to `OUT/checkpoints/<run_id>.safetensors`, and returns per run
`{"metrics": {...}, "history": [...]}` or `{"error": ..., "traceback": ...}`. A run whose settings
are invalid fails alone; the others go on. Experiments (paper/experiments.md):

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
  accuracy > 0.999); figures keep converged runs and say how many they dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from . import cube
from .analysis import cube_outputs, inspect_model
from .blowup import authors_per_example, blowup_summary, tradeoff
from .losses import loss_for, targets
from .models import build_model
from .monitor import MeasurementCallback
from .scratchpad import ScratchpadTransformer, autoregressive_accuracy
from .sharpness import sharpness, sharpness_proxy
from .sweeps import failure, run_id
from .tasks import ZERO_ONE, Task, TruthTable, get_task
from .training import TrainConfig, TrainingData, TrainResult, _stream_seed, train_many
from .base import TracedModel

CONVERGED_MSE = 1e-3
"""The paper's convergence filter: final evaluation MSE below this."""
CONVERGED_AUTOREGRESSIVE = 0.999
"""The scratchpad figure's filter: autoregressive accuracy above this."""

TRAINING = {
    "arch": "encoder",
    "d_model": 32,
    "n_layers": 2,
    "n_heads": 2,
    "d_ff": 0,  # 0: d_model, the authors' choice
    "max_len": None,  # None: n
    "seed": 0,  # model initialisation and data stream
    "steps": 2000,
    "batch_size": 256,
    "lr": 1e-3,
    "weight_decay": 0.1,
    "pm1_targets": False,
    "eval_interval": 250,
    "eval_size": 4096,
    "target_accuracy": None,
    "target_loss": None,
    "device": None,
    "batch_models": 16,  # at most this many models in one train_many run (memory)
}
"""Settings of every experiment's training (TOML cannot write None: leave a key out for its default)."""

MEASURING = {
    "measure_inputs": 1024,  # the cube when 2**n <= this, else a seeded sample of this many
    "measure_seed": 0,  # the sample, the noise draws and the directions
    "exact_limit": 12,  # largest n whose cube is analysed exactly (as_n, Blowup)
    "proxy_eps": 0.02,
    "proxy_draws": 50,
    "rho": None,  # None: proxy_eps * sqrt(P)
    "directions": 32,
}
"""Settings of the final measurements."""

REQUIRED = {"task": None, "n": None}

DEFAULTS = {
    "length_scaling": {**TRAINING, **MEASURING, **REQUIRED},
    "tradeoff": {**TRAINING, **MEASURING, **REQUIRED},
    "dynamics": {**TRAINING, **MEASURING, **REQUIRED, "task": "parity", "measure_every": 100, "measure_inputs": 256},
    "scratchpad": {**TRAINING, **MEASURING, **REQUIRED, "task": "parity"},
    "generalization": {
        **TRAINING, **MEASURING, "n": None,
        "task": None,  # None: the random function random:seed=<seed>
        "train_size": None, "lr": 3e-3, "steps": 3000, "eval_interval": 100, "target_accuracy": 1.0,
        "target_loss": CONVERGED_MSE, "completions": 16, "retrain_steps": 3000,
    },
}
"""Every setting each experiment knows, with its default; `None` for `n`/`task` means required."""

BATCH_FIELDS = {
    "length_scaling": ("seed", "task"),
    "tradeoff": ("seed", "task", "lr", "weight_decay"),
    "scratchpad": ("seed",),
    "dynamics": ("seed",),
    "generalization": ("seed",),
}
"""Per experiment, the settings that may differ between the runs of one sweep job (`sweeps.jobs`)."""

TRAIN_TOGETHER = ("seed", "task", "lr", "weight_decay")
"""Settings that may differ between the models of one `train_many` run (at most `batch_models` of them)."""

EXPERIMENTS = tuple(DEFAULTS)
"""The experiments in the order the README, the app and the report present them."""


# ----------------------------------------------------------------------------- settings


def resolve(experiment: str, settings: dict) -> dict:
    """The run's settings with the experiment's defaults filled in; ValueError for unknown or missing ones."""
    if experiment not in DEFAULTS:
        raise ValueError(f"unknown experiment '{experiment}'; use one of {', '.join(EXPERIMENTS)}")
    defaults = DEFAULTS[experiment]
    unknown = sorted(set(settings) - set(defaults))
    if unknown:
        raise ValueError(f"{experiment}: unknown settings {unknown}; known: {sorted(defaults)}")
    resolved = {**defaults, **settings}
    required = ["n"] + (["task"] if experiment != "generalization" else []) + (
        ["train_size"] if experiment == "generalization" else [])
    missing = [key for key in required if resolved[key] is None]
    if missing:
        raise ValueError(f"{experiment}: every run needs {missing}")
    return resolved


def check_spec(experiment: str, runs: list[dict]) -> None:
    """Raise ValueError when the spec names an unknown experiment, an unknown setting or misses one."""
    for settings in runs:
        resolve(experiment, settings)


@dataclass
class Run:
    """One run, ready to train: its settings (defaults filled in), model, task and training config."""

    settings: dict  # as in the spec
    resolved: dict  # with the experiment's defaults
    model: TracedModel
    task: Task
    config: TrainConfig


def _train_config(s: dict, **overrides) -> TrainConfig:
    fields = dict(n=s["n"], batch_size=s["batch_size"], steps=s["steps"], lr=s["lr"], weight_decay=s["weight_decay"],
                  pm1_targets=s["pm1_targets"], seed=s["seed"], eval_interval=s["eval_interval"],
                  eval_size=s["eval_size"], target_accuracy=s["target_accuracy"], target_loss=s["target_loss"],
                  device=s["device"])
    return TrainConfig(**{**fields, **overrides})


def _new_model(s: dict) -> TracedModel:
    return build_model(s["arch"], seed=s["seed"], d_model=s["d_model"], n_layers=s["n_layers"], n_heads=s["n_heads"],
                       max_len=s["max_len"] or s["n"], d_ff=s["d_ff"])


POSITIVE = ("batch_models", "measure_inputs", "proxy_draws", "directions", "exact_limit", "measure_every",
            "completions", "retrain_steps")
"""Integer settings that must be at least 1 (checked before training, not after it)."""


def _check_measuring(s: dict) -> None:
    for key in POSITIVE:
        value = s.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{key} must be an integer >= 1, got {value!r}")
    for key in ("proxy_eps", "rho"):
        value = s[key]
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value <= 0):
            raise ValueError(f"{key} must be a positive number, got {value!r}")


def prepare(experiment: str, settings: dict) -> Run:
    """Build the run's model, task and config; ValueError with the reason for a setting that cannot work."""
    s = resolve(experiment, settings)
    _check_measuring(s)
    task = get_task(s["task"] or f"random:seed={s['seed']}")
    config = _train_config(s, train_size=s["train_size"]) if experiment == "generalization" else _train_config(s)
    model = _new_model(s)
    config.check(model, task)
    return Run(settings, s, model, task, config)


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
        key = repr(sorted((k, v) for k, v in run.resolved.items() if k not in TRAIN_TOGETHER))
        groups.setdefault(key, []).append((i, run))
    for group in groups.values():
        size = group[0][1].resolved["batch_models"]
        for start in range(0, len(group), size):
            indices, batch = zip(*group[start : start + size])
            try:
                found = RUNNERS[experiment](experiment, list(batch), Path(out))
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


def _checkpoint(out: Path, run: Run, result: TrainResult, experiment: str, suffix: str = "") -> None:
    path = out / "checkpoints" / f"{run_id(run.settings)}{suffix}.safetensors"
    result.save(path, extra={"sweep": {"experiment": experiment, "settings": run.settings}}, with_time=False)


def converged_mse(config: TrainConfig) -> float:
    """The convergence filter's threshold on this run's evaluation MSE: `CONVERGED_MSE` on {0,1}
    targets (the paper's), four times that on ±1 targets (the same fit, on twice the scale)."""
    return CONVERGED_MSE * 4.0 / pm1_scale(config)


def _training_metrics(result: TrainResult) -> dict:
    final = result.final
    return {"steps_trained": result.steps, "stop_reason": result.stop_reason, "train_seconds": result.wall_time,
            "eval_loss": final["eval_loss"], "eval_accuracy": final.get("eval_accuracy"),
            "converged": bool(final["eval_loss"] < converged_mse(result.config))}


# ----------------------------------------------------------------------------- measurements


def pm1_scale(config: TrainConfig) -> float:
    """Factor from the output's scale to the ±1 scale, squared: 4 for {0,1} targets, else 1."""
    return 4.0 if config.encoding is ZERO_ONE else 1.0


def sharpness_rho(model: TracedModel, s: dict) -> float:
    """The radius of L_rho: the setting `rho`, or the proxy's typical |Delta| = proxy_eps sqrt(P)."""
    return s["rho"] or s["proxy_eps"] * math.sqrt(model.n_params())


def measure(model: TracedModel, task: Task, config: TrainConfig, s: dict) -> dict:
    """What the figures plot, for a trained model at its training length (see the module docstring)."""
    n, encoding, seed = config.n, config.encoding, s["measure_seed"]
    bits, exact = cube.measurement_inputs(n, s["measure_inputs"], seed, model.device)
    loss = loss_for(encoding)
    proxy = sharpness_proxy(model, bits, targets(task, bits, encoding), loss, eps=s["proxy_eps"],
                            n_draws=s["proxy_draws"], seed=seed)
    rho = sharpness_rho(model, s)
    sharp = sharpness(model, bits, rho, s["directions"], seed)
    blowups = blowup_summary(model, n, s["exact_limit"], s["measure_inputs"], seed)
    info = inspect_model(model, n, task, encoding, exact_limit=s["exact_limit"], n_samples=s["measure_inputs"],
                         seed=seed)
    scale = pm1_scale(config)
    metrics = {
        "n_params": model.n_params(),
        "param_norm": model.param_norm(),
        "accuracy": info.get("accuracy"),
        "as_model": info["avg_sensitivity"],
        "as_model_real": info["avg_sensitivity_real"],
        "as_task": info["task_avg_sensitivity"],
        "as_exact": info["exact"],
        "bound": info["avg_sensitivity_real"] / (2 * n),
        "bound_task": info["task_avg_sensitivity"] / (2 * n),
        "pm1_scale": scale,
        "measure_inputs": len(bits),
        "measure_exact": exact,
        "sharpness_proxy": proxy.value,
        "sharpness_proxy_stderr": proxy.stderr,
        "sharpness_proxy_pm1": scale * proxy.value,
        "proxy_eps": proxy.eps,
        "proxy_rho": proxy.rho,
        "sharpness": sharp.value,
        "sharpness_stderr": sharp.stderr,
        "sharpness_pm1": scale * sharp.value,
        "sharpness_rho": rho,
        "sharpness_limit": sharp.limit,
        "sharpness_limit_pm1": scale * sharp.limit,
        "blowup_mean": blowups.mean,
        "blowup_mean_sq": blowups.mean_sq,
        "blowup_max": blowups.max,
        "log_blowup_mean": blowups.log_mean,
        "log_blowup_mean_sq": math.log(blowups.mean_sq),
        "authors_blowup": blowups.authors["maxs_prod"],
        "log_authors_blowup": math.log(blowups.authors["maxs_prod"]),
        "blowup_exact": blowups.exact,
    }
    if n >= 2:
        metrics["bound_rhs"] = tradeoff(model, task, n, s["exact_limit"], s["measure_inputs"], seed, blowups)["bound_rhs"]
    if isinstance(model, ScratchpadTransformer):
        metrics.update(autoregressive_accuracy(model, bits, encoding))
    return metrics


def _authors_blowup(model: TracedModel, bits: torch.Tensor) -> dict:
    """The published code's plotted blowup on a batch (a `MeasurementCallback` measure)."""
    with torch.no_grad():
        value = authors_per_example(model.trace(bits, names=("ln",)))["maxs_prod"].mean().item()
    return {"authors_blowup": value}


# ----------------------------------------------------------------------------- the experiments


def _train_and_measure(experiment: str, batch: list[Run], out: Path) -> list[dict]:
    """length_scaling, tradeoff, scratchpad: train the batch together, then measure each model."""

    def one(run: Run, result: TrainResult) -> dict:
        _checkpoint(out, run, result, experiment)
        metrics = {**_training_metrics(result), **measure(result.model, run.task, run.config, run.resolved)}
        if isinstance(result.model, ScratchpadTransformer):
            metrics["converged"] = bool(metrics["autoregressive_accuracy"] > CONVERGED_AUTOREGRESSIVE)
        return {"metrics": metrics, "history": result.history}

    return [_alone(one, run, result) for run, result in zip(batch, _train(batch))]


def _dynamics(experiment: str, batch: list[Run], out: Path) -> list[dict]:
    """PARITY measured every `measure_every` steps on a fixed batch, the same draws every time."""
    s = batch[0].resolved
    monitor = MeasurementCallback(
        every=s["measure_every"], n_inputs=s["measure_inputs"], seed=s["measure_seed"], exact_limit=s["exact_limit"],
        rho=sharpness_rho(batch[0].model, s), n_directions=s["directions"], proxy_draws=s["proxy_draws"],
        proxy_eps=s["proxy_eps"], measures=[_authors_blowup],
    )
    trained = _train(batch, callbacks=[monitor])
    frame = monitor.frame()

    def one(member: int, run: Run, result: TrainResult) -> dict:
        _checkpoint(out, run, result, experiment)
        scale = pm1_scale(run.config)
        rows = frame[frame["member"] == member].drop(columns=["member"]).sort_values("step")
        for name in ("sharpness", "sharpness_limit", "sharpness_proxy"):
            rows[f"{name}_pm1"] = scale * rows[name]
        rows["log_authors_blowup"] = rows["authors_blowup"].map(math.log)
        history = rows.to_dict("records")
        final = history[-1]
        peak = rows.loc[rows["sharpness_proxy_pm1"].idxmax()]
        fitted = [r["step"] for r in result.history if r["eval_loss"] < converged_mse(run.config)]
        metrics = {
            **_training_metrics(result),
            **{k: final[k] for k in ("param_norm", "avg_sensitivity", "blowup_mean", "log_blowup_mean",
                                     "authors_blowup", "sharpness_pm1", "sharpness_limit_pm1", "sharpness_proxy_pm1")},
            "pm1_scale": scale,
            "converged_step": fitted[0] if fitted else None,
            "peak_sharpness_proxy_pm1": float(peak["sharpness_proxy_pm1"]),
            "peak_step": int(peak["step"]),
            "initial_sharpness_proxy_pm1": float(rows["sharpness_proxy_pm1"].iloc[0]),
        }
        return {"metrics": metrics, "history": history}

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
    return TruthTable("".join("1" if v > 0.5 else "0" for v in table01.tolist()))


def _generalization(experiment: str, batch: list[Run], out: Path) -> list[dict]:
    """Fit a restricted training set, read the learned function, compare it with random completions,
    then retrain the learned table and one completion on the whole cube and measure their sharpness."""
    n, size = batch[0].resolved["n"], batch[0].resolved["batch_models"]
    fitted = _train(batch)

    def compare(run: Run, result: TrainResult) -> dict:
        _checkpoint(out, run, result, experiment)
        table = run.config.encoding.decide(cube_outputs(result.model, n))  # [2**n] in {0,1}
        train_set = TrainingData(run.config).train_set
        options = completions(run.task, n, train_set, run.resolved["completions"], run.resolved["seed"])
        as_options = torch.tensor([_as_n(t) for t in options])
        as_learned = _as_n(table)
        metrics = {
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
        return {"metrics": metrics, "history": history, "retrain": {"learned": table, "completion": options[0]}}

    results = [_alone(compare, run, result) for run, result in zip(batch, fitted)]
    # retrain the learned table and one completion of every run that got this far on the whole cube,
    # in batches of at most batch_models
    retrain = [(k, kind, Run(run.settings, run.resolved, _new_model(run.resolved), _table_task(table),
                             _train_config(run.resolved, steps=run.resolved["retrain_steps"])))
               for k, (run, result) in enumerate(zip(batch, results)) if "retrain" in result
               for kind, table in result.pop("retrain").items()]
    for start in range(0, len(retrain), size):
        chunk = retrain[start : start + size]
        for (k, kind, again), result in zip(chunk, _train([r for _, _, r in chunk])):
            results[k] = _alone(_add_retrained, results[k], kind, again, result, out, experiment)
    return results


def _add_retrained(found: dict, kind: str, again: Run, result: TrainResult, out: Path, experiment: str) -> dict:
    """A generalization run's result with one retrained table's checkpoint, metrics and history added."""
    if "error" in found:  # the other table of this run already failed
        return found
    _checkpoint(out, again, result, experiment, suffix=f"-{kind}")
    measured = {**_training_metrics(result), **measure(result.model, again.task, again.config, again.resolved)}
    found["metrics"].update({f"{kind}_{key}": value for key, value in measured.items()})
    found["history"] += [{**record, "phase": f"retrain_{kind}"} for record in result.history]
    return found


RUNNERS = {
    "length_scaling": _train_and_measure,
    "tradeoff": _train_and_measure,
    "scratchpad": _train_and_measure,
    "dynamics": _dynamics,
    "generalization": _generalization,
}
