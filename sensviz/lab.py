"""The Lab: the paper's story as guided chapters, for the app's Lab page and the offline handout.

Six chapters (`CHAPTERS`) tell why sensitive functions are hard for transformers:

1. sensitivity on the cube: PARITY beside FIRST, and the Fourier degree profile;
2. training PARITY: degree n takes over and sharpness rises;
3. how a transformer can be sensitive at all: LayerNorm blowup, and Blowup against s(f,x);
4. the landscape: a PARITY minimum beside a FIRST minimum, at the finite radius the paper measures;
5. length scaling: sharpness against n from the shipped results, and a model of your own;
6. few examples: a random function fitted on a handful of inputs extrapolates with low sensitivity.

A chapter holds its question, the zoo models its one-click setup loads, the formula it illustrates,
and a `build` function that computes, from those models, every number its text states and the few
figures that make the point (`Built`). Texts are templates filled with those numbers, never typed
figures. The app (`ui/`) draws a built chapter with its controls; `handout` writes the whole lab as
one offline HTML page (the Vega JavaScript inlined, as `sensviz report` does), answers optional.
The live chapters (2 and 6) draw the training measurements the zoo's checkpoints carry
(`extra.measurements`, recorded by `sensviz zoo build`).
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from . import charts, cube, stats, tables
from .analysis import cube_outputs, sensitivity_report
from .blowup import blowup_summary
from .checkpoints import Checkpoint, load_checkpoint
from .experiments import completions
from .losses import loss_for, targets
from .measure import RADIUS_FRACTIONS, MeasureSettings, measure
from .report import offline_page, write_text
from .slices import loss_slice, random_directions
from .training import TrainingData

Loader = Callable[[str], Checkpoint]
"""Loads a zoo model by its name (the file stem, e.g. "encoder-parity-n8")."""


@dataclass
class Sources:
    """Where a chapter's numbers come from: the zoo (`load`), the shipped results folder (chapter 5),
    and models the student brings (`yours`: label -> Checkpoint, drawn beside the zoo's where a
    chapter can place them)."""

    load: Loader
    results: Path | None = None
    yours: dict[str, Checkpoint] = field(default_factory=dict)

SETTINGS = MeasureSettings()
"""The Lab measures with everyone's defaults (`sensviz.measure`)."""


@dataclass
class Figure:
    """One chart of a chapter, with the data behind it."""

    key: str
    title: str
    chart: object  # an Altair chart
    data: pd.DataFrame
    caption: str = ""


@dataclass
class Built:
    """A chapter computed from its models: the numbers its text states, its figures, its texts filled in."""

    numbers: dict[str, float | int | str]
    figures: list[Figure]
    look_for: str
    answer: str


@dataclass
class Chapter:
    """One chapter: what it asks, which models it loads, what it shows and how it is computed."""

    number: int
    slug: str
    title: str
    question: str
    models: tuple[str, ...]  # the zoo models the setup loads: the first is the model, the second the comparison
    ask: str  # the student's question
    formula: tuple[str, ...]  # LaTeX, one line each
    try_it: str  # what to try yourself (the app adds the control)
    look_for: str  # a template filled with `Built.numbers`
    answer: str  # a template filled with `Built.numbers`
    compute: Callable[[Sources], tuple[dict, list[Figure]]] = field(repr=False)

    def build(self, sources: Sources) -> Built:
        """Compute the chapter from its models (and, for chapter 5, the shipped results)."""
        numbers, figures = self.compute(sources)
        return Built(numbers, figures, fill(self.look_for, numbers), fill(self.answer, numbers))


def fill(template: str, numbers: dict) -> str:
    """A text template with its numbers: `{as_parity:.3g}` and the like."""
    return template.format(**numbers)


def zoo_loader(directory: str | Path) -> Loader:
    """A loader of the zoo's checkpoints in `directory` (for the handout and the tests)."""
    directory = Path(directory)
    found: dict[str, Checkpoint] = {}

    def load(name: str) -> Checkpoint:
        if name not in found:
            found[name] = load_checkpoint(directory / f"{name}.safetensors")
        return found[name]

    return load


def _task_name(ck: Checkpoint) -> str:
    return ck.task.name.upper() if ck.task is not None else "?"


# ----------------------------------------------------------------------------- chapter 1


