"""The Hamming cube {0,1}^n: vertices, flips, sampling, sensitivity and the Fourier spectrum.

Vertex order (DESIGN.md section 3): vertex v in range(2**n) is the string whose position 0 is the
most significant bit of v, so flipping position i is `v ^ (1 << (n-1-i))`. Every function here
works on a *table* of values over the cube in that order — a task's truth table or a model's
outputs — on the ±1 scale (a {0,1} value b is 2b-1).

Definitions (paper/summary.txt), for f: {±1}^n -> R and x^{⊕i} the string with bit i flipped:
- sensitivity, count form: s(f,x) = #{i : f(x^{⊕i}) != f(x)};
- sensitivity, influence form: s(f,x) = sum_i ((f(x) - f(x^{⊕i})) / 2)^2, equal to the count form
  when f is ±1-valued, and the form used for real-valued f (MEAN, a regression output);
- average sensitivity as_n(f) = E_x s(f,x); influence of coordinate i: Inf_i = E_x ((f(x)-f(x^{⊕i}))/2)^2;
- Fourier expansion f(x) = sum_P lambda_P chi_P(x), chi_P(x) = prod_{i in P} x_i, so
  lambda_P = E_x f(x) chi_P(x), computed for all P at once by the fast Walsh–Hadamard transform
  (O(n 2^n)); the coefficient of P sits at the index whose set bits are P (bit n-1-i <-> position i);
- degree profile d_k = sum_{|P|=k} lambda_P^2, with as_n(f) = sum_k k d_k (influence form).

Exact analysis enumerates the cube up to `EXACT_LIMIT` bits. Above it, `estimate` samples
vertices with a seed and returns a Monte Carlo estimate with its standard error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .records import Record, per_input
from .settings import EXACT_LIMIT  # noqa: F401  (defined torch-free, re-exported)

SAMPLED_LIMIT = 2048
"""Largest n for Monte Carlo estimates: each sampled input needs its n neighbours evaluated."""
_ELEMENT_BUDGET = 2**22
"""Bits (int64) of neighbourhoods built at once by `estimate_views` (32 MiB)."""


def _check_n(n: int, limit: int = EXACT_LIMIT) -> None:
    if not 1 <= n <= limit:
        raise ValueError(f"exact enumeration needs 1 <= n <= {limit}, got n={n}; sample the cube instead")


def bit_weights(n: int, device=None) -> torch.Tensor:
    """The place value of each position: `[n]` int64, position 0 has 2**(n-1)."""
    return 2 ** torch.arange(n - 1, -1, -1, device=device, dtype=torch.int64)


def vertex_bits(index: torch.Tensor, n: int) -> torch.Tensor:
    """Bit strings of the given vertex indices: int64 `[len(index), n]`."""
    index = torch.as_tensor(index, dtype=torch.int64)
    return (index.unsqueeze(-1) // bit_weights(n, index.device)) % 2


def vertices(n: int, device=None, limit: int = EXACT_LIMIT) -> torch.Tensor:
    """All 2**n bit strings in vertex order: int64 `[2**n, n]`."""
    _check_n(n, limit)
    return vertex_bits(torch.arange(2**n, device=device), n)


def vertex_batches(n: int, batch_size: int, device=None, limit: int = EXACT_LIMIT):
    """All 2**n bit strings in vertex order, in consecutive batches: yields `(fraction done, bits[b, n])`."""
    _check_n(n, limit)
    total = 2**n
    for start in range(0, total, batch_size):
        index = torch.arange(start, min(start + batch_size, total), device=device)
        yield start / total, vertex_bits(index, n)


def vertex_index(bits: torch.Tensor) -> torch.Tensor:
    """The vertex index of each bit string: int64 `[batch]`."""
    return (bits.long() * bit_weights(bits.shape[-1], bits.device)).sum(dim=-1)


def flip(bits: torch.Tensor, i: int) -> torch.Tensor:
    """Copies of `bits[batch, n]` with position i flipped (XOR)."""
    flipped = bits.clone()
    flipped[:, i] ^= 1
    return flipped


def neighbour(index: torch.Tensor, i: int, n: int) -> torch.Tensor:
    """Index of the vertex that differs from `index` in position i."""
    return index ^ (1 << (n - 1 - i))


def hamming_weight(n: int, device=None) -> torch.Tensor:
    """Number of ones of every vertex in vertex order: int64 `[2**n]` (also |P| of index P)."""
    weight = torch.zeros(1, dtype=torch.int64, device=device)
    for _ in range(n):
        weight = torch.cat([weight, weight + 1])
    return weight


def gray_grid(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A Karnaugh-map layout of the cube: grid (row, col) of every vertex, each `[2**n]` int64.

    Positions 0..r-1 (r = ceil(n/2)) choose the row and the rest the column, each in reflected
    Gray-code order, so vertices that differ in one bit sit in adjacent rows or columns
    (adjacent modulo wrap-around at the edges).
    """
    _check_n(n)
    rows_bits = (n + 1) // 2
    index = torch.arange(2**n)
    high, low = index >> (n - rows_bits), index & ((1 << (n - rows_bits)) - 1)
    return _gray_rank(high, rows_bits), _gray_rank(low, n - rows_bits)


