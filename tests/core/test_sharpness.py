"""Sharpness L_rho, its exact small-rho limit, the loss-space proxy, and the parameter space they share."""

import copy
import math

import pytest
import torch

import sensviz as sv
from sensviz import curvature, params, slices
from sensviz.blowup import blowup_summary
from sensviz.losses import loss_value
from sensviz.params import (
    CHUNK_SIZE,
    GPU_CHUNK_SIZE,
    ParamSpace,
    default_chunk_size,
    gaussian_directions,
    make_generator,
    sphere_directions,
)
from sensviz.sharpness import (
    linear_output_changes,
    linearised_sharpness,
    sharpness,
    sharpness_curve,
    sharpness_limit,
    sharpness_proxy,
)


def shifted_copy(model, offset):
    """A deep copy of the model whose non-positional parameters are moved by `offset[P]` in place."""
    other = copy.deepcopy(model)
    theta = other.non_positional_parameters()
    with torch.no_grad():
        for param, part in zip(theta.values(), offset.split([p.numel() for p in theta.values()])):
            param += part.view_as(param).to(param.dtype)
    return other


def test_sphere_directions_have_norm_rho_and_follow_the_seed():
    d = sphere_directions(1000, 8, 0.25, make_generator(0))
    assert d.shape == (8, 1000)
    assert torch.allclose(d.double().norm(dim=1), torch.full((8,), 0.25, dtype=torch.float64), rtol=1e-6)
    assert torch.equal(d, sphere_directions(1000, 8, 0.25, make_generator(0)))
    assert not torch.equal(d, sphere_directions(1000, 8, 0.25, make_generator(1)))
    g = make_generator(0)  # drawn in two chunks: the same rows
    assert torch.equal(d, torch.cat([sphere_directions(1000, 5, 0.25, g), sphere_directions(1000, 3, 0.25, g)]))
    # uniform on the sphere: isotropic, E[u u^T] = I / P, so E[u_i^2] = 1/P for every coordinate
    u = sphere_directions(20, 20000, 1.0, make_generator(2)).double()
    assert torch.allclose(u.pow(2).mean(dim=0), torch.full((20,), 1 / 20, dtype=torch.float64), atol=0.004)
    noise = gaussian_directions(5000, 3, 0.02, make_generator(0))
    assert noise.std().item() == pytest.approx(0.02, rel=0.03)


def test_the_space_excludes_positional_parameters_and_perturbs_the_rest(any_model):
    space = ParamSpace(any_model)
    assert not set(space.names) & set(any_model.positional_names)
    assert space.size == any_model.n_params()
    assert set(space.names) == set(any_model.non_positional_parameters())
    assert ParamSpace(any_model, positional=True).size == any_model.n_params(positional=True)
    bits = sv.cube.vertices(5)
    offsets = sphere_directions(space.size, 3, 0.5, make_generator(0))
    ours = space.outputs(bits, offsets)
    for k in range(3):  # the same as moving the module's own non-positional parameters
        with torch.no_grad():
            assert torch.allclose(ours[k], shifted_copy(any_model, offsets[k])(bits), atol=1e-6)
    assert torch.equal(space.flatten(space.unflatten(space.base)), space.base)


def loop_sharpness(model, bits, rho, n_directions, seed):
    """Baseline: one shifted model per direction, plain forward passes, float64 statistics."""
    directions = sphere_directions(ParamSpace(model).size, n_directions, rho, make_generator(seed))
    with torch.no_grad():
        base = model(bits).double()
        return torch.stack([(shifted_copy(model, d)(bits).double() - base).pow(2).mean() for d in directions])


def test_vmapped_sharpness_equals_a_plain_loop_over_the_same_directions(any_model):
    bits = sv.cube.vertices(6)
    ours = sharpness(any_model, bits, rho=0.1, n_directions=12, seed=5, chunk_size=100)
    loop = loop_sharpness(any_model, bits, 0.1, 12, 5)
    assert torch.allclose(ours.per_direction, loop, rtol=1e-4, atol=1e-8)
    assert abs(ours.value - loop.mean().item()) < 1e-6
    assert ours.stderr == pytest.approx((loop.std() / math.sqrt(12)).item(), rel=1e-3)
    assert (ours.n_directions, ours.n_inputs, ours.rho, ours.seed) == (12, 64, 0.1, 5)
    assert sharpness(any_model, bits, 0.1, 12, 5, limit=False).value == pytest.approx(ours.value, rel=1e-6)  # any chunking
    assert sharpness(any_model, bits, 0.1, 12, 6, limit=False).value != ours.value


