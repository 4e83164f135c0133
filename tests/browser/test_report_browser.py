"""The report in Chromium: it renders offline, and every shipped figure reads at a 1024 px window."""

from pathlib import Path

import pytest
from conftest import offline
from helpers.core import report_results

from sensviz import figures, report

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def results(tmp_path) -> Path:
    return report_results(tmp_path)


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
