"""ASAM's adaptive sharpness: a closed form on a linear model, its first-order part, and its invariance."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn

import sensviz as sv
from sensviz import cube
from sensviz.base import TracedModel
from sensviz.params import ParamSpace, make_generator, sphere_directions
from sensviz.sharpness import adaptive_sharpness, sharpness
from sensviz.symmetries import MAPS, apply


class LinearModel(TracedModel):
    """T(x) = sum_i w_i x_i + b with x = 2 bits - 1: the adaptive sharpness has a closed form."""

    arch = "linear"
    positional_names = ()

    def __init__(self, n: int):
        super().__init__()
        self.config = SimpleNamespace(max_len=n, d_model=1)
        self.w = nn.Parameter(torch.linspace(-1.0, 2.0, n))
        self.b = nn.Parameter(torch.tensor([0.3]))

    def forward(self, bits):
        return (2 * bits - 1).to(self.w.dtype) @ self.w + self.b


def test_adaptive_sharpness_of_a_linear_model_is_the_closed_form():
    """Delta = |theta| u changes T by sum_i |w_i| u_i x_i + |b| u_b; over the whole cube E x_i x_j = delta_ij,
    so per direction m_k = sum_j theta_j^2 u_kj^2 exactly, at any radius."""
    model, rho = LinearModel(5), 0.7
    found = adaptive_sharpness(model, cube.vertices(5), rho=rho, n_directions=12, seed=4)
    theta = torch.cat([model.w.detach(), model.b.detach()]).double()
    u = sphere_directions(6, 12, rho, make_generator(4)).double()
    expected = (u.pow(2) * theta.pow(2)).sum(dim=1)
    assert torch.allclose(found.per_direction, expected, rtol=1e-5)
    assert found.estimator == "adaptive" and "ASAM" in found.label


def test_adaptive_sharpness_at_small_radius_is_its_first_order_part():
    """mean_k mean_x (g_x . (|theta| * u_k))^2 from per-example gradients, the same directions."""
    model = sv.build_model("encoder", d_model=8, n_layers=1, n_heads=2, max_len=4, seed=0)
    bits, rho = cube.vertices(4), 1e-3
    found = adaptive_sharpness(model, bits, rho=rho, n_directions=8, seed=2).per_direction
    space = ParamSpace(model)
    u = sphere_directions(space.size, 8, rho, make_generator(2)).double() * space.base.abs().double()
    grads = torch.cat([torch.cat([g.flatten(1) for g in parts.values()], dim=1).double()
                       for _, parts in space.per_example_gradients(bits)])  # [batch, P], names in space order
    expected = (u @ grads.T).pow(2).mean(dim=1)
    assert torch.allclose(found, expected, rtol=2e-2)


@pytest.mark.parametrize("seed", [0, 1])
def test_adaptive_sharpness_is_invariant_to_rescaling_relu_units_and_sharpness_is_not(seed):
    model = sv.build_model("encoder", d_model=8, n_layers=2, n_heads=2, max_len=6, seed=seed)
    changed = apply(model, MAPS["relu"], kappa=100.0, seed=seed)
    bits = cube.vertices(6)
    before, after = (adaptive_sharpness(m, bits, rho=0.3, n_directions=16, seed=0).value for m in (model, changed))
    assert after == pytest.approx(before, rel=1e-3)
    plain = [sharpness(m, bits, rho=0.3, n_directions=16, seed=0, limit=False).value for m in (model, changed)]
    assert abs(plain[1] / plain[0] - 1) > 0.2


def test_adaptive_sharpness_is_not_invariant_to_the_attention_maps():
    model = sv.build_model("encoder", d_model=8, n_layers=2, n_heads=2, max_len=6, seed=0)
    changed = apply(model, MAPS["qk"], kappa=100.0, seed=0)
    bits = cube.vertices(6)
    before, after = (adaptive_sharpness(m, bits, rho=0.3, n_directions=16, seed=0).value for m in (model, changed))
    assert abs(after / before - 1) > 0.05
