"""Sweep specs, executors, resume and failure handling (with a toy job function)."""

import io
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from helpers.core import SWEEP_SPEC as SPEC
from helpers.core import calls, write_spec
from sweep_jobs import toy_job

from sensviz import sweeps

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "experiments" / "results"


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
    ("experiment = 'toy'\nexperimnet = 'x'", r"unknown top-level key\(s\) \['experimnet'\] \(did you mean 'experiment'\?\)"),
    ("experiment = 'toy'\n[defaultz]\nn = 4", r"\['defaultz'\] \(did you mean 'defaults'\?\)"),
    ("experiment = 'toy'\n[scales]\npaper = 5", r"scales.paper must be a table \(\[scales.paper\]\)"),
    ("experiment = 'toy'\n[scales.paper.defaults]\nn = 4", r"scales.paper.defaults is a table; a scale holds settings"),
    ("experiment = 'toy'\n[scales.paper.random]\nlr = {uniformm = [0, 1]}", "scales.paper.random.lr must be one of"),
    ("experiment = 'toy'\n[random]\nlr = {choice = []}", "random.lr: choice takes a non-empty list"),
    ("experiment = 'toy'\n[random]\nlr = {uniform = [1]}",
     r"random.lr: uniform takes \[low, high\], two finite numbers; got \[1\]"),
    ("experiment = 'toy'\n[random]\nlr = {uniform = ['a', 1]}", "two finite numbers"),
    ("experiment = 'toy'\n[random]\nlr = {uniform = [2, 1]}", "low <= high"),
    ("experiment = 'toy'\n[random]\nn = {int_uniform = [4, 8.5]}", "two integers"),
    ("experiment = 'toy'\n[random]\nlr = {log_uniform = [0, 1]}", "must be positive"),
    ("experiment = 'toy'\n[random]\nlr = {uniform = [0, 1], choice = [1]}", "must be one of"),
    ("experiment = 'toy'\n[random]\nsamples = 1e9\nlr = {uniform = [0, 1]}", "random.samples must be an integer"),
    ("experiment = 'toy'\n[random]\nsamples = 1000000000\nlr = {uniform = [0, 1]}", "random.samples must be at most"),
    ("experiment = 'toy'\n[grid]\nlr = [nan, inf, -1.0, 'abc']", "grid.lr: nan is not a finite number"),
    ("experiment = 'toy'\n[grid]\nlr = [-1.0, 'abc']",
     r"setting 'lr' mixes number and string values across runs \(-1.0, 'abc'\)"),
    ("experiment = 'toy'\n[defaults]\nlr = 0.1\n[[grid]]\nn = [4]\n[[grid]]\nlr = [true]", "mixes boolean and number"),
    ("experiment = 'toy'\n[grid]\nn = [[4, 5]]", "must be a string, a number or a boolean"),
    ("experiment = 'toy'\n[defaults]\nd = 1979-05-27", "must be a string, a number or a boolean"),
    ("experiment = 5", "experiment must be a string"),
    ("experiment = 'toy'\ngrid = 3", "grid must be a table"),
    ("experiment = 'toy'\nx = " + "[" * 5000 + "]" * 5000, "not valid TOML"),
])
def test_bad_specs(tmp_path, text, message):
    with pytest.raises(ValueError, match=message) as info:
        sweeps.load_spec(write_spec(tmp_path, text))
    assert "\n" not in str(info.value)


def test_a_spec_is_validated_whole_even_scales_not_asked_for(tmp_path):
    with pytest.raises(ValueError, match="scales.other.random.lr: choice takes a non-empty list"):
        sweeps.load_spec(write_spec(tmp_path, SPEC + "[scales.other.random]\nlr = {choice = []}\n"))


