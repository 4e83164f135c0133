"""Target functions on bit strings, and the encodings a model's output is read in.

Every task maps `bits[batch, n]` in {0,1} (position 0 first) to a float tensor `[batch]`:
Boolean tasks give values in {0,1}, the real-valued MEAN gives values in [0,1]. The theory's
±1 view of a value v is `2 v - 1` (DESIGN.md section 3), which `Task.values_pm1` returns.

Conventions follow the paper's published experiments (paper/experiments.md): PARITY = sum mod 2;
MAJORITY = [#1 > #0], so ties at even n give 0; FIRST = x_1; MEAN = mean of the bits; a random
function is a uniformly random truth table from a seed, indexed by the cube's vertex order
(position 0 is the most significant bit).

Tasks are named for the CLI and the UI by a label: `parity`, `majority`, `first`, `mean`,
`sparse_parity:k=3,seed=0`, `random:seed=0`, `table:0110` (a truth table as a bit string in vertex
order). `get_task(label)` parses one and `task.label` writes it back.

Adding a task is one class: subclass `Task`, give it a `name`, a `description`, its `parameters`
(`Param`: name, type, range, default, help) and `__call__`, and decorate it with `@register`. The
label parser, the validation of its values, the command line's help and the Train page's form
all come from that class (`TASKS`).
"""

from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from . import cube
from .limits import LIMITS, Limit, check_int

MAX_TABLE_BITS = 24
"""Largest n for tasks stored as a truth table (2**24 entries = 16 MiB of bytes)."""

_REQUIRED = object()


@dataclass(frozen=True)
class Param:
    """One parameter of a task: its name, type (int, float or str), range, default and help.

    `parse` reads it from a label (`sparse_parity:k=3`), `check` validates a typed value (from a
    spec, a form or a command line); both raise ValueError naming the parameter and its range.
    """

    name: str
    type: type  # int, float or str
    help: str
    default: object = _REQUIRED
    low: float | None = None  # numbers: smallest value; str: shortest length
    high: float | None = None  # numbers: largest value; str: longest length

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    def describe(self) -> str:
        """`name=<int 1..1024>` for help texts."""
        span = "" if self.low is None and self.high is None else f" {self._bound(self.low)}..{self._bound(self.high)}"
        kind = "length" if self.type is str else self.type.__name__
        return f"{self.name}=<{kind}{span}>"

    @staticmethod
    def _bound(value) -> str:
        return "" if value is None else f"{value:g}" if isinstance(value, float) else str(value)

    def parse(self, text: str):
        """The value written in a label, checked."""
        text = text.strip()
        if self.type is str:
            return self.check(text)
        try:
            value = self.type(text)
        except ValueError:
            raise ValueError(f"task parameter '{self.name}' must be {'an integer' if self.type is int else 'a number'}, "
                             f"got '{text}'") from None
        return self.check(value)

    def check(self, value):
        """The value itself when it has this parameter's type and range; ValueError otherwise."""
        if self.type is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif self.type is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            value = float(value) if ok else value
        else:
            ok = isinstance(value, str)
        if not ok:
            raise ValueError(f"task parameter '{self.name}' must be {self.type.__name__}, got {value!r}")
        size = len(value) if self.type is str else value
        if (self.low is not None and size < self.low) or (self.high is not None and size > self.high):
            what = "its length" if self.type is str else "it"
            raise ValueError(f"task parameter '{self.name}': {what} must be in "
                             f"{self._bound(self.low)}..{self._bound(self.high)}, got {size if self.type is str else value!r}")
        return value


TASKS: dict[str, type[Task]] = {}
"""Every task class by name, in registration order: what labels, the command line and the Train form offer."""


def register(cls: type[Task]) -> type[Task]:
    """Class decorator: make a `Task` subclass known by its `name` (labels, CLI help, the Train form)."""
    if not cls.name.isidentifier() or cls.name in TASKS:
        raise ValueError(f"a task needs a new identifier as its name, got '{cls.name}'")
    TASKS[cls.name] = cls
    return cls


