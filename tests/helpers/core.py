"""Small fixed data for the library's tests: tiny sweep runs and zoo recipes, a result table for the
figures, a walk through a chart's spec, a folder made read-only, a run that stops with its snapshot."""

import contextlib
import fcntl
import io
import json
import os
import struct
from pathlib import Path

import pandas as pd
import safetensors.torch
import torch
from reference import AuthorsModel

from sensviz import experiments, sweeps, tasks, zoo
from sensviz.training import Callback, TrainConfig

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINTS = ROOT / "checkpoints"
FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_IMMUTABLE_FL = 0x80086601, 0x40086602, 0x10


def walk(node, key):
    """Every value stored under `key` anywhere in a spec."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key:
                yield v
            yield from walk(v, key)
    elif isinstance(node, list):
        for v in node:
            yield from walk(v, key)


TINY = {"d_model": 8, "n": 4, "steps": 20, "eval_interval": 10, "measure_inputs": 64, "proxy_draws": 4,
        "directions": 4}


def spec(experiment, runs):
    return sweeps.SweepSpec(experiment, runs, name=f"tiny-{experiment}")


def sweep(experiment, runs, out, **kwargs):
    log = io.StringIO()
    table = sweeps.run_sweep(spec(experiment, runs), out, experiments.run_job,
                             batch=experiments.BATCH_FIELDS[experiment], log=log, **kwargs)
    return table.set_index("run_id"), log.getvalue()


def length_runs() -> pd.DataFrame:
    """2 tasks x 2 lengths x 2 seeds; one PARITY run at n=8 did not converge and one run failed."""
    rows = []
    for task in ("parity", "first"):
        for n in (4, 8):
            for seed in (0, 1):
                sharp = (0.1 * n if task == "parity" else 0.05) + 0.01 * seed
                rows.append({"run_id": f"{task}{n}{seed}", "task": task, "n": n, "seed": seed, "status": "finished",
                             "converged": not (task == "parity" and n == 8 and seed == 1),
                             "sharpness_proxy_pm1": sharp, "sharpness_pm1": sharp / 2, "sharpness_limit_pm1": sharp / 3,
                             "bound": 0.5 if task == "parity" else 1 / (2 * n), "log_authors_blowup": n / 10,
                             "param_norm": 20.0 + seed, "log_blowup_mean_sq": n / 5, "bound_rhs": n / 10,
                             "lr": 1e-3, "weight_decay": 0.1 * seed})
    rows.append({"run_id": "bad", "task": "parity", "n": 8, "seed": 2, "status": "failed", "error": "boom"})
    return pd.DataFrame(rows)


def leftovers(folder) -> list[str]:
    """Every name in `folder` (temporary files of a writer start with a dot)."""
    return sorted(p.name for p in folder.iterdir())


def _set_immutable(folder, on: bool) -> bool:
    """Set or clear the file system's immutable attribute (what `chattr +i` does); False where it has none."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return False
    try:
        flags = struct.unpack("l", fcntl.ioctl(fd, FS_IOC_GETFLAGS, struct.pack("l", 0)))[0]
        flags = flags | FS_IMMUTABLE_FL if on else flags & ~FS_IMMUTABLE_FL
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("l", flags))
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


@contextlib.contextmanager
def read_only(folder):
    """`folder` made read-only for this process: mode 0555, and for root (whom modes do not stop)
    the immutable attribute; the test fails when neither makes it read-only here."""
    folder.chmod(0o555)
    immutable = os.access(folder, os.W_OK) and _set_immutable(folder, True)
    try:
        assert not os.access(folder, os.W_OK), "cannot make a read-only folder on this machine"
        yield folder
    finally:
        if immutable:
            assert _set_immutable(folder, False)
        folder.chmod(0o755)


