"""LayerNorm factors, tau, Blowup, their summaries, the published code's aggregates, the trade-off."""

import math

import pytest
import torch

import sensviz as sv
from sensviz import blowup as bl
from sensviz.analysis import cube_trace


def ln_inputs(model, bits):
    """The input of every LayerNorm (layer-major), captured with forward hooks as the authors' code does."""
    captured = {}
    handles = [
        m.register_forward_hook(lambda _m, inputs, _out, name=name: captured.__setitem__(name, inputs[0].detach()))
        for name, m in model.layernorms()
    ]
    try:
        with torch.no_grad():
            model(bits)
    finally:
        for h in handles:
            h.remove()
    return [captured[name] for name, _ in model.layernorms()]  # each [batch, n, d]


def test_factors_tau_and_blowup_equal_a_hand_computation(any_model):
    bits = sv.cube.vertices(5)
    tr = any_model.trace(bits)
    inputs = ln_inputs(any_model, bits)
    eps = [m.eps for _, m in any_model.layernorms()]
    expected = torch.ones(32, dtype=torch.float64)
    for k, (y, e) in enumerate(zip(inputs, eps)):
        y = y.double()
        var = ((y - y.mean(-1, keepdim=True)) ** 2).mean(-1)  # population variance [batch, n]
        factor = 1 / torch.sqrt(var + e)
        assert torch.allclose(tr.ln_factor[:, k].double(), factor, rtol=1e-5)
        tau_k = torch.tensor([max(1 + factor[b, w].item() for w in range(5)) for b in range(32)], dtype=torch.float64)
        assert torch.allclose(bl.tau(tr)[:, k], tau_k, rtol=1e-5)
        expected *= tau_k
    assert torch.allclose(bl.blowup(tr), expected, rtol=1e-5)
    assert torch.allclose(bl.log_blowup(tr), expected.log(), rtol=1e-5)


def _identity_scaled_mlp(mlp, a, c=10.0):
    """f_MLP(z) = z + W2 relu(W1 z + c1) + c2 = a z for |z| < c (W1 = I, c1 = c, W2 = (a-1) I, c2 = -(a-1) c)."""
    eye = torch.eye(mlp.linear1.weight.shape[0], dtype=mlp.linear1.weight.dtype)
    mlp.linear1.weight.copy_(eye)
    mlp.linear1.bias.fill_(c)
    mlp.linear2.weight.copy_((a - 1) * eye)
    mlp.linear2.bias.fill_(-(a - 1) * c)


def _closed_form(first_variance, scales, eps):
    """Blowup when the first LN input has variance `first_variance[position]` and LN k's input is
    scales[k] times LN k-1's output: an LN output of input variance v has variance v / (v + eps)."""
    result, var = 1.0, None
    for k, a in enumerate(scales):
        var = a**2 * (torch.as_tensor(first_variance, dtype=torch.float64) if k == 0 else var / (var + eps))
        result *= (1 + 1 / torch.sqrt(var + eps)).max().item()
    return result


def test_blowup_of_a_formal_model_with_known_layernorm_variances_equals_the_closed_form():
    n, eps, scales = 5, 1e-3, [0.5, 3.0, 0.2]
    model = sv.build_model("formal", d_model=4, n_layers=3, n_heads=1, max_len=n, eps=eps, seed=0).double()
    s = torch.tensor([0.1, 0.3, 0.05, 1.0, 2.0], dtype=torch.float64)  # positional p_i = s_i [1,-1,1,-1]: variance s_i^2
    with torch.no_grad():
        model.token_embedding.zero_()
        model.positional_embedding.copy_(s.unsqueeze(1) * torch.tensor([1.0, -1.0, 1.0, -1.0]))
        for layer, a in zip(model.layers, scales):
            layer.attn.value.zero_()  # b_i = 0: Y = f_MLP(y) = a y
            _identity_scaled_mlp(layer.mlp, a)
    expected = _closed_form(s**2, scales, eps)
    summary = bl.blowup_summary(model, n, batch_size=8)  # float64 model: exact up to rounding
    assert summary.exact and summary.n_inputs == 32
    assert summary.mean == pytest.approx(expected, rel=1e-10)
    assert summary.max == pytest.approx(expected, rel=1e-10)
    assert summary.mean_sq == pytest.approx(expected**2, rel=1e-10)
    assert summary.log_mean == pytest.approx(math.log(expected), rel=1e-10)


