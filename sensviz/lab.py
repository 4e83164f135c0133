"""The Lab: the paper's story as guided chapters, for the app's Lab page and the printable handout.

Seven chapters (`CHAPTERS`) tell why sensitive functions are hard for transformers:

1. sensitivity on the cube: PARITY beside FIRST, and the Fourier degree profile;
2. training PARITY: degree n takes over and sharpness rises;
3. how a transformer can be sensitive at all: the LayerNorm factors N and Blowup;
4. the landscape: a PARITY minimum beside a FIRST minimum, at the radius the Landscape page measures;
5. length scaling: the sharpness proxy against n from the shipped results, with the findings' verdict (`sensviz.findings`);
6. few examples: a random function fitted on a handful of inputs extrapolates with low sensitivity;
7. before training: random transformers compute low-sensitivity functions (`sensviz.init_study`, decided by
   `sensviz.init_claim`'s rule), and PARITY's minimum stays sharper than FIRST's at the least sharp of its
   function-preserving changes (`sensviz.orbit_sharpness`).

A lesson asks before it shows. A chapter holds its question, the prediction the student makes
(`Prediction`), the glossary terms it uses, the zoo models its one-click setup loads, its formula,
and two functions: `measure` computes from the models everything the chapter can show (`Data`:
tables for every value of its try-it control, e.g. every n), and `present` draws the figures and
writes the texts from that data alone. Every word with a number or a trend in a text is chosen by a
stated rule on the data the chapter draws (`Built.claims`), so the same chapter built on other data
says something else.

Fast on a fresh server: `write_data` measures the shipped checkpoints once (their bytes are never
changed) and writes `lab-data.json` beside them, each chapter keyed by the sha256 of the files it
reads, the whole file by the quantity registry (`sensviz.measure.registry_key`: a file measured before a
quantity was added is not read); `data` uses it when the keys match and measures on demand (with progress)
when they do not.
The same file holds the sidebar's summary of every model a chapter's setup selects (`stored_summary`),
so "Load this chapter's models" measures nothing either.
`sensviz.handout` prints the chapters on paper.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch

from . import charts, cube, glossary, init_charts, init_claim, lab_charts, results, tables
from .analysis import cube_outputs, sensitivity_report
from .blowup import blowup_summary
from .checkpoints import Checkpoint, file_hash, load_checkpoint
from .experiments import get_experiment, results_dir
from .experiments.generalization import as_n, completions
from .init_study import INIT_SCALES, init_studies, scale_free_view
from .losses import loss_for, targets
from .measure import RADIUS_FRACTIONS, MeasureSettings, measure, registry_key
from .models import ModelSettings
from .report import write_text
from .sharpness import limit_gap
from .slices import loss_slice, random_directions
from .tasks import pm1_factor
from .training import TrainingData
from .zoo import measure as zoo_measure

Loader = Callable[[str], Checkpoint]
"""Loads a zoo model by its name (the file stem, e.g. "encoder-parity-n8")."""
Progress = Callable[[str], None] | None
"""Told what the measurement is doing, one line at a time."""

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
DATA_FILE = "lab-data.json"
DATA_FORMAT, DATA_VERSION = "sensviz-lab-data", 1


def zoo_dir() -> Path:
    """The shipped zoo: $SENSVIZ_CHECKPOINT_DIR, else the checkpoints/ folder beside the package."""
    return Path(os.environ.get("SENSVIZ_CHECKPOINT_DIR") or PACKAGE_ROOT / "checkpoints")


@dataclass
class Sources:
    """Where a chapter's numbers come from: the zoo (`load`, and its folder for the hashes), the
    shipped results folder (chapter 5; `sensviz.experiments.results_dir()` by default)."""

    load: Loader
    checkpoints: Path
    results: Path

    @classmethod
    def shipped(cls, checkpoints: str | Path | None = None, results: str | Path | None = None) -> Sources:
        """The zoo in `checkpoints` (default `zoo_dir()`) and the results in `results` (default `results_dir()`)."""
        checkpoints = Path(checkpoints) if checkpoints else zoo_dir()
        return cls(zoo_loader(checkpoints), checkpoints, Path(results) if results else results_dir())


SETTINGS = MeasureSettings()
"""The Lab measures with everyone's defaults (`sensviz.measure`) ..."""
LANDSCAPE = dataclasses.replace(SETTINGS, directions=64)
"""... and L_ρ with the Landscape page's defaults (64 directions, the paper's radius), so both show one number."""


@dataclass
class Data:
    """What a chapter measured: numbers and tables (for every value of its control), JSON-safe."""

    numbers: dict
    tables: dict[str, pd.DataFrame]

    def to_json(self) -> dict:
        return {"numbers": {k: _plain(v) for k, v in self.numbers.items()},
                "tables": {k: json.loads(t.to_json(orient="split", index=False, double_precision=15))
                           for k, t in self.tables.items()}}

    @classmethod
    def from_json(cls, raw: dict) -> Data:
        return cls(dict(raw["numbers"]), {k: pd.DataFrame(t["data"], columns=t["columns"])
                                          for k, t in raw["tables"].items()})


def _plain(value):
    """A number or string as JSON has it (numpy scalars unwrapped)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value.item() if isinstance(value, np.generic) else value


@dataclass
class Figure:
    """One chart of a chapter, with the data behind it, and the chart shown before the reveal
    (`blind`: the same view with the asked-for quantity left out, under `blind_title`, its data only the
    columns it draws; None: nothing until then)."""

    key: str
    title: str
    chart: object  # an Altair chart
    data: pd.DataFrame
    caption: str = ""
    blind: object | None = None
    blind_title: str = ""  # the title of `blind` (default: `title`)
    hover: str = ""  # what hovering the chart shows: on screen only, not on paper (`sensviz.handout`)

    def __post_init__(self):
        self.chart = lab_charts.ticks(charts.readable(self.chart))
        self.blind = None if self.blind is None else lab_charts.ticks(charts.readable(self.blind))


@dataclass
class Built:
    """A chapter drawn from its data: the numbers its texts state, the words its rules chose (`claims`),
    its figures, the right prediction and the texts."""

    numbers: dict
    claims: dict[str, str]
    figures: list[Figure]
    correct: str  # the right option of the chapter's prediction
    look_for: str
    answer: str
    here: str = ""  # what this try-it setting draws, where it changes the curves and not the question's data


@dataclass(frozen=True)
class Prediction:
    """What the student predicts before the charts show it: one of `options`."""

    prompt: str
    options: tuple[str, ...]


@dataclass(frozen=True)
class Control:
    """A chapter's try-it control: the options its data was measured for, and the default."""

    label: str
    options: tuple
    default: object
    fmt: Callable[[object], str] = str


@dataclass
class Chapter:
    """One chapter: what it asks, the terms it defines, which models it loads, and how it is measured and drawn."""

    number: int
    slug: str
    title: str
    question: str
    predict: Prediction
    terms: tuple[str, ...]  # glossary terms, defined where the chapter first uses them
    models: tuple[str, ...]  # the zoo models the setup loads: the first is the model, the second the comparison
    reads: tuple[str, ...]  # every zoo model `measure` reads
    formula: tuple[str, ...]  # LaTeX, one line each: the definitions, shown before the prediction
    control: Control
    try_it: str  # what else to try, on the explorer's pages
    measure: Callable[[Sources, Progress], Data] = field(repr=False)
    present: Callable[[Data, object], Built] = field(repr=False)
    results: str | None = None  # the experiment whose shipped results `measure` reads (`Experiment.lab`), if any
    theorem: tuple[str, ...] = ()  # LaTeX: the paper's result that predicts the answer, shown with the answer
    symbols: tuple[str, ...] = ()  # each symbol of the formula and the charts, in words, shown beside them
    theorem_symbols: tuple[str, ...] = ()  # each symbol the theorem adds, shown with it
    depends: tuple[tuple[str, object], ...] = ()  # what `measure` computes besides the files: its settings, its tables
    rule: str = ""  # how the right option is decided from the data, in words (the rule `present` applies)

    def inputs(self, sources: Sources) -> dict[str, Path]:
        """The files the chapter's data depends on, by name."""
        files = {f"{name}.safetensors": sources.checkpoints / f"{name}.safetensors" for name in self.reads}
        if self.results:
            folder, _ = get_experiment(self.results).lab.folder(sources.results)
            files[f"{folder.parent.name}/{self.results}/runs.parquet"] = folder / "runs.parquet"
        return files

    def build(self, sources: Sources, choice=None, progress: Progress = None) -> Built:
        """The chapter for this control choice (default: the control's default), from stored or measured data."""
        return self.present(data(self, sources, progress), self.control.default if choice is None else choice)

    def definitions(self) -> list[str]:
        """One line per glossary term the chapter uses."""
        return [glossary.definition(t) for t in self.terms]


def what_changes(ch: Chapter, asked: Built, here: Built, choice) -> str:
    """At a try-it setting other than the question's own (`ch.control.default`, where the Answer is decided):
    whether the charts there show the same answer ("not visible at this setting" where they do not, with the
    chapter's rule), and what they show, from that setting's own data (`Built.here` where the setting changes only
    the curve drawn, else its `look_for`). It gives no reason why: no chapter has a claim, with a stated rule
    and an altered-data test, that explains the difference."""
    at = ch.control.fmt(choice)
    shown = here.here or here.look_for
    if here.correct == asked.correct:
        return f"With “{at}” chosen, the charts show the same answer (“{here.correct}”). {shown}"
    return (f"The answer is not visible at this setting ({at}). The rule: {ch.rule} By it the charts here say "
            f"“{here.correct}”, not “{asked.correct}” as at the question's setting "
            f"({ch.control.fmt(ch.control.default)}). {shown}")


def zoo_loader(directory: str | Path) -> Loader:
    """A loader of the zoo's checkpoints in `directory` (each loaded once)."""
    directory = Path(directory)
    found: dict[str, Checkpoint] = {}

    def load(name: str) -> Checkpoint:
        if name not in found:
            found[name] = load_checkpoint(directory / f"{name}.safetensors")
        return found[name]

    return load


