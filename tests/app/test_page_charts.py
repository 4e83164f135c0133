"""One cube-grid function draws the Lab's chapter 1 and the Sensitivity page."""

import inspect
import threading
from pathlib import Path

from sensviz import charts

ROOT = Path(__file__).resolve().parents[2]
MODELS = ("encoder-parity-n8", "encoder-first-n8")


def test_one_cube_grid_function_for_the_page_and_the_lab(monkeypatch):
    from helpers.app import open_url

    from sensviz import lab

    assert not hasattr(charts, "cube_grid")  # unified: cube_grids draws one model or several
    callers = []  # (thread, file) of every caller of charts.cube_grids
    cube_grids = charts.cube_grids

    def spy(*args, **kwargs):
        callers.append((threading.current_thread(), Path(inspect.stack()[1].filename).name))
        return cube_grids(*args, **kwargs)

    monkeypatch.setattr(charts, "cube_grids", spy)
    chapter = lab.chapter(1).build(lab.Sources.shipped(ROOT / "checkpoints", ROOT / "experiments" / "results"))
    here = [name for thread, name in callers if thread is threading.current_thread()]  # not a warm-up thread's
    assert here == ["lab.py"] and chapter.figures[0].blind is None  # the cube (no blind twin: it would answer)
    open_url("sensitivity", model=MODELS[0])
    assert "sensitivity.py" in [name for _, name in callers]  # the Sensitivity page's cube
