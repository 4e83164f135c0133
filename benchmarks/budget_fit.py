"""Fit the live-job budget's elementwise costs (`server.budget.FORWARD` and `TRAINING`) on this machine.

Measures, on one torch thread in CPU seconds, forward passes without gradients (`training_outputs` under
no_grad, the best of 3) and training steps (`sensviz.training.train` of 9 steps less 1 step, over 8, the
best of 2: data, loss, backward and AdamW included) of one-layer encoders over a grid of widths, heads,
lengths and batches. With the model's ops and matmul flops held as they are, it fits each pass's
`PassCost` (width, score, spill, head) by least squares on the relative error, and prints, per pass, the
fitted costs beside the module's and the range of estimate / measured over the grid for both. The
calibration's `flop_s` depends on `TRAINING` (it prices the wide reference step's elementwise work,
`budget.calibration_from`), so `TRAINING` is fitted to a fixed point: fit, calibrate from the same
reference steps with the fit, fit again; the module's rows use the module's calibration, the fitted rows
the fitted one (what the module would use with the fitted costs copied in).

    python benchmarks/budget_fit.py            # the full grid: 90 forwards and 90 steps, minutes
    python benchmarks/budget_fit.py --quick    # 16 of each (a smoke run)
    python benchmarks/budget_fit.py --memory   # the activations' memory instead: 108 runs of 3 steps

`--memory` runs 3 training steps of each model (widths 8, 32, 128; 1, 2, 8 heads; n = 8, 16, 24; batches
1,024 and 4,096; 1 or 2 layers) in a child forked from this warm process, and fits its peak resident growth
as a base plus 4 b n L (w d + s H n) bytes: with d_ff = d in the grid, `ACT_PER_WIDTH` is w less d_ff's 2
floats, and `ACT_PER_SCORE` is s. The base (what 3 steps add whatever the model) is fitted for both rows.

Copy fitted values into `server/budget.py` rounded; tests/server/test_budget.py then checks whole jobs.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import re
import sys
import time
from dataclasses import astuple
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from sensviz.models import ModelSettings  # noqa: E402
from sensviz.settings import TrainConfig  # noqa: E402
from sensviz.training import train  # noqa: E402
from server import budget  # noqa: E402

FULL = {"d": (8, 16, 32, 64, 128), "heads": (1, 2, 8), "n": (8, 16, 24)}
QUICK = {"d": (8, 64), "heads": (2, 8), "n": (8, 24)}
FORWARD_BATCHES = (256, budget.EVAL_CHUNK)  # an evaluation's chunks are EVAL_CHUNK strings
STEP_BATCHES = (256, 1024)


def forward_seconds(settings: ModelSettings, n: int, batch: int) -> float:
    model = settings.build(n).eval()
    bits = torch.randint(0, 2, (batch, n), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.training_outputs(bits)
        best = math.inf
        for _ in range(3):
            start = time.process_time()
            model.training_outputs(bits)
            best = min(best, time.process_time() - start)
    return best


def step_seconds(settings: ModelSettings, n: int, batch: int) -> float:
    def run(steps: int) -> float:
        model = settings.build(n)
        config = TrainConfig(n=n, batch_size=batch, steps=steps, eval_interval=100_000, eval_size=64, seed=0)
        start = time.process_time()
        train(model, "parity", config)
        return time.process_time() - start

    run(1)
    return (min(run(9) for _ in range(2)) - min(run(1) for _ in range(2))) / 8


def measure(grid: dict, batches, seconds) -> list[dict]:
    rows = []
    for d, heads, n, batch in itertools.product(grid["d"], grid["heads"], grid["n"], batches):
        settings = ModelSettings(d_model=d, n_layers=1, n_heads=heads)
        rows.append({"shape": budget.shape(settings, n), "n": n, "batch": batch, "seconds": seconds(settings, n, batch)})
        print(f"  d={d} H={heads} n={n} b={batch}: {rows[-1]['seconds'] * 1000:.2f} ms", file=sys.stderr, flush=True)
    return rows


def fixed_seconds(row: dict, calibration: budget.Calibration, training: bool) -> float:
    """What the fit holds fixed: the module's estimate of the pass (or step) less its elementwise work."""
    s, n, b = row["shape"], row["n"], row["batch"]
    ops, flops = budget._step(s, b, n) if training else budget._forward(s, b, n)
    elementwise = (budget.TRAINING if training else budget.FORWARD).flops(s, b, n)
    return calibration.op_s * ops + calibration.flop_s * (flops - elementwise)


def fit(rows: list[dict], calibration: budget.Calibration, training: bool) -> tuple[budget.PassCost, np.ndarray]:
    """The least-squares `PassCost` (relative error) and the fixed part of every row's estimate."""
    y = np.array([r["seconds"] for r in rows])
    fixed = np.array([fixed_seconds(r, calibration, training) for r in rows])
    terms = np.array([budget.elementwise_terms(r["shape"], r["batch"], r["n"]) for r in rows]) * calibration.flop_s
    found, *_ = np.linalg.lstsq(terms / y[:, None], (y - fixed) / y, rcond=None)
    return budget.PassCost(*(float(v) for v in found)), fixed


def ratios(rows: list[dict], cost: budget.PassCost, fixed: np.ndarray, calibration: budget.Calibration) -> np.ndarray:
    estimate = fixed + np.array([calibration.flop_s * cost.flops(r["shape"], r["batch"], r["n"]) for r in rows])
    return estimate / np.array([r["seconds"] for r in rows])


