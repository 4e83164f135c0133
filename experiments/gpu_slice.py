"""A paper-width slice of L1 for one GPU (issue 37): PARITY's sharpness against n at the authors' width, learning
rate and batch, on as many lengths and seeds as fit in the time given (12 minutes of one H100, start-up included).

    python experiments/gpu_slice.py                          # on cuda, 540 s of sweep (a 600 s command)
    python experiments/gpu_slice.py --device cpu --steps 2 --budget-s 60 --out /tmp/slice   # the CPU check

Every constant below is the authors' (lacoco-lab/sensitivity-hardness, `conf/train_config.yaml` and
`sweeps/length_scaling_1.yaml`, the configuration of their Fig. 1). The runs are a sweep
(`sensviz.sweeps.run_sweep`, experiment `length_scaling`) into `--out`: one job is `BATCH_MODELS` seeds at one n
trained together; jobs go seed block by seed block, each block over the lengths in `spread` order (the ends
first, then the middle), so a slice cut short by its deadline still spans the range of n. No job starts that
would end after the deadline (as long as the longest so far). Every row records its device (`device`), and a
folder whose rows were computed on another kind of device is refused (`sweeps.check_device`): an arm does not
mix devices. `python -m sensviz decide`-style analysis: the OLS slope of the proxy in n over the kept runs
(`--analyse`), as L1's primary.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sensviz import experiments, stats, sweeps  # noqa: E402
from sensviz.fidelity import _kept_by  # noqa: E402

D_MODEL = 128  # conf/train_config.yaml, model.hidden_dim
N_LAYERS = 2  # model.num_layers
N_HEADS = 2  # model.num_attn_heads
BATCH_SIZE = 1024  # training.batch_size
STEPS = 10_000  # training.num_steps
LR = 3e-4  # training.lr (and training.optimizer.lr)
WEIGHT_DECAY = 0.1  # training.optimizer.weight_decay (torch.optim.AdamW)
PROXY_EPS = 0.02  # measurements.hessian_norm_proxy.epsilon
PROXY_DRAWS = 10  # measurements.hessian_norm_proxy.n_repeats
LENGTHS = tuple(range(4, 31))  # sweeps/length_scaling_1.yaml, basic.max_len: min 4, max 30
SEEDS_PER_LENGTH = 10  # sweeps/length_scaling_1.yaml, basic.random_state: min 0, max 9 (ours: FIRST_SEED and up)

FIRST_SEED = 2000  # new seeds, disjoint from every shipped scale's
BATCH_MODELS = 8  # models per vmapped run at d = 128, batch 1024 (the paper scale's; memory)
EVAL_INTERVAL = 500
BUDGET_S = 540  # of the 12 device minutes: about 2 for the machine's start and imports, 10 for one command
OUT = ROOT / "experiments" / "running" / "gpu_slice" / "length_scaling"


def spread(lengths) -> list[int]:
    """The lengths in an order that covers their range early: both ends, then repeatedly the midpoint of the
    widest gap left."""
    lengths = sorted(lengths)
    chosen = [lengths[0], lengths[-1]] if len(lengths) > 1 else list(lengths)
    while len(chosen) < len(lengths):
        inside = sorted(chosen)
        gaps = [(b - a, a, b) for a, b in zip(inside, inside[1:])]
        _, a, b = max(gaps)
        middle = min((n for n in lengths if n not in chosen), key=lambda n: (abs(n - (a + b) / 2), n))
        chosen.append(middle)
    return chosen


def runs(device: str, steps: int, lengths, seeds: int, batch_models: int) -> list[dict]:
    """Every run of the slice, in the order its jobs go: seed block by seed block, each over `spread(lengths)`."""
    found = []
    for block in range(0, seeds, batch_models):
        for n in spread(lengths):
            for seed in range(FIRST_SEED + block, FIRST_SEED + min(block + batch_models, seeds)):
                found.append({"task": "parity", "n": n, "seed": seed, "d_model": D_MODEL, "n_layers": N_LAYERS,
                              "n_heads": N_HEADS, "batch_size": BATCH_SIZE, "steps": steps, "lr": LR,
                              "weight_decay": WEIGHT_DECAY, "eval_interval": min(EVAL_INTERVAL, steps),
                              "proxy_eps": PROXY_EPS, "proxy_draws": PROXY_DRAWS, "batch_models": batch_models,
                              "device": device})
    return found


def slice_spec(plan: list[dict]) -> sweeps.SweepSpec:
    return sweeps.SweepSpec("length_scaling", plan, name="gpu_slice", scale="gpu_slice",
                            description="L1 at the authors' width, learning rate and batch (experiments/gpu_slice.py)")


def run(device: str, steps: int, budget_s: float, out: Path, lengths=LENGTHS, seeds: int = SEEDS_PER_LENGTH,
        batch_models: int = BATCH_MODELS, log=sys.stderr):
    """Run the slice into `out` until every run is in or the budget is spent; returns the runs table."""
    start = time.monotonic()
    plan = runs(device, steps, lengths, seeds, batch_models)
    place = {sweeps.run_id(s): i for i, s in enumerate(plan)}
    label = experiments.device_label(torch.device(device))
    return sweeps.run_sweep(slice_spec(plan), out, experiments.run_job, batch=("seed",), log=log,
                            order=lambda s: (place[sweeps.run_id(s)],), deadline=start + budget_s, device=label)


def analyse(out: Path) -> dict:
    """L1's primary on the slice: the OLS slope of the proxy (±1 scale) in n over the kept runs."""
    table, _, _ = sweeps.read_results(out)
    done = table[table["status"] == "finished"]
    kept = done[_kept_by(done, "converged")]
    found = {"rows": len(table), "finished": len(done), "kept": len(kept),
             "devices": sorted(set(table["device"].dropna())) if "device" in table else [],
             "lengths": sorted(int(n) for n in kept["n"].unique())}
    try:
        iv = stats.slope(kept["n"], kept["sharpness_proxy_pm1"])
        found.update(slope=iv.estimate, low=iv.low, high=iv.high, test=iv.test, verdict=stats.verdict(iv, 1))
    except (ValueError, KeyError) as err:
        found["slope"] = f"none: {err}"
    return found


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--budget-s", type=float, default=BUDGET_S)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--seeds", type=int, default=SEEDS_PER_LENGTH)
    parser.add_argument("--batch-models", type=int, default=BATCH_MODELS)
    args = parser.parse_args(argv)
    run(args.device, args.steps, args.budget_s, args.out, args.lengths, args.seeds, args.batch_models)
    print(json.dumps(analyse(args.out), default=float))


if __name__ == "__main__":
    main()
