"""One cube-grid function draws the Lab's chapter 1 and the Sensitivity page; a page's chart spec is converted once
per content (`ui.cache.spec`)."""

import inspect
import threading
from pathlib import Path

import pandas as pd

from sensviz import charts
from ui import cache

ROOT = Path(__file__).resolve().parents[2]
MODELS = ("encoder-parity-n8", "encoder-first-n8")


def test_one_cube_grid_function_for_the_page_and_the_lab(monkeypatch):
    from helpers.app import open_url

    from sensviz import lab

    assert not hasattr(charts, "cube_grid")  # unified: cube_grids draws one model or several
    callers = []  # (thread, file, the files of its callers) of every call of charts.cube_grids
    cube_grids = charts.cube_grids

    def spy(*args, **kwargs):
        files = [Path(frame.filename).name for frame in inspect.stack()[1:]]
        callers.append((threading.current_thread(), files[0], files))
        return cube_grids(*args, **kwargs)

    monkeypatch.setattr(charts, "cube_grids", spy)
    chapter = lab.chapter(1).build(lab.Sources.shipped(ROOT / "checkpoints", ROOT / "experiments" / "results"))
    here = [name for thread, name, _ in callers if thread is threading.current_thread()]  # not a warm-up thread's
    assert here == ["lab.py"] and chapter.figures[0].blind is None  # the cube (no blind twin: it would answer)
    open_url("sensitivity", model=MODELS[0])
    assert any("sensitivity.py" in files for _, _, files in callers)  # the Sensitivity page's cube (via cache.spec)


def test_a_chart_spec_is_converted_once_per_content_and_again_when_a_table_changes():
    conversions = []

    def histogram(table, title):
        conversions.append(title)
        return charts.histogram(table, title)

    table = pd.DataFrame({"function": ["model", "model", "target"], "bin_start": [0.0, 1.0, 0.0],
                          "bin_end": [1.0, 2.0, 1.0], "fraction": [0.25, 0.75, 1.0]})
    first = cache.spec(histogram, table, "once")
    assert cache.spec(histogram, table.copy(), "once") is first and conversions == ["once"]  # equal content: kept
    changed = table.assign(fraction=[0.5, 0.5, 1.0])
    assert cache.spec(histogram, changed, "once") is not first and conversions == ["once", "once"]
    assert cache.spec(histogram, table, title="once") is not first  # an argument by name is a key of its own
    assert cache.spec(histogram, table, "twice")["title"] != first["title"]
