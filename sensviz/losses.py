"""Training and evaluation losses, shared by the trainer and the landscape measurements.

`mse`: mean of (T(x) - y)^2 with y the task value under the target encoding ({0,1} for
`zero_one`, the paper's default; ±1 for `pm1`). `bce`: binary cross-entropy of the logit T(x)
against the {0,1} task value (encoding `logit`). Both are means over the batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .settings import LOSSES  # noqa: F401  (defined torch-free, re-exported)
from .tasks import LOGIT, PM1, ZERO_ONE, TargetEncoding, Task


def check_loss(loss: str, encoding: TargetEncoding | None = None) -> None:
    """Raise ValueError for an unknown loss, or one that does not fit the target encoding (when given)."""
    if loss not in LOSSES:
        raise ValueError(f"unknown loss '{loss}'; use one of {LOSSES}")
    if encoding is not None and (loss == "bce") != (encoding is LOGIT):
        raise ValueError(f"loss '{loss}' does not fit target encoding '{encoding.name}' (bce goes with logit)")


def default_encoding(loss: str, pm1_targets: bool = False) -> TargetEncoding:
    """The encoding a loss trains: `logit` for bce, `pm1` or `zero_one` for mse."""
    if loss == "bce":
        return LOGIT
    return PM1 if pm1_targets else ZERO_ONE


def loss_for(encoding: TargetEncoding) -> str:
    """The loss a model with this target encoding was trained with: bce for logit, else mse."""
    return "bce" if encoding is LOGIT else "mse"


def targets(task: Task, bits: torch.Tensor, encoding: TargetEncoding) -> torch.Tensor:
    """Training targets for `bits[batch, n]`: float32 `[batch]` on the device of `bits`."""
    return encoding.encode(task(bits)).to(bits.device)


def loss_value(outputs: torch.Tensor, target: torch.Tensor, loss: str = "mse") -> torch.Tensor:
    """The mean loss of `outputs[..., batch]` against `target[batch]` (a 0-dim tensor per leading index)."""
    if loss == "mse":
        return (outputs - target).pow(2).mean(dim=-1)
    if loss == "bce":
        return F.binary_cross_entropy_with_logits(outputs, target.expand_as(outputs), reduction="none").mean(dim=-1)
    raise ValueError(f"unknown loss '{loss}'; use one of {LOSSES}")
