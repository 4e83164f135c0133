"""The settings of a run: which model to build (`ModelSettings`), how to train it (`TrainConfig`) and how to
measure it (`MeasureSettings`), with the names they are checked against. Torch-free, so that the results kit
(`sensviz.experiments`' registry, `sensviz.results`, `sensviz.findings`, `sensviz.fidelity`, `sensviz.report`)
reads every setting's default without loading torch; what needs torch (building the model, the target encoding,
a device's name) is imported when it is asked for. Each class is re-exported where it was defined before
(`sensviz.models`, `sensviz.training`, `sensviz.measure`), and each constant where it belongs (`cube.EXACT_LIMIT`,
`losses.LOSSES`, `params.DECODER_STEPS`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

from .configs import check, setting

EXACT_LIMIT = 20
"""Default largest n for exact enumeration of the cube (2**20 vertices)."""
LOSSES = ("mse", "bce")
"""The training losses (`sensviz.losses`)."""
DECODER_STEPS = ("last", "all")
"""What T is for a model with several outputs per input (see `sensviz.params.ParamSpace`)."""
ARCHITECTURES = ("formal", "encoder", "scratchpad")
"""The architectures' names, as `sensviz.models.ARCHITECTURES` builds them."""
STACKS = ("encoder", "decoder")
"""The scratchpad model's two stacks, as its LayerNorms are named (`model.encoder.layers.0.norm1`, ...)."""


def named(name: str) -> Callable:
    """The function a "module:function" name names, its module imported now: how these settings reach the
    modules that need torch (`sensviz.models`, `sensviz.losses`), which sit above this one and re-export it, and
    how the experiment registry reaches its jobs and the Lab's readers."""
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


@dataclass
class ModelSettings:
    """Which model to build: the architecture and the sizes all three share (`build` makes it)."""

    arch: str = setting("encoder", "architecture: encoder (the paper's experiments), formal (its theory) or "
                        "scratchpad (its encoder-decoder)", choices=ARCHITECTURES)
    d_model: int = setting(32, "width d", limit="d_model")
    n_layers: int = setting(2, "layers (each of encoder and decoder for the scratchpad)", limit="n_layers")
    n_heads: int = setting(2, "attention heads per layer", limit="n_heads")
    max_len: int | None = setting(None, "positional range, the longest input (default: n)", limit="max_len")
    d_ff: int = setting(0, "feed-forward width (0: d_model)", limit="d_ff")
    eps: float = setting(1e-5, "LayerNorm eps", limit="eps")

    def __post_init__(self):
        check(self)

    def config(self, n: int):
        """The architecture's config for inputs of length n (max_len defaults to n)."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "arch"}
        return named("sensviz.models:config_from_dict")(self.arch, {**values, "max_len": self.max_len or n})

    def build(self, n: int, seed: int | None = None, device=None):
        """A freshly initialised model (a `TracedModel`) for inputs of length n (seeded)."""
        return named("sensviz.models:build_model")(self.arch, self.config(n), seed=seed, device=device)

    def n_params(self, n: int) -> int:
        """P, the parameters of the model `build(n)` makes apart from its positional encodings
        (`TracedModel.n_params`), without building it for the encoder: the token embedding [2, d/2], per layer
        the attention's in- and out-projections 4d² + 4d, the feed-forward 2 d d_ff + d_ff + d and two
        LayerNorms 4d, and the read-out d + 1. Other architectures are built on torch's `meta` device (no memory)."""
        if self.arch == "encoder":
            d, ff = self.d_model, self.d_ff or self.d_model
            return d + self.n_layers * (4 * d * d + 2 * d * ff + 9 * d + ff) + d + 1
        import torch

        with torch.device("meta"):
            return self.build(n).n_params()


