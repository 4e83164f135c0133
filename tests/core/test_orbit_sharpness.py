"""Symmetry-aware sharpness: a function of the orbit, where L_rho is not."""

import pytest

import sensviz as sv
from sensviz import cube
from sensviz.orbit_sharpness import orbit_sharpness
from sensviz.sharpness import sharpness
from sensviz.symmetries import EXACT, apply, canonical


@pytest.mark.parametrize("seed", [0, 1])
def test_two_copies_related_by_a_map_agree_within_one_percent_while_sharpness_does_not(seed):
    model = sv.build_model("encoder", d_model=8, n_layers=2, n_heads=2, max_len=6, seed=seed)
    other = apply(model, EXACT, kappa=100.0, seed=7 + seed)
    bits = cube.vertices(6)
    found = [orbit_sharpness(m, bits, rho=0.3, n_directions=16, seed=0, n_orbit=3) for m in (model, other)]
    assert found[1].value == pytest.approx(found[0].value, rel=1e-2)
    plain = [sharpness(m, bits, rho=0.3, n_directions=16, seed=0, limit=False).value for m in (model, other)]
    assert abs(plain[1] / plain[0] - 1) > 0.2  # twenty times the tolerance above


def test_the_value_is_the_least_candidate_and_the_first_is_the_canonical_point():
    model = sv.build_model("encoder", d_model=8, n_layers=1, n_heads=2, max_len=5, seed=2)
    bits = cube.vertices(5)
    found = orbit_sharpness(model, bits, rho=0.2, n_directions=8, seed=3, kappa=4.0, n_orbit=2)
    assert found.candidates.shape == (3,) and found.value == found.candidates.min().item()
    direct = sharpness(canonical(model, n=5), bits, rho=0.2, n_directions=8, seed=3, limit=False).value
    assert found.candidates[0].item() == pytest.approx(direct, rel=1e-9)
    assert found.candidates.max() > found.candidates.min()  # the orbit's points differ in L_rho


def test_the_measurement_layer_registers_the_adaptive_and_the_symmetry_aware_sharpness():
    from sensviz.measure import MeasureSettings, columns, measure
    from sensviz.sharpness import adaptive_sharpness

    settings = MeasureSettings(measure_inputs=32, directions=4, measure_seed=1)
    model = sv.build_model("encoder", d_model=8, n_layers=1, n_heads=2, max_len=5, seed=0)
    found = measure(model, "parity", 5, settings, quantities=["adaptive", "orbit"])
    flat = columns(found)
    direct = adaptive_sharpness(model, cube.vertices(5), found.rho, 4, 1)
    assert flat["adaptive_sharpness"] == pytest.approx(direct.value, rel=1e-9)
    assert flat["orbit_sharpness"] == pytest.approx(orbit_sharpness(model, cube.vertices(5), found.rho, 4, 1).value, rel=1e-9)
    formal = sv.build_model("formal", d_model=8, n_layers=1, n_heads=2, max_len=5, seed=0)
    assert "formal" in measure(formal, "parity", 5, settings, quantities=["orbit"]).notes["orbit"]


def test_the_scratchpads_symmetry_aware_sharpness_over_every_decoder_step_is_a_function_of_the_orbit():
    model = sv.build_model("scratchpad", d_model=8, n_layers=1, n_heads=2, max_len=5, seed=0)
    other = apply(model, EXACT, kappa=100.0, seed=4)
    bits = cube.vertices(5)
    found = [orbit_sharpness(m, bits, rho=0.3, n_directions=8, seed=0, n_orbit=2, steps="all") for m in (model, other)]
    assert found[1].value == pytest.approx(found[0].value, rel=1e-2)
    plain = [sharpness(m, bits, rho=0.3, n_directions=8, seed=0, limit=False, steps="all").value for m in (model, other)]
    assert abs(plain[1] / plain[0] - 1) > 0.2
