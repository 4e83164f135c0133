"""Hessian of the loss: products, Lanczos and power iteration, Hutchinson, the dense matrix."""

import pytest
import torch

import sensviz as sv
from sensviz import curvature
from sensviz.losses import loss_value
from sensviz.params import ParamSpace


@pytest.fixture(scope="module", params=["encoder", "formal"])
def tiny(request):
    """A model with a few hundred parameters, the cube of n = 5, the MAJORITY targets, and the
    dense Hessian of the MSE (float64)."""
    model = sv.build_model(request.param, d_model=8, n_layers=1, n_heads=2, max_len=8, seed=1)
    bits = sv.cube.vertices(5)
    targets = sv.get_task("majority")(bits)
    return model, bits, targets, curvature.dense_hessian(model, bits, targets)


def test_dense_hessian_equals_torch_autograd_hessian(tiny):
    model, bits, targets, ours = tiny
    space = ParamSpace(model, dtype=torch.float64)
    reference = torch.autograd.functional.hessian(
        lambda flat: loss_value(space.output(flat, bits), targets.double()), space.base, vectorize=True
    )
    assert ours.shape == (model.n_params(), model.n_params())
    assert torch.allclose(ours, reference, rtol=1e-8, atol=1e-10)


def test_products_equal_the_dense_hessian_and_come_in_batches(tiny):
    model, bits, targets, dense = tiny
    vectors = torch.randn(3, dense.shape[0], generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    op = curvature.LossHessian(model, bits, targets, dtype=torch.float64, chunk_size=7)  # uneven input chunks
    assert torch.allclose(op.matvec(vectors), vectors @ dense, rtol=1e-8, atol=1e-10)
    assert torch.allclose(op.matvec(vectors[1]), dense @ vectors[1], rtol=1e-8, atol=1e-10)
    single = curvature.hvp(model, bits, targets, vectors[0].float())  # float32, the default
    assert torch.allclose(single.double(), dense @ vectors[0], rtol=1e-3, atol=1e-4)


def test_lanczos_top_eigenvalues_match_the_dense_hessian(tiny):
    model, bits, targets, dense = tiny
    exact = torch.linalg.eigvalsh(dense).flip(0)
    top = curvature.top_eigenvalues(model, bits, targets, k=3)
    assert top.method == "lanczos" and top.converged
    assert top.values[0].item() == pytest.approx(exact[0].item(), rel=1e-4)
    assert torch.allclose(top.values, exact[:3], rtol=1e-3)
    assert (top.residuals < 1e-3 * exact[0]).all()
    assert top.vectors.shape == (3, model.n_params())
    assert torch.allclose(top.vectors @ top.vectors.T, torch.eye(3, dtype=torch.float64), atol=1e-6)
    again = curvature.top_eigenvalues(model, bits, targets, k=3)
    assert torch.equal(again.values, top.values)  # seeded start vector


def test_power_iteration_agrees_with_lanczos(encoder_model):
    bits = sv.cube.vertices(6)
    targets = sv.get_task("first")(bits)
    lanczos = curvature.top_eigenvalues(encoder_model, bits, targets)
    power = curvature.top_eigenvalues(encoder_model, bits, targets, method="power", tol=1e-5, n_iter=500)
    assert power.converged
    assert power.values[0].item() == pytest.approx(lanczos.values[0].item(), rel=1e-3)
    assert power.residuals[0].item() < 1e-3 * power.values[0].item()


def test_hutchinson_trace_is_within_its_error_of_the_dense_trace(tiny):
    model, bits, targets, dense = tiny
    exact = dense.trace().item()
    estimate = curvature.hutchinson_trace(model, bits, targets, n_probes=100, seed=0)
    assert estimate.n_probes == 100 and estimate.stderr > 0
    assert abs(estimate.value - exact) < 4 * estimate.stderr
    assert curvature.hutchinson_trace(model, bits, targets, n_probes=100, seed=0).value == estimate.value
    assert curvature.hutchinson_trace(model, bits, targets, n_probes=100, seed=1).value != estimate.value


def test_bad_requests(encoder_model):
    bits = sv.cube.vertices(4)
    targets = sv.get_task("parity")(bits)
    big = sv.build_model("encoder", d_model=32, n_layers=2, n_heads=2, max_len=4, seed=0)
    with pytest.raises(ValueError, match="at most 5000 parameters"):
        curvature.dense_hessian(big, bits, targets)
    with pytest.raises(ValueError, match="lanczos"):
        curvature.top_eigenvalues(encoder_model, bits, targets, method="qr")
    with pytest.raises(ValueError, match="unknown loss"):
        curvature.top_eigenvalues(encoder_model, bits, targets, loss="hinge")
    with pytest.raises(ValueError, match="targets must have shape"):
        curvature.hutchinson_trace(encoder_model, bits, targets[:3])
