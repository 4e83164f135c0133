"""The fidelity page (docs/fidelity.md): the paper's claims beside what the shipped result tables show.

`render(folder, scale)` reads the sweep tables under `folder/<scale>/<experiment>/` (as
`experiments/results/` ships them) and returns the whole page as markdown; `write_page` writes it
(`sensviz fidelity experiments/results --out docs/fidelity.md --scale standard`). Every number on the page
is computed in code: from the runs and history tables, from the specs' `paper` scale (the paper's setup,
`experiments/<experiment>.toml`), their `[equivalence]` margins and the experiments' constants.

The page opens with the one story every page tells (`sensviz.findings`): the bottom line (the scales behind
the verdicts against the paper's, then one tally), the scale behind each verdict, five lines per experiment
and one row per claim, each with its one verdict and the other tables' verdicts as history. Below them, the
scale's own sections: each experiment writes them (`Experiment.sections`, in its module of
`sensviz.experiments`) with the claims and helpers of `sensviz.claims`; each claim has a key that is the same
at every scale (L1, ...; our own checks, R1 and R2, are kept out of the tally) and is decided by one test of
`sensviz.stats`, beside it the runs the filter kept per cell, its named secondary analyses (fragile where
their verdict differs) and, where the tables cannot decide it, the units that would
(`stats.units_to_resolve`).

A finished pre-registered sweep (`folder/decide/<experiment>`: a spec's `[scales.decide]`, run to the
end) is not one of the page's scales: its tables are decided by the analysis written down in the spec
(`sensviz.preregistered`), and its decision stands for the claims it decides; the page prints it in a
section of its own (`decided_section`), and the second design's state beside it (`confirm_section`).

Columns read beyond those every table has (`sensviz.experiments` writes them): the length-scaling
runs may carry L_rho at fractions f of the proxy's radius rho_proxy = proxy_eps sqrt(P),
`sharpness_pm1_x{f}`, `sharpness_pm1_x{f}_stderr` and `sharpness_rho_x{f}` (f written as 0.01, 0.1,
0.3, 1); without them the page shows the two radii every table has (the limit and rho_proxy). The
scratchpad runs may carry `sharpness_proxy_last_pm1` (the last decoder step); then
`sharpness_proxy_pm1` is the mean over all decoder steps (the authors' convention), else it is the
last step.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from . import findings, stats
from .claims import ACCURATE, SETTING_LABELS, Claim, Tables, num, setting_text, span, table
from .claims import kept_by as _kept_by  # noqa: F401  experiments/gpu_slice.py reads it here
from .experiments import registry
from .findings import CONFIRM, DECIDE, collect, confirm_designs, decisions
from .report import write_text
from .results import default_scale, scales
from .sizing import design_power, design_report  # noqa: F401  the decide specs' `power_command` names them here
from .sweeps import load_spec

MARKER = ("<!-- written by `sensviz fidelity` from the {scale}-scale tables (scale: {scale}); "
          "edit sensviz/fidelity.py, not this page -->")
"""The page's first line; `scale_of` reads the scale back from it."""

# ----------------------------------------------------------------------------- the page


