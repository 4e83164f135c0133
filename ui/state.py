"""The explorer's one link to Streamlit state: session-state keys, the model registry, and every
cache wrapper around the `sensviz` core.

Models are identified by `ModelRef`: where the model came from (zoo file, upload, trained in this
session), the sha256 of its checkpoint bytes, and the loading overrides. Loaded checkpoints are
`st.cache_resource` (read-only, shared by all sessions; never trained in place).

Computed results live in one `st.cache_resource`-held LRU store keyed by the `ModelRef` and
plain parameters, so a second visit with the same model and settings is immediate. (Not
`st.cache_data`: it records every element a cached function touches and fails to replay a
progress bar created outside it, and long computations here report progress through a callback.)
Values in the store are shared between sessions: callers must not modify them.
"""

from __future__ import annotations

import hashlib
import math
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd
import streamlit as st
import torch

import sensviz as sv
from sensviz import analysis, figures, losses, report, sweeps, tables
from sensviz.checkpoints import SIZE_CAP, read_metadata

ROOT = Path(__file__).resolve().parents[1]


def checkpoint_dir() -> Path:
    """Where pretrained checkpoints are listed from: checkpoints/, or $SENSVIZ_CHECKPOINT_DIR."""
    return Path(os.environ.get("SENSVIZ_CHECKPOINT_DIR", ROOT / "checkpoints"))

UPLOAD_CAP_MB = SIZE_CAP // 2**20
"""Upload size cap; `.streamlit/config.toml` sets `server.maxUploadSize` to the same value."""
MODEL_EXACT_LIMIT = 14
"""Largest n the explorer analyses a model exactly (2**14 forward passes); sampled above."""
DEFAULT_SAMPLES = 2048

# Session-state keys (every key the app uses is defined here).
SELECTED = "sv_selected"  # ModelRef of the selected model, or absent
TRAINED = "sv_trained"  # {name: checkpoint bytes} of models trained in this session
UPLOADED = "sv_uploaded"  # {digest: checkpoint bytes} of uploaded files
ANALYSIS_N = "sv_analysis_n"  # {ModelRef: input length chosen for analysis}
SOURCE = "sv_source"  # which model source the sidebar shows
TRAIN_RUN = "sv_train_run"  # the Train page's current or last run: name, records, weights, status
SHOW_SOURCE = "sv_show_source"  # a model source the sidebar switches to on its next run


@dataclass(frozen=True)
class ModelRef:
    """Which model, identified by content: `kind` is "zoo", "upload" or "trained"."""

    kind: str
    name: str
    digest: str
    n_heads: int | None = None
    task: str | None = None
    n: int | None = None

    @property
    def label(self) -> str:
        return f"{self.name} ({self.kind})"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ----------------------------------------------------------------------------- the registry


@st.cache_data(show_spinner=False)
def zoo_entries(folder: str, mtime: float) -> list[dict]:
    """Metadata of every checkpoint in `folder` (header only), sorted by file name; `mtime` (the
    newest file's modification time) renews the cache when files change."""
    entries = []
    for path in sorted(Path(folder).glob("*.safetensors")):
        try:
            meta = read_metadata(path)
        except sv.CheckpointError:
            continue
        config = meta.get("config", {})
        task = meta.get("task")
        entries.append(
            {
                "file": path.name,
                "arch": meta.get("arch", "encoder"),
                "task": sv.tasks.task_from_spec(task).label if task else "?",
                "n": int(meta["n"]) if "n" in meta else None,
                "d_model": config.get("d_model"),
                "n_layers": config.get("n_layers"),
                "n_heads": config.get("n_heads"),
                "accuracy": (meta.get("training") or {}).get("final_accuracy"),
            }
        )
    return entries


def list_zoo() -> list[dict]:
    folder = checkpoint_dir()
    mtime = max((p.stat().st_mtime for p in folder.glob("*.safetensors")), default=0.0)
    return zoo_entries(str(folder), mtime)


def zoo_ref(file: str) -> ModelRef:
    data = (checkpoint_dir() / file).read_bytes()
    return ModelRef("zoo", file, digest(data))


def register_upload(name: str, data: bytes, n_heads: int | None, task: str | None, n: int | None) -> ModelRef:
    """Keep an uploaded file's bytes in the session and return its reference (not yet validated)."""
    key = digest(data)
    st.session_state.setdefault(UPLOADED, {})[key] = data
    return ModelRef("upload", name, key, n_heads=n_heads, task=task or None, n=n)