def _sensitivity(src: Sources) -> tuple[dict, list[Figure]]:
    load = src.load
    parity, first = load("encoder-parity-n8"), load("encoder-first-n8")
    grids, degrees, numbers = {}, [], {}
    for ck in (parity, first):
        report = sensitivity_report(ck.model, ck.n, ck.task, ck.encoding, SETTINGS.exact_limit)
        name = _task_name(ck)
        grids[name] = tables.vertex_table(report, ck.encoding)
        degrees.append(tables.degree_table(report).assign(model=name))
        numbers[f"as_{ck.task.name}"] = report.model.avg_sensitivity
        numbers[f"top_{ck.task.name}"] = report.model.degree_profile[-1].item()
        numbers[f"peak_{ck.task.name}"] = int(report.model.degree_profile.argmax())
        numbers[f"weight_{ck.task.name}"] = report.model.degree_profile.max().item()
    numbers["n"] = parity.n
    degree_table = pd.concat(degrees, ignore_index=True)
    model_degrees = degree_table[degree_table["function"] == "model"]
    return numbers, [
        Figure("cube", f"s(f,x) of each model on the 2^{parity.n} inputs (colour fixed to 0..{parity.n})",
               charts.cube_grids(grids, "s_model", parity.n), pd.concat(
                   [g.assign(model=k) for k, g in grids.items()], ignore_index=True),
               "Each cell is one input; neighbours one bit apart are adjacent (Gray code). A dot marks f(x) = 1."),
        Figure("degrees", "Fourier degree profile d_k of each model", charts.degree_profiles(model_degrees),
               model_degrees),
    ]


# ----------------------------------------------------------------------------- chapter 2


def _training(src: Sources) -> tuple[dict, list[Figure]]:
    load = src.load
    ck = load("encoder-parity-n8")
    records = ck.metadata.get("extra", {}).get("measurements") or []
    if not records:
        raise ValueError("encoder-parity-n8 carries no training measurements: rebuild it with `sensviz zoo build`")
    history = tables.degree_history_table(records)
    curves = tables.training_table(records)
    top = history[history["degree"] == ck.n].set_index("step")["weight"]
    taken = top[top >= 0.5]
    first, last = records[0], records[-1]
    numbers = {
        "n": ck.n,
        "steps": last["step"],
        "step_half": int(taken.index[0]) if len(taken) else last["step"],
        "top_end": top.iloc[-1],
        "sharp_start": first["sharpness"],
        "sharp_end": last["sharpness"],
        "sharp_ratio": last["sharpness"] / first["sharpness"],
        "norm_start": first["param_norm"],
        "norm_end": last["param_norm"],
    }
    shown = curves[curves["metric"].isin(["accuracy", "sharpness L_ρ", "as_n(model)"])]
    return numbers, [
        Figure("degree_history", "Fourier degree profile of the model over training", charts.degree_history(history),
               history, "Each column is one measurement; degree n is PARITY's only Fourier weight."),
        Figure("curves", "accuracy, as_n and sharpness L_ρ over training", charts.training_curves(shown, columns=3),
               shown),
    ]


# ----------------------------------------------------------------------------- chapter 3


BLOWUP_MODELS = ("encoder-parity-n12", "encoder-first-n12")


def _blowup(src: Sources) -> tuple[dict, list[Figure]]:
    load = src.load
    parity, first = (load(name) for name in BLOWUP_MODELS)
    groups, numbers, factors = [], {}, []
    for ck in (parity, first):
        summary = blowup_summary(ck.model, ck.n, SETTINGS.exact_limit, keep_factors=True)
        report = sensitivity_report(ck.model, ck.n, ck.task, ck.encoding, SETTINGS.exact_limit)
        name = _task_name(ck)
        groups.append(tables.blowup_by_sensitivity(summary.values, report.model.sensitivity, name))
        factors.append(tables.blowup_histogram(summary.values).assign(model=name))
        numbers[f"blowup_{ck.task.name}"] = summary.mean
        numbers[f"log_blowup_{ck.task.name}"] = summary.log_mean
        numbers[f"max_n_{ck.task.name}"] = max(row["max"] for row in summary.per_ln)
        numbers[f"norm_{ck.task.name}"] = ck.model.param_norm()
    numbers["ratio"] = numbers["blowup_parity"] / numbers["blowup_first"]
    numbers["n"] = parity.n
    by_s = pd.concat(groups, ignore_index=True)
    histograms = pd.concat(factors, ignore_index=True)
    return numbers, [
        Figure("blowup_hist", "distribution of Blowup(x) over the cube", charts.model_log_histograms(histograms),
               histograms),
        Figure("blowup_vs_s", "Blowup(x) against s(f,x) of the same input (median, 10–90 %)",
               charts.blowup_by_sensitivity(by_s), by_s),
    ]


