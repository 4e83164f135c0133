"""The Lab walked as a student, in headless Chromium at 1024×768 against the served app: in each chapter the
chapters' tabs on one row, the question and the prediction above the fold, the chapter's words and symbols before
its first chart (or placeholder), the answer not on the page until revealed, ticking an option changing no chart (they stay blind
until the reveal), the prediction kept in the URL, the try-it control redrawing a chart after the reveal,
then every chart at least 100 px tall and inside the window, no text cut short
and every text at least 4.5:1 against its background, and the next chapter opening at its top; at the end
"My answers" with its table whole inside the window.
Screenshots of each chapter before and after the reveal go to artifacts/screenshots/ (lab-<k>-before.png,
lab-<k>-after.png); the times it measured are printed (`-s`; `benchmarks/lab_render.py` measures a
chapter's first and cached renders on a fresh server)."""

import time

import pytest
from helpers.browser import APPEARS_MS, SHOTS, misfits, wait_until_done

from sensviz import lab

FOLD = 768
pytestmark = pytest.mark.xdist_group("e2e")  # conftest's server, the one test_e2e uses


def main_scroll(page) -> float:
    return page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollTop")


def chart_signature(page) -> str:
    """What the charts draw now (their canvases' pixels, or their SVG), to tell a redraw."""
    return page.evaluate("""() => [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')].map(c => {
        const canvas = c.querySelector('canvas'); return canvas ? canvas.toDataURL() : c.innerHTML; }).join('|')""")


def caption_contrast(page) -> list[tuple[str, float]]:
    """Each caption's text and its colour's contrast against the white page (WCAG's relative luminance)."""
    found = page.evaluate("""() => [...document.querySelectorAll('[data-testid="stCaptionContainer"] p')].map(
        p => [p.innerText.slice(0, 40), getComputedStyle(p).color])""")

    def luminance(css: str) -> float:  # rgb(...) or rgba(...), an alpha blended over white
        values = [float(v) for v in css[css.index("(") + 1:css.index(")")].split(",")]
        alpha = values[3] if len(values) == 4 else 1.0
        r, g, b = (alpha * v / 255 + 1 - alpha for v in values[:3])
        return sum(w * (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4)
                   for w, c in zip((0.2126, 0.7152, 0.0722), (r, g, b)))

    return [(text, 1.05 / (luminance(colour) + 0.05)) for text, colour in found]


LOW_CONTRAST = """() => {
  const rgba = css => { const v = css.match(/[\\d.]+/g).map(Number); return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1]; };
  const over = (top, under) => top.slice(0, 3).map((c, i) => top[3] * c + (1 - top[3]) * under[i]);
  const lum = rgb => rgb.map(c => c / 255).map(c => c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4)
                       .reduce((s, c, i) => s + c * [0.2126, 0.7152, 0.0722][i], 0);
  const background = el => {  // the colours behind el, innermost last, blended over white
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = rgba(getComputedStyle(e).backgroundColor); if (c[3] > 0) layers.push(c);
    }
    return layers.reverse().reduce((under, top) => over(top, under), [255, 255, 255]);
  };
  const low = [];
  const main = document.querySelector('[data-testid="stMain"]');
  for (const el of main.querySelectorAll('*')) {
    const own = [...el.childNodes].filter(n => n.nodeType === 3 && n.textContent.trim()).map(n => n.textContent.trim()).join(' ');
    const style = getComputedStyle(el);
    if (!own || style.visibility === 'hidden' || style.display === 'none' || !el.getClientRects().length) continue;
    const under = background(el), ink = over(rgba(style.color), under);
    const [a, b] = [lum(ink), lum(under)].sort((x, y) => y - x);
    const ratio = (a + 0.05) / (b + 0.05);
    if (ratio < 4.5) low.push([own.slice(0, 40), Math.round(ratio * 100) / 100]);
  }
  return low;
}"""
"""Every element of the page's main part with text of its own whose colour, over the backgrounds behind it, is
below 4.5:1 (WCAG's contrast ratio): [text, ratio]."""


def top_of(locator) -> float:
    return locator.first.bounding_box()["y"]


