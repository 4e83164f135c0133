"""The arms of one seed are paired: one job trains them as members of one run, so their numbers are the same,
bit for bit, until the relax arm's rule stops it; "kept" and "relaxed" have one definition."""

import io

import pandas as pd
import pytest

from sensviz import experiments, sweeps
from sensviz.training import TrainConfig, train_many

ARMS = {"fixed": {"steps": 240}, "relax": {"steps": 400, "target_accuracy": 1.0, "target_loss": 1e-3, "relax_steps": 40}}
PAIRED = ["steps", "target_accuracy", "target_loss", "relax_steps"]
BASE = {"task": "parity", "n": 4, "d_model": 16, "batch_size": 128, "lr": 3e-3, "eval_interval": 10,
        "measure_inputs": 16, "proxy_draws": 2, "directions": 2, "batch_models": 4}


def paired_spec(seeds) -> sweeps.SweepSpec:
    runs = [{**BASE, **arm, "seed": seed} for seed in seeds for arm in ARMS.values()]
    analysis = {"arms": {"fixed": {"steps": 240}, "relax": {"relax_steps": 40}}, "paired": PAIRED, "claims": {}}
    return sweeps.SweepSpec("length_scaling", runs, name="pairing", scale="pairing", analysis=analysis)


def test_a_job_never_splits_the_arms_of_one_seed():
    spec = paired_spec([0, 1, 2])
    shuffled = spec.runs[::2] + spec.runs[1::2]  # every fixed run first, as a grid lists them
    found = sweeps.jobs(shuffled, ("seed", "task"), PAIRED)
    assert [[(r["seed"], "relax_steps" in r) for r in job] for job in found] == \
        [[(0, False), (0, True), (1, False), (1, True)], [(2, False), (2, True)]]
    # without `paired` the same runs are two jobs of different arms (how the decide scale ran them)
    apart = sweeps.jobs(shuffled, ("seed", "task") + tuple(PAIRED))
    assert [[("relax_steps" in r) for r in job] for job in apart] == [[False, False, False, True], [True, True]]


def test_both_arms_of_a_seed_are_bit_identical_until_the_relax_arm_stops(tmp_path):
    spec = paired_spec([0, 1])
    table = sweeps.run_sweep(spec, tmp_path, experiments.run_job, batch=("seed", "task"), log=io.StringIO())
    history = pd.read_parquet(tmp_path / "history.parquet")
    rows = table.set_index(["seed", table["relax_steps"].notna()])
    assert set(table["status"]) == {"finished"}
    for seed in (0, 1):
        fixed, relax = rows.loc[(seed, False)], rows.loc[(seed, True)]
        assert relax["stop_reason"] == "relaxed" and relax["relaxed"] and not fixed["relaxed"]
        stop = relax["converged_step"] + 40
        assert relax["steps_trained"] == stop < 240  # the rule fired inside the fixed arm's budget
        a = history[history["run_id"] == fixed["run_id"]].set_index("step")
        b = history[history["run_id"] == relax["run_id"]].set_index("step")
        shared = [step for step in a.index if step <= stop]
        assert shared == list(b.index) and stop in shared
        columns = ["train_loss", "eval_loss", "eval_accuracy", "param_norm"]
        assert a.loc[shared, columns].equals(b.loc[shared, columns])  # exact: no tolerance
        assert fixed["converged_step"] == relax["converged_step"]  # one filter, met at the same evaluation
        assert fixed["device"] == relax["device"] and fixed["device"].startswith("cpu (")
        assert a.loc[240, "param_norm"] != b.loc[stop, "param_norm"]  # the fixed arm went on training


def test_kept_and_the_relax_trigger_are_one_filter():
    config = TrainConfig(n=4, **experiments.FILTER_TARGETS)
    from sensviz.training import _targets_reached
    for loss, accuracy in [(9.99e-4, 1.0), (1e-3, 1.0), (5e-4, 0.9998), (2e-3, 1.0)]:
        record = {"eval_loss": loss, "eval_accuracy": accuracy}
        assert experiments.meets_filter(record, config) == _targets_reached(config, record)
    assert experiments.meets_filter({"eval_loss": 9.99e-4, "eval_accuracy": 1.0}, config)
    assert not experiments.meets_filter({"eval_loss": 1e-3, "eval_accuracy": 1.0}, config)  # strictly below


