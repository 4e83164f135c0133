"""The findings: one verdict per claim across every table that tests it, and where each comes from.

Every table that tests a claim is evidence (`Evidence`): a scale's tables as the fidelity page's sections test
them (`collect`), a finished pre-registered design's primary test (`decisions`; a flat claim: one per arm), a
pre-registered design's tables tested afterwards by a later analysis written from them (`sensviz.confirm`'s
`sized_from`: exploratory there), and the state of a design whose rows are still coming in. Each claim's one
verdict (`Finding`, `findings`):

- the pre-registered one where a finished design decides it (the later of two designs stands; the page says
  which and why when they disagree; a flat claim whose arms disagree is not resolved);
- else the evidence with the most kept runs for the claim, named on the page (exploratory where it is a
  design's tables tested afterwards);
- a flat claim judged by a margin fixed after its data counts as not resolved, whichever way it read: each
  margin records when it was fixed (`[equivalence.KEY].fixed`: commit, date and `seen`, the scales whose
  tables it had seen), and a verdict on a seen scale's tables is set aside (`POST_HOC`). Each flat claim shows
  its relative change over the range beside the margin (`relative_change`).

The bottom line (`bottom_line`: first the scales behind the verdicts against the paper's, `headline`, then one
tally), the table under it, the five lines per experiment (`lead`), the fragility and "what would resolve the
rest" (`resolve`) are computed from that one table; the fidelity page, `sensviz fidelity`, the app's Experiments
page and the Lab read it. `story` computes it once per content of its inputs in a process (`digest`), `stored`
once per content across processes (a file in a cache folder). Above the analyses (`sensviz.preregistered`,
`sensviz.confirm`) and the results loading (`sensviz.results`).
"""

from __future__ import annotations

import functools
import json
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from . import confirm, preregistered, stats
from .claims import Claim, Tables, interval_text, kept_by, num, rows_where, span, threshold
from .experiments import registry
from .experiments.length_scaling import section as length_section
from .files import write_atomic
from .results import CONFIRM, DECIDE, code_files, content_digest, default_scale, load, scales
from .sweeps import load_spec


def decisions(folder) -> dict:
    """The finished pre-registered sweeps under a results folder (`folder/decide/<experiment>`, run under
    the spec `experiments/<experiment>.toml` beside it), each decided by the analysis its spec wrote down:
    `preregistered.Decision` by experiment. The variance the design was sized from: `folder/standard`."""
    folder = Path(folder)
    found = {}
    for experiment in registry():
        tables = folder / DECIDE / experiment
        spec = folder.parent / f"{experiment}.toml"
        if (tables / "runs.parquet").is_file() and spec.is_file():
            standard = folder / "standard" if (folder / "standard").is_dir() else None
            decision = preregistered.decide(spec, DECIDE, tables, standard)
            # named as the page's commands name it, wherever the folder was given from
            found[experiment] = replace(decision, spec=f"{folder.parent.name}/{spec.name}")
    return found


def confirm_designs(folder) -> dict[str, tuple[Path, Path]]:
    """Per experiment whose spec has a sized `[scales.confirm]` (`sensviz.confirm`): (its spec, the folder of its
    rows: the finished one under `folder`, else the running one beside it, whether or not a row is in yet)."""
    folder = Path(folder)
    found = {}
    for experiment in registry():
        spec = folder.parent / f"{experiment}.toml"
        if spec.is_file() and "sized_from" in _confirm_analysis(spec):
            done = folder / CONFIRM / experiment
            found[experiment] = (spec, done if done.is_dir() else folder.parent / "running" / CONFIRM / experiment)
    return found


def _confirm_analysis(spec: Path) -> set[str]:
    """The keys of the spec's `[scales.confirm.analysis]` (none without one)."""
    return set(tomllib.loads(spec.read_text()).get("scales", {}).get(CONFIRM, {}).get("analysis", {}))


