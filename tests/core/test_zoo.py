"""The committed checkpoint zoo: the manifest matches the files, every entry loads, rebuilds are deterministic."""

import dataclasses
import json
import math
import shutil
from pathlib import Path

import pytest
from helpers.core import TINY_ZOO as TINY

import sensviz as sv
import sensviz.measure as measure_module
from sensviz import zoo

CHECKPOINTS = Path(__file__).resolve().parents[2] / "checkpoints"


def manifest():
    return json.loads((CHECKPOINTS / zoo.MANIFEST).read_text())


def test_the_committed_zoo_verifies_every_entry():
    rows = zoo.verify(CHECKPOINTS)  # hashes, loading, metadata against the manifest
    assert [row for row in rows if not row["ok"]] == []
    assert [row["file"] for row in rows] == [f"{r.name}.safetensors" for r in zoo.RECIPES]


def test_recorded_accuracy_and_sensitivity_are_what_the_models_give():
    for entry in manifest()["entries"]:
        if entry["n"] <= 12:  # the larger ones: `sensviz zoo verify --recompute`
            ck = sv.load_checkpoint(CHECKPOINTS / entry["file"])
            measured = zoo.measure(ck.model, ck.task, ck.n, ck.encoding)
            assert set(measured) <= set(entry), entry["name"]  # every column of today's registry (`zoo measure`)
            for key, value in measured.items():  # float32 models: equal to a few units of rounding (rel 1e-6)
                expected = entry[key]
                assert (value is None) == (expected is None), (entry["name"], key)
                assert value is None or math.isclose(value, expected, rel_tol=1e-6, abs_tol=1e-6), (entry["name"], key)
            if entry["task"] in ("parity", "majority", "first") and entry["n"] <= 10:
                assert entry["accuracy"] == 1.0 and entry["avg_sensitivity"] == pytest.approx(entry["task_avg_sensitivity"])


def test_the_few_examples_model_fits_its_training_set_and_extrapolates_with_low_sensitivity():
    """The Lab's last chapter: a random function learned from 64 of 256 inputs."""
    entry = next(e for e in manifest()["entries"] if e["name"] == "encoder-random-n8")
    ck = sv.load_checkpoint(CHECKPOINTS / entry["file"])
    assert entry["stop_reason"] == "early_stop" and ck.metadata["training"]["final"]["eval_accuracy"] == 1.0
    assert entry["avg_sensitivity"] < entry["task_avg_sensitivity"]  # simpler than the function it was shown
    steps = [record["step"] for record in ck.metadata["extra"]["measurements"]]
    assert steps[0] == 0 and steps[-1] == entry["steps"] and len(steps) >= 3


def test_the_zoo_covers_tasks_lengths_and_architectures():
    entries = manifest()["entries"]
    have = {(e["arch"], e["task"], e["n"]) for e in entries}
    assert {("encoder", t, n) for t in zoo.TASKS for n in (4, 6, 8, 10, 12, 16)} <= have
    assert {("formal", t, 8) for t in zoo.TASKS} <= have
    assert any(arch == "scratchpad" for arch, _, _ in have)
    assert (CHECKPOINTS / "encoder-parity-n8.safetensors").is_file()  # cited in the README
    assert sum(e["bytes"] for e in entries) < 5 * 2**20


def as_now(recorded: dict) -> dict:
    """A recorded training config with the settings added to `TrainConfig` since then at their
    defaults (what the trainer did before they existed); a recorded value is never changed."""
    defaults = {f.name: f.default for f in dataclasses.fields(sv.TrainConfig) if f.default is not dataclasses.MISSING}
    return {**{k: v for k, v in defaults.items() if k not in recorded}, **recorded}


def test_every_entry_records_how_it_was_made():
    recipes = {r.name: r for r in zoo.RECIPES}
    for entry in manifest()["entries"]:
        recipe = recipes[entry["name"]]
        ck = sv.load_checkpoint(CHECKPOINTS / entry["file"])
        made = ck.metadata["extra"]["zoo"]
        assert {**made, "train": as_now(made["train"])} == recipe.to_dict()
        training = ck.metadata["training"]
        assert as_now(training["config"]) == as_now(entry["train"]) == {**recipe.train.to_dict(), "seed": recipe.seed}
        assert training["steps"] == entry["steps"] and training["stop_reason"] == entry["stop_reason"]
        assert training["history"][-1]["step"] == entry["steps"]
        assert entry["n_params"] == ck.model.n_params()


