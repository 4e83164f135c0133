"""One measurement layer: the paper's quantities for one model, one set of defaults, one result.

    m = measure(model, task, n)                       # MeasureSettings() defaults, default quantities
    m.sharpness.value, m.sharpness.stderr, m.sharpness.limit
    m.to_dict()                                       # JSON: every quantity, the settings, notes

`measure(model, task, n, settings, quantities)` is what `sensviz inspect`, the experiments, the
training monitor, the zoo's manifest and the app call. `MeasureSettings` holds every choice a
measurement makes, with the defaults used everywhere:

- which inputs: the cube analyses (sensitivity, degree profile, Blowup) enumerate all 2**n inputs
  up to `exact_limit`, above it a seeded sample of `samples` strings; the landscape measurements
  (sharpness, the proxy, the Hessian) run on the cube when 2**n <= `measure_inputs`, else on a
  seeded sample of that many (`cube.measurement_inputs`);
- the sharpness radius: `rho`, by default the typical radius of the paper's proxy,
  rho = proxy_eps * sqrt(P) (P = parameters without positional encodings), so L_rho and the
  proxy perturb the model by the same |Delta|. This finite radius is the paper's sharpness
  L_{rho,n} = E_x E_{|Delta|=rho} (T_{theta+Delta}(x) - T_theta(x))^2; its exact small-rho limit
  lim L_rho / rho^2 = E_x |grad T(x)|^2 / P (`sharpness.limit`) is the first-order part. The
  theorem bounds L_rho at a fixed radius as n grows, so the limit alone is not the claim;
- directions of L_rho, eps and draws of the proxy, and for the scratchpad whether sharpness and the
  proxy average over every decoder step (the authors' convention) or take the last;
- one seed for the sample, the directions and the noise draws.

Quantities (`QUANTITIES`; the default set leaves out what is expensive or specialised; `COSTS`:
sensitivity, blowup and decoding are instant, sharpness and limit cheap, the others costly):

| name        | result               | what                                                          |
|-------------|----------------------|---------------------------------------------------------------|
| sensitivity | `SensitivitySummary` | accuracy, as_n of the model (thresholded, real) and the task, degree profiles |
| blowup      | `BlowupSummary`      | Blowup(x) = prod_k max_w (1 + N_w^(k)(x)), N per LayerNorm, the published aggregates |
| tradeoff    | `Tradeoff`           | param_norm, E[Blowup^2], as_n / sqrt(n log n) - H/n           |
| sharpness   | `Sharpness`          | L_rho with its stderr over directions                          |
| limit       | `SharpnessLimit`     | lim L_rho / rho^2 = E_x |grad T(x)|^2 / P exactly (per-example gradients) |
| proxy       | `SharpnessProxy`     | the paper's proxy: mean L(theta + Delta) - L(theta), Delta ~ N(0, eps^2) |
| decoding    | dict                 | scratchpad models: accuracy of greedy decoding                 |
| radii       | list of `Sharpness`  | by name: L_rho at `RADIUS_FRACTIONS` of rho                   |
| hessian     | `Eigen`              | by name: the top eigenvalue of the loss Hessian (Lanczos)     |
| adaptive    | `Sharpness`          | by name: ASAM's sharpness, Delta = |theta| * u, |u| = rho     |
| orbit       | `OrbitSharpness`     | by name (encoder, scratchpad): least L_rho over part of the orbit |
| scale_free  | `ScaleFreeView`      | by name: as_n, min s, degrees of sign(T - median T), attention entropy |

For the scratchpad `limit` is asked for by name: it costs n backward passes per input there.

Adding a quantity is one function decorated with `@quantity("name", columns=..., cost=...)`, and
nothing else: `columns` says how its result flattens into named numbers (`columns(found)` gathers
them, the one flattening that the training monitor's records, the sweeps' runs
tables, the app's summary and the zoo manifest use), `cost` where it is measured by default
(`COSTS`, `affordable`: "instant" ones in the app's summary and the zoo manifest, "cheap" ones
also in the training monitor). The result is `Measurement.<name>` and a key of
`Measurement.to_dict()`, which `sensviz inspect` prints.

A quantity that cannot be computed for this model (a diverged model whose Hessian has no
eigen-decomposition, a task it lacks) is left `None` with the reason in
`Measurement.notes`; values that are not finite are reported as `null` by `to_dict()`, with a note.
Measurements never modify the model.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields

import torch

from . import cube
from .analysis import Progress, SensitivitySummary, sensitivity_report, sensitivity_summary
from .base import TracedModel
from .blowup import STACKS, BlowupSummary, Tradeoff, blowup_summary, tradeoff
from .curvature import Eigen, top_eigenvalues
from .encoder import EncoderTransformer
from .init_study import ARCHS, ScaleFreeView, scale_free_view
from .losses import loss_for
from .orbit_sharpness import OrbitSharpness, orbit_sharpness
from .records import Record, jsonable
from .scratchpad import ScratchpadTransformer, autoregressive_accuracy
from .settings import MeasureSettings  # noqa: F401  (defined torch-free, re-exported)
from .sharpness import (
    Sharpness,
    SharpnessLimit,
    SharpnessProxy,
    adaptive_sharpness,
    sharpness,
    sharpness_limit,
    sharpness_proxy,
)
from .tasks import ZERO_ONE, TargetEncoding, Task, get_task

RADIUS_FRACTIONS = (0.01, 0.1, 0.3, 1.0)
"""The radii of the `radii` quantity, as fractions of the sharpness radius rho."""


@dataclass
class Measurement(Record):
    """What `measure` found: `found.<quantity>` for every registered quantity (None when not asked or
    not available); `to_dict()` has one key per quantity, between `settings` and `notes`."""

    n: int
    n_params: int  # P, parameters without positional encodings
    param_norm: float  # ||theta||
    rho: float  # the sharpness radius used
    inputs: dict  # the landscape inputs: kind ("cube" or "sample"), n_inputs, seed
    settings: MeasureSettings
    values: dict[str, object] = field(default_factory=dict)  # quantity -> its result
    notes: dict[str, str] = field(default_factory=dict)  # quantity -> why it is missing or partly null

    def __getattr__(self, name: str):
        if name in QUANTITIES:  # only called for names that are not fields
            return self.values.get(name)
        raise AttributeError(f"{type(self).__name__} has no attribute or quantity {name!r}")

    def to_dict(self) -> dict:
        head = {f.name: jsonable(getattr(self, f.name)) for f in fields(self) if f.name not in ("values", "notes")}
        return {**head, **{name: jsonable(self.values.get(name)) for name in QUANTITIES}, "notes": dict(self.notes)}


def sharpness_radius(model: TracedModel, settings: MeasureSettings | None = None) -> float:
    """The radius of L_rho: `settings.rho`, or the paper's proxy's typical |Delta| = proxy_eps * sqrt(P)."""
    settings = settings or MeasureSettings()
    return settings.rho or settings.proxy_eps * math.sqrt(model.n_params())


class _Context:
    """What the quantities of one `measure` call share, each computed once when first needed."""

    def __init__(self, model: TracedModel, task: Task | None, n: int, settings: MeasureSettings,
                 encoding: TargetEncoding):
        self.model, self.task, self.n, self.settings, self.encoding = model, task, n, settings, encoding
        self.loss = loss_for(encoding)
        self.progress: Progress | None = None
        self.bits, exact = cube.measurement_inputs(n, settings.measure_inputs, settings.measure_seed, model.device)
        self.inputs = {"kind": "cube" if exact else "sample", "n_inputs": self.bits.shape[0],
                       "seed": None if exact else settings.measure_seed}
        self.rho = sharpness_radius(model, settings)
        self._blowup: BlowupSummary | None = None

    @property
    def decoder_steps(self) -> str:
        return self.settings.decoder_steps

    def targets(self, steps: str) -> torch.Tensor:
        """Training targets of the landscape inputs: one per input, or per decoder step (`steps="all"`)."""
        values = self.model.training_values(self.task, self.bits) if steps == "all" else self.task(self.bits)
        return self.encoding.encode(values).to(self.bits.device)

    def blowup(self) -> BlowupSummary:
        if self._blowup is None:
            s = self.settings
            self._blowup = blowup_summary(self.model, self.n, s.exact_limit, s.samples, s.measure_seed,
                                          progress=self.progress)
        return self._blowup


COSTS = ("instant", "cheap", "costly")
"""What a quantity costs, cheapest first. `instant`: measured for every model the app shows (its
summary) and in the zoo manifest; `cheap`: also measured by the training monitor by default
(seconds per measurement); `costly`: only where asked for, or in `measure`'s default set."""