def collect(folder: Path, scale: str) -> tuple[list[str], list[Claim], list[str], dict[str, Tables]]:
    """One scale's sections, claims, the experiments without tables, and the tables of the others."""
    sections, claims, missing, found = [], [], [], {}
    for experiment, registered in registry().items():
        tables = load(folder / scale, experiment)
        if tables is None:
            missing.append(experiment)
            continue
        found[experiment] = tables
        for section in registered.sections:
            try:
                text, some = section(tables)
            except KeyError as err:  # e.g. a class's table: the live monitor's `sharpness`, not the sweeps' columns
                raise ValueError(f"{folder / scale}: the {experiment} tables lack the column {err} that the fidelity "
                                 "page reads (tables of another kind, e.g. a class's: its verdict is on the Class page)"
                                 ) from None
            sections.append(text)
            claims += some
    keys = [c.key for c in claims]
    if len(set(keys)) != len(keys) or not all(keys):
        raise ValueError(f"claim keys must be given and unique on a page, got {keys}")
    return sections, claims, missing, found



# ----------------------------------------------------------------------------- one verdict per claim

PREREGISTERED, EXPLORATORY, SCALE = "pre-registered", "exploratory", "scale"
"""The kinds of evidence: a finished pre-registered design's primary test; a design's tables tested by a later
analysis written from them (`sensviz.confirm`'s `sized_from`); one scale's tables as the fidelity page tests them."""
POST_HOC = "margin set after the data"
"""Why a flat claim's verdict on tables its margin had seen counts as not resolved."""
ORDER = (DECIDE, CONFIRM)
"""The pre-registered designs, earliest first: where two decide one claim, the later stands (it was sized from the
earlier's tables and run on new seeds)."""


@dataclass
class Evidence:
    """One table's test of a claim: where (`source`), what kind, its verdict by its own rule, the estimate, the runs
    it kept, why it counts as not resolved whatever it read (`post_hoc`), and the runs table behind it."""

    source: str  # "standard", "decide", "decide tables", "confirm (8 of 1145 runs in)"
    kind: str  # PREREGISTERED, EXPLORATORY or SCALE
    verdict: str
    estimate: str
    kept: int
    runs: pd.DataFrame | None = None  # the finished runs of the tables it was tested on
    read: str = ""  # what a post-hoc verdict read before it was set aside
    fragile: str = "—"
    to_resolve: str = ""
    finished: bool = True  # a pre-registered design still filling is shown beside, never stands

    @property
    def post_hoc(self) -> bool:
        return bool(self.read)

    def text(self) -> str:
        verdict = f"{stats.UNRESOLVED} ({POST_HOC}; it read {self.read})" if self.post_hoc else self.verdict
        return f"{self.estimate} {verdict} ({self.kept} runs kept)"


@dataclass
class Finding:
    """A claim's one verdict (`stands`), why that evidence stands (`basis`), the rest beside it as history, and,
    for a flat claim, its relative change over the range of x beside the margin."""

    key: str
    experiment: str
    statement: str
    paper: bool
    stands: Evidence
    basis: str
    history: list[Evidence] = field(default_factory=list)
    margin: str = ""  # a flat claim's margin, with its units
    change: str = ""  # a flat claim: its relative change over the range, on the tables that stand
    disagreement: str = ""  # a later pre-registered design that reads otherwise than an earlier one, and which stands

    @property
    def verdict(self) -> str:
        return stats.UNRESOLVED if self.stands.post_hoc or not self.stands.finished else self.stands.verdict


def _post_hoc_read(c: Claim, scale: str) -> str:
    """What a flat claim read on a scale whose tables its margin had seen when it was fixed (`fixed.seen`), or
    ''; a margin with no `fixed` record counts as set after every table."""
    if c.direction != 0 or not c.margin or c.verdict == stats.UNRESOLVED:
        return ""
    seen = c.margin.get("fixed", {}).get("seen")
    return c.verdict if seen is None or scale in seen else ""


def _scale_evidence(folder: Path, scale: str) -> dict[str, tuple[Evidence, Claim]]:
    _, claims, _, tables = collect(folder, scale)
    runs = {e: t.finished() for e, t in tables.items()}
    return {c.key: (Evidence(scale, SCALE, c.verdict, interval_text(c.interval), c.kept, runs.get(c.experiment),
                             _post_hoc_read(c, scale), ", ".join(c.fragile) or "—", c.needed()), c) for c in claims}


