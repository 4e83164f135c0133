"""Tidy pandas tables of the measurements, ready to chart or to download as CSV.

One row per observation, one column per variable, named after the glossary. These reshape the
results of `sensviz.analysis` (a `SensitivityReport`, attention weights, LayerNorm factors) into
long-format frames; the numbers themselves come from the analysis.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from . import cube
from .analysis import SensitivityReport
from .tasks import TargetEncoding


def ln_label(name: str) -> str:
    """A short label of a module name: `encoders.layers.1.norm2` -> `L1.norm2`,
    `model.decoder.layers.0.multihead_attn` -> `dec0.multihead_attn`."""
    for long, short in (("model.encoder.layers.", "enc"), ("model.decoder.layers.", "dec"), ("model.encoder.", "enc."),
                        ("model.decoder.", "dec."), ("encoders.layers.", "L"), ("layers.", "L")):
        name = name.replace(long, short)
    return name


def bit_string(bits) -> str:
    """`[1, 0, 1]` -> `"101"`."""
    return "".join(str(int(b)) for b in bits)


def _functions(report: SensitivityReport) -> dict:
    """The analysed functions by label: the model, and the target when there is one."""
    found = {"model": report.model}
    if report.target is not None:
        found["target"] = report.target
    return found


def vertex_table(report: SensitivityReport, encoding: TargetEncoding) -> pd.DataFrame:
    """One row per vertex (exact reports): bits, Hamming weight, Karnaugh-map cell (row, col),
    output, its ±1 value, s(f,x) of the model, and with a task the target and the difference."""
    if not report.exact:
        raise ValueError("per-vertex tables need an exact report (n within the exact limit)")
    n = report.n
    rows, cols = cube.gray_grid(n)
    bits = cube.vertices(n)
    table = pd.DataFrame(
        {
            "vertex": np.arange(2**n),
            "bits": [bit_string(b) for b in bits.tolist()],
            "weight": bits.sum(dim=1).numpy(),
            "row": rows.numpy(),
            "col": cols.numpy(),
            "output": report.outputs.numpy(),
            "output_pm1": encoding.to_pm1(report.outputs).numpy(),
            "s_model": report.model.sensitivity.numpy(),
        }
    )
    if report.target is not None:
        table["target"] = report.targets.numpy()
        table["s_target"] = report.target.sensitivity.numpy()
        table["s_difference"] = table["s_model"] - table["s_target"]
    return table


def flip_table(report: SensitivityReport, vertex: int, encoding: TargetEncoding) -> pd.DataFrame:
    """For one vertex x: every single-bit flip x^i, the model's output there, and whether the
    model's decision (Boolean tasks) or value changes; with a task, whether the target changes."""
    if not report.exact:
        raise ValueError("flip tables need an exact report (n within the exact limit)")
    n = report.n
    neighbours = cube.neighbour(torch.full((n,), vertex), torch.arange(n), n)
    decide = encoding.decide
    table = pd.DataFrame(
        {
            "position": np.arange(n),
            "flipped_bits": [bit_string(b) for b in cube.vertex_bits(neighbours, n).tolist()],
            "output": report.outputs[neighbours].numpy(),
            "model_changes": (decide(report.outputs[neighbours]) != decide(report.outputs[vertex])).numpy(),
        }
    )
    if report.targets is not None:
        table["target_changes"] = (report.targets[neighbours] != report.targets[vertex]).numpy()
    return table


def sensitivity_histogram(report: SensitivityReport, bins: int = 20) -> pd.DataFrame:
    """Distribution of s(f,x) over the cube (or the sample): function, bin_start, bin_end, fraction.

    Integer-valued sensitivities (Boolean views) get one bin per value 0..n.
    """
    frames = []
    for label, result in _functions(report).items():
        values = result.sensitivity.numpy()
        if np.all(values == np.round(values)):
            edges = np.arange(report.n + 2) - 0.5
        else:
            edges = np.linspace(0.0, max(float(values.max()), 1e-12), bins + 1)
        counts, edges = np.histogram(values, bins=edges)
        frames.append(
            pd.DataFrame(
                {"function": label, "bin_start": edges[:-1], "bin_end": edges[1:], "fraction": counts / len(values)}
            )
        )
    return pd.concat(frames, ignore_index=True)