Columns = dict[str, object]
"""Named numbers (int, float, bool or None); a profile (the degree profiles) is a list of numbers."""


@dataclass(frozen=True)
class Quantity:
    """One registered quantity: how it is computed, flattened, and when it is measured."""

    name: str
    compute: Callable[[_Context], object]
    columns: Callable[[object], Columns]  # its result as named numbers (`columns`)
    cost: str  # one of COSTS: where it is measured by default (`affordable`)
    default: Callable[[TracedModel], bool]  # in the default set for this model
    needs_task: bool
    applies: Callable[[TracedModel], bool]  # defined for this model at all


QUANTITIES: dict[str, Quantity] = {}
"""Every quantity `measure` knows, in the order it computes them."""


def quantity(name: str, columns: Callable[[object], Columns], cost: str = "costly",
             default: bool | Callable[[TracedModel], bool] = True, needs_task: bool = False,
             applies: Callable[[TracedModel], bool] = lambda model: True):
    """Register a quantity function `(context) -> result` under `name` (see the module docstring).

    `columns`: `result -> {column: number}`, its flat form; `cost`: one of `COSTS`; `default`: in
    `measure`'s default set (a bool, or a function of the model); `needs_task`: needs the model's
    task; `applies`: defined for this model at all."""
    if cost not in COSTS:
        raise ValueError(f"cost must be one of {COSTS}, got {cost!r}")
    if name in {f.name for f in fields(Measurement)}:
        raise ValueError(f"'{name}' is a field of Measurement, not a free quantity name")

    def register(fn: Callable[[_Context], object]):
        QUANTITIES[name] = Quantity(name, fn, columns, cost, default if callable(default) else (lambda model: default),
                                    needs_task, applies)
        return fn

    return register


