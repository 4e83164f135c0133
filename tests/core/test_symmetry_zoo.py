"""Sharpness under function-preserving maps across a folder (sensviz.symmetry_zoo): the rows on tiny models, the
summary's numbers, R3's rule on altered data, and docs/symmetry.md as the render of its stored rows."""

import math
from pathlib import Path

import pandas as pd
import pytest

import sensviz as sv
from sensviz import symmetry_zoo
from sensviz.measure import MeasureSettings

DOCS = Path(__file__).resolve().parents[2] / "docs"
TINY = MeasureSettings(measure_inputs=8, directions=4, proxy_draws=4)


@pytest.fixture(scope="module")
def tiny_rows(tmp_path_factory):
    """Two tiny encoders (PARITY and FIRST, n = 3) measured as they are and after one map of size 100."""
    folder = tmp_path_factory.mktemp("zoo")
    for seed, task in enumerate(("parity", "first")):
        model = sv.build_model("encoder", d_model=4, n_layers=1, n_heads=1, max_len=3, seed=seed)
        sv.save_checkpoint(model, folder / f"encoder-{task}-n3.safetensors", task=task, n=3)
    sv.save_checkpoint(sv.build_model("formal", d_model=4, n_layers=1, n_heads=1, max_len=3, seed=0),
                       folder / "formal-parity-n3.safetensors", task="parity", n=3)  # no maps: left out
    return symmetry_zoo.rows(folder, kappa=100.0, maps=1, settings=TINY)


def test_rows_measure_each_encoder_as_is_and_after_a_map(tiny_rows):
    assert sorted(tiny_rows["model"]) == ["encoder-first-n3"] * 2 + ["encoder-parity-n3"] * 2
    assert set(tiny_rows["map"]) == {0, 1}
    assert (tiny_rows["output_change"] <= 1e-5).all()
    found = symmetry_zoo.changes(tiny_rows).pivot_table(index="model", columns="measure", values="change")
    assert (found["orbit_sharpness"] < math.log10(1.01)).all()  # within 1 %: a function of the orbit
    assert (found["sharpness"] > math.log10(1.1)).all()  # Dinh et al.: L_rho moves, the outputs do not
    moved = tiny_rows.groupby("model")["param_norm"].agg(lambda s: s.max() / s.min())
    assert (moved > 1.1).all()


def rows(parity: list[float], first: list[float], se: float = 0.01, ns=(4, 8)) -> pd.DataFrame:
    """Synthetic rows: per n a PARITY and a FIRST model, as is (map 0) and after one map, every measure
    doubled by the map but orbit_sharpness, which stays."""
    out = []
    for n, p, f in zip(ns, parity, first):
        for task, value, as_n in (("parity", p, n), ("first", f, n / 8)):
            for m in (0, 1):
                row = {"model": f"encoder-{task}-n{n}", "task": task, "n": n, "map": m, "kappa": 100.0,
                       "as_n": as_n, "param_norm": 1.0 + m, "rho": 0.1, "output_change": 0.0, "inputs": 16,
                       "directions": 4}
                for column, (_, stderr, _) in symmetry_zoo.MEASURES.items():
                    row[column] = value if column == "orbit_sharpness" else value * 2**m
                    if stderr:
                        row[stderr] = se
                out.append(row)
    return pd.DataFrame(out)


def test_summary_numbers():
    found = symmetry_zoo.summary(rows([0.5, 0.9], [0.1, 0.2])).set_index("measure")
    assert found.loc["sharpness", "change_median"] == pytest.approx(math.log10(2))
    assert found.loc["orbit_sharpness", "change_max"] == 0
    assert found.loc["sharpness", "spearman_as_n"] == pytest.approx(1.0)  # as_n 0.5, 1, 4, 8 against 0.1, 0.2, 0.5, 0.9
    assert found.loc["orbit_sharpness", "parity_over_first"] == {4: True, 8: True}


@pytest.mark.parametrize("parity, first, verdict", [
    ([0.5, 0.9], [0.1, 0.2], "reproduced"),
    ([0.1, 0.2], [0.5, 0.9], "differs"),  # the same data with the tasks swapped
    ([0.5, 0.21], [0.1, 0.2], "not resolved"),  # n = 8 within the noise
])
def test_r3_rule_on_altered_data(parity, first, verdict):
    decided = symmetry_zoo.decide_r3(rows(parity, first))
    assert decided.verdict == verdict
    assert [c["z"] for c in decided.cells] == pytest.approx([(p - f) / math.hypot(0.01, 0.01)
                                                             for p, f in zip(parity, first)])


def test_the_command_renders_stored_rows_and_refuses_other_files_in_one_line(tmp_path, capsys):
    from sensviz.cli import main

    rows([0.5, 0.9], [0.1, 0.2]).to_csv(tmp_path / "rows.csv", index=False)
    assert main(["symmetry-zoo", "--from-csv", str(tmp_path / "rows.csv"), "--out", str(tmp_path / "page.md"),
                 "--no-figure"]) == 0
    assert "**Verdict: reproduced.**" in (tmp_path / "page.md").read_text()
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    assert main(["symmetry-zoo", "--from-csv", str(tmp_path / "other.csv"), "--out", str(tmp_path / "p.md")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("sensviz symmetry-zoo: error:") and "no column model" in err and "\n" not in err


def test_the_page_is_the_render_of_its_rows_and_states_the_rules_verdict():
    stored = symmetry_zoo.read(DOCS / "symmetry.csv")
    page = (DOCS / "symmetry.md").read_text()
    assert page == symmetry_zoo.render_page(stored)
    assert f"**Verdict: {symmetry_zoo.decide_r3(stored).verdict}.**" in page
    assert set(stored["task"].str.lower()) >= {"parity", "first"} and stored["map"].max() >= 1
    assert stored["output_change"].max() <= 1e-5  # every map kept the outputs