def test_rebuilds_are_deterministic_and_verify(tmp_path, monkeypatch):
    monkeypatch.setattr(zoo, "RECIPES", TINY)
    lines = []
    first = zoo.build(tmp_path / "a", log=lines.append)
    second = zoo.build(tmp_path / "b")
    assert [e["sha256"] for e in first["entries"]] == [e["sha256"] for e in second["entries"]]
    assert first["entries"][0]["trained_with"] == ["encoder-first-n3", "encoder-parity-n3"]  # one batch
    assert any("encoder-parity-n3.safetensors: learned nothing: " in line and "after 6 steps" in line for line in lines)
    assert all(row["ok"] for row in zoo.verify(tmp_path / "a", recompute=True))

    zoo.build(tmp_path / "a", only=["encoder-first-n3"])  # one entry rebuilt, the others kept
    kept = json.loads((tmp_path / "a" / zoo.MANIFEST).read_text())["entries"]
    assert [e["name"] for e in kept] == [r.name for r in TINY]
    assert [e["sha256"] for e in kept] == [e["sha256"] for e in first["entries"]]
    with pytest.raises(ValueError, match="unknown zoo entries"):
        zoo.build(tmp_path / "a", only=["nope"])


def test_verify_reports_every_kind_of_problem(tmp_path, monkeypatch):
    monkeypatch.setattr(zoo, "RECIPES", TINY)
    zoo.build(tmp_path)
    path = tmp_path / "encoder-first-n3.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    (tmp_path / "encoder-parity-n3.safetensors").unlink()
    shutil.copy(tmp_path / "scratchpad-parity-n3.safetensors", tmp_path / "stray.safetensors")
    entries = json.loads((tmp_path / zoo.MANIFEST).read_text())
    entries["entries"][2]["accuracy"] = 2.0
    (tmp_path / zoo.MANIFEST).write_text(json.dumps(entries))
    problems = {row["file"]: row["problems"] for row in zoo.verify(tmp_path, recompute=True)}
    assert "sha256" in problems["encoder-first-n3.safetensors"][0]
    assert problems["encoder-parity-n3.safetensors"] == ["the file is missing"]
    assert problems["scratchpad-parity-n3.safetensors"][0].startswith("accuracy is")
    assert problems["stray.safetensors"] == ["not in the manifest"]
    (tmp_path / zoo.MANIFEST).write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        zoo.verify(tmp_path)


def test_a_quantity_added_after_the_manifest_is_named_by_verify_and_measured_without_retraining(tmp_path, monkeypatch):
    monkeypatch.setattr(zoo, "RECIPES", TINY[:1])
    built = zoo.build(tmp_path)
    assert built["quantities"] == measure_module.registry_key()
    assert set(zoo.RECORDED) < set(built["entries"][0])  # what training recorded, then the measured columns
    assert all(row["ok"] for row in zoo.verify(tmp_path))
    monkeypatch.setattr(measure_module, "QUANTITIES", dict(measure_module.QUANTITIES))
    measure_module.quantity("probe", lambda value: {"probe_value": value}, cost="instant")(lambda ctx: 0.5)
    problems = {row["file"]: row["problems"] for row in zoo.verify(tmp_path, recompute=True) if not row["ok"]}
    assert "sensviz zoo measure" in problems[zoo.MANIFEST][0]
    assert problems[built["entries"][0]["file"]] == ["probe_value is not in the manifest: run `sensviz zoo measure`"]
    measured = zoo.remeasure(tmp_path)
    (entry,) = measured["entries"]
    ck = sv.load_checkpoint(tmp_path / entry["file"])  # an entry: what training recorded and the measured columns
    assert set(entry) == set(zoo.RECORDED) | set(zoo.measure(ck.model, ck.task, ck.n, ck.encoding))
    assert entry["probe_value"] == 0.5 and measured["quantities"] == measure_module.registry_key() != built["quantities"]
    assert {key: entry[key] for key in zoo.RECORDED} == {key: built["entries"][0][key] for key in zoo.RECORDED}
    assert all(row["ok"] for row in zoo.verify(tmp_path, recompute=True))
    (tmp_path / entry["file"]).write_bytes(b"other bytes")
    with pytest.raises(ValueError, match="not the file the manifest lists"):
        zoo.remeasure(tmp_path)