def _decided_evidence(folder: Path, decided: dict, scale: str) -> dict[str, list[Evidence]]:
    """Per claim key, the evidence of one pre-registered design's decision (a flat claim: one per arm)."""
    found: dict[str, list[Evidence]] = {}
    for experiment, d in decided.items():
        t = load(folder / scale, experiment) if (folder / scale / experiment).is_dir() else None
        runs = t.finished() if t is not None else None
        for c in d.claims + d.flat:
            key, _, arm = c.name.partition(" (")
            verdict = c.holm_verdict if c.holm else c.primary.verdict
            source = f"{scale}" + (f", {arm.rstrip(')')} arm" if arm else "")
            found.setdefault(key, []).append(Evidence(
                source, PREREGISTERED, verdict, preregistered.estimate_text(c.primary), c.primary.kept, runs,
                fragile=", ".join(s.label for s in c.secondaries if s.fragile) or "—", to_resolve=c.to_resolve,
                finished=d.complete))
    return found


def _exploratory_evidence(folder: Path) -> dict[str, Evidence]:
    """The claims a later design was sized from earlier pre-registered tables for (`sensviz.confirm`: its
    `sized_from` a pre-registered scale), as its analysis tests them on those tables: exploratory there (they
    were not pre-registered on them), and a flat claim's margin was set after them."""
    found = {}
    for experiment, (spec, _) in confirm_designs(folder).items():
        source = load_spec(spec, CONFIRM).analysis["sized_from"]["scale"]
        if source not in ORDER:  # sized from a scale's tables: the scale's own evidence says it
            continue
        t = load(folder / source, experiment)
        for s in confirm.size(spec, CONFIRM, folder.parent.parent):
            found[s.name] = Evidence(f"{source} tables", EXPLORATORY, s.verdict, s.exploratory.rsplit(" (", 1)[0],
                                     s.kept, None if t is None else t.finished(),
                                     s.verdict if s.direction == 0 and s.verdict != stats.UNRESOLVED else "")
    return found


def _running_evidence(folder: Path) -> dict[str, Evidence]:
    """The claims of a pre-registered design whose rows are still coming in: its state so far, beside."""
    found = {}
    for experiment, (spec, rows) in confirm_designs(folder).items():
        if (folder / CONFIRM / experiment).is_dir():
            continue  # finished: decided with the others
        for r in confirm.state(spec, CONFIRM, rows, folder.parent.parent).to_dict("records"):
            found[r["claim"]] = Evidence(f"{CONFIRM} ({r['rows in']} runs in; interim until its stop)", PREREGISTERED,
                                         r["after Holm"], r["estimate"], int(r["kept"]), finished=False)
    return found


def relative_change(runs: pd.DataFrame, entry: dict) -> str:
    """A flat claim's change over its range: the mean of its kept runs at the largest x against the mean at the
    smallest, '+52 % over n = 4–14' (`entry`: its `[equivalence]` margin: runs, filter, quantity, x)."""
    rows = rows_where(runs, **entry["runs"])
    rows = rows[kept_by(rows, entry["filter"])].dropna(subset=[entry["quantity"]])
    if rows[entry["x"]].nunique() < 2:
        return ""
    means = rows.groupby(entry["x"])[entry["quantity"]].mean()
    change = means.iloc[-1] / means.iloc[0] - 1
    return f"{100 * change:+.0f} % over {entry['x']} = {num(means.index[0], False)}–{num(means.index[-1], False)}"


def _choose(key: str, pre: dict[str, list[list[Evidence]]], scale_ev: list[Evidence], exploratory: Evidence | None
            ) -> tuple[Evidence, str, list[Evidence], str]:
    """(the evidence that stands, why, the rest, a disagreement between pre-registered designs)."""
    designs = [arms for arms in pre.get(key, []) if arms and all(e.finished for e in arms)]
    rest = [e for arms in pre.get(key, []) for e in arms]
    if designs:
        arms = designs[-1]
        verdicts = {e.verdict for e in arms}
        stands = arms[0] if len(verdicts) == 1 else replace(arms[0], verdict=stats.UNRESOLVED,
                                                              source=f"{arms[0].source} (its arms disagree)")
        basis = "pre-registered: the analysis written into the spec before its first run"
        disagreement = ""
        if len(designs) > 1 and {e.verdict for e in designs[-2]} != verdicts:
            disagreement = (f"{designs[-2][0].source} read {designs[-2][0].verdict}; {arms[0].source}, the later "
                            "design (sized from the earlier one's tables, run on new seeds), stands")
        return stands, basis, [e for e in rest if e is not stands] + scale_ev + ([exploratory] if exploratory else []), \
            disagreement
    candidates = scale_ev + ([exploratory] if exploratory else [])
    stands = max(candidates, key=lambda e: (e.kept, candidates.index(e)))
    basis = f"the tables with the most kept runs for it ({stands.kept}, {stands.source})" + (
        "; exploratory: not pre-registered on them" if stands.kind == EXPLORATORY else "")
    return stands, basis, [e for e in candidates if e is not stands] + rest, ""


