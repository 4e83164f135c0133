"""The model before training: what M random initialisations of one architecture compute on the cube.

For an architecture, its sizes, an input length n and an init scale s, `init_study` builds M
models (initialisation m uses `seed + m`, PyTorch's default initialisation as `build_model` gives
it, then every parameter except the LayerNorm gains and biases multiplied by s), stacks their
parameters (`torch.func.stack_module_state`) and evaluates all of them on every vertex of the
Hamming cube {0,1}^n in one vmapped forward pass per chunk of models (`torch.func.functional_call`
under `torch.func.vmap`). Per initialisation it reports, exactly over the whole cube:

- the scale-free Boolean function f(x) = +1 if T(x) > m else -1, with m the (lower) median of T
  over the 2^n vertices. The raw output T(x) has no fixed scale at initialisation (its size moves
  with s and the width), so every sensitivity here is of this sign function, never of T itself;
  without ties at m, f is balanced (half the vertices each sign), so d_0 = 0;
- its average sensitivity (paper/summary.txt)
      as_n(f) = 2^-n sum_x s(f,x),   s(f,x) = sum_{i=1}^n [f(x) != f(x^{⊕i})],
  from 0 (a constant) to n (PARITY); a uniformly random Boolean function has as_n = n/2;
- the minimum sensitivity over inputs, min_x s(f,x);
- the Fourier degree profile d_k = sum_{|P|=k} lambda_P^2, lambda_P = 2^-n sum_x f(x) chi_P(x),
  from the fast Walsh–Hadamard transform (`sensviz.cube.fwht`); sum_k d_k = 1 for ±1-valued f and
  as_n(f) = sum_k k d_k;
- the attention entropy: -sum_j â_ij log â_ij averaged over inputs, layers, heads and query
  positions i, divided by log n (1: every head attends uniformly; 0: each query reads one key).

On the CPU, chunks of models share one vmapped call while a model's cube is small (n = 6, d = 32: 0.22 CPU s
for 256 inits against 0.31 for a loop); from n = 10 at d = 32 one model's cube is work enough and each model
gets its plain forward pass (`batched_outputs`).

The target's as_n, minimum sensitivity and degree profile sit beside them (`task`).
`scale_free_view` gives the same quantities for one model, so the training monitor can trace them
(the `scale_free` quantity of `sensviz.measure`) from the initialisation band onwards.
`looped_outputs` is the reference the batched evaluation is tested and benchmarked against: one
ordinary forward pass (`model.trace`) per model. Sizes are checked against the named limits below
before anything is allocated (the parameter count on the `meta` device, which allocates nothing).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch

from . import cube
from .base import TracedModel
from .hooks import capture, hook_names
from .limits import Limit, check_float, check_int
from .models import ModelSettings
from .records import Record, per_input
from .tasks import Task, get_task

INITS = Limit("inits", 1, 4096, "random initialisations of one study")
STUDY_N = Limit("init_n", 2, 16, "input length of an initialisation study (every vertex of the cube is evaluated)")
EVALUATIONS = Limit("init_evaluations", 2, 2**24, "forward evaluations of one study: initialisations x 2^n")
STACKED_PARAMS = Limit("init_params", 1, 2**27, "parameters of all initialisations together (512 MiB as float32)")
INIT_SCALE = Limit("init_scale", 0.0, 100.0, "factor on every initial parameter but the LayerNorms'", open_low=True)
INIT_SCALES = (0.5, 1.0, 2.0)
"""The init scales a study reports by default: half, PyTorch's default, twice."""
ARCHS = ("encoder", "formal")
"""The architectures a study takes (the scratchpad's decoder reads more than the cube)."""
_CHUNK_ELEMENTS = 2**19
"""Activations (models x vertices x positions x width) in one vmapped call: 2 MiB as float32, so the working
set stays in a core's cache. CPU seconds on one thread (2026-12-05, d = 32, 2 layers, 256 inits; 2^19 / 2^20 /
2^21 elements, and a loop of plain forward passes): n = 6 0.22 / 0.24 / 0.29, loop 0.31; n = 8 0.87 / 0.93 /
1.09, loop 0.88 (48 inits at n = 10: 1.09 / 1.21 / 1.31, loop 0.96: from n = 10 one model's 2^n inputs are work
enough, and a vmapped call, one model a call, costs about 13 % more than the plain pass)."""


