"""The pre-registered analysis applied to small made-up sweep folders (partial, with dropped runs and rows
of another spec), checked against numpy fits over the runs each test should use; the per-run differences
against the fidelity page's own; the shipped decide specs through the CLI."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sensviz import claims, preregistered, results, stats, sweeps

ROOT = Path(__file__).resolve().parents[2]

SLOPE_SPEC = """
experiment = "length_scaling"
[defaults]
steps = 10
[grid]
task = ["parity"]
n = [4, 8, 12]
seed = [0, 1, 2, 3]
[scales.decide]
[[scales.decide.grid]]
steps = [10]
task = ["parity", "first"]
n = [4, 8, 12]
seed = [0, 1, 2, 3]
[[scales.decide.grid]]
steps = [20]
relax_steps = [5]
task = ["parity", "first"]
n = [4, 8, 12]
seed = [0, 1, 2, 3]
[scales.decide.analysis.arms]
fixed = {steps = 10}
relax = {relax_steps = 5}
[scales.decide.analysis.claims.L1]
statement = "grows"
primary_arm = "relax"
runs = {task = "parity"}
filter = "converged"
quantity = "sharpness_proxy_pm1"
x = "n"
estimator = "ols_slope"
error = "classical"
alpha = 0.05
power = 0.8
smallest_effect = 0.015
power_command = "echo"
secondaries = [{arm = "fixed"}, {covariate = "steps_since_converged"}, {filter = "accuracy_0.99"}, {error = "HC3"}]
[equivalence.L5]
statement = "FIRST stays flat"
runs = {task = "first"}
filter = "converged"
quantity = "sharpness_proxy_pm1"
x = "n"
margin = 0.01
units = "per n"
reason = "a third of 0.03"
"""


def _folder(tmp_path, spec_text, rows, history=None, name="length_scaling"):
    spec_path = tmp_path / f"{name}.toml"
    spec_path.write_text(spec_text)
    spec = sweeps.load_spec(spec_path, "decide")
    out = tmp_path / "tables"
    out.mkdir()
    pd.DataFrame(rows).to_parquet(out / "runs.parquet", index=False)
    (history if history is not None else pd.DataFrame({"run_id": [], "step": []})).to_parquet(
        out / "history.parquet", index=False)
    (out / "spec.json").write_text(json.dumps({"experiment": spec.experiment, "scale": "decide", "spec_hash": spec.hash}))
    return spec_path, spec, out


def _slope_rows(spec):
    rng = np.random.default_rng(0)
    rows = []
    for settings in spec.runs:
        if settings["seed"] == 3:
            continue  # not in yet
        n, relax = settings["n"], settings.get("relax_steps") is not None
        rise = (0.02 if relax else 0.01) if settings["task"] == "parity" else 0.0
        rows.append({"run_id": sweeps.run_id(settings), **settings, "status": "finished",
                     "converged": not (n == 12 and settings["seed"] == 2), "eval_accuracy": 1.0 - 0.02 * (n == 12),
                     "converged_step": 100.0 * n, "steps_since_converged": 1000.0 - 50 * n + rng.normal(0, 20),
                     "sharpness_proxy_pm1": 0.05 + rise * n + rng.normal(0, 0.01), "pm1_scale": 4.0,
                     "spec_hash": spec.hash})
    rows[0] = {**rows[0], "status": "failed", "sharpness_proxy_pm1": None}
    stranger = {**rows[1], "run_id": "aaaaaaaaaaaa", "spec_hash": "0" * 64}  # another spec's row: left out
    return rows + [stranger]


def test_a_partial_slope_design_is_decided_as_written(tmp_path):
    spec_path, spec, out = _folder(tmp_path, SLOPE_SPEC, [])
    rows = _slope_rows(spec)
    pd.DataFrame(rows).to_parquet(out / "runs.parquet", index=False)
    d = preregistered.decide(spec_path, "decide", out, standard=None)
    assert (d.planned, d.in_table, d.finished, d.other_spec_rows, d.complete) == (48, 36, 35, 1, False)
    frame = pd.DataFrame(rows[:-1])
    fine = frame[(frame["status"] == "finished") & frame["converged"]]

    def fit(arm_rows):
        slope, intercept = np.polyfit(arm_rows["n"], arm_rows["sharpness_proxy_pm1"], 1)
        return slope

    (claim,) = d.claims
    relax = fine[(fine["task"] == "parity") & fine["relax_steps"].notna()]
    fixed = fine[(fine["task"] == "parity") & fine["relax_steps"].isna()]
    assert claim.primary.kept == len(relax) == 8 and claim.primary.interval.estimate == pytest.approx(fit(relax))
    assert claim.primary.verdict == stats.REPRODUCED and claim.direction == 1
    by = {s.label: s for s in claim.secondaries}
    assert by["arm = fixed"].interval.estimate == pytest.approx(fit(fixed)) and by["arm = fixed"].kept == len(fixed)
    accurate = frame[(frame["status"] == "finished") & (frame["task"] == "parity") & frame["relax_steps"].notna()
                     & (frame["eval_accuracy"] >= 0.99)]
    assert by["filter = accuracy_0.99"].kept == len(accurate) == 6  # n = 12 drops out: n = 4 and 8 left
    assert by["filter = accuracy_0.99"].interval.estimate == pytest.approx(fit(accurate))
    design = np.column_stack([np.ones(len(relax)), relax["n"], relax["steps_since_converged"]])
    coef = np.linalg.lstsq(design, relax["sharpness_proxy_pm1"].to_numpy(), rcond=None)[0]
    assert by["covariate = steps_since_converged"].interval.estimate == pytest.approx(coef[1])
    assert by["error = HC3"].interval.test.startswith("OLS slope, HC3")
    for s in claim.secondaries:
        if s.interval is not None:
            assert s.fragile == (s.verdict != claim.primary.verdict)
    cells = {c.level: c for c in claim.cells}
    assert [(c.planned, c.in_table, c.finished, c.kept) for c in cells.values()] == [(4, 3, 3, 3), (4, 3, 3, 3),
                                                                                       (4, 3, 3, 2)]
    assert cells["8"].converged_steps == [800, 800, 800]
    assert claim.power_design is None and "no standard tables" in claim.power_basis

    flat = {c.name: c for c in d.flat}
    assert set(flat) == {"L5 (fixed)", "L5 (relax)"}
    first = flat["L5 (relax)"]
    expected = stats.slope(*(fine[(fine["task"] == "first") & fine["relax_steps"].notna()][c]
                             for c in ("n", "sharpness_proxy_pm1")))
    assert first.primary.interval.estimate == pytest.approx(expected.estimate)
    low, high = expected.bounds(0.9)
    assert first.primary.bounds == pytest.approx((low, high))  # a flat claim shows the interval that decides it
    assert first.equivalent_within == pytest.approx(max(abs(low), abs(high)))
    assert first.primary.verdict == stats.equivalence(expected, 0.01)
    assert first.primary.verdict == (stats.REPRODUCED if first.equivalent_within < 0.01 else stats.UNRESOLVED)
    assert "partial: 35 of 48" in preregistered.text(d)
    json.dumps(preregistered.to_dict(d))  # plain data
    pd.DataFrame().to_parquet(out / "runs.parquet")  # a sweep that has not finished a run yet
    empty = preregistered.decide(spec_path, "decide", out)
    assert (empty.finished, empty.claims[0].primary.kept, empty.claims[0].cells[0].planned) == (0, 0, 4)


MEAN_SPEC = """
experiment = "dynamics"
[defaults]
steps = 8
[grid]
seed = [0]
[scales.decide]
[scales.decide.grid]
weight_decay = [0.3]
seed = [0, 1, 2, 3, 4]
[scales.decide.analysis.arms]
decay = {weight_decay = 0.3}
[scales.decide.analysis.claims.D3]
statement = "shrinks"
primary_arm = "decay"
runs = {weight_decay = 0.3}
filter = "ever_converged"
quantity = "param_norm@end - param_norm@converged"
estimator = "mean"
error = "classical"
alpha = 0.05
power = 0.8
smallest_effect = -2.0
power_command = "echo"
secondaries = [{filter = "converged"}]
"""


def test_a_mean_design_uses_the_first_step_below_each_alignment(tmp_path):
    spec_path, spec, out = _folder(tmp_path, MEAN_SPEC, [], name="dynamics")
    rows, history = [], []
    losses = [0.2, 0.005, 0.0005, 0.0002]  # below 0.01 at step 1, below 0.001 at step 2
    for settings in spec.runs:
        seed, rid = settings["seed"], sweeps.run_id(settings)
        rows.append({"run_id": rid, **settings, "status": "finished", "converged": seed < 3,
                     "converged_step": None if seed == 4 else 2.0, "pm1_scale": 4.0, "spec_hash": spec.hash})
        for step, loss in enumerate(losses):
            history.append({"run_id": rid, "step": step, "loss": loss if seed != 4 else 0.3,
                            "param_norm": 10.0 + step - 3 * step * (step >= 2) - seed * (step == 3)})
    pd.DataFrame(rows).to_parquet(out / "runs.parquet", index=False)
    pd.DataFrame(history).to_parquet(out / "history.parquet", index=False)
    (claim,) = preregistered.decide(spec_path, "decide", out).claims
    # param_norm by step: 10, 11, 6, 4 - seed; ours aligns at step 2 (6): end - converged = -2 - seed
    values = [-2.0 - seed for seed in range(4)]
    assert claim.primary.kept == 4 and claim.primary.interval.estimate == pytest.approx(np.mean(values))
    assert claim.primary.interval.se == pytest.approx(np.std(values, ddof=1) / 2)
    (converged,) = claim.secondaries
    assert converged.kept == 3 and converged.interval.estimate == pytest.approx(np.mean(values[:3]))
    (authors,) = claim.beside  # aligned at step 1 (11): end - converged = -7 - seed
    assert authors.interval.estimate == pytest.approx(np.mean([-7.0 - seed for seed in range(4)]))
    assert authors.verdict == stats.REPRODUCED and claim.direction == -1
    assert [(c.planned, c.kept, c.converged_steps) for c in claim.cells] == [(5, 4, [2, 2, 2, 2])]


def test_per_run_differences_agree_with_the_fidelity_page():
    t = results.load(ROOT / "experiments" / "results" / "standard", "dynamics")
    kept = t.kept()
    for quantity in ("sharpness_proxy_pm1@converged - sharpness_proxy_pm1@start", "param_norm@end - param_norm@converged"):
        ours = preregistered.per_run(t.history, kept["run_id"], quantity, claims.threshold(t.runs))
        theirs = claims.phase_difference(t, kept, quantity)
        assert len(ours) == len(theirs) >= 5
        assert sorted(ours.to_numpy()) == pytest.approx(sorted(theirs.to_numpy()), rel=1e-12)
    with pytest.raises(ValueError, match="COLUMN@WHEN"):
        preregistered.per_run(t.history, kept["run_id"], "param_norm@peak - param_norm@start", 0.001)