def findings(folder) -> list[Finding]:
    """Every claim's one verdict (`Finding`), in the order of the largest scale's page: the pre-registered one
    where a finished design decides it (the later of two); else the evidence with the most kept runs (a scale's
    tables, or a pre-registered design's tables tested for it afterwards: exploratory); a flat claim judged on
    tables its margin had seen counts as not resolved. The rest beside it as history."""
    folder = Path(folder)
    present = scales(folder)
    by_scale = {s: _scale_evidence(folder, s) for s in present}
    pre: dict[str, list[list[Evidence]]] = {}
    for scale in ORDER:
        decided = decisions(folder) if scale == DECIDE else {}
        for key, arms in _decided_evidence(folder, decided, scale).items():
            pre.setdefault(key, []).append(arms)
    for key, ev in _running_evidence(folder).items():
        pre.setdefault(key, []).append([ev])
    exploratory = _exploratory_evidence(folder)
    out = []
    for key, (_, c) in by_scale[default_scale(present)].items():
        scale_ev = [by_scale[s][key][0] for s in present if key in by_scale[s]]
        stands, basis, history, disagreement = _choose(key, pre, scale_ev, exploratory.get(key))
        margin, change = "", ""
        if c.direction == 0 and c.margin:
            margin = c.margin_text()
            change = relative_change(stands.runs, c.margin) if stands.runs is not None else ""
        out.append(Finding(key, c.experiment, c.statement, c.paper, stands, basis, history, margin, change,
                           disagreement))
    return out


# ----------------------------------------------------------------------------- the story they tell

SCALE_COLUMNS = {"d_model": "width d", "lr": "learning rate", "batch_size": "batch", "n": "n", "steps": "steps"}
"""The settings that place a verdict's runs against the paper's, in the order the headline names them."""


def tally(found: list[Finding]) -> dict[str, int]:
    """The paper's claims (not our own checks) by their one verdict."""
    return {v: sum(f.verdict == v for f in found if f.paper) for v in (stats.REPRODUCED, stats.DIFFERS, stats.UNRESOLVED)}


def _settings(runs: pd.DataFrame | None) -> dict[str, str]:
    return {c: span(runs[c]) if runs is not None and c in runs and len(runs) else "—" for c in SCALE_COLUMNS}


def _paper_runs(folder: Path) -> dict[str, pd.DataFrame]:
    """Per experiment, the runs of its spec's `paper` scale."""
    present = scales(folder)
    found = {}
    for e in registry():
        t = next((t for s in reversed(present) if (t := load(folder / s, e)) is not None), None)
        if t is not None and t.paper is not None:
            found[e] = t.paper
    return found


def reached(runs: pd.DataFrame, paper: pd.DataFrame) -> pd.Series:
    """The runs at the paper's scale: at least its smallest width, batch and steps, at a learning rate within its range."""
    return ((runs["d_model"] >= paper["d_model"].min()) & (runs["batch_size"] >= paper["batch_size"].min())
            & (runs["steps"] >= paper["steps"].min()) & runs["lr"].between(paper["lr"].min(), paper["lr"].max()))


def headline(found: list[Finding], papers: dict[str, pd.DataFrame]) -> str:
    """The bottom line's first sentence: the range of scales behind the verdicts against the paper's (the specs'
    `paper` scales), and how many of those runs reached the paper's scale."""
    behind = {}
    for f in found:
        if f.stands.runs is not None:
            behind[(f.experiment, f.stands.source.split(",")[0])] = (f.experiment, f.stands.runs)
    if not behind:
        return "No verdict here rests on runs."
    ours = pd.concat([runs for _, runs in behind.values()], ignore_index=True)
    known = [papers[e] for e in dict(behind.values()) if e in papers]
    theirs = pd.concat(known, ignore_index=True) if known else pd.DataFrame(columns=list(SCALE_COLUMNS))
    at = sum(int(reached(runs, papers[e]).sum()) for e, runs in behind.values() if e in papers)
    ranges = ", ".join(f"{label} = {span(ours[c]) if c in ours else '—'} (the paper: "
                       f"{span(theirs[c]) if c in theirs else '—'})" for c, label in SCALE_COLUMNS.items())
    measured = sum(len(runs) for e, runs in behind.values() if e in papers)
    return (f"The verdicts below rest on {len(ours)} runs at {ranges}; {at if at else 'no'} run"
            f"{'' if at == 1 else 's'} reached the paper's scale ({at} of {measured} had at least its width, batch "
            "and steps at a learning rate within its range"
            + (f"; {len(ours) - measured} have no paper scale in their spec" if measured < len(ours) else "") + ").")


