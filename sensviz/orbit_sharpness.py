"""Symmetry-aware sharpness: the least L_rho over a bounded part of the model's orbit, directions fixed.

The paper's L_{rho,n} = E_x E_{|Delta|=rho} (T_{theta+Delta}(x) - T_theta(x))^2 changes under the
function-preserving maps of `sensviz.symmetries` while T does not (Dinh et al., 2017). A measure
of the function has to be a function of the orbit {g theta}. Here

    L^sym_{rho,kappa} = min_{m = 0..M} L_rho(h_m c(theta); Delta_1..Delta_K)

- c(theta) = `symmetries.canonical(theta)`, the orbit's minimum-norm representative with its
  orthogonal freedom fixed: theta and g theta reach the same point, so what follows depends on the
  orbit only, not on which of its members the model is;
- h_0 = identity, h_1..h_M seeded random compositions of every exact map (`symmetries.EXACT`) with
  each factor's condition number <= kappa (the bounded part of the orbit, measured from c(theta));
- Delta_1..Delta_K the same K seeded directions for every candidate (common random numbers), so the
  minimum compares the orbit's points, not Monte-Carlo noise.

The minimum is over M + 1 sampled points, not the infimum over the whole ball: an upper bound on
it. Cost: M + 1 evaluations of L_rho plus the canonical map and the maps' output checks. For the
encoder and the scratchpad (where the maps are; `steps` as in `sharpness`). Hide & Seek's geodesic
sharpness is not implemented.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import TracedModel
from .records import Record, per_input
from .sharpness import sharpness
from .symmetries import EXACT, apply, canonical


@dataclass
class OrbitSharpness(Record):
    """min over the sampled orbit points of L_rho with fixed directions (see the module docstring)."""

    value: float  # min_m L_rho(h_m c(theta))
    stderr: float  # the minimising point's stderr over directions
    best: int  # which candidate (0: the canonical point)
    n_orbit: int  # M, random orbit points besides the canonical one
    kappa: float  # bound on every factor's condition number
    n_directions: int
    n_inputs: int
    rho: float
    seed: int
    label: str = ("symmetry-aware sharpness: min of L_rho over the canonical point and M random points of its "
                  "orbit (factors' condition number <= kappa), directions fixed; a function of the orbit")
    candidates: torch.Tensor = per_input(default=None)  # [M + 1] L_rho at each candidate, float64


def orbit_sharpness(model: TracedModel, bits: torch.Tensor, rho: float = 0.01, n_directions: int = 64,
                    seed: int = 0, kappa: float = 10.0, n_orbit: int = 6, steps: str = "last") -> OrbitSharpness:
    """L^sym_{rho,kappa} on `bits[batch, n]`: candidates c(theta) and h_m c(theta), m = 1..n_orbit
    (map seeds seed + m), each with the directions of `sharpness(..., seed)`."""
    if n_orbit < 0:
        raise ValueError(f"n_orbit must be >= 0, got {n_orbit}")
    n = bits.shape[1]
    base = canonical(model, n=n)
    points = [base] + [apply(base, EXACT, kappa, seed=seed + m, n=n) for m in range(1, n_orbit + 1)]
    estimates = [sharpness(p, bits, rho, n_directions, seed, limit=False, steps=steps) for p in points]
    values = torch.tensor([e.value for e in estimates], dtype=torch.float64)
    best = int(values.argmin())
    return OrbitSharpness(value=estimates[best].value, stderr=estimates[best].stderr, best=best, n_orbit=n_orbit,
                          kappa=kappa, n_directions=n_directions, n_inputs=bits.shape[0], rho=rho, seed=seed,
                          candidates=values)