def test_the_run_cap_is_checked_before_the_grid_is_expanded(tmp_path):
    huge = "experiment = 'toy'\n[grid]\n" + "".join(f"k{i} = [{', '.join(map(str, range(16)))}]\n" for i in range(10))
    with pytest.raises(ValueError, match=r"1,099,511,627,776 runs, more than the cap of 10,000 \(limit 'runs'\)"):
        sweeps.load_spec(write_spec(tmp_path, huge))  # 16**10 runs: expanding them would not end
    with pytest.raises(ValueError, match="more than --max-runs 1,000,000"):
        sweeps.load_spec(write_spec(tmp_path, huge), max_runs=10**6)
    big = "experiment = 'toy'\n[grid]\nn = [" + ", ".join(map(str, range(200))) + "]\nseed = [" + \
        ", ".join(map(str, range(60))) + "]\n"
    with pytest.raises(ValueError, match="12,000 runs, more than the cap of 10,000 .*; pass --max-runs 12000"):
        sweeps.load_spec(write_spec(tmp_path, big))
    assert len(sweeps.load_spec(write_spec(tmp_path, big), max_runs=12_000).runs) == 12_000
    searched = "experiment = 'toy'\n[grid]\nn = [4, 6]\n[random]\nsamples = 6000\nlr = {uniform = [0, 1]}\n"
    with pytest.raises(ValueError, match="12,000 runs"):
        sweeps.load_spec(write_spec(tmp_path, searched))


def test_counting_agrees_with_expanding_for_every_shipped_spec():
    import tomllib
    from pathlib import Path

    for path in sorted((Path(__file__).resolve().parents[2] / "experiments").glob("*.toml")):
        data = tomllib.loads(path.read_text())
        for scale in [None, *data.get("scales", {})]:
            assert sweeps.count_runs(data, scale) == len(sweeps.expand(data, scale)), (path.name, scale)


def test_run_ids_are_unchanged():
    """Interrupted sweeps resume by run id: its hashing must never change."""
    assert sweeps.run_id({"n": 4, "seed": 0, "task": "parity"}) == "e505d68db7fc"
    assert sweeps.run_id({"lr": 0.001, "arch": "encoder"}) == sweeps.run_id({"arch": "encoder", "lr": 0.001})


def test_unknown_scale(tmp_path):
    with pytest.raises(ValueError, match="unknown scale"):
        sweeps.load_spec(write_spec(tmp_path), scale="huge")


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


