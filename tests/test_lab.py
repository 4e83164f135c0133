"""The Lab: every chapter builds from the zoo, states only computed numbers, and the handout works offline."""

import re
import string
from pathlib import Path

import pytest

from sensviz import lab
from sensviz.cli import main
from sensviz.measure import MeasureSettings, measure

ROOT = Path(__file__).resolve().parents[1]
LOAD = lab.zoo_loader(ROOT / "checkpoints")
RESULTS = ROOT / "experiments" / "results"
QUICK_MEASURE = MeasureSettings(measure_inputs=64, directions=4, proxy_draws=4, samples=64)
"""Small measurement sizes: every quantity still computed, from fewer inputs, directions and draws."""


class Chapters(dict):
    """Chapter number -> the chapter built from the zoo, each built on first use with `settings`."""

    def __init__(self, settings: MeasureSettings):
        super().__init__()
        self.settings = settings

    def __missing__(self, number: int) -> lab.Built:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(lab, "SETTINGS", self.settings)
            self[number] = lab.chapter(number).build(lab.Sources(LOAD, RESULTS))
        return self[number]


@pytest.fixture(scope="module")
def built():
    """The chapters at small measurement sizes (`QUICK_MEASURE`): what their structure and their
    agreement with the measurement layer need, not the numbers of the paper's settings."""
    return Chapters(QUICK_MEASURE)


def fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def test_six_chapters_each_with_everything_a_chapter_needs(built):
    assert [ch.number for ch in lab.CHAPTERS] == list(range(1, 7))
    for ch in lab.CHAPTERS:
        assert ch.question and ch.ask and ch.formula and ch.try_it and ch.models
        assert all((ROOT / "checkpoints" / f"{name}.safetensors").is_file() for name in ch.models)
        b = built[ch.number]
        assert 1 <= len(b.figures) <= 3 and all(f.data is not None and len(f.data) for f in b.figures)
        for fig in b.figures:
            fig.chart.to_dict()  # a valid Vega-Lite spec


def test_texts_state_only_computed_numbers(built):
    """Every number in a chapter's text comes from a field filled from its models: no digit is typed."""
    for ch in lab.CHAPTERS:
        for template in (ch.look_for, ch.answer):
            assert fields(template) <= set(built[ch.number].numbers), ch.slug
            typed = re.sub(r"\{[^}]*\}", "", template)
            assert not re.search(r"\d", typed), (ch.slug, typed)


def test_numbers_are_those_of_the_measurement_layer(built):
    parity = LOAD("encoder-parity-n8")
    s = measure(parity.model, parity.task, 8, QUICK_MEASURE, quantities=["sensitivity"]).sensitivity
    assert built[1].numbers["as_parity"] == pytest.approx(s.avg_sensitivity)
    ck = LOAD("encoder-parity-n16")
    found = measure(ck.model, ck.task, 16, QUICK_MEASURE, quantities=["sharpness", "limit"], encoding=ck.encoding)
    assert built[4].numbers["sharp_parity"] == pytest.approx(found.sharpness.value, rel=1e-9)
    assert built[4].numbers["limit_parity"] == pytest.approx(found.limit.value, rel=1e-9)
    records = parity.metadata["extra"]["measurements"]
    assert built[2].numbers["sharp_end"] == records[-1]["sharpness"]
    assert built[6].numbers["as_learned"] < built[6].numbers["as_target"]


@pytest.mark.slow
def test_the_landscape_chapter_at_the_papers_settings_separates_parity_from_first():
    landscape = Chapters(lab.SETTINGS)[4]  # everyone's defaults, as the app and the handout show it
    ck = LOAD("encoder-parity-n16")
    found = measure(ck.model, ck.task, 16, lab.SETTINGS, quantities=["sharpness", "limit"], encoding=ck.encoding)
    assert landscape.numbers["sharp_parity"] == pytest.approx(found.sharpness.value, rel=1e-9)
    assert landscape.numbers["limit_parity"] == pytest.approx(found.limit.value, rel=1e-9)
    # the contrast the chapter is about: the finite radius separates PARITY from FIRST, the limit alone does not
    assert landscape.numbers["sharp_ratio"] > 1.5 and landscape.numbers["limit_ratio"] < 1.5


def test_chapter_numbers_are_checked():
    assert lab.chapter(3).slug == "blowup"
    for bad in (0, 7, "2", True):
        with pytest.raises(ValueError, match="chapters 1..6"):
            lab.chapter(bad)


def test_formulas_read_as_text_in_the_handout():
    assert lab.formula_text(r"\frac{1}{\sqrt{\sigma^2+\varepsilon}}") == "1/(√(σ^2+ε))"
    assert lab.formula_text(r"\#\{i : x_{(k)}\}") == "#{i : x_(k)}"
    for ch in lab.CHAPTERS:
        assert all("\\" not in lab.formula_text(line) for line in ch.formula), ch.slug


@pytest.mark.browser
def test_the_handout_opens_offline_with_every_figure(tmp_path):
    from playwright.sync_api import sync_playwright

    out = tmp_path / "lab.html"
    assert main(["lab", "--out", str(out), "--answers", "--checkpoints", str(ROOT / "checkpoints"),
                 "--results", str(RESULTS)]) == 0
    text = out.read_text()
    assert all(ch.title in text for ch in lab.CHAPTERS) and "<b>Answer.</b>" in text
    assert main(["lab", "--out", str(tmp_path / "plain.html")]) == 0
    assert "<b>Answer.</b>" not in (tmp_path / "plain.html").read_text()
    remote = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1024, "height": 768})
        page.route("**/*", lambda route: remote.append(route.request.url) or route.abort()
                   if not route.request.url.startswith("file:") else route.continue_())
        page.goto(out.as_uri())
        page.wait_for_function("document.querySelectorAll('.chart svg').length >= 11", timeout=120_000)
        boxes = page.evaluate("() => [...document.querySelectorAll('.chart svg')].map(e => e.getBoundingClientRect())"
                              ".map(r => [r.left, r.right, r.height])")
        browser.close()
    assert remote == []
    assert len(boxes) == text.count('class="chart"') and all(h >= 100 and right <= 1024 for _, right, h in boxes)