def confirm_section(folder) -> tuple[str, str]:
    """(the bottom line's sentences, the section) of the second pre-registered designs: per claim the exploratory
    verdict of the tables it was sized from beside the design's state (`confirm.state`), and the power each had."""
    from . import confirm

    lines, parts = [], []
    for experiment, (spec, rows) in confirm_designs(folder).items():
        state = confirm.state(spec, CONFIRM, rows)
        source = load_spec(spec, CONFIRM).analysis["sized_from"]["scale"]
        where = "/".join(rows.parts[-4:])
        done, planned = state["rows in"].iloc[0].split(" of ")
        holm = "after Holm" if done == planned else "after Holm (interim)"
        lines.append(f" A second pre-registered design (`{CONFIRM}` scale of {experiment}) has {state['rows in'].iloc[0]} "
                     f"runs in ({where}).")
        parts.append(
            f"**{experiment.replace('_', ' ').capitalize()}**, `[scales.{CONFIRM}]`, sized from the `{source}` tables "
            "at 80 % power for half each exploratory estimate (a flat claim: at its `smallest_effect`), level α/m, "
            f"Holm's step-down across its {len(state)} primaries (`docs/confirm.md`). Rows: `{where}`. The power at "
            f"that effect and level: *then*, of the `{source}` tables' own kept runs (not designed for these claims); "
            "*designed*, of the planned kept runs; *now*, of the runs kept so far. CPU-hours: the rows of the claim's "
            "runs so far (a row two claims share counts for each)."
            + (" Until its stop rule ends the design, *after Holm* is an interim reading of the rows in, which no "
               "verdict above rests on." if done != planned else "") + "\n\n"
            + table(["claim", "statement", f"exploratory (`{source}`)", "power then", "power designed", "rows in",
                     "estimate so far", holm, "power now", "CPU-hours"],
                    [[r["claim"], r["statement"], r["exploratory"], num(r["power then"]), num(r["power designed"]),
                      r["rows in"], r["confirm estimate"], f"**{r['after Holm']}**",
                      num(r["power now"]) if r["power now"] == r["power now"] else "—", num(r["CPU-hours"])]
                     for r in state.to_dict("records")]))
    if not parts:
        return "", ""
    parts.append(gpu_slice_line(folder))
    return "".join(lines), "\n\n".join(["## A second pre-registered design (issue 37)",
                                          "The claims earlier tables only suggest (exploratory there), tested again "
                                          "on new seeds under an analysis written down before its first row."] + parts)


def gpu_slice_line(folder) -> str:
    """Where the paper-width slice of L1 (`experiments/gpu_slice.py`) stands: its rows and their devices, or that it
    is ready and not run."""
    rows = Path(folder).parent / "running" / "gpu_slice" / "length_scaling" / "runs.parquet"
    script = "`experiments/gpu_slice.py` (L1 at the authors' width, learning rate and batch, on one GPU)"
    if not rows.is_file():
        return f"**The paper-width slice** {script} is ready and has not run (no rows)."
    table = pd.read_parquet(rows)
    devices = ", ".join(sorted(set(table["device"].dropna()))) if "device" in table else "—"
    return (f"**The paper-width slice** {script}: {int((table['status'] == 'finished').sum())} runs in "
            f"({', '.join(str(int(n)) for n in sorted(table['n'].unique()))} as n), on {devices}.")


def scale_of(page: str) -> str | None:
    """The scale a page was written for (from its first line)."""
    found = re.search(r"\(scale: ([^)]+)\)", page.splitlines()[0]) if page else None
    return found.group(1) if found else None


def page_path(scale: str, present: list[str]) -> str:
    """Where the page of one scale lives: `docs/fidelity.md` for the default scale (the largest
    present), `docs/fidelity-<scale>.md` for each other one."""
    return "docs/fidelity.md" if scale == default_scale(present) else f"docs/fidelity-{scale}.md"


def distance(t: Tables) -> str:
    """These tables' scale against the spec's paper scale, setting by setting (from the specs)."""
    if t.paper is None:
        return "the spec has no paper scale"
    parts = [f"{label} {setting_text(t.runs, column)} against {setting_text(t.paper, column)}"
             for column, label in SETTING_LABELS.items()
             if column in ("d_model", "lr", "batch_size", "n", "seed", "steps", "train_size")
             and column in t.runs and column in t.paper and setting_text(t.runs, column) != setting_text(t.paper, column)]
    kept = t.kept()
    if {"proxy_rho", "param_norm"} <= set(kept) and len(kept):
        parts.append(f"the proxy's radius ρ_proxy/‖θ‖ = {span(kept['proxy_rho'] / kept['param_norm'])} here")
    return "; ".join(parts) or "the same settings"


