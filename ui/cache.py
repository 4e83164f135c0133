"""The explorer's cache layer: every call into the `sensviz` core, cached by its arguments.

**The caching rule.** Every value the explorer loads or computes is kept in a `ui.memo.Store`, keyed
by the function's name and its bound arguments in signature order (everything but the `progress`
callback), so a forgotten argument cannot serve a stale result; a missed key is computed once even
when many sessions ask at once (a lock per key; the others wait for the value); values are shared
between sessions and callers never modify them. A value read from a file has the file's version
(its mtime, its size) among its arguments, so a changed file is read again. One scheme per kind:

- loaded models: `load`, in the model store bounded by their bytes (`MODEL_CACHE_BYTES`);
- everything computed or read (tables, figures, reports, file metadata, digests): `@memo`, in the
  store of computed values (256 entries);
- a page's chart as a Vega-Lite spec: `spec(chart_fn, *args)`, in the same store, keyed by the chart
  function and its arguments, tables by a hash of their content (a page draws it with no conversion);
- `st.cache_resource` holds only what there is one of per server: the two stores and the warm-up.

Not `st.cache_data`: it replays the elements a cached function drew and fails on a progress bar
created outside it (long computations here report progress through a callback), and a second
scheme would let one key be served twice.

`ui.memo.stats()` counts the computations per function, and with $SENSVIZ_LOG=INFO every
computation is logged (`sensviz.explorer`), which the load test reads.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import logging
import math
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st
import torch

import sensviz as sv
from sensviz import analysis, init_charts, losses, report, sweeps, symmetries, tables
from sensviz.checkpoints import MB, SIZE_CAP, read_metadata
from sensviz.init_claim import decide_init_claim
from sensviz.init_study import init_studies, init_study
from sensviz.measure import MeasureSettings, affordable, columns, measure, sharpness_radius
from sensviz.models import ModelSettings, config_to_dict
from sensviz.text import escape_markdown
from server import services
from server.kept import KeptUnreadable
from ui import model_refs
from ui.memo import Store, keyed, memo
from ui.model_refs import ModelRef

UPLOAD_CAP_MB = SIZE_CAP // MB
"""Upload size cap; `.streamlit/config.toml` sets `server.maxUploadSize` to the same value."""
SETTINGS = MeasureSettings()
"""The explorer measures with everyone's defaults (`sensviz.measure`): the exact limit, the samples
above it, the landscape inputs, the radius of the paper's sharpness."""
MODEL_EXACT_LIMIT = SETTINGS.exact_limit
DEFAULT_SAMPLES = SETTINGS.samples
LANDSCAPE_INPUTS = SETTINGS.measure_inputs
LANDSCAPE_DIRECTIONS = 64  # the Landscape page's default number of random directions (the Lab's too)
GRID_LIMIT = 12
"""Largest n drawn as a cube grid (2**12 cells); larger cubes get histograms and weight views."""


def page_threads() -> int:
    """torch's threads for the pages' computations: one; $SENSVIZ_PAGE_THREADS overrides (a researcher
    alone on a many-core machine). Sessions compute side by side, each in a thread of its own; torch's
    intra-op threads spin between operations, and on shared cores a spinning thread takes the CPU from
    the thread it waits for, from the other sessions and from the training runs. One thread per session
    is slower for one user on idle cores, and many times faster on busy ones (`python
    benchmarks/explorer.py --threads` measures both)."""
    configured = os.environ.get("SENSVIZ_PAGE_THREADS", "1")
    if not configured.strip().isdigit() or int(configured) < 1:
        raise ValueError(f"SENSVIZ_PAGE_THREADS must be a whole number of threads, 1 or more; got {configured!r}")
    return int(configured)


torch.set_num_threads(page_threads())

Progress = Callable[[float], None] | None

log = logging.getLogger("sensviz.explorer")
if not log.handlers and os.environ.get("SENSVIZ_LOG"):
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
    log.addHandler(_handler)
    log.setLevel(os.environ["SENSVIZ_LOG"].upper())
    log.propagate = False