def register_trained(name: str, data: bytes) -> ModelRef:
    """Keep a model trained in this session (its checkpoint bytes) and return its reference."""
    st.session_state.setdefault(TRAINED, {})[name] = data
    return ModelRef("trained", name, digest(data))


def trained_refs() -> list[ModelRef]:
    return [ModelRef("trained", name, digest(data)) for name, data in st.session_state.get(TRAINED, {}).items()]


def _bytes_of(ref: ModelRef) -> bytes:
    if ref.kind == "zoo":
        return (checkpoint_dir() / ref.name).read_bytes()
    if ref.kind == "upload":
        return st.session_state[UPLOADED][ref.digest]
    return st.session_state[TRAINED][ref.name]


@st.cache_resource(max_entries=32, show_spinner=False)
def _load(ref: ModelRef, _data: bytes) -> sv.Checkpoint:
    return sv.load_checkpoint(_data, n_heads=ref.n_heads, task=ref.task, n=ref.n)


def load(ref: ModelRef) -> sv.Checkpoint:
    """The loaded checkpoint (shared and read-only); raises `CheckpointError` for a bad file."""
    return _load(ref, _bytes_of(ref))


def checkpoint_bytes(ref: ModelRef) -> bytes:
    """The checkpoint file of a model, for the download button."""
    return _bytes_of(ref)


def select(ref: ModelRef, show: bool = False) -> None:
    """Make `ref` the selected model; with `show`, the sidebar also switches to its source."""
    st.session_state[SELECTED] = ref
    if show:
        st.session_state[SHOW_SOURCE] = ref.kind


def selected() -> ModelRef | None:
    return st.session_state.get(SELECTED)


def analysis_n(ref: ModelRef, ck: sv.Checkpoint) -> int:
    """The input length the pages analyse for this model (its training length by default)."""
    return st.session_state.setdefault(ANALYSIS_N, {}).get(ref, ck.n or min(8, ck.config.max_len))


def set_analysis_n(ref: ModelRef, n: int) -> None:
    st.session_state.setdefault(ANALYSIS_N, {})[ref] = n


# ----------------------------------------------------------------------------- cached computations

Progress = Callable[[float], None] | None


class _Store:
    """A thread-safe LRU mapping from keys to computed values."""

    def __init__(self, max_entries: int):
        self.max_entries = max_entries
        self.values: OrderedDict = OrderedDict()
        self.lock = threading.Lock()

    def get_or_compute(self, key, compute: Callable[[], object]):
        with self.lock:
            if key in self.values:
                self.values.move_to_end(key)
                return self.values[key]
        value = compute()  # outside the lock: other sessions keep reading
        with self.lock:
            self.values[key] = value
            while len(self.values) > self.max_entries:
                self.values.popitem(last=False)
        return value


@st.cache_resource(show_spinner=False)
def _store() -> _Store:
    return _Store(max_entries=256)


def cached(key: tuple, compute: Callable[[], object]):
    """`compute()` once per key (shared by all sessions); later calls return the stored value."""
    return _store().get_or_compute(key, compute)


def sensitivity_report(
    ref: ModelRef, ck: sv.Checkpoint, n: int, samples: int = DEFAULT_SAMPLES, seed: int = 0, progress: Progress = None
) -> analysis.SensitivityReport:
    """Model vs target on the cube at length n (exact up to MODEL_EXACT_LIMIT, sampled above)."""
    return cached(
        ("sensitivity", ref, n, samples, seed),
        lambda: analysis.sensitivity_report(
            ck.model, n, ck.task, ck.encoding, exact_limit=MODEL_EXACT_LIMIT, n_samples=samples, seed=seed,
            progress=progress,
        ),
    )


def mean_attention(ref: ModelRef, ck: sv.Checkpoint, n: int, samples: int = DEFAULT_SAMPLES, seed: int = 0,
                   progress: Progress = None):
    """Attention averaged over the cube (or a sample), by Hamming weight: (by_weight, counts, exact)."""
    return cached(
        ("mean_attention", ref, n, samples, seed),
        lambda: analysis.mean_attention(ck.model, n, exact_limit=MODEL_EXACT_LIMIT, n_samples=samples, seed=seed,
                                        progress=progress),
    )


def trace_one(ref: ModelRef, ck: sv.Checkpoint, bits: tuple[int, ...]) -> sv.Trace:
    """The trace of one input string."""

    def compute():
        with torch.inference_mode():
            return ck.model.trace(torch.tensor([bits], device=ck.model.device)).to("cpu")

    return cached(("trace", ref, bits), compute)