# ----------------------------------------------------------------------------- chapter 4

LANDSCAPE_MODELS = ("encoder-parity-n16", "encoder-first-n16")


def _landscape(src: Sources) -> tuple[dict, list[Figure]]:
    load = src.load
    rows, slices_, numbers = [], [], {}
    for name in LANDSCAPE_MODELS:
        ck = load(name)
        found = measure(ck.model, ck.task, ck.n, SETTINGS, ("sharpness", "limit", "radii"), ck.encoding)
        label = _task_name(ck)
        for fraction, r in zip(RADIUS_FRACTIONS, found.radii):
            rows.append({"model": label, "fraction": fraction, "rho": r.rho, "ratio": r.value / r.rho**2,
                         "low": (r.value - r.stderr) / r.rho**2, "high": (r.value + r.stderr) / r.rho**2,
                         "limit": found.limit.value})
        key = ck.task.name
        numbers.update({f"sharp_{key}": found.sharpness.value, f"stderr_{key}": found.sharpness.stderr,
                        f"limit_{key}": found.limit.value, f"limit_sq_{key}": found.limit.value * found.rho**2})
        numbers["rho"], numbers["n"] = found.rho, ck.n
        bits, _ = cube.measurement_inputs(ck.n, SETTINGS.measure_inputs, SETTINGS.measure_seed)
        direction = random_directions(ck.model, 1, "none", seed=0)  # unit norm: alpha is the distance |Delta|
        line = loss_slice(ck.model, bits, targets(ck.task, bits, ck.encoding), direction, loss_for(ck.encoding),
                          ck.encoding, span=2 * found.rho, steps=21)
        slices_.append(line.assign(model=label))
    numbers["sharp_ratio"] = numbers["sharp_parity"] / numbers["sharp_first"]
    numbers["limit_ratio"] = numbers["limit_parity"] / numbers["limit_first"]
    curve, lines = pd.DataFrame(rows), pd.concat(slices_, ignore_index=True)
    return numbers, [
        Figure("radius", "L_ρ/ρ² against the radius ρ; dashed: the exact small-ρ limit",
               charts.radius_curves(curve, numbers["rho"]), curve,
               "Same seeded directions at every radius; the last point is the paper's radius ρ = 0.02·√P."),
        Figure("slices", "the loss along one random direction, out to twice the paper's radius", charts.model_lines(
            lines, "alpha", "loss", "distance ‖Δ‖ along the direction (0 is the trained model)", "loss"), lines,
               "The same seeded unit direction for both, so equal distances are equal radii."),
    ]


# ----------------------------------------------------------------------------- chapter 5

LENGTH_MODELS = tuple(f"encoder-parity-n{n}" for n in (4, 6, 8, 10, 12, 16))


def shipped_length_scaling(results: Path) -> tuple[pd.DataFrame, str]:
    """The length-scaling runs of the largest scale present (standard before quick), and the scale."""
    from .report import SCALES
    from .sweeps import read_results

    for scale in reversed(SCALES):
        folder = Path(results) / scale / "length_scaling"
        if (folder / "runs.parquet").is_file():
            return read_results(folder)[0], scale
    raise ValueError(f"{results}: no length-scaling results (run the length_scaling sweep)")


def length_points(runs: pd.DataFrame) -> pd.DataFrame:
    """Converged runs' sharpness proxy on the ±1 scale, mean and standard error per task and n."""
    kept = runs[(runs["status"] == "finished") & runs["converged"].fillna(False).astype(bool)]
    grouped = kept.groupby(["task", "n"])["sharpness_proxy_pm1"]
    table = pd.DataFrame({"mean": grouped.mean(), "stderr": grouped.sem(), "count": grouped.size()}).reset_index()
    return table.assign(low=table["mean"] - table["stderr"].fillna(0), high=table["mean"] + table["stderr"].fillna(0))


def zoo_point(ck: Checkpoint, label: str) -> dict:
    """One model as a point of the length-scaling figure: its proxy on the ±1 scale at its own n."""
    found = measure(ck.model, ck.task, ck.n, SETTINGS, ("proxy",), ck.encoding)
    scale = 4.0 if ck.encoding.name == "zero_one" else 1.0
    return {"model": label, "task": ck.task.name, "n": ck.n, "value": scale * found.proxy.value}