def by_weight_table(report: SensitivityReport) -> pd.DataFrame:
    """Mean s(f,x) over inputs of each Hamming weight: function, weight, mean_sensitivity, count."""
    frames = []
    for label, result in _functions(report).items():
        if report.exact:
            weights = cube.hamming_weight(report.n)
        else:
            weights = result.weight
        counts = torch.bincount(weights, minlength=report.n + 1).double()
        sums = torch.zeros(report.n + 1, dtype=torch.float64).index_add_(0, weights, result.sensitivity)
        frames.append(
            pd.DataFrame(
                {
                    "function": label,
                    "weight": np.arange(report.n + 1),
                    "mean_sensitivity": (sums / counts.clamp(min=1)).numpy(),
                    "count": counts.numpy().astype(int),
                }
            ).query("count > 0")
        )
    return pd.concat(frames, ignore_index=True)


def influence_table(report: SensitivityReport) -> pd.DataFrame:
    """Per-position influence Inf_i: function, position, influence (and stderr when sampled)."""
    frames = []
    for label, result in _functions(report).items():
        frame = pd.DataFrame({"function": label, "position": np.arange(report.n), "influence": result.influence.numpy()})
        if not report.exact:
            frame["stderr"] = result.influence_stderr.numpy()
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def degree_table(report: SensitivityReport) -> pd.DataFrame:
    """Fourier degree profile d_k: function, degree, weight (exact reports only)."""
    if not report.exact:
        raise ValueError("the degree profile needs an exact report (n within the exact limit)")
    return pd.concat(
        [
            pd.DataFrame({"function": label, "degree": np.arange(report.n + 1), "weight": r.degree_profile.numpy()})
            for label, r in _functions(report).items()
        ],
        ignore_index=True,
    )


def attention_table(attention: torch.Tensor, names: tuple[str, ...]) -> pd.DataFrame:
    """Attention weights `[layer, head, query, key]` as rows: layer, block (the attention module's
    short name), head, query, key, weight."""
    layers, heads, n, _ = attention.shape
    grid = np.stack(np.meshgrid(np.arange(layers), np.arange(heads), np.arange(n), np.arange(n), indexing="ij"))
    labels = np.array([f"{k}: {ln_label(name)}" for k, name in enumerate(names)])
    return pd.DataFrame(
        {
            "layer": grid[0].ravel(),
            "block": labels[grid[0].ravel()],
            "head": grid[1].ravel(),
            "query": grid[2].ravel(),
            "key": grid[3].ravel(),
            "weight": attention.detach().double().cpu().numpy().ravel(),
        }
    )


def attention_change_table(before: torch.Tensor, after: torch.Tensor, names: tuple[str, ...]) -> pd.DataFrame:
    """Attention `[layer, head, query, key]` of an input and of the input with one bit flipped:
    the rows of `attention_table` with `weight_flipped` and `change` = flipped - original."""
    table = attention_table(before, names)
    table["weight_flipped"] = after.detach().double().cpu().numpy().ravel()
    table["change"] = table["weight_flipped"] - table["weight"]
    return table


def ln_factor_table(ln_factor: torch.Tensor, ln_names: tuple[str, ...]) -> pd.DataFrame:
    """LayerNorm factors `[ln, position]` of one input as rows: ln (index), ln_name, position, ln_factor."""
    k, n = ln_factor.shape
    return pd.DataFrame(
        {
            "ln": np.repeat(np.arange(k), n),
            "ln_name": np.repeat(np.array([ln_label(name) for name in ln_names]), n),
            "position": np.tile(np.arange(n), k),
            "ln_factor": ln_factor.detach().double().cpu().numpy().ravel(),
        }
    )


def _log10_edges(values: torch.Tensor, bins: int) -> np.ndarray:
    """`bins` equal bins spanning log10 of the (positive) values."""
    logs = values.double().clamp(min=1e-300).log10()
    low, high = logs.min().item(), logs.max().item()
    return np.linspace(low, high if high > low else low + 1e-9, bins + 1)