def test_outputs_do_not_depend_on_the_chunk_size_and_accelerators_take_larger_chunks(any_model, monkeypatch):
    assert default_chunk_size("cpu") == CHUNK_SIZE and default_chunk_size(torch.device("cuda", 0)) == GPU_CHUNK_SIZE
    space = ParamSpace(any_model)
    bits = sv.cube.vertices(6)
    assert bits.shape[0] * 6 * any_model.d_model < params.LOOP_ACTIVATIONS  # so the default is vmapped
    offsets = gaussian_directions(space.size, 40, 0.05, make_generator(0))
    default = space.outputs(bits, offsets)
    for chunk in (7, GPU_CHUNK_SIZE):  # 16 offsets x 1 input per call; every offset and input in one call
        assert torch.allclose(space.outputs(bits, offsets, chunk), default, rtol=1e-5, atol=1e-6)
    pad = ParamSpace(sv.build_model("scratchpad", d_model=16, n_layers=1, n_heads=2, max_len=7, seed=0), steps="all")
    pad_offsets = gaussian_directions(pad.size, 5, 0.05, make_generator(1))
    pad_default = pad.outputs(bits, pad_offsets)  # [5, 64 inputs * 6 steps], input-major
    monkeypatch.setattr(params, "LOOP_ACTIVATIONS", 1)  # the CPU's path for many inputs: one call per offset
    for chunk in (None, 7):
        assert torch.allclose(space.outputs(bits, offsets, chunk), default, rtol=1e-5, atol=1e-6)
        assert torch.allclose(pad.outputs(bits, pad_offsets, chunk), pad_default, rtol=1e-5, atol=1e-6)


def test_exact_limit_equals_per_example_gradients_from_plain_backward(any_model):
    bits = sv.cube.vertices(5)
    limit = sharpness_limit(any_model, bits)
    model = copy.deepcopy(any_model)
    theta = list(model.non_positional_parameters().values())
    for i in (0, 7, 31):
        grads = torch.autograd.grad(model(bits[i : i + 1]).sum(), theta)
        assert limit.grad_norm_sq[i].item() == pytest.approx(sum(g.double().pow(2).sum() for g in grads).item(), rel=1e-5)
    assert limit.value == pytest.approx(limit.grad_norm_sq.mean().item() / any_model.n_params())
    assert limit.n_params == any_model.n_params() and limit.n_inputs == 32


def test_first_order_changes_equal_forward_mode_derivatives(any_model):
    bits = sv.cube.vertices(4)
    space = ParamSpace(any_model)
    directions = sphere_directions(space.size, 2, 1.0, make_generator(0))
    ours = linear_output_changes(space, bits, directions)
    for k in range(2):
        _, jvp = torch.func.jvp(lambda flat: space.output(flat, bits), (space.base,), (directions[k],))
        assert torch.allclose(ours[k], jvp.double(), rtol=1e-4, atol=1e-6)


def test_small_rho_limit(any_model):
    bits = sv.cube.vertices(5)
    exact = sharpness_limit(any_model, bits).value
    # the first-order estimate is unbiased for rho^2 * limit: E_Delta (g.Delta)^2 = rho^2 |g|^2 / P
    many = linearised_sharpness(any_model, bits, rho=1.0, n_directions=1500, seed=0)
    assert abs(many.value - exact) < 4 * many.stderr
    # L_rho / rho^2 along the same directions tends to the linearised value, and to the limit
    rhos = [0.3, 0.1, 0.03, 0.01, 0.003]
    curve = sharpness_curve(any_model, bits, rhos, n_directions=32, seed=1)
    linear = linearised_sharpness(any_model, bits, rho=1.0, n_directions=32, seed=1).value
    gaps = (curve["ratio"] / linear - 1).abs().tolist()
    assert gaps[-1] < 2e-3
    assert all(later < earlier for earlier, later in zip(gaps[:3], gaps[1:4]))  # shrinks with rho (above float32 noise)
    assert (curve["limit"] == exact).all()
    assert abs(curve["ratio"].iloc[-1] - exact) < 4 * curve["ratio_stderr"].iloc[-1]