def test_a_folder_of_another_experiment_scale_or_spec_is_refused(tmp_path):
    out = tmp_path / "out"
    first = sweeps.run_sweep(sweeps.load_spec(write_spec(tmp_path)), out, toy_job)
    kept = {path.name: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    other = tmp_path / "other"
    other.mkdir()
    refused = [
        (sweeps.load_spec(write_spec(tmp_path), scale="big"), "the scale 'quick', not 'big'"),
        (sweeps.load_spec(write_spec(other, SPEC.replace('"toy"', '"other"'))), "the experiment 'toy', not 'other'"),
        (sweeps.load_spec(write_spec(other, SPEC.replace("n = [4, 6]", "n = [4, 6, 8]"))), "another spec"),
    ]
    for spec, message in refused:
        with pytest.raises(ValueError, match=message):
            sweeps.run_sweep(spec, out, toy_job)
    assert {path.name: path.read_bytes() for path in out.rglob("*") if path.is_file()} == kept  # nothing touched
    assert len(calls(out)) == 2 and len(first) == 4


def test_resuming_the_same_sweep_keeps_its_runs_even_without_their_records(tmp_path):
    spec = sweeps.load_spec(write_spec(tmp_path))
    out = tmp_path / "out"
    first = sweeps.run_sweep(spec, out, toy_job)
    assert set(first["spec_hash"]) == {spec.hash}
    assert json.loads((out / "spec.json").read_text())["spec_hash"] == spec.hash
    for path in (out / "runs").glob("*.json"):  # as a committed folder: its tables without runs/
        path.unlink()
    commented = sweeps.load_spec(write_spec(tmp_path, "# a comment does not change the spec\n" + SPEC))
    again = sweeps.run_sweep(commented, out, toy_job)
    assert len(calls(out)) == 2  # nothing re-ran
    pd.testing.assert_frame_equal(first.sort_values("run_id").reset_index(drop=True),
                                  again.sort_values("run_id").reset_index(drop=True))
    pd.testing.assert_frame_equal(pd.read_parquet(out / "history.parquet").sort_values(["run_id", "step"])
                                  .reset_index(drop=True), sweeps.read_results(out)[1].sort_values(["run_id", "step"])
                                  .reset_index(drop=True))
    assert len(sweeps.read_results(out)[1]) == 12


@pytest.mark.parametrize("folder", sorted(str(p.relative_to(RESULTS)) for p in RESULTS.glob("*/*")))
def test_every_shipped_folder_has_an_identity_that_matches_its_spec_and_resumes(tmp_path, folder):
    source = RESULTS / folder
    identity = json.loads((source / "spec.json").read_text())
    spec = sweeps.load_spec(ROOT / identity["source"], identity["scale"])
    assert identity["experiment"] == spec.experiment and identity["spec_hash"] == spec.hash
    shutil.copytree(source, tmp_path / "out", ignore=shutil.ignore_patterns("runs", "checkpoints"))
    table = pd.read_parquet(source / "runs.parquet")
    asked = []

    def unfinished(experiment, runs, out):  # the runs the shipped tables lack: asked for, not trained here
        asked.extend(sweeps.run_id(r) for r in runs)
        return [{"error": "not run in this test"} for _ in runs]

    again = sweeps.run_sweep(spec, tmp_path / "out", unfinished, log=io.StringIO())
    assert set(asked) == {sweeps.run_id(s) for s in spec.runs} - set(table["run_id"])
    kept = again[again["status"] == "finished"].set_index("run_id")
    assert set(kept.index) == set(table["run_id"])
    shipped = table.set_index("run_id").loc[kept.index]
    for column in shipped.columns.drop("status"):  # every value, also a metric named like a setting (measure_inputs)
        same = (kept[column] == shipped[column]) | (kept[column].isna() & shipped[column].isna())
        assert same.all(), (column, kept.loc[~same, column].head(3).to_dict(), shipped.loc[~same, column].head(3).to_dict())


def test_read_results_and_bad_folder(tmp_path):
    spec = sweeps.load_spec(write_spec(tmp_path))
    sweeps.run_sweep(spec, tmp_path / "out", toy_job)
    runs, history, meta = sweeps.read_results(tmp_path / "out")
    assert len(runs) == 4 and len(history) == 12 and meta["experiment"] == "toy"
    with pytest.raises(ValueError, match="not a sweep folder"):
        sweeps.read_results(tmp_path)


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


def test_jobs_hold_at_most_batch_models_runs():
    runs = [{"n": n, "seed": s, "batch_models": 2} for n in (4, 6) for s in range(5)]
    split = sweeps.jobs(runs)
    assert sorted(len(j) for j in split) == [1, 1, 2, 2, 2, 2]
    assert sorted(r["seed"] for job in split for r in job if r["n"] == 4) == list(range(5))
    assert all(len({r["n"] for r in job}) == 1 for job in split)


def test_threads_of_an_in_process_sweep(tmp_path):
    import torch

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        sweeps.run_sweep(sweeps.load_spec(write_spec(tmp_path)), tmp_path / "out", toy_job, threads=1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_read_results_keeps_only_the_history_of_the_runs_table(tmp_path):
    """A sweep stopped between replacing history.parquet and runs.parquet: the tables still agree."""
    out = tmp_path / "out"
    spec = sweeps.load_spec(write_spec(tmp_path, SPEC.replace("n = [4, 6]", "n = [4, 6, 8]")))
    table = sweeps.run_sweep(spec, out, toy_job)
    assert len(pd.read_parquet(out / "history.parquet")) == 18
    table[table["n"] < 8].to_parquet(out / "runs.parquet")  # as if stopped before the last runs table was written
    runs, history, _ = sweeps.read_results(out)
    assert len(runs) == 4 and set(history["run_id"]) == set(runs["run_id"]) and len(history) == 12


def test_the_cli_needs_max_runs_above_the_cap(tmp_path, capsys):
    from sensviz.cli import main

    path = write_spec(tmp_path, "experiment = 'length_scaling'\n[grid]\ntask = ['parity']\nn = ["
                      + ", ".join(map(str, range(4, 104))) + "]\nseed = [" + ", ".join(map(str, range(101))) + "]\n")
    assert main(["sweep", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "10,100 runs, more than the cap of 10,000" in err and "--max-runs 10100" in err
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--max-runs", "10000"]) == 2
    assert "more than --max-runs 10,000" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing ran


ANALYSIS = SPEC + """
[scales.big.analysis.arms]
small = {n = 4}
large = {n = 6}
[scales.big.analysis.claims.C1]
statement = "value grows"
primary_arm = "small"
runs = {arch = "encoder"}
filter = "converged"
quantity = "value"
estimator = "mean"
error = "classical"
alpha = 0.05
power = 0.8
smallest_effect = 1.0
power_command = "echo"
secondaries = [{arm = "large"}, {error = "HC3"}, {covariate = "steps_since_converged"}]
"""


def test_a_pre_registered_analysis_is_checked_and_part_of_the_spec_hash(tmp_path):
    spec = sweeps.load_spec(write_spec(tmp_path, ANALYSIS), scale="big")
    assert spec.analysis["claims"]["C1"]["primary_arm"] == "small" and len(spec.runs) == 4
    assert "analysis" not in spec.runs[0]  # not a setting
    plain = sweeps.load_spec(write_spec(tmp_path), scale="big")
    assert plain.runs == spec.runs and plain.hash != spec.hash
    changed = sweeps.load_spec(write_spec(tmp_path, ANALYSIS.replace("alpha = 0.05", "alpha = 0.01")), scale="big")
    assert changed.hash != spec.hash


@pytest.mark.parametrize("old,new,message", [
    ('primary_arm = "small"', 'primary_arm = "medium"', "primary_arm must be one of small, large"),
    ('estimator = "mean"', 'estimator = "median"', "estimator must be one of ols_slope, mean"),
    ('error = "classical"', 'error = "HC9"', "error must be one of classical, HC3"),
    ("alpha = 0.05", "alpha = 5", "alpha must lie in (0, 1)"),
    ("smallest_effect = 1.0", "smallest_effect = 0", "smallest_effect must not be 0"),
    ('filter = "converged"', 'filter = "kept"', "filter must be one of converged, ever_converged"),
    ('{error = "HC3"}', '{error = "HC3", filter = "converged"}', "must change one of arm, filter, error, covariate"),
    ('power_command = "echo"\n', "", "missing ['power_command']"),
    ('estimator = "mean"', 'estimator = "ols_slope"', "missing ['x']"),
    ("large = {n = 6}", "large = {n = 4}", "is in 2 arms"),
    ("large = {n = 6}", "large = {n = 8}", "is in 0 arms"),
    ('runs = {arch = "encoder"}', 'runs = {arch = "decoder"}', "no run of arm 'small' matches"),
])
def test_bad_analyses_are_refused(tmp_path, old, new, message):
    assert old in ANALYSIS
    with pytest.raises(ValueError, match=re.escape(message)):
        sweeps.load_spec(write_spec(tmp_path, ANALYSIS.replace(old, new)), scale="big")


EQUIVALENCE = """
[equivalence.F1]
statement = "value stays flat"
runs = {arch = "encoder"}
filter = "converged"
quantity = "value"
x = "n"
margin = 0.5
units = "value per n"
reason = "a third of the comparison's growth"
"""


def test_equivalence_margins_are_checked_and_outside_the_spec_hash(tmp_path):
    spec = sweeps.load_spec(write_spec(tmp_path, ANALYSIS + EQUIVALENCE), scale="big")
    assert spec.equivalence["F1"]["margin"] == 0.5
    assert spec.hash == sweeps.load_spec(write_spec(tmp_path, ANALYSIS), scale="big").hash
    for old, new, message in [("margin = 0.5", "margin = -0.5", "margin must be positive"),
                              ('filter = "converged"', 'filter = "kept"', "filter must be one of"),
                              ('units = "value per n"\n', "", "missing ['units']"),
                              ('x = "n"', 'x = "n"\nx_scale = "log10"', 'x_scale must be "log2"'),
                              ('x = "n"', 'x = "n"\nside = 1', "unknown ['side']"),
                              ("margin = 0.5", 'margin = "small"', "margin must be a float")]:
        assert old in EQUIVALENCE
        with pytest.raises(ValueError, match=re.escape(message)):
            sweeps.load_spec(write_spec(tmp_path, ANALYSIS + EQUIVALENCE.replace(old, new)), scale="big")


@pytest.mark.parametrize("experiment", ["length_scaling", "dynamics"])
def test_the_shipped_decide_specs_keep_the_hash_their_sweeps_ran_under(experiment):
    held = json.loads((ROOT / "experiments" / "results" / "decide" / experiment / "spec.json").read_text())
    assert sweeps.load_spec(ROOT / "experiments" / f"{experiment}.toml", "decide").hash == held["spec_hash"]


def test_the_cli_refuses_another_experiments_folder_in_one_line(tmp_path, capsys):
    from sensviz.cli import main

    out = tmp_path / "dynamics"
    shutil.copytree(RESULTS / "quick" / "dynamics", out, ignore=shutil.ignore_patterns("runs", "checkpoints"))
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    assert main(["sweep", str(ROOT / "experiments" / "length_scaling.toml"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds results of the experiment 'dynamics', not 'length_scaling'" in err
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before  # the 6 runs are still there


# ----------------------------------------------------------------------------- killed sweeps


