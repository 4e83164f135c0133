"""The explorer's speed as a user meets it, printed as a table (a benchmark, not a test).

    python benchmarks/explorer.py                 # every page at n = 8 and n = 10, and the PARITY preset
    python benchmarks/explorer.py --no-train      # the pages only
    python benchmarks/explorer.py --train-only    # the PARITY preset only
    python benchmarks/explorer.py --threads       # the pages' torch threads: 1 (the server's) against one per core

Serves `app.py` (`streamlit run`, a fresh data folder) and, for `encoder-parity-n8` and
`encoder-parity-n10`, opens every page by URL in a fresh websocket session (`benchmarks/load.py`)
on a cold server cache (cleared before each page; the server's modules are imported once before
the first page), then re-renders it in the same session (cached); the same for each Lab chapter.
Times are from sending the request to the end of the script run; targets: first render <= 2 s,
cached <= 0.3 s. Then, in headless Chromium, the time from pressing Train with the PARITY n = 8
preset to the converged model being selected in the sidebar (target <= 8 s): pressed once as soon
as the fresh server answers (its start-up work, the job manager's calibration and launcher,
still running beside it) and, once the server and its child processes are idle (`settled`),
`SETTLED_PRESSES` times, each in a fresh browser session once the server has settled again (each
run's process is forked from the launcher, which stays): the target is on these, the
wait of a student on a class server that is already up. The machine's load average is printed with the
table: these numbers depend on what else runs.

`--threads`: the Landscape page's on-demand views (the rho curve, the 1-D and 2-D slices, the line)
for `encoder-parity-n8` on a fresh server whose pages compute on one torch thread (the server's
default, `ui.cache.page_threads`) and on one per core (torch's own default, its threads spinning
between operations): the wall seconds of the page and the server's CPU seconds meanwhile. Run it on
an idle machine and beside a busy one (a sweep): spinning costs most when the cores are shared.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import lab_render  # noqa: E402
import load  # noqa: E402

from ui import nav, train_form  # noqa: E402

MODELS = ("encoder-parity-n8", "encoder-parity-n10")
FIRST_TARGET_S, CACHED_TARGET_S, TRAIN_TARGET_S = 2.0, 0.3, 8.0
SETTLED_PRESSES = 3
PRESET = "PARITY, n = 8 (converges in seconds)"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def time_pages(base: str, model: str) -> list[tuple[str, float, float, bool]]:
    """Per page: (name, first render on a cold cache, cached re-render, no exception)."""
    import asyncio

    rows = []
    for spec in nav.PAGES:
        load.clear_caches(base)
        first, cached = asyncio.run(load.open_once(base, f"{spec.url_path}?model={model}", reruns=1))
        rows.append((spec.key, first.seconds, cached.seconds, first.ok and cached.ok))
    return rows


def time_chapters(base: str) -> list[tuple[int, float, float, bool]]:
    """Per Lab chapter (`lab?chapter=k`, its own models): (k, first render on a cold cache, cached, no exception)."""
    import asyncio

    from sensviz.lab import CHAPTERS

    rows = []
    for k in range(1, len(CHAPTERS) + 1):
        load.clear_caches(base)
        first, cached = asyncio.run(load.open_once(base, f"lab?chapter={k}", reruns=1))
        rows.append((k, first.seconds, cached.seconds, first.ok and cached.ok))
    return rows


def time_training(base: str) -> float:
    """Seconds from pressing Train (the PARITY n = 8 preset) to the converged model selected."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1600})
        page.goto(f"{base}/train", wait_until="domcontentloaded")
        page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=120_000)
        page.locator('[data-testid="stSelectbox"]').filter(has_text="Preset").click()
        page.get_by_role("option").filter(has_text=PRESET).first.click()
        lr = f"{train_form.PRESETS[PRESET]['lr']:g}"
        page.wait_for_function("() => [...document.querySelectorAll('input')].some(e => e.getAttribute('aria-label') "
                               f"=== 'lr' && e.value === '{lr}')", timeout=60_000)  # the preset reached the form
        page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=120_000)
        start = time.perf_counter()
        page.get_by_role("button", name="Train", exact=True).click()
        page.locator('[data-testid="stSidebar"]').get_by_text("It is the selected model now").wait_for(timeout=600_000)
        seconds = time.perf_counter() - start
        message = page.locator('[data-testid="stSidebar"] [data-testid="stAlertContentSuccess"]').inner_text()
        browser.close()
    print(f"  {message.strip()}")
    return seconds


ON_DEMAND = "landscape?model=encoder-parity-n8&curve=1&slice=1&plane=1&line=1"