def _gray_rank(code: torch.Tensor, bits: int) -> torch.Tensor:
    """The position of each Gray code word in the reflected Gray sequence (inverse Gray code)."""
    rank = code.clone()
    shift = 1
    while shift < max(bits, 1):
        rank ^= rank >> shift
        shift <<= 1
    return rank


def sample(n: int, count: int, seed: int | torch.Generator = 0, device=None) -> torch.Tensor:
    """`count` bit strings drawn uniformly and independently: int64 `[count, n]`."""
    generator = seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(seed)
    return torch.randint(0, 2, (count, n), generator=generator).to(device)


def measurement_inputs(n: int, max_inputs: int = 1024, seed: int = 0, device=None) -> tuple[torch.Tensor, bool]:
    """Inputs for a measurement: `(bits, exact)`, the whole cube when 2**n <= max_inputs (vertex
    order, exact=True), else `max_inputs` seeded uniform strings (exact=False)."""
    if n < 1 or max_inputs < 1:
        raise ValueError(f"n and max_inputs must be positive, got n={n}, max_inputs={max_inputs}")
    if n <= EXACT_LIMIT and n < max_inputs.bit_length():  # 2**n <= max_inputs
        return vertices(n, device), True
    return sample(n, max_inputs, seed, device), False


def _table(values) -> tuple[torch.Tensor, int]:
    table = torch.as_tensor(values).double().flatten()
    size = table.numel()
    if size < 2 or size & (size - 1):
        raise ValueError(f"a table over the cube has 2**n entries (n >= 1), got {size}")
    return table, size.bit_length() - 1


def flipped(values, i: int) -> torch.Tensor:
    """The table g(x) = f(x^{⊕i}): entries of vertices and their i-neighbours swapped."""
    table, n = _table(values)
    return table.view(2**i, 2, 2 ** (n - 1 - i)).flip(1).reshape(-1)


def sensitivity(values, form: str = "influence") -> torch.Tensor:
    """s(f,x) for every vertex: float64 `[2**n]`.

    form="influence": sum_i ((f(x) - f(x^{⊕i})) / 2)^2 (any real f);
    form="count": #{i : f(x^{⊕i}) != f(x)} (Boolean f; equal to the above for ±1 values).
    """
    if form not in ("influence", "count"):
        raise ValueError(f"form must be 'influence' or 'count', got '{form}'")
    table, n = _table(values)
    total = torch.zeros_like(table)
    for i in range(n):
        other = flipped(table, i)
        total += (table != other).double() if form == "count" else ((table - other) / 2) ** 2
    return total


def influence(values) -> torch.Tensor:
    """Inf_i(f) = E_x ((f(x) - f(x^{⊕i})) / 2)^2 per position: float64 `[n]`."""
    table, n = _table(values)
    return torch.stack([(((table - flipped(table, i)) / 2) ** 2).mean() for i in range(n)])


def fwht(values) -> torch.Tensor:
    """Fourier coefficients lambda_P = E_x f(x) chi_P(x) of a ±1-scale table: float64 `[2**n]`.

    In-place butterflies, n passes over 2**n entries. Along position i the pair
    (f at bit 0, f at bit 1) = (f(x_i=-1), f(x_i=+1)) becomes (sum, difference (+1) - (-1)).
    """
    table, n = _table(values)
    coeffs = table.clone()
    for i in range(n):
        pairs = coeffs.view(2**i, 2, 2 ** (n - 1 - i))
        low, high = pairs[:, 0].clone(), pairs[:, 1]
        pairs[:, 0] += high
        pairs[:, 1] -= low
    return coeffs / 2**n


def _sum_by_weight(per_vertex: torch.Tensor, n: int) -> torch.Tensor:
    """Sums of a per-vertex (or per-subset) table grouped by Hamming weight: `[n+1]`."""
    return torch.zeros(n + 1, dtype=torch.float64).index_add_(0, hamming_weight(n), per_vertex.double())


def degree_profile(values) -> torch.Tensor:
    """d_k = sum_{|P|=k} lambda_P^2 for k = 0..n: float64 `[n+1]`."""
    coeffs = fwht(values)
    return _sum_by_weight(coeffs**2, coeffs.numel().bit_length() - 1)


@dataclass
class CubeAnalysis(Record):
    """Sensitivity and spectrum of one function, exactly over the whole cube."""

    n: int
    sensitivity: torch.Tensor = per_input()  # [2**n] s(f,x), influence form
    avg_sensitivity: float  # as_n(f)
    max_sensitivity: float  # max_x s(f,x)
    influence: torch.Tensor  # [n] Inf_i
    sensitivity_by_weight: torch.Tensor  # [n+1] mean s(f,x) over vertices of Hamming weight w
    coefficients: torch.Tensor = per_input()  # [2**n] lambda_P
    degree_profile: torch.Tensor  # [n+1] d_k
    boolean: bool  # every value is ±1
    exact: bool = True