@st.cache_resource(show_spinner=False)
def warm_up() -> threading.Thread:
    """Draw every Lab chapter from its shipped data in the background, from the server's start-up
    (`ui.serve.lifespan`; else after the first page, `ui.router.routing`): each chapter's first view, its charts
    converted before and after a prediction, then each try-it choice; the models the chapters' setups
    select are loaded between the two; then pay torch's one-time costs of the landscape measurements
    (vmap, functional_call: seconds of CPU), not in the first Landscape page a user opens."""

    def work():
        from sensviz import lab

        views = [(ch, ch.control.default) for ch in lab.CHAPTERS]
        views += [(ch, c) for ch in lab.CHAPTERS for c in ch.control.options if c != ch.control.default]
        for i, (ch, choice) in enumerate(views):
            if i == len(lab.CHAPTERS):  # the first views drawn: the models "Load this chapter's models" selects
                _warm_models(lab.summary_models())
            try:
                for blind in (True, False):  # what a session draws before and after its prediction
                    lab_specs(ch.number, choice, blind=blind)
            except (OSError, ValueError) as err:  # the page says it again, with the measurement's progress
                log.info("Lab chapter %d not warmed up: %s", ch.number, err)
        model = sv.build_model("encoder", d_model=8, n_layers=1, n_heads=2, max_len=4, seed=0)
        sv.sharpness.sharpness(model, sv.cube.vertices(2), rho=0.1, n_directions=2, seed=0)

    thread = threading.Thread(target=work, daemon=True, name="sensviz-warm-up")
    thread.start()
    return thread


def _warm_models(names) -> None:
    """Load these zoo models and their sidebar summaries at their trained length (shipped: `summary`)."""
    for name in names:
        try:
            ref = model_refs.zoo_ref(name)
            summary(ref, default_n(ref))
        except (ValueError, sv.CheckpointError) as err:
            log.info("%s not warmed up: %s", name, err)


# ----------------------------------------------------------------------------- models


@memo
def _zoo_entries(folder: str, mtime_ns: int) -> list[dict]:
    entries = []
    for path in Path(folder).glob("*.safetensors"):
        try:
            meta = read_metadata(path)
        except sv.CheckpointError:
            continue
        config = meta.get("config", {})
        task = meta.get("task")
        entries.append(
            {
                "stem": path.stem,
                "arch": meta.get("arch", "encoder"),
                "task": sv.tasks.task_from_spec(task).label if task else "?",
                "n": int(meta["n"]) if "n" in meta else None,
                "d_model": config.get("d_model"),
                "n_layers": config.get("n_layers"),
                "n_heads": config.get("n_heads"),
                "accuracy": (meta.get("training") or {}).get("final_accuracy"),
                "config": config,
            }
        )
    return sorted(entries, key=lambda e: (e["task"], e["n"] or 0, e["arch"], e["d_model"] or 0, e["stem"]))


def zoo_entries() -> list[dict]:
    """Metadata of every pretrained checkpoint (header only), by task, then n, then architecture;
    renewed when the folder changes (files are written by replacing them)."""
    folder = services.checkpoint_dir()
    return _zoo_entries(str(folder), folder.stat().st_mtime_ns if folder.is_dir() else 0)


MODEL_CACHE_BYTES = 512 * 2**20
"""The loaded models kept in memory for every session, by the sum of their parameters' and buffers'
bytes (the least recently used go first); a single model over it is still loaded, alone."""


def model_bytes(ck: sv.Checkpoint) -> int:
    """The memory of a loaded model's tensors: its parameters and buffers, in bytes."""
    return sum(t.numel() * t.element_size() for t in (*ck.model.parameters(), *ck.model.buffers()))


@st.cache_resource(show_spinner=False)
def _models() -> Store:
    return Store(max_weight=MODEL_CACHE_BYTES, weigh=model_bytes)


def models_held() -> tuple[int, int]:
    """How many loaded models are cached, and their bytes."""
    store = _models()
    with store.lock:
        return len(store.values), store.weight


def _load(ref: ModelRef) -> sv.Checkpoint:
    return _models().get_or_compute(("load", ref), lambda: _read(ref))


def _read(ref: ModelRef) -> sv.Checkpoint:
    try:
        data = model_refs.model_bytes(ref)
    except KeptUnreadable as err:
        raise sv.CheckpointError(f"{ref.label}: {err}") from None
    except (KeyError, OSError):
        raise sv.CheckpointError(f"{ref.label}: the model is gone (deleted, or evicted to make room)") from None
    if model_refs.digest(data) != ref.digest:
        raise sv.CheckpointError(f"{ref.label}: the file changed since it was selected; select it again")
    source = io.BytesIO(data)
    source.name = ref.name or ref.key
    checkpoint = sv.load_checkpoint(source, **ref.overrides)
    log.info("loaded %s", ref.param)
    return checkpoint


def load(ref: ModelRef) -> sv.Checkpoint:
    """The loaded checkpoint (shared and read-only). Loading reads the bytes, checks they are the
    ones the reference names and validates them (`sensviz.load_checkpoint`); later calls check
    that the file is still there and unchanged. `CheckpointError` for a bad, changed or vanished file."""
    if not model_refs.unchanged(ref):
        raise sv.CheckpointError(f"{ref.label}: the model is gone or changed since it was selected; select it again")
    return _load(ref)


