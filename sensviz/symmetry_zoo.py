"""Sharpness under function-preserving maps across a folder of checkpoints (the zoo), and the claim R3.

For every encoder checkpoint of a folder: each sharpness measure of `MEASURES` (the registry's columns,
`sensviz.measure`) on the model, and on `maps` copies changed by a random function-preserving map
(`sensviz.symmetries.EXACT`: every exact map at once, each factor's condition number <= kappa, map
seeds 1..maps), with the same radius, inputs and directions; beside the model's as_n (`rows`).

`summary(rows)`, per measure:

- `change_median`, `change_max`: the median and the largest |log10(after / before)| over models and
  maps (0 for a measure the maps leave alone; 1 for a tenfold change);
- `spearman_as_n`: the rank correlation over the models (unchanged copies) of the measure with as_n;
- `parity_over_first`: at each n where the folder has both, whether PARITY's value exceeds FIRST's.

The claim (ours, not the paper's): R3, "PARITY's symmetry-aware sharpness exceeds FIRST's", decided by
`R3_RULE` on the unchanged models' `orbit_sharpness` and its standard error over directions: at each n
z = (S_PARITY - S_FIRST) / sqrt(se_PARITY^2 + se_FIRST^2); the n is "exceeds" when z > 1.96, "reverses"
when z < -1.96, else "unclear"; reproduced when every n exceeds, differs when any n reverses, not
resolved otherwise (never asserted). That L_rho moves while the outputs do not is Dinh et al.'s
result: a test (tests/core/test_symmetry_zoo.py), not a claim.

`sensviz symmetry-zoo` (`rows`, then `write`) writes the rows (CSV), the page (docs/symmetry.md) and its figure (SVG); the
page is rendered from the rows alone (`render_page`), so it can be regenerated and checked without
measuring again.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch

from . import cube, symmetries
from .checkpoints import load_checkpoint
from .measure import MeasureSettings, columns, measure

MEASURES = {  # column -> (registry quantity, stderr column or None, what it is)
    "sharpness": ("sharpness", "sharpness_stderr", "L_ρ at ρ = 0.02·√P (the paper's)"),
    "sharpness_limit": ("limit", None, "lim L_ρ/ρ² = E‖∇T‖²/P (exact)"),
    "sharpness_proxy": ("proxy", "sharpness_proxy_stderr", "loss-space proxy (Gaussian, ε = 0.02)"),
    "hessian_top": ("hessian", None, "top Hessian eigenvalue of the loss"),
    "adaptive_sharpness": ("adaptive", "adaptive_sharpness_stderr", "adaptive (ASAM: Δ = |θ|·u)"),
    "orbit_sharpness": ("orbit", "orbit_sharpness_stderr", "symmetry-aware (least L_ρ over the orbit)"),
}
QUANTITIES = ("sensitivity", *dict.fromkeys(q for q, _, _ in MEASURES.values()))
R3 = "R3: PARITY's symmetry-aware sharpness exceeds FIRST's"
R3_RULE = ("at each n, z = (S_PARITY − S_FIRST) / √(se_PARITY² + se_FIRST²) of the symmetry-aware sharpness "
           "(se: its standard error over directions); an n exceeds when z > 1.96 and reverses when z < −1.96; "
           "reproduced when every n exceeds, differs when any n reverses, else not resolved")
Z = 1.96


def rows(folder, kappa: float = 100.0, maps: int = 2, settings: MeasureSettings | None = None,
         log: Callable[[str], None] | None = None) -> pd.DataFrame:
    """One row per encoder checkpoint of `folder` and map (map 0: the model itself; 1..maps: a copy
    changed by `symmetries.EXACT` at `kappa`, seed = map): model, task, n, map, as_n, the
    `MEASURES` columns and their stderrs, and the outputs' largest change (0 for map 0)."""
    settings = settings or MeasureSettings(measure_inputs=256)
    found = []
    for path in sorted(Path(folder).glob("encoder-*.safetensors")):
        ck = load_checkpoint(path)
        if ck.task is None:
            continue
        bits, _ = cube.measurement_inputs(ck.n, settings.measure_inputs, settings.measure_seed)
        with torch.no_grad():
            reference = ck.model(bits).double()
        for m in range(maps + 1):
            model = ck.model if m == 0 else symmetries.apply(ck.model, symmetries.EXACT, kappa, seed=m, n=ck.n)
            result = measure(model, ck.task, ck.n, settings, QUANTITIES, ck.encoding)
            flat = columns(result)
            with torch.no_grad():
                moved = (model(bits).double() - reference).abs().max() / reference.abs().max()
            row = {"model": path.stem, "task": ck.task.label, "n": ck.n, "map": m, "kappa": kappa,
                   "as_n": flat["avg_sensitivity"], "param_norm": result.param_norm, "rho": result.rho,
                   "output_change": float(moved),
                   "inputs": int(bits.shape[0]), "directions": settings.directions}
            for column, (_, stderr, _) in MEASURES.items():
                row[column] = flat.get(column, math.nan)
                if stderr:
                    row[stderr] = flat.get(stderr, math.nan)
            found.append(row)
            if log:
                log(f"{path.stem} map {m}: " + ", ".join(f"{c} {row[c]:.4g}" for c in MEASURES))
    return pd.DataFrame(found)


