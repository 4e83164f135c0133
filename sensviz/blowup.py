"""LayerNorm blowup and the paper's norm/blowup trade-off.

Definitions (paper/summary.txt), for LayerNorm k (layer-major, as in `Trace`) and position w:

    N_w^(k)(x)   = 1 / sqrt(sigma^2(Y_w^(k)) + eps)            `ln_factor` (population variance, the LN's eps)
    tau^(k)(x)   = max_w (1 + N_w^(k)(x))                        `tau`
    Blowup(x)    = prod_k tau^(k)(x)                              `blowup`

The trade-off: with C the (unknown) constant of the theorem, for the function f a transformer
computes at input length n, H heads,

    C * E_x[Blowup(x)^2]  >=  as_n(f) / sqrt(n log n) - H / n      (natural log)

`tradeoff` returns param_norm, E[Blowup^2] and the right-hand side for the task, so that models
can be plotted against the bound (C is not known, so only the shape of the relation is testable).

Compatibility mode (`authors_aggregates`): the numbers the paper's published code logs, so that
they can be compared with this code's: per LayerNorm input and position 1 / std with Bessel's
correction and no eps, i.e. 1 / sqrt(sigma^2 d / (d - 1)); in the last layer only the last
position counts; per example the product and the sum over LNs of the per-LN mean and of the per-LN
max over positions, then the mean over examples; per LN the mean over examples and positions
("mean") and the mean over examples of the max over positions ("max"). Their plotted "blowup" is
the mean product of maxima, without the "1 +" of tau. Their scratchpad figure (Fig. 11) plots it per
stack instead (`stack_products`, averaged in `BlowupSummary.authors` as `encoder_maxs_prod` and
`decoder_maxs_prod`): the encoder's and the decoder's products separately, each over its layers'
norm1 and norm2 (the decoder's norm3 and the stacks' final norms are not counted), where `blowup`
multiplies all twelve LayerNorms of a two-layer scratchpad model.

Summaries over the cube are exact up to the exact limit (traces in vertex batches, attention
dropped batch by batch); above it they use a seeded uniform sample, labelled `exact: False`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch

from . import cube
from .base import TracedModel
from .records import Record, per_input
from .settings import STACKS  # noqa: F401  (defined torch-free, re-exported)
from .tasks import Task
from .trace import Trace

QUANTILES = (0.5, 0.9, 0.99)
AUTHORS_LABEL = (
    "compatibility mode: the aggregates of the paper's published code (1/std with Bessel's correction, "
    "no eps, no '1 +'; last layer at the last position only; mean over examples)"
)


def tau(trace: Trace) -> torch.Tensor:
    """tau^(k)(x) = max_w (1 + N_w^(k)(x)): float64 `[batch, ln]`."""
    return 1.0 + trace.ln_factor.double().amax(dim=-1)


def log_blowup(trace: Trace) -> torch.Tensor:
    """log Blowup(x) = sum_k log tau^(k)(x): float64 `[batch]` (finite even where Blowup overflows)."""
    return tau(trace).log().sum(dim=-1)


def blowup(trace: Trace) -> torch.Tensor:
    """Blowup(x) = prod_k tau^(k)(x): float64 `[batch]`."""
    return tau(trace).prod(dim=-1)


def authors_inv_std(trace: Trace) -> list[torch.Tensor]:
    """The published code's 1 / std per LN: a list over LNs of float64 `[batch, counted positions]`.

    std is Bessel-corrected without eps, 1/sqrt(var * d/(d-1)); LNs of the last layer keep only
    the last position.
    """
    d = trace.d_model
    inv_std = (trace.ln_variance.double() * (d / (d - 1))).rsqrt()  # [batch, ln, position]
    last_layer = _last_layer_names(trace.ln_names)
    return [inv_std[:, k, -1:] if name in last_layer else inv_std[:, k] for k, name in enumerate(trace.ln_names)]


def _last_layer_names(ln_names: tuple[str, ...]) -> set[str]:
    """The LNs of the last layer: names sharing the last LN's prefix up to its final component."""
    prefix = ln_names[-1].rsplit(".", 1)[0]
    return {name for name in ln_names if name.rsplit(".", 1)[0] == prefix}


