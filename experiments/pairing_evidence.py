"""Why the decide scale's two arms were not paired (issue 37): the evidence, measured, printed as text.

    python experiments/pairing_evidence.py            # about a minute on 2 CPU cores

1. The decide tables: per PARITY length, the seeds whose two arms (fixed 6,000 steps; relax) recorded the same
   history (train loss, evaluation loss, parameter norm at every shared evaluation) up to the earlier stop, and
   the seeds whose arms met the convergence filter at the same step.
2. PARITY n = 14, seeds 100-103, trained again here for 50 steps as the decide scale's jobs did (four seeds in
   one vmapped run): the parameter norm at step 50 against each arm's recorded one.
3. The same seed trained alone (one model) and in a job of four: the largest weight difference after 50 steps.
4. The same job with ATen dispatched to another instruction set (`ATEN_CPU_CAPABILITY`, a fresh process): what
   another CPU computes.
5. The confirm scale's rows so far (its arms paired in one job): every seed's two arms against each other
   (`paired_rows`), up to the earlier of the two stops.

    python experiments/pairing_evidence.py --confirm    # part 5 alone (seconds)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sensviz.experiments import prepare, train_batch  # noqa: E402
from sensviz.sweeps import load_spec  # noqa: E402

TABLES = ROOT / "experiments" / "results" / "decide" / "length_scaling"
CONFIRM = ROOT / "experiments" / "running" / "confirm" / "length_scaling"
HISTORY = ["train_loss", "eval_loss", "eval_accuracy", "param_norm"]
SPEC = ROOT / "experiments" / "length_scaling.toml"
COLUMNS = ["train_loss", "eval_loss", "param_norm"]
SEEDS = (100, 101, 102, 103)
STEPS = 50


def arms(table: pd.DataFrame) -> pd.DataFrame:
    return table.assign(arm=table["relax_steps"].isna().map({True: "fixed", False: "relax"}))


def recorded_pairs() -> list[str]:
    runs, history = arms(pd.read_parquet(TABLES / "runs.parquet")), pd.read_parquet(TABLES / "history.parquet")
    lines = ["n   seeds  identical histories  first differing step  same convergence step"]
    for n, rows in runs[runs["task"] == "parity"].groupby("n"):
        same, firsts, steps_equal, seeds = 0, [], 0, 0
        for _, pair in rows.groupby("seed"):
            if len(pair) != 2:
                continue
            seeds += 1
            a, b = (history[history["run_id"] == pair[pair["arm"] == arm]["run_id"].iloc[0]].set_index("step")
                    for arm in ("fixed", "relax"))
            shared = a.index.intersection(b.index)
            x, y = a.loc[shared, COLUMNS], b.loc[shared, COLUMNS]
            differ = shared[((x != y) & ~(x.isna() & y.isna())).any(axis=1).to_numpy()]  # step 0 has no train loss
            same += len(differ) == 0
            firsts += [int(differ[0])] if len(differ) else []
            steps = pair.set_index("arm")["converged_step"]
            steps_equal += bool(steps["fixed"] == steps["relax"] or steps.isna().all())
        first = f"{min(firsts)}-{max(firsts)}" if firsts else "—"
        lines.append(f"{n:<3} {seeds:<6} {same:<20} {first:<21} {steps_equal}")
    return lines


def paired_rows(folder) -> pd.DataFrame:
    """Per seed of a paired sweep folder with both arms in (fixed: no relax_steps), the evaluations both arms
    recorded up to the earlier stop, how many of them differ in any of `HISTORY` (exactly; step 0 has no train
    loss), both convergence steps, both devices, and the step the relax arm stopped at."""
    runs, history = pd.read_parquet(Path(folder) / "runs.parquet"), pd.read_parquet(Path(folder) / "history.parquet")
    runs = arms(runs[runs["status"] == "finished"])
    rows = []
    for (task, n, seed), pair in runs.groupby(["task", "n", "seed"]):
        if set(pair["arm"]) != {"fixed", "relax"}:
            continue
        fixed, relax = (pair[pair["arm"] == arm].iloc[0] for arm in ("fixed", "relax"))
        a, b = (history[history["run_id"] == row["run_id"]].set_index("step") for row in (fixed, relax))
        stop = min(fixed["steps_trained"], relax["steps_trained"])
        shared = [step for step in a.index.intersection(b.index) if step <= stop]
        x, y = a.loc[shared, HISTORY], b.loc[shared, HISTORY]
        rows.append({"task": task, "n": int(n), "seed": int(seed), "shared": len(shared),
                     "differ": int(((x != y) & ~(x.isna() & y.isna())).any(axis=1).sum()),
                     "converged_fixed": fixed["converged_step"], "converged_relax": relax["converged_step"],
                     "relax_stop": int(relax["steps_trained"]), "same_device": fixed["device"] == relax["device"]})
    return pd.DataFrame(rows)


def job(seeds, steps: int = STEPS, relax: bool = False) -> list[torch.nn.Module]:
    """Train PARITY n = 14 seeds of the decide scale's fixed (or relax) arm together for `steps` steps."""
    spec = load_spec(SPEC, "decide")
    by_seed = {s["seed"]: s for s in spec.runs
               if s["task"] == "parity" and s["n"] == 14 and ("relax_steps" in s) == relax}
    batch = [prepare("length_scaling", by_seed[seed]) for seed in seeds]
    train_batch(batch, [replace(b.config, steps=steps) for b in batch])
    return [b.model for b in batch]


