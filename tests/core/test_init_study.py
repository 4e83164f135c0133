"""The initialisation study: batched equals one model at a time, the scale-free sensitivity against brute force."""

import math
from itertools import product

import pytest
import torch

from sensviz import cube
from sensviz.init_study import batched_outputs, check_study, function_profile, init_models, init_study, looped_outputs, scale_free
from sensviz.models import ModelSettings
from sensviz.tasks import get_task

TINY = {"encoder": ModelSettings(arch="encoder", d_model=8, n_layers=2, n_heads=2),
        "formal": ModelSettings(arch="formal", d_model=6, n_layers=2, n_heads=2)}


@pytest.mark.parametrize("arch", sorted(TINY))
def test_batched_equals_separate_models(arch):
    models = init_models(TINY[arch], 5, 7, init_scale=1.5, seed=3, dtype=torch.float64)
    bits = cube.vertices(5)
    out, ent = batched_outputs(models, bits)
    ref_out, ref_ent = looped_outputs(models, bits)
    assert out.shape == (7, 32) and ent.shape == (7,)
    torch.testing.assert_close(out, ref_out, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(ent, ref_ent, rtol=1e-10, atol=1e-12)
    batched = init_study(TINY[arch], 5, 7, 1.5, 3, "parity", dtype=torch.float64)
    looped = init_study(TINY[arch], 5, 7, 1.5, 3, "parity", dtype=torch.float64, batched=False)
    for name in ("avg_sensitivity", "min_sensitivity", "degree_profile", "attention_entropy"):
        torch.testing.assert_close(getattr(batched, name), getattr(looped, name), rtol=1e-9, atol=1e-12)
    assert len(set(batched.avg_sensitivity.tolist())) > 1  # the inits differ: a study of copies would pass too easily


def test_batched_over_several_chunks(monkeypatch):
    import sensviz.init_study as study

    models = init_models(TINY["encoder"], 4, 5, seed=0, dtype=torch.float64)
    bits = cube.vertices(4)
    whole, _ = batched_outputs(models, bits)
    per_model = 16 * 4 * 8  # inputs x positions x the widest activation (d = 8, 2 heads x 4 keys)
    monkeypatch.setattr(study, "_CHUNK_ELEMENTS", 2 * per_model)  # two models per vmapped call: chunks 2, 2, 1
    torch.testing.assert_close(batched_outputs(models, bits)[0], whole, rtol=1e-12, atol=1e-12)
    monkeypatch.setattr(study, "_CHUNK_ELEMENTS", per_model)  # one model fills a chunk: plain passes
    torch.testing.assert_close(batched_outputs(models, bits)[0], whole, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("arch", sorted(TINY))
def test_scale_free_sensitivity_against_brute_force(arch):
    n, models = 4, init_models(TINY[arch], 4, 3, init_scale=2.0, seed=11, dtype=torch.float64)
    study = init_study(TINY[arch], n, 3, 2.0, 11, dtype=torch.float64)
    strings = [list(s) for s in product((0, 1), repeat=n)]  # vertex order: position 0 most significant
    for m, model in enumerate(models):
        with torch.no_grad():
            value = {tuple(s): model(torch.tensor([s])).item() for s in strings}  # one forward per input
        ordered = sorted(value.values())
        median = ordered[len(ordered) // 2 - 1]  # the lower median
        f = {s: 1 if v > median else -1 for s, v in value.items()}
        counts = [sum(f[s] != f[s[:i] + (1 - s[i],) + s[i + 1:]] for i in range(n)) for s in f]
        assert study.avg_sensitivity[m].item() == pytest.approx(sum(counts) / 2**n, abs=1e-12)
        assert study.min_sensitivity[m].item() == min(counts)
        assert sum(v == 1 for v in f.values()) == 2 ** (n - 1)  # balanced (no ties at the median)


@pytest.mark.parametrize("n", [3, 6, 8])
def test_known_functions(n):
    parity, first = get_task("parity").values(n), get_task("first").values(n)
    constant = torch.full((2**n,), 0.3)
    tables = scale_free(torch.stack([parity, first, constant]))
    avg, low, profile = function_profile(tables)
    assert avg.tolist() == [n, 1, 0] and low.tolist() == [n, 1, 0]
    assert profile[0, n] == pytest.approx(1) and profile[1, 1] == pytest.approx(1) and profile[2, 0] == pytest.approx(1)
    # the sign of a strictly increasing transform of a function is unchanged: scale-free
    assert torch.equal(scale_free(torch.stack([parity * 1000 - 7, first.exp()])), tables[:2])


def test_degree_profile_sums_to_one_and_gives_as_n():
    study = init_study(TINY["encoder"], 6, 6, 1.0, 0, "majority")
    assert study.degree_profile.sum(dim=1).tolist() == pytest.approx([1.0] * 6)
    k = torch.arange(7, dtype=torch.float64)
    torch.testing.assert_close(study.degree_profile @ k, study.avg_sensitivity, rtol=1e-9, atol=1e-9)
    assert study.target_avg_sensitivity == pytest.approx(cube.analyze(get_task("majority").values_pm1(6)).avg_sensitivity)
    assert study.attention_entropy.min() >= 0 and study.attention_entropy.max() <= 1 + 1e-6


def test_seeds_and_scale():
    a = init_study(TINY["formal"], 5, 4, 1.0, 7)
    b = init_study(TINY["formal"], 5, 4, 1.0, 7)
    assert torch.equal(a.outputs, b.outputs)
    shifted = init_study(TINY["formal"], 5, 3, 1.0, 8)  # init m of seed 8 is init m + 1 of seed 7
    assert torch.equal(shifted.outputs, a.outputs[1:])
    base, = init_models(TINY["encoder"], 5, 1, 1.0, 2)
    double, = init_models(TINY["encoder"], 5, 1, 2.0, 2)
    for (name, p), q in zip(base.named_parameters(), double.parameters()):
        expected = p if ".norm" in name else 2 * p  # LayerNorm gains and biases stay as initialised
        torch.testing.assert_close(q, expected, rtol=0, atol=0)


@pytest.mark.parametrize("change, message", [
    ({"n_inits": 5000}, "inits must be at most 4,096"),
    ({"n": 17}, "n must be at most 16"),
    ({"n": 16, "n_inits": 512}, "inits x 2^n must be at most"),
    ({"init_scale": 0.0}, "init_scale must be above 0"),
    ({"init_scale": math.inf}, "finite"),
    ({"seed": 2**63 - 2}, "seed + inits - 1"),
    ({"settings": ModelSettings(d_model=2048, n_layers=64, n_heads=2), "n_inits": 4096, "n": 2}, "inits x parameters"),
    ({"settings": ModelSettings(arch="scratchpad")}, "encoder or formal"),
])
def test_limits_before_allocation(change, message):
    values = {"settings": TINY["encoder"], "n": 4, "n_inits": 3, "init_scale": 1.0, "seed": 0, **change}
    with pytest.raises(ValueError, match=message.replace("^", r"\^").replace("+", r"\+")):
        check_study(values["settings"], values["n"], values["n_inits"], values["init_scale"], values["seed"])


def test_cli_help_and_a_small_run(capsys):
    import json

    from sensviz.cli import main

    assert main(["init-study", "--help"]) == 0
    assert "--inits" in capsys.readouterr().out
    code = main(["init-study", "--arch", "formal", "--d-model", "6", "--n-layers", "1", "--n", "4", "5", "--inits", "8",
                 "--scales", "0.5", "2", "--task", "parity"])
    found = json.loads(capsys.readouterr().out)
    assert code == 0 and [(s["n"], s["init_scale"]) for s in found["studies"]] == [(4, 0.5), (4, 2.0), (5, 0.5), (5, 2.0)]
    assert [s["target_avg_sensitivity"] for s in found["studies"]] == [4, 4, 5, 5] and len(found["claim"]["cells"]) == 4
    direct = init_study(ModelSettings(arch="formal", d_model=6, n_layers=1), 5, 8, 2.0, 0)
    assert found["studies"][3]["avg_sensitivity"]["mean"] == pytest.approx(direct.avg_sensitivity.mean().item())
    assert found["claim"]["verdict"] in ("reproduced", "differs", "not resolved at this scale")


@pytest.mark.parametrize("argv, message", [
    (["--n", "5", "--inits", "5000"], "--inits: must be at most 4,096"),
    (["--n", "20"], "--n: must be at most 16"),
    (["--n", "16", "--inits", "1024"], "inits x 2^n must be at most"),
    (["--n", "5", "--scales", "0"], "--scales: must be above 0"),
    (["--n", "5", "--arch", "scratchpad"], "encoder or formal"),
    (["--n", "5", "--task", "nonsense"], "nonsense"),
    (["--n", "6", "5", "--task", "sparse_parity:k=6"], "needs n >= k=6, got n=5"),
])
def test_cli_refuses_in_one_line(capsys, argv, message):
    from sensviz.cli import main

    assert main(["init-study", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
