"""Function-preserving maps of the `encoder`: theta -> g(theta) with T_{g(theta)}(x) = T_theta(x) for every x.

Dinh et al. (2017): such a map can change a sharpness measure at will while the function stays the
same. Each map below acts on the parameters in the code's layout (`sensviz.encoder`: per layer
`h @ in_proj_weight.T + in_proj_bias`, rows [0:d] queries, [d:2d] keys, [2d:3d] values, head h
rows h*dh:(h+1)*dh of each; `out_proj` reads the heads' values concatenated, head h its columns
h*dh:(h+1)*dh). Derivations (q, k, v a head's query, key, value at one position):

- `qk`: W_Q -> A^T W_Q, b_Q -> A^T b_Q, W_K -> A^{-1} W_K, b_K -> A^{-1} b_K per head (A in GL(dh)).
  q' = A^T q, k' = A^{-1} k, so the score q'^T k' = q^T A A^{-1} k = q^T k: exact.
- `vo`: W_V -> B^T W_V, b_V -> B^T b_V, W_O[:, head] -> W_O[:, head] B^{-T} per head.
  v' = B^T v, and W_O B^{-T} (sum_j a_ij B^T v_j) = W_O sum_j a_ij v_j: exact.
- `relu`: per feed-forward unit j, linear1's row j and bias j times c_j > 0, linear2's column j
  divided by c_j. relu(c z) = c relu(z) for c > 0, so W2[:, j] / c_j * c_j relu(z_j) is unchanged: exact.
- `head_norm`: the last layer's norm2 gamma, beta times alpha > 0 and linear_head.weight / alpha.
  The head reads w^T (alpha y) / alpha = w^T y; exact because there is no final LayerNorm (the
  scratchpad: its decoder's final LayerNorm, and the memory map below with its own alpha).
- `bias_shift`: c 1 added to out_proj.bias (it feeds norm1 through the residual sum) and to
  linear2.bias (it feeds norm2). LayerNorm subtracts the mean: (Y + c 1) - mean(Y + c 1) = Y - mean(Y): exact.
- `norm1_scale` (eps-limited): a layer's norm1 gamma, beta times alpha, linear1's and linear2's
  biases times alpha. norm1's output h -> alpha h; W1 alpha h + alpha b1 = alpha (W1 h + b1), relu is
  positively homogeneous, W2 alpha r + alpha b2 = alpha (W2 r + b2), so norm2 reads alpha (h + ff).
- `norm2_scale` (eps-limited): a layer's norm2 gamma, beta times alpha, the next layer's W_Q, W_K
  divided by alpha, its b_V and out_proj.bias times alpha: q, k unchanged, v' = alpha v, the
  attention output and the residual both scale by alpha, so the next norm1 reads alpha Y.
  For both: LayerNorm(alpha Y) = (Y - mean Y) / sqrt(var Y + eps / alpha^2), not LayerNorm(Y) =
  (Y - mean Y) / sqrt(var Y + eps): equal only up to LayerNorm's eps = 1e-5, i.e. when var Y >> eps.
  Their random draws take alpha >= 1 (eps's share shrinks), where the check holds unless var Y is
  near eps (a model with LayerNorm blowup: then the check refuses them).

Sizes. A map of size kappa draws every factor with singular values in [kappa^{-1/2}, kappa^{1/2}]
(matrices A = U diag(s) V^T with U, V random orthogonal; scalars c, alpha), so each factor's
condition number is at most kappa; a bias shift c is uniform in [-kappa^{1/2}, kappa^{1/2}]; draws
are seeded. A `Symmetry` is a name, a transform of the float64 parameter dict in place, and whether
it is eps-limited; make your own with given factors (`stretch` is one).

`apply(model, symmetry, kappa, seed)` transforms a float64 copy, checks the outputs on all 2^n
inputs (n <= 14; above, a fixed sample of 4096) — max_x |T'(x) - T(x)| <= rtol * max_x |T(x)|,
rtol = 1e-5 — and returns the copy in the model's dtype, or raises `SymmetryError` naming the map.
`canonical` is the orbit's minimum-norm representative under the exact maps (see its docstring).

The scratchpad (`layout`): qk and vo on every attention module (the encoder's, the decoder's causal
self-attention — the mask does not touch the scores' values — and the cross-attention, whose
queries read the decoder and keys the encoder: q'^T k' = q^T k all the same), relu on every
feed-forward block, bias_shift on every bias before a LayerNorm (out_proj.bias of each attention,
linear2.bias), head_norm on the decoder's final LayerNorm and the head, and the memory map: the
encoder's final LayerNorm gamma, beta times alpha with every cross-attention's W_K and W_V divided by
alpha (exact, no LayerNorm in between). The eps-limited maps are the encoder's only.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import cube
from .base import TracedModel
from .encoder import EncoderTransformer, SelfAttention
from .params import make_generator
from .scratchpad import ScratchpadTransformer

Theta = dict[str, torch.Tensor]
EXACT_CHECK_LIMIT = 14
"""Largest n whose 2^n inputs the check enumerates; above it, `CHECK_SAMPLE` seeded strings."""
CHECK_SAMPLE = 4096
RTOL = 1e-5


class SymmetryError(ValueError):
    """A map changed the model's outputs beyond the tolerance."""


