"""A server restart in the middle of a student's run, in Chromium, as the student lives it: they press Train, the
server is killed after the run's first snapshot and started again on the same address; the open page reconnects
by itself, says the server stopped during the run and offers "Continue from step k"; one click goes on from
there (not from step 0), and the button is gone after it."""

import json
import re
import signal
import time
from urllib.parse import parse_qs, urlsplit

import pytest
from helpers.browser import APPEARS_MS, ROOT, WIDE, load, screenshot, wait_until_done

from server import worker

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


def test_a_student_continues_a_run_a_restart_stopped_from_the_open_page(browser, tmp_path):
    env = {"SENSVIZ_DATA_DIR": str(tmp_path), "SENSVIZ_MAX_JOBS": "1"}
    port = load.free_port()
    page = browser.new_context(viewport=WIDE).new_page()
    with load.served(ROOT / "artifacts" / "streamlit-restart-browser.log", env=env, port=port) as (base, process):
        page.goto(f"{base}/train", wait_until="domcontentloaded")
        wait_until_done(page)
        page.locator('[data-testid="stSelectbox"]').filter(has_text="Preset").click()
        page.get_by_role("option").filter(has_text=PRESET).first.click()
        wait_until_done(page)
        page.get_by_role("button", name="Train", exact=True).click()
        page.wait_for_function("() => window.location.search.includes('job=')", timeout=APPEARS_MS)
        job = parse_qs(urlsplit(page.url).query)["job"][0]
        _wait(lambda: (tmp_path / "jobs" / job / worker.SNAPSHOT).is_file(), "the run never wrote a snapshot")
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=CEILING_S)
    with load.served(ROOT / "artifacts" / "streamlit-restart-browser.again.log", env=env, port=port):
        sidebar = page.locator('[data-testid="stSidebar"]')
        sidebar.get_by_text("the server stopped during this run").wait_for(timeout=APPEARS_MS)  # no reload
        step = _state(tmp_path / "jobs" / job)["resume_step"]
        button = sidebar.get_by_role("button", name=f"Continue from step {step:,}")
        button.wait_for(timeout=APPEARS_MS)
        wait_until_done(page)
        screenshot(page, "restart-continue")
        button.click()
        again = _wait(lambda: _state(tmp_path / "jobs" / job).get("rerun"), "the click queued no run")
        progress = tmp_path / "jobs" / again / "progress.json"
        first = _wait(lambda: progress.is_file() and json.loads(progress.read_text() or "{}").get("step"),
                      "the continued run never reported a step")
        assert first > step, (first, step)  # it went on from the snapshot, not from step 0
        stop = sidebar.get_by_role("button", name="Stop and keep what was learned")
        stop.wait_for(timeout=APPEARS_MS)  # the page follows the continued run
        assert sidebar.get_by_role("button", name=re.compile("Continue from step")).count() == 0
        stop.click()
        _wait(lambda: _state(tmp_path / "jobs" / again)["state"] == "stopped", "Stop did not stop the run")