def analyze(values) -> CubeAnalysis:
    """Exact analysis of a ±1-scale table over the cube (see module docstring).

    s(f,x) uses the influence form, which equals the count form when f is ±1-valued.
    """
    table, n = _table(values)
    sens = sensitivity(table)
    coeffs = fwht(table)
    return CubeAnalysis(
        n=n,
        sensitivity=sens,
        avg_sensitivity=sens.mean().item(),
        max_sensitivity=sens.max().item(),
        influence=influence(table),
        sensitivity_by_weight=_sum_by_weight(sens, n) / _sum_by_weight(torch.ones_like(sens), n),
        coefficients=coeffs,
        degree_profile=_sum_by_weight(coeffs**2, n),
        boolean=bool(((table == 1) | (table == -1)).all()),
    )


@dataclass
class CubeEstimate(Record):
    """Monte Carlo estimate of sensitivity from uniformly sampled vertices (labelled `exact=False`)."""

    n: int
    avg_sensitivity: float  # estimate of as_n(f)
    stderr: float  # standard error of that estimate
    max_sensitivity: float  # the largest s(f,x) seen in the sample (a lower bound on the maximum)
    influence: torch.Tensor  # [n] estimates of Inf_i
    influence_stderr: torch.Tensor  # [n]
    n_samples: int
    seed: int
    sensitivity: torch.Tensor = per_input()  # [n_samples] s(f,x) at each sampled vertex
    weight: torch.Tensor = per_input()  # [n_samples] Hamming weight of each sampled vertex
    exact: bool = False


def estimate_views(
    function: Callable[[torch.Tensor], torch.Tensor],
    n: int,
    views: dict[str, Callable[[torch.Tensor], torch.Tensor]],
    n_samples: int = 4096,
    seed: int = 0,
    batch_size: int = 65536,
) -> dict[str, CubeEstimate]:
    """Monte Carlo estimates for several views of one function, evaluated once.

    `function` maps `bits[batch, n]` to values `[batch]`; it is called on batches of at most
    `batch_size` strings, the sampled vertices and their n neighbours. Each view maps those values
    to the ±1 scale (e.g. the identity, or a threshold) and gets its own `CubeEstimate` of
    as_n (influence form) and the influences.
    """
    if n_samples < 2:
        raise ValueError("a Monte Carlo estimate needs at least 2 samples")
    if not 1 <= n <= SAMPLED_LIMIT:
        raise ValueError(f"sampled sensitivity needs 1 <= n <= {SAMPLED_LIMIT} (every sampled input is evaluated "
                         f"with its n neighbours), got n={n}")
    points = sample(n, n_samples, seed)
    per_point = {name: torch.empty(n_samples, n, dtype=torch.float64) for name in views}  # ((f(x)-f(x^i))/2)^2
    chunk = max(1, min(batch_size // (n + 1), _ELEMENT_BUDGET // ((n + 1) * n)))
    for start in range(0, n_samples, chunk):
        x = points[start : start + chunk]  # [b, n]
        flips = x.unsqueeze(1).repeat(1, n, 1)  # [b, n, n]: row i has bit i flipped
        flips[:, torch.arange(n), torch.arange(n)] ^= 1
        values = torch.as_tensor(function(torch.cat([x, flips.reshape(-1, n)]))).flatten()
        for name, view in views.items():
            seen = torch.as_tensor(view(values)).double()
            f_x, f_flip = seen[: len(x)], seen[len(x) :].view(len(x), n)
            per_point[name][start : start + len(x)] = ((f_x.unsqueeze(1) - f_flip) / 2) ** 2
    root = n_samples**0.5
    estimates = {}
    for name, table in per_point.items():
        sens = table.sum(dim=1)
        estimates[name] = CubeEstimate(
            n=n,
            avg_sensitivity=sens.mean().item(),
            stderr=(sens.std() / root).item(),
            max_sensitivity=sens.max().item(),
            influence=table.mean(dim=0),
            influence_stderr=table.std(dim=0) / root,
            n_samples=n_samples,
            seed=seed,
            sensitivity=sens,
            weight=points.sum(dim=1),
        )
    return estimates


def estimate(
    function: Callable[[torch.Tensor], torch.Tensor],
    n: int,
    n_samples: int = 4096,
    seed: int = 0,
    batch_size: int = 65536,
) -> CubeEstimate:
    """Estimate as_n(f) and the influences of a ±1-scale function from `n_samples` uniform
    vertices and their neighbours (see `estimate_views`)."""
    return estimate_views(function, n, {"f": lambda v: v}, n_samples, seed, batch_size)["f"]
