"""Named limits on everything a user controls, checked before anything is allocated or run.

One table, `LIMITS`, holds every bound: model sizes, input lengths, counts of inputs, samples,
directions, draws, steps and grid points, training sizes, the sweep run cap, file, header and
metadata sizes. The library's own limits only: what one owner, address or class may hold on a class
server is `server.limits`'s. The bounds are generous (the paper's sizes pass with room to spare: d = 128,
n up to 1024 for the scratchpad, batch 1024, 20,000 steps) and exist so that a typo or a hostile
file costs a one-line error instead of gigabytes of memory or hours of CPU.

The checks return the value (converted to a plain `int` or `float`) or raise `ValueError` with
one line that names the value and the limit:

    from sensviz.limits import check_int, check_float, LIMITS

    d = check_int("d_model", config_value)                  # the limit of the same name
    steps = check_int("--steps", args.steps, "train_steps")  # a differently named value
    lr = check_float("lr", settings["lr"])                    # finite, in (0, 10]
    LIMITS["runs"].high                                       # 10_000, the sweep run cap

    >>> check_int("d_model", 20000)
    ValueError: d_model must be at most 2,048 (limit 'd_model'), got 20,000

Integers must be real integers (`int`, or a numpy integer), never `bool` or an integral float;
floats accept ints and floats (never `bool`) and must be finite. `check_json_depth` bounds the
nesting of parsed JSON (checkpoint headers, metadata), without recursion.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass


@dataclass(frozen=True)
class Limit:
    """The allowed range of one named quantity: `low <= value <= high` (`low < value` if `open_low`)."""

    name: str
    low: float
    high: float
    help: str
    open_low: bool = False  # a positive quantity: low itself is excluded (lr > 0)


MiB = 2**20
MB = 10**6
"""A megabyte: the unit of the upload cap, the one Streamlit's uploader counts in (in browsers on Linux and macOS)."""

_ALL = (
    # model sizes (every architecture; architecture-specific rules stay with the config)
    Limit("d_model", 2, 2048, "model width d"),
    Limit("n_layers", 1, 64, "layers (of each stack)"),
    Limit("n_heads", 1, 64, "attention heads per layer"),
    Limit("d_ff", 0, 16384, "feed-forward width; 0 means d_model"),
    Limit("max_len", 1, 4096, "positions of the positional table (longest input)"),
    Limit("n_params", 1, 50_000_000, "parameters of one model (200 MB as float32)"),
    Limit("eps", 0.0, 1.0, "LayerNorm eps"),
    # inputs and measurements
    Limit("n", 1, 4096, "input length"),
    Limit("inputs", 1, 2**20, "inputs of one measurement (cube vertices or a sample)"),
    Limit("samples", 1, 2**20, "Monte Carlo samples of the cube"),
    Limit("directions", 1, 4096, "random directions in parameter space"),
    Limit("draws", 1, 4096, "noise draws of the loss-space proxy"),
    Limit("steps", 1, 1001, "grid points per axis of a loss slice"),
    Limit("grid_points", 1, 50_000, "grid points of a loss slice in all (steps ** dims)"),
    Limit("rho", 0.0, 100.0, "radius of a parameter perturbation", open_low=True),
    Limit("span", 0.0, 1000.0, "half-width of a loss slice in units of its directions", open_low=True),
    Limit("seed", 0, 2**63 - 1, "random seed"),
    # training
    Limit("batch_size", 1, 65_536, "training batch size"),
    Limit("train_steps", 1, 1_000_000, "training steps"),
    Limit("train_size", 1, 2**24, "fixed training strings"),
    Limit("lr", 0.0, 1e6, "learning rate (far above any that trains: a diverging run is a lesson too)",
          open_low=True),
    Limit("weight_decay", 0.0, 100.0, "weight decay"),
    Limit("batch_models", 1, 1024, "models trained together in one batched run"),
    # sweeps and processes
    Limit("runs", 1, 10_000, "runs of one sweep without an explicit --max-runs"),
    Limit("max_runs", 1, 1_000_000, "runs of one sweep with --max-runs"),
    Limit("workers", 1, 256, "parallel worker processes"),
    Limit("threads", 1, 1024, "torch threads per process"),
    Limit("spec_bytes", 1, 1 * MiB, "size of a sweep spec file"),
    # files
    Limit("file_bytes", 1, 200 * MiB, "size of a checkpoint file or upload"),
    Limit("header_bytes", 2, 1 * MiB, "size of a safetensors header (the zoo's are under 10 KiB)"),
    Limit("tensors", 1, 4096, "tensors in one checkpoint file (a 64-layer scratchpad model has 1,960)"),
    Limit("tensor_dims", 0, 8, "dimensions of one tensor"),
    Limit("json_depth", 1, 64, "nesting depth of JSON in a header or metadata"),
    Limit("metadata_entries", 0, 256, "metadata fields of a checkpoint"),
    Limit("metadata_bytes", 0, 1 * MiB, "size of one metadata field"),
    Limit("metadata_chars", 1, 4096, "characters of one string in a checkpoint's training or extra metadata "
          "(longer ones are stored shortened with a hash)"),
    Limit("label_chars", 1, 120, "characters of a label or name shown or stored as is (longer ones are shortened with a hash)"),
)