def authors_per_example(trace: Trace) -> dict[str, torch.Tensor]:
    """Per-example aggregates of the published code: `{key: float64 [batch]}` and per-LN `[batch, ln]`.

    Keys: `maxs_prod` (their plotted blowup), `means_prod`, `maxs_sum`, `means_sum`,
    `ln_mean` (mean over counted positions), `ln_max` (max over counted positions); for the
    scratchpad model also `encoder_maxs_prod` and `decoder_maxs_prod` (`stack_products`).
    """
    per_ln = authors_inv_std(trace)
    means = torch.stack([v.mean(dim=1) for v in per_ln], dim=1)  # [batch, ln]
    maxs = torch.stack([v.amax(dim=1) for v in per_ln], dim=1)  # [batch, ln]
    found = {
        "maxs_prod": maxs.prod(dim=1),
        "means_prod": means.prod(dim=1),
        "maxs_sum": maxs.sum(dim=1),
        "means_sum": means.sum(dim=1),
        "ln_mean": means,
        "ln_max": maxs,
    }
    if all(_stack_norms(trace.ln_names, stack) for stack in STACKS):
        found.update({f"{stack}_maxs_prod": product for stack, product in stack_products(trace.ln_names, maxs).items()})
    return found


def _stack_norms(ln_names: tuple[str, ...], stack: str) -> list[int]:
    """The indices of a stack's layers' norm1 and norm2 among `ln_names`."""
    return [k for k, name in enumerate(ln_names) if re.fullmatch(rf"model\.{stack}\.layers\.\d+\.norm[12]", name)]


def stack_products(ln_names: tuple[str, ...], maxs: torch.Tensor) -> dict[str, torch.Tensor]:
    """The scratchpad's blowup per stack as the authors plot it: per example, for each stack, the
    product over its layers' norm1 and norm2 of `maxs` (`[batch, ln]`: the max over positions of the
    published code's 1/std, `authors_inv_std`; every position counts in the scratchpad model, whose
    encoder positions are all read by cross-attention and decoder positions by the head at every
    step): `{"encoder": float64 [batch], "decoder": float64 [batch]}`. ValueError for a model
    without both stacks."""
    out = {}
    for stack in STACKS:
        picked = _stack_norms(ln_names, stack)
        if not picked:
            raise ValueError(f"no {stack} layers' norm1/norm2 in this model's LayerNorms: the per-stack blowup is the "
                             "scratchpad model's")
        out[stack] = maxs[:, picked].prod(dim=1)
    return out


@dataclass
class BlowupSummary(Record):
    """Blowup over the cube (exact) or a seeded sample, with the published code's aggregates."""

    n: int
    exact: bool
    n_inputs: int
    seed: int | None  # the sample's seed (None when exact)
    mean: float  # E_x Blowup(x)
    mean_sq: float  # E_x Blowup(x)^2
    max: float  # max_x Blowup(x) (over the sample when not exact)
    log_mean: float  # E_x log Blowup(x)
    stderr: dict  # standard errors of mean, mean_sq, log_mean (sampled only, else None)
    quantiles: dict  # {q: quantile of Blowup}
    per_ln: list  # [{name, eps, mean (E_x mean_w N), max (max_x max_w N), tau_mean (E_x tau)}]
    authors: dict  # the published code's aggregates (means over examples), labelled
    values: torch.Tensor = per_input()  # [n_inputs] Blowup(x), vertex order when exact
    factors: torch.Tensor | None = per_input(default=None)  # [n_inputs, ln, position] N (keep_factors)


def _input_batches(n: int, exact: bool, n_samples: int, seed: int, batch_size: int, device):
    if exact:
        yield from cube.vertex_batches(n, batch_size, device, limit=n)
        return
    bits = cube.sample(n, n_samples, seed, device)
    for start in range(0, n_samples, batch_size):
        yield start / n_samples, bits[start : start + batch_size]


