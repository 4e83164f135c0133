"""A model as a function on the Hamming cube: outputs, traces, accuracy and sensitivity.

The model is evaluated once per vertex (in batches, vertex order) and every neighbour is read by
index (`sensviz.cube`), never with one forward pass per (input, bit). Outputs are read on the ±1
scale of the model's target encoding: a Boolean view thresholded at the decision boundary
(`sign`) for the count form of s(f,x), and the real output for the influence form. Above the exact
limit, sampled vertices and their neighbours give Monte Carlo estimates, labelled `exact: false`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import cube
from .base import TracedModel
from .records import Record
from .tasks import ZERO_ONE, TargetEncoding, Task
from .trace import Trace

Progress = Callable[[float], None]
"""A callback that receives the fraction of work done, in [0, 1]."""


def model_outputs(model: TracedModel, bits: torch.Tensor, batch_size: int = 2048) -> torch.Tensor:
    """T(x) for every row of `bits[batch, n]`, in inference mode: float32 `[batch]` on the CPU."""
    device = model.device
    with torch.inference_mode():
        return torch.cat([model(chunk.to(device)).float().cpu() for chunk in bits.split(batch_size)])


def cube_outputs(
    model: TracedModel, n: int, batch_size: int = 2048, progress: Progress | None = None, limit: int = cube.EXACT_LIMIT
) -> torch.Tensor:
    """T(x) for all 2**n vertices in vertex order: float32 `[2**n]` on the CPU."""
    parts = []
    with torch.inference_mode():
        for done, bits in cube.vertex_batches(n, batch_size, model.device, limit):
            if progress:
                progress(done)
            parts.append(model(bits).float().cpu())
    if progress:
        progress(1.0)
    return torch.cat(parts)


def cube_trace(
    model: TracedModel, n: int, batch_size: int = 2048, progress: Progress | None = None, limit: int = 16
) -> Trace:
    """The full `Trace` (outputs, attention, LayerNorm factors) for every vertex, on the CPU.

    Attention for all vertices takes 2**n * layers * heads * n * n floats, hence the lower limit.
    """
    parts = []
    with torch.inference_mode():
        for done, bits in cube.vertex_batches(n, batch_size, model.device, limit):
            if progress:
                progress(done)
            parts.append(model.trace(bits).to("cpu"))
    if progress:
        progress(1.0)
    return Trace.concat(parts)


@dataclass
class AttentionAverage:
    """Attention weights averaged over inputs, overall and by the inputs' Hamming weight."""

    overall: torch.Tensor  # [layer, head, query, key] mean over all inputs
    by_weight: torch.Tensor  # [n+1, layer, head, query, key] mean over inputs of weight w (0 where none)
    counts: torch.Tensor  # [n+1] inputs of each weight that were averaged
    exact: bool  # over the whole cube, or over a seeded uniform sample


def mean_attention(
    model: TracedModel,
    n: int,
    exact_limit: int = 14,
    n_samples: int = 4096,
    seed: int = 0,
    batch_size: int = 2048,
    progress: Progress | None = None,
) -> AttentionAverage:
    """Mean attention over all 2**n inputs when n <= exact_limit, else over `n_samples` seeded
    uniform inputs, overall and grouped by Hamming weight."""
    exact = n <= exact_limit
    bits = cube.vertices(n, limit=exact_limit) if exact else cube.sample(n, n_samples, seed)
    sums = torch.zeros(n + 1, len(model.attention_names()), model.config.n_heads, n, n, dtype=torch.float64)
    counts = torch.zeros(n + 1, dtype=torch.float64)
    chunks = bits.split(batch_size)
    with torch.inference_mode():
        for done, chunk in enumerate(chunks):
            if progress:
                progress(done / len(chunks))
            weights = chunk.sum(dim=1)
            sums.index_add_(0, weights, model.trace(chunk.to(model.device), names=("attention",)).attention.double().cpu())
            counts += torch.bincount(weights, minlength=n + 1).double()
    if progress:
        progress(1.0)
    return AttentionAverage(
        overall=sums.sum(0) / counts.sum(),
        by_weight=sums / counts.clamp(min=1).view(-1, 1, 1, 1, 1),
        counts=counts,
        exact=exact,
    )


def sign_pm1(values_pm1: torch.Tensor) -> torch.Tensor:
    """The Boolean ±1 view: +1 where the value is above 0 (the decision boundary), else -1."""
    return torch.where(values_pm1 > 0, 1.0, -1.0).double()


def accuracy(outputs: torch.Tensor, targets01: torch.Tensor, encoding: TargetEncoding = ZERO_ONE) -> float:
    """Fraction of inputs where the thresholded output equals the {0,1} target."""
    return (encoding.decide(outputs) == targets01.to(outputs.device).float()).float().mean().item()


