"""Class mode in headless Chromium against the served app: an instructor creates a class on the Home
page (the absolute class links and the sidebar's class at once), two students (their own browser
contexts) open the class link, join with display names (one of them markup, refused; then a plain
one) and upload a model each while in the class; the first student's gallery lists both, and two
clicks (open, compare) put them side by side in the URL. The instructor's view at 1024×768 stays live
(the sidebar's gallery, the runs table, the class chart fill in without a reload) and the class chart
fits the window, in projector mode above the gallery."""

import io
import json
import re
import tempfile
import time
from pathlib import Path

import pytest
from helpers.app import write_class_runs
from helpers.browser import APPEARS_MS, ROOT, WIDE, choose_upload, cut_short, load, screenshot, wait_until_done
from PIL import Image

from server import assignments, jobs
from server.classes import ClassStore

DATA_DIR = Path(tempfile.mkdtemp(prefix="sensviz-class-e2e-"))
"""The served app's data dir: the tests write a class's members, models and runs there as the server would."""
SCREEN = {"width": 1024, "height": 768}
pytestmark = pytest.mark.xdist_group("class_browser")  # one server and browser for the module's tests


def ink_at_the_edge(drawn) -> list[str]:
    """The sides of a drawn chart (its canvas) with ink on their outermost pixels: a label the chart's edge cuts."""
    image = Image.open(io.BytesIO(drawn.screenshot())).convert("L")
    w, h = image.size
    sides = {"top": (0, 0, w, 2), "bottom": (0, h - 2, w, h), "left": (0, 0, 2, h), "right": (w - 2, 0, w, h)}
    return [side for side, box in sides.items() if image.crop(box).getextrema()[0] < 200]


@pytest.fixture(scope="module")
def server():
    env = {"SENSVIZ_DATA_DIR": str(DATA_DIR), "SENSVIZ_MAX_JOBS": "1"}
    with load.serve(ROOT / "artifacts" / "streamlit-class-e2e.log", env=env) as base:
        yield base


def sidebar_text(page) -> str:
    return page.locator('[data-testid="stSidebar"]').inner_text()


def join(browser, server, code: str, name: str):
    """A new browser joins the class as `name`: its context, page and the join's outcome as the page said it."""
    context = browser.new_context(viewport=WIDE)
    page = context.new_page()
    page.goto(f"{server}/lab?class={code}", wait_until="domcontentloaded")
    wait_until_done(page)
    page.get_by_role("textbox", name="Your display name").fill(name)
    page.get_by_role("textbox", name="Your display name").press("Enter")
    wait_until_done(page)
    page.get_by_role("button", name="Join", exact=True).click()
    # the click's rerun may not have started when the script state is read: wait for its outcome, and read it
    # then (a later rerun may replace the message)
    outcome = page.get_by_text("Not joined").or_(page.get_by_text("Your rejoin code, for another browser")).first
    outcome.wait_for(timeout=APPEARS_MS)
    said = outcome.inner_text()
    wait_until_done(page)
    return context, page, said


def create_class(page, server: str, name: str) -> str:
    """The instructor creates a class on the Home page; its code. The click's run shows the class links
    (absolute, from the browser's address), puts the class in the URL and its panel in the sidebar."""
    page.goto(f"{server}/", wait_until="domcontentloaded")
    wait_until_done(page)
    page.get_by_text("Create a class").click()
    page.get_by_role("textbox", name="Class name").fill(name)
    page.get_by_role("textbox", name="Class name").press("Enter")
    wait_until_done(page)
    page.get_by_role("button", name="Create the class").click()
    page.get_by_text(f"{server}/lab?class=").first.wait_for(timeout=APPEARS_MS)
    code = re.search(r"/lab\?class=([A-Za-z0-9_-]+)", page.get_by_text("/lab?class=").first.inner_text()).group(1)
    assert page.get_by_text("&instructor=").count() == 0  # this browser is the instructor: no link to leak
    wait_until_done(page)
    page.wait_for_function(f"() => location.search.includes('class={code}')", timeout=APPEARS_MS)
    page.locator('[data-testid="stSidebar"]').get_by_text(name).wait_for(timeout=APPEARS_MS)
    return code


