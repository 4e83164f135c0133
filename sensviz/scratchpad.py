"""The `scratchpad` architecture: the paper's encoder-decoder that computes PARITY step by step.

A scratchpad turns one globally sensitive map into n locally simple steps (paper/summary.txt, last
paragraph of the method): the decoder writes the running parity

    y_t = x_1 xor x_2 xor ... xor x_t          t = 1..n,   y_n = PARITY(x)

one symbol at a time, and each step only needs x_t and y_{t-1}, so its sensitivity stays constant
while as_n(PARITY) = n grows. The model (paper/experiments.md): an encoder over the bits and a
decoder over `[BOS, y_1, ..., y_{n-1}]` with a causal mask, `n_layers` post-LN layers each, width d,
feed-forward width d, vocabulary {0, 1, BOS=2}; token embedding `[3, d/2]` concatenated with a
learned positional embedding `[max_len + 1, d/2]` shared by encoder and decoder; final LayerNorms
on both stacks (as `torch.nn.Transformer`); a linear head d -> 1 at every decoder position, whose
output at position t predicts y_t. Training minimises the MSE over all n positions under teacher
forcing; decoding is greedy, thresholding each output at the decision boundary (0.5).

Parameter names are those of the authors' `TorchModelWithScratchpad` (`embedding`,
`positional_encoding`, `model.encoder.layers.{i}.*`, `model.encoder.norm`,
`model.decoder.layers.{i}.{self_attn,multihead_attn,linear1,linear2,norm1,norm2,norm3}`,
`model.decoder.norm`, `linear_head`), so their state dicts load, and the same seed gives the same
initial weights; tests check the function against `torch.nn.Transformer`.

The per-step function. `forward(bits)` is T(x) = the output at the last decoder position given
the input x and the correct scratchpad y_1..y_{n-1} (teacher forcing): the step that produces
PARITY(x). Perturbing the parameters changes that step alone, so its sharpness as n grows is the
quantity of the paper's scratchpad experiment, and the cube analysis of `forward` reads the
model's answer for every input. `step_outputs` gives every step, `generate` the greedy decode.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from .base import LayerNorm, TracedModel
from .encoder import EncoderConfig, EncoderLayer, SelfAttention
from .tasks import ZERO_ONE, Parity, TargetEncoding

BOS = 2
"""Token id of the decoder's start symbol (bits are 0 and 1)."""


class ScratchpadConfig(EncoderConfig):
    """Same fields as `EncoderConfig`: d_model, n_layers (each of encoder and decoder), n_heads,
    max_len (longest input; the positional table has max_len + 1 rows), d_ff (0 = d_model), eps."""


class DecoderLayer(nn.Module):
    """One post-LN decoder layer, named like `torch.nn.TransformerDecoderLayer`."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.self_attn = SelfAttention(config.d_model, config.n_heads)
        self.multihead_attn = SelfAttention(config.d_model, config.n_heads)
        self.linear1 = nn.Linear(config.d_model, config.d_ff)
        self.linear2 = nn.Linear(config.d_ff, config.d_model)
        self.norm1 = LayerNorm(config.d_model, config.eps)
        self.norm2 = LayerNorm(config.d_model, config.eps)
        self.norm3 = LayerNorm(config.d_model, config.eps)

    def forward(self, h: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:  # [batch, n, d], [batch, n, d]
        h = self.norm1(h + self.self_attn(h, causal=True))
        h = self.norm2(h + self.multihead_attn(h, memory))
        return self.norm3(h + self.linear2(torch.relu(self.linear1(h))))


class Stack(nn.Module):
    """`layers` followed by a final LayerNorm `norm`, as `torch.nn.TransformerEncoder/Decoder`."""

    def __init__(self, first: nn.Module, n_layers: int, config: EncoderConfig):
        super().__init__()
        self.layers = nn.ModuleList([first] + [copy.deepcopy(first) for _ in range(n_layers - 1)])
        self.norm = LayerNorm(config.d_model, config.eps)


class EncoderDecoder(nn.Module):
    """Holds `encoder` and `decoder`, so that names read `model.encoder...` as in the authors' class."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.encoder = Stack(EncoderLayer(config), config.n_layers, config)
        self.decoder = Stack(DecoderLayer(config), config.n_layers, config)
        for p in self.parameters():  # torch.nn.Transformer._reset_parameters
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)