def summary(ref: ModelRef, ck: sv.Checkpoint, n: int, progress: Progress = None) -> dict:
    """The selected model's summary at length n: task, sizes, accuracy, as_n of model vs target,
    param_norm, mean Blowup."""
    report = sensitivity_report(ref, ck, n, progress=(lambda f: progress(f / 2)) if progress else None)
    blowup = blowup_summary(ref, ck, n, progress=(lambda f: progress(0.5 + f / 2)) if progress else None)
    c = ck.config
    return {
        "task": ck.task.label if ck.task else "unknown",
        "n": n,
        "trained_n": ck.n,
        "arch": ck.arch,
        "size": f"d={c.d_model}, L={c.n_layers}, H={c.n_heads}",
        "n_params": ck.model.n_params(),
        "accuracy": report.accuracy,
        "as_model": report.model.avg_sensitivity,
        "as_target": report.target.avg_sensitivity if report.target is not None else None,
        "param_norm": ck.model.param_norm(),
        "blowup_mean": blowup.mean,
        "exact": report.exact,
    }


def bits_of_vertex(n: int, vertex: int) -> tuple[int, ...]:
    """The bit string of a cube vertex (position 0 is the most significant bit)."""
    return tuple(sv.cube.vertex_bits(torch.tensor([vertex]), n)[0].tolist())


def vertex_of_bits(bits: tuple[int, ...]) -> int:
    return int(sv.cube.vertex_index(torch.tensor([bits]))[0])


def random_vertex(n: int, seed: int) -> int:
    """A uniformly random vertex, reproducible from the seed."""
    return vertex_of_bits(tuple(sv.cube.sample(n, 1, seed)[0].tolist()))


def attention_tables(ref: ModelRef, ck: sv.Checkpoint, bits: tuple[int, ...], flip_position: int | None):
    """Attention of one input as rows, and (with a position) its change when that bit flips."""
    trace = trace_one(ref, ck, bits)
    table = tables.attention_table(trace.attention[0], trace.attention_names)
    if flip_position is None:
        return table, None
    flipped = list(bits)
    flipped[flip_position] ^= 1
    other = trace_one(ref, ck, tuple(flipped))
    return table, tables.attention_change_table(trace.attention[0], other.attention[0], trace.attention_names)


def mean_attention_table(ref: ModelRef, ck: sv.Checkpoint, n: int, weight: int | None, progress: Progress = None):
    """Mean attention as rows, over all inputs (weight None) or inputs of one Hamming weight; and exactness."""
    average = mean_attention(ref, ck, n, progress=progress)
    values = average.overall if weight is None else average.by_weight[weight]
    return tables.attention_table(values, tuple(ck.model.attention_names())), average


GRID_LIMIT = 12
"""Largest n drawn as a cube grid (2**12 cells); larger cubes get histograms and weight views."""


def sensitivity_tables(ref: ModelRef, ck: sv.Checkpoint, n: int, progress: Progress = None) -> dict:
    """The Sensitivity page's tables: histogram, by_weight, influence, and (exact) vertices and degrees."""
    report = sensitivity_report(ref, ck, n, progress=progress)

    def compute():
        found = {
            "report": report,
            "histogram": tables.sensitivity_histogram(report),
            "by_weight": tables.by_weight_table(report),
            "influence": tables.influence_table(report),
        }
        if report.exact:
            found["degrees"] = tables.degree_table(report)
            found["vertices"] = tables.vertex_table(report, ck.encoding)
        return found

    return cached(("sensitivity_tables", ref, n), compute)


def flip_table(ref: ModelRef, ck: sv.Checkpoint, n: int, vertex: int):
    """For one vertex: each single-bit flip, the model's output there, and whether it changes."""
    return tables.flip_table(sensitivity_report(ref, ck, n), vertex, ck.encoding)


# ----------------------------------------------------------------------------- LayerNorm


def blowup_summary(ref: ModelRef, ck: sv.Checkpoint, n: int, progress: Progress = None):
    """Blowup over the cube (exact up to MODEL_EXACT_LIMIT, else sampled), with every input's N."""
    return cached(
        ("blowup", ref, n),
        lambda: sv.blowup.blowup_summary(ck.model, n, exact_limit=MODEL_EXACT_LIMIT, n_samples=DEFAULT_SAMPLES,
                                         progress=progress, keep_factors=True),
    )


