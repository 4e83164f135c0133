"""End to end: the real app served by `streamlit run`, driven in headless Chromium.

Every page of the page list cold at 1024 px wide (the charts of those that need no model measured
there); at 1024×768 (a projector's; a wider window only gives a chart more room) every page that
needs a model with a pretrained checkpoint (reached by the sidebar's navigation, the model kept in
the URL) and every on-demand view, and in compare mode every view that draws the second model: every
chart at least 100 px tall and inside the window, no text cut short (the Lab's chapters are measured
as a student walks them, in test_lab_browser); a view's link copied with the Copy link button and
opened in a new browser context; training as a server job (the run goes on across page switches, the
finished model is selected, a reload keeps it) while a second browser's run waits in the queue
behind it (a cap of one run; both finish); a corrupt upload; a browser that blocks cookies is told
what a reload loses. No page may show a Streamlit
exception. Screenshots go to `artifacts/screenshots/` (override with SENSVIZ_SCREENSHOTS). Chromium
is Debian's (`apt-get install -y chromium`; `.ci/run` installs it), driven by the Python Playwright
package; no browser is downloaded.
"""

import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from helpers.browser import (  # noqa: E402
    APPEARS_MS,
    PROJECTOR,
    SHOTS,
    WIDE,
    chart_boxes,
    choose_upload,
    cookieless_context,
    load,
    misfits,
    screenshot,
    wait_until_done,
)

from ui import nav, owner_id, train_form  # noqa: E402

MODEL = "encoder-parity-n6"
PRESET = "PARITY, n = 8 (converges in seconds)"
QUICK_PRESET = "FIRST, n = 8"  # about 75 steps
PRESET_RUN = "parity-n8-encoder-d{d_model}-seed{seed}".format(**train_form.PRESETS[PRESET])  # the run's name
TRAINING_MS = 600_000  # a shared two-core machine: minutes, not seconds

pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.xdist_group("e2e")]  # conftest's server, once


@pytest.fixture(scope="module")
def visitor(browser):
    """One browser context (one user who keeps nothing) for the tests that only look, or whose uploads are
    refused, each on a page of its own: a context's first page costs Chromium seconds of CPU (its own
    cache: the app's scripts fetched and compiled again), a further page in it a fraction of that."""
    context = browser.new_context(viewport=WIDE)
    yield context
    context.close()


def check_page(page, name: str, whole: bool = True) -> None:
    """No exception, no missing page; a screenshot of the whole page, or of the window (`whole=False`:
    what a projector shows)."""
    wait_until_done(page)
    if whole:
        screenshot(page, name)
    else:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name}.png"))
    errors = page.locator('[data-testid="stException"]')
    assert errors.count() == 0, f"{name}: {errors.first.inner_text()[:500]}"
    assert page.get_by_text("Page not found").count() == 0, name


def sidebar_text(page) -> str:
    return page.locator('[data-testid="stSidebar"]').inner_text()


def goto_page(page, title: str) -> None:
    page.locator('[data-testid="stSidebarNav"] a').filter(has_text=title).first.click()
    page.wait_for_selector(f'h1:has-text("{title}")', timeout=APPEARS_MS)
    wait_until_done(page)


def test_every_page_opens_cold(server, visitor):
    """Every page of the page list, with no model selected: its heading, no exception; the charts of the
    pages that need no model fit the window (`misfits`: the width is the projector's; the pages that
    need one are measured with a model in `test_every_view_fits_the_window_with_one_model`)."""
    page = visitor.new_page()
    wrong = {}
    for spec in nav.PAGES:
        page.goto(f"{server}/{spec.url_path}", wait_until="domcontentloaded")
        check_page(page, f"cold-{spec.key}")
        assert page.locator("h1").first.inner_text() == spec.heading
        assert page.get_by_text(owner_id.COOKIES_BLOCKED).count() == 0  # this browser keeps cookies
        wrong[spec.key] = misfits(page)
    page.close()
    assert not {name: bad for name, bad in wrong.items() if bad}, wrong


