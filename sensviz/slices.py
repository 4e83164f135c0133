"""Loss slices: the loss (and the output on one input) along one or two directions in parameter space.

    L(alpha)       = mean_x loss(T_{theta + alpha d1}(x), y(x))                1-D
    L(alpha, beta) = mean_x loss(T_{theta + alpha d1 + beta d2}(x), y(x))      2-D

on a grid alpha, beta in [-span, span] (or given values). Directions, over every parameter
(positional encodings get 0 from the random and Hessian directions, and move on the line between
two models):

- random (`random_directions`, seeded), a Gaussian per parameter tensor, then rescaled:
  * "filter" (filter normalisation, Li et al. 2018, "Visualizing the loss landscape of neural
    nets"): every row of a weight tensor (all indices but the last: an output unit of a linear
    map, a token's embedding, one head's row of a formal K/Q/V) is scaled to the norm of the same
    row of the parameter. A 1-D tensor (a bias, a LayerNorm gain, the formal read-out) counts as
    a single filter and is scaled to the norm of the whole tensor;
  * "layer": each parameter tensor scaled to the norm of the parameter tensor;
  * "none": no per-tensor scaling; the whole direction has unit norm, so alpha is the Euclidean
    distance ||Delta|| in parameter space;
  `skip_bias_ln=True` sets the direction to 0 on biases and LayerNorm parameters;
- the top Hessian eigenvectors of the loss (`hessian_directions`, unit norm, `sensviz.curvature`);
- the straight line to another model of the same architecture and config (`line_direction`:
  d1 = theta_other - theta, so alpha = 1 is the other model).

Grid points are evaluated with `functional_call` + `vmap` in chunks (`sensviz.params`); the centre
alpha = beta = 0 is exactly theta, so it equals the model's own loss. Results are tidy pandas
DataFrames with columns alpha[, beta], loss, accuracy (or output).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from .base import LayerNorm, TracedModel
from .curvature import top_eigenvalues
from .losses import check_loss, loss_value
from .params import ParamSpace, chunked, make_generator
from .tasks import ZERO_ONE, TargetEncoding

NORMALIZATIONS = ("filter", "layer", "none")
GRID_BLOCK = 256
"""Grid points whose parameter offsets are materialised at once (GRID_BLOCK x P floats)."""


def bias_and_ln_names(model: TracedModel) -> set[str]:
    """Names of the biases and of every LayerNorm parameter."""
    norms = {name for name, m in model.named_modules() if isinstance(m, LayerNorm)}
    return {
        name for name, _ in model.named_parameters() if name.endswith("bias") or name.rsplit(".", 1)[0] in norms
    }


def _rescaled(direction: torch.Tensor, param: torch.Tensor, normalization: str) -> torch.Tensor:
    if normalization == "layer" or param.dim() <= 1:
        return direction * (param.norm() / direction.norm().clamp(min=1e-30))
    rows, prows = direction.reshape(-1, direction.shape[-1]), param.reshape(-1, param.shape[-1])
    scale = prows.norm(dim=1, keepdim=True) / rows.norm(dim=1, keepdim=True).clamp(min=1e-30)
    return (rows * scale).reshape(direction.shape)


def random_directions(
    model: TracedModel,
    count: int = 1,
    normalization: str = "filter",
    skip_bias_ln: bool = False,
    seed: int | torch.Generator = 0,
) -> torch.Tensor:
    """`count` seeded Gaussian directions, normalised (see the module docstring): `[count, P_all]`.

    P_all counts every parameter (`ParamSpace(model, positional=True)`); positional entries are 0.
    """
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got '{normalization}'")
    space = ParamSpace(model, positional=True)
    generator = make_generator(seed)
    skipped = bias_and_ln_names(model) if skip_bias_ln else set()
    theta = model.non_positional_parameters()
    rows = []
    for _ in range(count):
        parts = {}
        for name, param in theta.items():
            direction = torch.randn(param.shape, generator=generator)
            if name in skipped:
                continue
            param = param.detach().cpu()
            parts[name] = direction if normalization == "none" else _rescaled(direction, param, normalization)
        flat = space.flatten({k: v.to(space.device) for k, v in parts.items()})
        rows.append(flat / flat.norm().clamp(min=1e-30) if normalization == "none" else flat)
    return torch.stack(rows)


def hessian_directions(
    model: TracedModel, bits: torch.Tensor, targets: torch.Tensor, loss: str = "mse", count: int = 1, seed: int = 0
) -> torch.Tensor:
    """The top `count` Hessian eigenvectors of the mean loss (unit norm, Lanczos): `[count, P_all]`."""
    eigen = top_eigenvalues(model, bits, targets, loss, k=count, seed=seed)
    theta, space = ParamSpace(model), ParamSpace(model, positional=True)
    return torch.stack([space.flatten(theta.unflatten(v.to(theta.base))) for v in eigen.vectors])


def line_direction(model: TracedModel, other: TracedModel) -> torch.Tensor:
    """theta_other - theta over every parameter: `[1, P_all]` (alpha = 1 reaches `other`)."""
    if model.arch != other.arch or model.config != other.config:
        raise ValueError(
            f"the line between two models needs the same architecture and config; got {model.arch} "
            f"{model.config} and {other.arch} {other.config}"
        )
    mine, theirs = ParamSpace(model, positional=True), ParamSpace(other, positional=True)
    return (theirs.base.to(mine.base) - mine.base).unsqueeze(0)


def grid(span: float = 1.0, steps: int = 21) -> torch.Tensor:
    """`steps` evenly spaced values from -span to span, float64; the middle one (odd steps) is exactly 0."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    if steps == 1:
        return torch.zeros(1, dtype=torch.float64)
    return span * (torch.arange(steps, dtype=torch.float64) * 2 / (steps - 1) - 1)


