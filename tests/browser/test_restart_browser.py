"""A server restart in the middle of a student's run, in Chromium, as the student lives it: they press Train, the
server is killed after the run's first snapshot and started again on the same address; the open page reconnects
by itself, says the server stopped during the run and offers "Continue from step k"; one click goes on from
there (not from step 0), and the button is gone after it. A class member whose browser keeps no cookies is someone
new after the restart: their rejoin code brings the offer back."""

import json
import re
import signal
import time
from urllib.parse import parse_qs, urlsplit

import pytest
from helpers.browser import APPEARS_MS, ROOT, WIDE, cookieless_context, load, screenshot, wait_until_done

from server import worker
from server.classes import ClassStore
from server.owners import owner_secret

PRESET = "PARITY, n = 12 (slow: minutes)"  # 8,000 steps, a measurement (and a snapshot) every 250
CEILING_S = 300  # a ceiling on a busy two-core machine; a passing test waits seconds

pytestmark = [pytest.mark.browser, pytest.mark.server]


def _state(folder) -> dict:
    return json.loads((folder / "state.json").read_text())


def _wait(condition, what: str):
    deadline = time.monotonic() + CEILING_S
    while not (found := condition()):
        assert time.monotonic() < deadline, what
        time.sleep(0.1)
    return found


def _train_until_killed(page, process, data) -> str:
    """Train the slow preset from the open Train page, kill the server (SIGKILL) once the run wrote its first
    snapshot; the run's job id."""
    wait_until_done(page)
    page.locator('[data-testid="stSelectbox"]').filter(has_text="Preset").click()
    page.get_by_role("option").filter(has_text=PRESET).first.click()
    wait_until_done(page)
    page.get_by_role("button", name="Train", exact=True).click()
    page.wait_for_function("() => window.location.search.includes('job=')", timeout=APPEARS_MS)
    job = parse_qs(urlsplit(page.url).query)["job"][0]
    _wait(lambda: (data / "jobs" / job / worker.SNAPSHOT).is_file(), "the run never wrote a snapshot")
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=CEILING_S)
    return job


def _continue_and_stop(page, data, job: str) -> None:
    """Press "Continue from step k" in the sidebar: the continued run goes on from past k, the page follows it
    (Stop, no second Continue), and Stop stops it."""
    sidebar = page.locator('[data-testid="stSidebar"]')
    step = _state(data / "jobs" / job)["resume_step"]
    button = sidebar.get_by_role("button", name=f"Continue from step {step:,}")
    button.wait_for(timeout=APPEARS_MS)
    wait_until_done(page)
    button.click()
    again = _wait(lambda: _state(data / "jobs" / job).get("rerun"), "the click queued no run")
    progress = data / "jobs" / again / "progress.json"
    first = _wait(lambda: progress.is_file() and json.loads(progress.read_text() or "{}").get("step"),
                  "the continued run never reported a step")
    assert first > step, (first, step)  # it went on from the snapshot, not from step 0
    stop = sidebar.get_by_role("button", name="Stop and keep what was learned")
    stop.wait_for(timeout=APPEARS_MS)  # the page follows the continued run
    assert sidebar.get_by_role("button", name=re.compile("Continue from step")).count() == 0
    stop.click()
    _wait(lambda: _state(data / "jobs" / again)["state"] == "stopped", "Stop did not stop the run")


def test_a_student_continues_a_run_a_restart_stopped_from_the_open_page(browser, tmp_path):
    env = {"SENSVIZ_DATA_DIR": str(tmp_path), "SENSVIZ_MAX_JOBS": "1"}
    port = load.free_port()
    page = browser.new_context(viewport=WIDE).new_page()
    with load.served(ROOT / "artifacts" / "streamlit-restart-browser.log", env=env, port=port) as (base, process):
        page.goto(f"{base}/train", wait_until="domcontentloaded")
        job = _train_until_killed(page, process, tmp_path)
    with load.served(ROOT / "artifacts" / "streamlit-restart-browser.again.log", env=env, port=port):
        page.locator('[data-testid="stSidebar"]').get_by_text("the server stopped during this run").wait_for(
            timeout=APPEARS_MS)  # no reload
        wait_until_done(page)
        screenshot(page, "restart-continue")
        _continue_and_stop(page, tmp_path, job)


def test_a_class_member_whose_browser_keeps_no_cookies_gets_the_run_back_with_the_rejoin_code(browser, tmp_path):
    """The member joins in a browser that blocks cookies and keeps the rejoin code the sidebar shows; a restart
    mid-run makes the reconnected page someone new (the join form, no Continue); typing the code brings the
    offer back, and the continuation is theirs to stop."""
    env = {"SENSVIZ_DATA_DIR": str(tmp_path), "SENSVIZ_MAX_JOBS": "1"}
    code = ClassStore(tmp_path / "classes", owner_secret(tmp_path)).create("Restart lab", "the-instructor").code
    port = load.free_port()
    context = cookieless_context(browser, tmp_path / "profile")
    try:
        page = context.new_page()
        sidebar = page.locator('[data-testid="stSidebar"]')
        with load.served(ROOT / "artifacts" / "streamlit-restart-cookieless.log", env=env, port=port) as (base, process):
            page.goto(f"{base}/train?class={code}", wait_until="domcontentloaded")
            wait_until_done(page)
            sidebar.get_by_role("textbox", name="Your display name").fill("Bo")
            sidebar.get_by_role("button", name="Join", exact=True).click()
            sidebar.get_by_text("Write this rejoin code down now").wait_for(timeout=APPEARS_MS)
            rejoin = sidebar.locator('[data-testid="stCode"]').first.inner_text().strip()
            job = _train_until_killed(page, process, tmp_path)
        with load.served(ROOT / "artifacts" / "streamlit-restart-cookieless.again.log", env=env, port=port):
            sidebar.get_by_text("the server stopped during this run").wait_for(timeout=APPEARS_MS)  # no reload
            wait_until_done(page)
            assert sidebar.get_by_role("button", name=re.compile("Continue from step")).count() == 0  # someone new
            sidebar.get_by_role("textbox", name=re.compile("your rejoin code")).fill(rejoin)
            sidebar.get_by_role("button", name="Rejoin", exact=True).click()
            wait_until_done(page)
            _continue_and_stop(page, tmp_path, job)
        assert context.cookies() == []  # the profile did block them
    finally:
        context.close()
