"""The fidelity page: generated from the shipped tables (the committed page must be the generated one),
and its claims, radii and verdicts on small fixed tables whose intervals are known by hand."""

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from sensviz import claims, cli, fidelity, findings, preregistered, stats

ROOT = Path(__file__).resolve().parents[2]
RHO = 2.0  # rho_proxy of the fixed tables


@pytest.mark.xdist_group("findings")  # the shipped findings, computed once with test_findings
def test_the_committed_pages_are_the_pages_the_tables_give():
    results = ROOT / "experiments" / "results"
    present = fidelity.scales(results)
    pages = {p.name: p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("fidelity*.md")}
    assert sorted(pages) == sorted(Path(fidelity.page_path(s, present)).name for s in present)  # one page per scale
    for name, page in pages.items():
        scale = fidelity.scale_of(page)
        assert scale in present and fidelity.page_path(scale, present) == f"docs/{name}"
        assert fidelity.render(results, scale) == page, (
            f"docs/{name} is not what the {scale} tables give: run "
            f"`sensviz fidelity experiments/results --out docs/{name} --scale {scale}`")


def length_runs(radii: bool) -> pd.DataFrame:
    """PARITY: proxy 0.02 n plus -0.01, 0, +0.01 by seed; FIRST: 0.05 plus the same; 3 seeds at n = 4..10.
    With `radii`, L_rho at 0.01, 0.1 and 1 rho_proxy: limit rho^2 (1 + c f) with c = 1 for PARITY, 0 for FIRST."""
    rows = []
    for task in ("parity", "first"):
        for n in (4, 6, 8, 10):
            for seed, noise in enumerate((-0.01, 0.0, 0.01)):
                limit = (0.004 * n if task == "parity" else 0.008) + noise / 10
                row = {"run_id": f"{task}{n}{seed}", "task": task, "n": n, "seed": seed, "status": "finished",
                       "converged": True, "eval_loss": 1e-5, "arch": "encoder", "pm1_scale": 4.0,
                       "sharpness_proxy_pm1": (0.02 * n if task == "parity" else 0.05) + noise,
                       "sharpness_limit_pm1": limit, "sharpness_pm1": limit * RHO**2 * (2 if task == "parity" else 1),
                       "sharpness_rho": RHO, "proxy_rho": RHO, "proxy_eps": 0.02, "n_params": 10_000,
                       "log_authors_blowup": 1.0 + (0.1 * n if task == "parity" else 0) + noise,
                       "param_norm": 14.0 + noise, "bound": 0.5 if task == "parity" else 1 / (2 * n)}
                if radii:
                    for token, f in (("0.01", 0.01), ("0.1", 0.1), ("1", 1.0)):
                        rho = f * RHO
                        row[f"sharpness_rho_x{token}"] = rho
                        row[f"sharpness_pm1_x{token}"] = limit * rho**2 * (1 + (f if task == "parity" else 0))
                        row[f"sharpness_pm1_x{token}_stderr"] = 0.1 * row[f"sharpness_pm1_x{token}"]
                rows.append(row)
    return pd.DataFrame(rows)


def results(tmp_path: Path, scale: str, runs: pd.DataFrame, experiment: str = "length_scaling") -> Path:
    folder = tmp_path / "results" / scale / experiment
    folder.mkdir(parents=True)
    runs.to_parquet(folder / "runs.parquet")
    (folder / "spec.json").write_text(json.dumps({"experiment": experiment, "source": "nowhere.toml"}))
    return tmp_path / "results"


def claims_of(folder, scale=None) -> dict:
    return {c.key: c for c in fidelity.build(folder, scale)[1]}


