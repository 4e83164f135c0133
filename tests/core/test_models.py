"""Both architectures: against torch's encoder, a hand computation, and their traces."""

import math

import pytest
import torch
from reference import AuthorsModel

import sensviz as sv
from sensviz import cube
from sensviz.hooks import capture, hook_names

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def test_encoder_has_the_authors_names_shapes_and_initialisation():
    ours = sv.build_model("encoder", d_model=32, n_layers=3, n_heads=4, max_len=20, seed=11)
    torch.manual_seed(11)
    theirs = AuthorsModel(32, 4, 3, max_len=20)
    a, b = ours.state_dict(), theirs.state_dict()
    assert list(a) == list(b)
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("d_model,n_heads,n_layers", [(16, 2, 2), (32, 4, 1), (8, 1, 3)])
def test_encoder_matches_torch_transformer_encoder_on_random_weights(d_model, n_heads, n_layers):
    torch.manual_seed(0)
    theirs = AuthorsModel(d_model, n_heads, n_layers, max_len=12).eval()
    with torch.no_grad():  # random, non-default weights everywhere (LN gains and biases too)
        for p in theirs.parameters():
            p.normal_(0, 0.5)
    ours = sv.build_model("encoder", d_model=d_model, n_layers=n_layers, n_heads=n_heads, max_len=12)
    ours.load_state_dict(theirs.state_dict())
    bits = cube.vertices(9)
    with torch.no_grad():
        expected = theirs(bits)
        got = ours(bits)
        got_trace = ours.trace(bits).output
    assert torch.allclose(got, expected, atol=1e-5, rtol=0)
    assert torch.equal(got, got_trace)


def test_encoder_attention_matches_torch_multihead_attention():
    model = sv.build_model("encoder", d_model=16, n_layers=1, n_heads=2, max_len=8, seed=1)
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True)
    attn = model.encoders.layers[0].self_attn
    mha.load_state_dict({k: v for k, v in attn.state_dict().items()})
    h = torch.randn(3, 8, 16)
    with capture(model, ["encoders.layers.0.self_attn.hook_pattern"]) as cache:
        out = attn(h)
    ref_out, ref_weights = mha(h, h, h, need_weights=True, average_attn_weights=False)
    assert torch.allclose(out, ref_out, atol=1e-5)
    assert torch.allclose(cache["encoders.layers.0.self_attn.hook_pattern"], ref_weights, atol=1e-6)


def test_the_written_out_softmax_is_torchs_with_masks_and_large_scores():
    """`encoder.softmax` (exp / sum after subtracting the max, the attention's) against `Tensor.softmax`."""
    from sensviz.encoder import softmax

    scores = torch.randn(50, 3, 10, 10) * torch.tensor([0.1, 10.0, 300.0]).view(1, 3, 1, 1)  # 300: exp would overflow
    scores[:, :, :, 7:] = float("-inf")  # masked keys (a causal mask's), every row keeps a finite entry
    got, expected = softmax(scores), scores.softmax(dim=-1)
    assert torch.isfinite(got).all() and torch.all(got[..., 7:] == 0)
    assert torch.allclose(got, expected, atol=1e-6, rtol=1e-5)
    assert torch.allclose(got.sum(dim=-1), torch.ones(50, 3, 10), atol=1e-6)


@torch.no_grad()
def test_formal_model_matches_a_hand_computation():
    """d=2, one layer, one head, n=2: every step written out with scalars."""
    model = sv.build_model("formal", d_model=2, n_layers=1, n_heads=1, max_len=2, d_ff=2, eps=0.0).double()
    g = torch.Generator().manual_seed(3)
    for p in model.parameters():
        p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    layer = model.layers[0]
    Q, K, V = layer.attn.query[0], layer.attn.key[0], layer.attn.value[0]
    W1, c1, W2, c2 = layer.mlp.linear1.weight, layer.mlp.linear1.bias, layer.mlp.linear2.weight, layer.mlp.linear2.bias
    for x in ([0, 0], [0, 1], [1, 0], [1, 1]):
        got = model(torch.tensor([x])).item()
        y0 = [model.token_embedding[b] + model.positional_embedding[i] for i, b in enumerate(x)]
        ys = []
        for i in range(2):
            scores = [float((K @ y0[j]) @ (Q @ y0[i])) for j in range(2)]
            weights = [math.exp(s) / sum(math.exp(t) for t in scores) for s in scores]
            z = y0[i] + sum(w * (V @ y0[j]) for j, w in enumerate(weights))
            Y = z + W2 @ torch.relu(W1 @ z + c1) + c2
            mean, var = Y.mean(), ((Y - Y.mean()) ** 2).mean()
            ys.append((Y - mean) / math.sqrt(var))
        expected = float(model.readout @ ys[1])
        assert got == pytest.approx(expected, rel=1e-10, abs=1e-12)


