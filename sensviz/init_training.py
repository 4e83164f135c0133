"""Where training goes: one initialisation of a study, trained on its target, traced by the monitor.

`training_path(settings, n, task, steps)` takes the study's initialisation m at init scale s (the same
weights `sensviz.init_study.init_study(settings, n, M, s, seed)` evaluated as its m-th: built with seed
`seed + m`), trains it with `sensviz.train` (AdamW at `lr`, full batch: every step sees each of the 2^n
strings once, data seed `seed`) and records every `steps // points` steps the study's quantities
through the monitor (`sensviz.monitor.MeasurementCallback(quantities=PATH_QUANTITIES)`: as_n of
sign(T - median T), min sensitivity, degree profile, attention entropy, and the accuracy).
Step 0 is that initialisation's value in the study; `sensviz.init_charts.path_chart` draws the path
from the study's band to the target.

`path_plan` is that run written down (model settings, trainer config, seed and scale of the
initialisation, how often to measure), and `path_job` the same run as the fields of the class
server's training job (`server.worker.TrainRequest`): the explorer trains it there, as a queued job
whose worker traces `PATH_QUANTITIES` through the same monitor, not inside a page's script run.

Costs are bounded before anything is built: n <= `TRACE_N`, steps <= `TRACE_STEPS`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .init_study import check_study, init_models
from .measure import MeasureSettings
from .models import ModelSettings
from .monitor import MeasurementCallback
from .tasks import get_task
from .training import TrainConfig, train

TRACE_N = 10
TRACE_STEPS = 2000
POINTS = 10
PATH_QUANTITIES = ("sensitivity", "scale_free")
"""What the monitor traces along the path (`sensviz.measure` registry names)."""


@dataclass(frozen=True)
class PathPlan:
    """One traced run from an initialisation: what `training_path` builds, trains and measures."""

    settings: ModelSettings  # the study's architecture, max_len = n (the study's models)
    config: TrainConfig  # full batch, AdamW at lr, data seed `seed`, evaluated every `every` steps
    model_seed: int  # seed + init: the study's initialisation `init`
    init_scale: float  # every parameter but the LayerNorms' times this (`init_study.init_models`)
    every: int  # steps between measurements


def path_plan(settings: ModelSettings, n: int, task: str, steps: int = 500, init: int = 0, init_scale: float = 1.0,
              seed: int = 0, lr: float = 5e-3, points: int = POINTS) -> PathPlan:
    """The run `training_path` makes with these arguments, after checking every limit (nothing is built)."""
    if not 1 <= n <= TRACE_N:
        raise ValueError(f"n must be in 1..{TRACE_N} to trace training from an initialisation, got {n}")
    if not 1 <= steps <= TRACE_STEPS:
        raise ValueError(f"steps must be in 1..{TRACE_STEPS}, got {steps}")
    if init < 0:
        raise ValueError(f"init must be >= 0, got {init}")
    check_study(settings, n, init + 1, init_scale, seed)
    get_task(task).check_n(n)
    every = max(1, steps // points)
    config = TrainConfig(n=n, steps=steps, batch_size=2**n, full_batch=True, lr=lr, seed=seed, eval_interval=every)
    return PathPlan(dataclasses.replace(settings, max_len=n), config, seed + init, float(init_scale), every)


def training_path(settings: ModelSettings, n: int, task: str, steps: int = 500, init: int = 0,
                  init_scale: float = 1.0, seed: int = 0, lr: float = 5e-3, points: int = POINTS) -> list[dict]:
    """The monitor's records (step 0 .. steps, every steps // points) of the study's init `init` trained on `task`."""
    plan = path_plan(settings, n, task, steps, init, init_scale, seed, lr, points)
    model = init_models(plan.settings, n, 1, plan.init_scale, plan.model_seed)[0]
    monitor = MeasurementCallback(every=plan.every, settings=MeasureSettings(), quantities=PATH_QUANTITIES)
    train(model, get_task(task), plan.config, callbacks=[monitor])
    return monitor.records


def path_job(settings: ModelSettings, n: int, task: str, steps: int = 500, init_scale: float = 1.0, seed: int = 0,
             lr: float = 5e-3, points: int = POINTS) -> dict:
    """`training_path(settings, n, task, steps, init=0, ...)` as the fields of a class-server training job
    (`server.worker.TrainRequest(**path_job(...))`): the worker builds the model with the data seed (the study's
    initialisation 0 of a study with this seed), scales it by `init_scale` and traces `PATH_QUANTITIES`."""
    plan = path_plan(settings, n, task, steps, 0, init_scale, seed, lr, points)
    return {"task": get_task(task).label, "model": dataclasses.asdict(plan.settings),
            "train": {name: value for name, value in plan.config.to_dict().items()
                      if value != getattr(TrainConfig(), name)},
            "measure_every": plan.every, "quantities": list(PATH_QUANTITIES), "init_scale": plan.init_scale}
