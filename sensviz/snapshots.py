"""Where a one-model training run stands after an optimizer step, so that it can go on after its process
ended (a server restart) exactly as it would have: `train(..., resume=snapshot)` takes the same batches,
makes the same updates and writes the same records, bit for bit on a CPU, as the run that was never
interrupted (tested). A snapshot holds the weights, AdamW's moments, the weights before the step (what a
non-finite evaluation restores), the data stream's generator, the records so far, the training losses since
the last record, the step the early-stopping targets were first met, the seconds trained, and `extra` (the
caller's own numbers, e.g. a monitor's measuring time). It is taken in a callback's `on_step`
(`RunState.snapshot`), before the evaluations due after that step.

A file is `torch.save` of plain tensors, numbers, strings and lists, read back with `weights_only=True`
(no pickled code runs); a file of another format or run is refused with one line (ValueError).
"""

from __future__ import annotations

import io
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch

from .files import write_atomic

FORMAT = 1
"""The layout of a snapshot file; a file of another layout is refused, not misread."""
PARAMETER_COPIES = 4
"""Copies of the model's parameters a snapshot holds (weights, the weights before the step, AdamW's two moments):
its size is about this many times the parameters' bytes (`bytes_for`)."""


@dataclass
class Snapshot:
    """A one-model run after optimizer step `step` (of input length `n`, training loss `loss`); `config`: the run's
    `TrainConfig.to_dict()` (a resumed run must have the same)."""

    step: int
    n: int
    loss: float
    config: dict
    weights: dict[str, torch.Tensor]
    optimizer: dict
    before: list[torch.Tensor]
    generator: torch.Tensor
    history: list[dict]
    window: list[float]
    converged: int | None
    seconds: float
    extra: dict = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        torch.save({"format": FORMAT, **asdict(self)}, buffer)
        return buffer.getvalue()

    def save(self, path) -> Path:
        """Write the snapshot to `path` atomically (a reader never sees half a file)."""
        write_atomic(Path(path), self.to_bytes())
        return Path(path)

    @classmethod
    def load(cls, path) -> Snapshot:
        """The snapshot in `path`; ValueError, one line, for a file that is not one of this format."""
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - truncated, not a torch file, or pickled objects
            raise ValueError(f"not a training snapshot ({type(err).__name__})") from None
        names = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or data.get("format") != FORMAT or not names <= set(data):
            raise ValueError(f"not a training snapshot of format {FORMAT}")
        wrong = [name for name, kind in KINDS.items() if not isinstance(data[name], kind)]
        if wrong or isinstance(data["step"], bool):
            raise ValueError(f"not a training snapshot: wrong types of {', '.join(wrong or ['step'])}")
        return cls(**{name: data[name] for name in names})


KINDS = {"step": int, "n": int, "config": dict, "weights": dict, "optimizer": dict, "before": list,
         "generator": torch.Tensor, "history": list, "window": list, "seconds": (int, float), "extra": dict}
"""The types of a snapshot's fields that a file must have (`Snapshot.load`)."""


def bytes_for(n_params: int) -> int:
    """About the bytes of a snapshot of a float32 model of `n_params` parameters."""
    return PARAMETER_COPIES * 4 * n_params