def _say(progress: Progress, text: str) -> None:
    if progress:
        progress(text)


# ----------------------------------------------------------------------------- the shipped data


def hashes(chapter_: Chapter, sources: Sources) -> dict[str, str]:
    """The sha256 of every file the chapter reads (ValueError naming a missing one), and of its `depends`."""
    found = {}
    for name, path in chapter_.inputs(sources).items():
        if not path.is_file():
            raise ValueError(f"{path}: no such file (set SENSVIZ_CHECKPOINT_DIR or SENSVIZ_RESULTS_DIRS)")
        found[name] = file_hash(path)
    if chapter_.depends:  # measured with other settings (or into other tables): measured again
        found["settings"] = hashlib.sha256(json.dumps(chapter_.depends, sort_keys=True).encode()).hexdigest()
    return found


def _read_file(checkpoints: Path) -> dict:
    """`checkpoints/lab-data.json` as stored ({} when there is none or it is not ours)."""
    try:
        raw = json.loads((Path(checkpoints) / DATA_FILE).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict) or raw.get("format") != DATA_FORMAT or raw.get("version") != DATA_VERSION:
        return {}
    if raw.get("quantities") != registry_key():  # measured before a quantity was added, dropped or re-costed
        return {}
    return raw


def read_store(checkpoints: Path) -> dict:
    """The chapters stored in `checkpoints/lab-data.json` ({} when there is none or it is not ours)."""
    return _read_file(checkpoints).get("chapters", {})


def summary_models() -> tuple[str, ...]:
    """The zoo models the chapters' setups select ("Load this chapter's models"), each once."""
    return tuple(dict.fromkeys(name for ch in CHAPTERS for name in ch.models))


def measure_summary(ck: Checkpoint) -> dict:
    """What the explorer's sidebar shows of a model at its trained length: the columns of its instant
    quantities (`sensviz.zoo.measure`: accuracy, as_n of model and target, param_norm, Blowup, `exact`)."""
    return {k: _plain(v) for k, v in zoo_measure(ck.model, ck.task, ck.n, ck.encoding).items()}


def read_summaries(checkpoints: Path) -> dict:
    """The model summaries stored in `checkpoints/lab-data.json`, by model name ({} when there are none)."""
    return _read_file(checkpoints).get("summaries", {})


def stored_summary(summaries: dict, name: str, sha256: str, n: int) -> dict | None:
    """The shipped summary of zoo model `name` (`measure_summary`) when it was measured from a file with
    this sha256 at this length n; else None (measure it)."""
    entry = summaries.get(name)
    if not entry or entry.get("sha256") != sha256 or entry.get("n") != n:
        return None
    return dict(entry["summary"])


def stored(chapter_: Chapter, sources: Sources, store: dict | None = None) -> Data | None:
    """The chapter's shipped data when it was measured from exactly these files, else None (stale or absent)."""
    entry = (read_store(sources.checkpoints) if store is None else store).get(str(chapter_.number))
    if not entry or entry.get("inputs") != hashes(chapter_, sources):
        return None
    return Data.from_json(entry["data"])


def data(chapter_: Chapter, sources: Sources, progress: Progress = None) -> Data:
    """The chapter's data: shipped when current, else measured now (telling `progress` what it does)."""
    found = stored(chapter_, sources)
    if found is not None:
        return found
    _say(progress, f"The shipped data of chapter {chapter_.number} is missing or older than its models: measuring "
                   f"{', '.join(chapter_.reads) or 'the shipped results'} now")
    return chapter_.measure(sources, progress)


def write_data(checkpoints: str | Path | None = None, results: str | Path | None = None,
               progress: Progress = None) -> dict:
    """Measure every chapter from the zoo and the results and write `lab-data.json` beside the checkpoints
    (the checkpoints are only read); a chapter whose files did not change is kept as it is."""
    sources = Sources.shipped(checkpoints, results)
    old = read_store(sources.checkpoints)
    chapters, measured = {}, []
    for ch in CHAPTERS:
        inputs = hashes(ch, sources)
        entry = old.get(str(ch.number))
        if not entry or entry.get("inputs") != inputs:
            _say(progress, f"chapter {ch.number}: measuring {', '.join(ch.reads) or 'the shipped results'}")
            entry = {"inputs": inputs, "data": ch.measure(sources, progress).to_json()}
            measured.append(ch.number)
        chapters[str(ch.number)] = entry
    old_summaries, summaries, summarised = read_summaries(sources.checkpoints), {}, []
    for name in summary_models():
        sha256 = file_hash(sources.checkpoints / f"{name}.safetensors")
        entry = old_summaries.get(name)
        if not entry or entry.get("sha256") != sha256:
            _say(progress, f"the sidebar's summary of {name}")
            ck = sources.load(name)
            entry = {"sha256": sha256, "n": ck.n, "summary": measure_summary(ck)}
            summarised.append(name)
        summaries[name] = entry
    path = sources.checkpoints / DATA_FILE
    text = json.dumps({"format": DATA_FORMAT, "version": DATA_VERSION, "quantities": registry_key(),
                       "chapters": chapters, "summaries": summaries},
                      indent=None, separators=(",", ":"), allow_nan=False)
    write_text(path, text + "\n")
    return {"written": str(path), "measured": measured, "kept": [c.number for c in CHAPTERS if c.number not in measured],
            "summarised": summarised, "bytes": path.stat().st_size}


# ----------------------------------------------------------------------------- the rules behind the words


def share_words(share: float) -> str:
    """Where a property holds: 'at every input' (all), 'at almost every input' (≥ 95 %), else the share."""
    if share >= 1.0:
        return "at every input"
    if share >= 0.95:
        return f"at almost every input ({share:.0%})"
    return f"at {share:.0%} of the inputs"


def change_words(ratio: float, fold: float = 1.5) -> str:
    """A change by `ratio` (after / before): 'rises k-fold' above `fold`, 'falls k-fold' below 1/`fold`, else 'stays
    about the same'."""
    if ratio > fold:
        return f"rises {ratio:.2g}-fold"
    if ratio < 1 / fold:
        return f"falls {1 / ratio:.2g}-fold"
    return "stays about the same"


def compare_words(ratio: float, larger: str = "larger", smaller: str = "smaller") -> str:
    """A ratio of two sizes: 'k× larger' above 1.2, 'k× smaller' below 1/1.2, else 'about the same'."""
    if ratio > 1.2:
        return f"{ratio:.2g}× {larger}"
    if ratio < 1 / 1.2:
        return f"{1 / ratio:.2g}× {smaller}"
    return "about the same"


def than(words: str) -> str:
    """A comparison from `compare_words` joined to what it compares with: 'k× larger than', 'about the same as'."""
    return f"{words} {'as' if words == 'about the same' else 'than'}"


def separated(a: float, a_err: float, b: float, b_err: float) -> int:
    """+1 when a's error bar lies wholly above b's, -1 when wholly below, 0 when they overlap."""
    return 1 if a - a_err > b + b_err else -1 if a + a_err < b - b_err else 0


def sharper_words(side: int, ratio: float) -> str:
    """PARITY's minimum against FIRST's (`side` from `separated`, `ratio` = PARITY's L_ρ / FIRST's): 'k× sharper'
    when its error bar lies wholly above, 'k× flatter' wholly below, else not clearly sharper."""
    if side > 0:
        return f"{ratio:.2g}× sharper"
    if side < 0:
        return f"{1 / ratio:.2g}× flatter"
    return "not clearly sharper: the error bars overlap"


def trend_words(ns, means) -> str:
    """The shape of a curve over n: 'rises with n' / 'falls with n' when every step goes one way, else
    where it peaks (or dips) and what it does there."""
    ns, means = list(ns), list(means)
    steps = np.diff(means)
    if len(means) < 2:
        return f"has one length only (n = {ns[0]})"
    values = " → ".join(f"{m:.2g}" for m in means)
    if np.all(steps > 0):
        return f"rises with n at every step ({values})"
    if np.all(steps < 0):
        return f"falls with n at every step ({values})"
    top = int(np.argmax(means))
    lengths = ", ".join(str(int(n)) for n in ns)
    return f"does not rise steadily: it goes {values} over n = {lengths}, highest at n = {int(ns[top])}"


def gap_words(gaps: dict[str, float], directions: int) -> str:
    """Where each curve's smallest-ρ point lies from its exact dashed limit (`sharpness.limit_gap`, in standard
    errors, by name): within two standard errors when every |gap| ≤ 2, else which lie further ('' when no gap is
    finite: a standard error of 0)."""
    gaps = {name: gap for name, gap in gaps.items() if np.isfinite(gap)}  # no standard error: nothing to say
    if not gaps:
        return ""
    listed = ", ".join(f"{name} {gap:+.1f}" for name, gap in gaps.items())
    far = [name for name, gap in gaps.items() if abs(gap) > 2]
    if not far:
        return (f"At the smallest radius each curve lies within two standard errors of its exact dashed line "
                f"({listed}): the curve is an estimate from {directions} random directions, the same ones at every "
                "radius, so their sampling error stays as ρ shrinks.")
    return (f"At the smallest radius {' and '.join(far)} lie{'s' if len(far) == 1 else ''} more than two standard "
            f"errors from the exact dashed line ({listed}), more than {directions} random directions' sampling error "
            "usually gives.")


def upper_first(text: str) -> str:
    """The text with its first letter a capital (the rest as it is: PARITY stays PARITY)."""
    return text[:1].upper() + text[1:]


def nearest(value: float, options: dict[str, float]) -> str:
    """The option whose value is closest to `value`."""
    return min(options, key=lambda name: abs(options[name] - value))


def _task_name(ck: Checkpoint) -> str:
    return ck.task.name.upper() if ck.task is not None else "?"


# ----------------------------------------------------------------------------- chapter 1

SENSITIVITY_NS = (4, 6, 8, 10)
FLIPS = {"none of them": 0.0, "about one": 1.0, "about half of them": 0.5, "all n of them": 1.0}


