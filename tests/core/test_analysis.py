"""A model on the cube: one pass per vertex vs one per (input, bit); exact vs sampled."""

import math

import torch

import sensviz as sv
from sensviz import analysis, cube


def test_cube_outputs_are_the_model_on_every_vertex(any_model):
    with torch.no_grad():
        expected = any_model(cube.vertices(7))
    fractions = []
    got = analysis.cube_outputs(any_model, 7, batch_size=50, progress=fractions.append)
    assert torch.allclose(got, expected, atol=1e-6)
    assert fractions[-1] == 1.0 and fractions == sorted(fractions)


def test_model_sensitivity_by_neighbour_indexing_equals_one_pass_per_bit(any_model):
    n = 6
    bits = cube.vertices(n)
    report = analysis.sensitivity_report(any_model, n, sv.get_task("parity"))
    with torch.no_grad():
        f = any_model(bits)
        looped_count = torch.zeros(2**n, dtype=torch.float64)
        looped_real = torch.zeros(2**n, dtype=torch.float64)
        for i in range(n):
            g = any_model(cube.flip(bits, i))
            looped_count += ((f > 0.5) != (g > 0.5)).double()
            looped_real += ((2 * f.double() - 2 * g.double()) / 2) ** 2
    assert torch.equal(report.model.sensitivity, looped_count)
    assert torch.allclose(report.model_real.sensitivity, looped_real, atol=1e-9)
    assert report.target.avg_sensitivity == n


def test_exact_and_sampled_model_sensitivity_agree(encoder_model):
    task = sv.get_task("majority")
    exact = analysis.sensitivity_report(encoder_model, 10, task)
    sampled = analysis.sensitivity_report(encoder_model, 10, task, exact_limit=6, n_samples=3000, seed=2)
    assert exact.exact and not sampled.exact and sampled.outputs is None
    for view in ("model", "model_real", "target"):
        e, s = getattr(exact, view), getattr(sampled, view)
        assert abs(e.avg_sensitivity - s.avg_sensitivity) <= 4 * s.stderr + 1e-12, view
    assert abs(exact.accuracy - sampled.accuracy) < 4 * math.sqrt(0.25 / 3000)


def test_mean_attention_by_weight(any_model):
    n = 5
    avg = analysis.mean_attention(any_model, n, batch_size=7)
    assert avg.exact and avg.counts.tolist() == [math.comb(n, w) for w in range(n + 1)]
    with torch.no_grad():
        attention = any_model.trace(cube.vertices(n)).attention.double()
    assert torch.allclose(avg.overall, attention.mean(0), atol=1e-6)
    weights = cube.vertices(n).sum(1)
    assert torch.allclose(avg.by_weight[2], attention[weights == 2].mean(0), atol=1e-6)
    sampled = analysis.mean_attention(any_model, n, exact_limit=3, n_samples=100)
    assert not sampled.exact and sampled.counts.sum() == 100


def test_gray_grid_places_neighbours_next_to_each_other():
    for n in (1, 2, 5, 8):
        rows, cols = cube.gray_grid(n)
        cell = {(int(r), int(c)): v for v, (r, c) in enumerate(zip(rows, cols))}
        assert len(cell) == 2**n
        for (r, c), v in cell.items():
            for other in ((r + 1, c), (r, c + 1)):
                if other in cell:
                    assert bin(v ^ cell[other]).count("1") == 1
