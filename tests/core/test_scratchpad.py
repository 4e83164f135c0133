"""The scratchpad model against torch.nn.Transformer, its greedy decode, trace, training and checkpoints."""

import pytest
import torch
from reference import AuthorsScratchpadModel

import sensviz as sv
from sensviz import cube
from sensviz.scratchpad import BOS, autoregressive_accuracy
from sensviz.training import TrainConfig, train


def test_names_shapes_and_seeded_initialisation_match_the_authors_class():
    ours = sv.build_model("scratchpad", d_model=16, n_layers=2, n_heads=2, max_len=10, seed=3)
    torch.manual_seed(3)
    theirs = AuthorsScratchpadModel(16, 2, 2, max_len=10)
    a, b = ours.state_dict(), theirs.state_dict()
    assert list(a) == list(b)
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert a["embedding.weight"].shape == (3, 8) and a["positional_encoding.weight"].shape == (11, 8)


@pytest.mark.parametrize("d_model,n_heads,n_layers", [(16, 2, 2), (12, 4, 1)])
def test_every_step_matches_torch_transformer_with_copied_weights(d_model, n_heads, n_layers):
    torch.manual_seed(0)
    theirs = AuthorsScratchpadModel(d_model, n_heads, n_layers, max_len=9).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0, 0.5)
    ours = sv.build_model("scratchpad", d_model=d_model, n_layers=n_layers, n_heads=n_heads, max_len=9)
    ours.load_state_dict(theirs.state_dict())
    bits = cube.vertices(7)
    y = ours.scratchpad(bits)
    with torch.no_grad():
        expected = theirs(bits, torch.cat([torch.full((len(bits), 1), BOS), y], dim=1))[:, :-1]  # as their loss reads it
        steps = ours.step_outputs(bits)
        assert torch.allclose(steps, expected, atol=1e-5, rtol=0)
        assert torch.equal(ours(bits), steps[:, -1])
        assert torch.equal(ours.trace(bits).output, ours(bits))


def test_the_scratchpad_is_the_running_parity():
    bits = torch.tensor([[1, 0, 1, 1], [0, 0, 0, 1]])
    assert sv.ScratchpadTransformer.scratchpad(bits).tolist() == [[1, 1, 0, 1], [0, 0, 0, 1]]


def test_greedy_decoding_is_the_authors_autoregressive_loop():
    torch.manual_seed(1)
    theirs = AuthorsScratchpadModel(16, 2, 2, max_len=8).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0, 0.5)
    ours = sv.build_model("scratchpad", d_model=16, n_layers=2, n_heads=2, max_len=8)
    ours.load_state_dict(theirs.state_dict())
    bits = cube.vertices(6)
    y = torch.full((len(bits), 1), BOS)
    with torch.no_grad():
        for _ in range(6):
            y = torch.cat([y, (theirs(bits, y)[:, -1:] > 0.5).long()], dim=1)
    assert torch.equal(ours.generate(bits), y[:, 1:])
    got = autoregressive_accuracy(ours, bits)
    hits = y[:, 1:] == ours.scratchpad(bits)
    assert got["autoregressive_accuracy"] == pytest.approx(hits.float().mean().item())
    assert got["answer_accuracy"] == pytest.approx(hits[:, -1].float().mean().item())


def test_trace_has_every_attention_and_layernorm():
    model = sv.build_model("scratchpad", d_model=8, n_layers=2, n_heads=2, max_len=6, seed=0)
    tr = model.trace(cube.vertices(5))
    assert tr.attention.shape == (32, 6, 2, 5, 5)  # encoder self x2, then (decoder self, cross) x2
    causal = tr.attention[:, 2]  # decoder layer 0 self-attention: nothing from later positions
    assert torch.all(causal.triu(1) == 0) and torch.allclose(causal.sum(-1), torch.ones(32, 2, 5))
    assert tr.ln_names[4] == "model.encoder.norm" and tr.ln_names[-1] == "model.decoder.norm"
    assert tr.ln_factor.shape == (32, 12, 5)