def _grid_points(directions: torch.Tensor, alphas, betas) -> tuple[pd.DataFrame, torch.Tensor]:
    """The grid as a DataFrame (alpha[, beta]) and its coefficients `[points, n_directions]`."""
    if directions.dim() != 2 or directions.shape[0] not in (1, 2):
        raise ValueError(f"give one or two directions as a [1 or 2, P] tensor, got {tuple(directions.shape)}")
    alphas = torch.as_tensor(alphas, dtype=torch.float64).flatten()
    if directions.shape[0] == 1:
        return pd.DataFrame({"alpha": alphas.numpy()}), alphas.unsqueeze(1)
    betas = alphas if betas is None else torch.as_tensor(betas, dtype=torch.float64).flatten()
    a, b = torch.meshgrid(alphas, betas, indexing="ij")
    coeffs = torch.stack([a.reshape(-1), b.reshape(-1)], dim=1)
    return pd.DataFrame({"alpha": coeffs[:, 0].numpy(), "beta": coeffs[:, 1].numpy()}), coeffs


def _grid_outputs(model, bits, directions, alphas, betas, span, steps, chunk_size):
    """The grid (alpha[, beta]; `grid(span, steps)` unless `alphas` is given) and T at
    theta + sum_j coeffs[p, j] directions[j] for every grid point p: `(frame, outputs[points, batch])`."""
    frame, coeffs = _grid_points(directions, grid(span, steps) if alphas is None else alphas, betas)
    space = ParamSpace(model, positional=True)
    directions = directions.to(space.device, torch.float64)
    if directions.shape[1] != space.size:
        raise ValueError(f"directions have {directions.shape[1]} entries; this model has {space.size} parameters")
    parts = []
    for rows in chunked(coeffs.shape[0], GRID_BLOCK):
        offsets = (coeffs[rows].to(space.device) @ directions).to(space.base.dtype)  # [block, P]
        parts.append(space.outputs(bits, offsets, chunk_size))
    return frame, torch.cat(parts)