def test_length_scaling_claims_with_intervals_known_by_hand(tmp_path):
    folder = results(tmp_path, "quick", length_runs(radii=False))
    claims = claims_of(folder)
    slope = claims["L1"]
    # noise -e, 0, e at every n is orthogonal to n: slope 0.02 exactly; SSE = 4 * 2 e^2 on 10 df, Sxx = 3 * 20
    se = math.sqrt(4 * 2 * 0.01**2 / 10 / 60)
    assert slope.interval.estimate == pytest.approx(0.02) and slope.interval.se == pytest.approx(se)
    assert slope.interval.low == pytest.approx(0.02 - 2.22813885 * se) and slope.verdict == stats.REPRODUCED
    assert claims["L2"].interval.estimate == pytest.approx(0, abs=1e-12)  # a straight line: no curvature
    assert claims["L2"].verdict == stats.UNRESOLVED and claims["L2"].needed().startswith("no margin")
    # FIRST's claims keep FIRST's keys (L5, L6) with MAJORITY absent: the same key at every scale
    assert claims["L5"].statement == "FIRST's sharpness stays flat" and claims["L5"].verdict == stats.UNRESOLVED
    assert claims["L6"].verdict == stats.REPRODUCED and not {"L3", "L4", "L7", "L8"} & set(claims)  # PARITY - FIRST
    assert str(claims["L1"].survivors) == "n = 4: 3/3, n = 6: 3/3, n = 8: 3/3, n = 10: 3/3"  # no history: no convergence steps
    assert claims["L1"].survivors.weakest == ""  # the filter dropped none
    page = fidelity.render(folder)
    assert "| L1 | PARITY's sharpness grows with n |" in page and "0.0200 [0.0174, 0.0226]" in page
    assert "No tables at this scale for: tradeoff, dynamics, scratchpad, generalization." in page
    assert "These tables measure L_ρ at ρ_proxy and its limit only" in page
    assert page.splitlines()[0] == fidelity.MARKER.format(scale="quick") and fidelity.scale_of(page) == "quick"


def test_the_radius_section_reads_every_measured_radius(tmp_path):
    folder = results(tmp_path, "standard", length_runs(radii=True))
    page, claims = fidelity.build(folder)
    section = page.split("### Sharpness at the right radius")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "ρ_proxy |" in line.split("|")[1] + "|"
            or line.startswith("| ρ → 0")]
    assert [row.split(" | ")[0] for row in rows] == ["| ρ → 0 (exact limit)", "| 0.01 ρ_proxy", "| 0.1 ρ_proxy",
                                                     "| ρ_proxy"]
    # at n = 10: PARITY L/rho^2 = 0.04 (1 + f), FIRST 0.008; at rho_proxy 0.08 against 0.008: ratio 10
    assert "| ρ_proxy | 2 | 0.0800 | 0.00800 | 10 |" in section
    assert "| 0.01 ρ_proxy | 0.0200 | 0.0404 | 0.00800 | 5.05 |" in section
    assert "| 10 % |" in section  # direction noise: stderr / value
    assert "L_ρ/ρ² is 2 times the exact limit for PARITY and 1 times for FIRST" in section
    assert "At the smallest radius, 0.01 ρ_proxy, L_ρ/ρ² is 1–1.01 times the exact limit" in section
    assert "PARITY is resolved above FIRST at n = 10 at ρ → 0 (exact limit), 0.01 ρ_proxy, 0.1 ρ_proxy, ρ_proxy" \
        in section
    radius = [c for c in claims if c.key.startswith("R")]
    assert [c.statement for c in radius] == ["PARITY is sharper than FIRST at radius ρ → 0 (exact limit)",
                                             "PARITY is sharper than FIRST at radius ρ_proxy"]
    assert fidelity.scale_of(page) == "standard"