def test_a_browser_that_keeps_no_cookies_is_told_what_a_reload_loses(server, browser, tmp_path):
    """A Chromium profile set to block every cookie (the content setting a school's managed browser may
    have): the sidebar says first that a reload makes this browser someone new, also after a reload."""
    context = cookieless_context(browser, tmp_path / "profile")
    try:
        page = context.new_page()
        for _ in range(2):  # the first visit, then a reload
            page.goto(f"{server}/", wait_until="domcontentloaded")
            wait_until_done(page)
            warning = page.locator('[data-testid="stSidebar"] [data-testid="stAlert"]').first
            assert warning.inner_text().strip() == owner_id.COOKIES_BLOCKED
        assert context.cookies() == []  # the profile did block them
    finally:
        context.close()


def test_a_copied_link_opens_the_same_view_in_another_browser(server, browser):
    context = browser.new_context(viewport=WIDE)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server)
    page = context.new_page()
    page.goto(f"{server}/sensitivity?model={MODEL}", wait_until="domcontentloaded")
    wait_until_done(page)
    page.get_by_role("radio", name="target", exact=True).click()
    wait_until_done(page)
    vertex = page.get_by_label("Vertex (0 … 63)")
    vertex.fill("9")
    vertex.press("Enter")
    page.wait_for_function("() => window.location.search.includes('vertex=9')", timeout=APPEARS_MS)
    wait_until_done(page)
    page.locator("button.sv-copy-link").click()
    page.wait_for_function("() => document.querySelector('button.sv-copy-link').textContent.includes('copied')")
    link = page.evaluate("navigator.clipboard.readText()")
    assert link == page.url and "colour=target" in link and "vertex=9" in link
    check_page(page, "link-source")
    context.close()

    other = browser.new_context(viewport=WIDE)  # another browser: no cookies, no session
    page = other.new_page()
    page.goto(link, wait_until="domcontentloaded")
    check_page(page, "link-opened")
    assert MODEL in sidebar_text(page)
    assert page.get_by_role("radio", name="target", exact=True).get_attribute("aria-checked") == "true"
    assert page.get_by_label("Vertex (0 … 63)").input_value() == "9"
    assert page.locator('[data-testid="stMetricValue"]').filter(has_text="001001").count() == 1
    other.close()


FITTED = "encoder-parity-n8"  # the largest cube of the zoo's models: the widest charts
COMPARED = "encoder-first-n8"
EXTRA_VIEWS = {"attention-flip": "attention?flip=2", "landscape-all": "landscape?curve=1&slice=1&plane=1&line=1",
               "layernorm-tradeoff": "layernorm?tradeoff=1", "sensitivity-output": "sensitivity?colour=output"}
"""Views with charts that a page draws only on demand."""


def views() -> dict[str, str]:
    """The start page, every page that needs a model, and the on-demand views (the other pages are
    measured cold in `test_every_page_opens_cold`, the Lab's chapters in test_lab_browser)."""
    return {spec.key: spec.url_path for spec in nav.PAGES if spec.needs_model or not spec.url_path} | EXTRA_VIEWS


def view_url(server: str, path: str, params: str) -> str:
    return f"{server}/{path}{'&' if '?' in path else '?'}{params}"


def walk_views(server: str, page, query: dict[str, str], shots: str) -> dict[str, list]:
    """`views()` at the projector's size from a link with `query` (`model=`, `compare=`): the pages by the
    sidebar's navigation (the query stays in the URL), the on-demand views by their links; no exception,
    the models named in the sidebar. Each view's `misfits`."""
    page.set_viewport_size(PROJECTOR)
    page.goto(f"{server}/?{urlencode(query)}", wait_until="domcontentloaded")
    wrong = {}
    for name, path in views().items():
        if "?" in path:
            page.goto(view_url(server, path, urlencode(query)), wait_until="domcontentloaded")
        elif path:
            goto_page(page, next(spec.title for spec in nav.PAGES if spec.url_path == path))
            assert all(f"{key}={value}" in page.url for key, value in query.items()), name  # kept across switches
        check_page(page, f"{shots}-1024x768-{name}", whole=False)
        assert all(model in sidebar_text(page) for model in query.values()), name
        wrong[name] = misfits(page)
    return wrong