def _sensitivity_columns(s: SensitivitySummary) -> Columns:
    found = {"accuracy": s.accuracy, "avg_sensitivity": s.avg_sensitivity, "avg_sensitivity_real": s.avg_sensitivity_real,
             "task_avg_sensitivity": s.task_avg_sensitivity, "sensitivity_exact": s.exact}
    if s.exact:
        return {**found, "degree_profile": s.degree_profile, "degree_profile_real": s.degree_profile_real}
    return {**found, "avg_sensitivity_stderr": s.avg_sensitivity_stderr,
            "avg_sensitivity_real_stderr": s.avg_sensitivity_real_stderr}


def _blowup_columns(b: BlowupSummary) -> Columns:
    found = {"blowup_mean": b.mean, "blowup_mean_sq": b.mean_sq, "blowup_max": b.max, "log_blowup_mean": b.log_mean,
             "authors_blowup": b.authors["maxs_prod"], "blowup_exact": b.exact}
    for stack in STACKS:  # the scratchpad model's, as the authors' Fig. 11 plots them
        if f"{stack}_maxs_prod" in b.authors:
            found[f"authors_{stack}_blowup"] = b.authors[f"{stack}_maxs_prod"]
    for ln in b.per_ln:
        found.update({f"ln_factor_mean:{ln['name']}": ln["mean"], f"ln_factor_max:{ln['name']}": ln["max"],
                      f"tau_mean:{ln['name']}": ln["tau_mean"]})
    return found


def _radii_columns(radii: list[Sharpness]) -> Columns:
    found = {}
    for fraction, r in zip(RADIUS_FRACTIONS, radii):
        found.update({f"sharpness_x{fraction:g}": r.value, f"sharpness_x{fraction:g}_stderr": r.stderr,
                      f"sharpness_rho_x{fraction:g}": r.rho})
    return found


@quantity("sensitivity", _sensitivity_columns, cost="instant")
def _sensitivity(ctx: _Context) -> SensitivitySummary:
    s = ctx.settings
    report = sensitivity_report(ctx.model, ctx.n, ctx.task, ctx.encoding, s.exact_limit, s.samples, s.measure_seed,
                                ctx.progress)
    return sensitivity_summary(report, s.samples, s.measure_seed)


@quantity("blowup", _blowup_columns, cost="instant")
def _blowup(ctx: _Context) -> BlowupSummary:
    return ctx.blowup()


@quantity("tradeoff", lambda t: {"bound_rhs": t.bound_rhs}, needs_task=True)
def _tradeoff(ctx: _Context) -> Tradeoff | None:
    if ctx.n < 2:
        raise ValueError("the trade-off's bound needs n >= 2")
    s = ctx.settings
    return tradeoff(ctx.model, ctx.task, ctx.n, s.exact_limit, s.samples, s.measure_seed, ctx.blowup())