def test_the_default_scale_is_the_largest_and_a_missing_one_is_named(tmp_path):
    folder = results(tmp_path, "quick", length_runs(radii=False))
    results(tmp_path, "standard", length_runs(radii=True))
    assert fidelity.scales(folder) == ["quick", "standard"]
    assert fidelity.scale_of(fidelity.render(folder)) == "standard"
    assert fidelity.scale_of(fidelity.render(folder, "quick")) == "quick"
    # the default scale's page is docs/fidelity.md, each other one docs/fidelity-<scale>.md, linked both ways
    assert [fidelity.page_path(s, ["quick", "standard"]) for s in ("quick", "standard")] == [
        "docs/fidelity-quick.md", "docs/fidelity.md"]
    assert "--out docs/fidelity-quick.md --scale quick" in fidelity.render(folder, "quick")
    assert "at the other shipped scales: [`standard`](fidelity.md)." in fidelity.render(folder, "quick")
    assert "at the other shipped scales: [`quick`](fidelity-quick.md)." in fidelity.render(folder)
    with pytest.raises(ValueError, match="no 'paper' scale here; found quick, standard"):
        fidelity.render(folder, "paper")
    with pytest.raises(ValueError, match="no results here"):
        fidelity.render(tmp_path / "nowhere")


def test_a_claim_the_tables_cannot_test_says_why(tmp_path):
    runs = length_runs(radii=False)
    runs.loc[runs["task"] == "parity", "converged"] = False  # no PARITY run passes the filter
    runs.loc[runs["run_id"] == "first40", "status"] = "failed"
    runs.loc[runs["run_id"] == "first40", "error"] = "out of memory"
    page, claims = fidelity.build(results(tmp_path, "quick", runs))
    first = {c.key: c for c in claims}["L1"]
    assert first.interval is None and first.verdict == stats.UNRESOLVED and "more distinct points" in first.reason
    assert "dropped by the filter: task = parity n = 4 ×3" in page and "1 failed (out of memory)" in page
    assert first.survivors.weakest == "n = 4: 0/3 kept" and "L1: no interval" not in page


def scratchpad_runs(all_steps: bool) -> pd.DataFrame:
    rows = []
    for arch, lengths in (("encoder", (4, 8)), ("scratchpad", (4, 8, 16))):
        for n in lengths:
            for seed in (0, 1, 2):
                row = {"run_id": f"{arch}{n}{seed}", "arch": arch, "n": n, "seed": seed, "status": "finished",
                       "converged": True, "eval_loss": 1e-5, "autoregressive_accuracy": 1.0, "n_params": 100,
                       "sharpness_proxy_pm1": (0.05 * n if arch == "encoder" else 0.1) + 0.01 * seed,
                       "log_blowup_mean": 2.0 + 0.01 * seed, "param_norm": 10.0}
                if all_steps and arch == "scratchpad":
                    row["sharpness_proxy_last_pm1"] = 0.3 - 0.1 * math.log2(n) + 0.01 * seed
                rows.append(row)
    return pd.DataFrame(rows)


def test_scratchpad_claims_follow_the_proxy_columns_present(tmp_path):
    last_only = claims_of(results(tmp_path / "a", "quick", scratchpad_runs(False), "scratchpad"))
    assert "last decoder step" in last_only["S2"].quantity and len(last_only) == 4
    both = claims_of(results(tmp_path / "b", "quick", scratchpad_runs(True), "scratchpad"))
    assert "mean over all decoder steps" in both["S2"].quantity and set(both) == {"S1", "S2", "S3", "S6"}
    assert both["S1"].interval.estimate == pytest.approx(0.2)  # 0.05 n per doubling from 4 to 8
    assert both["S2"].interval.estimate == pytest.approx(0, abs=1e-12)  # all steps: flat
    last = {s.label: s for s in both["S2"].secondaries}["last decoder step"]  # the former S4: a secondary, not a claim
    assert last.interval.estimate == pytest.approx(-0.1) and both["S2"].secondary_verdict(last) == stats.DIFFERS
    assert both["S2"].fragile == ["last decoder step"]  # the last step falls with n: the flat verdict is fragile