@pytest.mark.browser
def test_a_student_walks_every_chapter(server, browser):
    page = browser.new_page(viewport={"width": 1024, "height": FOLD})
    SHOTS.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    page.goto(f"{server}/lab?chapter=1")
    times, wrong = [], {}
    for number in range(1, len(lab.CHAPTERS) + 1):
        ch = lab.chapter(number)
        wait_until_done(page)
        first = time.perf_counter() - start
        built = ch.present(lab.stored(ch, lab.Sources.shipped()), ch.control.default)
        question = page.get_by_text(ch.question, exact=False)
        question.first.wait_for(timeout=APPEARS_MS)  # the page's script state can read "done" before its run starts
        assert question.first.is_visible() and top_of(question) < FOLD, number
        shown = page.locator('[data-testid="stVegaLiteChart"], [data-testid="stAlertContentInfo"]')
        shown.first.wait_for(timeout=APPEARS_MS)
        wait_until_done(page)
        # the prediction above the fold; the chapter's words and symbols visible under it, before the first chart
        assert top_of(page.locator('[data-testid="stRadio"]')) < FOLD, f"chapter {number}: no prediction above the fold"
        words = page.get_by_text("Words and symbols of this chapter")
        assert words.first.is_visible() and top_of(words) < top_of(shown), number
        assert page.get_by_text(built.answer[:60]).count() == 0 and page.get_by_text(built.look_for[:60]).count() == 0
        assert main_scroll(page) == 0, f"chapter {number} did not open at its top"
        tabs = page.evaluate("""() => [...document.querySelectorAll('.st-key-sv_w_lab_chapter button')]
            .map(b => Math.round(b.getBoundingClientRect().top))""")
        assert len(tabs) == len(lab.CHAPTERS) and len(set(tabs)) == 1, f"the chapters' tabs on more than one row: {tabs}"
        page.screenshot(path=str(SHOTS / f"lab-{number}-before.png"))

        option = ch.predict.options[0]
        blind = chart_signature(page)
        page.locator('[data-testid="stRadio"]').get_by_text(option, exact=True).click()
        page.wait_for_function("() => location.search.includes('predict=')", timeout=APPEARS_MS)  # kept in the URL
        wait_until_done(page)
        page.wait_for_timeout(300)
        assert chart_signature(page) == blind, f"chapter {number}: ticking an option unblinded a chart"

        page.get_by_role("button", name="Reveal the answer").click()
        page.get_by_text("What to look for").first.wait_for(timeout=APPEARS_MS)
        wait_until_done(page)
        page.wait_for_timeout(300)  # Vega draws after the run ends
        before = chart_signature(page)
        other = next(o for o in ch.control.options if o != ch.control.default)
        clicked = time.perf_counter()
        page.locator('[data-testid="stButtonGroup"]').last.get_by_text(ch.control.fmt(other), exact=True).click()
        page.wait_for_function("() => location.search.includes('try=')", timeout=APPEARS_MS)
        page.get_by_text("What changes here.").first.wait_for(timeout=APPEARS_MS)  # the try-it setting is another
        wait_until_done(page)
        page.wait_for_timeout(300)
        tried = time.perf_counter() - clicked
        assert chart_signature(page) != before, f"chapter {number}: the try-it control changed no chart"
        built = ch.present(lab.stored(ch, lab.Sources.shipped()), ch.control.default)  # the question's own setting
        assert page.get_by_text(built.answer[:60]).first.is_visible()
        page.screenshot(path=str(SHOTS / f"lab-{number}-after.png"))
        wrong[number] = misfits(page)
        low = [(text, ratio) for text, ratio in caption_contrast(page) if ratio < 4.5]
        assert not low, f"chapter {number}: captions below 4.5:1 against white: {low}"
        low = page.evaluate(LOW_CONTRAST)
        assert not low, f"chapter {number}: text below 4.5:1 against its background: {low}"
        times.append((number, first, tried))

        if number < len(lab.CHAPTERS):
            page.get_by_role("button", name=f"Chapter {number + 1} →").scroll_into_view_if_needed()
            start = time.perf_counter()
            page.get_by_role("button", name=f"Chapter {number + 1} →").click()
            page.wait_for_function("() => document.querySelector('[data-testid=\"stMain\"]').scrollTop === 0",
                                   timeout=APPEARS_MS)
    # every chapter revealed: "My answers" lists them, its table whole inside the window (no column cut off)
    page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollTo(0, 0)")
    page.get_by_role("button", name="My answers").click()
    grid = page.locator('[data-testid="stPopoverBody"] [data-testid="stDataFrame"]')
    grid.first.wait_for(timeout=APPEARS_MS)
    page.wait_for_timeout(300)
    box = grid.first.bounding_box()
    cut = page.evaluate("""() => [...document.querySelectorAll('[data-testid="stPopoverBody"] .dvn-scroller')]
        .filter(e => e.scrollWidth > e.clientWidth + 1).length""")
    page.screenshot(path=str(SHOTS / "lab-my-answers.png"))
    assert box["x"] >= 0 and box["x"] + box["width"] <= 1024 and box["y"] + box["height"] <= FOLD and cut == 0, (box, cut)
    page.close()
    print("\nchapter | first render (s) | try-it (s)")
    for number, first, tried in times:
        print(f"{number} | {first:.2f} | {tried:.2f}")
    assert not {number: bad for number, bad in wrong.items() if bad}, wrong