TORCH_SUFFIXES = ("pt", "pth")
"""PyTorch's pickle-based files: the uploader takes them only to refuse them with a way forward."""
_APP_TERMS = (
    ("n_heads / --n-heads", "the field **Attention heads** under “For files without sensviz metadata”"),
    ("pass n (--n)", "set **Trained input length n** under “For files without sensviz metadata”"),
)
"""The loader's words for the command line, in the app's words."""
_NAME = "<name>"


def in_app_terms(message: str) -> str:
    """A message of the loader as markdown: escaped (it may quote a file's metadata), with its
    command-line flags named as the upload's fields."""
    text = escape_markdown(message)
    for cli, app in _APP_TERMS:
        text = text.replace(escape_markdown(cli), app)
    return text


def check_upload(name: str, data: bytes, overrides: dict) -> str | None:
    """None when an upload loads; else the message as markdown, naming the file (escaped) and the
    fields of the app. A PyTorch file is refused by its name or its first bytes, never opened: the
    server never unpickles a user's file (not even with `weights_only`)."""
    if data.startswith(sv.checkpoints.TORCH_MAGIC):
        return (f"{escape_markdown(name)} is a PyTorch file (a pickle), which the explorer never opens: on your own "
                f"machine, {sv.checkpoints.CONVERT_HINT}, and upload model.safetensors.")
    if name.lower().rsplit(".", 1)[-1] in TORCH_SUFFIXES:
        return (f"{escape_markdown(name)} is named like a PyTorch file, but its first bytes are not those of a file "
                "torch.save wrote. The explorer reads .safetensors files (a PyTorch file it never opens: "
                f"{sv.checkpoints.CONVERT_HINT}).")
    source = io.BytesIO(data)
    source.name = _NAME
    try:
        sv.load_checkpoint(source, **overrides)
    except sv.CheckpointError as err:
        return in_app_terms(str(err)).replace(escape_markdown(_NAME), escape_markdown(name))
    return None


@memo
def init_study_tables(arch: str, d_model: int, n_layers: int, n: int, inits: int, task: str) -> dict:
    """An initialisation study at every default init scale (`sensviz.init_study`, two heads): its table per
    initialisation, the mean degree profiles beside the target's, the target's as_n and the claim's cells and verdict."""
    studies = init_studies(ModelSettings(arch=arch, d_model=d_model, n_layers=n_layers, n_heads=2), n, inits, task=task)
    claim = decide_init_claim(studies)
    cells = pd.DataFrame([dataclasses.asdict(cell) for cell in claim.cells])
    return {"table": init_charts.study_table(studies), "profiles": init_charts.profile_table(studies),
            "target": studies[0].target_avg_sensitivity, "claim": claim.to_dict(), "cells": cells}


@memo
def init_band_study(arch: str, d_model: int, n_layers: int, n: int, inits: int, task: str):
    """The study at init scale 1 (`sensviz.init_study`, two heads): the starting band of where training goes."""
    return init_study(ModelSettings(arch=arch, d_model=d_model, n_layers=n_layers, n_heads=2), n, inits, 1.0, 0, task)


@memo
def same_weights(a: ModelRef, b: ModelRef) -> bool:
    """Whether two models hold the same weights (`sensviz.checkpoints.same_weights`)."""
    return sv.checkpoints.same_weights(load(a).model, load(b).model)


@memo
def model_facts(ref: ModelRef) -> dict:
    """What the pages say about a model without computing anything: task, lengths, sizes."""
    ck = load(ref)
    c = ck.config
    return {"task": ck.task.label if ck.task else None, "boolean": ck.task is None or ck.task.boolean,
            "trained_n": ck.n, "default_n": ck.n or min(8, c.max_len), "max_len": c.max_len, "arch": ck.arch,
            "size": f"d={c.d_model}, L={c.n_layers}, H={c.n_heads}", "n_params": ck.model.n_params()}


def default_n(ref: ModelRef) -> int:
    """The input length the pages analyse a model at unless told otherwise: its training length."""
    return model_facts(ref)["default_n"]


@memo
def task_defined(ref: ModelRef, n: int) -> bool:
    """Whether the model's task (if it has one) is defined at length n."""
    ck = load(ref)
    if ck.task is None:
        return True
    try:
        ck.task.check_n(n)
    except ValueError:
        return False
    return True


