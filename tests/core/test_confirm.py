"""The second pre-registered design (issue 37): Holm's step-down, the p values it reads, the sizing that wrote the
confirm scale's grid, its seeds (new), and its analysis applied before any row is in."""

import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sensviz import confirm, preregistered, stats, sweeps
from sensviz.claims import kept_by

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "experiments" / "length_scaling.toml"
PAD = ROOT / "experiments" / "scratchpad.toml"
TRADEOFF = ROOT / "experiments" / "tradeoff.toml"
DESIGNS = {SPEC: 1000, PAD: 3000, TRADEOFF: 4000}  # the confirm scales and their first seed
DECIDE = ROOT / "experiments" / "results" / "decide" / "length_scaling"


def test_holm_steps_down_and_stops_at_the_first_miss():
    # m = 4: sorted 0.001 <= 0.05/4, 0.012 <= 0.05/3, 0.03 > 0.05/2 stops: 0.04 (<= 0.05) is not rejected either
    found = stats.holm({"a": 0.001, "b": 0.03, "c": 0.04, "d": 0.012}, 0.05)
    assert {k: v[0] for k, v in found.items()} == {"a": True, "d": True, "b": False, "c": False}
    assert [found[k][1] for k in "adbc"] == pytest.approx([0.0125, 0.05 / 3, 0.025, 0.05])
    # where Holm rejects more than Bonferroni (alpha / 3 = 0.0167 for every test)
    assert all(v[0] for v in stats.holm({"x": 0.01, "y": 0.015, "z": 0.04}, 0.05).values())
    assert stats.holm({"x": 0.01, "y": math.nan}, 0.05) == {"x": (True, 0.025), "y": (False, 0.05)}
    # p values computed with NumPy: plain bools out (`sensviz decide` writes them as JSON; a NumPy bool failed it)
    found = stats.holm({"x": np.float64(0.001), "y": np.float64(0.9)}, 0.05)
    assert all(type(v[0]) is bool for v in found.values()) and json.dumps(found)


def test_p_values_agree_with_the_pre_registered_rule():
    rng = np.random.default_rng(0)
    x = np.repeat([4.0, 8.0, 11.0, 14.0], 6)
    for noise in (0.02, 0.05, 0.2):
        for slope in (-0.01, 0.0, 0.004, 0.02):
            iv = stats.slope(x, slope * x + rng.normal(0, noise, len(x)))
            for direction in (1, -1):
                assert (stats.p_value(iv, direction) < 0.05) == (stats.decide(iv, direction, 0.05) == stats.REPRODUCED)
            for margin in (0.005, 0.02):
                reproduced = stats.decide(iv, 0, 0.05, margin) == stats.REPRODUCED
                assert (stats.p_value(iv, 0, margin) < 0.05) == reproduced
    # by hand: estimate 1, se 0.5, t(10): two-sided p of t = 2
    iv = stats.Interval(1.0, 0, 2, "t", 12, "seeds", 1.0, 0.5, 10, 1, 2)
    assert stats.p_value(iv, 1) == pytest.approx(2 * (1 - stats.t_cdf(2.0, 10)))
    assert stats.p_value(iv, -1) == pytest.approx(1.0)  # capped: the wrong side
    assert stats.p_value(iv, 0, 2.0) == pytest.approx(1 - stats.t_cdf(2.0, 10))  # (2 - 1) / 0.5 nearer than (2 + 1) / 0.5


def test_power_with_grows_with_units_and_matches_the_sizing():
    iv = stats.slope(np.repeat([4.0, 8.0, 11.0, 14.0], 6), np.linspace(0, 1, 24) + np.tile([0, 0.1, -0.1], 8))
    k = iv.fewest_units(abs(iv.center) / 2, 1 - 0.01 / 2, 0.8)
    assert stats.power_with(iv, k, abs(iv.center) / 2, 1 - 0.01 / 2) >= 0.8 > \
        stats.power_with(iv, k - 1, abs(iv.center) / 2, 1 - 0.01 / 2)


