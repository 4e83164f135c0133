"""The `Trace`: what one instrumented forward pass of a sensviz transformer recorded.

`TracedModel.trace(bits, names=...)` (`sensviz.base`) runs one forward pass with the requested hook
points captured in a scoped context (`sensviz.hooks.capture`): the attention patterns ("attention")
and every LayerNorm's variance and factor N = 1 / sqrt(var + eps) ("ln"), and returns a `Trace`.
Parts not asked for are `None`, so a caller that needs only the LayerNorm factors (Blowup) does not
keep every attention pattern.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

TRACE_PARTS = ("attention", "ln")
"""What a trace can capture: attention patterns and LayerNorm statistics."""


@dataclass
class Trace:
    """One instrumented forward pass over `bits[batch, n]`.

    LayerNorms are ordered layer-major (formal: one per layer; encoder: norm1, norm2 per layer).
    """

    output: torch.Tensor  # [batch] T(x)
    attention: torch.Tensor | None  # [batch, layer, head, query, key] softmax weights ("attention")
    attention_names: tuple[str, ...]  # [layer] attention modules, e.g. "encoders.layers.0.self_attn"
    ln_variance: torch.Tensor | None  # [batch, ln, position] population variance of the LN input Y ("ln")
    ln_factor: torch.Tensor | None  # [batch, ln, position] N = 1/sqrt(var + eps) ("ln")
    ln_eps: tuple[float, ...]  # [ln] each LayerNorm's own eps
    ln_names: tuple[str, ...]  # [ln] module names, e.g. "encoders.layers.0.norm1"
    d_model: int

    def to(self, device) -> Trace:
        """The same trace with its tensors on `device`."""
        moved = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in asdict(self).items()}
        return Trace(**moved)

    @staticmethod
    def concat(traces: list[Trace]) -> Trace:
        """Traces of consecutive batches joined along the batch dimension."""
        first = traces[0]
        joined = {
            key: None if getattr(first, key) is None else torch.cat([getattr(t, key) for t in traces])
            for key in ("output", "attention", "ln_variance", "ln_factor")
        }
        return Trace(**joined, attention_names=first.attention_names, ln_eps=first.ln_eps, ln_names=first.ln_names,
                     d_model=first.d_model)