@dataclass
class TrainConfig:
    """How to train (the defaults are the paper's). Each field's help and range live in its
    `setting`, from which the command line and the Train page draw their options."""

    n: int = setting(8, "input length; the longest one for mixed-length training", limit="n")
    min_n: int | None = setting(None, "mixed-length training over min_n..n (one length per step, cycled)", limit="n")
    batch_size: int = setting(1024, "strings per step", limit="batch_size")
    steps: int = setting(10_000, "optimizer steps", limit="train_steps")
    lr: float = setting(3e-4, "AdamW learning rate", limit="lr")
    weight_decay: float = setting(0.1, "AdamW (decoupled) weight decay", limit="weight_decay")
    loss: str = setting("mse", "training loss: mse, or bce on logits", choices=LOSSES)
    pm1_targets: bool = setting(False, "MSE on ±1 targets instead of {0,1}")
    seed: int = setting(0, "the data stream and the model's initialisation", limit="seed")
    train_size: int | None = setting(None, "train on this many fixed strings of the cube (a restricted training set)",
                                     limit="train_size")
    train_set_seed: int | None = setting(None, "which strings the restricted set holds (default: seed)", limit="seed")
    full_batch: bool = setting(False, "every step trains on each string of the training set once (the 2**n strings "
                               "of the cube, or the restricted set; batch_size is their number): full-batch AdamW")
    eval_interval: int = setting(100, "evaluate every this many steps (and at step 0 and the end)",
                                 limit="train_steps")
    eval_size: int = setting(4096, "evaluation strings per length: the whole cube (or restricted set) if it has "
                             "at most eval_size strings, else a fixed sample of it",
                             limit="inputs")
    eval_seed: int = setting(0, "the evaluation sample", limit="seed")
    target_accuracy: float | None = setting(None, "stop early once the evaluation accuracy reaches this", positive=True,
                                            high=1.0)
    target_loss: float | None = setting(None, "stop early once the evaluation loss is below this (and the accuracy "
                                        "target is met)", positive=True)
    relax_steps: int | None = setting(None, "with the early-stopping targets: go on this many steps after they are "
                                      "first met, then stop (equal relaxation for every converged run)",
                                      limit="train_steps")
    device: str | None = setting(None, "cpu, cuda, ... (default: wherever the model is)")

    def __post_init__(self):
        check(self)
        if self.min_n is not None and self.min_n > self.n:
            raise ValueError(f"min_n={self.min_n} is larger than n={self.n}")
        if self.loss == "bce" and self.pm1_targets:
            raise ValueError("bce trains logits against {0,1} targets; pm1_targets goes with mse")
        if self.relax_steps is not None and self.target_accuracy is None and self.target_loss is None:
            raise ValueError("relax_steps counts steps after the early-stopping targets are first met: "
                             "give target_accuracy and/or target_loss")
        if self.train_size is not None:
            if self.min_n not in (None, self.n):
                raise ValueError("a restricted training set is a subset of one cube: use one length (no min_n)")
            if self.n > EXACT_LIMIT:
                raise ValueError(f"a restricted training set needs n <= {EXACT_LIMIT}, got n={self.n}")
            if self.train_size > 2**self.n:
                raise ValueError(f"train_size={self.train_size} is more than the 2**{self.n} = {2**self.n} strings "
                                 f"of length {self.n}")
        if self.full_batch:
            if self.min_n not in (None, self.n):
                raise ValueError("full_batch trains on one cube: use one length (no min_n)")
            size = self.train_size if self.train_size is not None else 2**self.n
            if self.batch_size != size:
                raise ValueError(f"full_batch trains on all {size:,} strings of the training set every step: "
                                 f"set batch_size to {size:,}, not {self.batch_size:,}")
        if self.device is not None:
            import torch

            try:
                torch.device(self.device)
            except RuntimeError:
                raise ValueError(f"unknown device '{self.device}'") from None

    @property
    def encoding(self):
        """How the model's output encodes the targets (a `TargetEncoding`: `sensviz.losses.default_encoding`)."""
        return named("sensviz.losses:default_encoding")(self.loss, self.pm1_targets)

    @property
    def lengths(self) -> list[int]:
        """The input lengths trained on, in the order the steps cycle through them."""
        return list(range(self.min_n or self.n, self.n + 1))

    def check(self, model, task) -> None:
        """Raise ValueError when this config cannot train `model` on `task`."""
        for n in self.lengths:
            model.check_task(task, n)
        if self.target_accuracy is not None and not task.boolean:
            raise ValueError(f"early stopping at an accuracy needs a Boolean task; {task.label} is real-valued")

    def to_dict(self) -> dict:
        return asdict(self)


PER_MODEL_FIELDS = ("seed", "lr", "weight_decay", "train_set_seed")
"""The `TrainConfig` fields of the data and the optimizer that may differ between the models of one `train_many` run."""
PER_MEMBER_STOPPING = ("steps", "target_accuracy", "target_loss", "relax_steps")
"""The `TrainConfig` fields of when a model stops, which may also differ between the models of one `train_many` run:
a model that stops by its own rule keeps its weights while the others go on (the arms of one seed, paired)."""


@dataclass
class MeasureSettings:
    """Every choice a measurement makes (see the module docstring); the defaults are everyone's."""

    exact_limit: int = setting(14, "largest n whose cube is analysed whole (sensitivity, degree profile, Blowup)",
                               low=1, high=EXACT_LIMIT)
    samples: int = setting(512, "seeded Monte Carlo samples above exact_limit", limit="samples")
    measure_inputs: int = setting(512, "landscape inputs (sharpness, proxy, Hessian): the cube when 2**n <= this, "
                                  "else a seeded sample of this many", limit="inputs")
    rho: float | None = setting(None, "radius of L_rho (default proxy_eps * sqrt(P), the proxy's typical |Delta|)",
                                limit="rho")
    directions: int = setting(32, "random directions of L_rho", limit="directions")
    proxy_eps: float = setting(0.02, "std of the proxy's Gaussian noise per coordinate (the paper's 0.02)",
                               positive=True, high=1.0)
    proxy_draws: int = setting(32, "noise draws of the proxy", limit="draws")
    decoder_steps: str = setting("all", "scratchpad models: sharpness and proxy over every decoder step (the "
                                 "authors') or the last", choices=DECODER_STEPS)
    measure_seed: int = setting(0, "the input sample, the directions and the noise draws", limit="seed")

    def __post_init__(self):
        check(self)