def test_members_may_stop_by_their_own_steps():
    from sensviz.models import ModelSettings
    models = [ModelSettings(d_model=8).build(4, seed=0) for _ in range(2)]
    configs = [TrainConfig(n=4, batch_size=32, steps=steps, eval_interval=5, lr=1e-3) for steps in (10, 20)]
    short, long = train_many(models, "first", configs)
    assert (short.steps, long.steps) == (10, 20)
    assert [r["step"] for r in short.history] == [0, 5, 10] and [r["step"] for r in long.history] == [0, 5, 10, 15, 20]
    assert short.history == long.history[:3]
    with pytest.raises(ValueError, match="differ only in"):
        train_many(models, "first", [configs[0], TrainConfig(n=4, batch_size=64, steps=10)])


PAIRED_SPEC = """
experiment = "length_scaling"
[defaults]
d_model = 8
[scales.t]
[[scales.t.grid]]
steps = [100]
task = ["parity"]
n = [4, 8, 12]
seed = [0, 1, 2, 3]
[[scales.t.grid]]
steps = [200]
target_accuracy = [1.0]
target_loss = [0.001]
relax_steps = [10]
task = ["parity"]
n = [4, 8, 12]
seed = [0, 1, 2, 3]
[scales.t.analysis]
paired = ["steps", "target_accuracy", "target_loss", "relax_steps"]
[scales.t.analysis.arms]
fixed = {steps = 100}
relax = {relax_steps = 10}
[scales.t.analysis.claims.C]
statement = "the quantity grows with n"
primary_arm = "relax"
runs = {task = "parity"}
filter = "converged"
quantity = "sharpness_proxy_pm1"
x = "n"
estimator = "ols_slope"
error = "classical"
alpha = 0.05
power = 0.8
smallest_effect = 0.01
power_command = "-"
secondaries = [{arm = "fixed"}]
"""


def test_claims_that_compare_arms_get_the_paired_difference(tmp_path):
    from sensviz import preregistered

    path = tmp_path / "spec.toml"
    path.write_text(PAIRED_SPEC)
    spec = sweeps.load_spec(path, "t")
    rows = []
    for settings in spec.runs:
        relax, seed, n = "relax_steps" in settings, settings["seed"], settings["n"]
        base = 0.02 * n + 0.05 * seed  # the seed's own level: shared by its two arms
        value = base + (0.1 * n + 0.003 * (-1) ** seed if relax else 0.0)
        kept = not (seed == 3 and n == 12 and relax)  # one pair broken: kept in one arm only
        rows.append({"run_id": sweeps.run_id(settings), **settings, "status": "finished", "converged": kept,
                     "stop_reason": "relaxed" if relax else "completed", "sharpness_proxy_pm1": value,
                     "spec_hash": spec.hash, "wall_s": 1.0})
    folder = tmp_path / "tables"
    folder.mkdir()
    pd.DataFrame(rows).to_parquet(folder / "runs.parquet", index=False)
    claim = preregistered.decide(path, "t", folder).claims[0]
    paired = next(test for test in claim.beside if test.label.startswith("paired arms, relax − fixed"))
    assert paired.kept == 11  # 12 seeds × levels kept in both arms, less the broken pair
    assert paired.interval.estimate == pytest.approx(0.1, abs=1e-3) and paired.verdict == "differs"
    # unpaired, the same difference carries each seed's own level as noise: a wider interval
    unpaired = next(test for test in claim.secondaries if test.label == "arm = fixed")
    assert paired.interval.se < claim.primary.interval.se and unpaired.interval is not None


def test_the_committed_confirm_rows_are_paired():
    """Every seed of the confirm sweep's committed rows with both arms in: the same numbers at every evaluation
    up to the earlier stop, on one device, and the relax arm stopped 2,000 steps after its filter was met (or at
    its cap of 8,000 steps)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "experiments" / "pairing_evidence.py"
    spec = importlib.util.spec_from_file_location("pairing_evidence", path)
    evidence = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(evidence)
    if not (evidence.CONFIRM / "runs.parquet").is_file():
        pytest.fail(f"no committed confirm rows at {evidence.CONFIRM}")
    found = evidence.paired_rows(evidence.CONFIRM)
    assert len(found) >= 1 and (found["differ"] == 0).all() and found["same_device"].all()
    assert (found["shared"] >= 2).all()
    same = found["converged_fixed"].eq(found["converged_relax"]) | (found["converged_relax"] > 6000) \
        | found["converged_relax"].isna()
    assert same.all()  # one filter, met at the same evaluation while both arms trained
    relaxed = found.dropna(subset=["converged_relax"])
    assert ((relaxed["relax_stop"] == relaxed["converged_relax"] + 2000) | (relaxed["relax_stop"] == 8000)).all()
