"""The findings tell one story (issue 36): one verdict per claim across every table that tests it, margins with
their dates, the distance to the paper's scale in the headline, words that match the tables; computed once per
content of the tables."""

import dataclasses
import re
from pathlib import Path

import pandas as pd
import pytest

from sensviz import claims, findings, results, stats, sweeps

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "experiments" / "results"
PAGE = ROOT / "docs" / "fidelity.md"  # regenerated and compared by test_fidelity
pytestmark = pytest.mark.xdist_group("findings")  # one worker computes the shipped findings once (test_fidelity's too)


@pytest.fixture(scope="session")
def told() -> findings.Story:
    return findings.story(RESULTS)


@pytest.fixture(scope="session")
def by_key(told) -> dict[str, findings.Finding]:
    return {f.key: f for f in told.findings}


def bottom_line(page: str) -> str:
    return page[page.index("**Bottom line.**"):page.index("\n\n", page.index("**Bottom line.**"))]


# ----------------------------------------------------------------------------- one tally


def test_each_claim_has_one_verdict_and_the_bottom_line_counts_that_table(told):
    keys = [f.key for f in told.findings]
    assert len(keys) == len(set(keys)) == 30  # 28 of the paper's claims and our two checks, once each
    counts = findings.tally(told.findings)
    table = told.table()
    paper = table[~table["#"].str.endswith("(ours)")]
    assert sum(counts.values()) == len(paper) == 28
    assert counts[stats.REPRODUCED] == paper["verdict"].str.startswith(stats.REPRODUCED).sum()
    line = told.bottom_line()
    assert (f"{counts[stats.REPRODUCED]} reproduced (" in line and f"{counts[stats.DIFFERS]} differ" in line
            and f"{counts[stats.UNRESOLVED]} not resolved" in line)


def test_the_page_has_one_tally_and_no_unresolved_line_beside_a_decided_claim(by_key):
    """Today's page failed both: 18 / 2 / 8 beside "L1 reproduced", and "Not resolved: L1 …" under "Decided by … L1"."""
    page = PAGE.read_text(encoding="utf-8")
    line = bottom_line(page)
    assert len(re.findall(r"\d+ reproduced", line)) == 1  # one tally, and nothing after it counts again
    assert "Decided by" not in line
    decided = [k for k, f in by_key.items() if f.stands.kind == findings.PREREGISTERED]
    assert sorted(decided) == ["D2", "D3", "L1", "L3", "L5", "L7"]
    unresolved_lines = [s for s in page.splitlines() if s.startswith("- Not resolved:")]
    assert len(unresolved_lines) == 5  # one per experiment
    for key in decided:
        assert by_key[key].verdict == stats.REPRODUCED
        assert not any(re.search(rf"\b{key}:", s) for s in unresolved_lines), key
    rest = page[page.index("**What would resolve the rest**"):].split("\n\n")[0]
    assert sorted(re.findall(r"\b([A-Z]\d)\b,", rest)) == sorted(k for k, f in by_key.items()
                                                                if f.verdict == stats.UNRESOLVED and f.paper)


def test_the_later_pre_registered_design_stands_and_the_page_says_so():
    def ev(source, verdict, kind=findings.PREREGISTERED, kept=10):
        return findings.Evidence(source, kind, verdict, "1 [0, 2]", kept)

    earlier, later = [ev("decide", stats.REPRODUCED)], [ev("confirm", stats.DIFFERS)]
    scale = [ev("standard", stats.UNRESOLVED, findings.SCALE, kept=99)]
    stands, basis, history, said = findings._choose("X1", {"X1": [earlier, later]}, scale, None)
    assert stands is later[0] and basis.startswith("pre-registered") and earlier[0] in history and scale[0] in history
    assert said == ("decide read reproduced; confirm, the later design (sized from the earlier one's tables, run on "
                    "new seeds), stands")
    running = [findings.Evidence("confirm (8 of 100 runs in)", findings.PREREGISTERED, stats.UNRESOLVED, "—", 0,
                                 finished=False)]
    stands, _, history, said = findings._choose("X1", {"X1": [earlier, running]}, scale, None)
    assert stands is earlier[0] and running[0] in history and said == ""  # a design still filling stands beside
    stands, basis, _, _ = findings._choose("X1", {}, scale, ev("decide tables", stats.REPRODUCED, findings.EXPLORATORY, 5))
    assert stands is scale[0] and "most kept runs for it (99, standard)" in basis  # the most kept runs, else


