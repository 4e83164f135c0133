"""Cube analysis against closed forms and brute force."""

import math

import pytest
import torch

from sensviz import cube, tasks
from sensviz.tasks import get_task


def brute_force_coefficients(table: torch.Tensor) -> torch.Tensor:
    """lambda_P = E_x f(x) chi_P(x) from the dense 2^n x 2^n character matrix."""
    n = table.numel().bit_length() - 1
    x = 2.0 * cube.vertices(n).double() - 1.0  # [2^n, n] on the ±1 scale
    subsets = cube.vertices(n).bool()  # row P: membership of each position
    chi = torch.stack([x[:, s].prod(dim=1) for s in subsets], dim=1)  # [x, P]
    return chi.T @ table.double() / 2**n


def brute_force_sensitivity(table: torch.Tensor) -> torch.Tensor:
    n = table.numel().bit_length() - 1
    out = torch.zeros(2**n, dtype=torch.float64)
    for v in range(2**n):
        for i in range(n):
            out[v] += float(table[v] != table[v ^ (1 << (n - 1 - i))])
    return out


def test_vertex_order_and_flip():
    bits = cube.vertices(3)
    assert bits[0b100].tolist() == [1, 0, 0]
    assert bits[0b011].tolist() == [0, 1, 1]
    assert torch.equal(cube.vertex_index(bits), torch.arange(8))
    flipped = cube.flip(bits, 0)
    assert torch.equal(cube.vertex_index(flipped), cube.neighbour(torch.arange(8), 0, 3))
    assert torch.equal(cube.hamming_weight(3), bits.sum(dim=1))