def _sensitivity_measure(src: Sources, progress: Progress = None) -> Data:
    cubes, degrees = [], []
    for n in SENSITIVITY_NS:
        for task in ("parity", "first"):
            _say(progress, f"the cube of encoder-{task}-n{n}: s(f,x) at all 2^{n} inputs, and its Fourier degrees")
            ck = src.load(f"encoder-{task}-n{n}")
            report = sensitivity_report(ck.model, ck.n, ck.task, ck.encoding, SETTINGS.exact_limit)
            name = _task_name(ck)
            cubes.append(tables.vertex_table(report, ck.encoding).assign(model=name, n=n))
            d = tables.degree_table(report)
            degrees.append(d[d["function"] == "model"].assign(model=name, n=n))
    return Data({}, {"cube": pd.concat(cubes, ignore_index=True), "degrees": pd.concat(degrees, ignore_index=True)})


def _sensitivity_present(data: Data, n) -> Built:
    cube_rows = data.tables["cube"][data.tables["cube"]["n"] == n]
    grids = {name: cube_rows[cube_rows["model"] == name].drop(columns=["model", "n"]).reset_index(drop=True)
             for name in ("PARITY", "FIRST")}
    degree_rows = data.tables["degrees"][data.tables["degrees"]["n"] == n].reset_index(drop=True)
    s_parity, s_first = grids["PARITY"]["s_model"], grids["FIRST"]["s_model"]
    numbers = {"n": n, "as_parity": s_parity.mean(), "as_first": s_first.mean(),
               "all_parity": float((s_parity.round() == n).mean()), "one_first": float((s_first.round() == 1).mean())}
    peaks = {}
    for name in ("PARITY", "FIRST"):
        rows = degree_rows[degree_rows["model"] == name]
        top = rows.loc[rows["weight"].idxmax()]
        peaks[name] = (int(top["degree"]), float(top["weight"]))
    numbers.update(peak_parity=peaks["PARITY"][0], weight_parity=peaks["PARITY"][1], peak_first=peaks["FIRST"][0],
                   weight_first=peaks["FIRST"][1])
    claims = {"parity_where": share_words(numbers["all_parity"]), "first_where": share_words(numbers["one_first"])}
    options = {"none of them": 0.0, "about one": 1.0, "about half of them": n / 2, "all n of them": float(n)}
    correct = nearest(numbers["as_parity"], options)
    look_for = (f"Count the colours. The PARITY model changes its answer under all {n} flips {claims['parity_where']} "
                f"(as_n = {numbers['as_parity']:.3g} of a possible {n}), and its Fourier weight sits at degree "
                f"{peaks['PARITY'][0]} (d_{peaks['PARITY'][0]} = {peaks['PARITY'][1]:.2f}). The FIRST model changes "
                f"under exactly one flip {claims['first_where']} (as_n = {numbers['as_first']:.3g}), its weight at "
                f"degree {peaks['FIRST'][0]} (d_{peaks['FIRST'][0]} = {peaks['FIRST'][1]:.2f}).")
    answer = (f"{upper_first(correct)}: the trained PARITY model's as_n is {numbers['as_parity']:.3g} of {n}. Every flip "
              f"changes PARITY, so s(PARITY, x) = n; only the first bit's flip changes FIRST, so s(FIRST, x) = 1. "
              "A function that reacts to every bit has all its Fourier weight at the top degree. The later chapters "
              "ask what it takes of a transformer to compute such a function, and what its training finds.")
    # no blind view: the map of outputs in Gray order answers the question by counting neighbouring colours
    figures = [
        Figure("cube", f"s(f,x) of each model at each of the 2^{n} inputs (colour: 0 to {n} flips)",
               charts.cube_grids(grids, "s_model", n), cube_rows,
               "Each cell is one input x; neighbouring cells differ in one bit. A white dot marks an input where "
               "the task's answer is 1.",
               hover=f"Hover a cell: bits is the input x, vertex its number (0 to {2**n - 1}), output the model's raw "
               "output on the 0/1 scale it was trained on, s(model, x) the colour."),
        Figure("degrees", "Fourier degree profile d_k of each model", charts.degree_profiles(degree_rows), degree_rows,
               "d_k: the share of the function's weight on products of exactly k bits."),
    ]
    return Built(numbers, claims, figures, correct, look_for, answer)


# ----------------------------------------------------------------------------- chapter 2

SHARPNESS = "sharpness L_ρ"
CURVES = {SHARPNESS: SHARPNESS, "as_n(model)": "as_n(model)", "loss": "loss", "param_norm": "‖θ‖",
          "Blowup": "E[log Blowup]"}
"""Chapter 2's try-it options and the curve each draws (the training records' metric of that name)."""


def _training_measure(src: Sources, progress: Progress = None) -> Data:
    _say(progress, "the training measurements of encoder-parity-n8")
    ck = src.load("encoder-parity-n8")
    records = ck.metadata.get("extra", {}).get("measurements") or []
    if not records:
        raise ValueError("encoder-parity-n8 carries no training measurements: rebuild it with `sensviz zoo build`")
    return Data({"n": ck.n}, {"history": tables.degree_history_table(records), "curves": tables.training_table(records)})


def takeover(history: pd.DataFrame, n: int) -> int | None:
    """The rule for 'degree n takes over by step k': the first measured step with d_n ≥ 0.5 (None: never)."""
    top = history[history["degree"] == n].sort_values("step")
    taken = top[top["weight"] >= 0.5]
    return int(taken["step"].iloc[0]) if len(taken) else None


def _training_present(data: Data, metric) -> Built:
    n = int(data.numbers["n"])
    history, curves = data.tables["history"], data.tables["curves"]
    step = takeover(history, n)
    last = int(history["step"].max())
    before = history[history["step"] < step] if step is not None else history
    by_degree = before.groupby("degree")["weight"].mean()
    low = int(by_degree.idxmax()) if len(by_degree) else 0
    sharp = curves[curves["metric"] == SHARPNESS].sort_values("step")
    if step is not None and (sharp["step"] < step).any() and (sharp["step"] >= step).any():
        ratio = sharp[sharp["step"] >= step]["value"].mean() / sharp[sharp["step"] < step]["value"].mean()
    else:
        ratio = float("nan")
    top_before = float(before[before["degree"] == n]["weight"].max()) if len(before) else 0.0
    numbers = {"n": n, "step": step, "steps": last, "low_degree": low, "low_weight": float(by_degree.max()),
               "top_before": top_before, "sharp_ratio": ratio,
               "top_end": float(history[(history["step"] == last) & (history["degree"] == n)]["weight"].iloc[0])}
    claims = {"takeover": f"takes over by step {step}" if step is not None else f"does not take over in {last} steps",
              "sharpness": change_words(ratio) if np.isfinite(ratio) else "cannot be compared"}
    correct = ("it rises" if claims["sharpness"].startswith("rises") else
               "it falls" if claims["sharpness"].startswith("falls") else "it stays about the same")
    look_for = (f"Before step {step if step is not None else last}, the weight sits mostly at degree {low} (mean "
                f"d_{low} = {numbers['low_weight']:.2f}) and d_{n} stays at or below {top_before:.2f}. PARITY has all "
                f"its weight at degree {n}; the rule: degree {n} takes over at the first measured step with d_{n} ≥ "
                f"0.5. Degree {n} {claims['takeover']} (d_{n} = {numbers['top_end']:.2f} at step {last}). Sharpness "
                f"L_ρ {claims['sharpness']} from before that step to after it (mean over the measurements on each side).")
    answer = (f"{upper_first(correct)}. Until degree {n} appears the model is an almost constant function (degree "
              f"{low}); once it computes PARITY its output reacts to every bit, and so to small changes of the "
              f"parameters: sharpness {claims['sharpness']}.")
    shown_metric = CURVES.get(metric, SHARPNESS)
    shown = curves[curves["metric"].isin(["accuracy", shown_metric])].reset_index(drop=True)
    blind_metric = "loss" if shown_metric == SHARPNESS else shown_metric  # the sharpness is the answer
    blind = curves[curves["metric"].isin(["accuracy", blind_metric])]
    figures = [
        Figure("degree_history", "Fourier degree profile d_k of the model over training", charts.degree_history(history),
               history, f"Each column is one measurement; degree {n} is PARITY's only Fourier weight."),
        Figure("curves", f"accuracy and {shown_metric} over training", charts.training_curves(shown, columns=2), shown,
               blind=charts.training_curves(blind, columns=2),
               blind_title=f"accuracy and {blind_metric} over training"
                           + (" (sharpness L_ρ appears when you reveal the answer)" if blind_metric != shown_metric else "")),
    ]
    return Built(numbers, claims, figures, correct, look_for, answer, curve_words(curves, shown_metric, step))


CURVE_FOLD = 1.1
"""Chapter 2's try-it curve is described as rising or falling from a 1.1-fold change of its mean (the answer's own
rule, for the sharpness, needs 1.5-fold): a curve that visibly steps up is not 'about the same'."""

LOG_CURVES = {"E[log Blowup]": "Blowup's geometric mean (e^E[log Blowup])"}
"""Curves recorded as a logarithm: their change is the fold of e^value, named so."""


def curve_words(curves: pd.DataFrame, metric: str, step: int | None) -> str:
    """What chapter 2's chosen curve does: its first and last value, and its change from before the takeover step to
    after it (the mean on each side, `change_words` at `CURVE_FOLD`; for a logarithm, e^(mean after − mean before))."""
    line = curves[curves["metric"] == metric].sort_values("step")
    first, last = line.iloc[0], line.iloc[-1]
    said = (f"The curve beside accuracy is {metric}: {first['value']:.3g} at step {int(first['step'])}, "
            f"{last['value']:.3g} at step {int(last['step'])}")
    if step is None or not (line["step"] < step).any() or not (line["step"] >= step).any():
        return said + "."
    after, before = line[line["step"] >= step]["value"].mean(), line[line["step"] < step]["value"].mean()
    if metric in LOG_CURVES:
        return said + (f"; its mean is {before:.3g} before step {step} and {after:.3g} after it, so "
                       f"{LOG_CURVES[metric]} {change_words(float(np.exp(after - before)), CURVE_FOLD)}.")
    return said + f"; it {change_words(after / before, CURVE_FOLD)} from before step {step} to after it (mean on each side)."