# ----------------------------------------------------------------------------- margins with their dates


def test_a_margin_set_after_the_data_it_judges_is_not_resolved_whichever_way_it_went(by_key):
    """L3 and S2 read "reproduced" on the standard tables, judged by margins written after those tables."""
    l3 = next(e for e in by_key["L3"].history if e.source == "standard")
    assert (l3.verdict, l3.read, l3.post_hoc) == (stats.REPRODUCED, stats.REPRODUCED, True)
    assert "not resolved at this scale (margin set after the data; it read reproduced)" in l3.text()
    s2 = by_key["S2"]
    assert (s2.stands.source, s2.stands.read, s2.verdict) == ("standard", stats.REPRODUCED, stats.UNRESOLVED)
    assert findings.verdict_text(s2) == "not resolved at this scale (margin set after the data; it read reproduced)"
    assert by_key["S6"].stands.read == stats.DIFFERS and by_key["S6"].verdict == stats.UNRESOLVED  # either way
    # on the decide tables the margins came first: L3 stands there, reproduced
    assert by_key["L3"].stands.source == "decide, fixed arm" and by_key["L3"].verdict == stats.REPRODUCED
    page = PAGE.read_text(encoding="utf-8")
    assert "| S2 | not resolved at this scale (margin set after the data; it read reproduced) |" in page


def test_a_flat_claim_on_tables_its_margin_had_not_seen_keeps_its_verdict():
    fixed = {"margin": 0.01, "fixed": {"commit": "abc", "date": "2026-01-01T00:00:00Z", "seen": ["quick"]}}
    c = claims.Claim("e", "stays flat", "slope", 0, stats.slope(pd.Series([4.0, 8, 12, 4, 8, 12]),
                                                                 pd.Series([1.0, 1, 1.001, 1.001, 1, 1])),
                     margin=fixed)
    assert c.verdict == stats.REPRODUCED
    assert findings._post_hoc_read(c, "standard") == ""  # fixed before these tables
    assert findings._post_hoc_read(c, "quick") == stats.REPRODUCED  # it had seen these
    assert findings._post_hoc_read(dataclasses.replace(c, margin={"margin": 0.01}), "standard") == stats.REPRODUCED


def test_a_flat_claims_relative_change_is_the_mean_at_the_largest_x_against_the_smallest(by_key):
    runs = pd.DataFrame({"task": "majority", "n": [4, 4, 9, 14, 14], "converged": True,
                         "sharpness_proxy_pm1": [0.9, 1.1, 5.0, 1.4, 1.6]})
    entry = {"runs": {"task": "majority"}, "filter": "converged", "quantity": "sharpness_proxy_pm1", "x": "n"}
    assert findings.relative_change(runs, entry) == "+50 % over n = 4–14"
    assert findings.relative_change(runs[runs["n"] == 4], entry) == ""  # one level: no change to state
    assert by_key["L3"].change == "+48 % over n = 4–14"  # MAJORITY rises about half while "flat"
    assert by_key["S2"].change == "-34 % over n = 4–32"  # the scratchpad falls a third
    assert "(+48 % over n = 4–14)" in by_key["L3"].margin + f" ({by_key['L3'].change})"


# ----------------------------------------------------------------------------- the distance in the headline


def test_the_headline_gives_the_scales_behind_the_verdicts_against_the_papers(told):
    """Today's bottom line named no width, learning rate or batch, and never said that no run reached the paper's scale."""
    line = bottom_line(PAGE.read_text(encoding="utf-8"))
    first = line.removeprefix("**Bottom line.** ").split("; ")[0]
    for label in findings.SCALE_COLUMNS.values():
        assert f"{label} = " in first, label
    assert "width d = 32 (the paper: 32–128)" in first and "learning rate = 0.00100–0.00300" in first
    assert "no runs reached the paper's scale (0 of " in line
    assert "**The scale behind each verdict**" in PAGE.read_text(encoding="utf-8")
    table = told.table().set_index("#")
    assert table.loc["L1", "width d"] == "32" and table.loc["L1", "steps"] == "6000–8000"