def compatible_models(ref: ModelRef, others: list[ModelRef]) -> list[ModelRef]:
    """The pretrained checkpoints and `others` with the architecture and config of `ref` (the
    same parameter space, so a straight line between the two is meaningful)."""
    ck = load(ref)
    config = config_to_dict(ck.config)
    found = [model_refs.zoo_ref(e["stem"]) for e in zoo_entries() if e["arch"] == ck.arch and e["config"] == config]
    for other in others:
        try:
            same = load(other).arch == ck.arch and load(other).config == ck.config
        except sv.CheckpointError:
            continue
        if same and other not in found:
            found.append(other)
    return [other for other in found if other != ref]


# ----------------------------------------------------------------------------- the sidebar summary


@memo
def summary(ref: ModelRef, n: int, progress: Progress = None) -> dict:
    """The selected model's summary at length n: task, sizes, and every column of its instant quantities
    (`sensviz.measure.affordable`, `columns`: accuracy, as_n of model vs target, param_norm, Blowup ...);
    shipped for the models the Lab's chapters select, at their trained length (`sensviz lab-data`)."""
    found = _shipped_summary(ref, n)
    if found is None:
        ck = load(ref)
        measured = measure(ck.model, ck.task, n, SETTINGS, affordable(ck.model, "instant"), ck.encoding, progress=progress)
        found = {**columns(measured), "exact": measured.sensitivity.exact}
    return {
        **model_facts(ref),
        "n": n,
        "blowup_mean": None,  # shown by the sidebar even when Blowup could not be computed (a note says why)
        **found,
        "as_model": found["avg_sensitivity"],
        "as_target": found["task_avg_sensitivity"],
    }


@memo
def _lab_summaries(path: str, mtime_ns: int) -> dict:
    from sensviz import lab

    return lab.read_summaries(Path(path).parent)


def _shipped_summary(ref: ModelRef, n: int) -> dict | None:
    """A zoo model's summary at length n from the Lab's shipped data (`sensviz.lab.stored_summary`: measured
    from this very file at this n), else None."""
    if ref.kind != "zoo" or ref.overrides:
        return None
    from sensviz import lab

    path = services.checkpoint_dir() / lab.DATA_FILE
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return None
    return lab.stored_summary(_lab_summaries(str(path), stamp), ref.key, ref.digest, n)


# ----------------------------------------------------------------------------- Sensitivity and Attention


@memo
def sensitivity_report(ref: ModelRef, n: int, samples: int = DEFAULT_SAMPLES, seed: int = 0,
                       progress: Progress = None) -> analysis.SensitivityReport:
    """Model vs target on the cube at length n (exact up to MODEL_EXACT_LIMIT, sampled above)."""
    ck = load(ref)
    return analysis.sensitivity_report(ck.model, n, ck.task, ck.encoding, exact_limit=MODEL_EXACT_LIMIT,
                                       n_samples=samples, seed=seed, progress=progress)


@memo
def sensitivity_tables(ref: ModelRef, n: int, progress: Progress = None) -> dict:
    """The Sensitivity page's tables: histogram, by_weight, influence, and (exact) vertices and degrees."""
    report = sensitivity_report(ref, n, progress=progress)
    found = {
        "report": report,
        "histogram": tables.sensitivity_histogram(report),
        "by_weight": tables.by_weight_table(report),
        "influence": tables.influence_table(report),
    }
    if report.exact:
        found["degrees"] = tables.degree_table(report)
        found["vertices"] = tables.vertex_table(report, load(ref).encoding)
    return found


def flip_table(ref: ModelRef, n: int, vertex: int) -> pd.DataFrame:
    """For one vertex: each single-bit flip, the model's output there, and whether it changes."""
    return tables.flip_table(sensitivity_report(ref, n), vertex, load(ref).encoding)


@memo
def mean_attention(ref: ModelRef, n: int, samples: int = DEFAULT_SAMPLES, seed: int = 0, progress: Progress = None):
    """Attention averaged over the cube (or a sample), overall and by Hamming weight."""
    return analysis.mean_attention(load(ref).model, n, exact_limit=MODEL_EXACT_LIMIT, n_samples=samples, seed=seed,
                                   progress=progress)


@memo
def trace_one(ref: ModelRef, bits: tuple[int, ...]) -> sv.Trace:
    """The trace of one input string."""
    model = load(ref).model
    with torch.inference_mode():
        return model.trace(torch.tensor([bits], device=model.device)).to("cpu")


def attention_tables(ref: ModelRef, bits: tuple[int, ...], flip_position: int | None):
    """Attention of one input as rows, and (with a position) its change when that bit flips."""
    trace = trace_one(ref, bits)
    table = tables.attention_table(trace.attention[0], trace.attention_names)
    if flip_position is None:
        return table, None
    flipped = list(bits)
    flipped[flip_position] ^= 1
    other = trace_one(ref, tuple(flipped))
    return table, tables.attention_change_table(trace.attention[0], other.attention[0], trace.attention_names)


