"""Live measurements while a model trains: the paper's quantities every k steps, through `sensviz.measure`.

`MeasurementCallback(every=k, settings=MeasureSettings(...), quantities=(...))` is a training
callback (`sensviz.training.Callback`). At step 0, every k steps and for the final weights it
records one flat dict (`record_of`) of:

- `loss` and `accuracy` (Boolean tasks) on the fixed measurement inputs (the landscape inputs of
  the settings: the whole cube when 2**n <= measure_inputs, else the same seeded sample every time);
- `param_norm` = ||theta||, without positional encodings;
- whatever `measure(model, task, n, settings, quantities)` finds (`sensviz.measure`; by default its
  instant and cheap quantities, `affordable(model, "cheap")`), flattened by each quantity's registered columns
  (`sensviz.measure.columns`; `accuracy` stays the one on the measurement inputs). By default:
  `sensitivity` gives the model's own as_n (`avg_sensitivity`: thresholded, count form;
  `avg_sensitivity_real`: the real output, influence form) and, up to the exact limit, its Fourier
  degree profile (`degree_profile`, `degree_profile_real`; as_n = sum_k k d_k), so a run shows
  which degrees are learned when; `blowup` gives Blowup(x) = prod_k tau^(k)(x) (mean, mean of
  squares, max, mean of log, the published code's `authors_blowup`) and every LayerNorm's factor
  N and tau; `sharpness` gives L_{rho,n} with its stderr (the same seeded directions at every
  step, as in the paper's training dynamics), `limit` its exact small-rho limit; `proxy` the
  paper's loss-space proxy; `radii` L_rho at several radii;
- whatever the `measures` add: plain callables `(model, bits) -> {name: number}` on the same inputs.

Measurements read the model and never change it (`state_dict()` stays bit-identical).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch

from . import cube
from .base import TracedModel
from .measure import Measurement, MeasureSettings, affordable, columns, measure
from .training import Callback, RunState, TrainResult, evaluate

Measure = Callable[[TracedModel, torch.Tensor], Mapping[str, float]]
"""A measurement: `(model, bits[batch, n]) -> {name: number}`; must not modify the model."""


def record_of(found: Measurement) -> dict:
    """A measurement as one flat record (`sensviz.measure.columns`, degree profiles kept as lists):
    the names of the history tables."""
    return columns(found, profiles=True)


class MeasurementCallback(Callback):
    """Records measurements every `every` steps into `records` (one dict per measurement).

    `settings`: the `MeasureSettings` of every measurement (inputs, exact limit, radius,
    directions, proxy, seed); `quantities`: what `measure` computes (default: the model's
    instant and cheap ones, `affordable(model, "cheap")`); `n`: the length measured
    (default: the run's n); `measures`: extra measurements on the same inputs. Task, target
    encoding and loss are the run's.
    """

    def __init__(
        self,
        every: int,
        settings: MeasureSettings | None = None,
        quantities: Sequence[str] | None = None,
        n: int | None = None,
        measures: Sequence[Measure] = (),
    ):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be an integer >= 1, got {every!r}")
        self.every = every
        self.settings = settings or MeasureSettings()
        self.quantities = None if quantities is None else tuple(quantities)
        self.n = n
        self.measures = tuple(measures)
        self.records: list[dict] = []

    def measurement_bits(self, n: int) -> torch.Tensor:
        """The fixed measurement inputs at length n: `[batch, n]`."""
        return cube.measurement_inputs(n, self.settings.measure_inputs, self.settings.measure_seed)[0]

    def measure(self, model: TracedModel, task, config, step: int, member: int = 0) -> dict:
        """One record of every measurement of `model` at training step `step`."""
        n = self.n or config.n
        bits = self.measurement_bits(n).to(model.device)
        names = affordable(model, "cheap") if self.quantities is None else self.quantities
        found = measure(model, task, n, self.settings, names, config.encoding)
        record = {"member": member, "step": step, **record_of(found),
                  **evaluate(model, task, bits, config.encoding, config.loss)}
        for extra in self.measures:
            values = dict(extra(model, bits))
            clash = sorted(set(values) & set(record))
            if clash:
                raise ValueError(f"measurement {extra!r} returns names already recorded: {clash}")
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
        if not measured or measured[-1] != result.steps:  # the final weights (possibly restored) were not measured yet
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
