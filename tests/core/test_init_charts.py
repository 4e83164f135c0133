"""The study's quantities as a registry entry, traced by the monitor from the initialisation band."""

import pytest
import torch

import sensviz as sv
from sensviz import measure
from sensviz.init_charts import band, path, path_chart, path_table
from sensviz.init_study import init_models, init_study, scale_free_view
from sensviz.models import ModelSettings
from sensviz.monitor import MeasurementCallback
from sensviz.training import TrainConfig

SETTINGS = ModelSettings(arch="encoder", d_model=8, n_layers=1, n_heads=2)


def test_the_monitor_starts_where_the_study_put_that_init():
    study = init_study(SETTINGS, 4, 6, 1.0, 0, "parity")
    model = init_models(SETTINGS, 4, 1, 1.0, 3)[0]  # the study's init m = 3
    monitor = MeasurementCallback(every=5, settings=measure.MeasureSettings(measure_inputs=16, directions=2),
                                  quantities=("sensitivity", "scale_free"))
    result = sv.train(model, "parity", TrainConfig(n=4, steps=10, batch_size=16, eval_interval=5), callbacks=[monitor])
    first, last = monitor.records[0], monitor.records[-1]
    assert [r["step"] for r in monitor.records] == [0, 5, 10]
    assert first["scale_free_avg_sensitivity"] == study.avg_sensitivity[3].item()
    assert first["scale_free_min_sensitivity"] == study.min_sensitivity[3].item()
    assert first["scale_free_degree_profile"] == pytest.approx(study.degree_profile[3].tolist())
    assert first["attention_entropy"] == pytest.approx(study.attention_entropy[3].item(), rel=1e-6)
    final = scale_free_view(result.model, 4)
    assert last["scale_free_avg_sensitivity"] == final.avg_sensitivity
    trace = path(monitor.records, "avg_sensitivity")
    assert trace["value"].tolist() == [r["scale_free_avg_sensitivity"] for r in monitor.records]


def test_registry_entry_by_name_only():
    model = init_models(SETTINGS, 4, 1)[0]
    assert "scale_free" not in measure.default_quantities(model)
    found = measure.measure(model, None, 4, quantities=("scale_free",))
    assert found.scale_free.avg_sensitivity == init_study(SETTINGS, 4, 1).avg_sensitivity[0].item()
    assert "scale_free_avg_sensitivity" in measure.columns(found)
    too_long = measure.measure(model, None, 4, measure.MeasureSettings(exact_limit=3), quantities=("scale_free",))
    assert too_long.scale_free is None and "exact_limit" in too_long.notes["scale_free"]


def test_band_and_chart():
    study = init_study(SETTINGS, 5, 20, 1.0, 0, "parity")
    found = band(study, "avg_sensitivity")
    values = study.avg_sensitivity.double()
    assert found["q05"] <= found["median"] <= found["q95"] and found["target"] == 5
    assert found["median"] == pytest.approx(torch.quantile(values, 0.5).item())
    assert band(study, "attention_entropy")["target"] is None
    records = [{"step": s, "member": 0, "scale_free_avg_sensitivity": v, "scale_free_min_sensitivity": 0.0,
                "attention_entropy": 0.9} for s, v in [(0, 1.0), (50, 2.5), (100, 5.0)]]
    spec = path_chart(study, records, "avg_sensitivity").to_dict()
    assert len(spec["layer"]) == 4  # band, its median, the path, the target
    assert len(path_chart(study, records, "attention_entropy").to_dict()["layer"]) == 3
    table = path_table([{**r, "accuracy": 0.5 + r["step"] / 200} for r in records])
    assert table.columns.tolist() == ["step", "accuracy", "avg_sensitivity", "min_sensitivity", "attention_entropy"]
    assert table["avg_sensitivity"].tolist() == [1.0, 2.5, 5.0] and table["accuracy"].tolist() == [0.5, 0.75, 1.0]
    with pytest.raises(ValueError, match="lack"):
        path([{"step": 0}], "avg_sensitivity")
    with pytest.raises(ValueError, match="unknown quantity"):
        band(study, "sharpness")


def test_tables_and_distribution_chart():
    from sensviz.init_charts import distribution_chart, profile_table, study_table

    studies = [init_study(SETTINGS, 4, 5, scale, 2, "first") for scale in (0.5, 2.0)]
    table = study_table(studies)
    assert len(table) == 10 and table["init"].tolist() == [2, 3, 4, 5, 6] * 2
    assert table["avg_sensitivity"].tolist() == studies[0].avg_sensitivity.tolist() + studies[1].avg_sensitivity.tolist()
    profiles = profile_table(studies)
    assert set(profiles["model"]) == {"inits, scale 0.5", "inits, scale 2", "target (first)"}
    assert profiles.groupby("model")["weight"].sum().tolist() == pytest.approx([1.0, 1.0, 1.0])
    spec = distribution_chart(table, 4, studies[0].target_avg_sensitivity).to_dict()
    assert len(spec["layer"]) == 2