def test_sampling_is_seeded_and_uniform():
    a, b = cube.sample(12, 4000, seed=1), cube.sample(12, 4000, seed=1)
    assert torch.equal(a, b) and not torch.equal(a, cube.sample(12, 4000, seed=2))
    assert abs(a.float().mean().item() - 0.5) < 0.01


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_fwht_matches_brute_force(n):
    table = torch.randn(2**n, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
    assert torch.allclose(cube.fwht(table), brute_force_coefficients(table), atol=1e-12)


def test_fwht_inverts_to_the_function():
    table = tasks.get_task("random:seed=2").values_pm1(7)
    coeffs = cube.fwht(table)
    x = 2.0 * cube.vertices(7).double() - 1.0
    rebuilt = sum(c * x[:, cube.vertex_bits(torch.tensor(p), 7).bool()].prod(dim=1) for p, c in enumerate(coeffs))
    assert torch.allclose(rebuilt, table, atol=1e-12)


@pytest.mark.parametrize("n", [1, 4, 9, 14])
def test_parity_closed_forms(n):
    result = cube.analyze(get_task("parity").values_pm1(n))
    assert result.avg_sensitivity == n and result.max_sensitivity == n
    expected = torch.zeros(n + 1, dtype=torch.float64)
    expected[n] = 1.0
    assert torch.allclose(result.degree_profile, expected)
    assert torch.allclose(result.influence, torch.ones(n, dtype=torch.float64))


@pytest.mark.parametrize("n", [1, 5, 12])
def test_first_closed_form(n):
    result = cube.analyze(get_task("first").values_pm1(n))
    assert result.avg_sensitivity == 1.0
    assert result.degree_profile[1] == pytest.approx(1.0)


@pytest.mark.parametrize("n", [1, 3, 7, 11, 15])
def test_majority_odd_closed_form(n):
    expected = (n + 1) * math.comb(n, (n - 1) // 2) / 2**n
    assert cube.analyze(get_task("majority").values_pm1(n)).avg_sensitivity == pytest.approx(expected, rel=1e-12)
    assert tasks.majority_avg_sensitivity(n) == pytest.approx(expected)


@pytest.mark.parametrize("n", [2, 6, 10])
def test_mean_influence_form_is_one_over_n(n):
    result = cube.analyze(get_task("mean").values_pm1(n))
    assert result.avg_sensitivity == pytest.approx(1 / n, rel=1e-6)
    assert not result.boolean


@pytest.mark.parametrize("label,n", [("random:seed=0", 6), ("majority", 8), ("sparse_parity:k=3,seed=1", 7)])
def test_count_form_matches_brute_force_and_influence_form(label, n):
    table = get_task(label).values_pm1(n)
    brute = brute_force_sensitivity(table)
    assert torch.equal(cube.sensitivity(table, form="count"), brute)
    assert torch.allclose(cube.sensitivity(table, form="influence"), brute)


@pytest.mark.parametrize("seed", range(4))
def test_avg_sensitivity_equals_weighted_degree_profile(seed):
    table = torch.randn(2**9, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    result = cube.analyze(table)
    weighted = (torch.arange(10, dtype=torch.float64) * result.degree_profile).sum()
    assert result.avg_sensitivity == pytest.approx(weighted.item(), rel=1e-10)
    assert result.degree_profile.sum().item() == pytest.approx((table**2).mean().item(), rel=1e-10)  # Parseval


def test_influence_and_weight_grouping_against_loops():
    n = 6
    table = get_task("random:seed=9").values_pm1(n)
    result = cube.analyze(table)
    for i in range(n):
        flips = sum(float(table[v] != table[v ^ (1 << (n - 1 - i))]) for v in range(2**n))
        assert result.influence[i].item() == pytest.approx(flips / 2**n)
    weights = cube.vertices(n).sum(dim=1)
    for w in range(n + 1):
        assert result.sensitivity_by_weight[w].item() == pytest.approx(result.sensitivity[weights == w].mean().item())


@pytest.mark.parametrize("label", ["majority", "random:seed=1", "mean"])
def test_exact_and_monte_carlo_agree_within_four_standard_errors(label):
    n = 12
    task = get_task(label)
    exact = cube.analyze(task.values_pm1(n))
    est = cube.estimate(lambda bits: 2.0 * task(bits).double() - 1.0, n, n_samples=3000, seed=0)
    assert not est.exact and est.n_samples == 3000 and est.stderr > 0
    assert abs(est.avg_sensitivity - exact.avg_sensitivity) < 4 * est.stderr
    assert torch.all((est.influence - exact.influence).abs() < 4 * est.influence_stderr + 1e-12)


def test_monte_carlo_is_seeded():
    task = get_task("majority")
    fn = lambda bits: 2.0 * task(bits).double() - 1.0  # noqa: E731
    a = cube.estimate(fn, 25, n_samples=200, seed=3)
    assert a.avg_sensitivity == cube.estimate(fn, 25, n_samples=200, seed=3).avg_sensitivity
    assert a.avg_sensitivity != cube.estimate(fn, 25, n_samples=200, seed=4).avg_sensitivity


def test_estimate_views_share_one_evaluation():
    calls = []

    def fn(bits):
        calls.append(len(bits))
        return bits.double().sum(dim=1) / bits.shape[1] * 2 - 1

    views = {"real": lambda v: v, "sign": lambda v: torch.where(v > 0, 1.0, -1.0)}
    out = cube.estimate_views(fn, 9, views, n_samples=100, seed=0)
    assert sum(calls) == 100 * 10
    assert set(out) == {"real", "sign"} and out["real"].avg_sensitivity != out["sign"].avg_sensitivity


def test_sampling_limit_is_explained():
    with pytest.raises(ValueError, match="sampled sensitivity needs"):
        cube.estimate(lambda bits: bits[:, 0].double(), cube.SAMPLED_LIMIT + 1, n_samples=10)
    est = cube.estimate(lambda bits: 2.0 * bits[:, 0].double() - 1.0, 1500, n_samples=4, seed=0)  # FIRST at n=1500
    assert est.avg_sensitivity == 1.0


def test_limits_and_bad_tables():
    with pytest.raises(ValueError, match="exact enumeration"):
        cube.vertices(cube.EXACT_LIMIT + 1)
    with pytest.raises(ValueError, match="2\\*\\*n"):
        cube.analyze(torch.ones(6))
    with pytest.raises(ValueError, match="above the exact limit"):
        get_task("parity").values(cube.EXACT_LIMIT + 1)
