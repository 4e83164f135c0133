"""The experiments' job function: real (tiny) training runs through the sweep machinery."""

import json

import pandas as pd
import pytest
import torch
from helpers.core import TINY, sweep

import sensviz as sv
from sensviz import cube, experiment_jobs, experiments, sweeps
from sensviz.experiments import generalization
from sensviz.losses import targets
from sensviz.sharpness import sharpness_proxy


def test_a_two_run_sweep_end_to_end_and_its_measurements(tmp_path):
    runs = [{**TINY, "task": "parity", "seed": 0}, {**TINY, "task": "first", "seed": 1}]
    table, _ = sweep("length_scaling", runs, tmp_path)
    assert len(table) == 2 and set(table["status"]) == {"finished"}
    history = pd.read_parquet(tmp_path / "history.parquet")
    assert set(history["run_id"]) == set(table.index)
    assert sorted(history[history["run_id"] == table.index[0]]["step"]) == [0, 10, 20]
    for settings in runs:
        row = table.loc[sweeps.run_id(settings)]
        ck = sv.load_checkpoint(tmp_path / "checkpoints" / f"{row.name}.safetensors")
        assert ck.metadata["extra"]["sweep"] == {"experiment": "length_scaling", "settings": settings}
        assert ck.task.label == settings["task"] and ck.n == 4 and ck.model.config.d_model == 8
        assert row["param_norm"] == pytest.approx(ck.model.param_norm(), rel=1e-6)
        assert row["as_task"] == pytest.approx(4.0 if settings["task"] == "parity" else 1.0)
        assert row["bound_task"] == pytest.approx(row["as_task"] / 8)
        assert row["bound"] == pytest.approx(row["as_model_real"] / 8)
        # the proxy, recomputed from the saved weights with the same seed: the same number
        bits = cube.vertices(4)
        proxy = sharpness_proxy(ck.model, bits, targets(ck.task, bits, ck.encoding), eps=0.02, n_draws=4, seed=0)
        assert row["sharpness_proxy"] == pytest.approx(proxy.value, rel=1e-5)
        assert row["sharpness_proxy_pm1"] == pytest.approx(4 * proxy.value, rel=1e-5)
        assert row["sharpness_pm1"] == pytest.approx(4 * row["sharpness"])
        assert row["sharpness_rho"] == pytest.approx(0.02 * ck.model.n_params() ** 0.5)
        assert row["converged"] == (row["eval_loss"] < 1e-3)
        assert row["log_authors_blowup"] == pytest.approx(torch.tensor(row["authors_blowup"]).log().item())


def test_resume_skips_finished_runs(tmp_path):
    runs = [{**TINY, "task": "parity", "seed": s} for s in (0, 1)]
    first, _ = sweep("length_scaling", runs, tmp_path)
    records = {p.name: p.read_bytes() for p in (tmp_path / "runs").glob("*.json")}
    again, log = sweep("length_scaling", runs, tmp_path)
    assert "2 already finished, 0 to run" in log
    assert {p.name: p.read_bytes() for p in (tmp_path / "runs").glob("*.json")} == records
    pd.testing.assert_frame_equal(first.sort_index(), again.sort_index())


def test_an_invalid_run_fails_alone_even_inside_a_batch(tmp_path):
    runs = [{**TINY, "task": "parity", "lr": lr, "weight_decay": 0.1} for lr in (1e-3, -1.0, 2e-3)]
    runs.append({**TINY, "task": "first", "n_heads": 3})  # d_model 8 is not divisible by 3 heads
    table, log = sweep("tradeoff", runs, tmp_path)
    assert len(sweeps.jobs(runs, experiments.BATCH_FIELDS["tradeoff"])) == 2  # the lrs share one job
    failed = table[table["status"] == "failed"]
    assert sorted(failed["error"]) == ["ValueError: TrainConfig: lr must be above 0 (limit 'lr'), got -1",
                                       "ValueError: d_model=8 must be divisible by n_heads=3"]
    assert (table["status"] == "finished").sum() == 2 and "FAILED" in log
    record = json.loads((tmp_path / "runs" / f"{sweeps.run_id(runs[1])}.json").read_text())
    assert "Traceback" in record["traceback"]


def test_a_model_that_trained_with_others_but_cannot_be_measured_fails_alone(tmp_path, monkeypatch):
    measure_run = experiment_jobs.measure_run

    def broken_for_first(run, model, task, config):
        if task.label == "first":
            raise RuntimeError("measurement broke")
        return measure_run(run, model, task, config)

    monkeypatch.setattr(experiment_jobs, "measure_run", broken_for_first)
    runs = [{**TINY, "task": "parity"}, {**TINY, "task": "first"}]
    assert len(sweeps.jobs(runs, experiments.BATCH_FIELDS["length_scaling"])) == 1  # trained together
    table, _ = sweep("length_scaling", runs, tmp_path)
    by_task = table.set_index("task")
    assert by_task.loc["parity", "status"] == "finished"
    assert (by_task.loc["first", "status"], by_task.loc["first", "error"]) == ("failed", "RuntimeError: measurement broke")