LIMITS: dict[str, Limit] = {limit.name: limit for limit in _ALL}
"""Every limit by name."""


def _fmt(value) -> str:
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _limit(name: str, limit: str | Limit | None) -> Limit:
    if isinstance(limit, Limit):
        return limit
    key = name if limit is None else limit
    try:
        return LIMITS[key]
    except KeyError:
        raise KeyError(f"no limit named '{key}'; known limits: {sorted(LIMITS)}") from None


def _in_range(name: str, value, limit: Limit):
    named = f" (limit '{limit.name}')" if limit.name else ""
    too_low = value <= limit.low if limit.open_low else value < limit.low
    if too_low:
        bound = f"above {_fmt(limit.low)}" if limit.open_low else f"at least {_fmt(limit.low)}"
        raise ValueError(f"{name} must be {bound}{named}, got {_fmt(value)}")
    if value > limit.high:
        raise ValueError(f"{name} must be at most {_fmt(limit.high)}{named}, got {_fmt(value)}")
    return value


def is_int(value) -> bool:
    """A real integer: `int` or a numpy integer, not `bool`."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_int(name: str, value, limit: str | Limit | None = None) -> int:
    """`value` as an `int` within the named limit (default: the limit called `name`).

    Raises ValueError for a bool, a float (even 2.0), a string, or a value out of range.
    """
    bounds = _limit(name, limit)
    if not is_int(value):
        raise ValueError(f"{name} must be an integer, got {_shown(value)}")
    return _in_range(name, int(value), bounds)


def check_float(name: str, value, limit: str | Limit | None = None) -> float:
    """`value` as a finite `float` within the named limit (ints are accepted; bools are not)."""
    bounds = _limit(name, limit)
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {_shown(value)}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")
    return _in_range(name, value, bounds)


def check_json_depth(value, name: str = "JSON", limit: str | Limit = "json_depth") -> None:
    """Raise ValueError when lists and objects in `value` nest deeper than the limit (iterative)."""
    bounds = _limit(name, limit)
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > bounds.high:
                raise ValueError(f"{name} nests deeper than {_fmt(bounds.high)} levels (limit '{bounds.name}')")
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))


def check_run_count(count: int, max_runs: int | None = None) -> int:
    """The number of runs of a sweep, within the cap: the `runs` limit, or an explicit `max_runs`
    (itself at most the `max_runs` limit). The message says how to raise the cap."""
    if max_runs is not None:
        cap = check_int("--max-runs", max_runs, "max_runs")
        if count > cap:
            raise ValueError(f"this sweep has {count:,} runs, more than --max-runs {cap:,}")
        return count
    cap = LIMITS["runs"].high
    if count > cap:
        hint = f"pass --max-runs {count}" if count <= LIMITS["max_runs"].high else \
            f"the most any sweep may have is {_fmt(LIMITS['max_runs'].high)} (limit 'max_runs')"
        raise ValueError(f"this sweep has {count:,} runs, more than the cap of {cap:,} (limit 'runs'); {hint}")
    return count


def check_model_config(config) -> None:
    """The size fields every architecture's config has (d_model, n_layers, n_heads, max_len, d_ff,
    eps), checked by type and range; eps is converted to a float in place. Architecture-specific
    rules (divisibility, even widths) stay with the config class."""
    for field in ("d_model", "n_layers", "n_heads", "max_len", "d_ff"):
        check_int(field, getattr(config, field))
    config.eps = check_float("eps", config.eps)