def loop_proxy(model, bits, targets, eps, n_draws, seed):
    """Baseline: the paper's code's way, one shifted model per Gaussian draw."""
    draws = gaussian_directions(ParamSpace(model).size, n_draws, eps, make_generator(seed))
    with torch.no_grad():
        base = loss_value(model(bits).double(), targets.double())
        return torch.stack([loss_value(shifted_copy(model, d)(bits).double(), targets.double()) - base for d in draws])


def test_proxy_equals_a_loop_and_is_seeded_and_labelled(any_model):
    bits = sv.cube.vertices(6)
    targets = sv.get_task("parity")(bits)
    ours = sharpness_proxy(any_model, bits, targets, eps=0.02, n_draws=6, seed=3)
    loop = loop_proxy(any_model, bits, targets, 0.02, 6, 3)
    assert torch.allclose(ours.per_draw, loop, rtol=1e-4, atol=1e-6)
    assert ours.value == pytest.approx(loop.mean().item(), abs=1e-6)
    assert "proxy" in ours.label and ours.n_draws == 6 and ours.eps == 0.02
    assert ours.rho == pytest.approx(0.02 * math.sqrt(any_model.n_params()))
    assert sharpness_proxy(any_model, bits, targets, n_draws=6, seed=4).value != ours.value
    via_rho = sharpness_proxy(any_model, bits, targets, rho=ours.rho, n_draws=6, seed=3)
    assert via_rho.eps == pytest.approx(0.02) and via_rho.value == pytest.approx(ours.value, rel=1e-5)
    with pytest.raises(ValueError, match="eps or rho"):
        sharpness_proxy(any_model, bits, targets, eps=0.1, rho=1.0)


def test_bad_arguments_are_refused(encoder_model):
    bits = sv.cube.vertices(4)
    with pytest.raises(ValueError, match="rho must be positive"):
        sharpness(encoder_model, bits, rho=0.0)
    with pytest.raises(ValueError, match="n_directions"):
        sharpness(encoder_model, bits, n_directions=0)
    with pytest.raises(ValueError, match="bits must have shape"):
        sharpness(encoder_model, bits[0])
    with pytest.raises(ValueError, match="targets must have one value per output"):
        sharpness_proxy(encoder_model, bits, torch.zeros(3))


def test_measurements_never_change_the_model(any_model):
    before = {k: v.clone() for k, v in any_model.state_dict().items()}
    flags = {k: p.requires_grad for k, p in any_model.named_parameters()}
    own = dict(any_model.named_parameters())
    swapped = []  # functional_call on the caller's module would swap its parameters while it runs

    def check(module, _inputs):  # copies of the model carry the hook along: look at the model itself only
        if module is any_model:
            swapped.append(any(p is not own[k] for k, p in module.named_parameters()))

    any_model.register_forward_pre_hook(check)
    bits = sv.cube.vertices(4)
    targets = sv.get_task("majority")(bits)
    other = sv.build_model(any_model.arch, any_model.config, seed=9)
    sharpness(any_model, bits, 0.1, 4, 0)
    sharpness_curve(any_model, bits, [0.1, 0.01], 4, 0)
    linearised_sharpness(any_model, bits, 0.1, 4, 0)
    sharpness_proxy(any_model, bits, targets, n_draws=4)
    blowup_summary(any_model, 4)
    curvature.top_eigenvalues(any_model, bits, targets, k=2)
    curvature.top_eigenvalues(any_model, bits, targets, method="power", n_iter=5)
    curvature.hutchinson_trace(any_model, bits, targets, n_probes=4)
    directions = torch.cat([slices.random_directions(any_model, 1), slices.line_direction(any_model, other)])
    slices.loss_slice(any_model, bits, targets, directions, steps=3)
    slices.loss_slice(any_model, bits, targets, slices.hessian_directions(any_model, bits, targets), steps=3)
    after = any_model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.requires_grad == flags[k] and p.grad is None for k, p in any_model.named_parameters())
    assert swapped and not any(swapped)  # the model ran (blowup traces it), always with its own parameters