def test_blowup_of_an_encoder_with_known_layernorm_variances_equals_the_closed_form():
    n, eps, gains = 4, 1e-5, [2.0, 0.5, 4.0, 0.25]  # LN gains g_k; every sublayer adds 0
    model = sv.build_model("encoder", d_model=8, n_layers=2, n_heads=2, max_len=n, seed=0)
    s = torch.tensor([0.5, 1.0, 0.01, 3.0])  # h = [0,0,0,0, s,-s,s,-s]: variance s^2 / 2
    with torch.no_grad():
        model.embedding.weight.zero_()
        model.positional_encoding.weight.copy_(s.unsqueeze(1) * torch.tensor([1.0, -1.0, 1.0, -1.0]))
        norms = [m for _, m in model.layernorms()]
        for layer in model.encoders.layers:
            layer.self_attn.out_proj.weight.zero_()
            layer.self_attn.out_proj.bias.zero_()
            layer.linear2.weight.zero_()
            layer.linear2.bias.zero_()
        for norm, g in zip(norms, gains):
            norm.weight.fill_(g)
            norm.bias.zero_()
    # LN k's input is LN k-1's output: variance g_{k-1}^2 v / (v + eps)
    expected = _closed_form(s**2 / 2, [1.0] + gains[:-1], eps)
    summary = bl.blowup_summary(model, n)
    assert summary.mean == pytest.approx(expected, rel=1e-5)
    assert summary.quantiles[0.5] == pytest.approx(expected, rel=1e-5)


def authors_reference(model, bits):
    """The published code's aggregates, recomputed directly from the LN inputs as their code does."""
    inputs = ln_inputs(model, bits)
    names = [name for name, _ in model.layernorms()]
    last = f"{model.config.n_layers - 1}."
    metrics, prods_mean, prods_max = {}, torch.ones(len(bits)), torch.ones(len(bits))
    sums_mean, sums_max = torch.zeros(len(bits)), torch.zeros(len(bits))
    for name, token_input in zip(names, inputs):
        inv_std = 1 / token_input.std(dim=2)  # Bessel-corrected, no eps  [batch, n]
        if f"layers.{last}" in name:
            inv_std = inv_std[:, -1:]
        metrics[name] = {"mean": inv_std.mean().item(), "max": inv_std.max(dim=1).values.mean().item()}
        prods_mean, prods_max = prods_mean * inv_std.mean(dim=1), prods_max * inv_std.max(dim=1).values
        sums_mean, sums_max = sums_mean + inv_std.mean(dim=1), sums_max + inv_std.max(dim=1).values
    return {
        "maxs_prod": prods_max.mean().item(),
        "means_prod": prods_mean.mean().item(),
        "maxs_sum": sums_max.mean().item(),
        "means_sum": sums_mean.mean().item(),
        "per_ln": metrics,
    }


@pytest.mark.parametrize("arch", ["encoder", "formal"])
def test_compatibility_mode_equals_a_direct_recomputation_of_the_published_aggregates(arch):
    model = sv.build_model(arch, d_model=8, n_layers=3, n_heads=2, max_len=8, seed=3)
    n = 6
    ours = bl.blowup_summary(model, n, batch_size=16).authors
    ref = authors_reference(model, sv.cube.vertices(n))
    assert "compatibility" in ours["label"]
    for key in ("maxs_prod", "means_prod", "maxs_sum", "means_sum"):
        assert ours[key] == pytest.approx(ref[key], rel=1e-5), key
    assert set(ours["per_ln"]) == set(ref["per_ln"])
    for name, values in ref["per_ln"].items():
        assert ours["per_ln"][name]["mean"] == pytest.approx(values["mean"], rel=1e-5)
        assert ours["per_ln"][name]["max"] == pytest.approx(values["max"], rel=1e-5)
    # Bessel's correction and the missing eps and "1 +" make it differ from the theory's numbers
    assert ours["maxs_prod"] < bl.blowup_summary(model, n).mean


def test_summary_statistics_agree_with_per_input_values(any_model):
    n = 7
    summary = bl.blowup_summary(any_model, n, batch_size=40)
    tr = cube_trace(any_model, n)
    values = bl.blowup(tr)
    assert torch.allclose(summary.values, values)
    assert summary.mean == pytest.approx(values.mean().item())
    assert summary.mean_sq == pytest.approx((values**2).mean().item())
    assert summary.max == pytest.approx(values.max().item())
    assert summary.log_mean == pytest.approx(values.log().mean().item())
    assert summary.quantiles[0.9] == pytest.approx(torch.quantile(values, 0.9).item())
    for k, entry in enumerate(summary.per_ln):
        assert entry["name"] == tr.ln_names[k]
        assert entry["mean"] == pytest.approx(tr.ln_factor[:, k].double().mean().item(), rel=1e-6)
        assert entry["max"] == pytest.approx(tr.ln_factor[:, k].max().item(), rel=1e-6)
        assert entry["tau_mean"] == pytest.approx(bl.tau(tr)[:, k].mean().item(), rel=1e-6)