@pytest.mark.browser
def test_students_join_and_compare_each_others_models(server, browser):
    teacher = browser.new_context(viewport=WIDE).new_page()
    code = create_class(teacher, server, "Tuesday lab")

    hostile_context, hostile, said = join(browser, server, code, "[Log in](https://evil.invalid)")
    assert "Not joined" in said and hostile.locator('a[href*="evil"]').count() == 0
    hostile_context.close()

    ada_context, ada, _ = join(browser, server, code, "Ada")
    bob_context, bob, _ = join(browser, server, code, "Bob")
    for page, stem in ((ada, "encoder-parity-n6"), (bob, "encoder-first-n6")):
        choose_upload(page, str(ROOT / "checkpoints" / f"{stem}.safetensors"))
        page.get_by_text("· n = 6").first.wait_for(timeout=120_000)  # in the class's gallery (the sidebar)
    ada.goto(f"{server}/class?class={code}", wait_until="domcontentloaded")
    wait_until_done(ada)
    main = ada.locator('[data-testid="stMain"]')
    main.get_by_text("Bob · first · n = 6").wait_for(timeout=APPEARS_MS)
    rows = main.locator('[data-testid="stHorizontalBlock"]')
    rows.filter(has_text="Ada · parity").get_by_role("button", name="open").click()
    ada.wait_for_function("() => location.search.includes('model=upload')", timeout=APPEARS_MS)
    wait_until_done(ada)
    ada.mouse.move(0, 0)  # away from the open button's help tooltip
    rows.filter(has_text="Bob · first").get_by_role("button", name="compare").click()
    ada.wait_for_function("() => location.search.includes('compare=upload')", timeout=APPEARS_MS)
    assert "Compared with" in sidebar_text(ada)
    stranger = browser.new_context()
    assert "Tuesday lab" not in stranger.new_page().goto(f"{server}/class").text()  # nobody else's
    for context in (stranger, ada_context, bob_context, teacher.context):  # no page left rerunning its live parts
        context.close()


@pytest.mark.browser
def test_the_instructor_code_leaves_no_trace_in_the_history(server, browser):
    teacher = browser.new_context(viewport=WIDE).new_page()
    code = create_class(teacher, server, "History lab")
    teacher.goto(f"{server}/class?class={code}", wait_until="domcontentloaded")
    wait_until_done(teacher)
    teacher.get_by_text("Instructors").click()
    teacher.get_by_role("button", name="Make a one-time instructor link").click()
    link = teacher.wait_for_function(  # read in one go: a locator's element may be swapped by the click's rerun
        """() => [...document.querySelectorAll('[data-testid="stCode"] code')].map(c => c.innerText.trim())
                 .find(t => t.includes('&instructor='))""", timeout=APPEARS_MS).json_value()
    other = browser.new_context(viewport=WIDE).new_page()  # the instructor's second browser
    other.goto(f"{server}/", wait_until="domcontentloaded")
    wait_until_done(other)
    other.add_init_script("""(() => {const log = []; window.__urls = log;  // every URL the app puts in the history
        for (const name of ['pushState', 'replaceState']) {
            const orig = history[name].bind(history);
            history[name] = (s, t, u) => {log.push(name + ' ' + u); return orig(s, t, u);};}})()""")
    other.goto(link, wait_until="domcontentloaded")
    wait_until_done(other)
    other.get_by_text("Instructor").first.wait_for(timeout=APPEARS_MS)
    other.wait_for_function("() => !location.search.includes('instructor')", timeout=APPEARS_MS)
    entries = other.evaluate("history.length")
    other.wait_for_timeout(8_000)  # the live gallery's runs (every 3 s): the code leaves the server's URL too
    wait_until_done(other)
    assert other.evaluate("history.length") == entries and "instructor" not in other.url
    assert not [url for url in other.evaluate("window.__urls") if "instructor" in url]
    other.go_back(wait_until="domcontentloaded")
    assert "instructor" not in other.url
    thief = browser.new_context(viewport=WIDE).new_page()  # the link again, in another browser: exchanged once, dead
    thief.goto(link, wait_until="domcontentloaded")
    wait_until_done(thief)
    thief.get_by_text("not valid").first.wait_for(timeout=APPEARS_MS)
    assert thief.get_by_text("Make a one-time instructor link").count() == 0
    thief.context.close()
    other.context.close()
    teacher.context.close()


