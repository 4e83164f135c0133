"""Class mode in headless Chromium against the served app: an instructor creates a class on the Home
page, two students (their own browser contexts) open the class link, join with display names (one
of them markup, refused; then a plain one) and upload a model each while in the class; the first
student's gallery lists both, and two clicks (open, compare) put them side by side in the URL."""

import re

import pytest
from test_e2e import ROOT, WIDE, browser, choose_upload, server, wait_until_done  # noqa: F401  (fixtures)


def sidebar_text(page) -> str:
    return page.locator('[data-testid="stSidebar"]').inner_text()


def join(browser, server, code: str, name: str):  # noqa: F811
    context = browser.new_context(viewport=WIDE)
    page = context.new_page()
    page.goto(f"{server}/lab?class={code}", wait_until="domcontentloaded")
    wait_until_done(page)
    page.get_by_role("textbox", name="Your display name").fill(name)
    page.get_by_role("textbox", name="Your display name").press("Enter")
    wait_until_done(page)
    page.get_by_role("button", name="Join", exact=True).click()
    # the click's rerun may not have started when the script state is read: wait for its outcome
    page.get_by_text("Not joined").or_(page.get_by_text("Your rejoin code")).first.wait_for(timeout=60_000)
    wait_until_done(page)
    return context, page


@pytest.mark.browser
def test_students_join_and_compare_each_others_models(server, browser):  # noqa: F811
    teacher = browser.new_context(viewport=WIDE).new_page()
    teacher.goto(f"{server}/", wait_until="domcontentloaded")
    wait_until_done(teacher)
    teacher.get_by_text("Create a class").click()
    teacher.get_by_role("textbox", name="Class name").fill("Tuesday lab")
    teacher.get_by_role("textbox", name="Class name").press("Enter")
    wait_until_done(teacher)
    teacher.get_by_role("button", name="Create the class").click()
    teacher.get_by_text("/lab?class=").first.wait_for(timeout=60_000)
    code = re.search(r"/lab\?class=([A-Za-z0-9_-]+)", teacher.get_by_text("/lab?class=").first.inner_text()).group(1)

    hostile_context, hostile = join(browser, server, code, "[Log in](https://evil.invalid)")
    assert "Not joined" in hostile.inner_text("body") and hostile.locator('a[href*="evil"]').count() == 0
    hostile_context.close()

    ada_context, ada = join(browser, server, code, "Ada")
    bob_context, bob = join(browser, server, code, "Bob")
    for page, stem in ((ada, "encoder-parity-n6"), (bob, "encoder-first-n6")):
        choose_upload(page, str(ROOT / "checkpoints" / f"{stem}.safetensors"))
        page.get_by_text("· n = 6").first.wait_for(timeout=120_000)  # in the class's gallery (the sidebar)
    ada.goto(f"{server}/class?class={code}", wait_until="domcontentloaded")
    wait_until_done(ada)
    main = ada.locator('[data-testid="stMain"]')
    main.get_by_text("Bob · first · n = 6").wait_for(timeout=60_000)
    rows = main.locator('[data-testid="stHorizontalBlock"]')
    rows.filter(has_text="Ada · parity").get_by_role("button", name="open").click()
    ada.wait_for_function("() => location.search.includes('model=upload')", timeout=60_000)
    wait_until_done(ada)
    ada.mouse.move(0, 0)  # away from the open button's help tooltip
    rows.filter(has_text="Bob · first").get_by_role("button", name="compare").click()
    ada.wait_for_function("() => location.search.includes('compare=upload')", timeout=60_000)
    assert "Compared with" in sidebar_text(ada)
    assert "Tuesday lab" not in browser.new_context().new_page().goto(f"{server}/class").text()  # nobody else's
    ada_context.close()
    bob_context.close()


@pytest.mark.browser
def test_the_instructor_code_leaves_no_trace_in_the_history(server, browser):  # noqa: F811
    teacher = browser.new_context(viewport=WIDE).new_page()
    teacher.goto(f"{server}/", wait_until="domcontentloaded")
    wait_until_done(teacher)
    teacher.get_by_text("Create a class").click()
    teacher.get_by_role("textbox", name="Class name").fill("History lab")
    teacher.get_by_role("textbox", name="Class name").press("Enter")
    wait_until_done(teacher)
    teacher.get_by_role("button", name="Create the class").click()
    teacher.get_by_text("&instructor=").first.wait_for(timeout=60_000)
    link = teacher.get_by_text("&instructor=").first.inner_text().strip()
    other = browser.new_context(viewport=WIDE).new_page()  # the instructor's second browser
    other.goto(f"{server}/", wait_until="domcontentloaded")
    wait_until_done(other)
    other.add_init_script("""(() => {const log = []; window.__urls = log;  // every URL the app puts in the history
        for (const name of ['pushState', 'replaceState']) {
            const orig = history[name].bind(history);
            history[name] = (s, t, u) => {log.push(name + ' ' + u); return orig(s, t, u);};}})()""")
    other.goto(f"{server}{link}", wait_until="domcontentloaded")
    wait_until_done(other)
    other.get_by_text("Instructor").first.wait_for(timeout=60_000)
    other.wait_for_function("() => !location.search.includes('instructor')", timeout=60_000)
    entries = other.evaluate("history.length")
    other.wait_for_timeout(8_000)  # the live gallery's runs (every 3 s): the code leaves the server's URL too
    wait_until_done(other)
    assert other.evaluate("history.length") == entries and "instructor" not in other.url
    assert not [url for url in other.evaluate("window.__urls") if "instructor" in url]
    other.go_back(wait_until="domcontentloaded")
    assert "instructor" not in other.url
