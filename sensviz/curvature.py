"""Curvature of the loss at the model's parameters: Hessian-vector products, top eigenvalues, trace.

The loss over a dataset (the cube or a sample) as a function of theta, the non-positional
parameters (as for sharpness):

    L(theta) = mean_x loss(T_theta(x), y(x)),      H = d^2 L / d theta^2      [P, P]

- `hvp`: H v by forward-over-reverse differentiation (`torch.func.jvp` of `torch.func.grad`),
  summed over input chunks with weights |chunk| / |dataset|; vmapped over several vectors.
- `top_eigenvalues`: the k algebraically largest eigenvalues and eigenvectors by Lanczos with full
  reorthogonalisation (float64 basis), or by power iteration with deflation (which finds the
  eigenvalues of largest magnitude: the same at a minimum, where H is near positive
  semidefinite). Residuals ||H v - lambda v|| are recomputed with fresh products.
- `hutchinson_trace`: tr H = E_z z^T H z over Rademacher probes z, with its standard error.
- `dense_hessian`: the exact P x P matrix, column by column from vmapped products, for models
  with at most `DENSE_LIMIT` parameters (ground truth for the tests).

For small eps, the paper's loss-space sharpness proxy is about (eps^2 / 2) tr H.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.func import grad, jvp, vmap

from .base import TracedModel
from .losses import check_loss, loss_value
from .params import CHUNK_SIZE, ParamSpace, chunked, make_generator
from .records import Record, per_input

DENSE_LIMIT = 5000
"""Largest number of parameters for `dense_hessian` (P^2 float64 = 200 MB at the limit)."""


class LossHessian:
    """The Hessian of the mean loss over `bits`, `targets` as a linear operator on R^P."""

    def __init__(
        self,
        model: TracedModel,
        bits: torch.Tensor,
        targets: torch.Tensor,
        loss: str = "mse",
        dtype: torch.dtype | None = None,
        chunk_size: int = CHUNK_SIZE,
    ):
        check_loss(loss)
        if bits.dim() != 2 or bits.shape[0] < 1:
            raise ValueError(f"bits must have shape [batch, n] with batch >= 1, got {tuple(bits.shape)}")
        if targets.shape != bits.shape[:1]:
            raise ValueError(f"targets must have shape [{bits.shape[0]}], got {tuple(targets.shape)}")
        self.space = ParamSpace(model, dtype=dtype)
        self.bits = bits.to(self.space.device)
        self.targets = targets.to(self.space.device, self.space.base.dtype)
        self.loss = loss
        self.chunks = list(chunked(bits.shape[0], chunk_size))

    @property
    def size(self) -> int:
        return self.space.size

    def _chunk_loss(self, flat: torch.Tensor, rows: slice) -> torch.Tensor:
        return loss_value(self.space.output(flat, self.bits[rows]), self.targets[rows], self.loss)

    def _hvp_one(self, vector: torch.Tensor) -> torch.Tensor:
        total = torch.zeros_like(self.space.base)
        for rows in self.chunks:
            weight = (rows.stop - rows.start) / self.bits.shape[0]
            gradient = grad(lambda flat: self._chunk_loss(flat, rows))
            total = total + weight * jvp(gradient, (self.space.base,), (vector,))[1]
        return total

    def matvec(self, vectors: torch.Tensor, batch: int = 16) -> torch.Tensor:
        """H v for `vectors[P]` or `vectors[m, P]` (vmapped `batch` at a time), in the space's dtype."""
        vectors = vectors.to(self.space.device, self.space.base.dtype)
        if vectors.dim() == 1:
            return self._hvp_one(vectors)
        product = vmap(self._hvp_one)
        return torch.cat([product(vectors[rows]) for rows in chunked(vectors.shape[0], batch)])


def hvp(model, bits, targets, vectors, loss: str = "mse", dtype=None) -> torch.Tensor:
    """Hessian-vector products H v of the mean loss, for `vectors[P]` or `vectors[m, P]`."""
    return LossHessian(model, bits, targets, loss, dtype).matvec(vectors)


@dataclass
class Eigen(Record):
    """Top eigenpairs of the loss Hessian from an iterative method."""

    values: torch.Tensor  # [k] float64, largest first
    vectors: torch.Tensor = per_input()  # [k, P] float64, unit norm
    residuals: torch.Tensor = None  # [k] ||H v - lambda v||, recomputed
    n_matvecs: int = 0
    method: str = "lanczos"
    converged: bool = True


def _lanczos(op: LossHessian, k: int, n_iter: int, tol: float, generator) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Ritz values/vectors after at most n_iter steps, stopping once the top k estimated residuals
    are below tol * |lambda|. Returns (values [k], vectors [k, P], steps)."""
    size = op.size
    q = torch.randn(size, generator=generator, dtype=torch.float64)
    basis = [q / q.norm()]
    alphas, betas = [], []
    for step in range(min(n_iter, size)):
        w = op.matvec(basis[-1]).double().cpu()
        alphas.append(torch.dot(w, basis[-1]).item())
        stacked = torch.stack(basis)  # [j, P]
        for _ in range(2):  # full reorthogonalisation, twice for stability
            w = w - stacked.T @ (stacked @ w)
        beta = w.norm().item()
        ritz, vecs = _tridiagonal_eig(alphas, betas)
        top = min(k, len(alphas))
        estimated = [abs(beta * vecs[-1, i].item()) for i in range(top)]
        done = top == k and all(r <= tol * max(abs(v), 1e-30) for r, v in zip(estimated, ritz[:k].tolist()))
        if done or beta < 1e-12 or step + 1 == min(n_iter, size):
            break
        betas.append(beta)
        basis.append(w / beta)
    stacked = torch.stack(basis)  # [m, P]
    return ritz[:top], (vecs[:, :top].T @ stacked), len(alphas)


def _tridiagonal_eig(alphas: list[float], betas: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenpairs of the Lanczos tridiagonal matrix, largest eigenvalue first."""
    m = len(alphas)
    t = torch.diag(torch.tensor(alphas, dtype=torch.float64))
    if m > 1:
        off = torch.tensor(betas[: m - 1], dtype=torch.float64)
        t += torch.diag(off, 1) + torch.diag(off, -1)
    values, vectors = torch.linalg.eigh(t)
    return values.flip(0), vectors.flip(1)