class Task(ABC):
    """A target function f: {0,1}^n -> R, evaluated on batches of bit strings.

    A task is a class registered with `@register`: its `name`, a one-line `description`, whether
    it is `boolean`, and its `parameters` (a tuple of `Param`), from which labels are parsed and
    written, values validated, and the command line's help and the Train page's form generated.
    `Task(**values)` checks every value; parameters become attributes (`task.k`). A task with
    `positional = True` has one parameter written bare in its label (`table:0110`).
    """

    name: ClassVar[str]
    description: ClassVar[str]
    boolean: ClassVar[bool] = True
    parameters: ClassVar[tuple[Param, ...]] = ()
    positional: ClassVar[bool] = False

    def __init__(self, **values):
        known = {p.name: p for p in self.parameters}
        unknown = sorted(set(values) - set(known))
        if unknown:
            takes = ", ".join(p.describe() for p in self.parameters) or "no parameters"
            raise ValueError(f"task '{self.name}' does not take {unknown}; it takes {takes}")
        self._values = {}
        for param in self.parameters:
            if param.name in values:
                value = param.check(values[param.name])
            elif param.required:
                raise ValueError(f"task '{self.name}' needs {param.describe()}: {param.help}")
            else:
                value = param.default
            self._values[param.name] = value
            setattr(self, param.name, value)

    @abstractmethod
    def __call__(self, bits: torch.Tensor) -> torch.Tensor:
        """Values of f on `bits[batch, n]`: float32 `[batch]` in {0,1} (Boolean) or [0,1]."""

    def check_n(self, n: int) -> None:
        """Raise ValueError when the task is not defined for strings of length n."""
        check_int(f"{self.label}: n", n, "n")

    def values(self, n: int) -> torch.Tensor:
        """The whole truth table over the cube in vertex order: float32 `[2**n]`."""
        self.check_n(n)
        if n > cube.EXACT_LIMIT:
            raise ValueError(
                f"{self.label}: n={n} is above the exact limit of {cube.EXACT_LIMIT}; "
                "sample the cube instead (sensviz.cube.estimate)"
            )
        return self(cube.vertices(n))

    def values_pm1(self, n: int) -> torch.Tensor:
        """The truth table on the ±1 scale, `2 f - 1`: float64 `[2**n]`."""
        return 2.0 * self.values(n).double() - 1.0

    def params(self) -> dict:
        """The task's parameter values (JSON-compatible), empty for parameter-free tasks."""
        return dict(self._values)

    @property
    def label(self) -> str:
        """A string that `get_task` parses back into this task."""
        if not self._values:
            return self.name
        if self.positional:
            return f"{self.name}:{next(iter(self._values.values()))}"
        return self.name + ":" + ",".join(f"{k}={v}" for k, v in self._values.items())

    def spec(self) -> dict:
        """A JSON-compatible description that `task_from_spec` turns back into the task."""
        return {"name": self.name, **self._values}

    def __repr__(self) -> str:
        return f"Task({self.label})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Task) and self.spec() == other.spec()

    def __hash__(self) -> int:
        return hash(self.label)


def _check_bits(bits: torch.Tensor) -> torch.Tensor:
    if bits.dim() != 2:
        raise ValueError(f"bits must have shape [batch, n], got {tuple(bits.shape)}")
    return bits.long()


def _seed(help_text: str) -> Param:
    return Param("seed", int, help_text, default=0, low=LIMITS["seed"].low, high=LIMITS["seed"].high)


@register
class Parity(Task):
    """PARITY: the sum of the bits mod 2. as_n = n; all Fourier weight on degree n."""

    name = "parity"
    description = "the sum of the bits mod 2 (as_n = n)"

    def __call__(self, bits):
        return (_check_bits(bits).sum(dim=1) % 2).float()


@register
class Majority(Task):
    """MAJORITY: 1 when more ones than zeros (ties at even n give 0, as the authors' code).

    For odd n, as_n = (n+1) C(n, (n-1)/2) / 2**n (`majority_avg_sensitivity`).
    """

    name = "majority"
    description = "1 when more ones than zeros; ties give 0 (as_n ~ sqrt(n))"

    def __call__(self, bits):
        bits = _check_bits(bits)
        ones = bits.sum(dim=1)
        return (2 * ones > bits.shape[1]).float()


@register
class First(Task):
    """FIRST: the first bit x_1. as_n = 1."""

    name = "first"
    description = "the first bit (as_n = 1)"

    def __call__(self, bits):
        return _check_bits(bits)[:, 0].float()


@register
class Mean(Task):
    """MEAN: the mean of the bits, real-valued in [0,1]. as_n = 1/n in the influence form."""

    name = "mean"
    description = "the mean of the bits, real-valued (as_n = 1/n)"
    boolean = False

    def __call__(self, bits):
        return _check_bits(bits).float().mean(dim=1)