def mean_attention_table(ref: ModelRef, n: int, weight: int | None, progress: Progress = None):
    """Mean attention as rows, over all inputs (weight None) or inputs of one Hamming weight; and the average."""
    average = mean_attention(ref, n, progress=progress)
    values = average.overall if weight is None else average.by_weight[weight]
    return tables.attention_table(values, tuple(load(ref).model.attention_names())), average


def bits_of_vertex(n: int, vertex: int) -> tuple[int, ...]:
    """The bit string of a cube vertex (position 0 is the most significant bit)."""
    return tuple(sv.cube.vertex_bits(torch.tensor([vertex]), n)[0].tolist())


def vertex_of_bits(bits: tuple[int, ...]) -> int:
    return int(sv.cube.vertex_index(torch.tensor([bits]))[0])


def random_vertex(n: int, seed: int) -> int:
    """A uniformly random vertex, reproducible from the seed."""
    return vertex_of_bits(tuple(sv.cube.sample(n, 1, seed)[0].tolist()))


# ----------------------------------------------------------------------------- LayerNorm


@memo
def blowup_summary(ref: ModelRef, n: int, progress: Progress = None):
    """Blowup over the cube (exact up to MODEL_EXACT_LIMIT, else sampled), with every input's N."""
    return sv.blowup.blowup_summary(load(ref).model, n, exact_limit=MODEL_EXACT_LIMIT, n_samples=DEFAULT_SAMPLES,
                                    progress=progress, keep_factors=True)


@memo
def layernorm_tables(ref: ModelRef, n: int, progress: Progress = None) -> dict:
    """The LayerNorm page's tables: per-LN statistics, distributions of N and Blowup, and (exact)
    Blowup grouped by the sensitivity of the model and of the target at the same inputs."""
    summary_ = blowup_summary(ref, n, progress=progress)
    names = tuple(row["name"] for row in summary_.per_ln)
    found = {
        "summary": summary_,
        "per_ln": tables.per_ln_table(summary_),
        "ln_histogram": tables.ln_factor_histogram(summary_.factors, names),
        "blowup_histogram": tables.blowup_histogram(summary_.values),
    }
    if summary_.exact:
        report_ = sensitivity_report(ref, n)
        groups = [tables.blowup_by_sensitivity(summary_.values, report_.model.sensitivity, "model")]
        if report_.target is not None:
            groups.append(tables.blowup_by_sensitivity(summary_.values, report_.target.sensitivity, "target"))
        found["by_sensitivity"] = pd.concat(groups, ignore_index=True)
    return found


def ln_factor_table(ref: ModelRef, bits: tuple[int, ...]) -> pd.DataFrame:
    """N_i^(k) of one input as rows (LayerNorm x position)."""
    trace = trace_one(ref, bits)
    return tables.ln_factor_table(trace.ln_factor[0], trace.ln_names)


@memo
def _tradeoff(ref: ModelRef) -> dict:
    ck = load(ref)
    values = sv.blowup.tradeoff(ck.model, ck.task, ck.n, summary=blowup_summary(ref, ck.n),
                                exact_limit=MODEL_EXACT_LIMIT)
    return {"n": ck.n, "arch": ck.arch, "d_model": ck.config.d_model, **values.to_dict()}


def zoo_tradeoff(progress: Progress = None) -> pd.DataFrame:
    """param_norm, E[Blowup^2] and the bound's right-hand side for every pretrained checkpoint."""
    entries = [e for e in zoo_entries() if e["n"] and e["n"] >= 2 and e["task"] != "?"]
    rows = []
    for i, entry in enumerate(entries):
        if progress:
            progress(i / max(len(entries), 1))
        ref = model_refs.zoo_ref(entry["stem"])
        ck = load(ref)
        if ck.task is None or not ck.task.boolean:
            continue
        values = _tradeoff(ref)
        rows.append({"file": entry["stem"], "task": entry["task"], "n": values["n"], "arch": values["arch"],
                     "d_model": values["d_model"], "accuracy": entry["accuracy"],
                     "param_norm": values["param_norm"], "blowup_mean_sq": values["blowup_mean_sq"],
                     "log_blowup_mean_sq": math.log(values["blowup_mean_sq"]), "bound_rhs": values["bound_rhs"]})
    if progress:
        progress(1.0)
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- Landscape


def paper_rho(ref: ModelRef) -> float:
    """The radius of the paper's sharpness (`sensviz.measure.sharpness_radius`: 0.02 sqrt(P), the
    typical |Delta| of its proxy's noise; P: parameters without positional encodings)."""
    return sharpness_radius(load(ref).model, SETTINGS)