@dataclass(frozen=True)
class Layout:
    """Where the maps act in a model's parameter names (`layout(model)`)."""

    arch: str
    d_model: int
    n_heads: int
    d_ff: int
    n_layers: int
    attention: tuple[str, ...]  # every attention module's prefix, e.g. "encoders.layers.0.self_attn."
    feed_forward: tuple[str, ...]  # every layer with linear1 and linear2, e.g. "encoders.layers.0."
    head_norm: str  # the LayerNorm that linear_head reads
    memory_norm: str | None  # scratchpad: the encoder's final LayerNorm, read by every cross-attention's K and V
    cross_attention: tuple[str, ...]  # scratchpad: the cross-attention modules


def layout(model: TracedModel) -> Layout:
    """The encoder's or the scratchpad's layout; other architectures have no maps here."""
    if not isinstance(model, (EncoderTransformer, ScratchpadTransformer)):
        raise ValueError(f"function-preserving maps are implemented for the encoder and the scratchpad, not {model.arch}")
    c = model.config
    attention = tuple(f"{name}." for name, m in model.named_modules() if isinstance(m, SelfAttention))
    feed_forward = tuple(f"{name}." for name, m in model.named_modules() if hasattr(m, "linear1") and hasattr(m, "linear2"))
    if isinstance(model, EncoderTransformer):
        return Layout("encoder", c.d_model, c.n_heads, c.d_ff, c.n_layers, attention, feed_forward,
                      f"encoders.layers.{c.n_layers - 1}.norm2.", None, ())
    cross = tuple(a for a in attention if a.endswith("multihead_attn."))
    return Layout("scratchpad", c.d_model, c.n_heads, c.d_ff, c.n_layers, attention, feed_forward, "model.decoder.norm.",
                  "model.encoder.norm.", cross)


@dataclass(frozen=True)
class Symmetry:
    """A function-preserving map: `transform(theta, layout, kappa, generator)` edits the float64 dict in place."""

    name: str
    transform: Callable[[Theta, Layout, float, torch.Generator], None]
    eps_limited: bool = False


def _layer(i: int) -> str:
    return f"encoders.layers.{i}."


def _log_uniform(count: int, kappa: float, generator: torch.Generator, low: float = -1.0) -> torch.Tensor:
    """`count` factors kappa^{t/2}, t uniform in [low, 1]: float64 `[count]`."""
    t = low + (1 - low) * torch.rand(count, generator=generator, dtype=torch.float64)
    return kappa ** (t / 2)