def test_the_command_writes_the_page_and_names_a_bad_scale(tmp_path, capsys):
    folder = results(tmp_path, "quick", length_runs(radii=False))
    assert cli.main(["fidelity", str(folder), "--out", str(tmp_path / "page.md")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["scale"] == "quick" and summary["claims"] == summary["reproduced"] + summary["differs"] + summary[
        "not resolved at this scale"]
    assert (tmp_path / "page.md").read_text(encoding="utf-8") == fidelity.render(folder, "quick")
    assert cli.main(["fidelity", str(folder), "--out", str(tmp_path / "x.md"), "--scale", "standard"]) == 2
    assert "no 'standard' scale here; found quick" in capsys.readouterr().err


def interval(center: float, se: float, df: float = 20) -> stats.Interval:
    """A t interval of `center` with standard error `se` (as the tests of `sensviz.stats` build it)."""
    half = stats.t_quantile(0.975, df) * se
    return stats.Interval(center, center - half, center + half, f"t({df})", df + 2, "seeds per n", center, se, df, 1, 2)


def flat(center: float, se: float, **extra) -> claims.Claim:
    return claims.Claim("length_scaling", "stays flat", "slope", 0, interval(center, se), key="L3",
                          margin={"margin": 0.005, "units": "per n", "reason": "a third of L1's effect"}, **extra)


def test_a_flat_claim_is_decided_against_its_margin():
    inside = flat(0.003, 0.001)  # 90 %: 0.003 ± 1.725 * 0.001, inside ±0.005; 95 % excludes zero
    assert inside.verdict == stats.REPRODUCED and stats.verdict(inside.interval, 0) == stats.DIFFERS
    assert flat(0.009, 0.001).verdict == stats.DIFFERS  # 95 %: 0.009 ± 2.086 * 0.001, wholly above 0.005
    across = flat(0.004, 0.001)  # 90 % reaches 0.0057 > 0.005, 95 % reaches below it: not resolved
    assert across.verdict == stats.UNRESOLVED
    half, most = (stats.units_to_resolve(across.interval, 0, 0.005, power=p)[0] for p in (0.5, 0.8))
    assert half > 22 and across.needed() == f"{half} seeds per n (now 22; {most} for 80 % power)"
    few = claims.Claim("dynamics", "rises", "difference", +1, interval(0.4, 0.3, df=1), key="D2")
    assert few.verdict == stats.UNRESOLVED and few.needed().startswith("1 degrees of freedom")  # never from df <= 2


def test_a_secondary_that_reaches_another_verdict_marks_the_claim_fragile():
    agrees = claims.Secondary("HC3 errors", interval(0.003, 0.0011))
    disagrees = claims.Secondary("accuracy ≥ 0.99 filter", interval(0.009, 0.001))
    missing = claims.Secondary("every run that ever converged", None, "no runs")
    c = flat(0.003, 0.001, secondaries=[agrees, disagrees, missing])
    assert c.fragile == ["accuracy ≥ 0.99 filter"]  # a secondary without an interval marks nothing
    text = c.secondaries_text()
    assert "accuracy ≥ 0.99 filter: 0.00900 [0.00691, 0.0111], differs **fragile**" in text
    assert "HC3 errors: 0.00300" in text and "fragile" not in text.split(";")[0] and "(no runs)" in text
    assert flat(0.003, 0.001, secondaries=[agrees]).fragile == []


def test_the_shipped_pages_keep_each_claim_key_and_count_only_the_papers_claims():
    results = ROOT / "experiments" / "results"
    pages = {scale: fidelity.collect(results, scale)[1] for scale in ("quick", "standard")}
    statements = [{c.key: c.statement for c in claims} for claims in pages.values()]
    assert statements[0].keys() == statements[1].keys()  # the same claims, by the same keys, on both pages
    differ = {k for k in statements[0] if statements[0][k] != statements[1][k]}
    assert differ <= {"G1", "G2"}, differ  # only the training-set sizes named in G1 and G2 differ between scales
    for found in pages.values():
        ours = {c.key for c in found if not c.paper}
        assert ours == {"R1", "R2"} and not {"S4", "S5"} & {c.key for c in found}  # S4/S5: S2's and S3's secondaries
        assert len([c for c in found if c.paper]) == len(found) - len(ours) == 28
    page = (ROOT / "docs" / "fidelity.md").read_text(encoding="utf-8")
    assert "; quick: " in page and page.index("**Bottom line.**") < page.index("## How each claim is decided")


HEADINGS = {"length_scaling": ("**Length scaling.**", "**Tradeoff.**"), "dynamics": ("**Dynamics.**", "**Scratchpad.**")}
"""Where each experiment's lines sit on the generated page: its heading and the next one."""


@pytest.mark.xdist_group("findings")
def test_a_finished_pre_registered_sweep_is_decided_beside_the_claims_not_as_a_scale():
    results = ROOT / "experiments" / "results"
    assert fidelity.DECIDE not in fidelity.scales(results)
    decided = fidelity.decisions(results)
    assert sorted(decided) == sorted(HEADINGS) and all(d.complete for d in decided.values())
    page = (ROOT / "docs" / "fidelity.md").read_text(encoding="utf-8")  # the generated page (test above)
    found = {f.key: f for f in findings.story(results).findings}
    for experiment, (heading, after) in HEADINGS.items():
        assert (results / fidelity.DECIDE / experiment / "runs.parquet").is_file()
        direct = preregistered.decide(ROOT / "experiments" / f"{experiment}.toml", "decide",
                                      results / "decide" / experiment, results / "standard")
        assert preregistered.to_dict(decided[experiment]) == {**preregistered.to_dict(direct),
                                                              "spec": f"experiments/{experiment}.toml"}
        assert preregistered.text(decided[experiment]).rstrip() in page
        holds = page[page.index(heading):page.index(after)].splitlines()[1]
        for c in direct.claims:  # the claim stands on its design: the one verdict, in the experiment's lines
            f = found[c.name]
            assert (f.stands.source, f.stands.kind, f.verdict) == (fidelity.DECIDE, findings.PREREGISTERED,
                                                                   c.primary.verdict)
            assert f"{c.name} {f.statement} ({fidelity.DECIDE}: {preregistered.estimate_text(c.primary)})" in holds
    assert found["L2"].stands.source == "decide tables"  # a claim the decide design does not test: exploratory there


def test_convergence_steps_take_a_recorded_step_else_the_historys_and_none_for_the_scratchpad():
    """A rerun's rows record `converged_step` beside earlier rows that do not (their step comes from
    the history); a scratchpad run's filter is measured once, at the end, so it has none."""
    runs = pd.DataFrame({"run_id": ["old", "new", "pad"], "arch": ["encoder", "encoder", "scratchpad"],
                         "converged_step": [None, 750, 250], "converged": [True, True, True], "status": "finished",
                         "task": "parity"})
    history = pd.DataFrame({"run_id": ["old", "old", "new", "pad"], "step": [250, 500, 250, 250],
                            "eval_loss": [0.1, 1e-4, 1e-4, 1e-4], "eval_accuracy": [0.9, 1.0, 1.0, 1.0]})
    t = claims.Tables("scratchpad", runs, history, None)
    assert t.convergence_steps(t.kept()).to_dict() == {"old": 500, "new": 750}


def test_a_design_still_filling_is_shown_as_interim_with_its_estimate_verdict_and_kept_runs_once():
    """The confirm design's rows beside a claim: its estimate, the verdict after Holm so far and its kept runs, each
    once (it read "0.0528 (51 runs) reproduced reproduced (0 runs kept)"), marked interim until the stop."""
    from sensviz import confirm, findings

    results = ROOT / "experiments" / "results"
    running = findings._running_evidence(results)
    spec, rows = findings.confirm_designs(results)["length_scaling"]
    state = confirm.state(spec, findings.CONFIRM, rows).set_index("claim")
    for name in ("L2", "L9"):
        text = running[name].text()
        assert "interim until its stop" in running[name].source and not running[name].finished
        assert text == f"{state.loc[name, 'estimate']} {state.loc[name, 'after Holm']} ({state.loc[name, 'kept']} runs kept)"
        assert state.loc[name, "kept"] > 0 and text.count(state.loc[name, "after Holm"]) == 1
    page = (ROOT / "docs" / "fidelity.md").read_text(encoding="utf-8")
    assert "| after Holm (interim) |" in page and "an interim reading of the rows in" in page