def _seeds(spec: sweeps.SweepSpec) -> set:
    return {run["seed"] for run in spec.runs if "seed" in run}


@pytest.mark.parametrize("design", DESIGNS)
def test_the_confirm_seeds_are_new(design):
    mine = _seeds(sweeps.load_spec(design, "confirm"))
    assert mine
    for path in sorted((ROOT / "experiments").glob("*.toml")):
        data = sweeps.tomllib.loads(path.read_text())
        for scale in [None] + [name for name in data.get("scales", {}) if (path, name) != (design, "confirm")]:
            assert not mine & _seeds(sweeps.load_spec(path, scale, max_runs=100_000)), (path.name, scale)


@pytest.mark.parametrize("design", DESIGNS)
def test_the_confirm_grid_is_the_sizing_s_and_each_claim_is_powered(design):
    spec = sweeps.load_spec(design, "confirm")
    sizes = confirm.size(design, "confirm")
    arms = spec.analysis["arms"]
    planned = {}
    for run in spec.runs:
        arm = next(name for name, picks in arms.items() if all(run.get(k) == v for k, v in picks.items()))
        planned.setdefault((arm, run["task"], run["n"]), set()).add(run["seed"])
    expected = confirm.grid(sizes, list(arms))
    assert {cell: len(seeds) for cell, seeds in planned.items()} == expected
    assert all(seeds == set(range(DESIGNS[design], DESIGNS[design] + len(seeds))) for seeds in planned.values())
    for s in sizes:
        claim = spec.analysis["claims"][s.name]
        assert s.units is not None and s.power_at(s.units) >= claim["power"] > s.power_at(s.units - 1)
        assert s.level == pytest.approx(0.05 / len(sizes))
        half = float(f"{0.5 * s.interval.center:.3g}")
        if s.name == "S6":  # half its exploratory estimate is beyond its margin: sized for a flat blowup instead
            assert abs(half) > claim["margin"] and claim["smallest_effect"] == 0
        else:
            assert claim["smallest_effect"] == half  # written from the sizing


def test_the_sizing_reads_the_exploratory_tables_as_the_claim_says():
    sizes = {s.name: s for s in confirm.size(SPEC, "confirm")}
    runs = pd.read_parquet(DECIDE / "runs.parquet")
    relaxed = runs[runs["relax_steps"].notna() & runs["converged"] & (runs["stop_reason"] == "relaxed")]
    parity, first = relaxed[relaxed["task"] == "parity"], relaxed[relaxed["task"] == "first"]
    by_hand = stats.difference(stats.slope(parity["n"], parity["sharpness_proxy_pm1"]),
                               stats.slope(first["n"], first["sharpness_proxy_pm1"]))
    assert sizes["L6"].interval.estimate == pytest.approx(by_hand.estimate)
    assert sizes["L6"].interval.se == pytest.approx(by_hand.se)
    curved = stats.curvature(parity["n"], parity["sharpness_proxy_pm1"])
    assert sizes["L2"].interval.estimate == pytest.approx(curved.estimate)
    # L2's margin, written before any confirm row: a fifth of L1's decide-scale rise over n = 4..14, as a bend 100 c / 8
    decide = preregistered.decide(SPEC, "decide", DECIDE)
    l1 = next(c for c in decide.claims if c.name == "L1").primary.interval.estimate
    assert sizes["L2"].margin == pytest.approx(round(l1 * 10 / 5 / (100 / 8), 4))


def test_the_offset_difference_is_the_fidelity_page_s_t4():
    from sensviz import fidelity

    t4 = next(c for c in fidelity.collect(ROOT / "experiments" / "results", "standard")[1] if c.key == "T4")
    sized = confirm.size(TRADEOFF, "confirm")[0]
    assert sized.interval.estimate == pytest.approx(t4.interval.estimate) and sized.interval.se == pytest.approx(t4.interval.se)
    assert sized.interval.df == pytest.approx(t4.interval.df)


