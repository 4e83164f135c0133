"""The measurement layer: one call, one set of defaults, the same numbers whoever asks."""

import copy
import json
import math

import pytest
import torch

import sensviz as sv
from sensviz import cube, experiments
from sensviz.cli import main
from sensviz.measure import COSTS, QUANTITIES, MeasureSettings, default_quantities, measure
from sensviz.monitor import MeasurementCallback, record_of
from sensviz.sharpness import sharpness, sharpness_limit, sharpness_proxy
from sensviz.training import TrainConfig

SETTINGS = MeasureSettings(measure_inputs=32, directions=6, proxy_draws=5, measure_seed=3)


def test_every_quantity_is_a_key_of_the_measurement_and_has_a_cost():
    found = measure(sv.build_model("encoder", d_model=8, n_layers=1, max_len=6, seed=0), "parity", 3, SETTINGS)
    assert list(found.to_dict()) == ["n", "n_params", "param_norm", "rho", "inputs", "settings", *QUANTITIES, "notes"]
    assert found.hessian is None and found.sensitivity is not None and all(q.cost in COSTS for q in QUANTITIES.values())
    assert not hasattr(found, "sharpnes")  # a typo is an error, not a missing quantity
    encoder = sv.build_model("encoder", d_model=8, n_layers=1, max_len=6, seed=0)
    scratchpad = sv.build_model("scratchpad", d_model=8, n_layers=1, max_len=6, seed=0)
    assert default_quantities(encoder) == ("sensitivity", "blowup", "tradeoff", "sharpness", "limit", "proxy")
    # for the scratchpad the per-step limit (n backward passes per input) is asked for by name; decoding is added
    assert default_quantities(scratchpad) == ("sensitivity", "blowup", "tradeoff", "sharpness", "proxy", "decoding")
    with pytest.raises(ValueError, match="unknown quantities"):
        measure(encoder, "parity", 4, quantities=["sharpnes"])


def test_the_summary_of_a_model_on_the_cube(formal_model):
    found = measure(formal_model, "first", 5, quantities=["sensitivity"], encoding=sv.PM1).sensitivity
    assert found.exact and len(found.degree_profile) == 6
    assert found.avg_sensitivity == pytest.approx(sum(k * d for k, d in enumerate(found.degree_profile)))
    assert found.task_avg_sensitivity == 1.0 and 0 <= found.accuracy <= 1
    real = measure(formal_model, "mean", 5, quantities=["sensitivity"], encoding=sv.PM1).sensitivity
    assert real.accuracy is None and real.avg_sensitivity == real.avg_sensitivity_real


def test_values_are_those_of_the_functions_they_come_from(encoder_model):
    found = measure(encoder_model, "parity", 5, SETTINGS)
    bits = cube.vertices(5)  # 2**5 <= measure_inputs
    rho = 0.02 * math.sqrt(encoder_model.n_params())  # the default radius: the proxy's typical |Delta|
    assert found.rho == pytest.approx(rho) and found.inputs == {"kind": "cube", "n_inputs": 32, "seed": None}
    assert found.sharpness.value == pytest.approx(sharpness(encoder_model, bits, rho, 6, 3).value, rel=1e-12)
    assert found.limit.value == pytest.approx(sharpness_limit(encoder_model, bits).value, rel=1e-12)
    targets = sv.losses.targets(sv.get_task("parity"), bits, sv.ZERO_ONE)
    proxy = sharpness_proxy(encoder_model, bits, targets, "mse", eps=0.02, n_draws=5, seed=3)
    assert found.proxy.value == pytest.approx(proxy.value, rel=1e-12)
    assert found.blowup.mean == pytest.approx(sv.blowup.blowup_summary(encoder_model, 5).mean)
    assert found.tradeoff.task_avg_sensitivity == 5.0
    assert json.loads(json.dumps(found.to_dict()))["sharpness"]["value"] == found.sharpness.value
    assert found.notes == {}


