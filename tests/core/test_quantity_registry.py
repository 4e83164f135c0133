"""A quantity is one function and one registry entry: registered here (and removed after), it appears
in `sensviz inspect`, a sweep's runs table, the training monitor's records, the app's summary and the
zoo manifest with no other edit."""

import io
import json

import pytest
from helpers.core import TINY, TINY_ZOO, probe_value, sweep

import sensviz as sv
from sensviz import measure, zoo
from sensviz.cli import main
from sensviz.monitor import MeasurementCallback
from sensviz.training import TrainConfig


def test_a_registered_quantity_reaches_inspect(probe, tmp_path, capsys, encoder_model):
    path = tmp_path / "model.safetensors"
    sv.save_checkpoint(encoder_model, path, task="parity", n=4)
    assert main(["inspect", str(path), "--measure-inputs", "16", "--directions", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["probe"] == pytest.approx(probe_value(encoder_model))


def test_a_registered_quantity_reaches_a_sweeps_runs_table(probe, tmp_path):
    runs = [{**TINY, "task": "parity", "seed": 0}, {**TINY, "task": "first", "seed": 1}]
    table, _ = sweep("length_scaling", runs, tmp_path)
    assert set(table["status"]) == {"finished"}
    for run_id, row in table.iterrows():
        ck = sv.load_checkpoint(tmp_path / "checkpoints" / f"{run_id}.safetensors")
        assert row["probe_value"] == pytest.approx(probe_value(ck.model), rel=1e-6)


def test_a_registered_quantity_reaches_the_monitors_records(probe):
    model = sv.build_model("encoder", d_model=8, n_layers=1, n_heads=2, max_len=4, seed=0)
    monitor = MeasurementCallback(every=5, settings=measure.MeasureSettings(measure_inputs=16, directions=2))
    result = sv.train(model, "parity", TrainConfig(n=4, steps=10, batch_size=16, eval_interval=5), callbacks=[monitor])
    assert [r["step"] for r in monitor.records] == [0, 5, 10]
    assert all("probe_value" in r for r in monitor.records)
    assert monitor.records[-1]["probe_value"] == pytest.approx(probe_value(result.model))
    assert "probe_value" in monitor.frame()


def test_a_registered_quantity_reaches_the_zoo_manifest(probe, tmp_path, monkeypatch):
    monkeypatch.setattr(zoo, "RECIPES", TINY_ZOO[:1])
    manifest = zoo.build(tmp_path, log=io.StringIO().write)
    written = json.loads((tmp_path / zoo.MANIFEST).read_text())
    assert written == manifest
    entry = written["entries"][0]
    model = sv.load_checkpoint(tmp_path / entry["file"]).model
    assert entry["probe_value"] == pytest.approx(probe_value(model))