TINY_ZOO = (
    zoo.Recipe("encoder-first-n3", "encoder", {"d_model": 8, "n_layers": 1, "n_heads": 2, "max_len": 3}, "first", 0,
               TrainConfig(n=3, batch_size=16, steps=6, eval_interval=3)),
    zoo.Recipe("encoder-parity-n3", "encoder", {"d_model": 8, "n_layers": 1, "n_heads": 2, "max_len": 3}, "parity", 1,
               TrainConfig(n=3, batch_size=16, steps=6, eval_interval=3)),
    zoo.Recipe("scratchpad-parity-n3", "scratchpad", {"d_model": 8, "n_layers": 1, "n_heads": 2, "max_len": 3},
               "parity", 0, TrainConfig(n=3, batch_size=16, steps=4, eval_interval=2)),
)


HOSTILE = [
    "[Log in again](https://evil.invalid/login)", "![x](http://127.0.0.1:9/x.png)", "<img src=http://evil.invalid/a>",
    "<a href='https://evil.invalid'>here</a>", "**bold** _it_ `code` ~~gone~~ # heading", ":red[alarm] :material/home: :smile:",
    "$x^2$ and \\(y\\)", "| a | b |\n|---|---|", "&lt;script&gt; &amp; &#60;", "line\n\n# heading\n- item\n1. one",
]


SWEEP_SPEC = """
experiment = "toy"
description = "a toy sweep"
[defaults]
arch = "encoder"
steps = 10
[grid]
n = [4, 6]
seed = [0, 1]
[scales.big]
steps = 1000
"""


def write_spec(tmp_path, text=SWEEP_SPEC):
    path = tmp_path / "spec.toml"
    path.write_text(text)
    return path


def calls(out):
    return [json.loads(line) for line in (out / "calls.jsonl").read_text().splitlines()]


def probe_value(model) -> float:
    """What the probe measures: a number of the model that no other column holds."""
    return 3.0 * model.param_norm() + 1.0


def sweep_folder(path: Path, experiment: str, runs: pd.DataFrame) -> Path:
    path.mkdir(parents=True)
    runs.assign(wall_s=1.0).to_parquet(path / "runs.parquet")
    pd.DataFrame({"run_id": ["x"], "step": [0]}).to_parquet(path / "history.parquet")
    (path / "spec.json").write_text(json.dumps({"experiment": experiment, "name": path.name,
                                                "description": "a <fixed> table"}))
    return path


def report_results(folder: Path) -> Path:
    """Two small sweep folders (length scaling and the trade-off, from `length_runs`) under `folder/results`."""
    sweep_folder(folder / "results" / "ls", "length_scaling", length_runs())
    sweep_folder(folder / "results" / "to", "tradeoff", length_runs())
    return folder / "results"


class Threshold(tasks.Task):
    """A task defined outside the library (here, for the tests): 1 when the fraction of ones is above `level`."""

    name = "threshold_test"
    description = "1 when the fraction of ones is above level"
    parameters = (tasks.Param("level", float, "the fraction to exceed", default=0.5, low=0.0, high=1.0),
                  tasks.Param("note", str, "a free text (typed parameters: int, float, str)", default="x", high=8))

    def __call__(self, bits):
        return (bits.float().mean(dim=1) > self.level).float()


def authors_file(tmp_path, n_layers=2, d=16, heads=2, max_len=10):
    """A state dict saved as the authors' code saves it, with random weights: (the reference model, its file)."""
    torch.manual_seed(4)
    model = AuthorsModel(d, heads, n_layers, max_len=max_len).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    path = tmp_path / "authors.safetensors"
    safetensors.torch.save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)
    return model, path


class SnapshotAt(Callback):
    """Writes the run's snapshot after step `at` to `path` (as a job's worker does at a measurement; `seconds`, when
    given, as the time it had trained), then stops the run there: a process that ended."""

    def __init__(self, at: int, path, seconds: float | None = None):
        self.at, self.path, self.seconds = at, path, seconds

    def on_step(self, state):
        if state.step == self.at:
            snapshot = state.snapshot()
            if self.seconds is not None:
                snapshot.seconds = self.seconds
            snapshot.save(self.path)

    def should_stop(self, state):
        return state.step >= self.at