ZOO_RUN, YOUR_RUN = "the pretrained model's run", "your run"


def your_run(data: Data, metric, records: list[dict]) -> Figure:
    """Chapter 2's curves with the student's own training run (its measurement records) drawn over the zoo's."""
    curves = data.tables["curves"]
    shown_metric = CURVES.get(metric, SHARPNESS)
    mine = tables.training_table(records)
    both = pd.concat([curves.assign(run=ZOO_RUN), mine.assign(run=YOUR_RUN)], ignore_index=True)
    both = both[both["metric"].isin(["accuracy", shown_metric])].reset_index(drop=True)
    steps = sorted(set(mine["step"]))
    return Figure("curves", f"accuracy and {shown_metric}: your run over the pretrained model's",
                  charts.training_curves(both, columns=2), both,
                  f"Your run: {len(steps)} measurements so far, up to step {steps[-1] if steps else 0}.")


# ----------------------------------------------------------------------------- chapter 3

BLOWUP_NS = (8, 10, 12)
BLOWUP_DEFAULT = 12  # the question's length: the longest, where the two models differ most


def _blowup_measure(src: Sources, progress: Progress = None) -> Data:
    layers, histograms, rows = [], [], []
    for n in BLOWUP_NS:
        for task in ("parity", "first"):
            _say(progress, f"the LayerNorm factors N of encoder-{task}-n{n} at all 2^{n} inputs")
            ck = src.load(f"encoder-{task}-n{n}")
            summary = blowup_summary(ck.model, ck.n, SETTINGS.exact_limit)
            name = _task_name(ck)
            layers += [{"model": name, "n": n, "ln": i, "ln_name": row["name"], "mean_N": row["mean"], "max_N": row["max"]}
                       for i, row in enumerate(summary.per_ln)]
            histograms.append(tables.blowup_histogram(summary.values).assign(model=name, n=n))
            rows.append({"model": name, "n": n, "blowup": summary.mean, "norm": ck.model.param_norm()})
    return Data({}, {"layers": pd.DataFrame(layers), "histogram": pd.concat(histograms, ignore_index=True),
                     "models": pd.DataFrame(rows)})


def closed_steps(hist: pd.DataFrame) -> pd.DataFrame:
    """Each model's histogram with a last point at the end of its last bin, at fraction 0: a step line ends at its last
    point, so without it the last bin would be a single point at the axis' edge instead of a step of its width. The
    models stay in their order (PARITY first, as in the factors' chart: each keeps its colour, shape and dash)."""
    ends = hist.loc[hist.groupby("model")["log10_end"].idxmax()].assign(
        log10_start=lambda t: t["log10_end"], fraction=0.0)
    order = {model: i for i, model in enumerate(dict.fromkeys(hist["model"]))}
    both = pd.concat([hist, ends], ignore_index=True)
    return both.assign(rank=both["model"].map(order)).sort_values(["rank", "log10_start"], kind="stable").drop(columns="rank")


def _blowup_present(data: Data, n) -> Built:
    layers = data.tables["layers"][data.tables["layers"]["n"] == n].drop(columns="n").reset_index(drop=True)
    hist = data.tables["histogram"][data.tables["histogram"]["n"] == n].reset_index(drop=True)
    models = data.tables["models"][data.tables["models"]["n"] == n].set_index("model")
    mean_n = layers.groupby("model")["mean_N"].mean()
    numbers = {"n": n, "mean_N_parity": mean_n["PARITY"], "mean_N_first": mean_n["FIRST"],
               "max_N_parity": layers[layers["model"] == "PARITY"]["max_N"].max(),
               "max_N_first": layers[layers["model"] == "FIRST"]["max_N"].max(),
               "blowup_parity": models.loc["PARITY", "blowup"], "blowup_first": models.loc["FIRST", "blowup"],
               "norm_parity": models.loc["PARITY", "norm"], "norm_first": models.loc["FIRST", "norm"]}
    factor_ratio = numbers["mean_N_parity"] / numbers["mean_N_first"]
    claims = {"factors": compare_words(factor_ratio),
              "blowup": compare_words(numbers["blowup_parity"] / numbers["blowup_first"]),
              "norm": compare_words(numbers["norm_parity"] / numbers["norm_first"])}
    correct = ("the PARITY model" if factor_ratio > 1.2 else "the FIRST model" if factor_ratio < 1 / 1.2
               else "about the same")
    look_for = (f"At n = {n} the PARITY model's LayerNorm factors N are {than(claims['factors'])} the FIRST model's "
                f"(mean over LayerNorms and inputs {numbers['mean_N_parity']:.3g} against {numbers['mean_N_first']:.3g}; "
                f"largest {numbers['max_N_parity']:.3g} against {numbers['max_N_first']:.3g}). Multiplied over the "
                f"layers, its mean Blowup is {claims['blowup']} ({numbers['blowup_parity']:.3g} against "
                f"{numbers['blowup_first']:.3g}), while its parameter norm is {claims['norm']} "
                f"({numbers['norm_parity']:.3g} against {numbers['norm_first']:.3g}).")
    answer = (f"{upper_first(correct)}. LayerNorm divides by the standard deviation of its input: when that is "
              "small, N is large and a small change (one flipped bit) is magnified. The paper's theorem says a "
              "sensitive function needs large parameters or this blowup; here the PARITY model's Blowup is "
              f"{claims['blowup']} and its parameter norm {claims['norm']}.")
    figures = [
        Figure("factors", f"the LayerNorm factors N of each LayerNorm (n = {n}): mean and largest over the inputs",
               charts.per_ln_bars(layers.assign(model=layers["model"])), layers,
               f"N = 1/√(variance + ε) of the LayerNorm's input; each bar is one LayerNorm, named as in the model "
               f"({layers['ln_name'].iloc[0]} is the first)."),
        Figure("blowup_hist", "Blowup(x) over the inputs: the factors multiplied over the layers",
               charts.model_log_histograms(closed_steps(hist)), hist,
               "Blowup(x) = Π_k max_i (1 + N_i^(k)(x)); a log axis."),
    ]
    return Built(numbers, claims, figures, correct, look_for, answer)


# ----------------------------------------------------------------------------- chapter 4

LANDSCAPE_MODELS = ("encoder-parity-n16", "encoder-first-n16")


def _landscape_measure(src: Sources, progress: Progress = None) -> Data:
    rows, lines = [], []
    for name in LANDSCAPE_MODELS:
        _say(progress, f"L_ρ of {name} at 4 radii ({LANDSCAPE.directions} random directions each), its small-ρ "
                       "limit, and loss slices")
        ck = src.load(name)
        found = measure(ck.model, ck.task, ck.n, LANDSCAPE, ("sharpness", "limit", "radii"), ck.encoding)
        label = _task_name(ck)
        for fraction, r in zip(RADIUS_FRACTIONS, found.radii):
            rows.append({"model": label, "fraction": fraction, "rho": r.rho, "value": r.value, "stderr": r.stderr,
                         "ratio": r.value / r.rho**2, "low": (r.value - r.stderr) / r.rho**2,
                         "high": (r.value + r.stderr) / r.rho**2, "limit": found.limit.value, "paper_rho": found.rho})
        bits, _ = cube.measurement_inputs(ck.n, LANDSCAPE.measure_inputs, LANDSCAPE.measure_seed)
        direction = random_directions(ck.model, 1, "none", seed=0)  # unit norm: alpha is the distance |Delta|
        for fraction in RADIUS_FRACTIONS:
            line = loss_slice(ck.model, bits, targets(ck.task, bits, ck.encoding), direction, loss_for(ck.encoding),
                              ck.encoding, span=2 * fraction * found.rho, steps=21)
            lines.append(line[["alpha", "loss"]].assign(model=label, fraction=fraction))
    return Data({"n": 16}, {"radius": pd.DataFrame(rows), "slices": pd.concat(lines, ignore_index=True)})


def _landscape_present(data: Data, fraction) -> Built:
    curve, slices_ = data.tables["radius"], data.tables["slices"]
    at = curve[curve["fraction"] == fraction].set_index("model")
    p, f = at.loc["PARITY"], at.loc["FIRST"]
    side = separated(p["value"], p["stderr"], f["value"], f["stderr"])
    ratio = p["value"] / f["value"]
    limit_ratio = p["limit"] / f["limit"]
    numbers = {"n": int(data.numbers["n"]), "fraction": fraction, "rho": p["rho"], "paper_rho": p["paper_rho"],
               "sharp_parity": p["value"], "stderr_parity": p["stderr"], "sharp_first": f["value"],
               "stderr_first": f["stderr"], "ratio_parity": p["ratio"], "ratio_first": f["ratio"],
               "sharp_ratio": ratio, "limit_parity": p["limit"], "limit_first": f["limit"], "limit_ratio": limit_ratio}
    claims = {"sharper": sharper_words(side, ratio),
              "limit": ("tells the same story" if limit_ratio > 1.5 else
                        "does not separate them (their ratio is between 1/1.5 and 1.5)" if limit_ratio > 1 / 1.5 else
                        "points the other way")}
    correct = "PARITY's" if side > 0 else "FIRST's" if side < 0 else "about the same"
    where = "the paper's radius" if fraction == 1.0 else f"{fraction:g} of the paper's radius"
    look_for = (f"At {where}, ρ = {p['rho']:.3g}: L_ρ is {p['value']:.3g} ± {p['stderr']:.2g} for PARITY and "
                f"{f['value']:.3g} ± {f['stderr']:.2g} for FIRST, so PARITY's minimum is {claims['sharper']}. The "
                f"chart divides by ρ² to put all radii on one scale: L_ρ/ρ² = {p['ratio']:.3g} and {f['ratio']:.3g} "
                f"there. The dashed lines show the small-ρ limit E‖∇T‖²/P ({p['limit']:.3g} and {f['limit']:.3g}, "
                f"ratio {limit_ratio:.2g}): it {claims['limit']}.")
    answer = (f"{upper_first(correct)}: at {where} PARITY's minimum is {claims['sharper']}. The theorem takes n → ∞ "
              "first, at a small but fixed radius ρ, and only then lets ρ shrink: it speaks of L_ρ at a radius as the "
              "input grows, what the paper measures and the Landscape page shows first. The dashed small-ρ limit at "
              f"this one n is another quantity, the first-order part of the sharpness (ratio {limit_ratio:.2g}).")
    lines = slices_[slices_["fraction"] == fraction].drop(columns="fraction").reset_index(drop=True)
    figures = [
        Figure("radius", "L_ρ/ρ² against the radius ρ; dashed: the exact small-ρ limit; grey: the paper's radius",
               lab_charts.radius_ticks(charts.radius_curves(curve, float(p["paper_rho"])), curve["rho"].unique()), curve,
               f"±1 standard error over {LANDSCAPE.directions} seeded directions. " + gap_words(
                   {name: limit_gap(rows) for name, rows in curve.groupby("model", sort=False)}, LANDSCAPE.directions)),
        Figure("slices", f"the loss along one random direction, out to 2ρ either side (ρ = {p['rho']:.3g})", charts.model_lines(
            lines, "alpha", "loss", "distance ‖Δ‖ along the direction (0 is the trained model)", "loss"), lines,
               "The same seeded unit direction for both models, so equal distances are equal radii."),
    ]
    return Built(numbers, claims, figures, correct, look_for, answer)