def _orthogonal(dim: int, generator: torch.Generator) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(dim, dim, generator=generator, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r))


def random_factor(dim: int, kappa: float, generator: torch.Generator) -> torch.Tensor:
    """A = U diag(s) V^T, s in [kappa^{-1/2}, kappa^{1/2}]: float64 `[dim, dim]`, cond(A) <= kappa."""
    return _orthogonal(dim, generator) @ torch.diag(_log_uniform(dim, kappa, generator)) @ _orthogonal(dim, generator).T


def _heads(where: Layout):
    """(attention prefix, head h's rows, d) for every head of every attention module."""
    d, dh = where.d_model, where.d_model // where.n_heads
    for prefix in where.attention:
        for h in range(where.n_heads):
            yield prefix, slice(h * dh, (h + 1) * dh), d


def scale_qk(theta: Theta, prefix: str, rows: slice, d: int, a: torch.Tensor) -> None:
    """One head: W_Q -> A^T W_Q, b_Q -> A^T b_Q, W_K -> A^{-1} W_K, b_K -> A^{-1} b_K."""
    w, b = theta[prefix + "in_proj_weight"], theta[prefix + "in_proj_bias"]
    q = slice(rows.start, rows.stop)
    k = slice(d + rows.start, d + rows.stop)
    w[q], b[q] = a.T @ w[q], a.T @ b[q]
    w[k], b[k] = torch.linalg.solve(a, w[k]), torch.linalg.solve(a, b[k])


def scale_vo(theta: Theta, prefix: str, rows: slice, d: int, b_: torch.Tensor) -> None:
    """One head: W_V -> B^T W_V, b_V -> B^T b_V, out_proj columns W_O -> W_O B^{-T}."""
    w, b = theta[prefix + "in_proj_weight"], theta[prefix + "in_proj_bias"]
    v = slice(2 * d + rows.start, 2 * d + rows.stop)
    w[v], b[v] = b_.T @ w[v], b_.T @ b[v]
    out = theta[prefix + "out_proj.weight"]
    out[:, rows] = torch.linalg.solve(b_, out[:, rows].T).T


def scale_relu(theta: Theta, prefix: str, c: torch.Tensor) -> None:
    """Unit j: linear1's row j and bias j times c_j, linear2's column j divided by c_j (c > 0)."""
    theta[prefix + "linear1.weight"] *= c[:, None]
    theta[prefix + "linear1.bias"] *= c
    theta[prefix + "linear2.weight"] /= c[None, :]


def scale_head_norm(theta: Theta, where: Layout, alpha: float) -> None:
    """The LayerNorm read by the head: gamma, beta times alpha; linear_head.weight / alpha."""
    theta[where.head_norm + "weight"] *= alpha
    theta[where.head_norm + "bias"] *= alpha
    theta["linear_head.weight"] /= alpha


def scale_memory_norm(theta: Theta, where: Layout, alpha: float) -> None:
    """Scratchpad: the encoder's final LayerNorm gamma, beta times alpha; every cross-attention's W_K and
    W_V divided by alpha (k = W_K (alpha m) / alpha + b_K, the same for v): exact."""
    theta[where.memory_norm + "weight"] *= alpha
    theta[where.memory_norm + "bias"] *= alpha
    for prefix in where.cross_attention:
        theta[prefix + "in_proj_weight"][where.d_model:] /= alpha


def _ln_fed_biases(where: Layout) -> list[str]:
    """The biases added right before a LayerNorm: every attention's out_proj.bias, every linear2.bias."""
    return [p + "out_proj.bias" for p in where.attention] + [p + "linear2.bias" for p in where.feed_forward]


def _random_qk(theta, where, kappa, generator):
    for prefix, rows, d in _heads(where):
        scale_qk(theta, prefix, rows, d, random_factor(rows.stop - rows.start, kappa, generator))