def test_the_confirm_analysis_decides_before_any_row(tmp_path):
    (tmp_path / "runs").mkdir()
    sweeps.write_tables(tmp_path)  # a sweep that has started and finished no run yet
    decision = preregistered.decide(SPEC, "confirm", tmp_path)
    assert decision.planned == len(sweeps.load_spec(SPEC, "confirm").runs) and decision.finished == 0
    assert [c.name for c in decision.claims] == ["L2", "L4", "L6", "L8", "L9", "R1"]
    assert all(c.holm == (False, c.holm[1]) and c.holm_verdict == stats.UNRESOLVED for c in decision.claims)
    text = preregistered.text(decision)
    assert "partial: 0 of" in text and "Holm" in text


def test_the_stop_rule_ends_a_sweep_once_its_cpu_hours_are_spent(tmp_path):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: sweep_jobs
    from sweep_jobs import busy_job, slow_job

    runs = [{"n": n, "seed": seed, "busy": 0.2} for n in (1, 2, 3) for seed in (0, 1)]
    analysis = {"arms": {"all": {}}, "claims": {}, "stop": {"cpu_hours": 0.3 / 3600, "rule": "stop at 0.3 s"}}
    spec = sweeps.SweepSpec("toy", runs, name="stop", scale="stop", analysis=analysis)
    log = io.StringIO()
    table = sweeps.run_sweep(spec, tmp_path, busy_job, log=log)
    # jobs of 2 seeds (0.4 s of CPU each): the first job's rows pass 0.3 CPU-seconds, so the others never start
    assert len(table) == 2 and sweeps.spent_hours(table) * 3600 >= 0.3 and (table["cpu_s"] >= 0.2).all()
    assert "stopped by its stop rule" in log.getvalue()
    again = sweeps.run_sweep(spec, tmp_path, busy_job, log=io.StringIO())  # resuming a spent sweep runs nothing
    assert len(again) == 2 and len((tmp_path / "calls.jsonl").read_text().splitlines()) == 1
    # waiting is not spending: a job that sleeps uses wall time, not CPU time
    sleepy = sweeps.SweepSpec("toy", [{**r, "busy": 0, "sleep": 0.2} for r in runs], name="stop", scale="stop",
                              analysis=analysis)
    assert len(sweeps.run_sweep(sleepy, tmp_path / "sleepy", slow_job, log=io.StringIO())) == 6


def test_a_sized_design_runs_its_ranked_claims_first():
    spec = sweeps.load_spec(SPEC, "confirm")
    key = confirm.order(SPEC, "confirm")
    pending = sorted(sweeps.jobs(spec.runs, ("seed", "task"), spec.analysis["paired"]), key=lambda j: min(map(key, j)))
    stages = [min(map(key, job))[0] for job in pending]
    assert stages == sorted(stages) and stages[0] == 0
    l2 = [job for job, stage in zip(pending, stages) if stage == 0]
    assert {run["task"] for job in l2 for run in job} == {"parity"}  # L2 (PARITY) goes first
    needed = next(s for s in confirm.size(SPEC, "confirm") if s.name == "L2").seeds  # pairs per (task, n)
    held = {(r["n"], r["seed"]) for job in l2 for r in job}
    assert all((n, seed) in held for (_, n), count in needed.items() for seed in range(1000, 1000 + count))
    assert sum(map(len, l2)) - 2 * sum(needed.values()) < 4 * len(needed)  # at most a job's rest per cell
    for job in pending:  # every job holds whole pairs (or base-arm runs alone)
        seeds = [run["seed"] for run in job]
        assert all(seeds.count(s) in (1, 2) for s in seeds)
    # seeds grow across every n together: a sweep stopped early has each claim's levels
    assert {run["n"] for job in pending[:4] for run in job} == {4, 8, 11, 14}


