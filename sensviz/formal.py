"""The `formal` architecture: the transformer of the paper's theory (paper/summary.txt).

For x in {±1}^n (bit b <-> x = 2b - 1), width d, L layers, H heads per layer:

    y_i^(0)   = e(x_i) + p_i                                      token + positional embedding
    a_ij      = (K_{k,h} y_j^(k-1))^T (Q_{k,h} y_i^(k-1))          raw scores (no 1/sqrt(d) scaling)
    â_ij      = exp(a_ij) / sum_s exp(a_is)                         softmax over keys j
    b_{i,h}   = sum_j â_ij V_{k,h} y_j^(k-1)
    Y_i^(k)   = f_MLP(y_i^(k-1) + sum_h b_{i,h})                   f_MLP(z) = z + W2 relu(W1 z + c1) + c2
    y_i^(k)   = LayerNorm(Y_i^(k)) = (Y - mean Y) / sqrt(var Y + eps)   no gain or bias; eps >= 0
    T(x)      = nu_out^T y_n^(L)                                   read-out at the last position

K, Q, V are d x d per head. The feed-forward module f_MLP is a one-hidden-layer ReLU network with
its own skip connection. Parameters: `token_embedding [2, d]` (row 0 is e(-1), row 1 is e(+1)),
`positional_embedding [max_len, d]` (p_i, excluded from sharpness and param_norm),
`layers.{k}.attn.{query,key,value} [H, d, d]`, `layers.{k}.mlp.linear{1,2}`, `readout [d]`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .base import LayerNorm, TracedModel
from .hooks import HookPoint
from .limits import check_model_config


@dataclass
class FormalConfig:
    d_model: int = 16  # width d
    n_layers: int = 2  # L
    n_heads: int = 2  # H heads per layer, each with its own d x d K, Q, V
    max_len: int = 64  # positions p_1..p_max_len (longest input)
    d_ff: int = 0  # hidden width of f_MLP; 0 means d_model
    eps: float = 1e-5  # LayerNorm eps; 0 gives the exact 1/sigma of the theory

    def __post_init__(self):
        check_model_config(self)  # types and ranges of every field (sensviz.limits; d_model >= 2 for LayerNorm)
        if self.d_ff == 0:
            self.d_ff = self.d_model


class FormalAttention(nn.Module):
    """The H heads of one layer: sum_h b_{i,h}."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        scale = d_model**-0.5
        self.query = nn.Parameter(torch.randn(n_heads, d_model, d_model) * scale)
        self.key = nn.Parameter(torch.randn(n_heads, d_model, d_model) * scale)
        self.value = nn.Parameter(torch.randn(n_heads, d_model, d_model) * scale / n_heads**0.5)
        self.hook_pattern = HookPoint()  # [batch, head, query, key]

    def forward(self, y: torch.Tensor) -> torch.Tensor:  # [batch, n, d]
        q = torch.einsum("hed,bnd->bhne", self.query, y)  # Q y_i  [batch, head, n, d]
        k = torch.einsum("hed,bnd->bhne", self.key, y)  # K y_j
        v = torch.einsum("hed,bnd->bhne", self.value, y)  # V y_j
        pattern = self.hook_pattern((q @ k.transpose(-2, -1)).softmax(dim=-1))  # [batch, head, i, j]
        return (pattern @ v).sum(dim=1)  # sum_h b_{i,h}  [batch, n, d]


class FormalMLP(nn.Module):
    """f_MLP(z) = z + W2 relu(W1 z + c1) + c2."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z + self.linear2(torch.relu(self.linear1(z)))


class FormalLayer(nn.Module):
    def __init__(self, config: FormalConfig):
        super().__init__()
        self.attn = FormalAttention(config.d_model, config.n_heads)
        self.mlp = FormalMLP(config.d_model, config.d_ff)
        self.norm = LayerNorm(config.d_model, config.eps, affine=False)

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return self.norm(self.mlp(y + self.attn(y)))  # y^(k) = LayerNorm(Y^(k))


class FormalTransformer(TracedModel):
    """The theory's transformer; `forward(bits[batch, n]) -> T(x)[batch]`."""

    arch = "formal"
    positional_names = ("positional_embedding",)

    def __init__(self, config: FormalConfig):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Parameter(torch.randn(2, config.d_model))
        self.positional_embedding = nn.Parameter(torch.randn(config.max_len, config.d_model))
        self.layers = nn.ModuleList(FormalLayer(config) for _ in range(config.n_layers))
        self.readout = nn.Parameter(torch.randn(config.d_model) * config.d_model**-0.5)

    def forward(self, bits: torch.Tensor) -> torch.Tensor:
        self.check_bits(bits)
        n = bits.shape[1]
        y = self.token_embedding[bits.long()] + self.positional_embedding[:n]  # y^(0)  [batch, n, d]
        for layer in self.layers:
            y = layer(y)
        return y[:, -1] @ self.readout  # T(x) = nu_out^T y_n^(L)  [batch]
