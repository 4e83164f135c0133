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

Quantities (`QUANTITIES`; the default set leaves out what is expensive or specialised):

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

For the scratchpad `limit` is asked for by name: it costs n backward passes per input there.
Adding a quantity is one function decorated with `@quantity("name")` plus one field `name` of
`Measurement`. A quantity that cannot be computed for this model (a diverged model whose Hessian
has no eigen-decomposition, a task it lacks) is left `None` with the reason in
`Measurement.notes`; values that are not finite are reported as `null` by `to_dict()`, with a note.
Measurements never modify the model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields

import torch

from . import cube
from .analysis import Progress, SensitivitySummary, sensitivity_report, sensitivity_summary
from .base import TracedModel
from .blowup import BlowupSummary, Tradeoff, blowup_summary, tradeoff
from .configs import check, setting
from .curvature import Eigen, top_eigenvalues
from .losses import loss_for
from .params import STEPS
from .records import Record
from .scratchpad import ScratchpadTransformer, autoregressive_accuracy
from .sharpness import Sharpness, SharpnessLimit, SharpnessProxy, sharpness, sharpness_limit, sharpness_proxy
from .tasks import ZERO_ONE, TargetEncoding, Task, get_task

RADIUS_FRACTIONS = (0.01, 0.1, 0.3, 1.0)
"""The radii of the `radii` quantity, as fractions of the sharpness radius rho."""


@dataclass
class MeasureSettings:
    """Every choice a measurement makes (see the module docstring); the defaults are everyone's."""

    exact_limit: int = setting(14, "largest n whose cube is analysed whole (sensitivity, degree profile, Blowup)",
                               low=1, high=cube.EXACT_LIMIT)
    samples: int = setting(512, "seeded Monte Carlo samples above exact_limit", limit="samples")
    measure_inputs: int = setting(512, "landscape inputs (sharpness, proxy, Hessian): the cube when 2**n <= this, "
                                  "else a seeded sample of this many", limit="inputs")
    rho: float | None = setting(None, "radius of L_rho (default proxy_eps * sqrt(P), the proxy's typical |Delta|)",
                                limit="rho")
    directions: int = setting(32, "random directions of L_rho", limit="directions")
    proxy_eps: float = setting(0.02, "std of the proxy's Gaussian noise per coordinate (the paper's 0.02)",
                               positive=True, high=1.0)
    proxy_draws: int = setting(32, "noise draws of the proxy", limit="draws")
    decoder_steps: str = setting("all", "scratchpad models: sharpness and proxy over every decoder step (the "
                                 "authors') or the last", choices=STEPS)
    measure_seed: int = setting(0, "the input sample, the directions and the noise draws", limit="seed")

    def __post_init__(self):
        check(self)


@dataclass
class Measurement(Record):
    """What `measure` found: one field per quantity (None when not asked or not available)."""

    n: int
    n_params: int  # P, parameters without positional encodings
    param_norm: float  # ||theta||
    rho: float  # the sharpness radius used
    inputs: dict  # the landscape inputs: kind ("cube" or "sample"), n_inputs, seed
    settings: MeasureSettings
    sensitivity: SensitivitySummary | None = None
    blowup: BlowupSummary | None = None
    tradeoff: Tradeoff | None = None
    sharpness: Sharpness | None = None
    limit: SharpnessLimit | None = None
    proxy: SharpnessProxy | None = None
    decoding: dict | None = None
    radii: list[Sharpness] | None = None
    hessian: Eigen | None = None
    notes: dict[str, str] = field(default_factory=dict)  # quantity -> why it is missing or partly null


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
    def steps(self) -> str:
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


@dataclass(frozen=True)
class Quantity:
    name: str
    compute: Callable[[_Context], object]
    default: Callable[[TracedModel], bool]  # in the default set for this model
    needs_task: bool
    applies: Callable[[TracedModel], bool]  # defined for this model at all


QUANTITIES: dict[str, Quantity] = {}
"""Every quantity `measure` knows, in the order it computes them."""


def quantity(name: str, default: bool | Callable[[TracedModel], bool] = True, needs_task: bool = False,
             applies: Callable[[TracedModel], bool] = lambda model: True):
    """Register a quantity function `(context) -> result`; `Measurement` must have a field `name`.
    `default`: in the default set (a bool, or a function of the model)."""

    def register(fn: Callable[[_Context], object]):
        QUANTITIES[name] = Quantity(name, fn, default if callable(default) else (lambda model: default), needs_task,
                                    applies)
        return fn

    return register


@quantity("sensitivity")
def _sensitivity(ctx: _Context) -> SensitivitySummary:
    s = ctx.settings
    report = sensitivity_report(ctx.model, ctx.n, ctx.task, ctx.encoding, s.exact_limit, s.samples, s.measure_seed,
                                ctx.progress)
    return sensitivity_summary(report, s.samples, s.measure_seed)


@quantity("blowup")
def _blowup(ctx: _Context) -> BlowupSummary:
    return ctx.blowup()


@quantity("tradeoff", needs_task=True)
def _tradeoff(ctx: _Context) -> Tradeoff | None:
    if ctx.n < 2:
        raise ValueError("the trade-off's bound needs n >= 2")
    s = ctx.settings
    return tradeoff(ctx.model, ctx.task, ctx.n, s.exact_limit, s.samples, s.measure_seed, ctx.blowup())


@quantity("sharpness")
def _sharpness(ctx: _Context) -> Sharpness:
    s = ctx.settings
    return sharpness(ctx.model, ctx.bits, ctx.rho, s.directions, s.measure_seed, limit=False, steps=ctx.steps)


@quantity("limit", default=lambda model: not model.multi_step)
def _limit(ctx: _Context) -> SharpnessLimit:
    return sharpness_limit(ctx.model, ctx.bits, steps=ctx.steps)


@quantity("proxy", needs_task=True)
def _proxy(ctx: _Context) -> SharpnessProxy:
    s = ctx.settings
    return sharpness_proxy(ctx.model, ctx.bits, ctx.targets(ctx.steps), ctx.loss, eps=s.proxy_eps,
                           n_draws=s.proxy_draws, seed=s.measure_seed, steps=ctx.steps)


@quantity("decoding", needs_task=True, applies=lambda model: isinstance(model, ScratchpadTransformer))
def _decoding(ctx: _Context) -> dict:
    return {**autoregressive_accuracy(ctx.model, ctx.bits, ctx.encoding), "n_inputs": ctx.bits.shape[0]}


@quantity("radii", default=False)
def _radii(ctx: _Context) -> list[Sharpness]:
    s = ctx.settings
    return [sharpness(ctx.model, ctx.bits, fraction * ctx.rho, s.directions, s.measure_seed, limit=False,
                      steps=ctx.steps) for fraction in RADIUS_FRACTIONS]


@quantity("hessian", default=False, needs_task=True)
def _hessian(ctx: _Context) -> Eigen:
    return top_eigenvalues(ctx.model, ctx.bits, ctx.targets("last"), ctx.loss, k=1, seed=ctx.settings.measure_seed)


def default_quantities(model: TracedModel) -> tuple[str, ...]:
    """The quantities `measure` computes when none are named: the default ones defined for this model."""
    return tuple(name for name, q in QUANTITIES.items() if q.default(model) and q.applies(model))


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
        setattr(result, name, value)
    if progress:
        progress(1.0)
    return result
