"""Where training goes: one initialisation of a study, trained on its target, traced by the monitor.

`training_path(settings, n, task, steps)` takes the study's initialisation m at init scale s (the same
weights `sensviz.init_study.init_study(settings, n, M, s, seed)` evaluated as its m-th: built with seed
`seed + m`), trains it with `sensviz.train` (AdamW at `lr`, full batch: every step sees each of the 2^n
strings once, data seed `seed`) and records every `steps // points` steps the study's quantities
through the monitor (`sensviz.monitor.MeasurementCallback(quantities=("sensitivity", "scale_free"))`:
as_n of sign(T - median T), min sensitivity, degree profile, attention entropy, and the accuracy).
Step 0 is that initialisation's value in the study; `sensviz.init_charts.path_chart` draws the path
from the study's band to the target.

Costs are bounded before anything is built: n <= `TRACE_N`, steps <= `TRACE_STEPS`.
"""

from __future__ import annotations

from .init_study import check_study, init_models
from .measure import MeasureSettings
from .models import ModelSettings
from .monitor import MeasurementCallback
from .tasks import get_task
from .training import TrainConfig, train

TRACE_N = 10
TRACE_STEPS = 2000
POINTS = 10


def training_path(settings: ModelSettings, n: int, task: str, steps: int = 500, init: int = 0,
                  init_scale: float = 1.0, seed: int = 0, lr: float = 5e-3, points: int = POINTS) -> list[dict]:
    """The monitor's records (step 0 .. steps, every steps // points) of the study's init `init` trained on `task`."""
    if not 1 <= n <= TRACE_N:
        raise ValueError(f"n must be in 1..{TRACE_N} to trace training from an initialisation, got {n}")
    if not 1 <= steps <= TRACE_STEPS:
        raise ValueError(f"steps must be in 1..{TRACE_STEPS}, got {steps}")
    if init < 0:
        raise ValueError(f"init must be >= 0, got {init}")
    check_study(settings, n, init + 1, init_scale, seed)
    target = get_task(task)
    target.check_n(n)
    model = init_models(settings, n, 1, init_scale, seed + init)[0]
    every = max(1, steps // points)
    monitor = MeasurementCallback(every=every, settings=MeasureSettings(), quantities=("sensitivity", "scale_free"))
    config = TrainConfig(n=n, steps=steps, batch_size=2**n, full_batch=True, lr=lr, seed=seed,
                         eval_interval=every)
    train(model, target, config, callbacks=[monitor])
    return monitor.records
