"""A tiny job function for sweep-machinery tests (importable by spawned worker processes)."""

import json
from pathlib import Path


def toy_job(experiment: str, runs: list[dict], out: str) -> list[dict]:
    calls = Path(out) / "calls.jsonl"
    with calls.open("a") as f:
        f.write(json.dumps([r.get("seed") for r in runs]) + "\n")
    if any(r.get("crash") for r in runs):
        raise RuntimeError("the whole job crashed")
    if any(r.get("interrupt") for r in runs):
        raise KeyboardInterrupt  # as Ctrl-C in the middle of a sweep
    results = []
    for r in runs:
        if r.get("fail"):
            results.append({"error": f"run with n={r['n']} failed on purpose"})
        else:
            history = [{"step": s, "loss": 1.0 / (s + 1)} for s in range(3)]
            results.append({"metrics": {"value": r["n"] * 10 + r.get("seed", 0)}, "history": history})
    return results


def slow_job(experiment: str, runs: list[dict], out: str) -> list[dict]:
    """`toy_job` after `sleep` seconds per run; first appends this process's id to `pids.txt`."""
    import os
    import time

    with (Path(out) / "pids.txt").open("a") as f:
        f.write(f"{os.getpid()}\n")
    time.sleep(sum(r.get("sleep", 0) for r in runs))
    return toy_job(experiment, runs, out)


def busy_job(experiment: str, runs: list[dict], out: str) -> list[dict]:
    """`toy_job` after `busy` seconds of CPU time per run (a loop, not a sleep: the CPU time is what is counted)."""
    import time

    end = time.process_time() + sum(r.get("busy", 0) for r in runs)
    while time.process_time() < end:
        pass
    return toy_job(experiment, runs, out)
