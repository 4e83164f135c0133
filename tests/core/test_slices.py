"""Loss slices along random, Hessian and two-checkpoint directions."""

import copy

import numpy as np
import pandas as pd
import pytest
import torch

import sensviz as sv
from sensviz import slices
from sensviz.curvature import top_eigenvalues
from sensviz.losses import loss_value
from sensviz.params import ParamSpace


def data(n=6, task="parity"):
    bits = sv.cube.vertices(n)
    return bits, sv.get_task(task)(bits)


def own_loss(model, bits, targets):
    with torch.no_grad():
        return loss_value(model(bits).double(), targets.double()).item()


def moved_copy(model, offset):
    """A deep copy with every parameter (positional included) moved by `offset[P_all]`."""
    other = copy.deepcopy(model)
    params = dict(other.named_parameters())
    with torch.no_grad():
        for name, part in ParamSpace(model, positional=True).unflatten(offset.float()).items():
            params[name] += part
    return other


@pytest.mark.parametrize("normalization", slices.NORMALIZATIONS)
def test_slices_are_centred_on_the_model_loss(any_model, normalization):
    bits, targets = data()
    directions = slices.random_directions(any_model, 2, normalization, seed=0)
    plane = slices.loss_slice(any_model, bits, targets, directions, span=0.5, steps=5)
    assert list(plane.columns) == ["alpha", "beta", "loss", "accuracy"] and len(plane) == 25
    centre = plane[(plane.alpha == 0) & (plane.beta == 0)]
    assert len(centre) == 1
    assert centre.loss.item() == pytest.approx(own_loss(any_model, bits, targets), rel=1e-6)
    with torch.no_grad():
        accuracy = (any_model(bits) > 0.5).float().eq(targets).float().mean().item()
    assert centre.accuracy.item() == pytest.approx(accuracy)
    line = slices.loss_slice(any_model, bits, targets, directions[:1], steps=7)
    assert list(line.columns) == ["alpha", "loss", "accuracy"]
    assert line.loss[line.alpha == 0].item() == pytest.approx(centre.loss.item(), rel=1e-6)


def test_grid_points_equal_moved_copies_of_the_model(any_model):
    bits, targets = data()
    directions = slices.random_directions(any_model, 2, "filter", seed=4)
    plane = slices.loss_slice(any_model, bits, targets, directions, alphas=[-0.3, 0.6], betas=[0.2, 1.0], chunk_size=50)
    for row in plane.itertuples():
        moved = moved_copy(any_model, row.alpha * directions[0].double() + row.beta * directions[1].double())
        assert row.loss == pytest.approx(own_loss(moved, bits, targets), rel=1e-5)


def test_filter_layer_and_no_normalisation(any_model):
    theta = {k: v.detach() for k, v in any_model.non_positional_parameters().items()}
    space = ParamSpace(any_model, positional=True)
    for normalization in slices.NORMALIZATIONS:
        (flat,) = slices.random_directions(any_model, 1, normalization, seed=1)
        parts = space.unflatten(flat)
        for name in any_model.positional_names:
            assert not parts[name].any()
        if normalization == "none":
            assert flat.norm().item() == pytest.approx(1.0, rel=1e-5)
            continue
        for name, param in theta.items():
            d = parts[name]
            if normalization == "filter" and param.dim() >= 2:  # every row scaled to its parameter row's norm
                rows, prows = d.reshape(-1, d.shape[-1]), param.reshape(-1, param.shape[-1])
                assert torch.allclose(rows.norm(dim=1), prows.norm(dim=1), rtol=1e-4, atol=1e-6), name
            else:  # the whole tensor scaled to the parameter's norm (1-D tensors count as one filter)
                assert d.norm().item() == pytest.approx(param.norm().item(), rel=1e-4, abs=1e-6), name
    assert torch.equal(slices.random_directions(any_model, 2, seed=3), slices.random_directions(any_model, 2, seed=3))
    assert not torch.equal(slices.random_directions(any_model, 1, seed=3), slices.random_directions(any_model, 1, seed=4))


def test_skipping_biases_and_layernorm_parameters(encoder_model):
    skipped = slices.bias_and_ln_names(encoder_model)
    assert "encoders.layers.0.norm1.weight" in skipped and "encoders.layers.1.linear1.bias" in skipped
    assert "encoders.layers.1.linear1.weight" not in skipped
    space = ParamSpace(encoder_model, positional=True)
    full = space.unflatten(slices.random_directions(encoder_model, 1, seed=2)[0])
    kept = space.unflatten(slices.random_directions(encoder_model, 1, skip_bias_ln=True, seed=2)[0])
    for name in space.names:
        if name in skipped:
            assert not kept[name].any(), name
        elif name not in encoder_model.positional_names:  # the same draws elsewhere
            assert torch.equal(kept[name], full[name]), name