def blowup_summary(
    model: TracedModel,
    n: int,
    exact_limit: int = cube.EXACT_LIMIT,
    n_samples: int = 4096,
    seed: int = 0,
    batch_size: int = 2048,
    progress=None,
    keep_factors: bool = False,
) -> BlowupSummary:
    """Blowup and LN-factor statistics of `model` at input length n (see the module docstring).

    With `keep_factors`, the summary also holds every input's N factors (float32), for distributions.
    """
    exact = n <= exact_limit
    if not exact and n_samples < 2:
        raise ValueError("a sampled summary needs at least 2 samples")
    parts, names, eps = [], (), ()
    with torch.inference_mode():
        for done, bits in _input_batches(n, exact, n_samples, seed, batch_size, model.device):
            if progress:
                progress(done)
            trace = model.trace(bits, names=("ln",))
            factor = trace.ln_factor.double()  # [batch, ln, position]
            per_example = {"tau": tau(trace), "ln_mean": factor.mean(dim=2), "ln_max": factor.amax(dim=2)}
            if keep_factors:
                per_example["factors"] = trace.ln_factor.float()
            per_example.update({f"authors_{k}": v for k, v in authors_per_example(trace).items()})
            parts.append({k: v.cpu() for k, v in per_example.items()})
            names, eps = trace.ln_names, trace.ln_eps
    if progress:
        progress(1.0)
    per_example = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    taus = per_example["tau"]  # [inputs, ln]
    values, logs = taus.prod(dim=1), taus.log().sum(dim=1)
    count = values.numel()
    root = math.sqrt(count)
    return BlowupSummary(
        n=n,
        exact=exact,
        n_inputs=count,
        seed=None if exact else seed,
        mean=values.mean().item(),
        mean_sq=values.pow(2).mean().item(),
        max=values.max().item(),
        log_mean=logs.mean().item(),
        stderr={
            "mean": None if exact else (values.std() / root).item(),
            "mean_sq": None if exact else (values.pow(2).std() / root).item(),
            "log_mean": None if exact else (logs.std() / root).item(),
        },
        quantiles={q: torch.quantile(values, q).item() for q in QUANTILES},
        per_ln=[
            {"name": name, "eps": e, "mean": mean.item(), "max": peak.item(), "tau_mean": t.item()}
            for name, e, mean, peak, t in zip(
                names, eps, per_example["ln_mean"].mean(dim=0), per_example["ln_max"].amax(dim=0), taus.mean(dim=0)
            )
        ],
        authors=_authors_summary({k[8:]: v for k, v in per_example.items() if k.startswith("authors_")}, names),
        values=values,
        factors=per_example.get("factors"),
    )


def _authors_summary(per_example: dict[str, torch.Tensor], names: tuple[str, ...]) -> dict:
    """Means over examples of the published code's per-example aggregates, labelled."""
    result = {"label": AUTHORS_LABEL}
    result.update({k: per_example[k].mean().item() for k in ("maxs_prod", "means_prod", "maxs_sum", "means_sum",
                                                             "encoder_maxs_prod", "decoder_maxs_prod") if k in per_example})
    means, maxs = per_example["ln_mean"].mean(dim=0), per_example["ln_max"].mean(dim=0)
    result["per_ln"] = {name: {"mean": a.item(), "max": b.item()} for name, a, b in zip(names, means, maxs)}
    return result


def bound_rhs(avg_sensitivity: float, n: int, n_heads: int) -> float:
    """The trade-off's right-hand side as_n(f) / sqrt(n log n) - H / n (n >= 2, natural log)."""
    if n < 2:
        raise ValueError(f"the bound needs n >= 2 (log n > 0), got n={n}")
    return avg_sensitivity / math.sqrt(n * math.log(n)) - n_heads / n


@dataclass
class Tradeoff(Record):
    """The paper's norm/blowup trade-off for one model and task at length n.

    The bound reads C * E[Blowup^2] >= bound_rhs with C unknown: plot models against it.
    """

    n: int
    n_heads: int
    param_norm: float  # ||theta|| without positional encodings
    blowup_mean_sq: float  # E_x Blowup(x)^2
    log_blowup_mean: float  # E_x log Blowup(x)
    task_avg_sensitivity: float  # as_n(f), exact or a seeded estimate
    task_avg_sensitivity_stderr: float | None  # sampled only
    bound_rhs: float  # as_n / sqrt(n log n) - H / n
    exact: bool
    bound: str = "C * E[Blowup^2] >= as_n(f) / sqrt(n log n) - H / n, C unknown"


def tradeoff(
    model: TracedModel,
    task: Task,
    n: int,
    exact_limit: int = cube.EXACT_LIMIT,
    n_samples: int = 4096,
    seed: int = 0,
    summary: BlowupSummary | None = None,
) -> Tradeoff:
    """The `Tradeoff` of `model` on `task` at length n; pass a `summary` already computed for this
    model and n to reuse it."""
    task.check_n(n)
    if summary is None:
        summary = blowup_summary(model, n, exact_limit, n_samples, seed)
    elif summary.n != n:
        raise ValueError(f"the blowup summary is for n={summary.n}, not n={n}")
    if n <= exact_limit:
        as_n, stderr = cube.analyze(task.values_pm1(n)).avg_sensitivity, None
    else:
        est = cube.estimate(lambda bits: 2.0 * task(bits).double() - 1.0, n, n_samples, seed)
        as_n, stderr = est.avg_sensitivity, est.stderr
    n_heads = model.config.n_heads
    return Tradeoff(n=n, n_heads=n_heads, param_norm=model.param_norm(), blowup_mean_sq=summary.mean_sq,
                    log_blowup_mean=summary.log_mean, task_avg_sensitivity=as_n, task_avg_sensitivity_stderr=stderr,
                    bound_rhs=bound_rhs(as_n, n, n_heads), exact=summary.exact and n <= exact_limit)
