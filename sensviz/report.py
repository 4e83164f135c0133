"""A standalone HTML report of finished sweeps: every figure of `sensviz.figures`, offline.

`write_report(folder, out)` takes one sweep folder (holding `runs.parquet`) or a folder of sweep
folders (e.g. `experiments/results/`) and writes one HTML page: per sweep its description and run
counts, per figure its title, explanation, convergence note and the interactive chart (tooltips).
Opening the page loads nothing from the internet: the Vega, Vega-Lite and Vega-Embed JavaScript
comes inline from `vl-convert-python`'s bundle (about 0.9 MB, once per page), the chart specs
and their data are inline JSON, and the charts' action menu (which links to the online Vega
editor) is switched off. The same inputs give the same bytes (no timestamps).
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import altair as alt

from .experiments import registry
from .figures import finished
from .files import write_atomic
from .results import SCALES, figures
from .sweeps import read_results

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1180px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 2em; }
.meta, .note { color: #555; font-size: 0.92em; } .note { font-style: italic; }
.chart { margin: 0.8em 0 1.6em 0; overflow-x: auto; }
nav li { margin: 0.15em 0; }
"""


def sweep_folders(folder) -> list[Path]:
    """The sweep folder itself, or the sweep folders one or two levels below it (`experiments/results`
    holds `<scale>/<experiment>/`): grouped by their parent folder, and within it folders named after
    an experiment first, in the experiments' order (`sensviz.experiments.registry`), then the others by
    name; ValueError if none."""
    folder = Path(folder)
    if (folder / "runs.parquet").is_file():
        return [folder]
    found = [p.parent for pattern in ("*/runs.parquet", "*/*/runs.parquet") for p in folder.glob(pattern)] \
        if folder.is_dir() else []
    if not found:
        raise ValueError(f"{folder}: no sweep results here (a sweep folder holds runs.parquet)")
    order = {name: i for i, name in enumerate(registry())}
    scales = {name: i for i, name in enumerate(SCALES)}
    return sorted(found, key=lambda f: (f.parent != folder, scales.get(f.parent.name, len(scales)), f.parent.name,
                                        order.get(f.name, len(order)), f.name))


def _vegalite_version() -> str:
    """Altair's Vega-Lite version as vl-convert names it (e.g. 'v6.4.1' -> '6.4')."""
    return ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])


def javascript_bundle() -> str:
    """Vega, Vega-Lite and Vega-Embed as one inline script (from vl-convert, no network)."""
    try:
        import vl_convert
    except ImportError:
        raise ValueError("the HTML report needs the `vl-convert-python` package (pip install -r requirements.txt)") from None
    version = _vegalite_version()
    return vl_convert.javascript_bundle(vl_version=version if version in vl_convert.get_vegalite_versions() else None)


def _script_json(value) -> str:
    """JSON safe inside a <script> element."""
    return json.dumps(value).replace("</", "<\\/")


def _section(index: int, folder: Path, charts: list) -> tuple[str, str]:
    """One sweep's HTML (its charts' specs appended to `charts`) and its experiment's name."""
    runs, history, spec = read_results(folder)
    experiment = spec.get("experiment", folder.name)
    done = finished(runs)
    wall = runs["wall_s"].sum() if "wall_s" in runs else float("nan")
    parts = [
        f'<section id="sweep-{index}"><h2>{html.escape(str(experiment))}: '
        f'{html.escape(str(spec.get("name", folder.name)))} ({html.escape(str(spec.get("scale") or "quick"))} scale)</h2>',
        f"<p>{html.escape(str(spec.get('description', '')))}</p>",
        f'<p class="meta">{len(runs)} runs, {len(done)} finished, {len(runs) - len(done)} failed; '
        f"{wall:,.0f} s of run time in all; folder <code>{html.escape(str(folder))}</code>.</p>",
    ]
    try:
        found = figures(experiment, runs, history)
    except ValueError as err:
        parts.append(f'<p class="note">{html.escape(str(err))}</p>')
        found = []
    for fig in found:
        charts.append(fig.chart.to_dict())
        parts += [
            f"<h3>{html.escape(fig.title)}</h3>",
            f"<p>{html.escape(fig.explanation)}</p>",
            f'<p class="note">{html.escape(fig.note)}</p>',
            f'<div class="chart" id="chart-{len(charts) - 1}"></div>',
        ]
    parts.append("</section>")
    return "\n".join(parts), experiment


def render(folder) -> tuple[str, dict]:
    """The report's HTML and a summary (sweeps, figure count)."""
    folders = sweep_folders(folder)
    charts: list[dict] = []
    sections, names = [], []
    for index, path in enumerate(folders):
        text, experiment = _section(index, path, charts)
        sections.append(text)
        names.append(experiment)
    toc = "".join(f'<li><a href="#sweep-{i}">{html.escape(str(name))}</a></li>' for i, name in enumerate(names))
    page = offline_page(
        "sensviz: the paper's experiments", STYLE,
        ["<h1>sensviz: the paper's experiments</h1>",
         "<p>Hahn &amp; Rofin, <i>Why are Sensitive Functions Hard for Transformers?</i> (ACL 2024), reproduced "
         "with sensviz. Sharpness on the ±1 scale (×4 for MSE on {0,1} targets); error bars ± one standard error "
         "over seeds; every figure keeps the runs that pass the paper's convergence filter and says how many it "
         "dropped. This page loads nothing from the internet.</p>",
         f"<nav><ul>{toc}</ul></nav>", *sections],
        charts)
    return page, {"sweeps": names, "figures": len(charts)}


def offline_page(title: str, style: str, body: list[str], specs: list[dict]) -> str:
    """A standalone HTML page: the body's parts, and every Vega-Lite spec drawn into the element
    `#chart-<i>` by the inlined Vega JavaScript (nothing loaded from the internet)."""
    embed = (
        f"const specs = {_script_json(specs)};\n"
        "specs.forEach((spec, i) => vegaEmbed('#chart-' + i, spec, {actions: false, renderer: 'svg'})"
        ".catch(err => { document.getElementById('chart-' + i).textContent = 'chart error: ' + err; }));"
    )
    return "\n".join([
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{style}</style>",
        f"<script>{javascript_bundle()}</script>",
        "</head><body>",
        *body,
        f"<script>{embed}</script>",
        "</body></html>",
    ])


def write_text(out, text: str) -> Path:
    """Write a page to `out` (its folder made if needed, atomically: `sensviz.files.write_atomic`);
    ValueError naming the path when it cannot be."""
    out = Path(out)
    try:
        write_atomic(out, text.encode("utf-8"))
    except OSError as err:
        raise ValueError(f"cannot write {out}: {err}") from None
    return out


def write_report(folder, out) -> dict:
    """Write the HTML report of `folder` (a sweep folder or a folder of them) to `out`; returns a summary."""
    page, summary = render(folder)
    out = write_text(out, page)
    return {"written": str(out), **summary, "bytes": out.stat().st_size}
