"""Fit the live-job budget's elementwise costs (`server.budget.FORWARD` and `TRAINING`) on this machine.

Measures, on one torch thread in CPU seconds, forward passes without gradients (`training_outputs` under
no_grad, the best of 3) and training steps (`sensviz.training.train` of 9 steps less 1 step, over 8, the
best of 2: data, loss, backward and AdamW included) of one-layer encoders over a grid of widths, heads,
lengths and batches. With this machine's calibration (`budget.calibrate`) and the model's ops and matmul
flops held as they are, it fits each pass's `PassCost` (width, score, spill, head) by least squares on
the relative error, and prints, per pass, the fitted costs beside the module's and the range of
estimate / measured over the grid for both.

    python benchmarks/budget_fit.py            # the full grid: 90 forwards and 90 steps, minutes
    python benchmarks/budget_fit.py --quick    # 8 of each (a smoke run)

Copy fitted values into `server/budget.py` rounded; tests/server/test_budget.py then checks whole jobs.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small grid (a smoke run)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    grid = QUICK if args.quick else FULL
    calibration = budget.calibrate()
    print(f"calibration: op_s {calibration.op_s:.3g}, flop_s {calibration.flop_s:.3g}", file=sys.stderr)
    print("| pass | costs | width | score | spill | head | estimate / measured (min, median, max) |")
    print("|---|---|---|---|---|---|---|")
    for name, batches, seconds, current in (("forward", FORWARD_BATCHES, forward_seconds, budget.FORWARD),
                                            ("training step", STEP_BATCHES, step_seconds, budget.TRAINING)):
        rows = measure(grid, batches, seconds)
        fitted, fixed = fit(rows, calibration, training=name != "forward")
        for label, cost in (("the module's", current), ("fitted", fitted)):
            r = ratios(rows, cost, fixed, calibration)
            print(f"| {name} ({len(rows)}) | {label} | {cost.width:,.0f} | {cost.score:,.0f} | {cost.spill:,.0f} | "
                  f"{cost.head:,.0f} | {r.min():.2f}, {np.median(r):.2f}, {r.max():.2f} |", flush=True)


if __name__ == "__main__":
    main()