def test_the_convergence_filter_on_pm1_targets_is_the_same_fit():
    assert experiments.converged_mse(sv.TrainConfig(n=4)) == 1e-3
    assert experiments.converged_mse(sv.TrainConfig(n=4, pm1_targets=True)) == pytest.approx(4e-3)


def test_batched_training_gives_the_runs_of_separate_jobs(tmp_path):
    runs = [{**TINY, "task": "majority", "seed": s} for s in (0, 1)]
    together = experiments.run_job("length_scaling", runs, str(tmp_path))
    apart = experiments.run_job("length_scaling", [{**r, "batch_models": 1} for r in runs], str(tmp_path))
    for a, b in zip(together, apart):
        for key in ("param_norm", "eval_loss", "sharpness_limit", "blowup_mean"):
            assert a["metrics"][key] == pytest.approx(b["metrics"][key], rel=1e-4)


def test_settings_are_checked_before_anything_runs():
    with pytest.raises(ValueError, match="unknown experiment"):
        experiments.check_spec("lenght_scaling", [TINY])
    with pytest.raises(ValueError, match=r"unknown settings \['weight_decy'\]"):
        experiments.check_spec("length_scaling", [{**TINY, "task": "parity", "weight_decy": 0.1}])
    with pytest.raises(ValueError, match=r"needs \['task'\]"):
        experiments.check_spec("length_scaling", [TINY])
    with pytest.raises(ValueError, match=r"needs \['train_size'\]"):
        experiments.check_spec("generalization", [TINY])
    experiments.check_spec("dynamics", [TINY])  # the task defaults to parity
    for bad, message in ((dict(proxy_draws=0), "proxy_draws must be at least 1"),
                         (dict(rho=-0.1), "rho must be above 0"),
                         (dict(proxy_eps=True), "proxy_eps must be a number"),
                         (dict(batch_models=1.5), "batch_models must be an integer"),
                         (dict(lr=float("nan")), "lr must be a finite number"),
                         (dict(n=10**6), "n must be at most 4,096")):
        with pytest.raises(ValueError, match=message):
            experiments.prepare("length_scaling", {**TINY, "task": "first", **bad})
    assert experiments.run_job("nonsense", [TINY], "unused")[0]["error"].startswith("ValueError: unknown experiment")


def test_completions_agree_with_the_data_and_are_seeded():
    task = sv.get_task("random:seed=3")
    train_set = torch.tensor([0, 5, 9, 200])
    tables = generalization.completions(task, 8, train_set, 6, seed=3)
    assert tables.shape == (6, 256) and set(tables.unique().tolist()) <= {0.0, 1.0}
    assert torch.equal(tables[:, train_set], task.values(8)[train_set].expand(6, -1))
    assert torch.equal(tables, generalization.completions(task, 8, train_set, 6, seed=3))
    assert not torch.equal(tables, generalization.completions(task, 8, train_set, 6, seed=2))
    assert abs(tables.mean().item() - 0.5) < 0.1
    # off the training set a completion agrees with the target only by chance (its own random stream)
    agreement = (tables == task.values(8)).float().mean(dim=1)
    assert agreement.max().item() < 0.7


def test_generalization_reads_the_learned_table_and_retrains(tmp_path, monkeypatch):
    sizes = []
    train_many = experiment_jobs.train_many
    monkeypatch.setattr(experiment_jobs, "train_many",
                        lambda models, *args: sizes.append(len(models)) or train_many(models, *args))
    runs = [{**TINY, "train_size": 6, "seed": s, "retrain_steps": 10, "completions": 5, "batch_models": 2} for s in (0, 1)]
    table, _ = sweep("generalization", runs, tmp_path)
    assert sizes == [2, 2, 2]  # the two fits, then four retrainings in batches of at most batch_models
    assert set(table["status"]) == {"finished"}
    history = pd.read_parquet(tmp_path / "history.parquet")
    assert set(history["phase"]) == {"fit", "retrain_learned", "retrain_completion"}
    for settings in runs:
        row = table.loc[sweeps.run_id(settings)]
        ck = sv.load_checkpoint(tmp_path / "checkpoints" / f"{row.name}.safetensors")
        learned = ck.encoding.decide(sv.analysis.cube_outputs(ck.model, 4))
        assert row["as_learned"] == pytest.approx(cube.analyze(2.0 * learned.double() - 1).avg_sensitivity)
        assert row["as_target"] == pytest.approx(
            cube.analyze(sv.get_task(f"random:seed={settings['seed']}").values_pm1(4)).avg_sensitivity)
        again = sv.load_checkpoint(tmp_path / "checkpoints" / f"{row.name}-learned.safetensors")
        assert again.task.label == "table:" + "".join(str(int(v)) for v in learned.tolist())
        other = sv.load_checkpoint(tmp_path / "checkpoints" / f"{row.name}-completion.safetensors")
        assert row["as_completion_retrained"] == pytest.approx(
            cube.analyze(other.task.values_pm1(4)).avg_sensitivity)
        assert row["as_completion_min"] <= row["as_completion_mean"]
        for kind in ("learned", "completion"):
            assert row[f"{kind}_sharpness_proxy_pm1"] == pytest.approx(4 * row[f"{kind}_sharpness_proxy"])