def build(folder, scale: str | None = None) -> tuple[str, list[Claim]]:
    """The fidelity page for one scale of the results folder (default: `default_scale`) and its claims."""
    folder = Path(folder)
    present = scales(folder)
    if not present:
        raise ValueError(f"{folder}: no results here (expected <scale>/<experiment>/runs.parquet)")
    scale = scale or default_scale(present)
    if scale not in present:
        raise ValueError(f"{folder}: no '{scale}' scale here; found {', '.join(present)}")
    root = f"{folder.parent.name}/{folder.name}" if folder.parent.name else folder.name
    sections, claims, missing, tables = collect(folder, scale)
    decided = decisions(folder)
    confirm_line, confirm_part = confirm_section(folder)
    told = findings.story(folder)
    command = f"sensviz fidelity {root} --out {page_path(scale, present)} --scale {scale}"
    links = [f"[`{s}`]({Path(page_path(s, present)).name})" for s in present if s != scale]
    one = told.table().drop(columns="experiment")
    unresolved = [f for f in told.findings if f.verdict == stats.UNRESOLVED]
    page = [
        MARKER.format(scale=scale),
        f"# Fidelity: the paper's claims beside the shipped `{scale}`-scale runs",
        told.bottom_line() + (f" No tables at this scale for: {', '.join(missing)}." if missing else "")
        + confirm_line,
        "**The scale behind each verdict** (the runs of the tables it stands on):\n\n"
        + table(["#", "verdict", "stands on", *findings.SCALE_COLUMNS.values(), "runs kept"],
                one[["#", "verdict", "stands on", *findings.SCALE_COLUMNS.values(), "runs kept"]].values.tolist()),
        "\n\n".join(findings.lead(experiment, told.findings, distance(t)) for experiment, t in tables.items()),
        "## Verdicts",
        "One row per claim: its one verdict, the tables it stands on and why those, beside it the other tables' "
        "verdicts as history (a flat claim judged on tables its margin had seen counts as not resolved, whichever "
        "way it read).\n\n"
        + table(["#", "claim", "verdict", "stands on", "why this one", "estimate [interval]", "runs kept",
                 "margin (change over the range)", "fragile under", "history", "pre-registered designs"],
                one[["#", "claim", "verdict", "stands on", "why this one", "estimate [interval]", "runs kept",
                     "margin (change over the range)", "fragile under", "history", "pre-registered designs"]
                    ].values.tolist()),
    ]
    if unresolved:
        page.append("**What would resolve the rest** (from the one table): "
                    + "; ".join(f"{f.key}, {findings.resolve(f)}" for f in unresolved) + ".")
    page += [
        "## About this page",
        "Hahn & Rofin, *Why are Sensitive Functions Hard for Transformers?* (ACL 2024), make five experimental "
        f"claims. `experiments/*.toml` runs each of them as a sweep; `{root}/{scale}/` holds the tables of the "
        f"`{scale}` scale. This page is written by `{command}` from those tables: every number on it is computed "
        "from them (the paper's setup from the specs' `paper` scale, the flat claims' margins from their "
        "`[equivalence]` tables), and a test regenerates it and fails if this file differs. The Experiments page of "
        "the app and `sensviz report` draw the same tables."
        + (f" The same claims at the other shipped scales: {', '.join(links)}." if links else ""),
        "Each section sets the scale's settings beside the spec's `paper` scale. Everything else follows the "
        "paper's code: the post-LN encoder with concatenated embeddings, MSE on {0,1} targets, fresh uniform "
        "inputs every step, the sharpness proxy (Gaussian noise of std eps on every non-positional parameter, the "
        "loss increase on the ±1 scale), the published code's blowup aggregate, and the convergence filter. Where "
        "the width differs, so does the proxy's radius, so sharpness magnitudes compare only within one scale: "
        "compare trends.",
        "## How each claim is decided",
        METHOD,
    ]
    page += [decided_section(folder, decided)] if decided else []
    page += [confirm_part]
    page += sections
    page += [
        "## Reproducing this page",
        "```bash\n"
        + "\n".join(f"sensviz sweep experiments/{e}.toml --out {root}/{scale}/{e}"
                    + (f" --scale {scale}" if scale != "quick" else "") + " --workers 2"
                    for e in registry() if e not in missing)
        + f"\n{command}\n```",
    ]
    return "\n\n".join(part for part in page if part) + "\n", claims