def test_the_design_page_shows_the_code_s_output(monkeypatch):
    monkeypatch.chdir(ROOT)
    page = (ROOT / "docs" / "confirm.md").read_text()

    def block(name):
        return page.split(f"<!-- confirm.{name} -->\n```\n")[1].split(f"\n```\n<!-- /confirm.{name} -->")[0]

    assert block("report") == confirm.report("experiments/length_scaling.toml", "confirm")
    assert block("scratchpad") == confirm.report("experiments/scratchpad.toml", "confirm")
    assert block("tradeoff") == confirm.report("experiments/tradeoff.toml", "confirm")


def test_the_state_beside_the_exploratory_verdicts(tmp_path):
    state = confirm.state(SPEC, "confirm", tmp_path / "no rows yet")
    planned = len(sweeps.load_spec(SPEC, "confirm").runs)
    assert list(state["claim"]) == ["L2", "L4", "L6", "L8", "L9", "R1"]
    assert set(state["rows in"]) == {f"0 of {planned}"} and set(state["after Holm"]) == {stats.UNRESOLVED}
    assert (state["power designed"] >= 0.8).all() and (state["power then"] < state["power designed"]).all()
    assert state["power now"].isna().all()


def test_the_state_counts_each_claim_s_cpu_hours(tmp_path):
    spec = sweeps.load_spec(SPEC, "confirm")
    parity = [s for s in spec.runs if s["task"] == "parity"][:3]
    first = [s for s in spec.runs if s["task"] == "first"][:1]
    rows = [{"run_id": sweeps.run_id(s), **s, "status": "finished", "converged": False, "stop_reason": "completed",
             "cpu_s": 1800.0, "wall_s": 9000.0, "spec_hash": spec.hash} for s in parity + first]
    pd.DataFrame(rows).to_parquet(tmp_path / "runs.parquet", index=False)
    state = confirm.state(SPEC, "confirm", tmp_path).set_index("claim")
    assert state.loc["L2", "CPU-hours"] == pytest.approx(1.5)  # three PARITY rows, CPU time (not wall time)
    assert state.loc["L6", "CPU-hours"] == pytest.approx(2.0) and state.loc["L4", "CPU-hours"] == pytest.approx(1.5)
    assert set(state["rows in"]) == {f"4 of {len(spec.runs)}"}


def test_the_relaxed_filter_on_the_fixed_arm_keeps_its_kept_runs(tmp_path):
    """`filter = "relaxed"` is written for the relax arm; a secondary that moves a claim to the fixed arm (whose
    runs never relax) keeps that arm's kept runs instead of none."""
    spec = sweeps.load_spec(SPEC, "confirm")
    parity = [s for s in spec.runs if s["task"] == "parity" and s["seed"] in (1000, 1001, 1002)]
    relaxes = lambda s: s.get("relax_steps") is not None  # noqa: E731
    rows = [{"run_id": sweeps.run_id(s), **s, "status": "finished", "converged": s["seed"] != 1002,
             "stop_reason": "relaxed" if relaxes(s) and s["seed"] == 1000 else "completed",
             "sharpness_proxy_pm1": 0.1 * s["n"] + 0.01 * s["seed"] % 3, "cpu_s": 1.0, "spec_hash": spec.hash}
            for s in parity]
    pd.DataFrame(rows).to_parquet(tmp_path / "runs.parquet", index=False)
    pd.DataFrame(columns=["run_id", "step"]).to_parquet(tmp_path / "history.parquet", index=False)
    frame = pd.DataFrame(rows)
    kept = frame[kept_by(frame, "relaxed")]
    assert set(zip(kept["seed"], kept["relax_steps"].notna())) == {(1000, True), (1000, False), (1001, False)}
    l2 = next(c for c in preregistered.decide(SPEC, "confirm", tmp_path).claims if c.name == "L2")
    fixed = next(s for s in l2.secondaries if s.label == "arm = fixed")
    assert l2.primary.kept == 4 and fixed.kept == 8  # relax arm: seed 1000 at 4 n; fixed arm: seeds 1000, 1001