def bottom_line(found: list[Finding], papers: dict[str, pd.DataFrame]) -> str:
    """The headline, then the one tally: each of the paper's claims once, by its one verdict."""
    paper = [f for f in found if f.paper]
    counts = tally(found)
    held = [f for f in paper if f.verdict == stats.REPRODUCED]
    kinds = {k: sum(f.stands.kind == k for f in held) for k in (PREREGISTERED, EXPLORATORY, SCALE)}
    post = [f.key for f in paper if f.stands.post_hoc]
    fragile = [f.key for f in paper if f.stands.fragile != "—"]
    ours = [f for f in found if not f.paper]
    return (f"**Bottom line.** {headline(found, papers)} Each of the paper's {len(paper)} claims has one verdict (the "
            "pre-registered one where a finished design decides it, else the one of the tables with the most kept runs "
            f"for it): {counts[stats.REPRODUCED]} reproduced ({kinds[PREREGISTERED]} pre-registered, "
            f"{kinds[EXPLORATORY]} exploratory on a pre-registered design's tables, {kinds[SCALE]} on one scale's "
            f"tables), {counts[stats.DIFFERS]} differ{'s' if counts[stats.DIFFERS] == 1 else ''}, "
            f"{counts[stats.UNRESOLVED]} not resolved"
            + (f" ({len(post)} of them, {', '.join(post)}, because their margin was set after the data they judge)"
               if post else "")
            + f"; {len(fragile)} of the verdicts {'is' if len(fragile) == 1 else 'are'} fragile "
            f"({', '.join(fragile) or 'none'}: a named secondary analysis reaches another)."
            + (f" Our own checks, not counted: {', '.join(f'{f.key} ({f.verdict})' for f in ours)}." if ours else ""))


def verdict_text(f: Finding) -> str:
    if f.stands.post_hoc:
        return f"{stats.UNRESOLVED} ({POST_HOC}; it read {f.stands.read})"
    if not f.stands.finished:
        return f"{stats.UNRESOLVED} (its design is still running)"
    return f.verdict + (" (exploratory)" if f.stands.kind == EXPLORATORY and f.verdict != stats.UNRESOLVED else "")


def table(found: list[Finding]) -> pd.DataFrame:
    """The one table: per claim its verdict, the evidence it stands on and why, the estimate and kept runs, a flat
    claim's margin and relative change, the scale of its runs, the fragility, the other evidence as history and
    what would resolve it."""
    rows = []
    for f in found:
        rows.append({"#": f.key + ("" if f.paper else " (ours)"), "experiment": f.experiment, "claim": f.statement,
                     "verdict": verdict_text(f), "stands on": f.stands.source, "why this one": f.basis,
                     "estimate [interval]": f.stands.estimate, "runs kept": f.stands.kept,
                     "margin (change over the range)": f"{f.margin} ({f.change or '—'})" if f.margin else "—",
                     **{label: value for (c, label), value in zip(SCALE_COLUMNS.items(),
                                                                   _settings(f.stands.runs).values())},
                     "fragile under": f.stands.fragile,
                     "history": "; ".join(f"{h.source}: {h.text()}" for h in f.history) or "—",
                     "to resolve": resolve(f) if f.verdict == stats.UNRESOLVED else "—",
                     "pre-registered designs": f.disagreement or "—"})
    return pd.DataFrame(rows)


def resolve(f: Finding) -> str:
    """What would resolve a claim its one table leaves open: a design with its margin fixed first (a post-hoc
    margin), the running design that tests it, or the units by the measured variance."""
    running = next((h for h in f.history if not h.finished), None)
    if f.stands.post_hoc:
        return ("a design whose margin is fixed before its data" + (f": {running.source}" if running else ""))
    if running:
        return f"{running.source}; by the measured variance here: {f.stands.to_resolve or '—'}"
    return f.stands.to_resolve or "—"