def changes(table: pd.DataFrame) -> pd.DataFrame:
    """|log10(after / before)| per model, map >= 1 and measure (columns model, task, n, map, measure, change)."""
    before = table[table["map"] == 0].set_index("model")
    out = []
    for _, row in table[table["map"] > 0].iterrows():
        for column in MEASURES:
            a, b = row[column], before.loc[row["model"], column]
            change = abs(math.log10(a / b)) if a > 0 and b > 0 else math.nan
            out.append({"model": row["model"], "task": row["task"], "n": row["n"], "map": row["map"],
                        "measure": column, "change": change})
    return pd.DataFrame(out)


def _spearman(x: pd.Series, y: pd.Series) -> float:
    keep = x.notna() & y.notna()
    if keep.sum() < 3:
        return math.nan
    return float(x[keep].rank().corr(y[keep].rank()))


def parity_over_first(table: pd.DataFrame, column: str) -> dict[int, bool]:
    """At each n with both tasks (unchanged models): whether PARITY's `column` exceeds FIRST's."""
    base = table[table["map"] == 0]
    values = base.pivot_table(index="n", columns=base["task"].str.upper(), values=column, aggfunc="first")
    if "PARITY" not in values or "FIRST" not in values:
        return {}
    both = values[["PARITY", "FIRST"]].dropna()
    return {int(n): bool(r["PARITY"] > r["FIRST"]) for n, r in both.iterrows()}


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per measure: change_median, change_max, spearman_as_n, parity_over_first ({n: bool}), what."""
    found = changes(table)
    base = table[table["map"] == 0]
    out = []
    for column, (_, _, what) in MEASURES.items():
        mine = found[found["measure"] == column]["change"]
        out.append({"measure": column, "what": what, "change_median": float(mine.median()),
                    "change_max": float(mine.max()), "spearman_as_n": _spearman(base[column], base["as_n"]),
                    "parity_over_first": parity_over_first(table, column)})
    return pd.DataFrame(out)


@dataclasses.dataclass
class Verdict:
    """R3's cells (per n: values, stderrs, z and the cell's call) and the verdict by `R3_RULE`."""

    claim: str
    rule: str
    cells: list[dict]
    verdict: str


def decide_r3(table: pd.DataFrame, column: str = "orbit_sharpness") -> Verdict:
    """R3 by `R3_RULE` on the unchanged models of `table`."""
    base = table[table["map"] == 0].assign(TASK=lambda t: t["task"].str.upper())
    stderr = MEASURES[column][1]
    cells = []
    for n in sorted(set(base[base["TASK"] == "PARITY"]["n"]) & set(base[base["TASK"] == "FIRST"]["n"])):
        p = base[(base["n"] == n) & (base["TASK"] == "PARITY")].iloc[0]
        f = base[(base["n"] == n) & (base["TASK"] == "FIRST")].iloc[0]
        spread = math.hypot(p[stderr], f[stderr])
        z = (p[column] - f[column]) / spread if spread > 0 else math.copysign(math.inf, p[column] - f[column])
        call = "exceeds" if z > Z else "reverses" if z < -Z else "unclear"
        cells.append({"n": int(n), "parity": float(p[column]), "parity_se": float(p[stderr]),
                      "first": float(f[column]), "first_se": float(f[stderr]), "z": float(z), "call": call})
    calls = [c["call"] for c in cells]
    if not calls:
        verdict = "not resolved"
    elif "reverses" in calls:
        verdict = "differs"
    elif all(c == "exceeds" for c in calls):
        verdict = "reproduced"
    else:
        verdict = "not resolved"
    return Verdict(R3, R3_RULE, cells, verdict)


def figure(table: pd.DataFrame):
    """Per measure, |log10(after / before)| of every model and map against n (Altair; 0: invariant)."""
    import altair as alt

    found = changes(table).assign(what=lambda t: t["measure"].map(lambda c: MEASURES[c][2]))
    return alt.Chart(found).mark_point(filled=True, opacity=0.7).encode(
        x=alt.X("n:O", title="input length n"),
        y=alt.Y("change:Q", title="|log10(after / before)| under a random map"),
        color=alt.Color("task:N"), shape=alt.Shape("task:N"),
        column=alt.Column("what:N", title=None, header=alt.Header(labelLimit=165, labelFontSize=10)),
        tooltip=["model:N", "map:Q", alt.Tooltip("change:Q", format=".3g")],
    ).properties(width=165, height=180)


def _fmt(x: float) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


def render_page(table: pd.DataFrame, csv_name: str = "symmetry.csv", svg_name: str | None = "symmetry.svg") -> str:
    """docs/symmetry.md from the rows alone: the summary table, R3's cells and verdict, and how it was made."""
    base = table[table["map"] == 0]
    kappa, maps = table["kappa"].iloc[0], int(table["map"].max())
    found = summary(table)
    r3 = decide_r3(table)
    ns = sorted({n for row in found["parity_over_first"] for n in row})
    lines = [
        "# Sharpness under function-preserving maps (generated)",
        "",
        f"Generated by `sensviz symmetry-zoo` from `{csv_name}` (do not edit by hand). Models: the zoo's "
        f"{len(base)} encoder checkpoints with a task (checkpoints/); the decide runs keep no models, so the zoo "
        f"only. Each is measured as is and after {maps} random function-preserving map{'s' if maps > 1 else ''} "
        "(`sensviz.symmetries.EXACT`: "
        f"every exact map at once, each factor's condition number ≤ {kappa:g}), with the same radius ρ = 0.02·√P, "
        f"inputs (the cube or a seeded sample, at most {int(table['inputs'].max())}) and {int(table['directions'].iloc[0])} "
        "directions. The outputs' largest change under a map, relative to the largest output: "
        f"{_fmt(float(table['output_change'].max()))} (each map is checked to 1e-5 on the cube or a sample, else refused).",
        "",
        "## Each measure under the maps",
        "",
        "change: |log10(after / before)| over models and maps (0: unchanged; 1: tenfold). ρ_s: Spearman rank "
        "correlation with as_n over the unchanged models. PARITY > FIRST: at each n, whether PARITY's value "
        "exceeds FIRST's (unchanged models, point values).",
        "",
        "| measure | median change | largest change | ρ_s with as_n | PARITY > FIRST at n = " + ", ".join(map(str, ns)) + " |",
        "|---|---|---|---|---|",
    ]
    for _, r in found.iterrows():
        marks = " ".join("yes" if r["parity_over_first"].get(n) else "no" if n in r["parity_over_first"] else "—"
                         for n in ns)
        what = r["what"].replace("|", "\\|")  # a | inside a cell would end it
        lines.append(f"| {what} | {_fmt(r['change_median'])} | {_fmt(r['change_max'])} | "
                     f"{_fmt(r['spearman_as_n'])} | {marks} |")
    lines += ["", f"## {r3.claim}", "", f"Rule: {r3.rule}.", "",
              "| n | PARITY | FIRST | z | call |", "|---|---|---|---|---|"]
    lines += [f"| {c['n']} | {_fmt(c['parity'])} ± {_fmt(c['parity_se'])} | {_fmt(c['first'])} ± {_fmt(c['first_se'])} "
              f"| {_fmt(c['z'])} | {c['call']} |" for c in r3.cells]
    lines += ["", f"**Verdict: {r3.verdict}.**", ""]
    if svg_name:
        lines += [f"![|log10(after / before)| of each measure per model and map]({svg_name})", ""]
    lines += [f"Regenerate: `sensviz symmetry-zoo --folder checkpoints --out docs/symmetry.md --kappa {kappa:g} "
              f"--maps {maps} --inputs {int(table['inputs'].max())} --directions {int(table['directions'].iloc[0])}` "
              "(measures again), or `sensviz symmetry-zoo --from-csv docs/symmetry.csv --out docs/symmetry.md` (renders the "
              "page from the stored rows).", ""]
    return "\n".join(lines)


