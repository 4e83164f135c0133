"""The standalone HTML report: every figure, inline JavaScript, nothing from the internet."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from conftest import offline
from helpers.core import length_runs

from sensviz import figures, report

ROOT = Path(__file__).resolve().parents[2]


def sweep_folder(path: Path, experiment: str, runs: pd.DataFrame) -> Path:
    path.mkdir(parents=True)
    runs.assign(wall_s=1.0).to_parquet(path / "runs.parquet")
    pd.DataFrame({"run_id": ["x"], "step": [0]}).to_parquet(path / "history.parquet")
    (path / "spec.json").write_text(json.dumps({"experiment": experiment, "name": path.name,
                                                "description": "a <fixed> table"}))
    return path


@pytest.fixture
def results(tmp_path) -> Path:
    sweep_folder(tmp_path / "results" / "ls", "length_scaling", length_runs())
    sweep_folder(tmp_path / "results" / "to", "tradeoff", length_runs())
    return tmp_path / "results"


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


@pytest.mark.browser
def test_the_report_renders_offline_in_a_browser(results, tmp_path, browser):
    report.write_report(results, tmp_path / "r.html")
    errors = []
    page = browser.new_page()
    remote = offline(page)
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.goto((tmp_path / "r.html").as_uri())
    page.wait_for_function("document.querySelectorAll('div.chart svg.marks').length == 3", timeout=30_000)
    page.context.close()
    assert remote == [] and errors == []


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


@pytest.mark.browser
def test_every_shipped_figure_reads_at_a_1024_px_window(tmp_path, browser):
    """The report of the shipped results in Chromium at 1024 x 768: every chart drawn, at least 100 px
    tall, inside the window and no wider than the app's column beside its sidebar (figures.MAX_WIDTH)."""
    summary = report.write_report(ROOT / "experiments" / "results", tmp_path / "r.html")
    page = browser.new_page(viewport={"width": 1024, "height": 768})
    page.goto((tmp_path / "r.html").as_uri())
    page.wait_for_function(f"document.querySelectorAll('div.chart svg.marks').length == {summary['figures']}",
                           timeout=120_000)
    boxes = page.evaluate("""Array.from(document.querySelectorAll('div.chart')).map(d => {
        const r = d.querySelector('svg.marks').getBoundingClientRect();
        return {id: d.id, left: r.left, right: r.right, width: r.width, height: r.height,
                text: d.textContent.slice(0, 80)}; })""")
    page.screenshot(path=str(tmp_path / "report-1024.png"), full_page=True)
    page.context.close()
    assert len(boxes) == summary["figures"] >= 7
    for box in boxes:
        assert "chart error" not in box["text"], box
        assert box["height"] >= 100 and box["left"] >= 0 and box["right"] <= 1024, box
        assert box["width"] <= figures.MAX_WIDTH, box