# ----------------------------------------------------------------------------- chapter 5

PRETRAINED = "pretrained PARITY model"
LENGTH_MODELS = tuple(f"encoder-parity-n{n}" for n in (4, 6, 8, 10, 12, 16))
LENGTH_TASKS = {"PARITY and FIRST": ("parity", "first"), "all four tasks": ("parity", "majority", "first", "mean")}


def zoo_point(ck: Checkpoint, label: str) -> dict:
    """One model as a point of the length-scaling figure: its proxy on the ±1 scale at its own n."""
    found = measure(ck.model, ck.task, ck.n, SETTINGS, ("proxy",), ck.encoding)
    return {"model": label, "task": ck.task.name, "n": ck.n, "value": pm1_factor(ck.encoding) * found.proxy.value}


def _length_measure(src: Sources, progress: Progress = None) -> Data:
    """The length-scaling experiment's shipped runs (`Experiment.lab`) and the zoo's PARITY models as points."""
    lab = get_experiment("length_scaling").lab
    _, scale = lab.folder(src.results)
    _say(progress, f"the {scale}-scale length-scaling runs and sensviz.fidelity's verdict on them")
    numbers, found = lab.measure(src.results)
    folder, _ = lab.folder(src.results)
    found["after_filter"] = after_filter(folder)
    zoo = []
    for name in LENGTH_MODELS:
        _say(progress, f"the sharpness proxy of {name}")
        zoo.append(zoo_point(src.load(name), "zoo PARITY model"))
    return Data(numbers, {**found, "zoo": pd.DataFrame(zoo)})


def after_filter(folder: Path) -> pd.DataFrame:
    """The PARITY runs of chapter 5's line (kept by the convergence filter; where runs were asked to train on for
    `relax_steps` after first meeting it, those runs): n, the steps each trained after it first met the filter
    (`steps_since_converged`), its step limit (`steps`) and `relax_steps` (0 where not asked)."""
    kept = results.load(folder.parent, folder.name).kept()
    rows = kept[kept["task"] == "parity"]
    if "relax_steps" in rows:
        rows = rows[rows["relax_steps"].notna()] if rows["relax_steps"].notna().any() else rows
    columns = ["n", "steps", "steps_since_converged", "relax_steps"]
    return rows.reindex(columns=columns).fillna({"relax_steps": 0}).reset_index(drop=True)


def after_filter_words(table: pd.DataFrame) -> str:
    """How long the runs trained after the filter, counted: 'all k runs trained m steps after ...' or 'j of k runs
    ...; the other i stopped at their step limit first' (runs asked for m steps after first meeting it)."""
    asked = table[table["relax_steps"] > 0]
    if asked.empty:
        return ""
    relax, limit = int(asked["relax_steps"].max()), int(asked["steps"].max())
    done = int((table["steps_since_converged"] >= table["relax_steps"]).sum())
    if done == len(table):
        return f"all {len(table)} runs trained {relax:,} steps after they first passed the convergence filter"
    return (f"{done} of {len(table)} runs trained {relax:,} steps after they first passed the convergence filter; the other "
            f"{len(table) - done} reached the limit of {limit:,} steps first")


def slope_words(low: float, high: float) -> str:
    """The rule for 'grows with n': the slope's interval above 0; 'falls' below 0; else the runs cannot tell."""
    if low > 0:
        return "grows with n"
    if high < 0:
        return "falls with n"
    return "is not shown to grow with n: the interval of its slope includes 0"


def single_words(zoo: pd.DataFrame) -> str:
    """What the pretrained single models (one per n: `n`, `value`) do over n (`trend_words`), said as a scatter
    unless they rise or fall at every step (or stand at one length)."""
    trend = trend_words(zoo["n"], zoo["value"])
    said = f"the pretrained ones' proxy ×4 {trend}"
    steady = trend.startswith(("rises", "falls", "has one length"))
    return upper_first(said) if steady else f"One model per n scatters: {said}"


def _length_present(data: Data, tasks, yours: pd.DataFrame | None = None) -> Built:
    num = data.numbers
    points = data.tables["points"]
    shown = points[points["task"].isin(LENGTH_TASKS.get(tasks, LENGTH_TASKS["PARITY and FIRST"]))].reset_index(drop=True)
    parity = points[points["task"] == "parity"].sort_values("n")
    zoo = data.tables["zoo"].sort_values("n")
    pretrained = zoo.assign(model=PRETRAINED)
    mine = pd.concat([pretrained] + ([yours] if yours is not None and len(yours) else []), ignore_index=True)
    claims = {"slope": slope_words(num["slope_low"], num["slope_high"]),
              "trend": trend_words(parity["n"], parity["mean"]),
              "after_filter": after_filter_words(data.tables["after_filter"]),
              "bound": bound_words(parity["n"], parity["mean"])}
    counts = ", ".join(f"{int(c)} at n = {int(n)}" for n, c in zip(parity["n"], parity["count"]))
    correct = ("yes, it grows" if num["slope_low"] > 0 else "no, it stays flat or falls" if num["slope_high"] < 0
               else "these runs cannot tell")
    numbers = {**num, "counts": counts}
    look_for = (f"Follow PARITY's line: its mean sharpness proxy ×4 {claims['trend']}. Each point is the mean over the "
                f"runs at that n that learned their task ({counts}); the convergence filter kept {num['kept']} of "
                f"{num['runs']} runs{'' if not claims['after_filter'] else '. Of those, ' + claims['after_filter']}. "
                "A straight line through all those PARITY runs "
                f"{'rises' if num['slope'] >= 0 else 'falls'} by "
                f"{abs(num['slope']):.3g} per extra bit (its slope {num['slope']:.3g}), with a "
                f"{num['level']:.0%} interval from {num['slope_low']:.3g} to {num['slope_high']:.3g}.")
    found = (f"{upper_first(correct)}. In these {num['runs']} training runs (the rule that decides this answer was "
             f"written down before they were trained), PARITY's sharpness {claims['slope']} (the paper's claim, "
             f"checked on them: {num['verdict']})")
    answer = (f"{found}. The paper's claim is that it grows with n, so longer inputs put gradient descent in ever "
              "narrower valleys; with few runs per n that learned their task, more seeds are needed to see it here.")
    if num["slope_low"] > 0:
        answer = (f"{found}: longer inputs put gradient descent in ever narrower valleys, so PARITY gets harder to "
                  "find and to keep.")
    answer += f" {claims['bound']}"
    figures = [Figure("length", "sharpness proxy ×4 against n (mean ± standard error over the runs that learned their task)",
                      lab_charts.length_scaling(shown, mine), shown,
                      "Marks: single models measured the same way, the pretrained ones in black (yours in colour when "
                      f"you pick one). {single_words(zoo)}; the answer rests on the means over many runs.")]
    here = "; ".join(f"{TASK_NAMES[t]}'s mean proxy ×4 {trend_words(rows['n'], rows['mean'])}"
                     for t, rows in ((t, shown[shown["task"] == t].sort_values("n")) for t in dict.fromkeys(shown["task"])))
    return Built(numbers, claims, figures, correct, look_for, answer, f"The chart draws {tasks}: {here}.")


TASK_NAMES = {"parity": "PARITY", "first": "FIRST", "majority": "MAJORITY", "mean": "MEAN"}
BOUND = 0.5  # the theorem's liminf L_ρ,n ≥ 1/2 for PARITY (as_n = n), on the ±1 scale


def bound_words(ns, means) -> str:
    """The plotted PARITY means against the theorem's 1/2: all below it (and why that is no contradiction), or the
    lengths where they reach it."""
    ns, means = list(ns), list(means)
    reach = [int(n) for n, m in zip(ns, means) if m >= BOUND]
    if reach:
        return (f"At n = {', '.join(map(str, reach))} the PARITY mean reaches the theorem's 1/2, the bound its "
                "sharpness approaches as n grows.")
    return (f"Every plotted PARITY mean ({min(means):.2g} to {max(means):.2g}) is below the theorem's 1/2. That is no "
            "contradiction: the bound is a limit as n grows without end (less a term L e^(−Ω(d)) that shrinks only for "
            f"wide models), while these runs stop at n = {int(max(ns))}; what they can show is the trend.")


# ----------------------------------------------------------------------------- chapter 6

FEW_COMPARE = ("random completions of the training data", "uniformly random functions")
LEARNED, TARGET = "what the transformer learned", "the random target"