def tree_cpu_seconds(pid: int) -> float:
    """The CPU seconds of a process and of every process under it that still runs (its job workers,
    a calibration), from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            total += lab_render.cpu_seconds(current)
        except OSError:
            continue
        todo += children.get(current, [])
    return total


def settled(pid: int, quiet_s: float = 0.05, every_s: float = 1.0, timeout_s: float = 300) -> None:
    """Wait until the server's background work is over (its own and its child processes': the job
    manager's calibration and launcher): less than `quiet_s` CPU in `every_s`."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        before = tree_cpu_seconds(pid)
        time.sleep(every_s)
        if tree_cpu_seconds(pid) - before < quiet_s:
            return


def time_on_demand(threads: int) -> tuple[float, float, bool]:
    """`ON_DEMAND` on a fresh server computing on `threads` torch threads, its plain page drawn first:
    (wall s, the server's CPU s meanwhile, no exception)."""
    env = {"SENSVIZ_DATA_DIR": tempfile.mkdtemp(prefix="sensviz-bench-"), "SENSVIZ_PAGE_THREADS": str(threads)}
    with load.served(ROOT / "artifacts" / "streamlit-bench.log", env=env) as (base, proc):
        load.open_many(base, [ON_DEMAND.split("&")[0]])
        settled(proc.pid)
        before = lab_render.cpu_seconds(proc.pid)
        (run,) = load.open_many(base, [ON_DEMAND])
        return run.seconds, lab_render.cpu_seconds(proc.pid) - before, run.ok


def print_threads() -> bool:
    """The torch-threads table; whether both servers drew the page."""
    cores = os.cpu_count() or 1
    print(f"{ON_DEMAND} (after its plain page), a fresh server each")
    print(f"{'torch threads':<28} {'wall s':>7} {'server CPU s':>13}")
    ok = True
    for threads, name in ((1, "1 (the server's)"), (cores, f"{cores} (torch's default)")):
        wall, cpu, fine = time_on_demand(threads)
        ok &= fine
        print(f"{name:<28} {wall:7.2f} {cpu:13.2f}" + ("" if fine else " EXCEPTION"))
    return ok


def print_pages(results: dict, chapters: list) -> bool:
    """The pages' and chapters' table; whether every render was within its target."""
    header = f"{'page':<12}" + "".join(f" {m.removeprefix('encoder-'):>17} first  cached" for m in MODELS)
    print(header)
    print("-" * len(header))
    ok = True
    for i, spec in enumerate(nav.PAGES):
        line = f"{spec.key:<12}"
        for model in MODELS:
            _, first, cached, fine = results[model][i]
            ok &= fine and first <= FIRST_TARGET_S and cached <= CACHED_TARGET_S
            line += f" {'':>17} {first:5.2f}  {cached:6.2f}" + ("" if fine else " EXCEPTION")
        print(line)
    print("Lab chapter " + "  ".join(f"{k}: {first:.2f} / {cached:.2f}" + ("" if fine else " EXCEPTION")
                                     for k, first, cached, fine in chapters) + "  (first render / cached, s)")
    ok &= all(fine and first <= FIRST_TARGET_S and cached <= CACHED_TARGET_S for _, first, cached, fine in chapters)
    worst_first = max(r[1] for rows in results.values() for r in rows)
    worst_cached = max(r[2] for rows in results.values() for r in rows)
    print(f"slowest first render {worst_first:.2f} s (target {FIRST_TARGET_S} s), "
          f"slowest cached {worst_cached:.2f} s (target {CACHED_TARGET_S} s)")
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--no-train", action="store_true", help="time the pages only")
    which.add_argument("--train-only", action="store_true", help="time the PARITY preset only")
    which.add_argument("--threads", action="store_true", help="the pages' torch threads: 1 against one per core")
    args = parser.parse_args(argv)
    if args.threads:
        return 0 if print_threads() else 1
    load_before = os.getloadavg()
    env = {"SENSVIZ_DATA_DIR": tempfile.mkdtemp(prefix="sensviz-bench-")}
    with load.served(ROOT / "artifacts" / "streamlit-bench.log", env=env) as (base, proc):
        load.open_many(base, ["about"])  # import the server's modules once
        first_train_s = None if args.no_train else time_training(base)  # its start-up still running
        results = {} if args.train_only else {model: time_pages(base, model) for model in MODELS}
        chapters = [] if args.train_only else time_chapters(base)
        train_s = []
        for _ in range(0 if args.no_train else SETTLED_PRESSES):
            settled(proc.pid)
            train_s.append(time_training(base))
    load_after = os.getloadavg()

    ok = print_pages(results, chapters) if results else True
    if train_s:
        ok &= max(train_s) <= TRAIN_TARGET_S
        print(f"Train, PARITY n = 8 preset -> converged model selected (target {TRAIN_TARGET_S} s): "
              f"{', '.join(f'{s:.1f}' for s in train_s)} s, each pressed once the server had settled; "
              f"{first_train_s:.1f} s pressed as soon as the fresh server answered (its start-up's calibration, "
              "launcher and imports still running)")
    print(f"load average (1, 5, 15 min) before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}, on {os.cpu_count()} cores")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