@dataclass
class InitStudy(Record):
    """M initialisations of one architecture at one init scale, each analysed on the whole cube."""

    arch: str
    d_model: int
    n_layers: int
    n_heads: int
    n: int
    init_scale: float
    n_inits: int  # M
    seed: int  # initialisation m uses seed + m
    avg_sensitivity: torch.Tensor  # [M] as_n(f) of f = sign(T - median T)
    min_sensitivity: torch.Tensor  # [M] min_x s(f,x)
    degree_profile: torch.Tensor  # [M, n+1] d_k of f
    attention_entropy: torch.Tensor  # [M] mean attention entropy / log n
    task: str | None  # the target's label
    target_avg_sensitivity: float | None  # as_n of the target (±1 scale)
    target_min_sensitivity: float | None
    target_degree_profile: torch.Tensor | None  # [n+1]
    outputs: torch.Tensor = per_input()  # [M, 2**n] raw T(x) in vertex order

    def summary(self) -> dict:
        """Mean, standard deviation and 5/50/95 % quantiles of each per-initialisation quantity, the mean
        degree profile, and the target's values: a short JSON form."""
        def spread(values: torch.Tensor) -> dict:
            v = values.double()
            q = torch.quantile(v, torch.tensor([0.05, 0.5, 0.95], dtype=torch.float64)).tolist()
            return {"mean": v.mean().item(), "std": v.std().item(), "q05": q[0], "median": q[1], "q95": q[2]}

        return {"arch": self.arch, "d_model": self.d_model, "n_layers": self.n_layers, "n_heads": self.n_heads,
                "n": self.n, "init_scale": self.init_scale, "n_inits": self.n_inits, "seed": self.seed,
                "avg_sensitivity": spread(self.avg_sensitivity), "min_sensitivity": spread(self.min_sensitivity),
                "attention_entropy": spread(self.attention_entropy),
                "degree_profile_mean": self.degree_profile.mean(dim=0).tolist(), "task": self.task,
                "target_avg_sensitivity": self.target_avg_sensitivity,
                "target_min_sensitivity": self.target_min_sensitivity,
                "target_degree_profile": None if self.target_degree_profile is None else
                self.target_degree_profile.tolist()}


def check_study(settings: ModelSettings, n: int, n_inits: int, init_scale: float, seed: int) -> None:
    """Raise ValueError (one line naming the limit) for a study too large or malformed, before any allocation."""
    if settings.arch not in ARCHS:
        raise ValueError(f"an initialisation study takes the {' or '.join(ARCHS)} architecture, got '{settings.arch}'")
    check_int("n", n, STUDY_N)
    check_int("inits", n_inits, INITS)
    check_int("inits x 2^n", n_inits * 2**n, EVALUATIONS)
    check_float("init_scale", init_scale, INIT_SCALE)
    check_int("seed", seed)
    check_int("seed + inits - 1", seed + n_inits - 1, "seed")
    with torch.device("meta"):  # the parameter count without allocating a parameter
        params = settings.build(n).n_params(positional=True)
    check_int("inits x parameters", n_inits * params, STACKED_PARAMS)


def init_models(settings: ModelSettings, n: int, n_inits: int, init_scale: float = 1.0, seed: int = 0,
                dtype: torch.dtype = torch.float32) -> list[TracedModel]:
    """M freshly initialised models: model m built with seed `seed + m`, every parameter but the
    LayerNorms' gains and biases multiplied by `init_scale`, cast to `dtype`."""
    check_study(settings, n, n_inits, init_scale, seed)
    return [scale_init(settings.build(n, seed=seed + m).to(dtype).eval(), init_scale) for m in range(n_inits)]


def scale_init(model: TracedModel, init_scale: float) -> TracedModel:
    """The model with every parameter but the LayerNorms' gains and biases multiplied by `init_scale`, in place."""
    norms = {id(p) for _, ln in model.layernorms() for p in ln.parameters()}
    with torch.no_grad():
        for p in model.parameters():
            if id(p) not in norms:
                p.mul_(init_scale)
    return model


def _entropy(patterns: list[torch.Tensor], n: int) -> torch.Tensor:
    """Mean over layers, batch, heads and queries of -sum_j â_ij log â_ij / log n; patterns [batch, head, query, key].

    A weight of 0 counts 0 (p log p -> 0): its log is taken at the smallest normal float, so 0 times it is 0
    (three times faster on the CPU than `torch.special.xlogy`, which gives the same numbers)."""
    per_layer = [-(p * p.clamp_min(torch.finfo(p.dtype).tiny).log()).sum(dim=-1).mean() for p in patterns]
    return torch.stack(per_layer).mean() / math.log(n)


