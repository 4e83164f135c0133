"""The model registry: build either architecture from its name and a config.

`formal` is the paper's theoretical transformer (`sensviz.formal`), `encoder` the model of its
experiments (`sensviz.encoder`), `scratchpad` the encoder-decoder of its scratchpad experiment
(`sensviz.scratchpad`). Configs are dataclasses; `config_from_dict` rebuilds one from the
JSON stored in a checkpoint and rejects unknown fields with a readable message. `ModelSettings`
is the architecture and size of a model to build, as a sweep, the command line or the Train page
give it (the sizes every architecture shares).
"""

from __future__ import annotations

from dataclasses import asdict, fields

import torch

from .base import TracedModel
from .encoder import EncoderConfig, EncoderTransformer
from .formal import FormalConfig, FormalTransformer
from .scratchpad import ScratchpadConfig, ScratchpadTransformer
from .settings import ModelSettings  # noqa: F401  (defined torch-free, re-exported)

ARCHITECTURES = {
    "formal": (FormalConfig, FormalTransformer),
    "encoder": (EncoderConfig, EncoderTransformer),
    "scratchpad": (ScratchpadConfig, ScratchpadTransformer),
}


def _lookup(arch: str):
    try:
        return ARCHITECTURES[arch]
    except KeyError:
        raise ValueError(f"unknown architecture '{arch}'; use one of {sorted(ARCHITECTURES)}") from None


def config_from_dict(arch: str, values: dict):
    """The architecture's config dataclass from a dict of its fields."""
    config_cls, _ = _lookup(arch)
    known = {f.name for f in fields(config_cls)}
    unknown = set(values) - known
    if unknown:
        raise ValueError(f"unknown {arch} config fields {sorted(unknown)}; known fields: {sorted(known)}")
    return config_cls(**values)


def config_to_dict(config) -> dict:
    return asdict(config)


def build_model(arch: str, config=None, *, seed: int | None = None, device=None, **fields) -> TracedModel:
    """A freshly initialised model: `build_model("encoder", d_model=32, n_layers=2, seed=0)`.

    Pass a config dataclass or its fields. With `seed`, initialisation uses `torch.manual_seed(seed)`
    (the same initial weights as the authors' code with that seed, for `encoder`).
    """
    config_cls, model_cls = _lookup(arch)
    if config is None:
        config = config_from_dict(arch, fields)
    elif fields:
        raise ValueError("pass either a config or its fields, not both")
    elif type(config) is not config_cls:
        raise ValueError(f"{arch} needs a {config_cls.__name__}, got {type(config).__name__}")
    if seed is not None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = model_cls(config)
    else:
        model = model_cls(config)
    return model.to(device) if device is not None else model