def _length(src: Sources) -> tuple[dict, list[Figure]]:
    runs, scale = shipped_length_scaling(src.results)
    points = length_points(runs)
    mine = pd.DataFrame([zoo_point(src.load(name), "zoo PARITY model") for name in LENGTH_MODELS]
                        + [zoo_point(ck, label) for label, ck in src.yours.items() if ck.task is not None and ck.n])
    kept = runs[(runs["status"] == "finished") & runs["converged"].fillna(False).astype(bool)]
    numbers = {"scale": scale, "runs": len(kept), "level": stats.LEVEL}
    for task in ("parity", "first"):
        rows = kept[kept["task"] == task]
        slope = stats.slope(rows["n"], rows["sharpness_proxy_pm1"])
        numbers[f"slope_{task}"], numbers[f"slope_{task}_low"], numbers[f"slope_{task}_high"] = (
            slope.estimate, slope.low, slope.high)
    numbers["n_max"] = int(points["n"].max())
    return numbers, [Figure("length", f"sharpness proxy ×4 against n ({scale} scale, mean ± s.e. over seeds)",
                            charts.length_scaling(points, mine), points,
                            "Diamonds: the zoo's PARITY models measured the same way (your trained model joins them).")]


# ----------------------------------------------------------------------------- chapter 6


def _few_examples(src: Sources) -> tuple[dict, list[Figure]]:
    load = src.load
    ck = load("encoder-random-n8")
    config_fields = ck.metadata["training"]["config"]
    from .training import TrainConfig

    config = TrainConfig(**config_fields)
    n = config.n
    learned = ck.encoding.decide(cube_outputs(ck.model, n))  # [2**n] the function the model computes
    target = ck.task.values(n)
    train_set = TrainingData(config).train_set
    others = completions(ck.task, n, train_set, 64, seed=0)

    def as_n(table01: torch.Tensor) -> float:
        return cube.analyze(2.0 * table01.double() - 1.0).avg_sensitivity

    completion_as = torch.tensor([as_n(t) for t in others])
    held_out = torch.ones(2**n, dtype=torch.bool)
    held_out[train_set] = False
    numbers = {
        "n": n, "train_size": len(train_set), "inputs": 2**n, "others": 2**n - len(train_set),
        "as_learned": as_n(learned), "as_target": as_n(target),
        "as_completions": completion_as.mean().item(),
        "more_sensitive": (completion_as > as_n(learned)).float().mean().item(),
        "fit": (learned[train_set] == target[train_set]).float().mean().item(),
        "held_out": (learned[held_out] == target[held_out]).float().mean().item(),
        "chance": max(target[held_out].mean().item(), 1 - target[held_out].mean().item()),
    }
    table = pd.DataFrame(
        [{"function": "random completions of the training data", "as_n": v} for v in completion_as.tolist()]
        + [{"function": "the random target", "as_n": numbers["as_target"]},
           {"function": "what the transformer learned", "as_n": numbers["as_learned"]}])
    records = ck.metadata.get("extra", {}).get("measurements") or []
    over = tables.training_table(records)
    over = over[over["metric"].isin(["as_n(model)", "sharpness L_ρ"])]
    return numbers, [
        Figure("few_as", f"as_n of functions that agree on the {len(train_set)} training inputs",
               charts.sensitivity_strip(table), table,
               "Each dot one function: all of them fit the training inputs; they differ on the others."),
        Figure("few_training", "as_n and sharpness of the model while it fits", charts.training_curves(over, columns=2),
               over),
    ]


# ----------------------------------------------------------------------------- the chapters