def batched_outputs(models: list[TracedModel], bits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """T(x) of every model on `bits[batch, n]` and its attention entropy: `([M, batch], [M])`.

    The models' parameters are stacked and run through one vmapped `functional_call` per chunk of
    models; attention patterns are captured by the hook points inside the vmapped function. When one
    model's activations fill a chunk (`_CHUNK_ELEMENTS`; n = 10 at d = 32), each model gets its plain
    forward pass instead (`looped_outputs`): a vmapped call of one model costs more than the plain pass."""
    config = models[0].config
    n = bits.shape[1]
    per_model = bits.shape[0] * n * max(config.d_model, config.d_ff, config.n_heads * n)  # largest activation
    chunk = _CHUNK_ELEMENTS // per_model
    if chunk <= 1:
        return looped_outputs(models, bits)
    view = copy.deepcopy(models[0])
    names = hook_names(view, "hook_pattern")

    def one(params, buffers):
        with capture(view, names) as cache:
            output = torch.func.functional_call(view, (params, buffers), (bits,))
        return output, _entropy([cache[name] for name in names], n)

    outputs, entropies = [], []
    with torch.no_grad():
        for start in range(0, len(models), chunk):
            params, buffers = torch.func.stack_module_state(models[start : start + chunk])
            out, ent = torch.func.vmap(one)(params, buffers)
            outputs.append(out)
            entropies.append(ent)
    return torch.cat(outputs), torch.cat(entropies)


def looped_outputs(models: list[TracedModel], bits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference of `batched_outputs`: one ordinary traced forward pass per model, `([M, batch], [M])`."""
    outputs, entropies = [], []
    n = bits.shape[1]
    with torch.no_grad():
        for model in models:
            trace = model.trace(bits, names=("attention",))  # attention [batch, layer, head, query, key]
            outputs.append(trace.output)
            entropies.append(_entropy(list(trace.attention.unbind(dim=1)), n))
    return torch.stack(outputs), torch.stack(entropies)


def scale_free(outputs: torch.Tensor) -> torch.Tensor:
    """f(x) = +1 if T(x) > m else -1, m the lower median of each row over the cube: `[M, 2**n]` float64."""
    median = outputs.median(dim=1, keepdim=True).values
    return torch.where(outputs > median, 1.0, -1.0).double()


def function_profile(tables: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """as_n, min_x s(f,x) and the degree profile of each ±1 table `[M, 2**n]`: `([M], [M], [M, n+1])`."""
    sens = torch.stack([cube.sensitivity(table, form="count") for table in tables])  # [M, 2**n]
    profiles = torch.stack([cube.degree_profile(table) for table in tables])  # [M, n+1]
    return sens.mean(dim=1), sens.min(dim=1).values, profiles


@dataclass
class ScaleFreeView(Record):
    """The study's quantities for one model (an initialisation, or a model in training)."""

    avg_sensitivity: float  # as_n(f) of f = sign(T - median T)
    min_sensitivity: float  # min_x s(f,x)
    degree_profile: torch.Tensor  # [n+1] d_k of f
    attention_entropy: float  # mean attention entropy / log n


def scale_free_view(model: TracedModel, n: int) -> ScaleFreeView:
    """What `init_study` reports per initialisation, for one model on the whole cube at length n
    (the `scale_free` quantity of `sensviz.measure`, so the training monitor traces the same numbers)."""
    if model.arch not in ARCHS:
        raise ValueError(f"the scale-free view takes the {' or '.join(ARCHS)} architecture, got '{model.arch}'")
    check_int("n", n, STUDY_N)
    outputs, entropy = looped_outputs([model], cube.vertices(n, device=model.device))
    avg, low, profile = function_profile(scale_free(outputs.cpu()))
    return ScaleFreeView(avg_sensitivity=avg.item(), min_sensitivity=low.item(), degree_profile=profile[0],
                         attention_entropy=entropy.item())


def init_study(settings: ModelSettings, n: int, n_inits: int, init_scale: float = 1.0, seed: int = 0,
               task: Task | str | None = None, dtype: torch.dtype = torch.float32, batched: bool = True) -> InitStudy:
    """The study of `n_inits` initialisations (see the module docstring); `batched=False` evaluates
    them one forward pass per model (`looped_outputs`), for comparison."""
    task = None if task is None else get_task(task)
    if task is not None:
        task.check_n(n)
    models = init_models(settings, n, n_inits, init_scale, seed, dtype)
    bits = cube.vertices(n)
    outputs, entropy = (batched_outputs if batched else looped_outputs)(models, bits)
    avg, low, profile = function_profile(scale_free(outputs))
    target = cube.analyze(task.values_pm1(n)) if task is not None else None
    config = models[0].config
    return InitStudy(
        arch=settings.arch, d_model=config.d_model, n_layers=config.n_layers, n_heads=config.n_heads, n=n,
        init_scale=float(init_scale), n_inits=n_inits, seed=seed, avg_sensitivity=avg, min_sensitivity=low,
        degree_profile=profile, attention_entropy=entropy.double(), task=None if task is None else task.label,
        target_avg_sensitivity=None if target is None else target.avg_sensitivity,
        target_min_sensitivity=None if target is None else target.sensitivity.min().item(),
        target_degree_profile=None if target is None else target.degree_profile, outputs=outputs)


def init_studies(settings: ModelSettings, n: int, n_inits: int, scales=INIT_SCALES, seed: int = 0,
                 task: Task | str | None = None) -> list[InitStudy]:
    """One study per init scale (the same seeds at every scale)."""
    return [init_study(settings, n, n_inits, scale, seed, task) for scale in scales]
