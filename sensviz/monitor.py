"""Live measurements while a model trains: the paper's quantities every k steps, on fixed inputs.

`MeasurementCallback(every=k)` is a training callback (`sensviz.training.Callback`). At step 0,
every k steps and for the final weights it records, on one fixed measurement batch (the whole cube
when 2**n <= n_inputs, else a seeded sample, the same at every step):

- `loss` and `accuracy` (Boolean tasks) against the task, as the trainer computes them;
- `param_norm` = ||theta||, the L2 norm of all parameters except positional encodings;
- the model's own average sensitivity as_n (`avg_sensitivity`: the output thresholded at the
  decision boundary, count form; `avg_sensitivity_real`: the real output on the ±1 scale, influence
  form) and, for n <= exact_limit, its Fourier degree profile d_k = sum_{|P|=k} lambda_P^2 of both
  views (`degree_profile`, `degree_profile_real`; as_n = sum_k k d_k), so a run shows which degrees
  are learned when; above the limit, seeded Monte Carlo estimates of as_n with their stderr;
- with `landscape` (the default): Blowup(x) = prod_k tau^(k)(x) (mean, mean of squares, max, mean
  of log over the batch) and every LayerNorm's factor N and tau (`blowup_measure`); the sharpness
  L_{rho,n} with its stderr from `n_directions` seeded directions — the same ones at every step, as
  in the paper's training dynamics — and its exact small-rho limit E_x |grad T(x)|^2 / P of L/rho^2
  (`sharpness_measure`); with `proxy_draws > 0`, also the paper's loss-space proxy
  mean L(theta + Delta) - L(theta), Delta ~ N(0, proxy_eps^2) per coordinate (`proxy_measure`);
- whatever the `measures` add: plain callables `(model, bits) -> {name: number}` run on the same
  batch.

Measurements read the model and never change it (`state_dict()` stays bit-identical).
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import torch

from . import cube
from .analysis import sensitivity_report
from .blowup import blowup, log_blowup, tau
from .losses import targets
from .sharpness import sharpness, sharpness_proxy
from .tasks import ZERO_ONE, Task, TargetEncoding
from .training import Callback, RunState, TrainResult, evaluate
from .base import TracedModel

Measure = Callable[[TracedModel, torch.Tensor], Mapping[str, float]]
"""A measurement: `(model, bits[batch, n]) -> {name: number}`; must not modify the model."""


def sharpness_measure(rho: float = 0.01, n_directions: int = 32, seed: int = 0) -> Measure:
    """`sharpness` (L_{rho,n}), `sharpness_stderr`, and `sharpness_limit` (the exact lim L/rho^2 =
    E_x |grad T(x)|^2 / P) on the batch, from the same seeded directions at every call."""

    def measure(model: TracedModel, bits: torch.Tensor) -> dict:
        result = sharpness(model, bits, rho=rho, n_directions=n_directions, seed=seed)
        return {"sharpness": result.value, "sharpness_stderr": result.stderr, "sharpness_limit": result.limit,
                "sharpness_rho": rho, "sharpness_directions": n_directions}

    return measure


def blowup_measure() -> Measure:
    """Blowup over the batch (`blowup_mean`, `blowup_mean_sq`, `blowup_max`, `log_blowup_mean`) and,
    per LayerNorm, the mean and max of its factor N over inputs and positions and the mean of tau
    (`ln_factor_mean:<name>`, `ln_factor_max:<name>`, `tau_mean:<name>`)."""

    def measure(model: TracedModel, bits: torch.Tensor) -> dict:
        with torch.no_grad():
            trace = model.trace(bits, names=("ln",))
        values, taus, factors = blowup(trace), tau(trace), trace.ln_factor.double()  # [batch], [batch, ln], [batch, ln, pos]
        record = {"blowup_mean": values.mean().item(), "blowup_mean_sq": values.pow(2).mean().item(),
                  "blowup_max": values.max().item(), "log_blowup_mean": log_blowup(trace).mean().item()}
        for k, name in enumerate(trace.ln_names):
            record[f"ln_factor_mean:{name}"] = factors[:, k].mean().item()
            record[f"ln_factor_max:{name}"] = factors[:, k].max().item()
            record[f"tau_mean:{name}"] = taus[:, k].mean().item()
        return record

    return measure


def proxy_measure(task: Task, encoding: TargetEncoding = ZERO_ONE, loss: str = "mse", eps: float = 0.02,
                  n_draws: int = 10, seed: int = 0) -> Measure:
    """The paper's loss-space sharpness proxy on the batch (`sharpness_proxy`, `sharpness_proxy_stderr`,
    `sharpness_proxy_eps`), from the same seeded noise draws at every call."""

    def measure(model: TracedModel, bits: torch.Tensor) -> dict:
        result = sharpness_proxy(model, bits, targets(task, bits, encoding), loss, eps=eps, n_draws=n_draws, seed=seed)
        return {"sharpness_proxy": result.value, "sharpness_proxy_stderr": result.stderr, "sharpness_proxy_eps": eps}

    return measure


class MeasurementCallback(Callback):
    """Records measurements every `every` steps into `records` (one dict per measurement).

    `n`: the length measured (default: the run's n); `n_inputs`: size of the measurement batch;
    `seed`: the batch, the Monte Carlo sensitivity sample, the sharpness directions and the proxy's
    noise; `exact_limit`: largest n for the exact cube analysis; `n_samples`: Monte Carlo samples
    above it; `landscape`: Blowup and sharpness (`rho`, `n_directions`); `proxy_draws`,
    `proxy_eps`: the loss-space proxy (0 draws: off); `measures`: extra measurements. Task, target
    encoding and loss are the run's.
    """

    def __init__(
        self,
        every: int,
        n: int | None = None,
        n_inputs: int = 1024,
        seed: int = 0,
        exact_limit: int = 12,
        n_samples: int = 512,
        landscape: bool = True,
        rho: float = 0.01,
        n_directions: int = 32,
        proxy_draws: int = 0,
        proxy_eps: float = 0.02,
        measures: Sequence[Measure] = (),
    ):
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        if n_inputs < 1 or n_samples < 2:
            raise ValueError("n_inputs must be >= 1 and n_samples >= 2")
        self.every = every
        self.n = n
        self.n_inputs = n_inputs
        self.seed = seed
        self.exact_limit = exact_limit
        self.n_samples = n_samples
        landscape_measures = (blowup_measure(), sharpness_measure(rho, n_directions, seed)) if landscape else ()
        self.measures = landscape_measures + tuple(measures)
        self.proxy_draws = proxy_draws
        self.proxy_eps = proxy_eps
        self.records: list[dict] = []
        self._bits: torch.Tensor | None = None

    def measurement_bits(self, n: int) -> torch.Tensor:
        """The fixed measurement batch at length n: `[batch, n]`."""
        if self._bits is None or self._bits.shape[1] != n:
            self._bits = cube.vertices(n) if 2**n <= self.n_inputs else cube.sample(n, self.n_inputs, self.seed)
        return self._bits

    def measure(self, model: TracedModel, task, config, step: int, member: int = 0) -> dict:
        """One record of every measurement of `model` at training step `step`."""
        n = self.n or config.n
        bits = self.measurement_bits(n).to(model.device)
        record = {"member": member, "step": step, **evaluate(model, task, bits, config.encoding, config.loss)}
        record["param_norm"] = model.param_norm()
        report = sensitivity_report(model, n, task, config.encoding, self.exact_limit, self.n_samples, self.seed)
        record.update(avg_sensitivity=report.model.avg_sensitivity, avg_sensitivity_real=report.model_real.avg_sensitivity,
                      sensitivity_exact=report.exact)
        if report.exact:
            record.update(degree_profile=report.model.degree_profile.tolist(),
                          degree_profile_real=report.model_real.degree_profile.tolist())
        else:
            record.update(avg_sensitivity_stderr=report.model.stderr, avg_sensitivity_real_stderr=report.model_real.stderr)
        measures = self.measures
        if self.proxy_draws:
            measures += (proxy_measure(task, config.encoding, config.loss, self.proxy_eps, self.proxy_draws, self.seed),)
        for measure in measures:
            values = dict(measure(model, bits))
            clash = sorted(set(values) & set(record))
            if clash:
                raise ValueError(f"measurement {measure!r} returns names already recorded: {clash}")
            record.update(values)
        return record

    def _record(self, state: RunState, model: TracedModel, step: int) -> None:
        self.records.append(self.measure(model, state.task, state.config, step, state.member))

    def on_start(self, state: RunState) -> None:
        self._record(state, state.model, 0)

    def on_step(self, state: RunState) -> None:
        if state.step % self.every == 0:
            self._record(state, state.model, state.step)

    def on_end(self, state: RunState, result: TrainResult) -> None:
        measured = [r["step"] for r in self.records if r["member"] == state.member]
        if measured[-1] != result.steps:  # the final weights (possibly restored) were not measured yet
            self._record(state, result.model, result.steps)

    def frame(self):
        """The records as a pandas DataFrame; degree profiles become columns `degree_k`, `degree_real_k`."""
        import pandas as pd

        rows = []
        for record in self.records:
            row = {k: v for k, v in record.items() if k not in ("degree_profile", "degree_profile_real")}
            for k, value in enumerate(record.get("degree_profile", ())):
                row[f"degree_{k}"] = value
            for k, value in enumerate(record.get("degree_profile_real", ())):
                row[f"degree_real_{k}"] = value
            rows.append(row)
        return pd.DataFrame(rows)