@register
class SparseParity(Task):
    """k-sparse parity: the parity of k positions drawn without replacement from a seed."""

    name = "sparse_parity"
    description = "the parity of k positions drawn from a seed (as_n = k)"
    parameters = (Param("k", int, "how many positions", low=1, high=LIMITS["n"].high),
                  _seed("which positions (a seeded draw)"))

    def check_n(self, n):
        super().check_n(n)
        if n < self.k:
            raise ValueError(f"{self.label}: needs n >= k={self.k}, got n={n}")

    def positions(self, n: int) -> list[int]:
        """The k positions (0-based, sorted) whose parity is taken at length n."""
        self.check_n(n)
        generator = torch.Generator().manual_seed(self.seed)
        return sorted(torch.randperm(n, generator=generator)[: self.k].tolist())

    def __call__(self, bits):
        bits = _check_bits(bits)
        chosen = bits[:, self.positions(bits.shape[1])]
        return (chosen.sum(dim=1) % 2).float()


class _TableTask(Task):
    """A task given by its truth table in vertex order."""

    @abstractmethod
    def table(self, n: int) -> torch.Tensor:
        """The truth table at length n: uint8 `[2**n]` in {0,1}, vertex order."""

    def __call__(self, bits):
        bits = _check_bits(bits)
        table = self._made(bits.shape[1]).to(bits.device)
        return table[cube.vertex_index(bits)].float()

    def _made(self, n: int) -> torch.Tensor:
        """`table(n)`, made once per task and length (the random task's 2**n draw, the given table's copy:
        16 MiB at n = 24, which every training step, evaluation and measurement looks up)."""
        made = self.__dict__.setdefault("_tables", {})
        if n not in made:
            made.clear()
            made[n] = self.table(n)
        return made[n]


@register
class RandomFunction(_TableTask):
    """A uniformly random Boolean function: the truth table drawn from a seed for each n."""

    name = "random"
    description = f"a uniformly random truth table drawn from a seed (n <= {MAX_TABLE_BITS})"
    parameters = (_seed("which function (a seeded draw)"),)

    def check_n(self, n):
        super().check_n(n)
        if n > MAX_TABLE_BITS:
            raise ValueError(f"{self.label}: truth tables are stored only up to n={MAX_TABLE_BITS}")

    def table(self, n):
        self.check_n(n)
        generator = torch.Generator().manual_seed(self.seed)
        return torch.randint(0, 2, (2**n,), generator=generator, dtype=torch.uint8)