def test_line_between_two_checkpoints(any_model, tmp_path):
    bits, targets = data()
    other = sv.build_model(any_model.arch, any_model.config, seed=11)
    path = sv.save_checkpoint(other, tmp_path / "other.safetensors")
    loaded = sv.load_checkpoint(path, n_heads=any_model.config.n_heads).model
    line = slices.loss_slice(any_model, bits, targets, slices.line_direction(any_model, loaded), alphas=[0.0, 0.5, 1.0])
    assert line.loss[0] == pytest.approx(own_loss(any_model, bits, targets), rel=1e-6)
    assert line.loss[2] == pytest.approx(own_loss(other, bits, targets), rel=1e-5)
    halfway = moved_copy(any_model, 0.5 * slices.line_direction(any_model, other)[0].double())
    assert line.loss[1] == pytest.approx(own_loss(halfway, bits, targets), rel=1e-5)
    wider = sv.build_model(any_model.arch, d_model=2 * any_model.config.d_model, max_len=12, seed=0)
    with pytest.raises(ValueError, match="same architecture and config"):
        slices.line_direction(any_model, wider)


def test_slice_along_the_top_hessian_eigenvector_has_its_curvature(any_model):
    bits, targets = data(5, "first")
    (direction,) = slices.hessian_directions(any_model, bits, targets)
    assert direction.norm().item() == pytest.approx(1.0, rel=1e-5)
    top = top_eigenvalues(any_model, bits, targets).values[0].item()
    h = 1e-3  # small enough to cross few ReLU kinks, large enough for float32
    line = slices.loss_slice(any_model, bits, targets, direction.unsqueeze(0), alphas=[-h, 0.0, h])
    second_difference = (line.loss[0] - 2 * line.loss[1] + line.loss[2]) / h**2
    assert second_difference == pytest.approx(top, rel=2e-2)


def test_output_slice_on_one_input(any_model):
    bits, _ = data()
    directions = slices.random_directions(any_model, 2, seed=0)
    frame = slices.output_slice(any_model, bits[5], directions, span=0.4, steps=3)
    assert list(frame.columns) == ["alpha", "beta", "output"] and len(frame) == 9
    with torch.no_grad():
        assert frame.output[4] == pytest.approx(any_model(bits[5:6]).item(), abs=1e-6)
        corner = moved_copy(any_model, 0.4 * (directions[0] + directions[1]).double())
        assert frame.output[8] == pytest.approx(corner(bits[5:6]).item(), abs=1e-5)


def test_grid_and_bad_directions(encoder_model):
    assert slices.grid(2.0, 5).tolist() == [-2.0, -1.0, 0.0, 1.0, 2.0]
    assert slices.grid(1.0, 1).tolist() == [0.0]
    bits, targets = data(4)
    with pytest.raises(ValueError, match="one or two directions"):
        slices.loss_slice(encoder_model, bits, targets, slices.random_directions(encoder_model, 3))
    with pytest.raises(ValueError, match="normalization"):
        slices.random_directions(encoder_model, 1, "batch")
    with pytest.raises(ValueError, match="unknown loss"):
        slices.loss_slice(encoder_model, bits, targets, slices.random_directions(encoder_model, 1), loss="l1")


def test_contour_segments_trace_level_sets():
    from sensviz.slices import contour_segments, grid

    a, b = torch.meshgrid(grid(1.0, 41), grid(1.0, 41), indexing="ij")
    frame = pd.DataFrame({"alpha": a.flatten().numpy(), "beta": b.flatten().numpy()})
    frame["loss"] = frame["alpha"] ** 2 + frame["beta"] ** 2
    segments = contour_segments(frame, "loss", levels=4)
    assert len(segments) > 0 and segments["level"].nunique() == 4
    for end in (("alpha", "beta"), ("alpha2", "beta2")):
        radius2 = segments[end[0]] ** 2 + segments[end[1]] ** 2
        assert np.allclose(radius2, segments["level"], atol=2e-3)  # on the circle, up to interpolation
    flat = frame.assign(loss=1.0)
    assert contour_segments(flat, "loss").empty
