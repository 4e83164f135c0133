"""Function-preserving maps of the encoder: outputs kept, wrong maps refused, sharpness not a property of the function."""

import copy

import pytest
import torch

import sensviz as sv
from sensviz import cube
from sensviz.sharpness import sharpness
from sensviz.symmetries import (
    CANONICAL,
    EXACT,
    MAPS,
    Symmetry,
    SymmetryError,
    apply,
    canonical,
    random_factor,
    stretch,
)


@pytest.fixture(scope="module")
def model():
    return sv.build_model("encoder", d_model=8, n_layers=2, n_heads=2, max_len=6, seed=0)


def outputs(m, n=6):
    """T on all 2^n inputs, in float64 (on a copy)."""
    with torch.no_grad():
        return copy.deepcopy(m).double()(cube.vertices(n))


@pytest.mark.parametrize("name", [*MAPS, "canonical"])
def test_every_map_preserves_the_outputs_and_moves_the_parameters(model, name):
    symmetry = CANONICAL if name == "canonical" else MAPS[name]
    changed = apply(model, symmetry, kappa=100.0, seed=1)
    reference, found = outputs(model), outputs(changed)
    assert (found - reference).abs().max() <= 1e-5 * reference.abs().max()
    moved = max((p - q).abs().max().item() for p, q in zip(model.parameters(), changed.parameters()))
    assert moved > 1e-2  # the map did something
    assert next(changed.parameters()).dtype == torch.float32


def test_random_factors_have_the_bounded_condition_number():
    a = random_factor(6, 100.0, torch.Generator().manual_seed(0))
    s = torch.linalg.svdvals(a)
    assert s.max() <= 10 + 1e-9 and s.min() >= 0.1 - 1e-9 and s.max() / s.min() > 5


def test_a_wrong_map_is_refused_by_name(model):
    def wrong(theta, config, kappa, generator):  # linear2's column not divided back: relu(c z) scaled output
        theta["encoders.layers.0.linear1.weight"] *= 3.0
        theta["encoders.layers.0.linear1.bias"] *= 3.0
    with pytest.raises(SymmetryError, match="map 'unbalanced_relu'"):
        apply(model, Symmetry("unbalanced_relu", wrong))


def test_the_eps_limited_map_is_refused_where_eps_matters():
    m = sv.build_model("encoder", d_model=8, n_layers=2, n_heads=2, max_len=6, seed=0)
    with torch.no_grad():  # norm1's input nearly constant across its entries: variance ~ eps
        m.encoders.layers[0].self_attn.out_proj.weight.mul_(1e-4)
        m.encoders.layers[0].self_attn.in_proj_weight.mul_(1e-4)
        m.embedding.weight.mul_(1e-3)
        m.positional_encoding.weight.mul_(1e-3)
    def shrink(theta, config, kappa, generator):  # alpha = 0.1 < 1: eps / alpha^2 dominates the variance
        for name in ("norm1.weight", "norm1.bias", "linear1.bias", "linear2.bias"):
            theta["encoders.layers.0." + name] *= 0.1
    with pytest.raises(SymmetryError, match="map 'norm1_small'.*eps-limited"):
        apply(m, Symmetry("norm1_small", shrink, eps_limited=True))


def test_sharpness_changes_under_a_map_while_the_outputs_do_not(model):
    """Dinh et al. (2017): L_rho is not a function of the function."""
    changed = apply(model, stretch(10.0))
    bits = cube.vertices(6)
    before = sharpness(model, bits, rho=0.5, n_directions=16, seed=0, limit=False).value
    after = sharpness(changed, bits, rho=0.5, n_directions=16, seed=0, limit=False).value
    assert after > 10 * before


def test_two_copies_related_by_a_map_have_one_canonical_point(model):
    other = apply(model, EXACT, kappa=100.0, seed=5)
    a, b = canonical(model), canonical(other)
    assert abs(other.param_norm() - model.param_norm()) > 1.0
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.allclose(p, q, atol=1e-4, rtol=1e-4)
    assert a.param_norm() <= model.param_norm()  # the minimum-norm representative


def test_maps_are_for_the_encoder_and_the_scratchpad():
    with pytest.raises(ValueError, match="encoder and the scratchpad"):
        apply(sv.build_model("formal", d_model=8, n_layers=1, max_len=4, seed=0), EXACT)
    scratchpad = sv.build_model("scratchpad", d_model=8, n_layers=1, n_heads=2, max_len=4, seed=0)
    with pytest.raises(ValueError, match="'norm1_scale' is written for the encoder only"):
        apply(scratchpad, MAPS["norm1_scale"])


@pytest.fixture(scope="module")
def scratchpad():
    return sv.build_model("scratchpad", d_model=8, n_layers=2, n_heads=2, max_len=5, seed=0)


@pytest.mark.parametrize("name", [name for name, m in MAPS.items() if not m.eps_limited] + ["canonical"])
def test_the_scratchpads_maps_preserve_every_decoder_step(scratchpad, name):
    changed = apply(scratchpad, CANONICAL if name == "canonical" else MAPS[name], kappa=100.0, seed=2)
    bits = cube.vertices(5)
    with torch.no_grad():
        before, after = (copy.deepcopy(m).double().training_outputs(bits) for m in (scratchpad, changed))
    assert before.shape == (32, 5)  # every step under teacher forcing
    assert (after - before).abs().max() <= 1e-5 * before.abs().max()
    assert max((p - q).abs().max().item() for p, q in zip(scratchpad.parameters(), changed.parameters())) > 1e-2


def test_the_scratchpads_memory_map_and_canonical_point(scratchpad):
    cross = scratchpad.model.decoder.layers[0].multihead_attn.in_proj_weight
    moved = apply(scratchpad, MAPS["head_norm"], kappa=100.0, seed=0)
    assert not torch.allclose(moved.model.encoder.norm.weight, scratchpad.model.encoder.norm.weight)
    assert not torch.allclose(moved.model.decoder.layers[0].multihead_attn.in_proj_weight[8:], cross[8:])
    other = apply(scratchpad, EXACT, kappa=100.0, seed=3)
    for p, q in zip(canonical(scratchpad).parameters(), canonical(other).parameters()):
        assert torch.allclose(p, q, atol=1e-4, rtol=1e-4)


def test_on_the_median_parity_zoo_model_sharpness_moves_tenfold_and_the_orbit_measure_stays():
    """encoder-parity-n8 (the zoo's PARITY encoders have n = 4..16): a map of singular values 10 (size
    kappa = 100) changes L_rho at the paper's radius at least 10x; the symmetry-aware sharpness agrees within 1%."""
    from pathlib import Path

    from sensviz.orbit_sharpness import orbit_sharpness

    ck = sv.load_checkpoint(Path(__file__).resolve().parents[2] / "checkpoints" / "encoder-parity-n8.safetensors")
    changed, bits = apply(ck.model, stretch(10.0), n=8), cube.vertices(8)
    rho = 0.02 * ck.model.n_params() ** 0.5
    plain = [sharpness(m, bits, rho, 16, 0, limit=False).value for m in (ck.model, changed)]
    assert plain[1] >= 10 * plain[0]
    orbit = [orbit_sharpness(m, bits, rho, 16, 0, n_orbit=2).value for m in (ck.model, changed)]
    assert orbit[1] == pytest.approx(orbit[0], rel=1e-2)
