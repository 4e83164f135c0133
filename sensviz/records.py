"""One way to turn a result into JSON: `Record.to_dict()`, shared by every result dataclass.

A result's fields become JSON values: tensors and numpy values become numbers or lists, nested
dataclasses and dicts are converted the same way, and a float that is not finite becomes `None`
(strict JSON; whoever reports it says why, e.g. `sensviz.measure.Measurement.notes`). Fields that
hold one value per input, direction or vertex are left out: declare them with `per_input()`.
"""

from __future__ import annotations

import math
from dataclasses import field, fields, is_dataclass

import numpy as np
import torch

_LEFT_OUT = {"record": False}


def per_input(**kwargs):
    """A dataclass field that `to_dict` leaves out (per-input tensors, per-direction values)."""
    return field(repr=False, metadata=_LEFT_OUT, **kwargs)


def jsonable(value):
    """`value` as plain JSON-compatible Python (see the module docstring)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in fields(value) if f.metadata.get("record", True)}
    if isinstance(value, (torch.Tensor, np.ndarray, np.generic)):
        value = value.tolist()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class Record:
    """Mixin of result dataclasses: `to_dict()` is their JSON form (`jsonable`)."""

    def to_dict(self) -> dict:
        return jsonable(self)