def _few_measure(src: Sources, progress: Progress = None) -> Data:
    from .training import TrainConfig

    _say(progress, "the function encoder-random-n8 computes, and 128 functions to compare it with")
    ck = src.load("encoder-random-n8")
    config = TrainConfig(**ck.metadata["training"]["config"])
    n = config.n
    learned = ck.encoding.decide(cube_outputs(ck.model, n))  # [2**n] the function the model computes
    target = ck.task.values(n)
    train_set = TrainingData(config).train_set
    held_out = torch.ones(2**n, dtype=torch.bool)
    held_out[train_set] = False
    others = completions(ck.task, n, train_set, 64, seed=0)
    uniform = torch.randint(0, 2, (64, 2**n), generator=torch.Generator().manual_seed(0)).float()
    rows = ([{"function": FEW_COMPARE[0], "as_n": as_n(t)} for t in others]
            + [{"function": FEW_COMPARE[1], "as_n": as_n(t)} for t in uniform]
            + [{"function": TARGET, "as_n": as_n(target)}, {"function": LEARNED, "as_n": as_n(learned)}])
    numbers = {"n": n, "train_size": len(train_set), "others": 2**n - len(train_set),
               "fit": (learned[train_set] == target[train_set]).float().mean().item(),
               "held_out": (learned[held_out] == target[held_out]).float().mean().item(),
               "chance": max(target[held_out].mean().item(), 1 - target[held_out].mean().item())}
    records = ck.metadata.get("extra", {}).get("measurements") or []
    over = tables.training_table(records)
    return Data(numbers, {"functions": pd.DataFrame(rows),
                          "training": over[over["metric"].isin(["as_n(model)", SHARPNESS])].reset_index(drop=True)})


def guess_words(right: float, count: int) -> str:
    """The share of held-out inputs guessed right against a coin flip's 1/2, by two standard errors of a coin flip
    on `count` inputs (a random target's other values cannot be predicted: only luck beats 1/2)."""
    se = (0.25 / count) ** 0.5
    if abs(right - 0.5) <= 2 * se:
        return (f"within two standard errors ({2 * se:.0%} points) of the 50 % a coin flip gets, as it must be on a random "
                "target, whose other values nothing predicts")
    side = "above" if right > 0.5 else "below"
    return (f"more than two standard errors ({2 * se:.0%} points) {side} the 50 % of a coin flip: luck of this one random "
            "target, whose other values nothing predicts")


def fitting_words(training: pd.DataFrame) -> str:
    """Chapter 6's second chart in words: as_n and sharpness L_ρ of the model from the first measurement to the last."""
    said = []
    for metric in ("as_n(model)", SHARPNESS):
        line = training[training["metric"] == metric].sort_values("step")
        if len(line):
            said.append(f"{metric} from {line['value'].iloc[0]:.3g} to {line['value'].iloc[-1]:.3g}")
    last = int(training["step"].max()) if len(training) else 0
    return f"While it fits (steps 0 to {last}), the second chart shows {' and '.join(said)}." if said else ""


def _few_present(data: Data, compare) -> Built:
    num = dict(data.numbers)
    functions = data.tables["functions"]
    compare = compare if compare in FEW_COMPARE else FEW_COMPARE[0]
    shown = functions[functions["function"].isin([compare, TARGET, LEARNED])].reset_index(drop=True)
    learned = float(functions[functions["function"] == LEARNED]["as_n"].iloc[0])
    others = functions[functions["function"] == compare]["as_n"]
    share = float((others > learned).mean())
    num.update(as_learned=learned, as_target=float(functions[functions["function"] == TARGET]["as_n"].iloc[0]),
               as_others=float(others.mean()), more_sensitive=share, compare=compare)
    below = ("less sensitive than almost all of them" if share >= 0.95 else "less sensitive than most of them"
             if share > 0.5 else "not less sensitive than most of them")
    claims = {"below": below,
              "fit": "all of its training inputs" if num["fit"] >= 1 else f"{num['fit']:.0%} of its training inputs",
              "guess": guess_words(num["held_out"], num["others"])}
    correct = ("less sensitive than most" if share > 0.5 else "more sensitive than most" if share < 0.2
               else "about typical")
    look_for = (f"The model fits {claims['fit']} ({num['train_size']} of {2**num['n']}) and guesses "
                f"{num['held_out']:.0%} of the other {num['others']} right: {claims['guess']}. What it learned has "
                f"as_n = {learned:.3g}: {claims['below']} ({share:.0%} of the {len(others)} {compare} are more "
                f"sensitive; their mean is {num['as_others']:.3g}; the target's is {num['as_target']:.3g}). "
                f"{fitting_words(data.tables['training'])}")
    answer = (f"{upper_first(correct)}: as_n = {learned:.3g}, {claims['below']}. Of all the functions that agree with "
              "the data, the transformer picked a low-sensitivity one: it prefers functions that few bit flips change, "
              "the flip side of PARITY being hard.")
    kinds = (compare, TARGET, LEARNED)
    figures = [
        Figure("few_as", f"as_n of the learned function beside {compare}", lab_charts.strip(shown, num["n"], kinds),
               shown, "Each mark one function: " + ("the completions all agree with the target on the training inputs."
                                                     if compare == FEW_COMPARE[0] else
                                                     "the uniformly random functions ignore the training inputs."),
               blind=lab_charts.strip(shown[shown["function"] != LEARNED], num["n"], kinds)),
        Figure("few_training", "as_n and sharpness of the model while it fits",
               charts.training_curves(data.tables["training"], columns=2), data.tables["training"]),
    ]
    return Built(num, claims, figures, correct, look_for, answer)


# ----------------------------------------------------------------------------- chapter 7

INIT_MODEL = ModelSettings(arch="encoder", d_model=32, n_layers=2, n_heads=2)
"""The architecture of the zoo's n = 8 encoders, initialised at random: the models chapter 7 starts from."""
INIT_N, INIT_COUNT, INIT_SEED = 8, 128, 0
ORBIT_MODELS = ("encoder-parity-n8", "encoder-first-n8")
INITS, UNIFORM = "random transformers, before training", "uniformly random functions"
ORBIT = ("L_ρ as trained", "least L_ρ over function-preserving changes")
ORBIT_COLOURS = ("#7b3294", "#d35400")
"""Purple and orange: no model's colour in chapter 7 (PARITY is red, FIRST green, the random transformers blue)."""
INIT_OPTIONS = ("well below n/2", "about n/2", "above n/2")
STRIP_KINDS = (UNIFORM, INITS, "trained PARITY model", "trained FIRST model")
"""Chapter 7's kinds of function on its strip. Before the reveal only the uniformly random functions: the random
transformers are the answer, and the trained models carry chapter 1's (PARITY's as_n = n, its weight at degree n)."""


def _init_measure(src: Sources, progress: Progress = None) -> Data:
    """Random transformers (`sensviz.init_study`, at every init scale), 64 uniformly random functions, and the
    trained models (`trained_models`)."""
    _say(progress, f"{INIT_COUNT} random transformers at init scales {', '.join(f'{s:g}' for s in INIT_SCALES)}, "
                   f"on all 2^{INIT_N} inputs")
    studies = init_studies(INIT_MODEL, INIT_N, INIT_COUNT, INIT_SCALES, INIT_SEED)
    profiles = [{"model": INITS, "init_scale": s.init_scale, "degree": k, "weight": w}
                for s in studies for k, w in enumerate(s.degree_profile.mean(dim=0).tolist())]
    uniform = torch.randint(0, 2, (64, 2**INIT_N), generator=torch.Generator().manual_seed(0)).float()
    functions = pd.DataFrame([{"function": UNIFORM, "as_n": as_n(t)} for t in uniform])
    numbers, trained = trained_models(src, progress)
    return Data({"n": INIT_N, "count": INIT_COUNT, **numbers},
                {"inits": init_charts.study_table(studies),
                 "profiles": pd.concat([pd.DataFrame(profiles), trained["profiles"]], ignore_index=True),
                 "functions": pd.concat([functions, trained["functions"]], ignore_index=True),
                 "orbit": trained["orbit"]})


def trained_models(src: Sources, progress: Progress = None) -> tuple[dict, dict[str, pd.DataFrame]]:
    """Chapter 7's trained models read as the random transformers are (f = sign(T − median T): as_n and the
    degree profile), and their L_ρ beside its least value over their function-preserving changes
    (`sensviz.orbit_sharpness`): the numbers (`rho`, `orbit_points`) and the tables `functions`, `profiles`, `orbit`."""
    functions, profiles, orbit = [], [], []
    for name in ORBIT_MODELS:
        _say(progress, f"{name} read as f = sign(T − median T), and L_ρ at the least sharp of its function-preserving "
                       "changes tried")
        ck = src.load(name)
        label = f"trained {_task_name(ck)} model"
        view = scale_free_view(ck.model, ck.n)
        functions.append({"function": label, "as_n": view.avg_sensitivity})
        profiles += [{"model": label, "init_scale": None, "degree": k, "weight": w}
                     for k, w in enumerate(view.degree_profile.tolist())]
        found = measure(ck.model, ck.task, ck.n, SETTINGS, ("sharpness", "orbit"), ck.encoding)
        for quantity, est in zip(ORBIT, (found.sharpness, found.orbit)):
            orbit.append({"model": _task_name(ck), "quantity": quantity, "value": est.value, "stderr": est.stderr})
    return ({"orbit_points": found.orbit.n_orbit + 1, "rho": found.rho},
            {"functions": pd.DataFrame(functions), "profiles": pd.DataFrame(profiles), "orbit": pd.DataFrame(orbit)})


def labels_at_least(chart, px: int):
    """The layered chart with its text marks (the values written beside bars) at least `px` tall: the handout and a
    projector need 14 px, where `charts.sharpness_at_radius` writes them at 13."""
    for layer in chart.layer:
        if getattr(layer.mark, "type", None) == "text" and (layer.mark.fontSize or 0) < px:
            layer.mark.fontSize = px
    return chart


def init_words(low: float, high: float) -> str:
    """as_n/n of the random transformers against 1/2 by the claim's interval (`init_claim`: of mean as_n/n − 0.4):
    'well below n/2' when it lies below 0 (the claim's rule), 'above n/2' when it lies above 0.1, else 'about n/2'."""
    margin = init_claim.MARGIN
    if high < 0:
        return INIT_OPTIONS[0]
    if low > margin:
        return INIT_OPTIONS[2]
    return INIT_OPTIONS[1]