def lead(experiment: str, found: list[Finding], distance: str) -> str:
    """An experiment's five lines, from the one table: what holds (and on what), what does not, what is not
    resolved (and what would resolve it), which verdicts are fragile, and the distance to the paper's scale."""
    mine = [f for f in found if f.experiment == experiment]

    def named(f: Finding) -> str:
        return f"{f.key}{'' if f.paper else ' (ours)'}"

    holds = "; ".join(f"{named(f)} {f.statement} ({f.stands.source}{', exploratory' if f.stands.kind == EXPLORATORY else ''}"
                      f": {f.stands.estimate}{', ' + f.change + ' within ' + f.margin if f.change else ''})"
                      for f in mine if f.verdict == stats.REPRODUCED)
    differs = "; ".join(f"{named(f)}: {f.stands.estimate} ({f.stands.source})" for f in mine if f.verdict == stats.DIFFERS)
    open_ = "; ".join(f"{named(f)}: {f.stands.estimate} ({f.stands.source}"
                      + (f"; {POST_HOC}, it read {f.stands.read}" if f.stands.post_hoc else "")
                      + (f"; {f.change} within {f.margin}" if f.change else "") + f"; to resolve: {resolve(f)})"
                      for f in mine if f.verdict == stats.UNRESOLVED)
    fragile = "; ".join(f"{named(f)} under {f.stands.fragile}" for f in mine if f.stands.fragile != "—")
    return "\n".join([
        f"**{experiment.replace('_', ' ').capitalize()}.**",
        f"- Holds: {holds or 'none'}.",
        f"- Does not hold: {differs or 'none'}.",
        f"- Not resolved: {open_ or 'none'}.",
        f"- Fragile (a secondary analysis reaches another verdict): {fragile or 'none'}.",
        f"- Distance to the paper's scale: {distance}.",
    ])


# ----------------------------------------------------------------------------- once per table


@dataclass(frozen=True)
class Story:
    """The findings of a results folder and the paper's runs per experiment: what every page prints."""

    findings: list[Finding]
    papers: dict[str, pd.DataFrame]

    def bottom_line(self) -> str:
        return bottom_line(self.findings, self.papers)

    def table(self) -> pd.DataFrame:
        return table(self.findings)


def inputs(folder) -> list[Path]:
    """Every file the findings of a results folder read: its tables, the specs beside it and the rows of the
    designs still running (`experiments/running/confirm`)."""
    folder = Path(folder)
    running = folder.parent / "running" / CONFIRM
    found = [p for root in (folder, running) if root.is_dir() for p in root.rglob("*")
             if p.suffix in (".parquet", ".json") and p.is_file()]
    return sorted(found + sorted(folder.parent.glob("*.toml")))


def digest(folder) -> str:
    """A hash of the contents of every input of the findings (`inputs`) and of the code that reads them: the
    findings change exactly when it does."""
    return content_digest(inputs(folder) + code_files())


@functools.lru_cache(maxsize=4)
def _story(folder: str, key: str) -> Story:
    return Story(findings(folder), _paper_runs(Path(folder)))


def story(folder) -> Story:
    """The findings of a results folder, computed once per content of its inputs (`digest`) in this process."""
    return _story(str(Path(folder).resolve()), digest(folder))


def stored(folder, cache_dir) -> tuple[str, pd.DataFrame]:
    """The bottom line and the one table (`Story`) of a results folder, computed once per content of its inputs:
    kept in `cache_dir` as `findings-<digest>.json` (read back by every later process and page view; a file of
    another digest is another version and is removed)."""
    key = digest(folder)
    cache_dir = Path(cache_dir)
    path = cache_dir / f"findings-{key[:32]}.json"
    if path.is_file():
        found = json.loads(path.read_text(encoding="utf-8"))
        return found["bottom_line"], pd.DataFrame(**found["table"])
    told = story(folder)
    line, frame = told.bottom_line(), told.table()
    for old in cache_dir.glob("findings-*.json"):
        old.unlink(missing_ok=True)
    write_atomic(path, json.dumps({"bottom_line": line, "table": frame.to_dict("split")}).encode())
    return line, frame