def loss_slice(
    model: TracedModel,
    bits: torch.Tensor,
    targets: torch.Tensor,
    directions: torch.Tensor,
    loss: str = "mse",
    encoding: TargetEncoding = ZERO_ONE,
    alphas=None,
    betas=None,
    span: float = 1.0,
    steps: int = 21,
    chunk_size: int | None = None,
) -> pd.DataFrame:
    """The mean loss and accuracy over `bits`, `targets` on a 1-D or 2-D grid along `directions[1|2, P_all]`.

    The grid is `alphas` (and `betas`, default the same) or `grid(span, steps)`. Accuracy is the
    fraction of inputs where the thresholded output equals the thresholded target under
    `encoding` (meaningless for a real-valued task). Columns: alpha[, beta], loss, accuracy.
    """
    check_loss(loss, encoding)
    if targets.shape != bits.shape[:1]:
        raise ValueError(f"targets must have shape [{bits.shape[0]}], got {tuple(targets.shape)}")
    frame, outputs = _grid_outputs(model, bits, directions, alphas, betas, span, steps, chunk_size)
    outputs = outputs.double()  # [points, batch]
    targets = targets.to(outputs.device).double()
    frame["loss"] = loss_value(outputs, targets, loss).cpu().numpy()
    frame["accuracy"] = (encoding.decide(outputs) == encoding.decide(targets)).double().mean(dim=1).cpu().numpy()
    return frame


def output_slice(
    model: TracedModel,
    x: torch.Tensor,
    directions: torch.Tensor,
    alphas=None,
    betas=None,
    span: float = 1.0,
    steps: int = 21,
    chunk_size: int | None = None,
) -> pd.DataFrame:
    """T(x) on one input `x[n]` along `directions[1|2, P_all]`. Columns: alpha[, beta], output."""
    if x.dim() != 1:
        raise ValueError(f"x must be one bit string of shape [n], got {tuple(x.shape)}")
    frame, outputs = _grid_outputs(model, x.unsqueeze(0), directions, alphas, betas, span, steps, chunk_size)
    frame["output"] = outputs[:, 0].double().cpu().numpy()
    return frame


def contour_segments(frame: pd.DataFrame, value: str = "loss", levels: int = 8) -> pd.DataFrame:
    """Contour lines of a 2-D slice by marching squares: one row per segment.

    `frame` has columns alpha, beta and `value` on a full regular grid (as `loss_slice` returns).
    Levels are evenly spaced between the smallest and largest value (both excluded); each grid
    cell contributes the segments where the level crosses its edges, by linear interpolation.
    Columns: level, alpha, beta, alpha2, beta2.
    """
    table = frame.pivot(index="alpha", columns="beta", values=value).sort_index().sort_index(axis=1)
    z = table.to_numpy(dtype=float)
    xs, ys = table.index.to_numpy(dtype=float), table.columns.to_numpy(dtype=float)
    finite = z[np.isfinite(z)]
    if finite.size == 0 or finite.min() == finite.max():
        return pd.DataFrame(columns=["level", "alpha", "beta", "alpha2", "beta2"])
    rows = []
    for level in np.linspace(finite.min(), finite.max(), levels + 2)[1:-1]:
        for i in range(len(xs) - 1):
            for j in range(len(ys) - 1):
                corners = [(xs[i], ys[j], z[i, j]), (xs[i + 1], ys[j], z[i + 1, j]),
                           (xs[i + 1], ys[j + 1], z[i + 1, j + 1]), (xs[i], ys[j + 1], z[i, j + 1])]
                points = []
                for (x1, y1, v1), (x2, y2, v2) in zip(corners, corners[1:] + corners[:1]):
                    if np.isfinite(v1) and np.isfinite(v2) and (v1 - level) * (v2 - level) < 0:
                        t = (level - v1) / (v2 - v1)
                        points.append((x1 + t * (x2 - x1), y1 + t * (y2 - y1)))
                for (a1, b1), (a2, b2) in zip(points[::2], points[1::2]):  # 2 or 4 crossings per cell
                    rows.append({"level": level, "alpha": a1, "beta": b1, "alpha2": a2, "beta2": b2})
    return pd.DataFrame(rows, columns=["level", "alpha", "beta", "alpha2", "beta2"])
