"""A model as a function on the Hamming cube: outputs, traces, accuracy and sensitivity.

The model is evaluated once per vertex (in batches, vertex order) and every neighbour is read by
index (`sensviz.cube`), never with one forward pass per (input, bit). Outputs are read on the ±1
scale of the model's target encoding: a Boolean view thresholded at the decision boundary
(`sign`) for the count form of s(f,x), and the real output for the influence form. Above the exact
limit, sampled vertices and their neighbours give Monte Carlo estimates, labelled `exact: false`.
"""

from __future__ import annotations

from typing import Callable

import torch

from . import cube
from .tasks import ZERO_ONE, Task, TargetEncoding
from .trace import Trace, TracedModel

Progress = Callable[[float], None]
"""A callback that receives the fraction of work done, in [0, 1]."""


def _vertex_batches(n: int, batch_size: int, device):
    total = 2**n
    for start in range(0, total, batch_size):
        index = torch.arange(start, min(start + batch_size, total), device=device)
        yield start / total, cube.vertex_bits(index, n)


def model_outputs(model: TracedModel, bits: torch.Tensor, batch_size: int = 8192) -> torch.Tensor:
    """T(x) for every row of `bits[batch, n]`, in inference mode: float32 `[batch]` on the CPU."""
    device = model.device
    with torch.inference_mode():
        return torch.cat([model(chunk.to(device)).float().cpu() for chunk in bits.split(batch_size)])


def cube_outputs(
    model: TracedModel, n: int, batch_size: int = 8192, progress: Progress | None = None, limit: int = cube.EXACT_LIMIT
) -> torch.Tensor:
    """T(x) for all 2**n vertices in vertex order: float32 `[2**n]` on the CPU."""
    cube._check_n(n, limit)
    parts = []
    with torch.inference_mode():
        for done, bits in _vertex_batches(n, batch_size, model.device):
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
    cube._check_n(n, limit)
    parts = []
    with torch.inference_mode():
        for done, bits in _vertex_batches(n, batch_size, model.device):
            if progress:
                progress(done)
            parts.append(model.trace(bits).to("cpu"))
    if progress:
        progress(1.0)
    return Trace.concat(parts)


def sign_pm1(values_pm1: torch.Tensor) -> torch.Tensor:
    """The Boolean ±1 view: +1 where the value is above 0 (the decision boundary), else -1."""
    return torch.where(values_pm1 > 0, 1.0, -1.0).double()


def accuracy(outputs: torch.Tensor, targets01: torch.Tensor, encoding: TargetEncoding = ZERO_ONE) -> float:
    """Fraction of inputs where the thresholded output equals the {0,1} target."""
    return (encoding.decide(outputs) == targets01.to(outputs.device).float()).float().mean().item()


def inspect_model(
    model: TracedModel,
    n: int,
    task: Task | None = None,
    encoding: TargetEncoding = ZERO_ONE,
    exact_limit: int = cube.EXACT_LIMIT,
    n_samples: int = 4096,
    seed: int = 0,
    progress: Progress | None = None,
) -> dict:
    """The model's summary at input length n (JSON-compatible).

    Keys: `n_params` (non-positional), `param_norm`, `accuracy` (Boolean task given),
    `avg_sensitivity` (the model thresholded at the decision boundary, count form; for a
    real-valued task the real output), `avg_sensitivity_real` (influence form of the ±1-scale
    output), `degree_profile` (of the function `avg_sensitivity` describes; exact only),
    `task_avg_sensitivity`, and `exact`; estimates add `stderr`, `stderr_real` and `n_samples`.
    """
    boolean = task is None or task.boolean
    result = {"n": n, "n_params": model.n_params(), "param_norm": model.param_norm()}
    if n <= exact_limit:
        outputs = cube_outputs(model, n, progress=progress, limit=exact_limit)
        real = cube.analyze(encoding.to_pm1(outputs))
        decided = cube.analyze(sign_pm1(encoding.to_pm1(outputs))) if boolean else real
        result.update(
            avg_sensitivity=decided.avg_sensitivity,
            avg_sensitivity_real=real.avg_sensitivity,
            degree_profile=decided.degree_profile.tolist(),
            exact=True,
        )
        if task is not None:
            targets = task.values(n)
            result["task_avg_sensitivity"] = cube.analyze(2.0 * targets.double() - 1.0).avg_sensitivity
            if task.boolean:
                result["accuracy"] = accuracy(outputs, targets, encoding)
        return result

    views = {"real": encoding.to_pm1}
    if boolean:
        views["decided"] = lambda out: sign_pm1(encoding.to_pm1(out))
    estimates = cube.estimate_views(lambda bits: model_outputs(model, bits), n, views, n_samples, seed)
    real, decided = estimates["real"], estimates.get("decided", estimates["real"])
    result.update(
        avg_sensitivity=decided.avg_sensitivity,
        stderr=decided.stderr,
        avg_sensitivity_real=real.avg_sensitivity,
        stderr_real=real.stderr,
        degree_profile=None,
        n_samples=n_samples,
        exact=False,
    )
    if task is not None:
        target = cube.estimate(lambda bits: 2.0 * task(bits).double() - 1.0, n, n_samples, seed)
        result["task_avg_sensitivity"] = target.avg_sensitivity
        if task.boolean:
            bits = cube.sample(n, n_samples, seed)
            result["accuracy"] = accuracy(model_outputs(model, bits), task(bits), encoding)
    return result