def layernorm_tables(ref: ModelRef, ck: sv.Checkpoint, n: int, progress: Progress = None) -> dict:
    """The LayerNorm page's tables: per-LN statistics, distributions of N and Blowup, and (exact)
    Blowup grouped by the sensitivity of the model and of the target at the same inputs."""
    summary = blowup_summary(ref, ck, n, progress)
    report = sensitivity_report(ref, ck, n) if summary.exact else None

    def compute():
        names = tuple(row["name"] for row in summary.per_ln)
        found = {
            "summary": summary,
            "per_ln": tables.per_ln_table(summary),
            "ln_histogram": tables.ln_factor_histogram(summary.factors, names),
            "blowup_histogram": tables.blowup_histogram(summary.values),
        }
        if report is not None:
            groups = [tables.blowup_by_sensitivity(summary.values, report.model.sensitivity, "model")]
            if report.target is not None:
                groups.append(tables.blowup_by_sensitivity(summary.values, report.target.sensitivity, "target"))
            found["by_sensitivity"] = pd.concat(groups, ignore_index=True)
        return found

    return cached(("layernorm_tables", ref, n), compute)


def ln_factor_table(ref: ModelRef, ck: sv.Checkpoint, bits: tuple[int, ...]):
    """N_i^(k) of one input as rows (LayerNorm x position)."""
    trace = trace_one(ref, ck, bits)
    return tables.ln_factor_table(trace.ln_factor[0], trace.ln_names)


def zoo_tradeoff(progress: Progress = None) -> pd.DataFrame:
    """param_norm, E[Blowup^2] and the bound's right-hand side for every pretrained checkpoint."""
    entries = [e for e in list_zoo() if e["n"] and e["task"] != "?"]
    rows = []
    for i, entry in enumerate(entries):
        if progress:
            progress(i / max(len(entries), 1))
        ref = zoo_ref(entry["file"])
        ck = load(ref)
        if ck.task is None or not ck.task.boolean or ck.n < 2:
            continue
        summary = blowup_summary(ref, ck, ck.n)
        values = cached(("tradeoff", ref), lambda: sv.blowup.tradeoff(ck.model, ck.task, ck.n, summary=summary,
                                                                    exact_limit=MODEL_EXACT_LIMIT))
        rows.append({"file": entry["file"], "task": entry["task"], "n": ck.n, "arch": ck.arch,
                     "d_model": ck.config.d_model, "accuracy": entry["accuracy"],
                     "param_norm": values.param_norm, "blowup_mean_sq": values.blowup_mean_sq,
                     "log_blowup_mean_sq": math.log(values.blowup_mean_sq), "bound_rhs": values.bound_rhs})
    if progress:
        progress(1.0)
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- Landscape

LANDSCAPE_INPUTS = 512
"""Inputs of the landscape measurements: the cube when 2**n <= this, else a seeded sample."""


def _dataset(ck: sv.Checkpoint, n: int, inputs: int, seed: int):
    bits, exact = sv.cube.measurement_inputs(n, inputs, seed)
    targets = losses.targets(ck.task, bits, ck.encoding) if ck.task is not None else None
    return bits, targets, exact


def sharpness(ref: ModelRef, ck: sv.Checkpoint, n: int, rho: float, directions: int, inputs: int, seed: int):
    """The paper's L_rho with its stderr and exact small-rho limit, and whether the inputs are the cube."""
    bits, _, exact = _dataset(ck, n, inputs, seed)
    result = cached(("sharpness", ref, n, rho, directions, inputs, seed),
                    lambda: sv.sharpness.sharpness(ck.model, bits, rho, directions, seed))
    return result, exact, len(bits)


def sharpness_curve(ref: ModelRef, ck: sv.Checkpoint, n: int, directions: int, inputs: int, seed: int) -> pd.DataFrame:
    """L_rho / rho^2 over rho = 1e-3 .. 1, beside the exact limit."""
    bits, _, _ = _dataset(ck, n, inputs, seed)
    rhos = [10 ** (e / 2) for e in range(-6, 1)]
    return cached(("sharpness_curve", ref, n, directions, inputs, seed),
                  lambda: sv.sharpness.sharpness_curve(ck.model, bits, rhos, directions, seed))


def loss_slice(ref: ModelRef, ck: sv.Checkpoint, n: int, dims: int, normalization: str, skip_bias_ln: bool,
               hessian: bool, span: float, steps: int, inputs: int, seed: int) -> pd.DataFrame:
    """A 1-D or 2-D slice of the loss through the checkpoint (random or Hessian directions)."""
    bits, targets, _ = _dataset(ck, n, inputs, seed)
    loss = losses.loss_for(ck.encoding)

    def compute():
        if hessian:
            directions = sv.slices.hessian_directions(ck.model, bits, targets, loss, count=dims, seed=seed)
        else:
            directions = sv.slices.random_directions(ck.model, dims, normalization, skip_bias_ln, seed)
        return sv.slices.loss_slice(ck.model, bits, targets, directions, loss, ck.encoding, span=span, steps=steps)

    return cached(("loss_slice", ref, n, dims, normalization, skip_bias_ln, hessian, span, steps, inputs, seed), compute)