def _dataset(ref: ModelRef, n: int, inputs: int, seed: int):
    ck = load(ref)
    bits, exact = sv.cube.measurement_inputs(n, inputs, seed)
    targets = losses.targets(ck.task, bits, ck.encoding) if ck.task is not None else None
    return bits, targets, exact


SYMMETRY_QUANTITIES = ("blowup", "sharpness", "limit", "proxy", "adaptive", "orbit")
"""What the Landscape page redraws before and after a function-preserving change (`symmetry_change`)."""


@memo
def symmetry_change(ref: ModelRef, n: int, kappa: float, rho: float, directions: int, inputs: int, seed: int):
    """Every sharpness measure, the parameter norm and the Blowup of the model and of a copy changed by a
    random function-preserving map (`sensviz.symmetries.EXACT`, factors' condition number <= kappa, seeded),
    with the same directions: (table with rows quantity, before, after, after / before; the outputs'
    largest change max_x |T'(x) - T(x)| on the inputs, in the model's dtype)."""
    ck = load(ref)
    changed = symmetries.apply(ck.model, symmetries.EXACT, kappa, seed, n=n)
    settings = dataclasses.replace(SETTINGS, rho=rho, directions=directions, measure_inputs=inputs, measure_seed=seed)
    found = [columns(measure(m, ck.task, n, settings, SYMMETRY_QUANTITIES, ck.encoding)) for m in (ck.model, changed)]
    names = ("param_norm", "blowup_mean", "sharpness", "sharpness_limit", "sharpness_proxy", "adaptive_sharpness",
             "orbit_sharpness")
    table = pd.DataFrame([{"quantity": k, "before": found[0][k], "after": found[1][k],
                           "after / before": found[1][k] / found[0][k] if found[0][k] else float("nan")}
                          for k in names if k in found[0] and k in found[1]])
    bits, _ = sv.cube.measurement_inputs(n, inputs, seed)
    with torch.no_grad():
        change = (changed(bits) - ck.model(bits)).abs().max().item()
    return table, change


@memo
def sharpness(ref: ModelRef, n: int, rho: float, directions: int, inputs: int, seed: int):
    """The paper's L_rho with its stderr and its exact small-rho limit (lim L_rho / rho^2), over
    the cube or a seeded sample (`sensviz.measure`): (Sharpness with its limit, the inputs are the
    whole cube, number of inputs)."""
    ck = load(ref)
    settings = dataclasses.replace(SETTINGS, rho=rho, directions=directions, measure_inputs=inputs, measure_seed=seed)
    found = measure(ck.model, ck.task, n, settings, ("sharpness", "limit"), ck.encoding)
    result = dataclasses.replace(found.sharpness, limit=found.limit.value if found.limit else None)
    return result, found.inputs["kind"] == "cube", found.inputs["n_inputs"]


@memo
def proxy(ref: ModelRef, n: int, inputs: int, seed: int):
    """The paper's sharpness proxy E[L(θ+Δ) − L(θ)], Δ Gaussian of `proxy_eps` per parameter, over the cube or a
    seeded sample (`sensviz.measure`), and its factor to the ±1 scale of the paper's plots (`tasks.pm1_factor`)."""
    ck = load(ref)
    settings = dataclasses.replace(SETTINGS, measure_inputs=inputs, measure_seed=seed)
    return measure(ck.model, ck.task, n, settings, ("proxy",), ck.encoding).proxy, sv.tasks.pm1_factor(ck.encoding)


def sharpness_table(result) -> pd.DataFrame:
    """L_rho with its error bar beside the first-order prediction rho^2 * lim L_rho / rho^2, as rows
    (a quantity that is missing or not finite for this model, e.g. a diverged one, is left out)."""
    rows = [{"quantity": f"L_ρ measured ({result.n_directions} directions)", "value": result.value,
             "low": result.value - result.stderr, "high": result.value + result.stderr,
             "label": f"{result.value:.4g} ± {result.stderr:.2g}"}]
    if result.limit is not None:
        first_order = result.limit * result.rho**2
        rows.append({"quantity": "ρ² × exact small-ρ limit", "value": first_order, "low": first_order,
                     "high": first_order, "label": f"{first_order:.4g} (exact)"})
    table = pd.DataFrame(rows)
    return table[np.isfinite(table[["value", "low", "high"]]).all(axis=1)]


@memo
def sharpness_curve(ref: ModelRef, n: int, directions: int, inputs: int, seed: int) -> pd.DataFrame:
    """L_rho / rho^2 over rho = 1e-3 .. 1 and the paper's radius, beside the exact limit."""
    bits, _, _ = _dataset(ref, n, inputs, seed)
    rhos = sorted({*(10 ** (e / 2) for e in range(-6, 1)), paper_rho(ref)})
    return sv.sharpness.sharpness_curve(load(ref).model, bits, rhos, directions, seed)


