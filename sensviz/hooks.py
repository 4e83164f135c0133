"""Named hook points and a scoped capture of what flows through them.

A `HookPoint` is an identity module placed at a named spot of a model's forward pass (as in
TransformerLens): `encoders.layers.0.self_attn.hook_pattern`, `layers.1.norm.hook_scale`.
`capture(model, names)` records their outputs for the duration of a `with` block and removes
every hook when the block ends, even on error. No state lives outside the block.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn


class HookPoint(nn.Module):
    """Identity module whose output can be captured by name."""

    @property
    def active(self) -> bool:
        """Whether anything captures this point now (a model may skip computing what nobody reads)."""
        return bool(self._forward_hooks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def hook_names(model: nn.Module, suffix: str = "") -> list[str]:
    """Names of the model's hook points (ending in `suffix`), in forward-registration order."""
    return [name for name, m in model.named_modules() if isinstance(m, HookPoint) and name.endswith(suffix)]


@contextmanager
def capture(model: nn.Module, names: Iterable[str], detach: bool = True) -> Iterator[dict[str, torch.Tensor]]:
    """Record the outputs of the named hook points during the block: `{name: tensor}`.

    A hook point that runs more than once in the block keeps its last output.
    """
    modules = dict(model.named_modules())
    cache: dict[str, torch.Tensor] = {}
    handles = []
    try:
        for name in names:
            module = modules.get(name)
            if not isinstance(module, HookPoint):
                raise KeyError(f"'{name}' is not a hook point of {type(model).__name__}")

            def store(_module, _inputs, output, name=name):
                cache[name] = output.detach() if detach else output

            handles.append(module.register_forward_hook(store))
        yield cache
    finally:
        for handle in handles:
            handle.remove()
