"""Sharpness: how much the model's output moves under small random changes of its parameters.

The paper's average directional sharpness (paper/summary.txt, theta without positional encodings):

    L_{rho,n}(T) = E_x E_{||Delta||_2 = rho} (T_{theta+Delta}(x) - T_theta(x))^2

- `sharpness`: Delta uniform on the sphere of radius rho in R^P (P = number of non-positional
  parameters), K seeded directions, averaged over the given inputs (the cube or a sample).
  Per direction k, m_k = mean_x (T_{theta+Delta_k}(x) - T_theta(x))^2; the value is mean_k m_k and
  its standard error is std_k(m_k) / sqrt(K) (the spread over directions, for the given inputs).
- Its exact small-rho limit, without random directions: since T(theta+Delta) - T(theta) =
  g_x . Delta + O(rho^2) with g_x = grad_theta T(x), and E_Delta (g . Delta)^2 = rho^2 ||g||^2 / P
  for Delta uniform on the sphere, lim_{rho->0} L_rho / rho^2 = E_x ||g_x||^2 / P
  (`sharpness_limit`, from per-example gradients).
- `linearised_sharpness`: the first-order prediction J Delta for the same seeded directions (no
  extra forward pass per direction), and `sharpness_curve`: L_rho / rho^2 over a sweep of rho,
  which tends to the limit as rho shrinks.
- `adaptive_sharpness`: ASAM's (Kwon et al., ICML 2021) perturbation scaled elementwise by |theta|,
  E_x E_{||u||_2 = rho} (T_{theta + |theta| * u}(x) - T_theta(x))^2. If theta' = S theta (S diagonal,
  positive) preserves the function everywhere, theta' + |theta'| * u = S (theta + |theta| * u), so with
  the same u the value is unchanged: invariant to elementwise rescalings (the ReLU-unit map), not
  to the other maps of `sensviz.symmetries`. Small-rho limit: rho^2 E_x ||g_x * theta||^2 / P.
- `sharpness_proxy`: the estimator of the paper's experiments, in loss space: the mean over draws
  of L(theta + Delta) - L(theta) with Delta ~ N(0, eps^2) per non-positional coordinate (eps =
  0.02, or eps = rho / sqrt(P)); about (eps^2 / 2) tr(Hessian of the loss) for small eps. The
  paper's plots show 4x this value for MSE on {0,1} targets (the ±1 scale). Unlike the
  published code, a different seed gives different draws.

Every estimate is evaluated with `functional_call` + `vmap` over directions (`sensviz.params`),
accumulated in float64; the model is never modified. For a model with several outputs per input
(the scratchpad's decoder steps) `steps="all"` averages every estimate over all outputs, as the
authors' code averages its loss over all n steps; `steps="last"` (the default) measures T(x) =
`model(bits)`, the last step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import torch

from .base import TracedModel
from .losses import loss_value
from .params import ParamSpace, chunked, gaussian_directions, make_generator, sphere_directions
from .records import Record, per_input

DIRECTION_BLOCK = 256
"""Directions materialised at once (DIRECTION_BLOCK x P floats)."""


@dataclass
class Sharpness(Record):
    """An estimate of L_{rho,n} over `n_inputs` inputs from `n_directions` directions."""

    value: float  # mean_k m_k, m_k = mean_x (T_{theta+Delta_k}(x) - T_theta(x))^2
    stderr: float  # std_k(m_k) / sqrt(K)
    n_directions: int
    n_inputs: int
    rho: float
    seed: int | None
    limit: float | None  # exact lim_{rho->0} L_rho / rho^2 = E_x ||grad T(x)||^2 / P, if computed
    estimator: str = "exact"  # "exact" (T at theta + Delta), "linearised" (J Delta) or "adaptive" (Delta = |theta| * u)
    steps: str = "last"  # which outputs per input: the last ("last") or every decoder step ("all")
    label: str = ("the paper's sharpness: L_rho = E_x E_{|Delta|=rho} (T_{theta+Delta}(x) - T_theta(x))^2 at this finite "
                  "radius (the theorem bounds it at a fixed radius as n grows)")
    per_direction: torch.Tensor = per_input(default=None)  # [K] m_k, float64


@dataclass
class SharpnessLimit(Record):
    """lim_{rho->0} L_rho / rho^2 = E_x ||grad_theta T(x)||^2 / P, exactly, over the given inputs."""

    value: float
    grad_norm_sq: torch.Tensor = per_input()  # [batch * steps] ||grad_theta T(x)||^2 per output, float64
    n_params: int  # P
    n_inputs: int
    steps: str = "last"
    label: str = ("the first-order part of the sharpness: lim_{rho->0} L_rho / rho^2 = E_x |grad T(x)|^2 / P at this n, "
                  "exact (rho -> 0 before n grows: not the order of limits of the theorem)")


@dataclass
class SharpnessProxy(Record):
    """The paper's experiments' loss-space sharpness: mean_r L(theta + Delta_r) - L(theta)."""

    value: float
    stderr: float  # std over draws / sqrt(n_draws)
    n_draws: int
    n_inputs: int
    eps: float  # std of the Gaussian noise per coordinate
    rho: float  # eps * sqrt(P), the typical ||Delta||
    loss: str
    base_loss: float  # L(theta)
    seed: int | None
    steps: str = "last"  # the loss over the last output per input, or over every decoder step ("all")
    label: str = "loss-space proxy: mean L(theta+Delta) - L(theta), Delta ~ N(0, eps^2) per non-positional coordinate"
    per_draw: torch.Tensor = per_input(default=None)  # [n_draws] float64


def _seed_of(seed) -> int | None:
    return None if isinstance(seed, torch.Generator) else int(seed)


def _mean_and_stderr(samples: torch.Tensor) -> tuple[float, float]:
    count = samples.numel()
    stderr = (samples.std() / math.sqrt(count)).item() if count > 1 else float("nan")
    return samples.mean().item(), stderr


def _check(bits: torch.Tensor, rho: float = 1.0, count: int = 1, what: str = "n_directions") -> None:
    if bits.dim() != 2 or bits.shape[0] < 1:
        raise ValueError(f"bits must have shape [batch, n] with batch >= 1, got {tuple(bits.shape)}")
    if not rho > 0:
        raise ValueError(f"rho must be positive, got {rho}")
    if count < 1:
        raise ValueError(f"{what} must be at least 1, got {count}")


def output_changes(
    space: ParamSpace, bits: torch.Tensor, directions: torch.Tensor, chunk_size: int | None = None
) -> torch.Tensor:
    """T_{theta+Delta_k}(x) - T_theta(x) for `directions[K, P]`: float64 `[K, batch * steps]`."""
    base = space.base_output(bits).double()
    return space.outputs(bits, directions, chunk_size).double() - base


def linear_output_changes(
    space: ParamSpace, bits: torch.Tensor, directions: torch.Tensor, chunk_size: int | None = None
) -> torch.Tensor:
    """The first-order prediction J_x Delta_k of the change, from per-example gradients: float64 `[K, batch * steps]`."""
    parts = space.unflatten(directions.to(space.device, space.base.dtype))  # {name: [K, *shape]}
    columns = []
    for _, grads in space.per_example_gradients(bits, chunk_size):  # J_x Delta = sum over tensors of <grad, Delta>
        columns.append(sum((parts[name].flatten(1) @ g.flatten(1).T).double() for name, g in grads.items()))
    return torch.cat(columns, dim=1)


def _estimate(model, bits, rho, n_directions, seed, changes, estimator: str, steps: str) -> Sharpness:
    """mean_k m_k over K sphere directions drawn in blocks, m_k = mean_x changes(...)^2."""
    _check(bits, rho, n_directions)
    space = ParamSpace(model, steps=steps)
    generator = make_generator(seed)
    parts = []
    for rows in chunked(n_directions, DIRECTION_BLOCK):
        directions = sphere_directions(space.size, rows.stop - rows.start, rho, generator)
        parts.append(changes(space, bits, directions).pow(2).mean(dim=1).cpu())
    per_direction = torch.cat(parts)  # [K] float64
    value, stderr = _mean_and_stderr(per_direction)
    return Sharpness(
        value=value,
        stderr=stderr,
        n_directions=n_directions,
        n_inputs=bits.shape[0],
        rho=rho,
        seed=_seed_of(seed),
        limit=None,
        estimator=estimator,
        steps=steps,
        per_direction=per_direction,
    )


def sharpness(
    model: TracedModel,
    bits: torch.Tensor,
    rho: float = 0.01,
    n_directions: int = 64,
    seed: int | torch.Generator = 0,
    chunk_size: int | None = None,
    limit: bool = True,
    steps: str = "last",
) -> Sharpness:
    """L_{rho,n} on `bits[batch, n]` from `n_directions` seeded directions on the sphere of radius rho.

    With `limit`, also the exact small-rho limit of value / rho^2 (`sharpness_limit`).
    """
    change = lambda space, x, d: output_changes(space, x, d, chunk_size)  # noqa: E731
    estimate = _estimate(model, bits, rho, n_directions, seed, change, "exact", steps)
    if limit:
        estimate.limit = sharpness_limit(model, bits, steps=steps).value
    return estimate


def linearised_sharpness(
    model: TracedModel, bits: torch.Tensor, rho: float = 0.01, n_directions: int = 64, seed: int | torch.Generator = 0,
    steps: str = "last",
) -> Sharpness:
    """mean_k mean_x (J_x Delta_k)^2 for the same directions `sharpness` draws with this seed.

    The first-order approximation of L_rho; its expectation over directions is rho^2 times the
    exact limit. Cost: one pass of per-example gradients per `DIRECTION_BLOCK` directions.
    """
    return _estimate(model, bits, rho, n_directions, seed, linear_output_changes, "linearised", steps)


def adaptive_sharpness(
    model: TracedModel, bits: torch.Tensor, rho: float = 0.01, n_directions: int = 64, seed: int | torch.Generator = 0,
    chunk_size: int | None = None, steps: str = "last",
) -> Sharpness:
    """ASAM's adaptive sharpness: mean_k mean_x (T_{theta + |theta| * u_k}(x) - T_theta(x))^2, u_k the
    seeded directions on the sphere of radius rho that `sharpness` draws (see the module docstring)."""
    def change(space, x, directions):
        return output_changes(space, x, directions * space.base.abs().cpu().to(directions.dtype), chunk_size)
    estimate = _estimate(model, bits, rho, n_directions, seed, change, "adaptive", steps)
    estimate.label = ("adaptive sharpness (ASAM): E_x E_{|u|=rho} (T_{theta+|theta|*u}(x) - T_theta(x))^2, "
                      "invariant to elementwise rescalings of theta only")
    return estimate


def sharpness_limit(model: TracedModel, bits: torch.Tensor, chunk_size: int | None = None,
                    steps: str = "last") -> SharpnessLimit:
    """The exact lim_{rho->0} L_{rho,n} / rho^2 = E_x ||grad_theta T(x)||^2 / P (no random directions);
    with `steps="all"` the mean over every output per input."""
    _check(bits)
    space = ParamSpace(model, steps=steps)
    norms = torch.cat([sum(g.flatten(1).pow(2).sum(dim=1).double() for g in grads.values()).cpu()
                       for _, grads in space.per_example_gradients(bits, chunk_size)])
    return SharpnessLimit(value=norms.mean().item() / space.size, grad_norm_sq=norms, n_params=space.size,
                          n_inputs=bits.shape[0], steps=steps)


def sharpness_curve(
    model: TracedModel,
    bits: torch.Tensor,
    rhos,
    n_directions: int = 64,
    seed: int = 0,
    chunk_size: int | None = None,
    steps: str = "last",
) -> pd.DataFrame:
    """L_rho / rho^2 for each rho, one row per rho, next to the exact limit.

    Every rho uses the same seed, hence the same unit directions scaled by rho, so the curve is
    smooth in rho and its small-rho end tends to the linearised value of those directions.
    Columns: rho, value (L_rho), stderr, ratio (L_rho / rho^2), ratio_stderr, limit.
    """
    exact_limit = sharpness_limit(model, bits, steps=steps).value
    rows = []
    for rho in rhos:
        est = sharpness(model, bits, float(rho), n_directions, seed, chunk_size, limit=False, steps=steps)
        rows.append({
            "rho": est.rho,
            "value": est.value,
            "stderr": est.stderr,
            "ratio": est.value / est.rho**2,
            "ratio_stderr": est.stderr / est.rho**2,
            "limit": exact_limit,
        })
    return pd.DataFrame(rows)


def limit_gap(curve: pd.DataFrame) -> float:
    """How far a curve's smallest-rho estimate lies from the exact small-rho limit, in its standard errors:
    (L_rho - lim * rho^2) / stderr at the smallest rho (columns rho, value, stderr, limit).

    L_rho / rho^2 -> E_x ||grad_theta T(x)||^2 / P as rho -> 0 in expectation over the directions; a curve measured
    with the same directions at every rho tends to those directions' own linearised value, so its gap at a small
    rho is their sampling error, which the standard error measures. NaN where the standard error is 0."""
    row = curve.loc[curve["rho"].idxmin()]
    if not row["stderr"] > 0:  # no spread over the directions (a diverged model's): no distance to state
        return math.nan
    return float((row["value"] - row["limit"] * row["rho"] ** 2) / row["stderr"])


def sharpness_proxy(
    model: TracedModel,
    bits: torch.Tensor,
    targets: torch.Tensor,
    loss: str = "mse",
    eps: float | None = None,
    rho: float | None = None,
    n_draws: int = 10,
    seed: int | torch.Generator = 0,
    chunk_size: int | None = None,
    steps: str = "last",
) -> SharpnessProxy:
    """mean over `n_draws` of L(theta + Delta) - L(theta), Delta ~ N(0, eps^2) per non-positional coordinate.

    Give `eps` (default 0.02, the paper's) or `rho` (then eps = rho / sqrt(P)), not both. `loss`
    is "mse" or "bce" against `targets`: `[batch]`, or with `steps="all"` one target per output
    (`[batch, steps]`, e.g. `model.training_values(task, bits)`; see `sensviz.losses`).
    """
    if eps is not None and rho is not None:
        raise ValueError("give eps or rho, not both")
    _check(bits, count=n_draws, what="n_draws")
    space = ParamSpace(model, steps=steps)
    outputs_per_row = space.base_output(bits[:1]).numel() * bits.shape[0]
    if targets.shape[0] != bits.shape[0] or targets.numel() != outputs_per_row:
        raise ValueError(f"targets must have one value per output ({outputs_per_row} for {bits.shape[0]} inputs), "
                         f"got shape {tuple(targets.shape)}")
    if rho is not None:
        eps = rho / math.sqrt(space.size)
    eps = 0.02 if eps is None else eps
    if not eps > 0:
        raise ValueError(f"eps must be positive, got {eps}")
    targets = targets.to(space.device).double().reshape(-1)
    base_loss = loss_value(space.base_output(bits).double(), targets, loss).item()
    generator = make_generator(seed)
    parts = []
    for rows in chunked(n_draws, DIRECTION_BLOCK):
        noise = gaussian_directions(space.size, rows.stop - rows.start, eps, generator)
        losses = loss_value(space.outputs(bits, noise, chunk_size).double(), targets, loss)  # [draws]
        parts.append((losses - base_loss).cpu())
    per_draw = torch.cat(parts)
    value, stderr = _mean_and_stderr(per_draw)
    return SharpnessProxy(
        value=value,
        stderr=stderr,
        n_draws=n_draws,
        n_inputs=bits.shape[0],
        eps=eps,
        rho=eps * math.sqrt(space.size),
        loss=loss,
        base_loss=base_loss,
        seed=_seed_of(seed),
        steps=steps,
        per_draw=per_draw,
    )