CHAPTERS: tuple[Chapter, ...] = (
    Chapter(
        1, "sensitivity", "Sensitivity on the cube",
        "Which Boolean functions change when you flip one input bit — and how does a transformer's output "
        "show it?",
        ("encoder-parity-n8", "encoder-first-n8"),
        "Flip one bit of an input. How many of the n flips change PARITY? How many change FIRST?",
        (r"s(f,x) = \#\{i : f(x^{\oplus i}) \neq f(x)\}",
         r"\mathrm{as}_n(f) = \mathbb{E}_x\, s(f,x) = \sum_{k=0}^{n} k\, d_k,\quad d_k = \sum_{|P|=k} \lambda_P^2"),
        "Change n, or open the Sensitivity page with both models and click any cell to see its flips.",
        "The trained PARITY model is sensitive everywhere: as_n = {as_parity:.3g} of a possible {n}, and its "
        "Fourier weight sits at degree {n} (d_{n} = {top_parity:.3f}). The FIRST model reacts to one bit only: "
        "as_n = {as_first:.3g}, its weight at degree {peak_first} (d_{peak_first} = {weight_first:.3f}). Same "
        "colour, same s.",
        "Every flip changes PARITY, so s(PARITY, x) = n = {n} at every input; only the flip of the first bit "
        "changes FIRST, so s(FIRST, x) = {peak_first}. The models learned exactly this: as_n = {as_parity:.3g} and "
        "{as_first:.3g}.",
        _sensitivity,
    ),
    Chapter(
        2, "training", "Training PARITY: degree n takes over",
        "What happens inside a transformer while it learns PARITY?",
        ("encoder-parity-n8",),
        "Before PARITY is learned, where is the model's Fourier weight? What happens to sharpness when degree n "
        "appears?",
        (r"L_{\rho,n}(T) = \mathbb{E}_x\,\mathbb{E}_{\|\Delta\|=\rho}\big(T_{\theta+\Delta}(x)-T_\theta(x)\big)^2",),
        "Train it yourself: the PARITY preset of the Train page converges in well under a minute.",
        "For the first {step_half} steps the model stays at low degrees (it cannot fit PARITY partially: every "
        "lower-degree part of PARITY is zero). Then degree {n} takes over (d_{n} = {top_end:.3f} at step "
        "{steps}), and sharpness L_ρ rises {sharp_ratio:.2g}-fold ({sharp_start:.3g} → {sharp_end:.3g}).",
        "Almost nowhere: PARITY has no Fourier weight below degree n, so partial progress does not show. When "
        "degree {n} appears the output becomes sensitive to every bit, and so to the parameters: sharpness "
        "grows from {sharp_start:.3g} to {sharp_end:.3g}.",
        _training,
    ),
    Chapter(
        3, "blowup", "How can a transformer be sensitive? LayerNorm blowup",
        "Attention averages, so a transformer's output moves little when one input changes. How does the "
        "PARITY model manage to flip at every bit?",
        BLOWUP_MODELS,
        "Which model needs the larger LayerNorm factors N, and why would dividing by a small variance help?",
        (r"N_i^{(k)} = \frac{1}{\sqrt{\sigma^2(Y_i^{(k)})+\varepsilon}},\quad \tau^{(k)}(x) = \max_w (1+N_w^{(k)}(x))",
         r"C\,\mathbb{E}[\mathrm{Blowup}^2] \ge \frac{\mathrm{as}_n(f)}{\sqrt{n\log n}} - \frac{H}{n}"),
        "Pick an input on the LayerNorm page and compare N_i^(k) of both models position by position.",
        "At n = {n} the PARITY model's mean Blowup is {blowup_parity:.3g}, {ratio:.2g} times the FIRST model's "
        "{blowup_first:.3g}; its largest LayerNorm factor N reaches {max_n_parity:.3g} (FIRST: "
        "{max_n_first:.3g}) while its parameter norm is {norm_parity:.3g} against {norm_first:.3g}: it pays "
        "in blowup, not in norm.",
        "LayerNorm divides by the standard deviation of its input: when that is small, a small change is "
        "amplified. The theorem says a sensitive function needs large parameters or this blowup; the PARITY "
        "model's Blowup is {ratio:.2g} times the FIRST model's.",
        _blowup,
    ),
    Chapter(
        4, "landscape", "The landscape: sharp and flat minima",
        "Is the minimum the PARITY model sits in sharper than the FIRST model's?",
        LANDSCAPE_MODELS,
        "At the paper's radius, which minimum is sharper? Does the small-ρ limit tell the same story?",
        (r"\lim_{\rho\to0}\,\liminf_{n\to\infty} L_{\rho,n}(T) \ge \liminf_{n\to\infty} \frac{\mathrm{as}_n(T)}{2n}"
         r" - L\,e^{-\Omega(d)}",),
        "Open the Landscape page with both models and move the radius, or compute a 2-D slice.",
        "At the paper's radius ρ = {rho:.3g}, L_ρ is {sharp_parity:.3g} ± {stderr_parity:.2g} for PARITY and "
        "{sharp_first:.3g} ± {stderr_first:.2g} for FIRST ({sharp_ratio:.2g}×). The small-ρ limit "
        "E‖∇T‖²/P gives {limit_parity:.3g} and {limit_first:.3g} (ratio {limit_ratio:.2g}) at n = {n}.",
        "At the finite radius PARITY's minimum is {sharp_ratio:.2g} times as sharp. The small-ρ limit is only "
        "the first-order part (ratio {limit_ratio:.2g}); the theorem is about a fixed radius as n grows, which "
        "is what the paper measures.",
        _landscape,
    ),
    Chapter(
        5, "length", "Length scaling",
        "Does PARITY's sharpness grow with the input length n, and FIRST's not?",
        ("encoder-parity-n8", "encoder-first-n8"),
        "If sharpness grows with n, what does that mean for training PARITY at n = 100?",
        (r"\mathrm{as}_n(\mathrm{PARITY}) = n \;\Rightarrow\; \liminf_{n} L_{\rho,n} \ge \tfrac12",
         r"\mathrm{as}_n(\mathrm{FIRST}) = 1 \;\Rightarrow\; \text{bound} \to 0"),
        "Train a model on the Train page and add it as a point.",
        "Over {runs} converged runs ({scale} scale) PARITY's sharpness proxy grows by {slope_parity:.3g} per "
        "unit of n ({level:.0%} interval {slope_parity_low:.3g} to {slope_parity_high:.3g}); FIRST's slope is "
        "{slope_first:.3g} ({slope_first_low:.3g} to {slope_first_high:.3g}).",
        "PARITY's minima get sharper as n grows (slope {slope_parity:.3g} per unit of n): longer inputs put "
        "gradient descent in ever narrower valleys, so PARITY gets harder to find and to keep.",
        _length,
    ),
    Chapter(
        6, "few-examples", "What transformers learn from few examples",
        "Shown a random function on a handful of inputs, what does a transformer guess for the rest?",
        ("encoder-random-n8",),
        "Of all functions that agree with the training inputs, which one did the transformer pick?",
        (r"\text{low sensitivity: } \mathrm{as}_n(\hat f) \ll \mathbb{E}_{g \text{ agreeing on the data}}\, "
         r"\mathrm{as}_n(g)",),
        "Train one yourself with fewer or more examples (the Train page's restricted training set).",
        "The model fits its {train_size} training inputs ({fit:.0%}) and guesses {held_out:.0%} of the other "
        "{others} right (a constant guess gets {chance:.0%}). What it learned has as_n = {as_learned:.3g}, against "
        "{as_target:.3g} for the target and {as_completions:.3g} on average for random completions; "
        "{more_sensitive:.0%} of those are more sensitive.",
        "A low-sensitivity one: as_n = {as_learned:.3g}, below {more_sensitive:.0%} of the functions that agree "
        "with the data. Transformers prefer low-sensitivity functions, the flip side of PARITY being hard.",
        _few_examples,
    ),
)
"""The Lab's chapters, in order."""


