"""Sweep specs, executors, resume and failure handling (with a toy job function)."""

import json

import pandas as pd
import pytest

from sensviz import sweeps

from sweep_jobs import toy_job

SPEC = """
experiment = "toy"
description = "a toy sweep"
[defaults]
arch = "encoder"
steps = 10
[grid]
n = [4, 6]
seed = [0, 1]
[scales.big]
steps = 1000
"""


def write_spec(tmp_path, text=SPEC):
    path = tmp_path / "spec.toml"
    path.write_text(text)
    return path


def calls(out):
    return [json.loads(line) for line in (out / "calls.jsonl").read_text().splitlines()]


def test_grid_expansion_scales_and_ids(tmp_path):
    spec = sweeps.load_spec(write_spec(tmp_path))
    assert spec.experiment == "toy" and len(spec.runs) == 4
    assert {(r["n"], r["seed"]) for r in spec.runs} == {(4, 0), (4, 1), (6, 0), (6, 1)}
    assert all(r["steps"] == 10 and r["arch"] == "encoder" for r in spec.runs)
    assert all(r["steps"] == 1000 for r in sweeps.load_spec(write_spec(tmp_path), scale="big").runs)
    ids = [sweeps.run_id(r) for r in spec.runs]
    assert len(set(ids)) == 4 and ids == [sweeps.run_id(dict(reversed(list(r.items())))) for r in spec.runs]
    groups = sweeps.jobs(spec.runs)
    assert sorted(len(g) for g in groups) == [2, 2]
    assert all(len({r["n"] for r in g}) == 1 for g in groups)


def test_random_search_is_seeded_and_in_range(tmp_path):
    text = """
experiment = "toy"
[grid]
task = ["parity", "first"]
[random]
samples = 5
seed = 3
lr = {log_uniform = [1e-4, 5e-4]}
weight_decay = {uniform = [0.0, 0.4]}
n = {int_uniform = [4, 25]}
"""
    runs = sweeps.load_spec(write_spec(tmp_path, text)).runs
    assert len(runs) == 10 and runs == sweeps.load_spec(write_spec(tmp_path, text)).runs
    assert all(1e-4 <= r["lr"] <= 5e-4 and 0 <= r["weight_decay"] <= 0.4 and 4 <= r["n"] <= 25 for r in runs)
    assert isinstance(runs[0]["n"], int)