@pytest.mark.browser
def test_the_instructors_view_is_live_and_fits_1024_by_768(server, browser):
    teacher = browser.new_context(viewport=SCREEN).new_page()
    code = create_class(teacher, server, "Live lab")
    teacher.locator('[data-testid="stSidebar"]').get_by_text("Class gallery and chart").click()
    teacher.get_by_role("button", name="Start the length-scaling assignment").click()
    main, side = teacher.locator('[data-testid="stMain"]'), teacher.locator('[data-testid="stSidebar"]')
    main.get_by_text("No runs yet").wait_for(timeout=APPEARS_MS)
    # the test's server listens on 127.0.0.1 and the browser opened it so: the link names this computer only
    main.get_by_text("This server listens on this computer only (server.address 127.0.0.1)").wait_for(timeout=APPEARS_MS)
    main.get_by_text("0 members joined").wait_for(timeout=APPEARS_MS)
    store = ClassStore(DATA_DIR / "classes", b"test")  # a member's model and run, as the server records them
    store.join(code, "Ada", "ada-browser")
    store.add_model(code, "ada-browser", "ada-model-token", "parity", 6, 1.0, "ada-parity-n6")
    store.add_job(code, "ada-browser", "ada-job", "parity", 6, assignments.LENGTH_SCALING.deal(0))
    side.get_by_text("Ada · parity · n = 6").wait_for(timeout=APPEARS_MS)  # no reload: the sidebar's gallery
    main.get_by_text("1 member joined").wait_for(timeout=APPEARS_MS)  # the members table
    main.get_by_text("1 run: gone 1").wait_for(timeout=APPEARS_MS)  # the runs table (the job is no server's)
    stopped = DATA_DIR / "jobs" / "ada-restarted-run"  # a run a restart ended: the longest reason a class sees
    stopped.mkdir(parents=True)
    reason = f"{jobs.STOPPED_BY_RESTART} at step 1,200; the weights of the last measurement (step 1,200) are kept"
    (stopped / "state.json").write_text(json.dumps({"id": stopped.name, "owner": "ada-browser", "name": "parity n=6",
                                                    "state": "stopped", "created": 1.0, "reason": reason}))
    store.add_job(code, "ada-browser", stopped.name, "parity", 6, assignments.LENGTH_SCALING.deal(1))
    main.get_by_text("2 runs:").wait_for(timeout=APPEARS_MS)
    table = main.locator('[data-testid="stDataFrame"]').last  # the runs table: inside the window, nothing scrolled off
    teacher.wait_for_timeout(500)  # the grid's first frame
    assert table.bounding_box()["x"] + table.bounding_box()["width"] <= SCREEN["width"]
    screenshot(teacher, "class-runs-1024x768")
    widths = table.evaluate("t => { const s = t.querySelector('.dvn-scroller'); return [s.scrollWidth, s.clientWidth] }")
    assert widths[0] <= widths[1] + 1, widths
    write_class_runs(store, code)
    main.get_by_text("Verdict: the class reproduced the paper's claim.").wait_for(timeout=APPEARS_MS)
    for name, url in (("class-chart-1024x768", None), ("class-projector-1024x768", f"/class?class={code}&projector=1")):
        if url:
            teacher.goto(f"{server}{url}", wait_until="domcontentloaded")
        wait_until_done(teacher)
        chart = main.locator('[data-testid="stVegaLiteChart"]')
        chart.locator("canvas, svg.marks").first.wait_for(timeout=APPEARS_MS)
        teacher.mouse.move(0, 0)  # no chart toolbar over the chart's title
        teacher.wait_for_timeout(500)  # Vega's first frame
        screenshot(teacher, name)
        drawn, box = chart.locator("canvas, svg.marks").first.bounding_box(), chart.bounding_box()
        assert drawn["x"] >= box["x"] - 1 and drawn["x"] + drawn["width"] <= min(box["x"] + box["width"], 1024) + 1, name
        assert not ink_at_the_edge(chart.locator("canvas, svg.marks").first), name  # no axis or legend label cut
        assert not cut_short(teacher), (name, cut_short(teacher))  # no label or button text cut with an ellipsis
    gallery = main.get_by_role("heading", name="Gallery").bounding_box()
    assert chart.bounding_box()["y"] < gallery["y"]  # projector mode: the chart first
    captions = main.locator('[data-testid="stCaptionContainer"]').evaluate_all(  # the ink as drawn: colour, and the
        "cs => cs.map(c => [getComputedStyle(c).color, getComputedStyle(c).opacity])")  # theme's see-through grey
    assert captions and {tuple(c) for c in captions} == {("rgb(34, 34, 34)", "1")}, captions  # near black
    greyed = main.locator("button:disabled").evaluate_all("bs => bs.map(b => getComputedStyle(b).visibility)")
    assert greyed and set(greyed) == {"hidden"}, greyed  # the gallery's compare with nothing open: not on the screen
    teacher.evaluate("window.scrollTo(0, 0)")
    box = chart.bounding_box()
    assert box["y"] >= 0 and box["y"] + box["height"] <= SCREEN["height"], box  # above the fold of 1024×768
    assert box["height"] >= SCREEN["height"] / 2 and box["width"] >= SCREEN["width"] / 2, box  # half the screen at least
    verdict = main.get_by_role("heading", name="Verdict: reproduced")
    size = float(verdict.evaluate("e => getComputedStyle(e).fontSize").removesuffix("px"))
    text_height = verdict.evaluate("e => {const r = document.createRange(); r.selectNodeContents(e); "
                                   "return r.getBoundingClientRect().height}")
    assert size >= 24 and text_height < 2 * size, (size, text_height)  # one line (its text, not its margins), large type
    teacher.context.close()