def test_inspect_the_monitor_and_the_experiments_give_the_same_numbers(capsys, tmp_path):
    """Every caller goes through sensviz.measure: one checkpoint, one set of settings, one set of numbers."""
    run = experiments.prepare("length_scaling", {"task": "parity", "n": 5, "d_model": 8, "n_layers": 1,
                                                  "measure_inputs": 32, "directions": 6, "proxy_draws": 5,
                                                  "measure_seed": 3})
    model, config = run.model, run.config
    path = sv.save_checkpoint(model, tmp_path / "m.safetensors", task="parity", n=5)
    direct = measure(model, "parity", 5, run.measure)

    assert main(["inspect", str(path), "--measure-inputs", "32", "--directions", "6", "--proxy-draws", "5",
                 "--measure-seed", "3"]) == 0
    cli = json.loads(capsys.readouterr().out)
    monitor = MeasurementCallback(every=1, settings=run.measure, quantities=default_quantities(model))
    live = monitor.measure(model, run.task, config, step=0)
    table = experiments.measure_run(run, model, run.task, config)

    for name, value in (("sharpness", direct.sharpness.value), ("proxy", direct.proxy.value),
                        ("limit", direct.limit.value)):
        assert cli[name]["value"] == pytest.approx(value, rel=1e-9), name
    assert cli["sensitivity"]["avg_sensitivity"] == direct.sensitivity.avg_sensitivity
    assert live["sharpness"] == pytest.approx(direct.sharpness.value, rel=1e-9)
    assert live["sharpness_proxy"] == pytest.approx(direct.proxy.value, rel=1e-9)
    assert live["sharpness_limit"] == pytest.approx(direct.limit.value, rel=1e-9)
    assert live["avg_sensitivity"] == direct.sensitivity.avg_sensitivity
    assert table["sharpness"] == pytest.approx(direct.sharpness.value, rel=1e-9)
    assert table["sharpness_proxy"] == pytest.approx(direct.proxy.value, rel=1e-9)
    assert table["sharpness_limit"] == pytest.approx(direct.limit.value, rel=1e-9)
    assert table["as_model"] == direct.sensitivity.avg_sensitivity
    assert record_of(direct)["blowup_mean"] == table["blowup_mean"] == cli["blowup"]["mean"]


def test_radii_are_the_same_directions_at_several_radii(encoder_model):
    found = measure(encoder_model, "first", 5, SETTINGS, ["sharpness", "radii"])
    radii = found.radii
    assert [r.rho for r in radii] == pytest.approx([f * found.rho for f in sv.measure.RADIUS_FRACTIONS])
    assert radii[-1].value == pytest.approx(found.sharpness.value, rel=1e-12)  # fraction 1: the same estimate
    values = [r.value / r.rho**2 for r in radii]
    assert values[0] == pytest.approx(sharpness_limit(encoder_model, cube.vertices(5)).value, rel=0.5)


def test_a_degenerate_model_is_reported_not_raised(encoder_model):
    broken = copy.deepcopy(encoder_model)
    with torch.no_grad():
        for p in broken.parameters():
            p.mul_(1e30)  # outputs and gradients overflow
    found = measure(broken, "parity", 5, SETTINGS, list(default_quantities(broken)) + ["hessian", "radii"])
    record = json.loads(json.dumps(found.to_dict(), allow_nan=False))  # strict JSON: non-finite became null
    assert found.notes, "a model whose numbers overflow gets notes"
    assert all(isinstance(reason, str) and reason for reason in record["notes"].values())


def test_measure_settings_are_validated():
    for bad, message in ((dict(directions=0), "directions must be"), (dict(rho=float("nan")), "rho must be"),
                         (dict(decoder_steps="some"), "decoder_steps must be one of"),
                         (dict(measure_inputs=10**9), "measure_inputs must be")):
        with pytest.raises(ValueError, match=message):
            MeasureSettings(**bad)


def test_a_model_without_a_task_gets_its_model_only_quantities(encoder_model):
    found = measure(encoder_model, None, 5, SETTINGS)
    assert found.sharpness is not None and found.proxy is None and "task" in found.notes["proxy"]
    with pytest.raises(ValueError, match="positional range"):
        measure(encoder_model, None, 50, SETTINGS)


def test_monitor_records_the_radii_by_name():
    model = sv.build_model("encoder", d_model=8, n_layers=1, max_len=5, seed=0)
    monitor = MeasurementCallback(every=1, settings=SETTINGS, quantities=("sharpness", "radii"))
    record = monitor.measure(model, sv.get_task("first"), TrainConfig(n=5), step=0)
    assert {"sharpness_x0.01", "sharpness_x1", "sharpness_rho_x0.1"} <= set(record)