@register
class TruthTable(_TableTask):
    """A user-given Boolean function: its truth table as a string of 0/1 in vertex order."""

    name = "table"
    description = "your own truth table: 2**n characters 0/1 in vertex order (position 0 most significant)"
    parameters = (Param("bits", str, "the truth table, 2**n characters 0/1 in vertex order", low=2,
                        high=2**MAX_TABLE_BITS),)
    positional = True

    def __init__(self, **values):
        super().__init__(**values)
        size = len(self.bits)
        if size & (size - 1) or set(self.bits) - {"0", "1"}:
            raise ValueError(
                "a truth table is a string of 0s and 1s whose length is a power of two (2**n, n >= 1); "
                f"got {size} characters"
            )

    @property
    def n(self) -> int:
        return len(self.bits).bit_length() - 1

    def check_n(self, n):
        super().check_n(n)
        if n != self.n:
            raise ValueError(f"this truth table has 2**{self.n} entries, so it is defined only for n={self.n}, not {n}")

    def table(self, n):
        self.check_n(n)
        return self._table.clone()

    @functools.cached_property
    def _table(self) -> torch.Tensor:
        return torch.frombuffer(bytearray(self.bits.encode()), dtype=torch.uint8) - ord("0")

    def packed(self) -> torch.Tensor:
        """The truth table as bits packed 8 to a byte (first entry in the high bit): uint8
        `[ceil(2**n / 8)]`, how a checkpoint stores it (`sensviz.checkpoints`), not in its header."""
        return torch.from_numpy(np.packbits(self._table.numpy()))

    @classmethod
    def from_packed(cls, packed, n: int) -> TruthTable:
        """The task of `packed()` bytes (a uint8 array or tensor) at length n; ValueError when they
        do not hold 2**n entries."""
        check_int("truth table n", n, Limit("truth tables", 1, MAX_TABLE_BITS, "n of a stored table"))
        packed = np.asarray(packed, dtype=np.uint8).reshape(-1)
        if packed.size != -(-(2**n) // 8):
            raise ValueError(f"a packed truth table for n={n} has {-(-(2**n) // 8)} bytes, got {packed.size}")
        return cls(bits=(np.unpackbits(packed)[: 2**n] + ord("0")).tobytes().decode())


def describe_tasks() -> str:
    """Every registered task's label form and description, for help texts."""
    lines = []
    for cls in TASKS.values():
        if cls.positional:
            form = f"{cls.name}:<{cls.parameters[0].name}>"
        else:
            form = cls.name + (":" + ",".join(p.describe() for p in cls.parameters) if cls.parameters else "")
        lines.append(f"{form}: {cls.description}")
    return "; ".join(lines)


def _task_class(name) -> type[Task]:
    try:
        return TASKS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown task '{name}'; known tasks: {', '.join(TASKS)}") from None


def get_task(label: str | Task) -> Task:
    """Parse a task label: `parity`, `sparse_parity:k=3,seed=0`, `random:seed=1`, `table:0110`.

    Raises ValueError with a readable message for an unknown name or bad parameters.
    """
    if isinstance(label, Task):
        return label
    name, colon, rest = str(label).strip().partition(":")
    cls = _task_class(name.strip().lower())
    if cls.positional:
        return cls(**{cls.parameters[0].name: cls.parameters[0].parse(rest)})
    if colon and not cls.parameters:
        raise ValueError(f"task '{cls.name}' takes no parameters, got '{rest}'")
    known = {p.name: p for p in cls.parameters}
    values = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq:
            raise ValueError(f"task parameter '{item}' is not of the form key=value")
        if key not in known:
            raise ValueError(f"task '{cls.name}' has no parameter '{key}'; it takes "
                             + ", ".join(p.describe() for p in cls.parameters))
        values[key] = known[key].parse(value)
    return cls(**values)


def task_from_spec(spec: dict) -> Task:
    """Rebuild a task from `Task.spec()` (as stored in checkpoint metadata); ValueError if it cannot be."""
    if not isinstance(spec, dict):
        raise ValueError(f"a task spec is a mapping with a name, got {type(spec).__name__}")
    values = dict(spec)
    return _task_class(values.pop("name", None))(**values)


def majority_avg_sensitivity(n: int) -> float:
    """Closed form of as_n(MAJORITY) for odd n: (n+1) C(n, (n-1)/2) / 2**n."""
    if n % 2 == 0:
        raise ValueError("the closed form holds for odd n")
    return (n + 1) * math.comb(n, (n - 1) // 2) / 2**n


@dataclass(frozen=True)
class TargetEncoding:
    """How a model's real output encodes a Boolean target.

    `zero_one`: trained on targets in {0,1} (MSE), decision boundary 0.5 — the authors' default;
    `pm1`: trained on targets in {-1,+1} (MSE), decision boundary 0;
    `logit`: trained with binary cross-entropy on {0,1} targets, the output is a logit,
    decision boundary 0.
    `to_pm1` maps an output to the ±1 scale the analysis uses: 2y-1, y, and
    2 sigmoid(y) - 1 = tanh(y/2) respectively.
    """

    name: str
    threshold: float

    def encode(self, values01: torch.Tensor) -> torch.Tensor:
        """Training targets for task values in [0,1]."""
        return 2.0 * values01 - 1.0 if self.name == "pm1" else values01

    def to_pm1(self, output: torch.Tensor) -> torch.Tensor:
        """The output on the ±1 scale (float64)."""
        output = output.double()
        if self.name == "zero_one":
            return 2.0 * output - 1.0
        return torch.tanh(output / 2) if self.name == "logit" else output

    def decide(self, output: torch.Tensor) -> torch.Tensor:
        """The Boolean decision in {0,1} (float32): output above the threshold."""
        return (output > self.threshold).float()


ZERO_ONE = TargetEncoding("zero_one", 0.5)
PM1 = TargetEncoding("pm1", 0.0)
LOGIT = TargetEncoding("logit", 0.0)
ENCODINGS = {e.name: e for e in (ZERO_ONE, PM1, LOGIT)}


def pm1_factor(encoding: TargetEncoding) -> float:
    """The factor that puts a squared output change on the ±1 scale of the paper's plots: 4 for a model trained
    on 0/1 targets (y -> 2y - 1 turns a change dy into 2 dy, and (2 dy)^2 = 4 dy^2), else 1."""
    return 4.0 if encoding.name == ZERO_ONE.name else 1.0


def get_encoding(name: str) -> TargetEncoding:
    """`zero_one`, `pm1` or `logit`, with a clear error otherwise."""
    try:
        return ENCODINGS[name]
    except KeyError:
        raise ValueError(f"unknown target encoding '{name}'; use one of {sorted(ENCODINGS)}") from None
