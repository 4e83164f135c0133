"""Reference implementations used only by the tests.

`AuthorsModel` re-creates the published model class of the paper's experiments from
paper/experiments.md with PyTorch's own modules (`torch.nn.TransformerEncoder`), so our encoder
can be compared against it: same parameter names, same initialisation, same function.
"""

import torch


class AuthorsModel(torch.nn.Module):
    def __init__(self, hidden_dim: int, num_attn_heads: int, num_layers: int, max_len: int = 1024):
        super().__init__()
        self.embedding = torch.nn.Embedding(2, hidden_dim // 2)
        self.positional_encoding = torch.nn.Embedding(max_len, hidden_dim // 2)
        layer = torch.nn.TransformerEncoderLayer(
            d_model=hidden_dim, nhead=num_attn_heads, dim_feedforward=hidden_dim, dropout=0.0,
            activation="relu", batch_first=True,
        )
        self.encoders = torch.nn.TransformerEncoder(layer, num_layers=num_layers, enable_nested_tensor=False)
        self.linear_head = torch.nn.Linear(hidden_dim, 1, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positional = self.positional_encoding(torch.arange(x.size(1), device=x.device)).repeat(x.size(0), 1, 1)
        h = torch.cat([self.embedding(x), positional], dim=-1)
        return self.linear_head(self.encoders(h))[:, -1, :].view(-1)


class AuthorsScratchpadModel(torch.nn.Module):
    """The scratchpad model of paper/experiments.md from `torch.nn.Transformer`: the decoder reads
    `[BOS=2, y_1..y_n]` with a causal mask; `forward(x, y_prefixed)` gives every position's output."""

    def __init__(self, hidden_dim: int, num_attn_heads: int, num_layers: int, max_len: int = 1024):
        super().__init__()
        self.embedding = torch.nn.Embedding(3, hidden_dim // 2)
        self.positional_encoding = torch.nn.Embedding(max_len + 1, hidden_dim // 2)
        self.model = torch.nn.Transformer(
            d_model=hidden_dim, nhead=num_attn_heads, num_encoder_layers=num_layers, num_decoder_layers=num_layers,
            dim_feedforward=hidden_dim, dropout=0.0, activation="relu", batch_first=True,
        )
        self.linear_head = torch.nn.Linear(hidden_dim, 1, bias=True)

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        positional = self.positional_encoding(torch.arange(tokens.size(1))).repeat(tokens.size(0), 1, 1)
        return torch.cat([self.embedding(tokens), positional], dim=-1)

    def forward(self, x: torch.Tensor, y_prefixed: torch.Tensor) -> torch.Tensor:
        mask = self.model.generate_square_subsequent_mask(y_prefixed.size(1))
        out = self.model(self._embed(x), self._embed(y_prefixed), tgt_mask=mask)
        return self.linear_head(out).squeeze(-1)