def test_the_relax_arm_records_when_the_filter_was_met_and_relaxes_that_long(tmp_path):
    relax = {**TINY, "task": "first", "steps": 3000, "batch_size": 64, "lr": 3e-3, "target_accuracy": 1.0,
             "target_loss": 1e-3, "relax_steps": 30}
    fixed = {**TINY, "task": "first", "steps": 400, "batch_size": 64, "lr": 3e-3}
    table, _ = sweep("length_scaling", [relax, fixed], tmp_path)
    row = table.loc[sweeps.run_id(relax)]
    assert row["stop_reason"] == "relaxed" and row["steps_since_converged"] == 30
    assert row["steps_trained"] == row["converged_step"] + 30 < 3000
    row = table.loc[sweeps.run_id(fixed)]  # no targets: the first evaluation that met the filter, from the history
    history = pd.read_parquet(tmp_path / "history.parquet")
    met = history[(history["run_id"] == row.name) & (history["eval_loss"] < 1e-3) & (history["eval_accuracy"] >= 1)]
    assert row["converged_step"] == met["step"].min() and row["steps_since_converged"] == 400 - met["step"].min()


def test_dynamics_measures_every_k_steps_with_the_same_draws(tmp_path):
    runs = [{**TINY, "measure_every": 5, "weight_decay": wd} for wd in (0.0, 0.3)]
    table, _ = sweep("dynamics", runs, tmp_path)
    history = pd.read_parquet(tmp_path / "history.parquet")
    for run_id in table.index:
        rows = history[history["run_id"] == run_id].sort_values("step")
        assert rows["step"].tolist() == [0, 5, 10, 15, 20]
        assert rows["sharpness_proxy_pm1"].tolist() == pytest.approx((4 * rows["sharpness_proxy"]).tolist())
        assert table.loc[run_id, "peak_sharpness_proxy_pm1"] == pytest.approx(rows["sharpness_proxy_pm1"].max())
    # the same seed and steps with and without weight decay start from the same measurement
    first = history.sort_values("step").groupby("run_id").first()
    assert first["sharpness_proxy"].nunique() == 1 and first["param_norm"].nunique() == 1


def test_scratchpad_runs_use_the_autoregressive_filter(tmp_path):
    runs = [{**TINY, "arch": arch, "batch_size": 32} for arch in ("scratchpad", "encoder")]
    table, _ = sweep("scratchpad", runs, tmp_path)
    pad = table.loc[sweeps.run_id(runs[0])]
    assert 0 <= pad["autoregressive_accuracy"] <= 1
    assert pad["converged"] == (pad["autoregressive_accuracy"] > 0.999)
    assert pd.isna(table.loc[sweeps.run_id(runs[1]), "autoregressive_accuracy"])


def test_designs_are_the_fewest_seeds_that_reach_the_power():
    from sensviz import stats

    assert stats.mean_design(1.0, 1.0)["kept"] == 10  # sqrt(10) >= t_0.975(9) + t_0.8(9) = 3.145 > 3 = sqrt(9)
    assert stats.mean_design(1.0, -1.0, keep_rate=0.5)["seeds"] == 20
    design = stats.slope_design([4, 8, 11, 14], [1.0, 1.0, 1.0, 0.5], sd=0.13, effect=0.015)
    k, spread = design["kept_per_level"], sum((x - 9.25) ** 2 for x in (4, 8, 11, 14))

    def reaches(k):
        df = 4 * k - 2
        return 0.015 / (0.13 / (k * spread) ** 0.5) >= stats.t_quantile(0.975, df) + stats.t_quantile(0.8, df)

    assert reaches(k) and not reaches(k - 1)
    assert design["seeds"] == {4.0: k, 8.0: k, 11.0: k, 14.0: 2 * k}


@pytest.mark.parametrize("spec", ["length_scaling", "dynamics"])
def test_the_decide_scales_quote_what_their_power_command_prints(spec, monkeypatch):
    from pathlib import Path

    from sensviz import fidelity

    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # the command runs in the repository
    path = Path("experiments") / f"{spec}.toml"
    quoted = [line.removeprefix("#   > ") for line in path.read_text().splitlines() if line.startswith("#   > ")]
    printed = fidelity.design_report(str(path), "decide")
    assert quoted == printed.splitlines()
    found = sweeps.load_spec(path, "decide")
    needed = fidelity.design_power(path, "decide", path.parent / "results" / "standard")
    for claim in needed.values():  # the spec has at least the seeds the power computation asks for
        for level, seeds in (claim["seeds"].items() if isinstance(claim["seeds"], dict) else [(None, claim["seeds"])]):
            for arm in found.analysis["arms"].values():
                runs = [r for r in found.runs if all(r.get(k) == v for k, v in arm.items())
                        and r.get("task", "parity") == "parity" and (level is None or r["n"] == level)]
                assert len(runs) >= seeds
    others = [sweeps.load_spec(path, scale) for scale in (None, "standard", "paper")]
    assert not {r["seed"] for r in found.runs} & {r["seed"] for s in others for r in s.runs}  # disjoint seeds