@memo
def loss_slice(ref: ModelRef, n: int, dims: int, normalization: str, skip_bias_ln: bool, hessian: bool, span: float,
               steps: int, inputs: int, seed: int) -> pd.DataFrame:
    """A 1-D or 2-D slice of the loss through the checkpoint (random or Hessian directions)."""
    ck = load(ref)
    bits, targets, _ = _dataset(ref, n, inputs, seed)
    loss = losses.loss_for(ck.encoding)
    if hessian:
        directions = sv.slices.hessian_directions(ck.model, bits, targets, loss, count=dims, seed=seed)
    else:
        directions = sv.slices.random_directions(ck.model, dims, normalization, skip_bias_ln, seed)
    return sv.slices.loss_slice(ck.model, bits, targets, directions, loss, ck.encoding, span=span, steps=steps)


@memo
def contours(ref: ModelRef, n: int, normalization: str, skip_bias_ln: bool, hessian: bool, span: float, steps: int,
             inputs: int, seed: int, levels: int = 8) -> pd.DataFrame:
    """Contour segments of a 2-D slice."""
    plane = loss_slice(ref, n, 2, normalization, skip_bias_ln, hessian, span, steps, inputs, seed)
    return sv.slices.contour_segments(plane, "loss", levels)


@memo
def hessian_top(ref: ModelRef, n: int, k: int, inputs: int, seed: int) -> pd.DataFrame:
    """The k largest eigenvalues of the loss Hessian (Lanczos) with their residuals."""
    ck = load(ref)
    bits, targets, _ = _dataset(ref, n, inputs, seed)
    eigen = sv.curvature.top_eigenvalues(ck.model, bits, targets, losses.loss_for(ck.encoding), k=k, seed=seed)
    return pd.DataFrame({"k": range(1, k + 1), "eigenvalue": eigen.values.numpy(),
                         "residual": eigen.residuals.numpy(), "converged": eigen.converged})


@memo
def line_between(ref: ModelRef, other: ModelRef, n: int, inputs: int, seed: int) -> pd.DataFrame:
    """The loss on the straight line from one checkpoint (alpha=0) to another (alpha=1)."""
    ck = load(ref)
    bits, targets, _ = _dataset(ref, n, inputs, seed)
    alphas = torch.linspace(-0.25, 1.25, 31, dtype=torch.float64)
    direction = sv.slices.line_direction(ck.model, load(other).model)
    return sv.slices.loss_slice(ck.model, bits, targets, direction, losses.loss_for(ck.encoding), ck.encoding,
                                alphas=alphas)


# ----------------------------------------------------------------------------- Experiments


def shipped_results() -> dict[str, dict[str, str]]:
    """The shipped sweep folders, `{scale: {experiment: folder}}`, in the report's order (scales
    quick, standard, paper first; experiments in the order of `sensviz.experiments.EXPERIMENTS`)."""
    try:
        folders = report.sweep_folders(services.results_dir())
    except ValueError:  # no results there
        return {}
    found: dict[str, dict[str, str]] = {}
    for folder in folders:
        found.setdefault(folder.parent.name, {})[folder.name] = str(folder)
    return found


def _results_mtime(folder: Path) -> float:
    return max(p.stat().st_mtime for p in folder.glob("*.parquet"))


@memo
def _read_results(folder: str, mtime: float):
    return sweeps.read_results(folder)