def _random_vo(theta, where, kappa, generator):
    for prefix, rows, d in _heads(where):
        scale_vo(theta, prefix, rows, d, random_factor(rows.stop - rows.start, kappa, generator))


def _random_relu(theta, where, kappa, generator):
    for prefix in where.feed_forward:
        scale_relu(theta, prefix, _log_uniform(where.d_ff, kappa, generator))


def _random_head_norm(theta, where, kappa, generator):
    scale_head_norm(theta, where, _log_uniform(1, kappa, generator).item())
    if where.memory_norm:
        scale_memory_norm(theta, where, _log_uniform(1, kappa, generator).item())


def _random_bias_shift(theta, where, kappa, generator):
    for name in _ln_fed_biases(where):
        theta[name] += ((torch.rand(1, generator=generator, dtype=torch.float64) * 2 - 1) * math.sqrt(kappa)).item()


def _encoder_only(where: Layout, name: str) -> None:
    if where.arch != "encoder":
        raise ValueError(f"map '{name}' is written for the encoder only, not the {where.arch}")


def _random_norm1(theta, where, kappa, generator):
    _encoder_only(where, "norm1_scale")
    for i in range(where.n_layers):
        alpha, prefix = _log_uniform(1, kappa, generator, low=0.0).item(), _layer(i)
        for name in ("norm1.weight", "norm1.bias", "linear1.bias", "linear2.bias"):
            theta[prefix + name] *= alpha


def _random_norm2(theta, where, kappa, generator):
    _encoder_only(where, "norm2_scale")
    d = where.d_model
    for i in range(where.n_layers - 1):  # the last layer's norm2 feeds the head: `head_norm`, exact
        alpha, prefix, nxt = _log_uniform(1, kappa, generator, low=0.0).item(), _layer(i), _layer(i + 1)
        theta[prefix + "norm2.weight"] *= alpha
        theta[prefix + "norm2.bias"] *= alpha
        theta[nxt + "self_attn.in_proj_weight"][: 2 * d] /= alpha
        theta[nxt + "self_attn.in_proj_bias"][2 * d:] *= alpha
        theta[nxt + "self_attn.out_proj.bias"] *= alpha


MAPS: dict[str, Symmetry] = {s.name: s for s in (
    Symmetry("qk", _random_qk),
    Symmetry("vo", _random_vo),
    Symmetry("relu", _random_relu),
    Symmetry("head_norm", _random_head_norm),
    Symmetry("bias_shift", _random_bias_shift),
    Symmetry("norm1_scale", _random_norm1, eps_limited=True),
    Symmetry("norm2_scale", _random_norm2, eps_limited=True),
)}
"""Every map, by name; draws of size kappa (see the module docstring)."""


def compose(*maps: Symmetry) -> Symmetry:
    """The maps applied in order, as one `Symmetry` (eps-limited if any is)."""
    def transform(theta, where, kappa, generator):
        for m in maps:
            m.transform(theta, where, kappa, generator)
    return Symmetry("+".join(m.name for m in maps), transform, any(m.eps_limited for m in maps))


EXACT = compose(*(m for m in MAPS.values() if not m.eps_limited))
"""Every exact map at once: a random point of the orbit."""


def stretch(factor: float) -> Symmetry:
    """A given map: every A and B = factor I, every ReLU unit's c = factor, the head map's alpha = factor
    (singular values `factor`, so it has size kappa = factor^2 in the sense of the random draws)."""
    def transform(theta, where, kappa, generator):
        for prefix, rows, d in _heads(where):
            eye = factor * torch.eye(rows.stop - rows.start, dtype=torch.float64)
            scale_qk(theta, prefix, rows, d, eye)
            scale_vo(theta, prefix, rows, d, eye)
        for prefix in where.feed_forward:
            scale_relu(theta, prefix, torch.full((where.d_ff,), float(factor), dtype=torch.float64))
        scale_head_norm(theta, where, float(factor))
    return Symmetry(f"stretch x{factor:g}", transform)