def _init_present(data: Data, scale) -> Built:
    n, count = int(data.numbers["n"]), int(data.numbers["count"])
    inits = data.tables["inits"]
    scale = scale if scale in set(inits["init_scale"]) else 1.0
    here = inits[inits["init_scale"] == scale]
    values = torch.tensor(here["avg_sensitivity"].to_numpy(), dtype=torch.float64)
    cell = init_claim.decide_cell(SimpleNamespace(arch=INIT_MODEL.arch, n=n, init_scale=scale, n_inits=len(here),
                                                  avg_sensitivity=values))  # the claim's own rule
    functions, orbit = data.tables["functions"], data.tables["orbit"].set_index(["model", "quantity"])
    profiles = data.tables["profiles"]
    mean_profile = profiles[(profiles["model"] == INITS) & (profiles["init_scale"] == scale)]
    trained = dict(zip(functions["function"], functions["as_n"]))
    q05, q95 = np.quantile(here["avg_sensitivity"], [0.05, 0.95])
    numbers = {"n": n, "scale": scale, "count": count, "as_init": float(values.mean()), "q05": float(q05),
               "q95": float(q95), "ratio": cell.mean_ratio, "ratio_low": cell.low + 0.5 - init_claim.MARGIN,
               "ratio_high": cell.high + 0.5 - init_claim.MARGIN, "verdict": cell.verdict,
               "low_share": float(mean_profile[mean_profile["degree"] <= 2]["weight"].sum()),
               "top_init": float(mean_profile[mean_profile["degree"] == n]["weight"].sum()),
               "as_uniform": float(functions[functions["function"] == UNIFORM]["as_n"].mean()),
               "as_parity": float(trained["trained PARITY model"]), "as_first": float(trained["trained FIRST model"]),
               "rho": data.numbers["rho"], "orbit_points": int(data.numbers["orbit_points"])}
    p, f = orbit.loc[("PARITY", ORBIT[1])], orbit.loc[("FIRST", ORBIT[1])]
    p0, f0 = orbit.loc[("PARITY", ORBIT[0])], orbit.loc[("FIRST", ORBIT[0])]
    numbers.update(orbit_parity=p["value"], orbit_first=f["value"], sharp_parity=p0["value"], sharp_first=f0["value"])
    claims = {"init": init_words(cell.low, cell.high),
              "orbit": sharper_words(separated(p["value"], p["stderr"], f["value"], f["stderr"]),
                                     p["value"] / f["value"])}
    correct = claims["init"]
    look_for = (f"At init scale {scale:g} the {count} random transformers have as_n from {q05:.2g} to {q95:.2g} "
                f"(5 to 95 %), mean {numbers['as_init']:.3g}: {claims['init']} = {n / 2:g}, where the uniformly random "
                f"functions sit (their mean {numbers['as_uniform']:.3g}). The rule: the 95 % interval of their mean "
                f"as_n/n, {numbers['ratio_low']:.3f} to {numbers['ratio_high']:.3f}, lies wholly below 0.4 for “well "
                "below n/2”, wholly above 0.5 for “above n/2”, and anything else is “about n/2”. Their mean Fourier weight "
                "sits at low degrees "
                f"({numbers['low_share']:.0%} on degrees 0 to 2, {numbers['top_init']:.2g} at degree {n}, PARITY's only "
                f"degree). Training takes the PARITY model to as_n = {numbers['as_parity']:.3g} and the FIRST model to "
                f"{numbers['as_first']:.3g}. Sharpness: L_ρ as trained is {p0['value']:.3g} ± {p0['stderr']:.2g} for "
                f"PARITY and {f0['value']:.3g} ± {f0['stderr']:.2g} for FIRST; at the least sharp of "
                f"{numbers['orbit_points']} function-preserving changes of each it is {p['value']:.3g} ± "
                f"{p['stderr']:.2g} and {f['value']:.3g} ± {f['stderr']:.2g}: PARITY's minimum stays {claims['orbit']}.")
    answer = (f"{upper_first(correct)}: a transformer with random weights already computes a simple function (mean "
              f"as_n {numbers['as_init']:.3g} of a possible {n}), its Fourier weight on few bits. Training starts there: "
              f"FIRST's as_n = 1 is {abs(numbers['as_init'] - 1):.2g} from that mean, PARITY's as_n = {n} is "
              f"{n - numbers['as_init']:.2g} from it, the most any function can be. And PARITY's sharp "
              "minimum is not an accident of how its weights are written: among the weights that compute the very same "
              f"function, the least sharp stays {claims['orbit']} than FIRST's.")
    shown = pd.concat([here.assign(function=INITS).rename(columns={"avg_sensitivity": "as_n"})[["function", "as_n"]],
                       functions], ignore_index=True)
    degrees = profiles[(profiles["model"] != INITS) | (profiles["init_scale"] == scale)].drop(columns="init_scale")
    degrees = degrees.reset_index(drop=True)
    bars = orbit.reset_index().assign(low=lambda t: t["value"] - t["stderr"], high=lambda t: t["value"] + t["stderr"])
    bars = bars.assign(label=[f"{v:.3g} ± {e:.2g}" for v, e in zip(bars["value"], bars["stderr"])])
    figures = [
        Figure("init_as", f"as_n of {count} random transformers (init scale {scale:g}) beside uniformly random "
                          "functions and the trained models", lab_charts.strip(shown, n, STRIP_KINDS), shown,
               "Each mark one function, read as f(x) = sign(T(x) − median T): +1 above the middle output, else −1.",
               blind=lab_charts.strip(shown[shown["function"] == UNIFORM], n, STRIP_KINDS),
               blind_title="where uniformly random functions sit (as_n from 0 to n)"),
        Figure("init_degrees", "Fourier degree profile d_k: the mean over the random transformers, and the trained "
                               "models'", charts.degree_profiles(degrees), degrees,
               "d_k: the share of the function's weight on products of exactly k bits."),
        Figure("orbit", "L_ρ of the trained models: as trained, and the least over function-preserving changes",
               lab_charts.fixed_domain(labels_at_least(charts.sharpness_at_radius(bars), charts.READABLE_PX), "quantity",
                                       ORBIT, ORBIT_COLOURS), bars,
               f"ρ = {numbers['rho']:.3g}, the paper's radius; ±1 standard error over {SETTINGS.directions} seeded "
               f"directions, the same for every change; {numbers['orbit_points']} changes tried per model."),
    ]
    return Built(numbers, claims, figures, correct, look_for, answer)


# ----------------------------------------------------------------------------- the chapters

