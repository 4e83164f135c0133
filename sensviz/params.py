"""Parameter space: the flat theta of the landscape measurements, and T at perturbed parameters.

The paper's sharpness (paper/summary.txt)

    L_{rho,n}(T) = E_x E_{||Delta||_2 = rho} (T_{theta+Delta}(x) - T_theta(x))^2

perturbs theta = all parameters except the positional encodings. `ParamSpace(model)` is that
theta as one flat vector `[P]` (parameters in `named_parameters` order, each flattened), with the
excluded parameters and any buffers held fixed; `ParamSpace(model, positional=True)` covers every
parameter (the straight line between two checkpoints moves the positional encodings too).

A model is evaluated at theta + offset with `torch.func.functional_call` on a parameter dict built
from the flat vector, batched over offsets with `torch.func.vmap` in memory-bounded chunks (on a CPU,
many inputs take one plain call per offset: `LOOP_ACTIVATIONS`). The
calls run on a private copy of the module (functional_call swaps parameters in for the duration
of a call), so the caller's model is never touched, not even while another thread uses it (a model
shared by the app's sessions): its `state_dict()` stays bit-identical.
Per-example gradients grad_theta T(x) come from `vmap(jacrev(...))` over inputs (one row per output).

Random directions are drawn one row at a time from a `torch.Generator` on the CPU, so the same
seed gives the same directions whatever the chunking and the device:
- `sphere_directions`: uniform on the sphere ||Delta|| = rho in R^P (a Gaussian vector over all
  coordinates of theta jointly, normalised, times rho);
- `gaussian_directions`: i.i.d. N(0, std^2) per coordinate (the paper's experiments' noise).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import torch
from torch.func import functional_call, jacrev, vmap

from .base import TracedModel
from .settings import DECODER_STEPS  # noqa: F401  (defined torch-free, re-exported)

CHUNK_SIZE = 1024
"""Default number of (offset, input) pairs in one vmapped call on the CPU; memory grows with it as
about CHUNK_SIZE * n * d_model * 30 floats (activations of every pair)."""

GPU_CHUNK_SIZE = 16384
"""The same on a GPU (activations of about GPU_CHUNK_SIZE * n * d_model * 30 floats): calls of
CHUNK_SIZE pairs leave most of a GPU idle. `python benchmarks/bench.py --device cuda --only slice` times
the loss slice there against one call per point."""


def default_chunk_size(device: torch.device | str) -> int:
    """`CHUNK_SIZE` on the CPU, `GPU_CHUNK_SIZE` on any accelerator."""
    return CHUNK_SIZE if torch.device(device).type == "cpu" else GPU_CHUNK_SIZE


MIN_OFFSETS_PER_CALL = 16
"""Offsets vmapped together at least (when there are that many), however many inputs there are."""

LOOP_ACTIVATIONS = 2**16
"""On the CPU, offsets whose forward over all the inputs holds at least this many activations per layer
(inputs * n * d_model) run one plain call per offset instead of vmapped: each call is then already a large
matmul, and vmapping offsets only adds copies (`python benchmarks/bench.py --only sharpness`: vmapped offsets
took 1.5 times as long as one call per offset at n = 10, and half as long at n = 6, d = 32)."""

GRADIENT_BUDGET = 2**24
"""Floats of per-example gradients computed at once (64 MiB in float32)."""


def make_generator(seed: int | torch.Generator) -> torch.Generator:
    """A CPU generator: the one given, or a new one seeded with `seed`."""
    if isinstance(seed, torch.Generator):
        return seed
    return torch.Generator().manual_seed(int(seed))


def sphere_directions(size: int, count: int, rho: float, generator: torch.Generator) -> torch.Tensor:
    """`count` vectors uniform on the sphere of radius rho in R^size: float32 `[count, size]` (CPU)."""
    rows = []
    for _ in range(count):
        g = torch.randn(size, generator=generator, dtype=torch.float64)
        rows.append((g * (rho / g.norm())).float())
    return torch.stack(rows) if rows else torch.empty(0, size)


def gaussian_directions(size: int, count: int, std: float, generator: torch.Generator) -> torch.Tensor:
    """`count` vectors with i.i.d. N(0, std^2) coordinates: float32 `[count, size]` (CPU)."""
    rows = [torch.randn(size, generator=generator) * std for _ in range(count)]
    return torch.stack(rows) if rows else torch.empty(0, size)


def chunked(total: int, size: int) -> Iterator[slice]:
    """Consecutive slices of `range(total)` of at most `size` items."""
    for start in range(0, total, size):
        yield slice(start, min(start + size, total))


class ParamSpace:
    """A model's parameters (without positional encodings unless `positional`) as one flat vector.

    `base` is theta `[P]`; `unflatten(flat[..., P])` gives the parameter dict; `output(flat, bits)`
    is T at theta = flat; `outputs(bits, offsets[K, P])` is T at theta + offset for every offset,
    vmapped. With `dtype` (e.g. float64) every parameter and buffer is cast for the evaluation;
    the model itself is never changed.

    `steps`: what T is for a model with several outputs per input (the scratchpad's decoder steps).
    "last" is `model(bits)`, one output per input; "all" is every output of `training_outputs`
    (every decoder step under teacher forcing, as the authors' code averages its loss over all n
    steps), flattened input-major, so `output` and `outputs` have `batch * steps` entries per row.
    For single-output models both are the same.
    """

    def __init__(self, model: TracedModel, positional: bool = False, dtype: torch.dtype | None = None,
                 steps: str = "last"):
        if steps not in DECODER_STEPS:
            raise ValueError(f"steps must be one of {DECODER_STEPS}, got {steps!r}")
        self.module = copy.deepcopy(model)  # what functional_call runs; never the caller's model
        if steps == "all" and model.multi_step:
            self.module.forward = self.module.training_outputs  # every decoder step: [batch, n]
        chosen = dict(model.named_parameters()) if positional else model.non_positional_parameters()
        cast = (lambda t: t.detach().to(dtype)) if dtype is not None else (lambda t: t.detach())
        self.names = tuple(chosen)
        self.shapes = tuple(p.shape for p in chosen.values())
        self.numels = tuple(p.numel() for p in chosen.values())
        self.base = torch.cat([cast(p).reshape(-1) for p in chosen.values()])  # [P] theta
        self.fixed = {n: cast(p) for n, p in model.named_parameters() if n not in chosen}
        self.fixed.update({n: cast(b) for n, b in model.named_buffers()})

    @property
    def size(self) -> int:
        """P, the number of coordinates."""
        return self.base.numel()

    @property
    def device(self) -> torch.device:
        return self.base.device

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """`{name: tensor[..., *shape]}` from `flat[..., P]` (views, no copy)."""
        lead = flat.shape[:-1]
        parts = flat.split(self.numels, dim=-1)
        return {n: part.reshape(*lead, *shape) for n, part, shape in zip(self.names, parts, self.shapes)}

    def flatten(self, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        """The flat vector `[P]` of a dict over (a subset of) the space's names; missing names are 0."""
        unknown = set(tensors) - set(self.names)
        if unknown:
            raise ValueError(f"not parameters of this space: {sorted(unknown)}")
        parts = [
            tensors[n].reshape(-1).to(self.base) if n in tensors else self.base.new_zeros(k)
            for n, k in zip(self.names, self.numels)
        ]
        return torch.cat(parts)

    def output(self, flat: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
        """T_theta(x) at theta = `flat[P]` for `bits[batch, n]`: `[batch * steps]`, input-major."""
        return functional_call(self.module, {**self.fixed, **self.unflatten(flat)}, (bits,)).reshape(-1)

    def base_output(self, bits: torch.Tensor) -> torch.Tensor:
        """T_theta(x) at the model's own theta: `[batch * steps]` (no autograd)."""
        with torch.no_grad():
            return torch.cat([self.output(self.base, b) for b in bits.to(self.device).split(CHUNK_SIZE)])

    def outputs(self, bits: torch.Tensor, offsets: torch.Tensor, chunk_size: int | None = None) -> torch.Tensor:
        """T at theta + offset for every `offsets[K, P]` and every `bits[batch, n]`: `[K, batch * steps]`.

        vmapped over offsets; each call evaluates at most about `chunk_size` (offset, input) pairs
        (default: `default_chunk_size` of the model's device). On the CPU, many inputs (`LOOP_ACTIVATIONS`)
        run one call per offset, on at most `chunk_size` inputs at a time.
        """
        if offsets.dim() != 2 or offsets.shape[1] != self.size:
            raise ValueError(f"offsets must have shape [K, {self.size}], got {tuple(offsets.shape)}")
        chunk_size = chunk_size or default_chunk_size(self.device)
        bits = bits.to(self.device)
        count, batch = offsets.shape[0], bits.shape[0]
        if self.device.type == "cpu" and batch * bits.shape[1] * self.module.d_model >= LOOP_ACTIVATIONS:
            with torch.no_grad():
                return torch.stack([
                    torch.cat([self.output(self.base + offset.to(self.device, self.base.dtype), bits[cols])
                               for cols in chunked(batch, chunk_size)])
                    for offset in offsets
                ])
        per_call = min(count, max(MIN_OFFSETS_PER_CALL, chunk_size // max(batch, 1)))
        inputs_per_call = max(1, chunk_size // max(per_call, 1))
        evaluate = vmap(lambda offset, x: self.output(self.base + offset, x).reshape(x.shape[0], -1),
                        in_dims=(0, None))  # [K, b, steps]
        parts = []
        with torch.no_grad():
            for rows in chunked(count, max(per_call, 1)):
                block = offsets[rows].to(self.device, self.base.dtype)
                parts.append(torch.cat([evaluate(block, bits[cols]) for cols in chunked(batch, inputs_per_call)], dim=1))
        return torch.cat(parts).flatten(1)

    def per_example_gradients(
        self, bits: torch.Tensor, chunk_size: int | None = None
    ) -> Iterator[tuple[slice, dict[str, torch.Tensor]]]:
        """grad_theta T(x) per output, in chunks: yields `(rows of the flat output, {name: gradient[r, *shape]})`.

        One row per output of `output` (per input, or per (input, step) with `steps="all"`, input-major).
        A chunk holds at most `chunk_size` inputs (default: as many as fit `GRADIENT_BUDGET`).
        Gradients come per parameter tensor (no flat [r, P] copy: it would cost more memory
        traffic than the gradients themselves).
        """
        bits = bits.to(self.device)
        steps = self.base_output(bits[:1]).numel()
        size = chunk_size or max(1, min(CHUNK_SIZE, GRADIENT_BUDGET // (self.size * steps)))
        single = lambda theta, x: functional_call(  # noqa: E731
            self.module, {**self.fixed, **theta}, (x.unsqueeze(0),)
        ).reshape(-1)  # [steps]
        per_example = vmap(jacrev(single), in_dims=(None, 0))  # {name: [b, steps, *shape]}
        theta = self.unflatten(self.base)
        for rows in chunked(bits.shape[0], size):
            grads = per_example(theta, bits[rows])
            yield slice(rows.start * steps, rows.stop * steps), {k: g.flatten(0, 1) for k, g in grads.items()}