def test_ln_factor_equals_manual_computation_from_the_layernorm_input(any_model):
    bits = cube.vertices(6)
    names = [name for name, _ in any_model.layernorms()]
    inputs = {}
    handles = [
        dict(any_model.named_modules())[name].register_forward_hook(
            lambda m, args, out, name=name: inputs.__setitem__(name, args[0].detach())
        )
        for name in names
    ]
    try:
        tr = any_model.trace(bits)
    finally:
        for h in handles:
            h.remove()
    for k, name in enumerate(names):
        Y = inputs[name]  # [batch, n, d]
        var = Y.var(dim=-1, unbiased=False)
        assert torch.allclose(tr.ln_variance[:, k], var, rtol=1e-5, atol=1e-7)
        assert torch.allclose(tr.ln_factor[:, k], 1 / torch.sqrt(var + tr.ln_eps[k]), rtol=1e-5)


def test_our_layernorm_matches_torch():
    ln = sv.base.LayerNorm(12, eps=1e-5)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    ref = torch.nn.LayerNorm(12, eps=1e-5)
    ref.load_state_dict(ln.state_dict())
    x = torch.randn(4, 5, 12) * 3
    assert torch.allclose(ln(x), ref(x), atol=1e-5)


@pytest.mark.parametrize("affine", [True, False])
def test_fused_layernorm_is_the_formula_with_its_first_and_second_derivatives(affine):
    """The fused kernel against (x - mean) / sqrt(var + eps) * weight + bias written out, in float64: the
    output, the input gradient and a Hessian-vector product (sharpness differentiates twice); and a
    captured pass gives the same output, to the bit, as one nobody captures."""
    ln = sv.base.LayerNorm(12, eps=1e-5, affine=affine).double()
    if affine:
        with torch.no_grad():
            ln.weight.normal_()
            ln.bias.normal_()

    def formula(x):
        centered = x - x.mean(dim=-1, keepdim=True)
        y = centered / torch.sqrt(centered.pow(2).mean(dim=-1, keepdim=True) + ln.eps)
        return y * ln.weight + ln.bias if affine else y

    x = (torch.randn(4, 5, 12, dtype=torch.float64) * 3).requires_grad_()
    v = torch.randn_like(x)
    results = []
    for f in (ln, formula):
        out = f(x)
        (grad,) = torch.autograd.grad(out.pow(3).sum(), x, create_graph=True)
        (hvp,) = torch.autograd.grad((grad * v).sum(), x)
        results.append((out, grad, hvp))
    for ours, written in zip(*results):
        assert torch.allclose(ours, written, rtol=1e-10, atol=1e-10)
    with capture(ln, ["hook_variance", "hook_scale"]) as cache:
        captured = ln(x)
    assert torch.equal(captured, results[0][0])
    assert torch.allclose(cache["hook_scale"], 1 / torch.sqrt(x.detach().var(dim=-1, unbiased=False) + ln.eps))
    assert not ln.hook_variance.active  # the capture removed its hooks: the next pass computes no variance


