"""End to end: the real app served by `streamlit run`, every page visited in headless Chromium.

The app runs on a free loopback port; each page is opened cold (no model) and again with a
pretrained checkpoint chosen through the sidebar, like a user would. No page may show a Streamlit
exception. Screenshots go to `artifacts/screenshots/` (override with SENSVIZ_SCREENSHOTS).
Chromium is Debian's (`apt-get install -y chromium`; `.ci/run` installs it), driven by the
Python Playwright package; no browser is downloaded.
"""

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHOTS = Path(os.environ.get("SENSVIZ_SCREENSHOTS", ROOT / "artifacts" / "screenshots"))
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
PAGES = sorted(p.stem.split("_", 1)[1] for p in (ROOT / "pages").glob("*.py"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    port = free_port()
    (ROOT / "artifacts").mkdir(exist_ok=True)
    log = open(ROOT / "artifacts" / "streamlit-e2e.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"streamlit exited with {proc.returncode}; see artifacts/streamlit-e2e.log")
            try:
                with urllib.request.urlopen(base + "/_stcore/health", timeout=2) as response:
                    if response.read().strip() == b"ok":
                        break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.25)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        message = "the browser tests need Debian's chromium (apt-get install -y chromium; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


def wait_until_done(page, timeout_ms: int = 120_000) -> None:
    """The script run has ended and every lazily loaded element is drawn."""
    page.wait_for_selector('[data-testid="stApp"][data-test-connection-state="CONNECTED"]', timeout=timeout_ms)
    page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=timeout_ms)
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=stSkeleton],[data-testid=stAppSkeleton]')", timeout=timeout_ms
    )


def check_page(page, name: str) -> None:
    wait_until_done(page)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    errors = page.locator('[data-testid="stException"]')
    assert errors.count() == 0, f"{name}: {errors.first.inner_text()[:500]}"
    assert page.get_by_text("Page not found").count() == 0, name


def test_every_page_opens_cold(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 2400})
    page.goto(server + "/", wait_until="domcontentloaded")
    check_page(page, "cold-home")
    for name in PAGES:
        page.goto(f"{server}/{name}", wait_until="domcontentloaded")
        check_page(page, f"cold-{name}")
    page.close()


def test_every_page_with_a_pretrained_checkpoint(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 2400})
    page.goto(server + "/", wait_until="domcontentloaded")
    wait_until_done(page)
    page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').filter(has_text="Checkpoint").click()
    page.keyboard.type("parity · n=6 · encoder")  # the list is long: filter it as a user would
    page.get_by_role("option").filter(has_text="parity · n=6 · encoder").first.click()
    page.get_by_text("Analyse at input length n").wait_for(timeout=60_000)
    check_page(page, "selected-home")
    for name in PAGES:
        page.locator('[data-testid="stSidebarNav"] a').filter(has_text=name).first.click()
        page.wait_for_selector(f'h1:has-text("{name}")', timeout=60_000)
        check_page(page, f"selected-{name}")
    page.close()


def test_train_live_and_upload_in_the_browser(server, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1400, "height": 2400})
    page.goto(server + "/Train", wait_until="domcontentloaded")
    wait_until_done(page)
    steps = page.get_by_label("Steps", exact=True)
    steps.fill("200")
    steps.press("Enter")
    page.get_by_role("button", name="Train").click()
    page.get_by_text("completed after 200 steps").wait_for(timeout=120_000)
    check_page(page, "trained-Train")
    assert page.get_by_text("measurements during training").count() > 0

    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    page.locator('[data-testid="stSidebar"] button').filter(has_text="Upload").click()
    wait_until_done(page)
    page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(str(broken))
    page.get_by_text("cannot be used").wait_for(timeout=60_000)
    check_page(page, "upload-corrupt")
    page.close()