def norms_here() -> dict:
    return {seed: model.param_norm() for seed, model in zip(SEEDS, job(SEEDS))}


def recorded_norms() -> dict:
    runs, history = arms(pd.read_parquet(TABLES / "runs.parquet")), pd.read_parquet(TABLES / "history.parquet")
    found = {}
    for _, row in runs[(runs["task"] == "parity") & (runs["n"] == 14) & runs["seed"].isin(SEEDS)].iterrows():
        at = history[(history["run_id"] == row["run_id"]) & (history["step"] == STEPS)]["param_norm"]
        found[(row["arm"], int(row["seed"]))] = float(at.iloc[0])
    return found


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--norms":  # the child process of part 4
        print(json.dumps(norms_here()))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--confirm":
        found = paired_rows(CONFIRM)
        differ = int((found["differ"] > 0).sum()) if len(found) else 0
        print(f"5. The confirm rows: {len(found)} seeds with both arms in, {differ} with any differing evaluation "
              "before the earlier stop")
        print(found.to_string(index=False) if len(found) else "(none yet)")
        return
    print("1. The decide tables, PARITY: both arms of one seed")
    print("\n".join(recorded_pairs()))
    here, recorded = norms_here(), recorded_norms()
    print(f"\n2. PARITY n = 14, parameter norm at step {STEPS}, here ({torch.backends.cpu.get_cpu_capability()}) "
          "against each arm's record")
    for seed in SEEDS:
        print(f"seed {seed}: here {here[seed]!r}; fixed arm {recorded[('fixed', seed)]!r} "
              f"({'equal' if here[seed] == recorded[('fixed', seed)] else 'differs'}); relax arm "
              f"{recorded[('relax', seed)]!r} ({'equal' if here[seed] == recorded[('relax', seed)] else 'differs'})")
    alone, together = job(SEEDS[:1])[0], job(SEEDS)[0]
    gap = max((p - q).abs().max().item() for p, q in zip(alone.parameters(), together.parameters()))
    print(f"\n3. Seed {SEEDS[0]} alone against in a job of {len(SEEDS)}: largest weight difference after {STEPS} "
          f"steps {gap:.3g} (0 would be the same numbers)")
    print("\n4. The same job with ATen dispatched to another instruction set (a fresh process):")
    for capability in ("avx2", "default"):
        env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
        out = subprocess.run([sys.executable, __file__, "--norms"], env=env, capture_output=True, text=True, check=True)
        other = {int(k): v for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}
        equal = sum(other[seed] == here[seed] for seed in SEEDS)
        print(f"ATEN_CPU_CAPABILITY={capability}: {equal} of {len(SEEDS)} norms equal to this CPU's default; "
              f"seed {SEEDS[0]}: {other[SEEDS[0]]!r}")


if __name__ == "__main__":
    main()