@pytest.mark.browser
def test_an_open_page_is_told_the_assignment_and_the_removal_without_a_reload(server, browser):
    teacher = browser.new_context(viewport=WIDE).new_page()
    code = create_class(teacher, server, "Notice lab")
    ada_context, ada, _ = join(browser, server, code, "Ada")
    loads = ada.evaluate("performance.getEntriesByType('navigation').length")
    teacher.goto(f"{server}/class?class={code}", wait_until="domcontentloaded")
    wait_until_done(teacher)
    teacher.get_by_role("button", name="Start the length-scaling assignment").click()
    started = time.monotonic()
    ada.get_by_text("The instructor started the assignment").wait_for(timeout=APPEARS_MS)
    told_s = time.monotonic() - started
    assert ada.get_by_role("button", name="Open the Train form with my assignment").count() == 1
    ClassStore(DATA_DIR / "classes", b"test").join(code, "Bo", "bo-browser")
    teacher.get_by_text("2 members joined").wait_for(timeout=APPEARS_MS)
    teacher.reload(wait_until="domcontentloaded")  # the Member box lists Bo too
    wait_until_done(teacher)
    teacher.get_by_text("Yes, remove Ada").click()
    wait_until_done(teacher)
    teacher.get_by_role("button", name="Remove from the class").click()
    ada.get_by_text("The instructor removed you").wait_for(timeout=APPEARS_MS)
    assert ada.evaluate("performance.getEntriesByType('navigation').length") == loads  # no reload
    box = teacher.get_by_role("checkbox", name="Yes, remove Bo")  # the box moved on to Bo: not ticked for him
    box.wait_for(state="attached", timeout=APPEARS_MS)
    wait_until_done(teacher)
    assert not box.is_checked() and teacher.get_by_role("button", name="Remove from the class").is_disabled()
    print(f"the assignment reached the open page {told_s:.1f} s after the click")
    for context in (ada_context, teacher.context):
        context.close()


@pytest.mark.browser
def test_the_instructors_histogram_fills_as_the_room_predicts(server, browser):
    from sensviz import lab

    chapter = lab.CHAPTERS[0]
    teacher = browser.new_context(viewport=SCREEN).new_page()
    code = create_class(teacher, server, "Predicting lab")
    members = [join(browser, server, code, name) for name in ("Ada", "Bob")]
    teacher.goto(f"{server}/class?class={code}", wait_until="domcontentloaded")
    wait_until_done(teacher)
    teacher.get_by_text("No predictions yet").wait_for(timeout=APPEARS_MS)
    for k, (_, page, _) in enumerate(members, start=1):
        page.goto(f"{server}/lab?class={code}&chapter={chapter.number}", wait_until="domcontentloaded")
        wait_until_done(page)
        page.get_by_role("radio", name=chapter.predict.options[0]).check(force=True)
        wait_until_done(page)
        teacher.get_by_text(f"({k} prediction{'s' if k > 1 else ''})").wait_for(timeout=APPEARS_MS)  # live, no reload
    wait_until_done(teacher)
    chart = teacher.locator('[data-testid="stVegaLiteChart"]').last
    chart.locator("canvas, svg.marks").first.wait_for(timeout=APPEARS_MS)
    bands = len(chapter.predict.options)  # a band of 32 px per answer: none too thin to be labelled
    assert chart.bounding_box()["height"] >= 32 * bands + 30, chart.bounding_box()  # and the count axis below
    screenshot(teacher, "class-predictions")
    teacher.goto(f"{server}/class?class={code}&projector=1", wait_until="domcontentloaded")  # the room's screen
    wait_until_done(teacher)
    chart = teacher.locator('[data-testid="stVegaLiteChart"]').last
    drawn = chart.locator("canvas, svg.marks").first
    drawn.wait_for(timeout=APPEARS_MS)
    teacher.mouse.move(0, 0)
    teacher.wait_for_timeout(500)  # Vega's first frame
    screenshot(teacher, "class-predictions-projector-1024x768")
    assert not ink_at_the_edge(drawn), ink_at_the_edge(drawn)  # no answer or count cut at the chart's edge
    box = drawn.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= SCREEN["width"], box
    for context, _, _ in members:
        context.close()
    teacher.context.close()