def contours(frame: pd.DataFrame, levels: int = 8) -> pd.DataFrame:
    return sv.slices.contour_segments(frame, "loss", levels)


def hessian_top(ref: ModelRef, ck: sv.Checkpoint, n: int, k: int, inputs: int, seed: int) -> pd.DataFrame:
    """The k largest eigenvalues of the loss Hessian (Lanczos) with their residuals."""
    bits, targets, _ = _dataset(ck, n, inputs, seed)

    def compute():
        eigen = sv.curvature.top_eigenvalues(ck.model, bits, targets, losses.loss_for(ck.encoding), k=k, seed=seed)
        return pd.DataFrame({"k": range(1, k + 1), "eigenvalue": eigen.values.numpy(),
                             "residual": eigen.residuals.numpy(), "converged": eigen.converged})

    return cached(("hessian_top", ref, n, k, inputs, seed), compute)


def line_between(ref: ModelRef, ck: sv.Checkpoint, other: ModelRef, other_ck: sv.Checkpoint, n: int,
                 inputs: int, seed: int) -> pd.DataFrame:
    """The loss on the straight line from one checkpoint (alpha=0) to another (alpha=1)."""
    bits, targets, _ = _dataset(ck, n, inputs, seed)
    alphas = torch.linspace(-0.25, 1.25, 31, dtype=torch.float64)

    def compute():
        direction = sv.slices.line_direction(ck.model, other_ck.model)
        return sv.slices.loss_slice(ck.model, bits, targets, direction, losses.loss_for(ck.encoding), ck.encoding,
                                    alphas=alphas)

    return cached(("line", ref, other, n, inputs, seed), compute)


def compatible_refs(ref: ModelRef, ck: sv.Checkpoint) -> list[ModelRef]:
    """Other models of the same architecture and config (zoo and this session's), for comparisons."""
    candidates = [zoo_ref(e["file"]) for e in list_zoo()] + trained_refs()
    found = []
    for other in candidates:
        if other.digest == ref.digest:
            continue
        try:
            other_ck = load(other)
        except sv.CheckpointError:
            continue
        if other_ck.arch == ck.arch and other_ck.config == ck.config:
            found.append(other)
    return found


# ----------------------------------------------------------------------------- Experiments


def results_dir() -> Path:
    """Where the shipped sweep results live: experiments/results/ (`<scale>/<experiment>/`), or $SENSVIZ_RESULTS_DIR."""
    return Path(os.environ.get("SENSVIZ_RESULTS_DIR", ROOT / "experiments" / "results"))


def shipped_results() -> dict[str, dict[str, str]]:
    """The shipped sweep folders, `{scale: {experiment: folder}}`, in the report's order (scales
    quick, standard, paper first; experiments in the order of `sensviz.experiments.EXPERIMENTS`)."""
    try:
        folders = report.sweep_folders(results_dir())
    except ValueError:  # no results there
        return {}
    found: dict[str, dict[str, str]] = {}
    for folder in folders:
        found.setdefault(folder.parent.name, {})[folder.name] = str(folder)
    return found


def _results_mtime(folder: str) -> float:
    path = Path(folder).expanduser() / "runs.parquet"
    if not path.is_file():
        raise ValueError(f"{folder}: not a sweep folder (no runs.parquet; run `sensviz sweep SPEC --out {folder}`)")
    return max(p.stat().st_mtime for p in path.parent.glob("*.parquet"))


@st.cache_data(show_spinner=False, max_entries=32)
def _read_results(folder: str, mtime: float):
    return sweeps.read_results(folder)


def experiment_results(folder: str) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """A sweep folder's runs table, history table and spec (ValueError if it is not one); the
    cache is renewed when its tables change (a sweep still running, or resumed)."""
    folder = str(Path(folder).expanduser())
    return _read_results(folder, _results_mtime(folder))


def experiment_figures(folder: str) -> list:
    """The paper-style figures of a sweep folder (`sensviz.figures.Figure`), cached per table version."""
    folder = str(Path(folder).expanduser())
    mtime = _results_mtime(folder)

    def compute():
        runs, history, spec = _read_results(folder, mtime)
        if not spec.get("experiment"):
            raise ValueError(f"{folder}: its spec.json is missing or names no experiment")
        return figures.figures(spec["experiment"], runs, history)

    return cached(("experiment_figures", folder, mtime), compute)