def test_sampled_summary_is_labelled_seeded_and_close_to_the_exact_one(encoder_model):
    exact = bl.blowup_summary(encoder_model, 8)
    sampled = bl.blowup_summary(encoder_model, 8, exact_limit=6, n_samples=600, seed=1)
    assert not sampled.exact and sampled.n_inputs == 600 and sampled.seed == 1
    assert abs(sampled.mean - exact.mean) < 4 * sampled.stderr["mean"]
    assert abs(sampled.mean_sq - exact.mean_sq) < 4 * sampled.stderr["mean_sq"]
    again = bl.blowup_summary(encoder_model, 8, exact_limit=6, n_samples=600, seed=1)
    other = bl.blowup_summary(encoder_model, 8, exact_limit=6, n_samples=600, seed=2)
    assert again.mean == sampled.mean and other.mean != sampled.mean
    assert exact.to_dict()["stderr"]["mean"] is None


def test_tradeoff_returns_norm_blowup_and_the_bound(any_model):
    n = 8
    result = bl.tradeoff(any_model, sv.get_task("parity"), n)
    assert result.param_norm == pytest.approx(any_model.param_norm())
    assert result.blowup_mean_sq == pytest.approx(bl.blowup_summary(any_model, n).mean_sq)
    assert result.task_avg_sensitivity == pytest.approx(n)  # as_n(PARITY) = n
    heads = any_model.config.n_heads
    assert result.bound_rhs == pytest.approx(n / math.sqrt(n * math.log(n)) - heads / n)
    first = bl.tradeoff(any_model, sv.get_task("first"), n)
    assert first.bound_rhs == pytest.approx(1 / math.sqrt(n * math.log(n)) - heads / n)
    sampled = bl.tradeoff(any_model, sv.get_task("majority"), 11, exact_limit=8, n_samples=500)
    assert sampled.exact is False and sampled.task_avg_sensitivity_stderr > 0
    expected = sv.tasks.majority_avg_sensitivity(11)
    assert abs(sampled.task_avg_sensitivity - expected) < 4 * sampled.task_avg_sensitivity_stderr
    with pytest.raises(ValueError, match="n >= 2"):
        bl.bound_rhs(1.0, 1, 2)
    with pytest.raises(ValueError, match="summary is for n=8"):
        bl.tradeoff(any_model, sv.get_task("parity"), 9, summary=bl.blowup_summary(any_model, 8))


def test_the_scratchpads_blowup_per_stack_equals_a_direct_recomputation():
    model = sv.build_model("scratchpad", d_model=8, n_layers=2, n_heads=2, max_len=8, seed=5)
    n = 5
    bits = sv.cube.vertices(n)
    names = [name for name, _ in model.layernorms()]
    inputs = dict(zip(names, ln_inputs(model, bits)))  # each [batch, n, d]
    expected = {}
    for stack in ("encoder", "decoder"):
        product = torch.ones(len(bits), dtype=torch.float64)
        for layer in range(2):
            for norm in ("norm1", "norm2"):  # norm3 and the final norms are not counted
                product *= (1 / inputs[f"model.{stack}.layers.{layer}.{norm}"].double().std(dim=2)).amax(dim=1)
        expected[stack] = product
    ours = bl.authors_per_example(model.trace(bits, names=("ln",)))
    for stack in ("encoder", "decoder"):
        assert ours[f"{stack}_maxs_prod"] == pytest.approx(expected[stack], rel=1e-5)
    means = bl.blowup_summary(model, n, batch_size=7).authors  # the batches' means pooled
    for stack in ("encoder", "decoder"):
        assert means[f"{stack}_maxs_prod"] == pytest.approx(expected[stack].mean().item(), rel=1e-5)
    encoder = sv.build_model("encoder", d_model=8, n_layers=2, n_heads=2, max_len=8, seed=5)
    trace = encoder.trace(bits, names=("ln",))
    assert "encoder_maxs_prod" not in bl.authors_per_example(trace)
    with pytest.raises(ValueError, match="scratchpad"):
        bl.stack_products(trace.ln_names, torch.ones(len(bits), len(trace.ln_names)))