CHAPTERS: tuple[Chapter, ...] = (
    Chapter(
        1, "sensitivity", "Sensitivity on the cube",
        "Flip one bit of the input. How many of the n possible flips change a trained transformer's answer, for "
        "PARITY and for FIRST?",
        Prediction("For the trained PARITY model at a typical input, how many of the n single-bit flips change its "
                   "output?", tuple(FLIPS)),
        ("PARITY", "FIRST", "sensitivity", "average sensitivity", "Fourier degree"),
        ("encoder-parity-n8", "encoder-first-n8"),
        tuple(f"encoder-{task}-n{n}" for n in SENSITIVITY_NS for task in ("parity", "first")),
        (r"s(f,x) = \#\{i : f(x^{\oplus i}) \neq f(x)\}",
         r"\mathrm{as}_n(f) = \mathbb{E}_x s(f,x) = \sum_{k=0}^{n} k d_k"),
        Control("input length n", SENSITIVITY_NS, 8, lambda n: f"n = {n}"),
        "Open the Sensitivity page with both models and click any cell to see which flips change the output.",
        _sensitivity_measure, _sensitivity_present,
        rule="the option nearest the trained PARITY model's as_n: none 0, about one 1, about half n/2, all n.",
        symbols=("n: the input length; x: one input, a string of n bits; cube: the set of all 2^n inputs, two "
                 "of them neighbours when they differ in one bit",
                 "i: a position, 1 to n (the Sensitivity page counts them from 0); x^(⊕i): the input x with bit "
                 "i flipped; f(x): the model's answer at x; "
                 "E_x: the mean over all inputs x",
                 "Gray order: the rows and columns of the map are ordered so that neighbouring cells differ in one bit",
                 "λ_P: the Fourier coefficient of f on the product of the bits in the set P; d_k: λ_P² added up over "
                 "all sets P of k bits")),
    Chapter(
        2, "training", "Training PARITY: degree n takes over",
        "What happens inside a transformer while it learns PARITY, and what happens to the sharpness of its "
        "minimum when it does?",
        Prediction("When the model starts computing PARITY (degree n takes over), its sharpness L_ρ…",
                   ("it rises", "it stays about the same", "it falls")),
        ("PARITY", "Fourier degree", "sharpness", "radius", "average sensitivity", "Blowup", "param_norm"),
        ("encoder-parity-n8",), ("encoder-parity-n8",),
        (r"L_{\rho,n}(T) = \mathbb{E}_x \mathbb{E}_{\|\Delta\|=\rho} (T_{\theta+\Delta}(x)-T_\theta(x))^2",),
        Control("curve beside accuracy", tuple(CURVES), SHARPNESS),
        "Train it yourself: the Train page's PARITY, n = 8 preset measures the same curves.",
        _training_measure, _training_present,
        rule=("“it rises” when the mean L_ρ after degree n takes over (the first measured step with d_n ≥ 0.5) is "
              "more than 1.5× the mean before it, “it falls” when it is less than 1/1.5 of it, else “it stays about the "
              "same”."),
        symbols=("θ: all the model's parameters; T_θ(x): its output at input x",
                 "Δ: a random step in parameter space of length ρ; E_x: the mean over the inputs x; n: the input length",
                 "step: one update of gradient descent during training; loss: the training loss, the mean squared "
                 "error of the output against the target; accuracy: the share of inputs answered right",
                 "E[log Blowup]: the mean over the inputs of Blowup's logarithm (a 2-fold Blowup adds log 2 ≈ 0.69)")),
    Chapter(
        3, "blowup", "How can a transformer be sensitive at all?",
        "Attention averages over positions, so one changed bit moves a transformer's output little. How does the "
        "PARITY model manage to change its answer at every bit?",
        Prediction(f"At n = {BLOWUP_DEFAULT} bits, which model has the larger LayerNorm factors N?",
                   ("the PARITY model", "the FIRST model", "about the same")),
        ("LayerNorm factor", "Blowup", "param_norm"),
        ("encoder-parity-n12", "encoder-first-n12"),
        tuple(f"encoder-{task}-n{n}" for n in BLOWUP_NS for task in ("parity", "first")),
        (r"N_i^{(k)} = \frac{1}{\sqrt{\sigma^2(Y_i^{(k)})+\varepsilon}}, \mathrm{Blowup}(x) = \prod_k \max_i (1+N_i^{(k)}(x))",),
        Control("input length n", BLOWUP_NS, BLOWUP_DEFAULT, lambda n: f"n = {n}"),
        "Pick an input on the LayerNorm page and compare N_i^(k) of both models position by position.",
        _blowup_measure, _blowup_present,
        rule=("“the PARITY model” when its mean factor N (over its LayerNorms and all inputs) is more than 1.2× the "
              "FIRST model's, “the FIRST model” when it is less than 1/1.2 of it, else “about the same”."),
        theorem=(r"C \mathbb{E}[\mathrm{Blowup}^2] \ge \frac{\mathrm{as}_n(f)}{\sqrt{n\log n}} - \frac{H}{n}",),
        symbols=("x: one input; i: a position; Y_i^(k): the vector that LayerNorm k normalises at position i; σ²: the "
                 "variance of its d entries",
                 "ε: a small constant LayerNorm adds so that it never divides by zero",
                 "max_i: the largest over the positions i; Π_k: the product over the LayerNorms k"),
        theorem_symbols=("C: a number fixed by the sizes of the model's weight matrices, the same at every n (larger "
                         "weights, larger C)",
                         "H: the number of attention heads; n: the input length; E: the mean over all inputs",
                         "f: the function the model computes; as_n(f): its average sensitivity"),
    ),
    Chapter(
        4, "landscape", "The landscape: sharp and flat minima",
        "Move every parameter of a trained model a little, in a random direction. Whose output changes more: the "
        "PARITY model's or the FIRST model's?",
        Prediction("At the paper's radius ρ, whose minimum is sharper (larger L_ρ)?",
                   ("PARITY's", "FIRST's", "about the same")),
        ("sharpness", "radius", "PARITY", "FIRST"),
        LANDSCAPE_MODELS, LANDSCAPE_MODELS,
        (r"L_{\rho,n}(T) = \mathbb{E}_x \mathbb{E}_{\|\Delta\|=\rho} (T_{\theta+\Delta}(x)-T_\theta(x))^2",),
        Control("radius (fraction of the paper's ρ)", RADIUS_FRACTIONS, 1.0, lambda f: f"{f:g} ρ"),
        "Open the Landscape page with both models: the same L_ρ, with more radii and 2-D slices.",
        _landscape_measure, _landscape_present,
        rule=("“PARITY's” when PARITY's L_ρ less one standard error is above FIRST's plus one (the error bars do "
              "not overlap), “FIRST's” when it lies wholly below, else “about the same”."),
        theorem=(r"\lim_{\rho\to0} \liminf_{n\to\infty} L_{\rho,n}(T) \ge \liminf_{n\to\infty} \frac{\mathrm{as}_n(T)}{2n}"
                 r" - L e^{-\Omega(d)}",),
        symbols=("θ: all the model's parameters; T_θ(x): its output at input x; Δ: a random step of length ρ; "
                 "n: the input length",
                 "L_ρ/ρ²: the sharpness divided by the squared radius, so that all radii share one scale",
                 "E‖∇T‖²/P: the small-ρ limit of L_ρ/ρ², from the gradient; P: the number of parameters",
                 "loss: the training loss, the mean squared error of the output against the target (the second chart "
                 "draws it along one line through the trained parameters)"),
        theorem_symbols=("liminf: the smallest value the sequence keeps coming back to as n grows",
                         "L: the number of layers; d: the width of the vector at each position",
                         "Ω(d): a quantity that grows at least in proportion to d, so L e^(−Ω(d)) vanishes for wide models",
                         "e: Euler's number, 2.718…"),
    ),
    Chapter(
        5, "length", "Length scaling",
        "Train PARITY at longer and longer inputs n. Does the minimum it lands in get sharper?",
        Prediction("Does PARITY's sharpness grow with n in these training runs?",
                   ("yes, it grows", "no, it stays flat or falls", "these runs cannot tell")),
        ("sharpness proxy", "convergence filter", "PARITY", "FIRST", "MAJORITY", "MEAN"),
        ("encoder-parity-n8", "encoder-first-n8"), LENGTH_MODELS,
        (r"\mathrm{as}_n(f) = \mathbb{E}_x s(f,x)",),
        Control("tasks", tuple(LENGTH_TASKS), "PARITY and FIRST"),
        "Train a model on the Train page and select it: it joins this chart as a point.",
        _length_measure, _length_present,
        results="length_scaling", depends=(("tables", ("points", "after_filter")),),
        rule=("“yes, it grows” when the confidence interval of the slope of a straight line through the PARITY runs "
              "lies above 0, “no, it stays flat or falls” when it lies below 0, else “these runs cannot tell”."),
        theorem=(r"\mathrm{as}_n(\mathrm{PARITY}) = n \Rightarrow \liminf_{n} L_{\rho,n} \ge \frac{1}{2}",
                 r"\mathrm{as}_n(\mathrm{FIRST}) = 1 \Rightarrow \mathrm{bound} \to 0"),
        symbols=("n: the input length; x: one input; s(f,x): how many single-bit flips change f's answer at input x; "
                 "E_x: the mean over all inputs x",
                 "slope: how much the mean sharpness proxy changes per extra input bit, from a straight-line fit"),
        theorem_symbols=("L_ρ,n: the sharpness at radius ρ for inputs of length n; ρ: the radius",
                         "liminf: the smallest value the sequence keeps coming back to as n grows"),
    ),
    Chapter(
        6, "few-examples", "What transformers learn from few examples",
        "Show a transformer a random function on some of its inputs only (its training inputs). What does it guess "
        "for the rest?",
        Prediction("Compared with other functions that agree with the training inputs, the function the "
                   "transformer learned is…", ("less sensitive than most", "about typical", "more sensitive than most")),
        ("average sensitivity", "sharpness"),
        ("encoder-random-n8",), ("encoder-random-n8",),
        (r"\mathrm{as}_n(f) = \mathbb{E}_x s(f,x)",),
        Control("compare with", FEW_COMPARE, FEW_COMPARE[0]),
        "Train one yourself with fewer or more examples (the Train page's restricted training set).",
        _few_measure, _few_present,
        rule=("“less sensitive than most” when more than half of the functions compared with are more sensitive "
              "than the learned one, “more sensitive than most” when fewer than a fifth are, else “about typical”."),
        theorem=(r"\mathrm{as}_n(\hat{f}) \ll \mathbb{E}_{g} \mathrm{as}_n(g)",),
        symbols=("n: the input length; x: one input, a string of n bits; s(f,x): how many single-bit flips change "
                 "f's answer at x",
                 "completion: a function that agrees with the target on every training input and is random elsewhere"),
        theorem_symbols=("f̂: the function the trained model computes; g: one of the functions compared with it",
                         "E_g: the mean over those functions; ≪: much smaller than"),
    ),
    Chapter(
        7, "before-training", "Before training: where learning starts",
        "Before any training, a transformer's weights are random. Does a random transformer compute a random-looking "
        "Boolean function, or a simple one?",
        Prediction("A random transformer's answer f(x) (its output above or below its middle value) has average "
                   "sensitivity as_n…", INIT_OPTIONS),
        ("average sensitivity", "Fourier degree", "initialisation", "init scale", "function-preserving change"),
        ORBIT_MODELS, ORBIT_MODELS,
        (r"f(x) = \mathrm{sign}\big(T(x) - \mathrm{median}_{x'} T(x')\big)",
         r"\mathrm{as}_n(f) = \mathbb{E}_x s(f,x), \quad \mathbb{E}_{f \text{ uniform}} \mathrm{as}_n(f) = n/2"),
        Control("init scale", INIT_SCALES, 1.0, lambda s: f"scale {s:g}"),
        "Open the Before training page: other widths, depths, lengths and targets, and the claim across them.",
        _init_measure, _init_present,
        rule=("“well below n/2” when the 95 % interval of the random transformers' mean as_n/n lies wholly below "
              "0.4, “above n/2” when it lies wholly above 0.5, else “about n/2”."),
        symbols=("n: the input length; x: one input, a string of n bits; Boolean function: one that answers −1 or +1 "
                 "(no or yes) at every input",
                 "T(x): the transformer's raw output at x; f(x): its answer read "
                 "as ±1; median: the middle of its 2^n outputs, so f is +1 on half of the inputs and −1 on the other",
                 "E_x: the mean over all inputs x; s(f,x): how many single-bit flips change f's answer at x",
                 "n/2: the average sensitivity of a uniformly random Boolean function (each flip changes it with "
                 "probability ½)",
                 "λ_P: the Fourier coefficient of f on the product of the bits in the set P; d_k: λ_P² added up over "
                 "all sets P of k bits"),
        theorem=(r"L^{\mathrm{sym}}_\rho = \min_{g} L_\rho(g\theta)",),
        theorem_symbols=(glossary.definition("sharpness"), glossary.definition("function-preserving change"),
                         "θ: all the model's parameters; g θ: θ after a function-preserving change g; ρ: the paper's "
                         "radius; L_ρ: the sharpness at radius ρ; L^sym_ρ: the least L_ρ found over the changes tried"),
        depends=(("model", dataclasses.asdict(INIT_MODEL)), ("n", INIT_N), ("inits", INIT_COUNT),
                 ("scales", INIT_SCALES), ("seed", INIT_SEED), ("directions", SETTINGS.directions)),
    ),
)
"""The Lab's chapters, in order."""


def chapter(number: int) -> Chapter:
    """The chapter with this number; ValueError naming the range otherwise."""
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= len(CHAPTERS):
        raise ValueError(f"there are chapters 1..{len(CHAPTERS)}, not {number!r}")
    return CHAPTERS[number - 1]
