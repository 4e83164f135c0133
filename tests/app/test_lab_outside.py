"""The Lab outside the unit run: every chapter's shipped data against a fresh measurement (slow), chapter 4's number
against the Landscape page's cache, and the handout written by the command in a fresh process."""

import os
import subprocess
import sys
import time

import pytest
from helpers.lab import MEASURED_REL, ROOT, SOURCES, data, same_measurement

from sensviz import lab
from sensviz.mathml import mathml


@pytest.mark.slow
def test_every_chapters_shipped_data_and_summary_equals_a_fresh_measurement():
    """`sensviz lab-data` run now would write what is shipped (no chapter or summary measured stale)."""
    store, summaries = lab.read_store(SOURCES.checkpoints), lab.read_summaries(SOURCES.checkpoints)
    for ch in lab.CHAPTERS:
        if ch.number == 7:  # its trained models here; its 3 x 128 random transformers in the fast test below (8 each)
            numbers, tables = lab.trained_models(SOURCES)
            shipped = lab.Data.from_json(store["7"]["data"])
            assert numbers == {k: shipped.numbers[k] for k in numbers}
            for key, table in tables.items():
                rows = shipped.tables[key].iloc[-len(table):].reset_index(drop=True)  # the trained models come last
                assert same_measurement(lab.Data({}, {key: table}).to_json()["tables"][key],
                                        lab.Data({}, {key: rows}).to_json()["tables"][key]), key
            continue
        assert same_measurement(ch.measure(SOURCES, None).to_json(), store[str(ch.number)]["data"]), f"chapter {ch.number}"
    for name in lab.summary_models():
        assert same_measurement(lab.measure_summary(SOURCES.load(name)), summaries[name]["summary"]), name


def test_chapter_4_shows_the_landscape_pages_number():
    from ui import cache, model_refs

    built = lab.chapter(4).present(data(4), 1.0)
    ref = model_refs.zoo_ref("encoder-parity-n16")
    assert lab.LANDSCAPE.directions == cache.LANDSCAPE_DIRECTIONS
    assert lab.LANDSCAPE.measure_inputs == cache.LANDSCAPE_INPUTS
    page, _, _ = cache.sharpness(ref, 16, cache.paper_rho(ref), cache.LANDSCAPE_DIRECTIONS, cache.LANDSCAPE_INPUTS, 0)
    assert built.numbers["sharp_parity"] == pytest.approx(page.value, rel=MEASURED_REL)
    assert built.numbers["stderr_parity"] == pytest.approx(page.stderr, rel=MEASURED_REL)


def test_the_handout_from_another_folder_student_and_instructor(tmp_path, monkeypatch, capsys):
    """The student's handout by the command, in a fresh process; the instructor's by the same command
    in this one (a second interpreter would only load torch again). Both from another folder."""
    from sensviz.cli import main

    for name in ("SENSVIZ_CHECKPOINT_DIR", "SENSVIZ_RESULTS_DIRS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "sensviz", "lab", "--out", "student.html"],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert main(["lab", "--out", "teacher.html", "--answers"]) == 0, capsys.readouterr().err
    print(f"two handouts in {time.perf_counter() - start:.1f} s")
    student, teacher = (tmp_path / "student.html").read_text(), (tmp_path / "teacher.html").read_text()
    definitions = sum(len(ch.formula) for ch in lab.CHAPTERS)
    theorems = sum(len(ch.theorem) for ch in lab.CHAPTERS)
    for page in (student, teacher):  # the theorems: in the student's back section, in place for the instructor
        assert page.count("<math") == definitions + theorems and "@media print" in page
        assert f'href="/lab?chapter={len(lab.CHAPTERS)}"' in page and "localhost" not in page  # no --url: the chapter's path only
        assert all(o in page for o in lab.chapter(1).predict.options)
        assert "Hover" not in page  # what hovering shows is for the screen (`Figure.hover`), not for paper
    count = len(lab.CHAPTERS)
    # the student's back section, a section per chapter in it
    assert student.count("<section") == 2 * count + 1 and teacher.count("<section") == count
    back = student.index('class="back"')
    assert student.index("answer-chart") > back and student.index(mathml(lab.chapter(3).theorem[0])) > back
    front = student[:back]  # the answers only in the back section, one per chapter
    assert student.count('class="box"') == count and "<b>Answer.</b>" not in front and "What to look for" not in front
    assert student.count("<b>Answer.</b>") == count and "answer-chart" not in front
    assert teacher.count("<b>Answer.</b>") == count and 'class="box"' not in teacher
