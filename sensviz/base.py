"""What every sensviz architecture shares: the measured LayerNorm and the `TracedModel` base class.

LayerNorm (paper/summary.txt): LayerNorm(Y) = (Y - mean(Y)) / sqrt(sigma^2(Y) + eps), sigma^2 the
population variance over the d entries. The factor it divides by is the paper's
N_i^(k) = 1 / sqrt(sigma^2(Y_i^(k)) + eps) (`ln_factor`), read from the layer itself through the
hook points `hook_variance` and `hook_scale`: N is the factor torch's fused kernel used in the forward
pass, with the layer's own eps, and the variance is computed from the same input.

`TracedModel` is the base of the `formal`, `encoder` and `scratchpad` models: `model(bits)` is T(x),
`trace(bits, names=...)` one instrumented forward pass (`sensviz.trace.Trace`), and the parameter
set theta of sharpness and param_norm (every parameter except the positional encodings).
"""

from __future__ import annotations

import torch
from torch import nn

from .hooks import HookPoint, capture, hook_names
from .trace import TRACE_PARTS, Trace


class LayerNorm(nn.Module):
    """LayerNorm over the last dimension that exposes its variance and factor N.

    y = (x - mean(x)) * N * weight + bias, N = 1 / sqrt(var(x) + eps), var the population
    variance. With `affine=False` there is no gain or bias (the formal model). Parameter names
    match `torch.nn.LayerNorm`, so state dicts are interchangeable.

    The output is torch's fused kernel (`torch.native_layer_norm`: one op forward and one backward,
    where the formula written out is about twenty; a training step of the class's model takes about a
    fifth less time). `hook_scale` receives the N that kernel used; `hook_variance` the variance,
    computed from x only while something captures it (`HookPoint.active`), so an uncaptured pass does
    no extra work. N carries no gradient (the kernel's is not differentiable).
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
        weight, bias = (self.weight, self.bias) if self.affine else (None, None)
        y, mean, scale = torch.native_layer_norm(x, x.shape[-1:], weight, bias, self.eps)
        if self.hook_variance.active:
            self.hook_variance((x - mean).pow(2).mean(dim=-1))
        self.hook_scale(scale.squeeze(-1))
        return y

    def extra_repr(self) -> str:
        return f"eps={self.eps}, affine={self.affine}"


class TracedModel(nn.Module):
    """Base class of sensviz transformers: `model(bits) -> output[batch]` plus `trace(bits)`.

    Subclasses set `arch`, `config` and `positional_names` (the parameters excluded from
    sharpness and param_norm, as in the paper) and place `HookPoint`s named `hook_pattern` after
    every attention softmax.
    """

    arch: str
    positional_names: tuple[str, ...]
    multi_step: bool = False  # training_outputs gives several outputs per input (the scratchpad's decoder steps)

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

    def trace(self, bits: torch.Tensor, names: tuple[str, ...] = TRACE_PARTS) -> Trace:
        """One forward pass capturing the parts named in `names` ("attention", "ln"); the others are None."""
        unknown = set(names) - set(TRACE_PARTS)
        if unknown:
            raise ValueError(f"unknown trace parts {sorted(unknown)}; use {TRACE_PARTS}")
        patterns = hook_names(self, "hook_pattern") if "attention" in names else []
        norms = self.layernorms()
        hooked = [f"{n}.hook_{kind}" for n, _ in norms for kind in ("variance", "scale")] if "ln" in names else []
        with capture(self, patterns + hooked) as cache:
            output = self(bits)

        def stacked(keys):
            return torch.stack([cache[k] for k in keys], dim=1) if keys else None

        return Trace(
            output=output.detach(),
            attention=stacked(patterns),
            attention_names=tuple(name.removesuffix(".hook_pattern") for name in hook_names(self, "hook_pattern")),
            ln_variance=stacked([f"{n}.hook_variance" for n, _ in norms] if hooked else []),
            ln_factor=stacked([f"{n}.hook_scale" for n, _ in norms] if hooked else []),
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
