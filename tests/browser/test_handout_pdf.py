"""The student's handout printed to PDF by Chromium: the answers behind the questions, no near-empty page."""

import pytest
from conftest import offline
from helpers.lab import RESULTS, ROOT
from pdf_fill import page_fill

from sensviz import charts, handout, lab


@pytest.mark.browser
def test_the_student_handout_prints_the_answers_behind_the_questions(tmp_path, browser):
    """Printed to PDF by Chromium: no page under a quarter full, every answer-bearing chart in the back section
    (which starts on a page of its own) with each chapter's answer, no chart in front,
    answer boxes of eight lines kept with their question, offline, 14 px text."""
    out = tmp_path / "lab.html"
    assert handout.write_handout(out, checkpoints=ROOT / "checkpoints", results=RESULTS)["chapters"] == len(lab.CHAPTERS)
    page = browser.new_page(viewport={"width": 1024, "height": 768})
    remote = offline(page)
    page.goto(out.as_uri())
    count = out.read_text().count('class="chart ')
    page.wait_for_function(f"document.querySelectorAll('.chart svg').length >= {count}", timeout=120_000)
    page.emulate_media(media="print")
    layout = page.evaluate("""() => {
        const back = document.querySelector('.back');
        const charts = [...document.querySelectorAll('.answer-chart')];
        return {inBack: charts.filter(c => back.contains(c)).length, answerCharts: charts.length,
                blindOutside: [...document.querySelectorAll('.blind-chart')].filter(c => !back.contains(c)).length,
                frontCharts: [...document.querySelectorAll('.chart')].filter(c => !back.contains(c)).length,
                answers: [...back.querySelectorAll('.answer')].length,
                beforeBack: charts.filter(c => c.getBoundingClientRect().top < back.getBoundingClientRect().top).length,
                breaks: getComputedStyle(back).breakBefore,
                boxes: [...document.querySelectorAll('.box')].map(b => b.getBoundingClientRect().height
                                                                 / parseFloat(getComputedStyle(b).lineHeight)),
                kept: [...document.querySelectorAll('.respond')].map(r => getComputedStyle(r).breakInside),
                together: [...document.querySelectorAll('.keep')].map(k => [getComputedStyle(k).breakInside,
                           !!k.querySelector('.question'), !!k.querySelector('.predict'), !!k.querySelector('.box')]),
                fonts: [...document.querySelectorAll('.chart svg text')].map(e => parseFloat(getComputedStyle(e).fontSize))};
    }""")
    pdf = page.pdf(format="A4")
    page.context.close()
    fills = page_fill(pdf)
    print(f"\nstudent handout: {len(fills)} A4 pages, filled " + ", ".join(f"{f:.0%}" for f in fills))
    assert remote == []
    assert layout["answerCharts"] == layout["inBack"] > 0 and layout["beforeBack"] == 0 and layout["breaks"] == "page"
    assert layout["blindOutside"] == 0 and layout["frontCharts"] == 0  # no chart in front: not even a blind one
    assert layout["answers"] == len(lab.CHAPTERS)  # each chapter's answer and explanation in the back section
    assert len(layout["boxes"]) == len(lab.CHAPTERS) and min(layout["boxes"]) >= 8 and set(layout["kept"]) == {"avoid"}
    assert layout["together"] == [["avoid", True, True, True]] * len(lab.CHAPTERS)  # question, prediction, box: one page
    assert min(layout["fonts"]) >= charts.READABLE_PX == 14
    assert 6 <= len(fills) <= 20 and min(fills) >= 0.25, fills  # the back section holds each answer too