def test_training_reaches_perfect_greedy_decoding_and_the_checkpoint_round_trips(tmp_path):
    model = sv.build_model("scratchpad", d_model=16, n_layers=1, n_heads=2, max_len=6, seed=0)
    result = train(model, "parity", TrainConfig(n=6, batch_size=64, steps=400, lr=3e-3, eval_interval=100,
                                                target_accuracy=1.0))
    assert result.final["eval_accuracy"] == 1.0  # every step under teacher forcing, over the whole cube
    assert autoregressive_accuracy(model, cube.vertices(6)) == {"autoregressive_accuracy": 1.0, "answer_accuracy": 1.0}
    ck = sv.load_checkpoint(result.save(tmp_path / "s.safetensors"))
    assert ck.arch == "scratchpad" and ck.task == sv.get_task("parity") and ck.n == 6
    with torch.no_grad():
        assert torch.equal(ck.model(cube.vertices(6)), model(cube.vertices(6)))


def _perturbed_step_losses(model, bits, targets, eps, n_draws, seed):
    """The authors' way, one perturbed copy per draw: the MSE over every decoder step."""
    import copy

    generator = torch.Generator().manual_seed(seed)
    size = model.n_params()
    losses = []
    for _ in range(n_draws):
        noise = torch.randn(size, generator=generator) * eps  # what sensviz.params.gaussian_directions draws
        other = copy.deepcopy(model)
        offset = 0
        with torch.no_grad():
            for p in other.non_positional_parameters().values():
                p += noise[offset : offset + p.numel()].view_as(p)
                offset += p.numel()
            losses.append(((other.step_outputs(bits) - targets) ** 2).mean().item())
    with torch.no_grad():
        base = ((model.step_outputs(bits) - targets) ** 2).mean().item()
    return torch.tensor(losses, dtype=torch.float64) - base


def test_all_steps_proxy_and_sharpness_against_a_direct_computation():
    from sensviz.sharpness import sharpness, sharpness_proxy

    model = sv.build_model("scratchpad", d_model=8, n_layers=1, n_heads=2, max_len=5, seed=0)
    bits = cube.vertices(4)
    targets = model.training_values(sv.get_task("parity"), bits)  # [16, 4]: the running parity
    got = sharpness_proxy(model, bits, targets, "mse", eps=0.05, n_draws=4, seed=1, steps="all")
    direct = _perturbed_step_losses(model, bits, targets, 0.05, 4, 1)
    assert got.value == pytest.approx(direct.mean().item(), rel=1e-4, abs=1e-7)
    assert got.steps == "all" and got.n_inputs == 16
    last = sharpness_proxy(model, bits, targets[:, -1], "mse", eps=0.05, n_draws=4, seed=1)  # the last step only
    assert last.value != pytest.approx(got.value)
    # L_rho over every step: the mean over steps of each step's own squared change; the limit likewise
    every = sharpness(model, bits, rho=0.01, n_directions=8, seed=2, steps="all")
    assert every.limit is not None and every.value / 0.01**2 == pytest.approx(every.limit, rel=0.5)
    with pytest.raises(ValueError, match="one value per output"):
        sharpness_proxy(model, bits, targets[:, -1], "mse", eps=0.05, n_draws=2, steps="all")


def test_all_steps_limit_equals_plain_autograd_per_step():
    from sensviz.sharpness import sharpness_limit

    model = sv.build_model("scratchpad", d_model=8, n_layers=1, n_heads=2, max_len=5, seed=0)
    bits = cube.vertices(3)[[1, 4, 6]]
    params = list(model.non_positional_parameters().values())
    norms = []
    for x in bits:
        outputs = model.step_outputs(x.unsqueeze(0))[0]  # [3]
        for t in range(3):
            grads = torch.autograd.grad(outputs[t], params, retain_graph=True)
            norms.append(sum(g.pow(2).sum() for g in grads).item())
    expected = sum(norms) / len(norms) / model.n_params()
    assert sharpness_limit(model, bits, steps="all").value == pytest.approx(expected, rel=1e-4)
