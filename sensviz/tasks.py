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
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from . import cube
from .limits import check_int

MAX_TABLE_BITS = 24
"""Largest n for tasks stored as a truth table (2**24 entries = 16 MiB of bytes)."""


class Task(ABC):
    """A target function f: {0,1}^n -> R, evaluated on batches of bit strings."""

    name: str
    boolean: bool = True

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

    @property
    def label(self) -> str:
        """A string that `get_task` parses back into this task."""
        params = self.params()
        if not params:
            return self.name
        return self.name + ":" + ",".join(f"{k}={v}" for k, v in params.items())

    def params(self) -> dict:
        """The task's parameters (JSON-compatible), empty for parameter-free tasks."""
        return {}

    def spec(self) -> dict:
        """A JSON-compatible description that `task_from_spec` turns back into the task."""
        return {"name": self.name, **self.params()}

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


class Parity(Task):
    """PARITY: the sum of the bits mod 2. as_n = n; all Fourier weight on degree n."""

    name = "parity"

    def __call__(self, bits):
        return (_check_bits(bits).sum(dim=1) % 2).float()


class Majority(Task):
    """MAJORITY: 1 when more ones than zeros (ties at even n give 0, as the authors' code).

    For odd n, as_n = (n+1) C(n, (n-1)/2) / 2**n (`majority_avg_sensitivity`).
    """

    name = "majority"

    def __call__(self, bits):
        bits = _check_bits(bits)
        ones = bits.sum(dim=1)
        return (2 * ones > bits.shape[1]).float()


class First(Task):
    """FIRST: the first bit x_1. as_n = 1."""

    name = "first"

    def __call__(self, bits):
        return _check_bits(bits)[:, 0].float()


class Mean(Task):
    """MEAN: the mean of the bits, real-valued in [0,1]. as_n = 1/n in the influence form."""

    name = "mean"
    boolean = False

    def __call__(self, bits):
        return _check_bits(bits).float().mean(dim=1)


@dataclass(eq=False, repr=False)
class SparseParity(Task):
    """k-sparse parity: the parity of k positions drawn without replacement from a seed."""

    k: int
    seed: int = 0
    name = "sparse_parity"

    def __post_init__(self):
        check_int("sparse_parity: k", self.k, "n")
        check_int("sparse_parity: seed", self.seed, "seed")

    def params(self):
        return {"k": self.k, "seed": self.seed}

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

    def table(self, n: int) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self, bits):
        bits = _check_bits(bits)
        table = self.table(bits.shape[1]).to(bits.device)
        return table[cube.vertex_index(bits)].float()


@dataclass(eq=False, repr=False)
class RandomFunction(_TableTask):
    """A uniformly random Boolean function: the truth table drawn from a seed for each n."""

    seed: int = 0
    name = "random"

    def __post_init__(self):
        check_int("random: seed", self.seed, "seed")

    def params(self):
        return {"seed": self.seed}

    def check_n(self, n):
        super().check_n(n)
        if n > MAX_TABLE_BITS:
            raise ValueError(f"{self.label}: truth tables are stored only up to n={MAX_TABLE_BITS}")

    def table(self, n):
        self.check_n(n)
        generator = torch.Generator().manual_seed(self.seed)
        return torch.randint(0, 2, (2**n,), generator=generator, dtype=torch.uint8)


@dataclass(eq=False, repr=False)
class TruthTable(_TableTask):
    """A user-given Boolean function: its truth table as a string of 0/1 in vertex order."""

    bits: str
    name = "table"

    def __post_init__(self):
        if not isinstance(self.bits, str):
            raise ValueError(f"a truth table is a string of 0s and 1s, got {type(self.bits).__name__}")
        size = len(self.bits)
        if size < 2 or size & (size - 1) or set(self.bits) - {"0", "1"}:
            raise ValueError(
                "a truth table is a string of 0s and 1s whose length is a power of two (2**n, n >= 1); "
                f"got {size} characters"
            )
        if size > 2**MAX_TABLE_BITS:
            raise ValueError(f"truth tables are accepted only up to n={MAX_TABLE_BITS}")

    @property
    def n(self) -> int:
        return len(self.bits).bit_length() - 1

    def params(self):
        return {"bits": self.bits}

    @property
    def label(self):
        return f"table:{self.bits}"

    def check_n(self, n):
        super().check_n(n)
        if n != self.n:
            raise ValueError(f"this truth table has 2**{self.n} entries, so it is defined only for n={self.n}, not {n}")

    def table(self, n):
        self.check_n(n)
        return torch.tensor(bytearray(self.bits.encode()), dtype=torch.uint8) - ord("0")


_SIMPLE = {cls.name: cls for cls in (Parity, Majority, First, Mean)}
TASK_NAMES = ("parity", "majority", "first", "mean", "sparse_parity", "random", "table")
"""Every task name `get_task` accepts."""


def get_task(label: str) -> Task:
    """Parse a task label: `parity`, `sparse_parity:k=3,seed=0`, `random:seed=1`, `table:0110`.

    Raises ValueError with a readable message for an unknown name or bad parameters.
    """
    if isinstance(label, Task):
        return label
    name, _, rest = str(label).strip().partition(":")
    name = name.strip().lower()
    if name in _SIMPLE:
        if rest:
            raise ValueError(f"task '{name}' takes no parameters, got '{rest}'")
        return _SIMPLE[name]()
    if name == "table":
        return TruthTable(rest.strip())
    params = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"task parameter '{item}' is not of the form key=value")
        try:
            params[key.strip()] = int(value)
        except ValueError:
            raise ValueError(f"task parameter '{key.strip()}' must be an integer, got '{value}'") from None
    return task_from_spec({"name": name, **params})


def task_from_spec(spec: dict) -> Task:
    """Rebuild a task from `Task.spec()` (as stored in checkpoint metadata)."""
    spec = dict(spec)
    name = spec.pop("name", None)
    if name in _SIMPLE and not spec:
        return _SIMPLE[name]()
    builders = {"sparse_parity": SparseParity, "random": RandomFunction, "table": TruthTable}
    if name not in builders and name not in _SIMPLE:
        raise ValueError(f"unknown task '{name}'; known tasks: {', '.join(TASK_NAMES)}")
    try:
        return (builders.get(name) or _SIMPLE[name])(**spec)
    except TypeError:
        raise ValueError(f"task '{name}' does not take parameters {sorted(spec)}") from None


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


def get_encoding(name: str) -> TargetEncoding:
    """`zero_one`, `pm1` or `logit`, with a clear error otherwise."""
    try:
        return ENCODINGS[name]
    except KeyError:
        raise ValueError(f"unknown target encoding '{name}'; use one of {sorted(ENCODINGS)}") from None