def _check_inputs(n: int) -> torch.Tensor:
    return cube.vertices(n) if n <= EXACT_CHECK_LIMIT else cube.sample(n, CHECK_SAMPLE, seed=0)


@torch.no_grad()
def _outputs(model: TracedModel, bits: torch.Tensor) -> torch.Tensor:
    """Every output: T(x), or each decoder step's under teacher forcing (the scratchpad): flat."""
    return torch.cat([model.training_outputs(b).reshape(-1) for b in bits.to(model.device).split(1024)])


def apply(model: TracedModel, symmetry: Symmetry, kappa: float = 10.0, seed: int | torch.Generator = 0,
          n: int | None = None, rtol: float = RTOL) -> TracedModel:
    """A copy of `model` with `symmetry` applied (factors of size `kappa`, seeded), its outputs checked.

    The map is applied in float64; the check compares T and T' in float64 on all 2^n inputs
    (n = model.config.max_len unless given; n > 14: 4096 seeded strings; every decoder step of the
    scratchpad under teacher forcing) and raises
    `SymmetryError` naming the map when max |T' - T| > rtol * max |T|. The copy has the model's dtype.
    """
    where = layout(model)
    if not kappa >= 1:
        raise ValueError(f"kappa (the bound on each factor's condition number) must be >= 1, got {kappa}")
    reference = copy.deepcopy(model).double()
    changed = copy.deepcopy(reference)
    theta = {name: p.detach().cpu().clone() for name, p in reference.named_parameters()}  # factors are drawn on the CPU
    symmetry.transform(theta, where, float(kappa), make_generator(seed))
    with torch.no_grad():
        for name, p in changed.named_parameters():
            p.copy_(theta[name])
    bits = _check_inputs(n or model.config.max_len)
    before, after = _outputs(reference, bits), _outputs(changed, bits)
    change, scale = (after - before).abs().max().item(), before.abs().max().item()
    if not change <= rtol * max(scale, 1e-12):
        limited = " (eps-limited: exact only while the LayerNorm's input variance >> eps)" if symmetry.eps_limited else ""
        raise SymmetryError(f"map '{symmetry.name}' is not function-preserving on this model{limited}: "
                            f"max |T' - T| = {change:.3g} > {rtol:g} * max |T| = {rtol * scale:.3g}")
    return changed.to(next(model.parameters()).dtype)


def _sqrtm(s: torch.Tensor, power: float = 0.5) -> torch.Tensor:
    w, v = torch.linalg.eigh(s)
    return (v * w.clamp_min(1e-300) ** power) @ v.T


