"""`streamlit run app.py`: the explorer's server warmed before it answers (`ui.serve.lifespan`). Each Lab chapter's first view is
drawn once, before the first session, in the store the sessions then read (not again in their runs)."""

import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import load  # noqa: E402
from conftest import signal_handlers_restored  # noqa: E402

from sensviz import lab  # noqa: E402


@pytest.mark.server
def test_a_warmed_server_draws_each_chapter_before_it_answers_and_once():
    log_path = ROOT / "artifacts" / "streamlit-serve.log"
    env = {"SENSVIZ_LOG": "INFO", "SENSVIZ_DATA_DIR": tempfile.mkdtemp(prefix="sensviz-serve-")}
    with load.served(log_path, env=env, timeout=600) as (base, _proc):
        before = log_path.read_text()  # what it did before it answered
        runs = load.open_many(base, [f"lab?chapter={ch.number}" for ch in lab.CHAPTERS], timeout=600)
    assert all(r.ok for r in runs), [(r.url, r.status, r.exceptions[:1]) for r in runs if not r.ok]
    assert "sensviz: warmed up in" in before
    drawn_before = re.findall(r"computed (_lab_specs\(.*\)) in ", before)
    assert len(drawn_before) >= 2 * len(lab.CHAPTERS)  # every chapter's first view, blind and shown
    computed = Counter(re.findall(r"computed (_lab_specs\(.*\)) in ", log_path.read_text()))
    assert computed and max(computed.values()) == 1, computed.most_common(3)  # the sessions read the same store


def test_a_failed_warm_up_is_logged_and_the_server_starts_anyway(monkeypatch, caplog):
    import asyncio

    from ui import serve

    def broken():
        raise RuntimeError("no lab data")

    async def start():
        async with serve.lifespan(None):
            return "serving"

    monkeypatch.setattr(serve, "warm", broken)
    with signal_handlers_restored():  # the start-up installs the server's own SIGTERM and SIGINT handlers
        assert asyncio.run(start()) == "serving"
    assert "the warm-up failed" in caplog.text and "no lab data" in caplog.text


def test_pages_compute_on_one_torch_thread_whatever_torchs_default():
    """Importing the cache layer sets torch to one thread (`ui.cache.page_threads`) where it had four;
    $SENSVIZ_PAGE_THREADS sets another count."""
    script = ("import torch; torch.set_num_threads(4); before = torch.get_num_threads(); import ui.cache; "
              "print(before, torch.get_num_threads())")
    env = {k: v for k, v in os.environ.items() if k != "SENSVIZ_PAGE_THREADS"}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["4", "1"]


def test_the_page_threads_setting(monkeypatch):
    from ui import cache

    monkeypatch.setenv("SENSVIZ_PAGE_THREADS", "3")
    assert cache.page_threads() == 3
    for bad in ("0", "two", "-1", "1.5"):
        monkeypatch.setenv("SENSVIZ_PAGE_THREADS", bad)
        with pytest.raises(ValueError, match="SENSVIZ_PAGE_THREADS must be a whole number of threads, 1 or more"):
            cache.page_threads()
