"""The standalone HTML report: every figure, inline JavaScript, nothing from the internet."""

import json
import re
from pathlib import Path

import pytest
from helpers.core import length_runs, report_results, sweep_folder

from sensviz import report

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def results(tmp_path) -> Path:
    return report_results(tmp_path)


def test_report_has_every_figure_inline_and_no_remote_resources(results, tmp_path):
    summary = report.write_report(results, tmp_path / "r.html")
    assert summary["sweeps"] == ["length_scaling", "tradeoff"] and summary["figures"] == 3
    page = (tmp_path / "r.html").read_text()
    assert summary["bytes"] == len(page.encode())
    assert page.count('<div class="chart" id="chart-') == 3
    assert "<script src" not in page and "<link" not in page and "@import" not in page
    assert "a &lt;fixed&gt; table" in page and "7 of 8 finished runs kept" in page
    specs = json.loads(re.search(r"const specs = (.*);\n", page).group(1))
    assert [s["facet"]["field"] for s in specs[:1]] == ["metric"] and len(specs) == 3
    assert "vegaEmbed" in page and "actions: false" in page
    assert report.render(results)[0] == page  # the same inputs give the same bytes


def test_one_sweep_folder_and_bad_folders(results, tmp_path):
    assert report.write_report(results / "ls", tmp_path / "one.html")["sweeps"] == ["length_scaling"]
    with pytest.raises(ValueError, match="no sweep results here"):
        report.write_report(tmp_path / "nowhere", tmp_path / "x.html")
    sweep_folder(tmp_path / "toy", "toy", length_runs())
    page = report.render(tmp_path / "toy")[0]
    assert "no figures for experiment" in page  # an experiment without figures is said so, not a crash


def test_sweep_folders_come_in_the_order_of_the_experiments(tmp_path):
    for name in ("zeta", "tradeoff", "alpha", "length_scaling", "generalization"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "runs.parquet").write_bytes(b"")
    assert [f.name for f in report.sweep_folders(tmp_path)] == [
        "length_scaling", "tradeoff", "generalization", "alpha", "zeta"]


def test_sweep_folders_of_several_scales_come_grouped_by_scale(tmp_path):
    for scale, name in [("standard", "tradeoff"), ("quick", "tradeoff"), ("standard", "length_scaling"),
                        ("quick", "dynamics"), ("extra", "alpha")]:
        (tmp_path / scale / name).mkdir(parents=True)
        (tmp_path / scale / name / "runs.parquet").write_bytes(b"")
    assert [f"{f.parent.name}/{f.name}" for f in report.sweep_folders(tmp_path)] == [
        "quick/tradeoff", "quick/dynamics", "standard/length_scaling", "standard/tradeoff", "extra/alpha"]


