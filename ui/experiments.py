"""The Experiments page's figures (`sensviz.results.stored_figures`), under the caching rule of `ui.cache`.

A sweep folder's figures are drawn once per content of its tables (a file in the data directory, read back by every
later server), and held in the store of computed values under the tables' versions (their mtimes and sizes), so a page
view costs a `stat` of each table and, the first time in a server, one small JSON read. Each figure's chart is its
Vega-Lite spec, drawn by `st.vega_lite_chart` with no Altair conversion per view.
"""

from __future__ import annotations

from pathlib import Path

from sensviz import results
from sensviz.files import data_dir
from ui.memo import memo

CACHE_FOLDER = "figures"
"""The data directory's folder of stored figures."""


def _versions(folder: Path) -> tuple:
    return tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(folder.glob("*.parquet")))


@memo
def _figures(folder: str, versions: tuple) -> list[dict]:
    return results.stored_figures(folder, data_dir() / CACHE_FOLDER)


def figures(folder: Path) -> list[dict]:
    """The figures of a sweep folder (a folder `services.sweep_folder` let through), each with its title,
    explanation, note, Vega-Lite spec and data; ValueError, naming no path, when none can be drawn."""
    folder = Path(folder)
    try:
        return _figures(str(folder), _versions(folder))
    except OSError as err:
        raise ValueError(f"this sweep folder's figures cannot be drawn ({type(err).__name__})") from None