def _power(op: LossHessian, k: int, n_iter: int, tol: float, generator) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Power iteration with deflation against the pairs already found."""
    values, vectors, steps = [], [], 0
    for _ in range(k):
        v = torch.randn(op.size, generator=generator, dtype=torch.float64)
        v /= v.norm()
        value = 0.0
        for _ in range(n_iter):
            hv = op.matvec(v).double().cpu() - sum(lam * u * torch.dot(u, v) for lam, u in zip(values, vectors))
            steps += 1
            value = torch.dot(v, hv).item()
            if (hv - value * v).norm().item() <= tol * max(abs(value), 1e-30):
                break
            v = hv / hv.norm()
        values.append(value)
        vectors.append(v)
    return torch.tensor(values, dtype=torch.float64), torch.stack(vectors), steps


def top_eigenvalues(
    model: TracedModel,
    bits: torch.Tensor,
    targets: torch.Tensor,
    loss: str = "mse",
    k: int = 1,
    method: str = "lanczos",
    n_iter: int | None = None,
    tol: float = 1e-6,
    seed: int | torch.Generator = 0,
    dtype: torch.dtype | None = None,
) -> Eigen:
    """The k largest Hessian eigenvalues of the mean loss over `bits`, with eigenvectors and residuals.

    `method`: "lanczos" (default n_iter max(3k + 20, 30) steps, full reorthogonalisation) or
    "power" (default 200 steps per eigenvalue, deflation). Stops early when every residual estimate
    is below `tol` * |lambda|; `converged` reports whether the recomputed residuals meet 100 * tol.
    The start vectors come from `seed`.
    """
    if method not in ("lanczos", "power"):
        raise ValueError(f"method must be 'lanczos' or 'power', got '{method}'")
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    op = LossHessian(model, bits, targets, loss, dtype)
    if k > op.size:
        raise ValueError(f"k={k} is more than the {op.size} parameters")
    generator = make_generator(seed)
    if method == "lanczos":
        values, vectors, steps = _lanczos(op, k, n_iter or max(3 * k + 20, 30), tol, generator)
    else:
        values, vectors, steps = _power(op, k, n_iter or 200, tol, generator)
    vectors = vectors / vectors.norm(dim=1, keepdim=True)
    products = op.matvec(vectors).double().cpu()
    residuals = (products - values.unsqueeze(1) * vectors).norm(dim=1)
    converged = bool((residuals <= 100 * tol * values.abs().clamp(min=1e-30)).all())
    return Eigen(values, vectors, residuals, steps + len(values), method, converged)


@dataclass
class TraceEstimate(Record):
    """Hutchinson's estimate of tr H."""

    value: float
    stderr: float  # std over probes / sqrt(n_probes)
    n_probes: int
    seed: int | None


def hutchinson_trace(
    model: TracedModel,
    bits: torch.Tensor,
    targets: torch.Tensor,
    loss: str = "mse",
    n_probes: int = 64,
    seed: int | torch.Generator = 0,
    dtype: torch.dtype | None = None,
) -> TraceEstimate:
    """tr H ~ mean_z z^T H z over `n_probes` seeded Rademacher vectors z, with its standard error."""
    if n_probes < 2:
        raise ValueError("Hutchinson's estimate needs at least 2 probes")
    op = LossHessian(model, bits, targets, loss, dtype)
    generator = make_generator(seed)
    probes = torch.randint(0, 2, (n_probes, op.size), generator=generator).double() * 2 - 1  # [m, P]
    quadratic = (op.matvec(probes).double().cpu() * probes).sum(dim=1)  # [m] z^T H z
    return TraceEstimate(
        value=quadratic.mean().item(),
        stderr=(quadratic.std() / math.sqrt(n_probes)).item(),
        n_probes=n_probes,
        seed=None if isinstance(seed, torch.Generator) else int(seed),
    )


def dense_hessian(
    model: TracedModel, bits: torch.Tensor, targets: torch.Tensor, loss: str = "mse", dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """The exact Hessian of the mean loss: `[P, P]` in `dtype` (float64 by default), P <= DENSE_LIMIT."""
    op = LossHessian(model, bits, targets, loss, dtype)
    if op.size > DENSE_LIMIT:
        raise ValueError(
            f"the dense Hessian is for models with at most {DENSE_LIMIT} parameters; this one has {op.size}: "
            "use top_eigenvalues or hutchinson_trace"
        )
    identity = torch.eye(op.size, dtype=op.space.base.dtype, device=op.space.device)
    return op.matvec(identity, batch=64)