def test_a_run_reaches_the_papers_scale_only_with_its_width_batch_steps_and_learning_rate():
    paper = pd.DataFrame({"d_model": [128], "batch_size": [1024], "steps": [10000], "lr": [3e-4]})
    runs = pd.DataFrame({"d_model": [128, 32, 128, 128], "batch_size": [1024, 1024, 256, 1024],
                         "steps": [10000, 10000, 10000, 10000], "lr": [3e-4, 3e-4, 3e-4, 1e-3]})
    assert findings.reached(runs, paper).tolist() == [True, False, False, False]


# ----------------------------------------------------------------------------- words that match the tables


def test_l2_is_not_resolved_and_the_decide_tables_results_are_exploratory(by_key):
    assert by_key["L2"].verdict == stats.UNRESOLVED and by_key["L2"].stands.source == "decide tables"
    differs = [s for s in PAGE.read_text(encoding="utf-8").splitlines() if s.startswith("- Does not hold:")]
    assert not any("L2" in s for s in differs)
    for key, estimate in (("L4", "0.0282 [0.018, 0.0384]"), ("L6", "0.0325 [0.0224, 0.0426]"),
                          ("L8", "0.0322 [0.022, 0.0423]"), ("L9", "0.0348 [0.00736, 0.0622]"),
                          ("R1", "0.0566 [0.00771, 0.105]")):
        f = by_key[key]
        assert (f.stands.kind, f.stands.estimate, f.verdict) == (findings.EXPLORATORY, estimate, stats.REPRODUCED)
        assert findings.verdict_text(f) == "reproduced (exploratory)"
    assert "50 seeds" not in PAGE.read_text(encoding="utf-8").split("## How each claim is decided")[0]


def test_chapter_5_states_how_many_runs_trained_the_relax_steps_after_the_filter():
    numbers, _ = findings.lab_data(RESULTS)
    kept = claims.rows_where(results.load(RESULTS / "decide", "length_scaling").kept(), task="parity", relax_steps=2000)
    full = int((kept["steps_since_converged"] >= 2000).sum())
    assert (full, len(kept)) == (42, 48)
    assert numbers["arm"] == ("relax arm: 42 of 48 runs trained 2,000 steps after the filter (the other 6 reached "
                              "their 8,000-step limit first)")


# ----------------------------------------------------------------------------- once per table


def test_the_stored_table_is_the_computed_one_and_is_read_back_without_computing(tmp_path, monkeypatch, told):
    line, table = findings.stored(RESULTS, tmp_path)
    assert line == told.bottom_line()
    pd.testing.assert_frame_equal(table, told.table())
    (stored,) = tmp_path.glob("findings-*.json")
    assert stored.name == f"findings-{findings.digest(RESULTS)[:32]}.json"

    def never(folder):
        raise AssertionError("computed again")

    monkeypatch.setattr(findings, "story", never)
    again = findings.stored(RESULTS, tmp_path)
    assert again[0] == line
    pd.testing.assert_frame_equal(again[1], table)


def test_the_digest_follows_the_contents_of_the_tables(tmp_path):
    folder = tmp_path / "experiments" / "results"
    (folder / "quick" / "x").mkdir(parents=True)
    table = folder / "quick" / "x" / "runs.parquet"
    table.write_bytes(b"one")
    first = findings.digest(folder)
    table.write_bytes(b"two")
    assert findings.digest(folder) != first
    table.write_bytes(b"one")
    assert findings.digest(folder) == first  # the same content, the same findings


def test_a_margins_record_is_checked_with_the_spec_and_stays_outside_its_hash():
    entry = {"statement": "flat", "runs": {"task": "majority"}, "filter": "converged", "quantity": "q", "x": "n",
             "margin": 0.5, "units": "q per n", "reason": "why"}
    fixed = {"commit": "d26977c", "date": "2026-12-02T06:33:00Z", "seen": ["standard"]}
    sweeps.check_equivalence({"F1": {**entry, "fixed": fixed}})  # accepted
    for bad in ({"commit": "d26977c"}, {**fixed, "seen": "standard"}, "d26977c"):
        with pytest.raises(ValueError, match=re.escape("equivalence.F1.fixed must be {commit")):
            sweeps.check_equivalence({"F1": {**entry, "fixed": bad}})
