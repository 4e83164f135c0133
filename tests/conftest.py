"""Shared fixtures: small seeded models of both architectures; a Ray that starts and stops without
leaving its signal handlers behind; Chromium and the served app of the browser tests; the markers
that say what a test needs (each one also `slow`); and the rule of the layers.

The tests live by layer: `tests/core` (the science library: no Streamlit, no other process, no
server, no training beyond `CORE_MAX_STEPS` steps, nothing slow; `python -m pytest tests/core` is the
unit run, on two processes by pyproject's addopts), `tests/server` (the class server, its job
processes, locks and Ray), `tests/app` (the explorer under AppTest or served, and the command line
as a process), `tests/browser` (the served app in Chromium). What they share is in `tests/helpers/`;
no test file imports another.
"""

import ast
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from helpers.core import probe_value

import sensviz as sv
import sensviz.measure

# One thread: the tests' models are tiny, and torch's second thread costs more than it gives on them
# (on a busy machine, many times more); the training worker makes the same choice for small runs.
torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]

NEEDS = ("browser", "ray", "server")
"""Markers that name what a test needs beyond this process; every one of them also counts as `slow`,
so `pytest -m "not slow"` is the fast subset of unit and AppTest tests."""


LAYERS = ("core", "server", "app", "browser")
CORE_MAX_STEPS = 500
"""The most training steps a core test's run may take (a few hundred: a unit test, not an experiment)."""
CORE_FORBIDDEN = ("streamlit", "server", "ui", "subprocess", "multiprocessing", "concurrent", "playwright", "ray")
"""What a core test module may not import: the app, the class server, other processes, a browser."""


def layer(item) -> str | None:
    """The layer a test belongs to: the folder under tests/ its file is in."""
    path = Path(item.fspath)
    if not path.is_relative_to(ROOT / "tests"):
        return "elsewhere"  # a test this conftest was copied beside (test_harness)
    parts = path.relative_to(ROOT / "tests").parts
    return parts[0] if len(parts) > 1 and parts[0] in LAYERS else None


def breaches(path: Path, core: bool) -> list[str]:
    """The rules' breaches visible in a test module's source: an import of another test module (every
    layer); in core, forbidden imports and slow markers."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        found += [f"imports the test module {name}" for name in names if name.startswith("test_")]
        if not core:
            continue
        found += [f"imports {name}" for name in names if name.split(".")[0] in CORE_FORBIDDEN]
        if isinstance(node, ast.Attribute) and node.attr in ("slow", *NEEDS) and \
                isinstance(node.value, ast.Attribute) and node.value.attr == "mark":
            found.append(f"is marked {node.attr}")
    return found


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Before `-m` selects: a test marked with one of `NEEDS` is also marked `slow`; every test is in a
    layer, and a core test module keeps the core rule (else the run stops, naming the breach)."""
    checked: dict[Path, list[str]] = {}
    for item in items:
        if any(item.get_closest_marker(name) for name in NEEDS) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
        where = layer(item)
        if where is None:
            raise pytest.UsageError(f"{item.nodeid}: a test belongs in one of tests/{{{','.join(LAYERS)}}}")
        path = Path(item.fspath)
        if path not in checked:
            checked[path] = breaches(path, core=where == "core")
            if checked[path]:
                raise pytest.UsageError(f"{path.relative_to(ROOT)} breaks the rule of the layers: "
                                        f"{', '.join(checked[path])}")


@pytest.fixture(autouse=True)
def after_the_warm_up():
    """A test starts once the explorer's background warm-up (`ui.cache.warm_up`, which an app test starts once per
    process) has ended: Streamlit converts its charts by switching Altair's global data transformer, so a test's
    `chart.to_dict()` meanwhile could come back without its data (seen as a core Lab test failing beside an app test
    on one xdist worker)."""
    for thread in threading.enumerate():
        if thread.name == "sensviz-warm-up":
            thread.join(timeout=300)


