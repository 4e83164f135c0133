"""The `encoder` architecture: the transformer of the paper's experiments (paper/experiments.md).

Bits are token ids 0/1. A token embedding `[2, d/2]` and a learned positional embedding
`[max_len, d/2]` are concatenated to width d. Then `n_layers` post-LN encoder layers

    h = LN1(h + SelfAttn(h));   h = LN2(h + W2 relu(W1 h + b1) + b2)

with feed-forward width d (not 4d), no dropout, no mask, no final LayerNorm, and a linear read-out
d -> 1 at the last position: T(x) = w^T h_n + b.

Parameter names and shapes are those of the authors' published model class (a
`torch.nn.TransformerEncoder(batch_first=True)` stored as `encoders`), so a state dict saved by
their code loads unchanged, and with the same seed the initial weights are identical (PyTorch's
default initialisation, every layer a copy of the first, as `TransformerEncoder` clones it).
The layer is our own, written with plain tensor ops so that hooks fire and `torch.func.vmap`
works; tests check it against `torch.nn.TransformerEncoderLayer`.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from .base import LayerNorm, TracedModel
from .hooks import HookPoint
from .limits import check_model_config


@dataclass
class EncoderConfig:
    d_model: int = 64  # width d; token and positional embeddings have d/2 each
    n_layers: int = 2  # post-LN encoder layers
    n_heads: int = 2  # attention heads (d_model divisible by n_heads)
    max_len: int = 64  # positions of the positional embedding (longest input)
    d_ff: int = 0  # feed-forward width; 0 means d_model, the authors' choice
    eps: float = 1e-5  # LayerNorm eps

    def __post_init__(self):
        check_model_config(self)  # types and ranges of every field (sensviz.limits)
        if self.d_ff == 0:
            self.d_ff = self.d_model
        if self.d_model % 2:
            raise ValueError(f"encoder d_model must be even (two halves), got {self.d_model}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")


def softmax(scores: torch.Tensor) -> torch.Tensor:
    """softmax over the last dimension written out: exp(s - max s) / sum exp(s - max s).

    The same function as `Tensor.softmax(dim=-1)` (the max is subtracted, so no exp overflows; a masked
    -inf key gets weight 0), several times faster on the CPU for the short rows of attention over n
    positions (torch's kernel is slow for rows of ~10 entries: 4.5 ms against 0.65 ms for 20,480 rows).
    """
    shifted = (scores - scores.amax(dim=-1, keepdim=True)).exp()
    return shifted / shifted.sum(dim=-1, keepdim=True)


class SelfAttention(nn.Module):
    """Multi-head attention with `torch.nn.MultiheadAttention`'s parameters and init.

    `attn(h)` is self-attention; `causal=True` masks future keys (key j > query i) like
    `nn.Transformer.generate_square_subsequent_mask`; `attn(h, memory)` is cross-attention, with
    queries from `h` and keys and values from `memory` (the scratchpad decoder's encoder output).
    """

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * d_model, d_model))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * d_model))
        self.out_proj = nn.Linear(d_model, d_model)
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.zeros_(self.in_proj_bias)
        nn.init.zeros_(self.out_proj.bias)
        self.hook_pattern = HookPoint()  # [batch, head, query, key]

    def forward(self, h: torch.Tensor, memory: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
        batch, n, d = h.shape
        d_head = d // self.n_heads
        if memory is None:
            q, k, v = F.linear(h, self.in_proj_weight, self.in_proj_bias).split(d, dim=-1)  # [batch, n, d] each
        else:
            w_q, w_kv = self.in_proj_weight.split([d, 2 * d])
            b_q, b_kv = self.in_proj_bias.split([d, 2 * d])
            q = F.linear(h, w_q, b_q)  # [batch, n, d]
            k, v = F.linear(memory, w_kv, b_kv).split(d, dim=-1)  # [batch, m, d] each

        def head(t: torch.Tensor, i: int) -> torch.Tensor:  # head i's columns: [batch, len, d_head], a view
            return t[..., i * d_head : (i + 1) * d_head]

        # per head on strided views: no copy of q, k, v into a [batch, head, len, d_head] layout
        heads = range(self.n_heads)
        scores = torch.stack([head(q, i) @ head(k, i).transpose(-2, -1) for i in heads], dim=1) / math.sqrt(d_head)
        if causal:  # scores: [batch, head, query, key]
            future = torch.ones(n, k.shape[1], dtype=torch.bool, device=h.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        pattern = self.hook_pattern(softmax(scores))
        mixed = torch.cat([pattern[:, i] @ head(v, i) for i in heads], dim=-1)  # [batch, n, d]
        return self.out_proj(mixed)


class EncoderLayer(nn.Module):
    """One post-LN layer, named like `torch.nn.TransformerEncoderLayer`."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.self_attn = SelfAttention(config.d_model, config.n_heads)
        self.linear1 = nn.Linear(config.d_model, config.d_ff)
        self.linear2 = nn.Linear(config.d_ff, config.d_model)
        self.norm1 = LayerNorm(config.d_model, config.eps)
        self.norm2 = LayerNorm(config.d_model, config.eps)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # [batch, n, d]
        h = self.norm1(h + self.self_attn(h))
        return self.norm2(h + self.linear2(torch.relu(self.linear1(h))))


class EncoderStack(nn.Module):
    """Holds `layers`, so that names read `encoders.layers.{i}.` as in the authors' model."""

    def __init__(self, layers: list[EncoderLayer]):
        super().__init__()
        self.layers = nn.ModuleList(layers)


class EncoderTransformer(TracedModel):
    """The paper's experimental model; `forward(bits[batch, n]) -> output[batch]`."""

    arch = "encoder"
    positional_names = ("positional_encoding.weight",)

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.config = config
        half = config.d_model // 2
        self.embedding = nn.Embedding(2, half)
        self.positional_encoding = nn.Embedding(config.max_len, half)
        first = EncoderLayer(config)
        self.encoders = EncoderStack([first] + [copy.deepcopy(first) for _ in range(config.n_layers - 1)])
        self.linear_head = nn.Linear(config.d_model, 1)

    def forward(self, bits: torch.Tensor) -> torch.Tensor:
        self.check_bits(bits)
        batch, n = bits.shape
        positions = self.positional_encoding.weight[:n].expand(batch, n, -1)  # [batch, n, d/2]
        h = torch.cat([self.embedding(bits.long()), positions], dim=-1)  # [batch, n, d]
        for layer in self.encoders.layers:
            h = layer(h)
        return self.linear_head(h[:, -1]).squeeze(-1)  # [batch]