@pytest.mark.slow
def test_every_view_fits_the_window_with_one_model(server, visitor):
    """Every page that needs a model and the on-demand views, from a link with `model=`: every chart at
    least 100 px tall and inside the window's width, no text cut short."""
    page = visitor.new_page()
    wrong = walk_views(server, page, {"model": FITTED}, "one")
    page.close()
    assert not {name: bad for name, bad in wrong.items() if bad}, wrong


@pytest.mark.slow
def test_every_view_of_two_models_fits_the_window_in_compare_mode(server, visitor):
    """The same views from a link with `model=` and `compare=` (each draws the second model, the start page's
    sidebar names both): both models stay selected; the charts fit as with one model."""
    page = visitor.new_page()
    wrong = walk_views(server, page, {"model": FITTED, "compare": COMPARED}, "compare")
    page.close()
    assert not {name: bad for name, bad in wrong.items() if bad}, wrong


def test_a_click_on_either_models_cube_selects_that_input(server, visitor):
    page = visitor.new_page()
    page.goto(f"{server}/sensitivity?model={MODEL}&compare=encoder-first-n6", wait_until="domcontentloaded")
    wait_until_done(page)
    chart_boxes(page)
    box = page.locator('[data-testid="stVegaLiteChart"]').first.locator("canvas, svg.marks").first.bounding_box()
    page.mouse.click(box["x"] + 0.75 * box["width"], box["y"] + 0.6 * box["height"])  # inside the second cube
    page.wait_for_function("() => /[?&]vertex=[1-9]/.test(window.location.search)", timeout=APPEARS_MS)
    wait_until_done(page)
    vertex = int(page.url.split("vertex=")[1].split("&")[0])
    bits = format(vertex, "06b")
    assert page.locator('[data-testid="stMetricValue"]').filter(has_text=bits).count() == 2  # the input, both models
    check_page(page, "compare-cube-clicked")
    page.close()


def fill_preset(page, preset: str = PRESET) -> None:
    """The Train page with a preset in its form."""
    page.goto(page.url.split("/train")[0].split("?")[0].rstrip("/") + "/train", wait_until="domcontentloaded")
    wait_until_done(page)
    page.locator('[data-testid="stSelectbox"]').filter(has_text="Preset").click()
    page.get_by_role("option").filter(has_text=preset).first.click()
    lr = f"{train_form.PRESETS[preset]['lr']:g}"
    page.wait_for_function("() => [...document.querySelectorAll('input')].some(e => e.getAttribute('aria-label') === "
                           f"'lr' && e.value === '{lr}')", timeout=APPEARS_MS)  # the preset reached the form
    wait_until_done(page)


def press_train(page) -> None:
    page.get_by_role("button", name="Train", exact=True).click()
    page.wait_for_function("() => window.location.search.includes('job=')", timeout=APPEARS_MS)