@pytest.fixture(autouse=True)
def core_rule(request, monkeypatch):
    """While a core test runs: no process is started, and no training run goes past `CORE_MAX_STEPS`."""
    if layer(request.node) != "core":
        yield
        return

    def refuse(*args, **kwargs):
        raise AssertionError("a core test starts no process (tests/server or tests/app hold those)")

    import subprocess

    from sensviz import training

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)
    monkeypatch.setattr(os, "fork", refuse)
    run = training._run

    def bounded(*args, **kwargs):
        results = run(*args, **kwargs)
        steps = max(r.steps for r in results)
        assert steps <= CORE_MAX_STEPS, f"a core test trained {steps} steps (at most {CORE_MAX_STEPS})"
        return results

    monkeypatch.setattr(training, "_run", bounded)
    yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report on its test (`item.failed_call`), for fixtures that look at the outcome."""
    report = yield
    if report.when == "call" and report.failed:
        item.failed_call = True
    return report


@pytest.fixture(autouse=True)
def pages_kept_when_failed(request):
    """A browser test that fails leaves a screenshot and the text of every page it still has open
    (`artifacts/screenshots/FAILED-<test>-<n>.png` and `.txt`): what the browser showed when it gave up."""
    yield
    if not getattr(request.node, "failed_call", False) or "browser" not in request.fixturenames:
        return
    shots = ROOT / "artifacts" / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    stem = "FAILED-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in request.node.name)[:120]
    pages = [page for context in request.getfixturevalue("browser").contexts for page in context.pages]
    for number, page in enumerate(pages):
        try:
            page.screenshot(path=str(shots / f"{stem}-{number}.png"), full_page=True)
            (shots / f"{stem}-{number}.txt").write_text(f"{page.url}\n\n{page.inner_text('body')}")
        except Exception as err:  # noqa: BLE001 - a page that cannot be read any more: say so, keep the others
            (shots / f"{stem}-{number}.txt").write_text(f"{page.url}\n\nnot readable: {err}")


@pytest.fixture
def encoder_model():
    return sv.build_model("encoder", d_model=16, n_layers=2, n_heads=2, max_len=12, seed=0)


@pytest.fixture
def formal_model():
    return sv.build_model("formal", d_model=8, n_layers=2, n_heads=2, max_len=12, seed=0)


@pytest.fixture(params=["encoder", "formal"])
def any_model(request, encoder_model, formal_model):
    return encoder_model if request.param == "encoder" else formal_model


SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def signal_handlers_restored():
    """Puts back the SIGTERM and SIGINT handlers found on entry: `ray.init` installs its own SIGTERM
    handler (`sys.exit`) in the driver and `ray.shutdown` leaves it, so a later signal would surface
    as `SystemExit` inside an unrelated test."""
    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    try:
        yield before
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


@pytest.fixture(scope="session")
def ray_module():
    """The ray module; skipped, saying why, only where Ray is not installed (requirements-dev.txt installs
    it). No Ray is started ahead to see whether one can start (a local instance costs seconds of CPU):
    a Ray that cannot start fails the test that starts it."""
    return pytest.importorskip("ray", reason="Ray is not installed (requirements-dev.txt installs it)")


@pytest.fixture
def ray(ray_module):
    """The ray module for one test; afterwards no Ray instance is left running and the process's
    SIGTERM/SIGINT handlers are those from before the test."""
    with signal_handlers_restored():
        try:
            yield ray_module
        finally:
            if ray_module.is_initialized():
                ray_module.shutdown()


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium through Playwright, launched once per test module (each test opens contexts of its
    own; Playwright's sync API runs an event loop in this thread while it lives, which asyncio.run in a
    later module's test refuses); missing, it fails the test under CI and skips it elsewhere, saying how
    to install it."""
    if not Path(CHROMIUM).exists():
        message = "the browser tests need Debian's chromium (apt-get install -y chromium; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="session")
def server():
    """The app served by `streamlit run` (its own data folder, one run at a time) for the browser tests
    of test_e2e and test_lab_browser: one xdist group, so it is started once. Its base URL."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import load

    env = {"SENSVIZ_DATA_DIR": tempfile.mkdtemp(prefix="sensviz-e2e-"), "SENSVIZ_MAX_JOBS": "1"}
    with load.serve(ROOT / "artifacts" / "streamlit-e2e.log", env=env) as base:
        yield base


def offline(page) -> list[str]:
    """Let `page` load local files only: every other request is refused, and its URL recorded in the list
    returned (for a page that must work offline: empty once the page has loaded)."""
    remote = []

    def route(request_route):
        if request_route.request.url.startswith("file:"):
            return request_route.continue_()
        remote.append(request_route.request.url)
        return request_route.abort()

    page.route("**/*", route)
    return remote


def in_processes(work, count: int = 2, ceiling_s: float = 120) -> None:
    """`work(i)` for i in range(count), each in a process of its own (forked), let go together; each
    must return normally. For what several processes on one data folder (web servers, the Ray queue's
    actor) do at once."""
    context = multiprocessing.get_context("fork")
    start = context.Barrier(count)

    def run(i: int) -> None:
        start.wait()
        work(i)

    processes = [context.Process(target=run, args=(i,)) for i in range(count)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(ceiling_s)
    for process in processes:
        if process.is_alive():  # past the ceiling: ended, and reported by the assert below
            process.kill()
            process.join()
    assert [process.exitcode for process in processes] == [0] * count


_MAIN = sys.modules["__main__"]


@pytest.fixture(autouse=True)
def restore_main_module():
    """AppTest runs the app as Streamlit does, leaving its script as `__main__`; restore pytest's
    afterwards, or a process spawned later (a sweep's workers) would re-run the app on import."""
    yield
    sys.modules["__main__"] = _MAIN


@pytest.fixture
def probe():
    """The quantity `probe` (instant, in the default set), registered for one test only."""
    assert "probe" not in sv.measure.QUANTITIES
    sv.measure.quantity("probe", lambda value: {"probe_value": value}, cost="instant")(lambda ctx: probe_value(ctx.model))
    try:
        yield
    finally:
        del sv.measure.QUANTITIES["probe"]