class ScratchpadTransformer(TracedModel):
    """The paper's scratchpad model for PARITY; `forward(bits[batch, n]) -> output[batch]` is the
    last step under teacher forcing (see the module docstring).

    The trace's attention holds, along its layer axis, the encoder's self-attention of every
    layer, then for every decoder layer its causal self-attention and its cross-attention (query:
    decoder position, key: input position) — `[batch, 3 n_layers, head, n, n]`. Its LayerNorms are
    the encoder's (norm1, norm2 per layer, then the final norm) and the decoder's (norm1..3 per
    layer, then the final norm), each over the n positions of its stack.
    """

    arch = "scratchpad"
    positional_names = ("positional_encoding.weight",)
    multi_step = True

    def __init__(self, config: ScratchpadConfig):
        super().__init__()
        self.config = config
        half = config.d_model // 2
        self.embedding = nn.Embedding(3, half)
        self.positional_encoding = nn.Embedding(config.max_len + 1, half)
        self.model = EncoderDecoder(config)
        self.linear_head = nn.Linear(config.d_model, 1)

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        batch, length = tokens.shape
        positions = self.positional_encoding.weight[:length].expand(batch, length, -1)  # [batch, len, d/2]
        return torch.cat([self.embedding(tokens.long()), positions], dim=-1)  # [batch, len, d]

    def encode(self, bits: torch.Tensor) -> torch.Tensor:
        """The encoder's output (the decoder's memory): `[batch, n, d]`."""
        h = self._embed(bits)
        for layer in self.model.encoder.layers:
            h = layer(h)
        return self.model.encoder.norm(h)

    def decode(self, memory: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Outputs at every position of the decoder input `tokens[batch, len]` (BOS first): `[batch, len]`."""
        h = self._embed(tokens)
        for layer in self.model.decoder.layers:
            h = layer(h, memory)
        return self.linear_head(self.model.decoder.norm(h)).squeeze(-1)

    @staticmethod
    def scratchpad(bits: torch.Tensor) -> torch.Tensor:
        """The correct scratchpad, the running parity y_t of x_1..x_t: int64 `[batch, n]`."""
        return bits.long().cumsum(dim=1) % 2

    def step_outputs(self, bits: torch.Tensor) -> torch.Tensor:
        """Every step's output under teacher forcing with the correct scratchpad: `[batch, n]`."""
        self.check_bits(bits)
        y = self.scratchpad(bits)
        tokens = torch.cat([torch.full_like(y[:, :1], BOS), y[:, :-1]], dim=1)  # [BOS, y_1..y_{n-1}]
        return self.decode(self.encode(bits), tokens)

    def forward(self, bits: torch.Tensor) -> torch.Tensor:
        return self.step_outputs(bits)[:, -1]  # [batch]

    @torch.no_grad()
    def generate(self, bits: torch.Tensor, encoding: TargetEncoding = ZERO_ONE) -> torch.Tensor:
        """Greedy decoding: each output decided at the encoding's threshold and fed back. int64 `[batch, n]`."""
        self.check_bits(bits)
        memory = self.encode(bits)
        tokens = torch.full_like(bits[:, :1].long(), BOS)
        for _ in range(bits.shape[1]):
            step = encoding.decide(self.decode(memory, tokens)[:, -1:]).long()
            tokens = torch.cat([tokens, step], dim=1)
        return tokens[:, 1:]

    def check_task(self, task, n: int) -> None:
        super().check_task(task, n)
        if not isinstance(task, Parity):
            raise ValueError(f"the scratchpad model computes PARITY (its scratchpad is the running parity), not {task.label}")

    def training_outputs(self, bits: torch.Tensor) -> torch.Tensor:
        return self.step_outputs(bits)  # [batch, n]

    def training_values(self, task, bits: torch.Tensor) -> torch.Tensor:
        return self.scratchpad(bits).float()  # [batch, n]


def autoregressive_accuracy(
    model: ScratchpadTransformer, bits: torch.Tensor, encoding: TargetEncoding = ZERO_ONE, batch_size: int = 4096
) -> dict:
    """Accuracy of greedy decoding on `bits[batch, n]`.

    `autoregressive_accuracy`: the fraction of scratchpad symbols decoded correctly (the authors'
    metric); `answer_accuracy`: the fraction of inputs whose last symbol is PARITY(x).
    """
    correct_symbols = correct_answers = 0.0
    for chunk in bits.split(batch_size):
        chunk = chunk.to(model.device)
        hits = model.generate(chunk, encoding) == model.scratchpad(chunk)  # [batch, n]
        correct_symbols += hits.float().mean(dim=1).sum().item()
        correct_answers += hits[:, -1].float().sum().item()
    return {"autoregressive_accuracy": correct_symbols / len(bits), "answer_accuracy": correct_answers / len(bits)}