@pytest.mark.slow
def test_two_browsers_train_at_once_with_a_cap_of_one_and_a_run_outlives_its_page(server, browser):
    """The second browser's run waits in the queue behind the first's; the first run belongs to the
    server, not to the Train page: it goes on across page switches, a reload (the job id in the URL and
    the owner's cookie) reattaches to it, and the finished model is selected and kept by a reload. The
    second student closes their browser while their run waits; someone else watching it by its link does
    not count as them seeing it; when they come back (their cookie) their run's outcome is said, once."""
    first, second = browser.new_context(viewport=WIDE), browser.new_context(viewport=WIDE)
    a, b = first.new_page(), second.new_page()
    for page in (a, b):
        page.goto(server, wait_until="domcontentloaded")
        wait_until_done(page)
    fill_preset(a)
    fill_preset(b, QUICK_PRESET)  # it waits for a's run, then takes seconds
    press_train(a)
    press_train(b)
    b.locator('[data-testid="stSidebar"]').get_by_text("waits in the queue").wait_for(timeout=APPEARS_MS)
    assert "1st in line" in sidebar_text(b)
    check_page(b, "queued")
    b_job = dict(part.split("=", 1) for part in urlsplit(b.url).query.split("&"))["job"]
    b_cookies = second.storage_state()
    second.close()  # the student closes the browser while the run waits

    goto_page(a, "Sensitivity")
    assert "job=" in a.url
    a.locator('[data-testid="stSidebar"]').get_by_text("Training", exact=True).wait_for(timeout=APPEARS_MS)
    check_page(a, "training-elsewhere")
    a.reload(wait_until="domcontentloaded")
    wait_until_done(a)
    sidebar = a.locator('[data-testid="stSidebar"]')  # still running, or just finished: either way its own
    sidebar.get_by_text("Stop and keep what was learned").or_(sidebar.get_by_text("reached the target")).first.wait_for(
        timeout=APPEARS_MS)
    goto_page(a, "Attention")
    a.locator('[data-testid="stSidebar"]').get_by_text("reached the target").wait_for(timeout=TRAINING_MS)
    wait_until_done(a)
    assert "model=trained" in a.url and "job=" not in a.url
    assert "It is the selected model now" in sidebar_text(a)
    assert PRESET_RUN in sidebar_text(a)
    check_page(a, "trained-selected")
    a.reload(wait_until="domcontentloaded")  # a reload keeps the trained model
    check_page(a, "trained-reloaded")
    assert "model=trained" in a.url
    assert PRESET_RUN in sidebar_text(a) and "as_n model" in sidebar_text(a)
    assert "Delete this model" in sidebar_text(a)  # the browser's owner cookie: it is this user's model

    a.goto(f"{server}/sensitivity?job={b_job}", wait_until="domcontentloaded")  # a classmate follows it by its link
    a.locator('[data-testid="stSidebar"]').get_by_text("reached the target").wait_for(timeout=TRAINING_MS)
    for told in (True, False):  # the student back (the same cookie), then once more
        back = browser.new_context(viewport=WIDE, storage_state=b_cookies)
        page = back.new_page()
        page.goto(server, wait_until="domcontentloaded")
        wait_until_done(page)
        assert ("reached the target" in sidebar_text(page)) is told
        assert ("model=trained" in page.url) is told
        if told:
            assert "It is the selected model now" in sidebar_text(page)
            check_page(page, "back-after-the-run")
        back.close()
    first.close()


def refused(page, said: str, timeout: int) -> None:
    """A refused upload's line, in the sidebar under the uploader and above the page's content (a laptop's window
    shows the sidebar's below its fold)."""
    page.locator('[data-testid="stSidebar"]').get_by_text(said).wait_for(timeout=timeout)
    main = page.locator('[data-testid="stMain"]')
    main.get_by_text("Your upload was not used").wait_for(timeout=timeout)
    assert said in main.inner_text()


def test_a_corrupt_upload_in_the_browser(server, visitor, tmp_path):
    page = visitor.new_page()
    page.goto(f"{server}/?model={MODEL}", wait_until="domcontentloaded")
    wait_until_done(page)
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    page.locator('[data-testid="stSidebar"] button').filter(has_text="Upload").click()
    wait_until_done(page)
    page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(str(broken))
    refused(page, "cannot be used", APPEARS_MS)
    check_page(page, "upload-corrupt")
    assert "broken.safetensors" in sidebar_text(page) and f"Still showing {MODEL}" in sidebar_text(page)
    page.close()