# ----------------------------------------------------------------------------- the Lab's chapter 5


def lab_folder(results: Path) -> tuple[Path, str]:
    """The length-scaling folder chapter 5 reads, and its scale: the finished pre-registered sweep
    (`results/decide/length_scaling`, whose analysis decides L1 on the fidelity page), else the folder
    `sensviz.fidelity` reads by default (the largest scale present)."""
    decided = Path(results) / DECIDE / "length_scaling"
    if (decided / "runs.parquet").is_file():
        return decided, DECIDE
    present = [s for s in scales(results) if (Path(results) / s / "length_scaling" / "runs.parquet").is_file()]
    if not present:
        raise ValueError(f"{results}: no length-scaling results (run the length_scaling sweep)")
    scale = default_scale(present)
    return Path(results) / scale / "length_scaling", scale


def points(kept: pd.DataFrame) -> pd.DataFrame:
    """Kept runs' sharpness proxy ×4, mean and standard error per task and n, and how many runs."""
    grouped = kept.groupby(["task", "n"])["sharpness_proxy_pm1"]
    found = pd.DataFrame({"mean": grouped.mean(), "stderr": grouped.sem(), "count": grouped.size()}).reset_index()
    return found.assign(low=found["mean"] - found["stderr"].fillna(0), high=found["mean"] + found["stderr"].fillna(0))


def lab_data(results: Path) -> tuple[dict, dict[str, pd.DataFrame]]:
    """What chapter 5 draws from the shipped runs: their counts, the filter's threshold, the slope of
    PARITY's proxy in n with the fidelity page's verdict on it (its claim L1), and the kept runs' `points`.
    From the pre-registered sweep (`lab_folder`): L1 as its analysis decides it (the primary test),
    and the points of every task from the kept runs of that test's arm (PARITY's: the runs it kept)."""
    folder, scale = lab_folder(results)
    if scale == DECIDE:
        return _decided_lab_data(results, folder)
    t = load(folder.parent, "length_scaling")
    _, claims = length_section(t)
    slope = claims[0]  # "PARITY's sharpness grows with n": the slope of the proxy in n
    kept = t.kept()
    numbers = {"scale": scale, "runs": len(t.runs), "kept": len(kept), "threshold": threshold(t.runs),
               "slope": slope.interval.estimate, "slope_low": slope.interval.low, "slope_high": slope.interval.high,
               "verdict": slope.verdict, "level": stats.LEVEL}
    return numbers, {"points": points(kept)}


def relaxed_words(kept: pd.DataFrame, relax_steps: int) -> str:
    """How many kept runs trained `relax_steps` after they first met the filter, in a student's words: '42 of 48
    runs trained 2,000 steps after the filter (the other 6 reached their 8,000-step limit first)'."""
    full = int((kept["steps_since_converged"] >= relax_steps).sum())
    rest = len(kept) - full
    return (f"{full} of {len(kept)} runs trained {relax_steps:,} steps after the filter"
            + (f" (the other {rest} reached their {int(kept['steps'].max()):,}-step limit first)" if rest else ""))


def _decided_lab_data(results: Path, folder: Path) -> tuple[dict, dict[str, pd.DataFrame]]:
    l1 = decisions(results)["length_scaling"].claims[0]  # "PARITY's sharpness grows with n"
    analysis = load_spec(Path(results).parent / "length_scaling.toml", DECIDE).analysis
    primary_arm = analysis["claims"][l1.name]["primary_arm"]
    arm = analysis["arms"][primary_arm]
    t = load(folder.parent, "length_scaling")
    shown = rows_where(t.kept(), **arm)
    low, high = l1.primary.bounds
    numbers = {"scale": DECIDE, "runs": sum(c.planned for c in l1.cells), "kept": l1.primary.kept,
               "threshold": threshold(t.runs), "slope": l1.primary.interval.estimate, "slope_low": low,
               "slope_high": high, "verdict": l1.primary.verdict, "level": 1 - l1.alpha,
               "arm": f"{primary_arm} arm: " + (relaxed_words(rows_where(shown, task="parity"), arm["relax_steps"])
                                                if set(arm) == {"relax_steps"} else
                                                ", ".join(f"{k} = {v:,}" for k, v in arm.items()))}
    return numbers, {"points": points(shown)}