MEMORY_GRID = {"d": (8, 32, 128), "heads": (1, 2, 8), "n": (8, 16, 24), "batch": (1024, 4096), "layers": (1, 2)}
QUICK_MEMORY_GRID = {"d": (8, 128), "heads": (2, 8), "n": (8, 24), "batch": (1024,), "layers": (1,)}


def _status_bytes(key: str) -> int:
    return int(re.search(rf"^{key}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M).group(1)) * 1024


def step_growth(settings: ModelSettings, n: int, batch: int) -> int:
    """Peak resident growth (bytes) of 3 training steps, in a child forked from this warm process."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        model = settings.build(n)
        config = TrainConfig(n=n, batch_size=batch, steps=3, eval_interval=100_000, eval_size=64, seed=0)
        Path("/proc/self/clear_refs").write_text("5")  # the peak starts afresh from the resident memory now
        before = _status_bytes("VmRSS")
        train(model, "parity", config)
        os.write(write, str(_status_bytes("VmHWM") - before).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        found = int(answer.read())
    os.waitpid(pid, 0)
    return found


def fit_memory(quick: bool) -> None:
    """The activations' floats per width unit and per score, fitted and the module's, with their ranges."""
    grid = QUICK_MEMORY_GRID if quick else MEMORY_GRID
    train(ModelSettings(d_model=8, n_layers=1, n_heads=2).build(4), "parity", TrainConfig(n=4, steps=2, batch_size=16))
    rows = []
    for d, heads, n, batch, layers in itertools.product(*grid.values()):
        settings = ModelSettings(d_model=d, n_layers=layers, n_heads=heads)
        rows.append({"shape": budget.shape(settings, n), "n": n, "batch": batch, "growth": step_growth(settings, n, batch)})
        print(f"  d={d} H={heads} n={n} b={batch} L={layers}: {rows[-1]['growth'] / budget.MiB:.0f} MiB", file=sys.stderr,
              flush=True)
    y = np.array([r["growth"] for r in rows], float)
    tokens = np.array([4.0 * r["batch"] * r["n"] * r["shape"].layers for r in rows])
    width = tokens * np.array([r["shape"].d_model for r in rows])
    scores = tokens * np.array([r["shape"].heads * r["n"] for r in rows])
    (base, w, per_score), *_ = np.linalg.lstsq(np.stack([np.ones_like(y), width, scores], 1) / y[:, None],
                                               np.ones_like(y), rcond=None)
    module = np.array([budget._activation_bytes(r["shape"], r["batch"], r["n"], saved=True) for r in rows])
    module_base = np.median(y - module)
    print("| activations | base (MiB) | ACT_PER_WIDTH | ACT_PER_SCORE | estimate / measured (min, median, max) |")
    print("|---|---|---|---|---|")
    for label, found, b, a_w, a_s in (("the module's", module + module_base, module_base, budget.ACT_PER_WIDTH,
                                        budget.ACT_PER_SCORE),
                                       ("fitted", base + w * width + per_score * scores, base, w - 2, per_score)):
        r = found / y
        print(f"| {label} ({len(rows)}) | {b / budget.MiB:.0f} | {a_w:.1f} | {a_s:.1f} | "
              f"{r.min():.2f}, {np.median(r):.2f}, {r.max():.2f} |")


def consistent_fit(rows: list[dict], reference: tuple[float, float]) -> tuple[budget.PassCost, budget.Calibration]:
    """`TRAINING`'s fit and the calibration it implies, iterated until the costs move by under 0.5 %."""
    cost = budget.TRAINING
    for _ in range(20):
        calibration = budget.calibration_from(*reference, training=cost)
        fitted, _ = fit(rows, calibration, training=True)
        settled = all(abs(new - old) <= 0.005 * abs(old) for new, old in zip(astuple(fitted), astuple(cost)))
        cost = fitted
        if settled:
            break
    return cost, budget.calibration_from(*reference, training=cost)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small grid (a smoke run)")
    parser.add_argument("--memory", action="store_true", help="fit the activations' memory instead of the time")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.memory:
        fit_memory(args.quick)
        return
    grid = QUICK if args.quick else FULL
    reference = budget.reference_seconds()
    module = budget.calibration_from(*reference)
    steps = measure(grid, STEP_BATCHES, step_seconds)
    training, fitted_calibration = consistent_fit(steps, reference)
    forwards = measure(grid, FORWARD_BATCHES, forward_seconds)
    forward, _ = fit(forwards, fitted_calibration, training=False)
    for label, calibration in (("the module's", module), ("fitted", fitted_calibration)):
        print(f"{label} calibration: op_s {calibration.op_s:.3g}, flop_s {calibration.flop_s:.3g}", file=sys.stderr)
    print("| pass | costs | width | score | spill | head | estimate / measured (min, median, max) |")
    print("|---|---|---|---|---|---|---|")
    for name, rows, current, fitted in (("forward", forwards, budget.FORWARD, forward),
                                        ("training step", steps, budget.TRAINING, training)):
        for label, cost, calibration in (("the module's", current, module), ("fitted", fitted, fitted_calibration)):
            fixed = np.array([fixed_seconds(r, calibration, name != "forward") for r in rows])
            r = ratios(rows, cost, fixed, calibration)
            print(f"| {name} ({len(rows)}) | {label} | {cost.width:,.0f} | {cost.score:,.0f} | {cost.spill:,.0f} | "
                  f"{cost.head:,.0f} | {r.min():.2f}, {np.median(r):.2f}, {r.max():.2f} |", flush=True)


if __name__ == "__main__":
    main()