# ----------------------------------------------------------------------------- hostile values in a real browser

DEAD_PORT = load.free_port()  # nothing listens there: a request to it would still show in the network log
HOSTS = ("evil.invalid", f"127.0.0.1:{DEAD_PORT}")
PAYLOAD = (f"[Log in again](https://evil.invalid/login) ![x](http://127.0.0.1:{DEAD_PORT}/md.png) "
           f"<img src=http://127.0.0.1:{DEAD_PORT}/tag.png> <a href=https://evil.invalid/a>a</a> "
           "https://evil.invalid/bare www.evil.invalid me@evil.invalid :red[alarm]")
HOSTILE_VIEWS = {"model": "sensitivity", "compare": "sensitivity", "colour": "sensitivity", "job": "attention",
                 "n": "layernorm", "experiment": "experiments", "chapter": "lab"}
"""Each link parameter, and the page it is opened on (with a model, except for `model` itself)."""
NAME = f"[a](https://evil.invalid/n)![x](http://127.0.0.1:{DEAD_PORT}/n.png)<img src=x onerror=alert(1)>.safetensors"


def watch_requests(page) -> list[str]:
    """Every URL the page requests from now on (the network log)."""
    requested = []
    page.on("request", lambda request: requested.append(request.url))
    return requested


def hostile(url: str) -> bool:
    """Whether an address points at one of the hostile hosts."""
    return urlsplit(url).netloc.lower().split("@")[-1] in HOSTS


def hostile_targets(page) -> list[str]:
    """Links, images and any other element whose address points at a hostile host."""
    found = page.evaluate("""() => [...document.querySelectorAll('[href], [src], [srcset], [action], [formaction]')]
        .flatMap(e => ['href', 'src', 'srcset', 'action', 'formaction'].filter(a => e.hasAttribute(a))
                      .map(a => { try { return new URL(e.getAttribute(a).trim().split(' ')[0], location.href).href; }
                                  catch (err) { return 'unparsed ' + e.getAttribute(a); } }))""")
    return [url for url in found if hostile(url) or (url.startswith("unparsed") and any(h in url for h in HOSTS))]


def assert_text_only(page, requested: list[str], name: str) -> None:
    check_page(page, name)
    assert hostile_targets(page) == [], name
    assert [url for url in requested if hostile(url)] == [], name


@pytest.mark.slow
def test_hostile_link_values_are_text_in_the_browser(server, visitor):
    page = visitor.new_page()
    requested = watch_requests(page)
    for param, path in HOSTILE_VIEWS.items():
        query = {"model": MODEL} if param != "model" else {}
        query[param] = PAYLOAD
        page.goto(f"{server}/{path}?{urlencode(query)}", wait_until="domcontentloaded")
        assert_text_only(page, requested, f"hostile-{param}")
        notice = page.locator('[data-testid="stAlertContentWarning"]').filter(has_text="[Log in again](https:")
        assert notice.count() == 1, param  # the value shown as typed, in one notice
    page.close()


@pytest.mark.slow
def test_bad_link_values_are_one_line_in_the_browser(server, visitor):
    page = visitor.new_page()
    for name, query in {"superscript": {"n": "²"}, "digits": {"n": "9" * 5000},
                        "long": {"colour": "c" * 20_000}}.items():
        page.goto(f"{server}/sensitivity?{urlencode({'model': MODEL, **query})}", wait_until="domcontentloaded")
        check_page(page, f"bad-{name}")
        warnings = page.locator('[data-testid="stAlertContentWarning"]')
        assert warnings.count() == 1 and len(warnings.first.inner_text()) < 400, name
    page.close()


METRICS_TTL_S = 5.5


def uploaded_bytes(server: str) -> int:
    """The bytes Streamlit's uploaded-file manager holds, from the server's own metrics (which it
    recomputes at most every 5 s: the reading waits that long first)."""
    time.sleep(METRICS_TTL_S)
    with urllib.request.urlopen(f"{server}/_stcore/metrics", timeout=30) as response:
        text = response.read().decode()
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
               if line.startswith("cache_memory_bytes") and "UploadedFileManager" in line)