@dataclass
class SensitivityReport:
    """A model and its target side by side on the cube at input length n.

    `model` is the view the task's decisions use: the output thresholded at the decision
    boundary (±1) for a Boolean task, the real output on the ±1 scale otherwise; `model_real` is
    always the real output (influence form). Exact analyses over the cube when `exact`, else
    Monte Carlo estimates from the same sampled vertices.
    """

    n: int
    exact: bool
    model: cube.CubeAnalysis | cube.CubeEstimate
    model_real: cube.CubeAnalysis | cube.CubeEstimate
    target: cube.CubeAnalysis | cube.CubeEstimate | None
    outputs: torch.Tensor | None  # [2**n] raw outputs in vertex order (exact only)
    targets: torch.Tensor | None  # [2**n] task values in [0,1] in vertex order (exact, task given)
    accuracy: float | None  # over the cube (exact) or the sampled vertices; Boolean tasks only


def sensitivity_report(
    model: TracedModel,
    n: int,
    task: Task | None = None,
    encoding: TargetEncoding = ZERO_ONE,
    exact_limit: int = cube.EXACT_LIMIT,
    n_samples: int = 4096,
    seed: int = 0,
    progress: Progress | None = None,
) -> SensitivityReport:
    """Sensitivity and spectrum of the model and of its task at length n (see `SensitivityReport`)."""
    if task is not None:
        task.check_n(n)
    boolean = task is None or task.boolean
    if n <= exact_limit:
        outputs = cube_outputs(model, n, progress=progress, limit=exact_limit)
        real = cube.analyze(encoding.to_pm1(outputs))
        targets = task.values(n) if task is not None else None
        return SensitivityReport(
            n=n,
            exact=True,
            model=cube.analyze(sign_pm1(encoding.to_pm1(outputs))) if boolean else real,
            model_real=real,
            target=cube.analyze(2.0 * targets.double() - 1.0) if task is not None else None,
            outputs=outputs,
            targets=targets,
            accuracy=accuracy(outputs, targets, encoding) if task is not None and task.boolean else None,
        )
    views = {"real": encoding.to_pm1}
    if boolean:
        views["decided"] = lambda out: sign_pm1(encoding.to_pm1(out))
    estimates = cube.estimate_views(lambda bits: model_outputs(model, bits), n, views, n_samples, seed)
    target = acc = None
    if task is not None:
        target = cube.estimate(lambda bits: 2.0 * task(bits).double() - 1.0, n, n_samples, seed)
        if task.boolean:
            bits = cube.sample(n, n_samples, seed)
            acc = accuracy(model_outputs(model, bits), task(bits), encoding)
    if progress:
        progress(1.0)
    return SensitivityReport(
        n=n,
        exact=False,
        model=estimates.get("decided", estimates["real"]),
        model_real=estimates["real"],
        target=target,
        outputs=None,
        targets=None,
        accuracy=acc,
    )


@dataclass
class SensitivitySummary(Record):
    """A `SensitivityReport` in numbers (JSON): accuracy, as_n of the model and of its task, degree profiles.

    `avg_sensitivity` is the model read as the task decides (thresholded, count form; the real
    output for a real-valued task), `avg_sensitivity_real` its real output on the ±1 scale
    (influence form). Exact: `degree_profile` and `degree_profile_real` over the whole cube;
    sampled: seeded Monte Carlo estimates with their standard errors and no degree profile.
    """

    n: int
    exact: bool
    accuracy: float | None  # Boolean task given
    avg_sensitivity: float
    avg_sensitivity_real: float
    task_avg_sensitivity: float | None
    degree_profile: list | None  # [n+1] d_k of the thresholded model (exact only)
    degree_profile_real: list | None  # [n+1] d_k of the real output (exact only)
    avg_sensitivity_stderr: float | None = None  # sampled only
    avg_sensitivity_real_stderr: float | None = None
    task_avg_sensitivity_stderr: float | None = None
    n_samples: int | None = None
    seed: int | None = None


def sensitivity_summary(report: SensitivityReport, n_samples: int | None = None, seed: int | None = None
                        ) -> SensitivitySummary:
    """The numbers of a report (`n_samples`, `seed`: what the sampled report drew)."""
    exact = report.exact
    target = report.target
    return SensitivitySummary(
        n=report.n,
        exact=exact,
        accuracy=report.accuracy,
        avg_sensitivity=report.model.avg_sensitivity,
        avg_sensitivity_real=report.model_real.avg_sensitivity,
        task_avg_sensitivity=None if target is None else target.avg_sensitivity,
        degree_profile=report.model.degree_profile.tolist() if exact else None,
        degree_profile_real=report.model_real.degree_profile.tolist() if exact else None,
        avg_sensitivity_stderr=None if exact else report.model.stderr,
        avg_sensitivity_real_stderr=None if exact else report.model_real.stderr,
        task_avg_sensitivity_stderr=None if exact or target is None else target.stderr,
        n_samples=None if exact else n_samples,
        seed=None if exact else seed,
    )
