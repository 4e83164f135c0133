"""Measurements while training: when they happen, what they equal, and that they change nothing."""

import pytest
import torch

import sensviz as sv
from sensviz import cube
from sensviz.blowup import blowup, log_blowup
from sensviz.measure import MeasureSettings, measure
from sensviz.monitor import MeasurementCallback
from sensviz.sharpness import sharpness, sharpness_limit, sharpness_proxy
from sensviz.training import TrainConfig, evaluate, seeded, train, train_many

LANDSCAPE = ("sensitivity", "blowup", "sharpness", "limit", "proxy")
"""Every quantity of the monitor's records checked here (the proxy is not measured by default)."""


def small(n=5, seed=0):
    return sv.build_model("encoder", d_model=8, n_layers=1, n_heads=2, max_len=n, seed=seed)


def test_measurements_at_step_zero_every_k_steps_and_the_end_equal_direct_computation():
    probe_calls = []

    def probe(model, bits):  # a plugged-in measurement: (model, bits) -> dict of numbers
        probe_calls.append(bits.shape)
        return {"mean_output": model(bits).mean().item()}

    monitor = MeasurementCallback(every=10, settings=MeasureSettings(measure_inputs=16, measure_seed=3), measures=[probe])
    model = small()
    config = TrainConfig(n=5, batch_size=32, steps=25, lr=3e-3, eval_interval=100)
    train(model, "majority", config, [monitor])
    assert [r["step"] for r in monitor.records] == [0, 10, 20, 25]
    final = monitor.records[-1]
    bits = cube.sample(5, 16, 3)  # 2**5 > 16: a fixed seeded sample
    assert probe_calls == [torch.Size([16, 5])] * 4
    assert final == {**final, **evaluate(model, "majority", bits, sv.ZERO_ONE)}
    with torch.no_grad():
        assert final["mean_output"] == pytest.approx(model(bits).mean().item())
    summary = measure(model, "majority", 5, quantities=["sensitivity"]).sensitivity
    assert final["param_norm"] == pytest.approx(model.param_norm())
    assert final["avg_sensitivity"] == pytest.approx(summary.avg_sensitivity)
    assert final["avg_sensitivity_real"] == pytest.approx(summary.avg_sensitivity_real)
    assert final["degree_profile"] == pytest.approx(summary.degree_profile)
    assert sum(final["degree_profile"]) == pytest.approx(1.0)  # a ±1 function has unit Fourier weight
    frame = monitor.frame()
    assert list(frame["step"]) == [0, 10, 20, 25] and "degree_5" in frame and "degree_real_0" in frame


def test_degree_profile_shows_first_being_learned():
    monitor = MeasurementCallback(every=50)
    train(small(n=6), "first", TrainConfig(n=6, batch_size=64, steps=200, lr=3e-3, eval_interval=50), [monitor])
    start, end = monitor.records[0], monitor.records[-1]
    assert end["accuracy"] == 1.0
    assert end["degree_profile"][1] == pytest.approx(1.0) and end["avg_sensitivity"] == pytest.approx(1.0)
    assert start["degree_profile_real"][1] < 0.5 * end["degree_profile_real"][1]


def test_measuring_leaves_the_model_bit_identical():
    model = small()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    monitor = MeasurementCallback(every=1, settings=MeasureSettings(proxy_draws=3), quantities=LANDSCAPE)
    monitor.measure(model, sv.get_task("parity"), TrainConfig(n=5), step=0)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_above_the_exact_limit_sensitivity_is_a_labelled_estimate():
    monitor = MeasurementCallback(every=5, settings=MeasureSettings(exact_limit=4, samples=64))
    train(small(), "parity", TrainConfig(n=5, batch_size=16, steps=5, eval_interval=5), [monitor])
    record = monitor.records[-1]
    assert record["sensitivity_exact"] is False and "degree_profile" not in record
    assert record["avg_sensitivity_stderr"] >= 0 and record["avg_sensitivity_real_stderr"] >= 0


def test_every_model_of_a_batch_is_measured_separately():
    monitor = MeasurementCallback(every=4)
    models = [small(seed=0), small(seed=1)]
    train_many(models, "first", seeded(TrainConfig(n=5, batch_size=16, steps=8, eval_interval=4), [0, 1]), [monitor])
    assert [(r["member"], r["step"]) for r in monitor.records] == [(0, 0), (1, 0), (0, 4), (1, 4), (0, 8), (1, 8)]
    final = {r["member"]: r for r in monitor.records if r["step"] == 8}
    for k, model in enumerate(models):
        assert final[k]["param_norm"] == pytest.approx(model.param_norm())


def test_a_measure_may_not_overwrite_a_recorded_name():
    monitor = MeasurementCallback(every=1, measures=[lambda model, bits: {"loss": 0.0}])
    with pytest.raises(ValueError, match="already recorded"):
        monitor.measure(small(), sv.get_task("parity"), TrainConfig(n=5), step=0)


@pytest.mark.parametrize("arch", ["encoder", "scratchpad"])
def test_landscape_measurements_are_the_landscape_functions_on_the_fixed_batch(arch):
    settings = MeasureSettings(measure_inputs=32, measure_seed=4, rho=0.05, directions=8, proxy_draws=5)
    monitor = MeasurementCallback(every=10, settings=settings, quantities=LANDSCAPE)
    model = sv.build_model(arch, d_model=8, n_layers=1, n_heads=2, max_len=5, seed=0)
    train(model, "parity", TrainConfig(n=5, batch_size=32, steps=20, lr=3e-3, eval_interval=10), [monitor])
    assert [r["step"] for r in monitor.records] == [0, 10, 20]
    final = monitor.records[-1]
    bits = cube.vertices(5)  # 2**5 <= measure_inputs: the whole cube
    # every decoder step of the scratchpad (the default decoder_steps="all"); one output for the encoder
    expected = sharpness(model, bits, rho=0.05, n_directions=8, seed=4, steps="all")
    assert final["sharpness"] == pytest.approx(expected.value, rel=1e-9)
    assert final["sharpness_stderr"] == pytest.approx(expected.stderr, rel=1e-9)
    assert final["sharpness_limit"] == pytest.approx(sharpness_limit(model, bits, steps="all").value, rel=1e-9)
    labels = sv.ZERO_ONE.encode(model.training_values(sv.get_task("parity"), bits))
    proxy = sharpness_proxy(model, bits, labels, "mse", eps=0.02, n_draws=5, seed=4, steps="all")
    assert final["sharpness_proxy"] == pytest.approx(proxy.value, rel=1e-9)
    trace = model.trace(bits)
    assert final["blowup_mean"] == pytest.approx(blowup(trace).mean().item())
    assert final["blowup_max"] == pytest.approx(blowup(trace).max().item())
    assert final["log_blowup_mean"] == pytest.approx(log_blowup(trace).mean().item())
    for k, name in enumerate(trace.ln_names):
        assert final[f"ln_factor_max:{name}"] == pytest.approx(trace.ln_factor[:, k].max().item())
    assert "sharpness" in monitor.frame()


def test_small_rho_sharpness_approaches_its_limit():
    monitor = MeasurementCallback(every=5, settings=MeasureSettings(rho=1e-3, directions=256, measure_inputs=64))
    train(small(), "majority", TrainConfig(n=5, batch_size=32, steps=5, eval_interval=5), [monitor])
    assert len(monitor.records) == 2
    for record in monitor.records:  # L_rho / rho^2 -> E_x |grad T|^2 / P; 256 random directions: a few % noise
        assert record["sharpness"] / record["sharpness_rho"] ** 2 == pytest.approx(record["sharpness_limit"], rel=0.3)