@pytest.mark.slow
def test_a_hostile_upload_name_is_text_for_its_owner_and_whoever_opens_its_link(server, browser):
    import sensviz as sv

    model = sv.build_model("formal", d_model=8, n_heads=2, max_len=8, seed=1)
    data = sv.checkpoint_bytes(model, task="first", n=5)
    context = browser.new_context(viewport=WIDE)
    page = context.new_page()
    requested = watch_requests(page)
    page.goto(server, wait_until="domcontentloaded")
    wait_until_done(page)
    choose_upload(page, {"name": NAME, "mimeType": "application/octet-stream", "buffer": data})
    page.wait_for_function("() => window.location.search.includes('model=upload')", timeout=APPEARS_MS)
    wait_until_done(page)
    assert "[a](https:" in sidebar_text(page)  # the name as typed
    link = page.url
    for title in ("Sensitivity", "Attention", "LayerNorm", "Landscape"):
        goto_page(page, title)
        assert_text_only(page, requested, f"hostile-name-{title.lower()}")
    page.locator('[data-testid="stSidebarNav"] a').filter(has_text="Home").first.click()
    page.get_by_text("Selected:").wait_for(timeout=APPEARS_MS)
    assert_text_only(page, requested, "hostile-name-home")
    page.locator('[data-testid="stSidebar"] button').filter(has_text="My models").click()
    assert_text_only(page, requested, "hostile-name-mine")
    context.close()

    other = browser.new_context(viewport=WIDE)  # the shared link, in another browser
    page = other.new_page()
    requested = watch_requests(page)
    page.goto(link.replace("?", "sensitivity?", 1) if "/?" in link else link, wait_until="domcontentloaded")
    assert_text_only(page, requested, "hostile-name-shared")
    assert "[a](https:" in sidebar_text(page)
    other.close()


@pytest.mark.slow
def test_a_refused_upload_leaves_the_servers_memory(server, visitor, tmp_path):
    page = visitor.new_page()
    page.goto(f"{server}/?model={MODEL}", wait_until="domcontentloaded")
    wait_until_done(page)
    big = tmp_path / "big.safetensors"
    big.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all" + b"\x00" * 20 * 2**20)
    before = uploaded_bytes(server)
    choose_upload(page, big)
    refused(page, "cannot be used", 120_000)
    check_page(page, "upload-refused-big")
    assert uploaded_bytes(server) - before < 2**20  # the 20 MiB left the uploaded-file manager at once
    assert page.locator('[data-testid="stFileUploaderFile"]').count() == 0  # the uploader starts empty
    assert f"Still showing {MODEL}" in sidebar_text(page)
    page.close()


@pytest.mark.slow
def test_a_10000_character_file_name_is_one_line(server, visitor):
    """Streamlit's upload request carries the name in a multipart header, which its parser refuses at thousands of
    characters (an HTTP 400, which the uploader shows as "AxiosError"); the server's middleware
    (`ui.upload_names`) passes such a name on as one no file has, and the sidebar refuses it in one line that says
    why; the app and its model stay."""
    page = visitor.new_page()
    page.goto(f"{server}/?model={MODEL}", wait_until="domcontentloaded")
    wait_until_done(page)
    choose_upload(page, {"name": "n" * 10_000 + ".safetensors", "mimeType": "application/octet-stream",
                         "buffer": b"\x10\x00\x00\x00\x00\x00\x00\x00{not json"})
    refused(page, "its name is over 255 bytes", 120_000)
    wait_until_done(page)
    check_page(page, "upload-huge-name")
    assert "AxiosError" not in page.locator('[data-testid="stFileUploader"]').inner_text()
    assert f"Still showing {MODEL}" in sidebar_text(page)
    page.close()
