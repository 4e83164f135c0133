"""An explorer session under Streamlit's AppTest: open a page by its URL, switch pages, read notices,
train a tiny model, upload a file; and a class's runs written as its jobs would write them."""

import os
import re
import string
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("SENSVIZ_DATA_DIR", tempfile.mkdtemp(prefix="sensviz-apptest-"))  # kept models and jobs of these tests

from streamlit.testing.v1 import AppTest  # noqa: E402

from sensviz import sweeps  # noqa: E402
from sensviz.text import WORD_JOINER  # noqa: E402
from server import assignments  # noqa: E402
from ui import model_refs, nav, registry  # noqa: E402

CEILING_S = 600  # training in the tests: a generous ceiling for a busy machine


APP = str(ROOT / "app.py")


ZOO = "encoder-majority-n6"


PAGE = {p.key: p for p in nav.PAGES}


def open_url(page: str = "home", timeout: float = 300, **params) -> AppTest:
    """A fresh session that opens `/<page>?<params>`, as a browser opening a link does."""
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.query_params.update({k: str(v) for k, v in params.items()})
    at.switch_page(PAGE[page].file)
    at.run()
    assert not at.exception, at.exception
    return at


def goto(at: AppTest, page: str) -> AppTest:
    at.switch_page(PAGE[page].file).run()
    assert not at.exception, (page, at.exception)
    return at


def plain(markdown: str) -> str:
    """What a markdown renderer shows of an escaped text (`sensviz.text`): backslash escapes resolved,
    the invisible word joiners dropped."""
    return re.sub(r"\\([" + re.escape(string.punctuation) + "])", r"\1", markdown).replace(WORD_JOINER, "")


def notices(at: AppTest) -> list[str]:
    return [plain(w.value) for w in at.warning]


def selected(at: AppTest) -> model_refs.ModelRef | None:
    return at.session_state.get(registry.SELECTED)


def wait_until(at: AppTest, condition, ceiling: float = CEILING_S) -> AppTest:
    deadline = time.monotonic() + ceiling
    while not condition(at):
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.5)
        at.run()
        assert not at.exception, at.exception
    return at


def train_tiny(at: AppTest, steps: int = 40) -> AppTest:
    goto(at, "train")
    at.selectbox(key="sv_w_train_task").set_value("first")  # learned within a few dozen steps
    at.number_input(key="sv_w_train_lr").set_value(0.01)
    at.number_input(key="sv_w_train_n").set_value(4)
    at.number_input(key="sv_w_train_steps").set_value(steps)
    at.number_input(key="sv_w_train_measure_every").set_value(10)
    at.number_input(key="sv_w_train_d_model").set_value(8)
    at.checkbox(key="sv_w_train_early_stop").uncheck()
    at.button(key=registry.TRAIN_BUTTON).click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    return at


def upload(at: AppTest, name: str, data: bytes) -> AppTest:
    at.sidebar.segmented_control(key=registry.SOURCE).set_value("Upload").run()
    at.sidebar.file_uploader[0].upload(name, data, "application/octet-stream").run()
    assert not at.exception, at.exception
    return at


def write_class_runs(store, code: str, cells: int | None = None) -> None:
    """The class's table as its runs would write it (the first `cells` of the assignment's cells, or all):
    PARITY's sharpness grows with n, FIRST's does not."""
    a = assignments.LENGTH_SCALING
    for i, cell in enumerate(a.cells()[:cells]):
        value = 0.01 + (0.01 if cell["task"] == "parity" else 0.0) * cell["n"] + 0.001 * (i % 3)
        store._write_run(code, f"job-{i}", a, {"settings": a.run_settings(cell), "status": "finished", "error": None,
                                   "metrics": {"sharpness": value, "converged": True}, "history": [], "wall_s": 1.0})
    sweeps.write_tables(store.sweep_folder(code))