def chapter(number: int) -> Chapter:
    """The chapter with this number; ValueError naming the range otherwise."""
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= len(CHAPTERS):
        raise ValueError(f"there are chapters 1..{len(CHAPTERS)}, not {number!r}")
    return CHAPTERS[number - 1]


# ----------------------------------------------------------------------------- the handout


STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 980px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.5; }
h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 2.2em; }
.question { font-size: 1.1em; font-style: italic; } .ask { background: #f4f6fa; padding: 0.6em 0.9em; }
.formula { font-family: "Latin Modern Math", "Cambria Math", serif; background: #fafafa; padding: 0.5em;
           overflow-x: auto; } .caption { color: #555; font-size: 0.92em; } .chart { margin: 0.6em 0 1.2em 0; }
"""


_LATEX = (
    (r"\\mathbb\{E\}", "E"), (r"\\(?:mathrm|text|operatorname)\{([^{}]*)\}", r"\1"), (r"\\hat f", "f̂"),
    (r"\\tfrac12", "½"), (r"\\frac\{([^{}]*)\}\{([^{}]*)\}", lambda m: f"{_group(m[1])}/{_group(m[2])}"),
    (r"\\sqrt\{([^{}]*)\}", r"√(\1)"),
    (r"([_^])\{([^{}]*)\}", lambda m: m[1] + _group(m[2])),
    (r"\\sum", "Σ"), (r"\\liminf", "lim inf"), (r"\\lim", "lim"), (r"\\max", "max"), (r"\\log", " log "),
    (r"\\rho", "ρ"), (r"\\lambda", "λ"), (r"\\sigma", "σ"), (r"\\varepsilon", "ε"), (r"\\tau", "τ"),
    (r"\\theta", "θ"), (r"\\Delta", "Δ"), (r"\\Omega", "Ω"), (r"\\oplus", "⊕"), (r"\\neq", "≠"), (r"\\ge", "≥"),
    (r"\\ll", "≪"), (r"\\Rightarrow", "⇒"), (r"\\to", "→"), (r"\\infty", "∞"), (r"\\\|", "‖"),
    (r"\\#", "#"), (r"\\(?:big|quad|qquad)|\\[,;]", " "),
)
"""LaTeX of the chapters' formulas as plain Unicode, for the handout (which loads no math renderer)."""


def _group(text: str) -> str:
    """A sub- or superscript, a numerator or denominator: bare when one symbol or already bracketed."""
    return text if len(text) == 1 or (text.startswith("(") and text.endswith(")")) else f"({text})"


def formula_text(latex: str) -> str:
    """A chapter's LaTeX formula as readable Unicode text (the macros the chapters use), innermost first."""
    import re

    text = latex.replace(r"\{", "\x00").replace(r"\}", "\x01")  # literal braces of a set
    while True:
        before = text
        for pattern, replacement in _LATEX:
            text = re.sub(pattern, replacement, text)
        if text == before:
            break
    text = re.sub(r"\s+", " ", text.replace("{", "").replace("}", ""))
    return text.replace("\x00", "{").replace("\x01", "}").strip()


def handout(load: Loader, results: Path, answers: bool = False) -> str:
    """The whole lab as one offline HTML page: every chapter's text, figures, question (and answer)."""
    specs, sections = [], []
    for ch in CHAPTERS:
        built = ch.build(Sources(load, results))
        parts = [f'<section id="chapter-{ch.number}"><h2>{ch.number}. {html.escape(ch.title)}</h2>',
                 f'<p class="question">{html.escape(ch.question)}</p>',
                 f"<p><b>Models:</b> {', '.join(html.escape(m) for m in ch.models)}</p>"]
        for fig in built.figures:
            specs.append(fig.chart.to_dict())
            parts += [f"<h3>{html.escape(fig.title)}</h3>", f'<div class="chart" id="chart-{len(specs) - 1}"></div>',
                      f'<p class="caption">{html.escape(fig.caption)}</p>']
        parts += [f"<p><b>What to look for.</b> {html.escape(built.look_for)}</p>",
                  f'<p class="ask"><b>Question.</b> {html.escape(ch.ask)}</p>']
        if answers:
            parts.append(f"<p><b>Answer.</b> {html.escape(built.answer)}</p>")
        parts += [f'<p class="formula">{"<br>".join(html.escape(formula_text(line)) for line in ch.formula)}</p>',
                  f"<p><b>Try it yourself</b> (in the explorer): {html.escape(ch.try_it)}</p></section>"]
        sections.append("\n".join(parts))
    toc = "".join(f'<li><a href="#chapter-{c.number}">{html.escape(c.title)}</a></li>' for c in CHAPTERS)
    return offline_page(
        "sensviz lab: why sensitive functions are hard for transformers", STYLE,
        ["<h1>Why are sensitive functions hard for transformers? A lab in six chapters</h1>",
         "<p>Hahn &amp; Rofin (ACL 2024), with models trained by sensviz. Every number in the text is computed "
         "from the models shown." + (" Answers included." if answers else "")
         + " This page loads nothing from the internet.</p>",
         f"<nav><ol>{toc}</ol></nav>", *sections],
        specs)


def write_handout(checkpoints: str | Path, results: str | Path, out: str | Path, answers: bool = False) -> dict:
    """Write the handout of the zoo in `checkpoints` and the shipped `results` to `out`; returns a summary."""
    page = handout(zoo_loader(checkpoints), Path(results), answers)
    out = write_text(out, page)
    return {"written": str(out), "chapters": len(CHAPTERS), "answers": answers, "bytes": out.stat().st_size,
            "figures": page.count('class="chart"')}


def numbers_json(built: Built) -> str:
    """A chapter's numbers as JSON (for tests and downloads)."""
    return json.dumps(built.numbers, default=float)