@quantity("sharpness", lambda h: {"sharpness": h.value, "sharpness_stderr": h.stderr, "sharpness_rho": h.rho,
                                 "sharpness_directions": h.n_directions}, cost="cheap")
def _sharpness(ctx: _Context) -> Sharpness:
    s = ctx.settings
    return sharpness(ctx.model, ctx.bits, ctx.rho, s.directions, s.measure_seed, limit=False, steps=ctx.decoder_steps)


@quantity("limit", lambda h: {"sharpness_limit": h.value}, cost="cheap", default=lambda model: not model.multi_step)
def _limit(ctx: _Context) -> SharpnessLimit:
    return sharpness_limit(ctx.model, ctx.bits, steps=ctx.decoder_steps)


@quantity("proxy", lambda p: {"sharpness_proxy": p.value, "sharpness_proxy_stderr": p.stderr,
                             "sharpness_proxy_eps": p.eps, "sharpness_proxy_rho": p.rho}, needs_task=True)
def _proxy(ctx: _Context) -> SharpnessProxy:
    s = ctx.settings
    return sharpness_proxy(ctx.model, ctx.bits, ctx.targets(ctx.decoder_steps), ctx.loss, eps=s.proxy_eps,
                           n_draws=s.proxy_draws, seed=s.measure_seed, steps=ctx.decoder_steps)


@quantity("decoding", lambda d: {"autoregressive_accuracy": d["autoregressive_accuracy"],
                                 "answer_accuracy": d["answer_accuracy"]},
          cost="instant", needs_task=True, applies=lambda model: isinstance(model, ScratchpadTransformer))
def _decoding(ctx: _Context) -> dict:
    return {**autoregressive_accuracy(ctx.model, ctx.bits, ctx.encoding), "n_inputs": ctx.bits.shape[0]}


@quantity("radii", _radii_columns, default=False)
def _radii(ctx: _Context) -> list[Sharpness]:
    s = ctx.settings
    return [sharpness(ctx.model, ctx.bits, fraction * ctx.rho, s.directions, s.measure_seed, limit=False,
                      steps=ctx.decoder_steps) for fraction in RADIUS_FRACTIONS]


@quantity("hessian", lambda e: {"hessian_top": e.values[0].item()}, default=False, needs_task=True)
def _hessian(ctx: _Context) -> Eigen:
    return top_eigenvalues(ctx.model, ctx.bits, ctx.targets("last"), ctx.loss, k=1, seed=ctx.settings.measure_seed)


@quantity("adaptive", lambda h: {"adaptive_sharpness": h.value, "adaptive_sharpness_stderr": h.stderr}, default=False)
def _adaptive(ctx: _Context) -> Sharpness:
    s = ctx.settings
    return adaptive_sharpness(ctx.model, ctx.bits, ctx.rho, s.directions, s.measure_seed, steps=ctx.decoder_steps)


@quantity("orbit", lambda o: {"orbit_sharpness": o.value, "orbit_sharpness_stderr": o.stderr}, default=False,
          applies=lambda model: isinstance(model, (EncoderTransformer, ScratchpadTransformer)))
def _orbit(ctx: _Context) -> OrbitSharpness:
    s = ctx.settings
    return orbit_sharpness(ctx.model, ctx.bits, ctx.rho, s.directions, s.measure_seed, steps=ctx.decoder_steps)


@quantity("scale_free", lambda v: {"scale_free_avg_sensitivity": v.avg_sensitivity,
                                   "scale_free_min_sensitivity": v.min_sensitivity,
                                   "scale_free_degree_profile": v.degree_profile.tolist(),
                                   "attention_entropy": v.attention_entropy},
          cost="cheap", default=False, applies=lambda model: model.arch in ARCHS)
def _scale_free(ctx: _Context) -> ScaleFreeView:
    if ctx.n > ctx.settings.exact_limit:
        raise ValueError(f"the scale-free view enumerates the cube: n={ctx.n} is above exact_limit")
    return scale_free_view(ctx.model, ctx.n)


