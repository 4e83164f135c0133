"""The Experiments page's one table of findings (`sensviz.findings`), under the caching rule of `ui.cache`.

The table is computed once per content of the results it reads (`findings.stored`: a file in the data
directory named by the hash of its inputs, read back by every later server and page view), and held in the
store of computed values under the inputs' versions (their mtimes and sizes), so a page view costs a `stat` of
each input and, the first time in a server, one parquet read.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sensviz import findings
from sensviz.files import data_dir
from ui.memo import memo

CACHE_FOLDER = "findings"
"""The data directory's folder of stored findings tables."""


def _versions(results: Path) -> tuple:
    return tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in findings.inputs(results))


@memo
def _stored(results: str, versions: tuple) -> tuple[str, pd.DataFrame]:
    return findings.stored(results, data_dir() / CACHE_FOLDER)


def story(results: Path) -> tuple[str, pd.DataFrame]:
    """The bottom line and the one table of a results folder (every claim, its one verdict, the evidence it
    stands on, its history)."""
    return _stored(str(results), _versions(Path(results)))


def experiment_claims(folder: Path) -> tuple[str, pd.DataFrame]:
    """The bottom line, and the claims of one shipped sweep folder's experiment (`<results>/<scale>/<experiment>`)
    in the one table."""
    folder = Path(folder)
    line, found = story(folder.parent.parent)
    return line, found[found["experiment"] == folder.name].drop(columns="experiment").reset_index(drop=True)