def _log10_fractions(values: torch.Tensor, edges: np.ndarray) -> np.ndarray:
    logs = values.double().clamp(min=1e-300).log10().cpu().numpy().ravel()
    return np.histogram(logs, bins=edges)[0] / len(logs)


def ln_factor_histogram(factors: torch.Tensor, ln_names: tuple[str, ...], bins: int = 30) -> pd.DataFrame:
    """Distribution of N_i^(k) over inputs and positions, per LayerNorm, in log10 bins shared by
    all LayerNorms: ln, ln_name, log10_start, log10_end, fraction. `factors` is `[inputs, ln, position]`."""
    edges = _log10_edges(factors, bins)
    return pd.concat(
        [
            pd.DataFrame({"ln": k, "ln_name": ln_label(name), "log10_start": edges[:-1], "log10_end": edges[1:],
                          "fraction": _log10_fractions(factors[:, k], edges)})
            for k, name in enumerate(ln_names)
        ],
        ignore_index=True,
    )


def blowup_histogram(values: torch.Tensor, bins: int = 30) -> pd.DataFrame:
    """Distribution of Blowup(x) over inputs in log10 bins: log10_start, log10_end, fraction."""
    edges = _log10_edges(values, bins)
    return pd.DataFrame({"log10_start": edges[:-1], "log10_end": edges[1:], "fraction": _log10_fractions(values, edges)})


def blowup_by_sensitivity(values: torch.Tensor, sensitivity: torch.Tensor, label: str, groups: int = 12) -> pd.DataFrame:
    """Blowup(x) grouped by s(f,x) of the same inputs: function, s, count, mean, q10, median, q90.

    Integer sensitivities (Boolean functions) form one group per value; real ones are cut into
    `groups` quantile groups, labelled by their mean s.
    """
    frame = pd.DataFrame({"s": sensitivity.double().cpu().numpy(), "blowup": values.double().cpu().numpy()})
    if not np.all(frame["s"] == np.round(frame["s"])):
        bins = pd.qcut(frame["s"], q=min(groups, frame["s"].nunique()), duplicates="drop")
        frame["s"] = frame.groupby(bins, observed=True)["s"].transform("mean")
    grouped = frame.groupby("s")["blowup"]
    table = pd.DataFrame({
        "count": grouped.size(),
        "mean": grouped.mean(),
        "q10": grouped.quantile(0.1),
        "median": grouped.median(),
        "q90": grouped.quantile(0.9),
    }).reset_index()
    table.insert(0, "function", label)
    return table


def per_ln_table(summary) -> pd.DataFrame:
    """A `BlowupSummary`'s per-LayerNorm statistics: ln, ln_name, eps, mean_N, max_N, tau_mean."""
    return pd.DataFrame([
        {"ln": k, "ln_name": ln_label(row["name"]), "eps": row["eps"], "mean_N": row["mean"], "max_N": row["max"],
         "tau_mean": row["tau_mean"]}
        for k, row in enumerate(summary.per_ln)
    ])


TRAINING_METRICS = {
    "loss": "loss",
    "accuracy": "accuracy",
    "sharpness": "sharpness L_ρ",
    "log_blowup_mean": "E[log Blowup]",
    "param_norm": "‖θ‖",
    "avg_sensitivity": "as_n(model)",
}
"""Measurements of a training run shown over the steps, with their display names."""


def training_table(records: list[dict]) -> pd.DataFrame:
    """Measurement records of a run in long form: step, metric (display name), value, stderr."""
    rows = []
    for record in records:
        for key, title in TRAINING_METRICS.items():
            if record.get(key) is not None:
                rows.append({"step": record["step"], "metric": title, "value": record[key],
                             "stderr": record.get(f"{key}_stderr")})
    return pd.DataFrame(rows, columns=["step", "metric", "value", "stderr"])


def degree_history_table(records: list[dict]) -> pd.DataFrame:
    """The model's Fourier degree profile over training: step, degree, weight (exact records only)."""
    rows = [
        {"step": record["step"], "degree": k, "weight": weight}
        for record in records
        for k, weight in enumerate(record.get("degree_profile") or ())
    ]
    return pd.DataFrame(rows, columns=["step", "degree", "weight"])