def experiment_results(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """A sweep folder's runs table, history table and spec (a folder `services.sweep_folder` let
    through); the cache is renewed when its tables change (a sweep still running, or resumed).
    ValueError, naming no path, when its tables cannot be read."""
    try:
        return _read_results(str(folder), _results_mtime(folder))
    except (OSError, ValueError) as err:
        raise ValueError(f"this sweep folder's tables cannot be read ({type(err).__name__})") from None


# ----------------------------------------------------------------------------- training


def training_tables(records: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A training run's measurements as tidy tables: every metric over the steps, and the
    Fourier degree profile over the steps."""
    return tables.training_table(records), tables.degree_history_table(records)


# ----------------------------------------------------------------------------- Lab


def _lab_sources() -> sv.lab.Sources:
    return sv.lab.Sources(lambda name: load(model_refs.zoo_ref(name)), services.checkpoint_dir(), services.results_dir())


def _lab_stamp(number: int) -> tuple:
    """What a chapter's data depends on, cheaply: each file's size and modification time (the data file's too);
    `sensviz.lab.data` compares the sha256 of the files themselves when the stamp is new."""
    from sensviz import lab

    paths = [*lab.chapter(number).inputs(_lab_sources()).values(), services.checkpoint_dir() / lab.DATA_FILE]
    return tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) if p.exists() else (str(p), None, None) for p in paths)


@memo
def _lab_data(number: int, stamp: tuple, progress=None):
    from sensviz import lab

    return lab.data(lab.chapter(number), _lab_sources(), progress)


@memo
def _lab_built(number: int, choice, stamp: tuple, yours: tuple[ModelRef, ...] = (), progress=None) -> sv.lab.Built:
    from sensviz import lab

    data = _lab_data(number, stamp, progress)
    if yours:  # chapter 5: the student's models join the chart as points
        return lab.chapter(number).present(data, choice, pd.DataFrame([lab_point(ref) for ref in yours]))
    return lab.chapter(number).present(data, choice)


def lab_chapter(number: int, choice, yours: tuple[ModelRef, ...] = (), progress=None) -> sv.lab.Built:
    """A Lab chapter for one choice of its control: drawn from the data shipped beside the zoo
    (`sensviz lab-data`), measured on demand when that is missing or stale (`progress` says what is measured)."""
    return _lab_built(number, choice, _lab_stamp(number), yours, progress)


def vega_lite(chart) -> dict:
    """An Altair chart converted as `st.altair_chart` converts it (Streamlit's own function: its data as
    Arrow), for `st.vega_lite_chart(spec, theme=None)`, which draws it without converting again. The
    conversion (Altair's validation, the data to Arrow) was most of a cached Lab render."""
    from streamlit.elements.vega_charts import _convert_altair_to_vega_lite_spec  # noqa: PLC2701 (pinned 1.67)

    return _convert_altair_to_vega_lite_spec(chart)


def spec(chart_fn: Callable, *args, **kwargs) -> dict:
    """`chart_fn(*args, **kwargs)` (a chart function: `sensviz.charts`, the class chart) as a Vega-Lite spec
    (`vega_lite`), built and converted once for every session, keyed by the function and its arguments, each
    table by its content (`_content`): the Sensitivity page converted its five charts on every view and the
    Class page its chart per member, a third of the server's CPU while a class browsed them (py-spy over
    `benchmarks/class_mode.py`)."""
    key = ("spec", f"{chart_fn.__module__}.{chart_fn.__qualname__}", *(_content(a) for a in args),
           *((name, _content(value)) for name, value in sorted(kwargs.items())))
    return keyed(key, lambda: vega_lite(chart_fn(*args, **kwargs)))


def _content(value):
    """A hashable stand-in for a chart argument: a table by its columns, dtypes and a sha256 of its rows
    (pandas' per-row hash, index included), a dict by its items, anything else as it is."""
    if isinstance(value, pd.DataFrame):
        rows = pd.util.hash_pandas_object(value, index=True).to_numpy().tobytes()
        return "table", tuple(value.columns), tuple(map(str, value.dtypes)), hashlib.sha256(rows).hexdigest()
    if isinstance(value, dict):
        return "dict", tuple((k, _content(v)) for k, v in value.items())
    return value


@memo
def _lab_specs(number: int, choice, stamp: tuple, yours: tuple[ModelRef, ...], blind: bool, progress=None) -> tuple:
    figures = _lab_built(number, choice, stamp, yours, progress).figures
    if blind:
        return tuple(None if f.blind is None else vega_lite(f.blind) for f in figures)
    return tuple(vega_lite(f.chart) for f in figures)


def lab_specs(number: int, choice, yours: tuple[ModelRef, ...] = (), blind: bool = False, progress=None) -> tuple:
    """`lab_chapter`'s figures as Vega-Lite specs (`vega_lite`), their charts or (`blind`) their blind
    charts (None where a figure has none), converted once per chapter view for every session."""
    return _lab_specs(number, choice, _lab_stamp(number), yours, blind, progress)


def lab_your_run(choice, records: list[dict]):
    """Chapter 2's curves with the student's own run (its records so far) over the zoo's; not cached (it grows)."""
    from sensviz import lab  # noqa: F401  (sv.lab)

    return sv.lab.your_run(_lab_data(2, _lab_stamp(2)), choice, records)


@memo
def lab_point(ref: ModelRef) -> dict:
    """A model of the student's own as a point of the Lab's length-scaling chart (its sharpness proxy)."""
    from sensviz import lab

    return lab.zoo_point(load(ref), f"your model ({ref.label})")


@memo
def lab_handout(answers: bool, url: str | None) -> bytes:
    """The whole Lab as one offline HTML page (`sensviz lab`), its links to `url` (None: paths only)."""
    from sensviz import handout

    return handout.handout(_lab_sources(), answers, url).encode()