METHOD = (
    "Each claim is one quantity with a 95 % confidence interval. A directional claim is **reproduced** iff the "
    "interval excludes zero in the claimed direction, **differs** iff it excludes zero in the other direction, "
    "else **not resolved at this scale**. A flat claim (\"stays flat\") is decided as equivalence against its "
    "margin m, an absolute number in the quantity's units written down with its reason in the spec's "
    "`[equivalence]` table: **reproduced** when the 90 % interval lies inside ±m, **differs** when the 95 % "
    "interval lies wholly outside ±m, else not resolved (`stats.equivalence`). A flat claim without a margin (L2, "
    "\"linear\") can only differ or stay unresolved. The unit of replication is an independently trained model (a "
    "seed at one setting): the scatter between seeds is the error, never the noise draws or directions within a "
    "run. The tests (`sensviz.stats`): the OLS slope of a quantity in n over the kept runs, with its t(N − 2) "
    "interval (classical standard errors); the quadratic term of an OLS parabola, t(N − 3); Welch's interval for a "
    "difference between two groups; a one-sample t interval over seeds for paired differences; the difference of "
    "two independent estimates with Welch-Satterthwaite degrees of freedom; Pearson's r with Fisher's z interval "
    "(pooled within groups where the claim is within each task and n); and the offset of one task above the line "
    "shared with the others (OLS with a task indicator). Every test keeps the runs that pass the paper's "
    "convergence filter.\n\n"
    "Beside every claim: the runs kept of those run, per cell, and the step at which the kept runs first met the "
    "filter (where the tables record it), and its **secondaries**, named analyses of the same quantity: the "
    f"accuracy ≥ {ACCURATE} filter in place of the MSE filter (MEAN, which has no accuracy, keeps the MSE filter), "
    "heteroscedasticity-robust (HC3) standard errors for slopes, every run that ever converged for the dynamics, "
    "the last decoder step for the scratchpad, intervals clustered by function for the generalization "
    "correlation. A claim is marked **fragile** where a secondary's verdict differs from the primary's; the tally "
    "counts the primary only, and only the paper's claims (our own checks, such as R1 and R2, are listed apart).\n\n"
    "Where a claim is not resolved, \"to resolve\" gives the units (seeds per setting, functions or runs) at which "
    "the measured effect and variance would resolve it by the same rule (`stats.units_to_resolve`: a flat claim "
    "against its margin, never extrapolated from 2 degrees of freedom or fewer); in brackets the units the tables "
    "hold now and those for an 80 % chance of it."
)


def render(folder, scale: str | None = None) -> str:
    """The fidelity page (markdown) for one scale of the results folder."""
    return build(folder, scale)[0]


def decided_section(folder: Path, decided: dict) -> str:
    """The finished pre-registered sweeps, each as `sensviz decide` reports it (`preregistered.text`)."""
    from . import preregistered

    root = f"{folder.parent.name}/{folder.name}" if folder.parent.name else folder.name
    parts = ["## Decided by pre-registered designs",
             f"Each finished sweep of a spec's `[scales.{DECIDE}]` (seeds disjoint from every other scale's, its "
             "analysis written into the spec before the first run: one primary test per claim, its secondaries, the "
             "smallest effect the seeds were sized for) decided by that analysis, as `sensviz decide` prints it. "
             "Its verdict stands beside the claims above, never pooled with these tables."]
    for experiment, d in decided.items():
        command = (f"sensviz decide experiments/{experiment}.toml --scale {DECIDE} --tables {root}/{DECIDE}/{experiment}"
                   f" --standard {root}/standard")
        parts.append(f"**{experiment.replace('_', ' ').capitalize()}** (`{command}`):\n\n"
                     f"```text\n{preregistered.text(d).rstrip()}\n```")
    return "\n\n".join(parts)


def write_page(folder, out, scale: str | None = None) -> dict:
    """Write the fidelity page of `folder` (e.g. experiments/results) for one scale to `out`; a summary."""
    page, claims = build(folder, scale)
    out = write_text(out, page)
    return {"written": str(out), "scale": scale_of(page), "claims": sum(c.paper for c in claims),
            "own checks": sum(not c.paper for c in claims), **findings.tally(findings.story(folder).findings)}