def write(table: pd.DataFrame, out, svg: bool = True) -> dict:
    """The rows as CSV beside `out`, the page at `out`, and its figure as SVG (vl-convert)."""
    out = Path(out)
    csv_path, svg_path = out.with_suffix(".csv"), out.with_suffix(".svg")
    if not csv_path.exists() or not pd.read_csv(csv_path).equals(table):
        table.to_csv(csv_path, index=False)
    if svg:
        import vl_convert

        svg_path.write_text(vl_convert.vegalite_to_svg(figure(table).to_dict()))
    out.write_text(render_page(table, csv_path.name, svg_path.name if svg else None))
    verdict = decide_r3(table)
    return {"page": str(out), "rows": str(csv_path), "figure": str(svg_path) if svg else None,
            "r3": verdict.verdict, "cells": verdict.cells}


COLUMNS = ("model", "task", "n", "map", "kappa", "as_n", "output_change", "inputs", "directions", *MEASURES,
           *(stderr for _, stderr, _ in MEASURES.values() if stderr))


def read(csv_path) -> pd.DataFrame:
    """Rows written by `write` (a file without their columns is refused, naming what it lacks)."""
    table = pd.read_csv(csv_path)
    missing = [c for c in COLUMNS if c not in table]
    if missing:
        raise ValueError(f"{csv_path}: not rows of sensviz symmetry-zoo (no column {', '.join(missing[:5])})")
    return table

