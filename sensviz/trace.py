"""What both architectures share: the measured LayerNorm, the `Trace`, and the `TracedModel` base.

LayerNorm (paper/summary.txt): LayerNorm(Y) = (Y - mean(Y)) / sqrt(sigma^2(Y) + eps), sigma^2 the
population variance over the d entries. The factor it divides by is the paper's
N_i^(k) = 1 / sqrt(sigma^2(Y_i^(k)) + eps) (`ln_factor`), read from the layer itself through the
hook points `hook_variance` and `hook_scale`, so the trace reports exactly what the forward pass
used, with the layer's own eps.

`TracedModel.trace(bits)` runs one forward pass with every attention pattern and LayerNorm hook
captured in a scoped context (`sensviz.hooks.capture`) and returns a `Trace`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from .hooks import HookPoint, capture, hook_names


class LayerNorm(nn.Module):
    """LayerNorm over the last dimension that exposes its variance and factor N.

    y = (x - mean(x)) * N * weight + bias, N = 1 / sqrt(var(x) + eps), var the population
    variance. With `affine=False` there is no gain or bias (the formal model). Parameter names
    match `torch.nn.LayerNorm`, so state dicts are interchangeable.
    """

    def __init__(self, d_model: int, eps: float = 1e-5, affine: bool = True):
        super().__init__()
        self.eps = eps
        self.affine = affine
        if affine:
            self.weight = nn.Parameter(torch.ones(d_model))
            self.bias = nn.Parameter(torch.zeros(d_model))
        self.hook_variance = HookPoint()  # [batch, position]
        self.hook_scale = HookPoint()  # [batch, position]  N = 1/sqrt(var + eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        centered = x - x.mean(dim=-1, keepdim=True)
        variance = self.hook_variance(centered.pow(2).mean(dim=-1))
        scale = self.hook_scale(torch.rsqrt(variance + self.eps))
        y = centered * scale.unsqueeze(-1)
        return y * self.weight + self.bias if self.affine else y

    def extra_repr(self) -> str:
        return f"eps={self.eps}, affine={self.affine}"


@dataclass
class Trace:
    """One instrumented forward pass over `bits[batch, n]`.

    LayerNorms are ordered layer-major (formal: one per layer; encoder: norm1, norm2 per layer).
    """

    output: torch.Tensor  # [batch] T(x)
    attention: torch.Tensor  # [batch, layer, head, query, key] softmax weights
    attention_names: tuple[str, ...]  # [layer] attention modules, e.g. "encoders.layers.0.self_attn"
    ln_variance: torch.Tensor  # [batch, ln, position] population variance of the LN input Y
    ln_factor: torch.Tensor  # [batch, ln, position] N = 1/sqrt(var + eps)
    ln_eps: tuple[float, ...]  # [ln] each LayerNorm's own eps
    ln_names: tuple[str, ...]  # [ln] module names, e.g. "encoders.layers.0.norm1"
    d_model: int

    def to(self, device) -> "Trace":
        """The same trace with its tensors on `device`."""
        moved = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in asdict(self).items()}
        return Trace(**moved)

    @staticmethod
    def concat(traces: list["Trace"]) -> "Trace":
        """Traces of consecutive batches joined along the batch dimension."""
        first = traces[0]
        joined = {
            key: torch.cat([getattr(t, key) for t in traces])
            for key in ("output", "attention", "ln_variance", "ln_factor")
        }
        return Trace(**joined, attention_names=first.attention_names, ln_eps=first.ln_eps, ln_names=first.ln_names,
                     d_model=first.d_model)


class TracedModel(nn.Module):
    """Base class of sensviz transformers: `model(bits) -> output[batch]` plus `trace(bits)`.

    Subclasses set `arch`, `config` and `positional_names` (the parameters excluded from
    sharpness and param_norm, as in the paper) and place `HookPoint`s named `hook_pattern` after
    every attention softmax.
    """

    arch: str
    positional_names: tuple[str, ...]

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def d_model(self) -> int:
        return self.config.d_model

    def check_bits(self, bits: torch.Tensor) -> None:
        """Raise ValueError for inputs the model cannot read (shape only; runs under vmap)."""
        if bits.dim() != 2:
            raise ValueError(f"bits must have shape [batch, n], got {tuple(bits.shape)}")
        if not 1 <= bits.shape[1] <= self.config.max_len:
            raise ValueError(
                f"this model reads strings of length 1..{self.config.max_len} (max_len), got n={bits.shape[1]}"
            )

    def check_task(self, task, n: int) -> None:
        """Raise ValueError when the model cannot be trained on `task` at length n."""
        task.check_n(n)
        if n > self.config.max_len:
            raise ValueError(f"n={n} is longer than the model's positional range (max_len={self.config.max_len})")

    def training_outputs(self, bits: torch.Tensor) -> torch.Tensor:
        """What the training loss compares with `training_values`: T(x) `[batch]`."""
        return self(bits)

    def training_values(self, task, bits: torch.Tensor) -> torch.Tensor:
        """The task's values in [0,1] in the shape of `training_outputs`: `[batch]`."""
        return task(bits)

    def attention_names(self) -> list[str]:
        """The attention modules whose weights `trace` stacks along its layer axis, in that order
        (one per layer; the scratchpad has encoder self-, decoder self- and cross-attention)."""
        return [name.removesuffix(".hook_pattern") for name in hook_names(self, "hook_pattern")]

    def layernorms(self) -> list[tuple[str, LayerNorm]]:
        """The model's LayerNorms, layer-major, with their names."""
        return [(name, m) for name, m in self.named_modules() if isinstance(m, LayerNorm)]

    def trace(self, bits: torch.Tensor) -> Trace:
        """Output, attention weights and LayerNorm factors of one forward pass."""
        patterns = hook_names(self, "hook_pattern")
        norms = self.layernorms()
        names = patterns + [f"{n}.hook_{kind}" for n, _ in norms for kind in ("variance", "scale")]
        with capture(self, names) as cache:
            output = self(bits)
        return Trace(
            output=output.detach(),
            attention=torch.stack([cache[p] for p in patterns], dim=1),
            attention_names=tuple(p.removesuffix(".hook_pattern") for p in patterns),
            ln_variance=torch.stack([cache[f"{n}.hook_variance"] for n, _ in norms], dim=1),
            ln_factor=torch.stack([cache[f"{n}.hook_scale"] for n, _ in norms], dim=1),
            ln_eps=tuple(float(m.eps) for _, m in norms),
            ln_names=tuple(n for n, _ in norms),
            d_model=self.d_model,
        )

    def is_positional(self, name: str) -> bool:
        return name in self.positional_names

    def non_positional_parameters(self) -> dict[str, nn.Parameter]:
        """Every parameter except positional encodings: the theta of sharpness and param_norm."""
        return {n: p for n, p in self.named_parameters() if not self.is_positional(n)}

    def n_params(self, positional: bool = False) -> int:
        """Number of parameters, without positional encodings unless `positional`."""
        params = dict(self.named_parameters()) if positional else self.non_positional_parameters()
        return sum(p.numel() for p in params.values())

    def param_norm(self) -> float:
        """L2 norm of all non-positional parameters (the paper's parameter norm)."""
        with torch.no_grad():
            return sum(p.double().pow(2).sum() for p in self.non_positional_parameters().values()).sqrt().item()
