"""The results loading: one experiment's shipped tables at one scale, the scales present, and its figures.

Above the experiment registry (`sensviz.experiments`), which it reads for each experiment's defaults and
figures; below the pages that print the results (`sensviz.fidelity`, `sensviz.report`) and the analyses that
decide them (`sensviz.preregistered`, `sensviz.confirm`, `sensviz.findings`). A results folder holds
`<scale>/<experiment>/runs.parquet` (as `experiments/results/` ships them); the specs beside it
(`experiments/<experiment>.toml`) give the paper's scale and the flat claims' margins. `stored_figures` draws a
sweep folder's figures once per content of its tables and of the code that draws them, kept as plain data.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd

from .claims import Tables
from .experiments import defaults as experiment_defaults
from .experiments import registry
from .figures import finished
from .files import write_atomic
from .sweeps import load_spec, read_results

SCALES = ("quick", "standard", "paper")
"""The named scales of the shipped results (`experiments/results/<scale>/<experiment>/`), in the order shown."""
DECIDE = "decide"
"""The pre-registered scale: its folder under the results holds finished sweeps decided by `sensviz.preregistered`."""
CONFIRM = "confirm"
"""The second pre-registered design's scale (issue 37): its rows in `folder/confirm/<experiment>` once finished,
in `experiments/running/confirm/<experiment>` while its sweep runs."""


def with_defaults(experiment: str, runs: pd.DataFrame) -> pd.DataFrame:
    """The runs table with the settings its spec left at the experiment's defaults filled in."""
    defaults = {k: v for k, v in experiment_defaults(experiment).items() if v is not None and k not in runs}
    return runs.assign(**defaults)


def load(folder: Path, experiment: str) -> Tables | None:
    """The experiment's tables under `folder` (one scale's folder), or None when it has none."""
    path = Path(folder) / experiment
    if not (path / "runs.parquet").is_file():
        return None
    runs, history, spec = read_results(path)
    source = Path(folder).parent.parent / Path(spec.get("source") or f"{experiment}.toml").name
    try:
        found = load_spec(source, "paper")
        paper, margins = with_defaults(experiment, pd.DataFrame(found.runs)), dict(found.equivalence or {})
    except ValueError:
        paper, margins = None, {}
    return Tables(experiment, with_defaults(experiment, runs), history, paper, margins)


def scales(folder) -> list[str]:
    """The scales under a results folder (subfolders holding at least one sweep), smallest first; the
    pre-registered one (`DECIDE`) is not one of them."""
    folder = Path(folder)
    found = sorted({p.parent.parent.name for p in folder.glob("*/*/runs.parquet")} - {DECIDE}) if folder.is_dir() else []
    return sorted(found, key=lambda s: (SCALES.index(s) if s in SCALES else len(SCALES), s))


def default_scale(present: list[str]) -> str:
    """The largest named scale present (`SCALES`), else the last one found."""
    named = [s for s in present if s in SCALES]
    return (named or present)[-1]


def figures(experiment: str, runs: pd.DataFrame, history: pd.DataFrame) -> list:
    """Every figure of an experiment's results (`sensviz.figures.ExperimentFigure`s, drawn by its
    `Experiment.figures`); ValueError for an unknown experiment or no finished run. Settings the spec left at
    the experiment's defaults (absent from the runs table) are filled in."""
    known = registry()
    if experiment not in known:
        raise ValueError(f"no figures for experiment '{experiment}'; known: {', '.join(known)}")
    if finished(runs).empty:
        raise ValueError(f"this {experiment} sweep has no finished runs yet")
    return known[experiment].figures(with_defaults(experiment, runs), history)


def code_files() -> list[Path]:
    """The library's modules and its experiments': the code that draws the figures and decides the findings."""
    here = Path(__file__).parent
    return sorted(here.glob("*.py")) + sorted((here / "experiments").glob("*.py"))


def content_digest(paths) -> str:
    """A sha256 of these files' names and contents, in the order given."""
    h = hashlib.sha256()
    for path in paths:
        h.update(Path(path).name.encode())
        h.update(Path(path).read_bytes())
    return h.hexdigest()


def stored_figures(folder, cache_dir) -> list[dict]:
    """The figures of a sweep folder (`figures`) as plain data, each `{"key", "title", "explanation", "note", "spec"`
    (its chart's Vega-Lite spec, the data inline)`, "data"` (the table behind it)`}`: drawn once per content of the
    folder's tables and of the code that draws them (`content_digest`), kept in `cache_dir` as
    `figures-<folder>-<digest>.json` and read back by every later process (the folder's file of another digest is
    another version and is removed). ValueError, naming no path, as `figures`, or for a spec that names no experiment."""
    folder = Path(folder)
    tables = sorted(p for p in folder.iterdir() if p.suffix in (".parquet", ".json") and p.is_file())
    name = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:16]
    cache_dir = Path(cache_dir)
    path = cache_dir / f"figures-{name}-{content_digest(tables + code_files())[:32]}.json"
    if path.is_file():
        found = json.loads(path.read_text(encoding="utf-8"))
    else:
        runs, history, spec = read_results(folder)
        if not spec.get("experiment"):
            raise ValueError("this sweep folder's spec.json is missing or names no experiment")
        found = [{"key": f.key, "title": f.title, "explanation": f.explanation, "note": f.note,
                  "spec": f.chart.to_dict(), "data": f.data.to_dict("split")}
                 for f in figures(spec["experiment"], runs, history)]
        for old in cache_dir.glob(f"figures-{name}-*.json"):
            old.unlink(missing_ok=True)
        write_atomic(path, json.dumps(found).encode())
    return [{**f, "data": pd.DataFrame(**f["data"])} for f in found]