@pytest.mark.parametrize("text,message", [
    ("[grid]\nn = [1]", "must name its experiment"),
    ("experiment = 'toy'\n[grid]\nn = 3", "non-empty list"),
    ("experiment = 'toy'\n[random]\nsamples = 2\nlr = {gauss = [0, 1]}", "must be one of"),
    ("experiment = 'toy'\n[grid\n", "not valid TOML"),
])
def test_bad_specs(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        sweeps.load_spec(write_spec(tmp_path, text))


def test_unknown_scale(tmp_path):
    with pytest.raises(ValueError, match="unknown scale"):
        sweeps.load_spec(write_spec(tmp_path), scale="huge")


@pytest.mark.parametrize("workers", [1, 2])
def test_local_sweep_end_to_end_and_resume(tmp_path, workers):
    spec = sweeps.load_spec(write_spec(tmp_path))
    out = tmp_path / "out"
    runs = sweeps.run_sweep(spec, out, toy_job, workers=workers)
    assert len(runs) == 4 and set(runs["status"]) == {"finished"}
    assert sorted(runs["value"]) == [40, 41, 60, 61]
    history = pd.read_parquet(out / "history.parquet")
    assert len(history) == 12 and set(history["run_id"]) == set(runs["run_id"])
    assert sorted(len(c) for c in calls(out)) == [2, 2]  # seeds grouped into jobs
    again = sweeps.run_sweep(spec, out, toy_job, workers=workers)
    assert len(calls(out)) == 2  # nothing re-ran
    assert again.sort_values("run_id")["value"].tolist() == runs.sort_values("run_id")["value"].tolist()


def test_failures_are_recorded_and_the_rest_complete(tmp_path):
    spec = sweeps.load_spec(write_spec(tmp_path))
    spec.runs.append({"arch": "encoder", "steps": 10, "n": 8, "seed": 0, "fail": True})
    spec.runs.append({"arch": "encoder", "steps": 10, "n": 9, "seed": 0, "crash": True})
    out = tmp_path / "out"
    runs = sweeps.run_sweep(spec, out, toy_job)
    failed = runs[runs["status"] == "failed"].set_index("n")
    assert set(failed.index) == {8, 9}
    assert "failed on purpose" in failed.loc[8, "error"] and "whole job crashed" in failed.loc[9, "error"]
    assert (runs["status"] == "finished").sum() == 4
    before = len(calls(out))
    sweeps.run_sweep(spec, out, toy_job)
    assert len(calls(out)) == before + 2  # only the two failed runs are retried


def test_an_interrupted_sweep_keeps_the_tables_of_what_finished(tmp_path):
    spec = sweeps.load_spec(write_spec(tmp_path))
    spec.runs.append({"arch": "encoder", "steps": 10, "n": 99, "seed": 0, "interrupt": True})
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        sweeps.run_sweep(spec, out, toy_job)
    runs, _, _ = sweeps.read_results(out)
    assert len(runs) == 4 and set(runs["status"]) == {"finished"}  # the two jobs before the interrupt


def test_the_tables_hold_only_the_runs_of_the_spec_and_scale_just_run(tmp_path):
    out = tmp_path / "out"
    sweeps.run_sweep(sweeps.load_spec(write_spec(tmp_path)), out, toy_job)
    big = sweeps.run_sweep(sweeps.load_spec(write_spec(tmp_path), scale="big"), out, toy_job)
    assert len(big) == 4 and set(big["steps"]) == {1000}  # the default scale's runs are not mixed in
    assert json.loads((out / "spec.json").read_text())["scale"] == "big"
    again = sweeps.run_sweep(sweeps.load_spec(write_spec(tmp_path)), out, toy_job)
    assert set(again["steps"]) == {10} and len(calls(out)) == 4  # the first runs' records were kept and reused


def test_read_results_and_bad_folder(tmp_path):
    spec = sweeps.load_spec(write_spec(tmp_path))
    sweeps.run_sweep(spec, tmp_path / "out", toy_job)
    runs, history, meta = sweeps.read_results(tmp_path / "out")
    assert len(runs) == 4 and len(history) == 12 and meta["experiment"] == "toy"
    with pytest.raises(ValueError, match="not a sweep folder"):
        sweeps.read_results(tmp_path)


def test_ray_executor_runs_a_tiny_sweep_on_a_local_instance(tmp_path, ray):
    spec = sweeps.load_spec(write_spec(tmp_path))
    runs = sweeps.run_sweep(spec, tmp_path / "out", toy_job, executor="ray", workers=2)
    assert len(runs) == 4 and set(runs["status"]) == {"finished"}
    assert sorted(runs["value"]) == [40, 41, 60, 61]
    assert not ray.is_initialized()  # the local instance it started is shut down


def test_grid_arrays_pool_their_runs_and_scales_replace_grids(tmp_path):
    text = """
experiment = "toy"
batch = ["seed", "lr"]
[defaults]
steps = 10
[[grid]]
arch = ["encoder"]
n = [4, 6]
[[grid]]
arch = ["scratchpad"]
n = [8, 16, 32]
[scales.big]
steps = 99
[[scales.big.grid]]
arch = ["formal"]
n = [5]
"""
    spec = sweeps.load_spec(write_spec(tmp_path, text))
    assert [(r["arch"], r["n"]) for r in spec.runs] == [
        ("encoder", 4), ("encoder", 6), ("scratchpad", 8), ("scratchpad", 16), ("scratchpad", 32)]
    assert spec.batch == ("seed", "lr")
    big = sweeps.load_spec(write_spec(tmp_path, text), scale="big").runs
    assert big == [{"steps": 99, "arch": "formal", "n": 5}]


def test_a_scale_overrides_grid_lists_and_random_rules(tmp_path):
    text = SPEC + """
[scales.wide.grid]
n = [10, 20, 30]
[scales.wide.random]
samples = 2
lr = {choice = [0.1, 0.2]}
"""
    wide = sweeps.load_spec(write_spec(tmp_path, text), scale="wide").runs
    assert len(wide) == 3 * 2 * 2  # n x seed (kept from the spec's grid) x samples
    assert {r["n"] for r in wide} == {10, 20, 30} and {r["lr"] for r in wide} <= {0.1, 0.2}
    assert all(r["steps"] == 10 for r in wide)
    with pytest.raises(ValueError, match="batch must be a list"):
        sweeps.load_spec(write_spec(tmp_path, 'experiment = "toy"\nbatch = "seed"'))


def test_jobs_group_runs_by_everything_but_the_batch_fields():
    runs = [{"n": n, "lr": lr, "seed": s} for n in (4, 6) for lr in (0.1, 0.2) for s in (0, 1)]
    assert sorted(len(j) for j in sweeps.jobs(runs)) == [2, 2, 2, 2]
    grouped = sweeps.jobs(runs, batch=("seed", "lr"))
    assert sorted(len(j) for j in grouped) == [4, 4]
    assert all(len({r["n"] for r in job}) == 1 for job in grouped)
    assert len(sweeps.jobs(runs, batch=("seed", "lr", "n"))) == 1


def test_threads_of_an_in_process_sweep(tmp_path):
    import torch

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        sweeps.run_sweep(sweeps.load_spec(write_spec(tmp_path)), tmp_path / "out", toy_job, threads=1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