def registry_key() -> str:
    """The quantity registry's identity: sha256 of every quantity's name and cost, in registry order. A
    shipped file of measurements (the zoo manifest, the Lab's lab-data.json) records the key it was measured
    under; under another key it lacks a quantity (or has a dropped one): measure it again."""
    return hashlib.sha256(json.dumps([[q.name, q.cost] for q in QUANTITIES.values()]).encode()).hexdigest()


def default_quantities(model: TracedModel) -> tuple[str, ...]:
    """The quantities `measure` computes when none are named: the default ones defined for this model."""
    return tuple(name for name, q in QUANTITIES.items() if q.default(model) and q.applies(model))


def affordable(model: TracedModel, cost: str) -> tuple[str, ...]:
    """The default quantities of this model that cost at most `cost` (`COSTS`): `affordable(model, "cheap")`
    is what the monitor measures by default, `affordable(model, "instant")` the app's summary and the zoo manifest."""
    if cost not in COSTS:
        raise ValueError(f"cost must be one of {COSTS}, got {cost!r}")
    return tuple(name for name in default_quantities(model) if COSTS.index(QUANTITIES[name].cost) <= COSTS.index(cost))


def columns(found: Measurement, profiles: bool = False) -> Columns:
    """A measurement as one flat dict: `param_norm` and every measured quantity's columns, in
    registry order. `profiles`: keep list-valued columns (the degree profiles), else numbers only."""
    flat: Columns = {"param_norm": found.param_norm}
    for name, q in QUANTITIES.items():
        value = found.values.get(name)
        if value is not None:
            flat.update({k: v for k, v in q.columns(value).items() if profiles or not isinstance(v, list)})
    return flat


def _has_nonfinite(value) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, torch.Tensor):
        return value.is_floating_point() and not bool(torch.isfinite(value).all())
    if isinstance(value, dict):
        return any(_has_nonfinite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_nonfinite(v) for v in value)
    if isinstance(value, Record):
        return any(_has_nonfinite(getattr(value, f.name)) for f in fields(value))
    return False


NUMERICAL_ERRORS = (RuntimeError, ValueError, ArithmeticError)
"""What a quantity may raise on a degenerate model (a diverged one, a constant one): reported, not raised."""


def measure(
    model: TracedModel,
    task: Task | str | None,
    n: int,
    settings: MeasureSettings | None = None,
    quantities: tuple[str, ...] | list[str] | None = None,
    encoding: TargetEncoding = ZERO_ONE,
    progress: Progress | None = None,
) -> Measurement:
    """Measure `model` at input length n against `task` (None: model-only quantities), see the module docstring.

    `quantities`: names from `QUANTITIES` (default: `default_quantities(model)`); `encoding`: how
    the model's output encodes the task (the checkpoint's). Raises ValueError for an unknown
    quantity, an n the model or task does not take, or bad settings.
    """
    settings = settings or MeasureSettings()
    names = default_quantities(model) if quantities is None else tuple(quantities)
    unknown = sorted(set(names) - set(QUANTITIES))
    if unknown:
        raise ValueError(f"unknown quantities {unknown}; known: {', '.join(QUANTITIES)}")
    task = None if task is None else get_task(task)
    if task is not None:
        model.check_task(task, n)
    elif not 1 <= n <= model.config.max_len:
        raise ValueError(f"n={n} is outside the model's positional range 1..{model.config.max_len}")
    ctx = _Context(model, task, n, settings, encoding)
    result = Measurement(n=n, n_params=model.n_params(), param_norm=model.param_norm(), rho=ctx.rho,
                         inputs=ctx.inputs, settings=settings)
    ordered = [name for name in QUANTITIES if name in names]
    for i, name in enumerate(ordered):
        q = QUANTITIES[name]
        if progress:
            ctx.progress = lambda f, i=i: progress((i + min(max(f, 0.0), 1.0)) / len(ordered))
            progress(i / len(ordered))
        if not q.applies(model):
            result.notes[name] = f"not defined for the {model.arch} architecture"
            continue
        if q.needs_task and task is None:
            result.notes[name] = "needs the model's task (none is known: give it)"
            continue
        try:
            value = q.compute(ctx)
        except NUMERICAL_ERRORS as err:
            result.notes[name] = f"could not be computed for this model: {type(err).__name__}: {err}"
            continue
        if _has_nonfinite(value):
            result.notes[name] = "some values are not finite (reported as null): the model's outputs overflow"
        result.values[name] = value
    if progress:
        progress(1.0)
    return result