def balancing_factor(p: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """The A minimising tr(A A^T P) + tr((A A^T)^{-1} R), unique up to a fixed orthogonal choice.

    With S = A A^T the minimum is at S P S = R, S = P^{-1/2} (P^{1/2} R P^{1/2})^{1/2} P^{-1/2}.
    A = S^{1/2} E D, E the eigenvectors of the balanced Gram matrix S^{1/2} P S^{1/2} (ascending
    eigenvalues) and D = diag(+-1) chosen by the caller's sign rule (here D = I)."""
    p_half, p_inv_half = _sqrtm(p), _sqrtm(p, -0.5)
    s = p_inv_half @ _sqrtm(p_half @ r @ p_half) @ p_inv_half
    s_half = _sqrtm(s)
    _, e = torch.linalg.eigh(s_half @ p @ s_half)
    return s_half @ e


def _signs(rows: torch.Tensor) -> torch.Tensor:
    """+-1 per row: the sign of the row's entry of largest magnitude."""
    return torch.sign(rows.gather(1, rows.abs().argmax(dim=1, keepdim=True)).squeeze(1))


def _balance_heads(theta: Theta, where: Layout) -> None:
    for prefix, rows, d in _heads(where):
        w, b = theta[prefix + "in_proj_weight"], theta[prefix + "in_proj_bias"]
        part = lambda offset: torch.cat([w[offset + rows.start: offset + rows.stop],  # noqa: E731
                                         b[offset + rows.start: offset + rows.stop, None]], dim=1)
        q, k = part(0), part(d)
        a = balancing_factor(q @ q.T, k @ k.T)
        scale_qk(theta, prefix, rows, d, a * _signs(a.T @ q)[None, :])
        v, out = part(2 * d), theta[prefix + "out_proj.weight"][:, rows]
        b_ = balancing_factor(v @ v.T, out.T @ out)
        scale_vo(theta, prefix, rows, d, b_ * _signs(b_.T @ v)[None, :])


def _balance_scale(gain: torch.Tensor, reader: torch.Tensor) -> float:
    """alpha minimising alpha^2 |gain|^2 + |reader|^2 / alpha^2: alpha^2 = |reader| / |gain|."""
    return (reader.norm() / gain.norm()).sqrt().item()


def _memory_scale(theta: Theta, where: Layout) -> float:
    gain = torch.cat([theta[where.memory_norm + "weight"], theta[where.memory_norm + "bias"]])
    return _balance_scale(gain, torch.cat([theta[p + "in_proj_weight"][where.d_model:] for p in where.cross_attention]))


MAX_PASSES = 200
"""Canonical map of the scratchpad: passes until the memory map's alpha is 1 within 1e-12."""


def _canonical_transform(theta: Theta, where: Layout, kappa: float, generator: torch.Generator) -> None:
    for _ in range(MAX_PASSES if where.memory_norm else 1):
        if where.memory_norm:
            scale_memory_norm(theta, where, _memory_scale(theta, where))
        _balance_heads(theta, where)
        if where.memory_norm is None or abs(_memory_scale(theta, where) - 1) < 1e-12:
            break
    for prefix in where.feed_forward:
        fan_in = torch.cat([theta[prefix + "linear1.weight"], theta[prefix + "linear1.bias"][:, None]], dim=1).norm(dim=1)
        fan_out = theta[prefix + "linear2.weight"].norm(dim=0)
        alive = (fan_in > 0) & (fan_out > 0)
        scale_relu(theta, prefix, torch.where(alive, (fan_out / fan_in.where(alive, 1.0)).sqrt(), 1.0))
    for name in _ln_fed_biases(where):
        theta[name] -= theta[name].mean().item()
    gain = torch.cat([theta[where.head_norm + "weight"], theta[where.head_norm + "bias"]])
    scale_head_norm(theta, where, _balance_scale(gain, theta["linear_head.weight"]))


CANONICAL = Symmetry("canonical", _canonical_transform)


def canonical(model: TracedModel, n: int | None = None) -> TracedModel:
    """The orbit's minimum-norm representative under the exact maps, with the orthogonal freedom fixed.

    Per head, (A^T Q~, A^{-1} K~) with Q~ = [W_Q b_Q] has squared norm tr(A A^T P) + tr((A A^T)^{-1} R),
    P = Q~ Q~^T, R = K~ K~^T, least at S P S = R (`balancing_factor`); the remaining orthogonal
    freedom is fixed by diagonalising the balanced Gram matrix and making each row's largest entry
    positive; the same for (B^T V~, W_O B^{-T}). Per ReLU unit c^2 = |w_out| / |w_in| (w_in with its
    bias), so both norms are equal; the head map alpha^2 = |w_head| / |(gamma, beta)|; the biases
    feeding a LayerNorm have mean 0. In the encoder the maps touch disjoint parameters, so one pass
    reaches the minimum; the scratchpad's memory map shares the cross-attention's W_K, W_V with the
    head maps, so those two alternate until the memory map's alpha is 1 (block descent on a norm
    that is convex in the log-scales). Two models related by an exact map reach the same point (for
    generic weights: distinct eigenvalues). Checked like every map.
    """
    return apply(model, CANONICAL, n=n)