def test_trace_shapes_and_layer_major_order(any_model):
    bits = cube.vertices(5)
    tr = any_model.trace(bits)
    c = any_model.config
    n_ln = c.n_layers * (2 if any_model.arch == "encoder" else 1)
    assert tr.output.shape == (32,)
    assert tr.attention.shape == (32, c.n_layers, c.n_heads, 5, 5)
    assert tr.ln_factor.shape == tr.ln_variance.shape == (32, n_ln, 5)
    assert torch.allclose(tr.attention.sum(dim=-1), torch.ones(32, c.n_layers, c.n_heads, 5))
    if any_model.arch == "encoder":
        assert tr.ln_names == ("encoders.layers.0.norm1", "encoders.layers.0.norm2",
                               "encoders.layers.1.norm1", "encoders.layers.1.norm2")
        assert tr.attention_names == ("encoders.layers.0.self_attn", "encoders.layers.1.self_attn")
    else:
        assert tr.ln_names == ("layers.0.norm", "layers.1.norm")
        assert tr.attention_names == ("layers.0.attn", "layers.1.attn")
    assert torch.equal(tr.output, any_model(bits).detach())


def test_hooks_are_removed_even_on_error(any_model):
    names = hook_names(any_model)
    with pytest.raises(RuntimeError), capture(any_model, names):
        raise RuntimeError("boom")
    assert all(not m._forward_hooks for m in any_model.modules())
    any_model.trace(cube.vertices(3))
    assert all(not m._forward_hooks for m in any_model.modules())


def test_formal_model_with_zero_eps_divides_by_the_exact_std():
    model = sv.build_model("formal", d_model=4, n_layers=1, n_heads=1, max_len=4, eps=0.0, seed=0)
    tr = model.trace(cube.vertices(4))
    assert torch.allclose(tr.ln_factor, tr.ln_variance.rsqrt())
    assert tr.ln_eps == (0.0,)


def test_positional_parameters_are_excluded_from_counts_and_norm(any_model):
    names = set(any_model.non_positional_parameters())
    assert not names & set(any_model.positional_names)
    total = sum(p.numel() for p in any_model.parameters())
    pos = sum(p.numel() for n, p in any_model.named_parameters() if n in any_model.positional_names)
    assert any_model.n_params() == total - pos
    norm = math.sqrt(sum(float((p.detach().double() ** 2).sum()) for n, p in any_model.named_parameters() if n in names))
    assert any_model.param_norm() == pytest.approx(norm)


def test_paper_parameter_counts():
    for d, count in [(128, 199_425), (64, 50_561), (32, 12_993), (4, 281)]:
        assert sv.build_model("encoder", d_model=d, n_layers=2, n_heads=2).n_params() == count


@pytest.mark.parametrize("device", DEVICES)
def test_models_run_on_the_requested_device(device, any_model):
    model = any_model.to(device)
    out = model(cube.vertices(4, device=device))
    assert out.device.type == device and out.shape == (16,)


def test_bad_inputs_and_configs():
    model = sv.build_model("encoder", d_model=8, n_heads=2, max_len=5)
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(2, 6, dtype=torch.long))
    with pytest.raises(ValueError, match="divisible"):
        sv.build_model("encoder", d_model=10, n_heads=4)
    with pytest.raises(ValueError, match="unknown architecture"):
        sv.build_model("lstm")
    with pytest.raises(ValueError, match="unknown encoder config fields"):
        sv.build_model("encoder", width=3)


def test_seeded_initialisation_does_not_touch_the_global_generator():
    torch.manual_seed(5)
    before = torch.rand(1)
    torch.manual_seed(5)
    sv.build_model("formal", seed=1)
    assert torch.equal(torch.rand(1), before)


def test_trace_captures_only_the_parts_asked_for(any_model):
    bits = cube.vertices(4)
    full = any_model.trace(bits)
    ln_only = any_model.trace(bits, names=("ln",))
    attention_only = any_model.trace(bits, names=("attention",))
    assert ln_only.attention is None and attention_only.ln_factor is None and attention_only.ln_variance is None
    assert torch.equal(ln_only.ln_factor, full.ln_factor) and torch.equal(attention_only.attention, full.attention)
    assert torch.equal(ln_only.output, full.output) and ln_only.attention_names == full.attention_names
    with pytest.raises(ValueError, match="unknown trace parts"):
        any_model.trace(bits, names=("mlp",))
