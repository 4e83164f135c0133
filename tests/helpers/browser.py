"""The served app in headless Chromium: wait for a script run to end, take a whole-page screenshot,
find charts that do not fit and texts cut short, upload a file in the sidebar. `load` (the
benchmarks' module) serves the app."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import load  # noqa: E402, F401  (the tests serve the app with load.serve)

SHOTS = Path(os.environ.get("SENSVIZ_SCREENSHOTS", ROOT / "artifacts" / "screenshots"))
WIDE = {"width": 1024, "height": 2400}  # a projector's width; tall, so a screenshot shows the whole page
PROJECTOR = {"width": 1024, "height": 768}
APPEARS_MS = 180_000  # a ceiling for something to appear: the live parts look every 3 s, but a busy two-core
# machine (the full suite beside a niced sweep) has taken over a minute; a passing test never waits it out


def cookieless_context(browser, profile: Path):
    """A Chromium context whose profile (made in the folder `profile`) blocks every cookie: the content setting
    a school's managed browser may have. Close it when done."""
    import json

    from conftest import CHROMIUM, CHROMIUM_ARGS

    (profile / "Default").mkdir(parents=True)
    (profile / "Default" / "Preferences").write_text(
        json.dumps({"profile": {"default_content_setting_values": {"cookies": 2}}}))  # 2: block
    return browser.browser_type.launch_persistent_context(
        str(profile), executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, viewport=WIDE)


def wait_until_done(page, timeout_ms: int = 240_000) -> None:
    """The script run has ended and every lazily loaded element is drawn. A freshly loaded page reads
    "notRunning" before its first run starts, so the page's title (every page's first element, drawn by
    the frame; hidden in the Class page's projector mode) is waited for first."""
    page.wait_for_selector('[data-testid="stApp"][data-test-connection-state="CONNECTED"]', timeout=timeout_ms)
    page.wait_for_selector('[data-testid="stMain"] h1', state="attached", timeout=timeout_ms)  # projector mode hides it
    page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=timeout_ms)
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=stSkeleton],[data-testid=stAppSkeleton]')", timeout=timeout_ms
    )


def screenshot(page, name: str) -> None:
    """The whole page at the window's width: Streamlit scrolls inside the page, so the window is made as
    tall as its content for the picture, then put back."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    size = page.viewport_size
    tall = page.evaluate("""() => Math.max(...[...document.querySelectorAll(
        '[data-testid="stMain"], [data-testid="stAppViewContainer"], [data-testid="stSidebarContent"]')]
        .map(e => e.scrollHeight), window.innerHeight)""")
    if tall > size["height"]:
        page.set_viewport_size({"width": size["width"], "height": min(tall, 16_000)})
        page.wait_for_timeout(300)  # one frame for Vega to redraw at the new size
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    page.set_viewport_size(size)


def chart_boxes(page) -> list[dict]:
    """Every drawn chart (its canvas or svg, once Vega has drawn it): its label and where it is on the page."""
    page.wait_for_function(
        """() => [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')]
                 .every(c => c.querySelector('canvas, svg.marks'))""", timeout=120_000)
    return page.evaluate(
        """() => [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')].map(c => {
                 const drawn = c.querySelector('canvas, svg.marks').getBoundingClientRect();
                 const title = c.closest('[data-testid="stVerticalBlock"]')?.querySelector('h3')?.innerText;
                 return {label: c.getAttribute('aria-label') || title || 'chart', left: Math.round(drawn.left),
                         right: Math.round(drawn.right), width: Math.round(drawn.width),
                         height: Math.round(drawn.height)};
               })""")


def cut_short(page) -> list[str]:
    """Texts shown cut short with an ellipsis (a label, a metric's value, a select box's choice), and number
    widgets too narrow for their value (a four-column Train form at 1024 px showed "30" for 3000)."""
    return page.evaluate(
        """() => [...[...document.querySelectorAll('[data-testid="stApp"] *')]
             .filter(e => e.offsetParent !== null && getComputedStyle(e).textOverflow === 'ellipsis'
                          && e.scrollWidth > e.clientWidth + 1 && e.innerText.trim())
             .map(e => e.innerText.trim().slice(0, 80)),
             ...[...document.querySelectorAll('[data-testid="stNumberInput"] input')]
             .filter(e => e.offsetParent !== null && e.value && e.scrollWidth > e.clientWidth + 1)
             .map(e => `${e.getAttribute('aria-label')} = ${e.value}`)]""")


def misfits(page) -> list:
    """Charts under 100 px tall or outside the window's width, and texts cut short."""
    bad = [b for b in chart_boxes(page) if b["height"] < 100 or b["left"] < 0 or b["right"] > PROJECTOR["width"]]
    return bad + [f"cut short: {text}" for text in cut_short(page)]


def choose_upload(page, path: Path | dict) -> None:
    """Upload a file (a path, or a Playwright file payload) in the sidebar."""
    if page.locator('[data-testid="stFileUploader"]').count() == 0:
        page.locator('[data-testid="stSidebar"] button').filter(has_text="Upload").click()
        wait_until_done(page)
    page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(path)
