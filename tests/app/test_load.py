"""The explorer under load, without browsers: 30 sessions open the same model's pages at once by
URL against a real `streamlit run app.py` (websocket clients, `benchmarks/load.py`). Every run
finishes without an exception, the model is loaded and each result computed once, and the slowest
session's time is reported (artifacts/load-test.txt)."""

import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import load  # noqa: E402

SESSIONS = 30
PAGES = ["sensitivity", "attention", "layernorm", "landscape", "", "train"]  # "": the home page
MODEL = "encoder-parity-n8"
CEILING_S = 900  # a shared two-core machine: minutes, not seconds


@pytest.mark.server
def test_thirty_sessions_open_the_same_models_pages_at_once():
    log_path = ROOT / "artifacts" / "streamlit-load.log"
    env = {"SENSVIZ_LOG": "INFO", "SENSVIZ_DATA_DIR": tempfile.mkdtemp(prefix="sensviz-load-")}
    urls = [f"{PAGES[i % len(PAGES)]}?model={MODEL}" for i in range(SESSIONS)]
    with load.serve(log_path, env=env) as base:
        load.open_many(base, ["about"])  # the server imports its modules once, before the crowd arrives
        runs = load.open_many(base, urls, timeout=CEILING_S)
    failed = [(r.url, r.status, r.exceptions) for r in runs if not r.ok]
    assert not failed, failed
    for run in runs:
        assert "No model selected yet" not in " ".join(run.texts), run.url
        assert any(t.startswith("as_n model: ") for t in run.texts), run.url  # the model's summary was drawn
    log = log_path.read_text()
    loads = re.findall(rf"loaded ({MODEL}\S*)", log)
    computed = Counter(re.findall(r"computed (\S+\(.*\)) in ", log))
    assert len(loads) == 1, loads  # one model, loaded once for 30 sessions
    assert computed and max(computed.values()) == 1, computed.most_common(3)  # every result computed once
    slowest = max(runs, key=lambda r: r.seconds)
    pages = ", ".join(p or "home" for p in PAGES)
    report = (f"{SESSIONS} sessions at once ({pages} of {MODEL}): all finished; slowest {slowest.seconds:.1f} s "
              f"({slowest.url}), median {sorted(r.seconds for r in runs)[SESSIONS // 2]:.1f} s; "
              f"{sum(computed.values())} results computed once each")
    (ROOT / "artifacts" / "load-test.txt").write_text(report + "\n")
    print(report)
