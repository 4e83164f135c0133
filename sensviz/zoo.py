"""The pretrained zoo: small checkpoints for the app and the paper's length-scaling figure.

`RECIPES` says how every checkpoint is made: architecture and size, task, input length, seed and
training config (the trainer of `sensviz.training`: AdamW on fresh uniform strings, MSE on {0,1}
targets). `build(directory)` trains them deterministically — recipes that share an architecture,
size and training config train together in one `train_many` batch — and writes
`<name>.safetensors` (the recipe in the `extra` metadata, the training summary and history in
`training`, no wall-clock times, so a rebuild on the same machine writes the same bytes) and
`manifest.json`: per checkpoint the task, n, architecture and size, seed, training steps and stop
reason, the accuracy over the whole cube (recomputed after training, not the last batch), the
model's as_n next to the task's, the file's sha256 and size. PARITY at larger n may not reach 100 %
in the budget; the manifest records the true accuracy. Recipes with `monitor_every` also record the
measurements of `MONITOR` while they train (the degree profile, Blowup and sharpness over training,
in the checkpoint's `extra.measurements`): the Lab's live chapters and its handout draw them.

`verify(directory)` re-checks every entry: the file exists, its sha256 matches, it loads, its
metadata agrees with the manifest, the manifest was measured under today's quantity registry
(`sensviz.measure.registry_key`), and (`recompute=True`) every measured column is what the model gives.
`remeasure(directory)` measures the files again without retraining (after a quantity is added).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from .checkpoints import CheckpointError, file_hash, load_checkpoint
from .files import write_atomic
from .measure import MeasureSettings, affordable, columns, registry_key
from .measure import measure as measure_model
from .models import build_model, config_to_dict
from .monitor import MeasurementCallback
from .tasks import get_task
from .training import PER_MODEL_FIELDS, PrintProgress, TrainConfig, TrainResult, train_many

MANIFEST = "manifest.json"
FORMAT = "sensviz-zoo"
VERSION = 1


@dataclass
class Recipe:
    """How one zoo checkpoint is made."""

    name: str  # file stem, e.g. "encoder-parity-n8"
    arch: str
    model: dict  # config fields of the architecture
    task: str
    seed: int  # model initialisation and data stream
    train: TrainConfig = field(default_factory=TrainConfig)
    monitor_every: int | None = None  # record `MONITOR` measurements every this many steps (the Lab's live chapters)

    def to_dict(self) -> dict:
        monitored = {"monitor_every": self.monitor_every} if self.monitor_every else {}
        return {"name": self.name, "arch": self.arch, "model": self.model, "task": self.task, "seed": self.seed,
                "train": self.train.to_dict(), **monitored}

    def batch_key(self) -> str:
        """Recipes with the same key train together in one `train_many` batch."""
        shared = {k: v for k, v in self.train.to_dict().items() if k not in PER_MODEL_FIELDS}
        return json.dumps([self.arch, self.model, shared, self.monitor_every], sort_keys=True)


TASKS = ("parity", "majority", "first", "mean")
ENCODER = {"d_model": 32, "n_layers": 2, "n_heads": 2}
ENCODER_LENGTHS = (4, 6, 8, 10, 12, 16)
FORMAL = {"d_model": 16, "n_layers": 2, "n_heads": 2}
FORMAL_LENGTHS = (4, 8)
SCRATCHPAD_LENGTHS = (8, 16, 32)
EASY = TrainConfig(batch_size=256, steps=1000, lr=1e-3, weight_decay=0.1, eval_interval=250)
"""MAJORITY, FIRST and MEAN: they converge well within 1000 steps."""
PARITY = TrainConfig(batch_size=256, steps=6000, lr=1e-3, weight_decay=0.1, eval_interval=250, target_accuracy=1.0,
                     target_loss=1e-3)
"""PARITY: until every evaluation input is right (the whole cube for n <= 12) and the evaluation MSE is
below 0.001 (the paper's convergence filter), at most `steps`."""
FEW_EXAMPLES = TrainConfig(n=8, train_size=64, batch_size=256, steps=3000, lr=3e-3, weight_decay=0.1, eval_interval=50,
                           target_accuracy=1.0, target_loss=1e-3)
"""A random function at n = 8 fitted on 64 of its 256 inputs (the paper's generalization experiment, small)."""
MONITOR = MeasureSettings(directions=16)
"""How monitored recipes measure while they train (the instant and cheap quantities,
`sensviz.measure.affordable`; stored in the checkpoint's `extra.measurements`)."""


def _parity(n: int, steps: int, **fields) -> TrainConfig:
    return replace(PARITY, n=n, steps=steps, **fields)


def _recipes() -> list[Recipe]:
    recipes = []
    for n in ENCODER_LENGTHS:
        model = {**ENCODER, "max_len": n}
        # at n = 16, batch 256 had not left chance level after 6000 steps; batch 512 reaches ~99.98 % by 5000
        parity = _parity(n, 5000, batch_size=512) if n == 16 else _parity(n, 6000)
        recipes.append(Recipe(f"encoder-parity-n{n}", "encoder", model, "parity", 0, parity,
                              monitor_every=50 if n == 8 else None))
        recipes += [Recipe(f"encoder-{task}-n{n}", "encoder", model, task, 0, replace(EASY, n=n)) for task in TASKS[1:]]
    for n in FORMAL_LENGTHS:
        model = {**FORMAL, "max_len": n}
        recipes.append(Recipe(f"formal-parity-n{n}", "formal", model, "parity", 0, _parity(n, 5000, lr=3e-3)))
        recipes += [Recipe(f"formal-{task}-n{n}", "formal", model, task, 0, replace(EASY, n=n, steps=1500))
                    for task in TASKS[1:]]
    recipes.append(Recipe("encoder-random-n8", "encoder", {**ENCODER, "max_len": 8}, "random:seed=0", 0, FEW_EXAMPLES,
                          monitor_every=50))
    recipes += [
        Recipe(f"scratchpad-parity-n{n}", "scratchpad", {**ENCODER, "max_len": n}, "parity", 0,
               TrainConfig(n=n, batch_size=128, steps=800, lr=1e-3, weight_decay=0.1, eval_interval=200))
        for n in SCRATCHPAD_LENGTHS
    ]
    return recipes


RECIPES: tuple[Recipe, ...] = tuple(_recipes())
"""The committed zoo, in manifest order."""


def _select(only: Sequence[str] | None) -> list[Recipe]:
    if not only:
        return list(RECIPES)
    known = {r.name: r for r in RECIPES}
    unknown = sorted(set(only) - set(known))
    if unknown:
        raise ValueError(f"unknown zoo entries {unknown}; known: {sorted(known)}")
    return [r for r in RECIPES if r.name in set(only)]


def measure(model, task, n: int, encoding) -> dict:
    """What the manifest records about a trained model: the columns of its instant quantities
    (`sensviz.measure.affordable`, default settings: accuracy and as_n on the cube or a seeded
    sample, Blowup, greedy decoding for scratchpad models), and `exact` (as_n over the
    whole cube)."""
    found = measure_model(model, task, n, quantities=affordable(model, "instant"), encoding=encoding)
    return {**columns(found), "exact": found.sensitivity.exact}


RECORDED = ("file", "name", "arch", "task", "n", "config", "n_params", "seed", "train", "steps", "stop_reason",
            "final_eval_loss", "sha256", "bytes", "made_by", "trained_with", "batch_seconds")
"""A manifest entry's fields from training and the file; its other fields are `measure`'s columns."""


def _entry(recipe: Recipe, result: TrainResult, path: Path, seconds: float, batch: list[str]) -> dict:
    model = result.model
    recorded = {
        "file": path.name,
        "name": recipe.name,
        "arch": recipe.arch,
        "task": result.task.label,
        "n": result.config.n,
        "config": config_to_dict(model.config),
        "n_params": model.n_params(),
        "seed": recipe.seed,
        "train": result.config.to_dict(),
        "steps": result.steps,
        "stop_reason": result.stop_reason,
        "final_eval_loss": result.final["eval_loss"],
        "sha256": file_hash(path),
        "bytes": path.stat().st_size,
        "made_by": "sensviz zoo build (sensviz.zoo.RECIPES)",
        "trained_with": batch,
        "batch_seconds": round(seconds, 1),
    }
    return {**recorded, **measure(model, result.task, result.config.n, result.config.encoding)}


def _write_manifest(directory: Path, entries: list[dict], trained_by: dict) -> dict:
    """The manifest of these entries, in recipe order, under the quantity registry they were measured with;
    `trained_by`: the torch version and thread count that trained them."""
    order = [r.name for r in RECIPES]
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "quantities": registry_key(),
        **trained_by,
        "training_seconds": round(sum({tuple(e["trained_with"]): e["batch_seconds"] for e in entries}.values()), 1),
        "entries": sorted(entries, key=lambda e: order.index(e["name"]) if e["name"] in order else len(order)),
    }
    write_atomic(directory / MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode())
    return manifest


def _read_manifest(directory: Path) -> dict:
    path = directory / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no zoo manifest (run `sensviz zoo build`)") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or not isinstance(manifest.get("entries"), list):
        raise ValueError(f"{path}: not a sensviz zoo manifest")
    return manifest


def build(directory="checkpoints", only: Sequence[str] | None = None, log: Callable[[str], None] | None = None) -> dict:
    """Train the zoo's recipes (or `only` the named ones) into `directory`; returns the manifest.

    With `only`, the other entries of an existing manifest are kept.
    """
    directory = Path(directory)
    recipes = _select(only)
    entries = {}
    if only and (directory / MANIFEST).exists():
        entries = {e["name"]: e for e in _read_manifest(directory)["entries"]}
    batches: dict[str, list[Recipe]] = {}
    for recipe in recipes:
        batches.setdefault(recipe.batch_key(), []).append(recipe)
    for batch in batches.values():
        names = [r.name for r in batch]
        if log:
            log(f"training {', '.join(names)}")
        began = time.perf_counter()
        models = [build_model(r.arch, seed=r.seed, **r.model) for r in batch]
        configs = [replace(r.train, seed=r.seed) for r in batch]
        callbacks = [PrintProgress(prefix=f"[{batch[0].arch} n={configs[0].n}] ")] if log else []
        monitor = MeasurementCallback(batch[0].monitor_every, MONITOR) if batch[0].monitor_every else None
        results = train_many(models, [r.task for r in batch], configs, callbacks + ([monitor] if monitor else []))
        seconds = time.perf_counter() - began
        for member, (recipe, result) in enumerate(zip(batch, results)):
            extra = {"zoo": recipe.to_dict()}
            if monitor:
                extra["measurements"] = [{k: v for k, v in r.items() if k != "member"} for r in monitor.records
                                         if r["member"] == member]
            path = result.save(directory / f"{recipe.name}.safetensors", extra=extra, with_time=False)
            entries[recipe.name] = _entry(recipe, result, path, seconds, names)
            if log:
                acc = entries[recipe.name]["accuracy"]
                log(f"  {path.name}: {result.stop_reason} after {result.steps} steps, "
                    f"accuracy {'-' if acc is None else f'{acc:.4f}'}")
    return _write_manifest(directory, list(entries.values()), {"torch": torch.__version__,
                                                                "threads": torch.get_num_threads()})


def remeasure(directory="checkpoints", log: Callable[[str], None] | None = None) -> dict:
    """Measure every manifest entry's checkpoint again (`measure`, under today's quantity registry) and
    rewrite the manifest; nothing is retrained. A file whose sha256 differs from its entry's is refused
    (ValueError): rebuild it with `build(only=...)`."""
    directory = Path(directory)
    manifest, entries = _read_manifest(directory), []
    for entry in manifest["entries"]:
        path = directory / entry["file"]
        if not path.is_file() or file_hash(path) != entry["sha256"]:
            raise ValueError(f"{path}: missing or not the file the manifest lists; rebuild it "
                             f"(`sensviz zoo build --only {entry['name']}`)")
        if log:
            log(f"measuring {entry['file']}")
        ck = load_checkpoint(path)
        recorded = {key: entry[key] for key in RECORDED}
        entries.append({**recorded, **measure(ck.model, get_task(entry["task"]), ck.n, ck.encoding)})
    return _write_manifest(directory, entries, {key: manifest.get(key) for key in ("torch", "threads")})


def verify(directory="checkpoints", recompute: bool = False, tolerance: float = 1e-6) -> list[dict]:
    """Re-check every manifest entry; one row per file: `{"file", "ok", "problems"}`.

    The file exists, its sha256 matches, it loads, and its metadata agrees with the manifest; with
    `recompute`, also every measured column (`measure`, a minute or two for the whole zoo). Files in
    the directory that the manifest does not list are reported as problems too, and a manifest measured
    under another quantity registry as a row of its own. A measured value agrees when it is within `tolerance`,
    absolute or relative (float32 models: values in the hundreds differ in their seventh digit between kernels).
    """
    directory = Path(directory)
    manifest = _read_manifest(directory)
    rows = []
    for entry in manifest["entries"]:
        rows.append({"file": entry["file"], "problems": _check_entry(directory, entry, recompute, tolerance)})
    if manifest.get("quantities") != registry_key():
        rows.append({"file": MANIFEST, "problems": ["measured under another quantity registry (a quantity was added, "
                                                    "dropped or re-costed since): run `sensviz zoo measure`"]})
    listed = {e["file"] for e in manifest["entries"]}
    rows += [{"file": p.name, "problems": ["not in the manifest"]}
             for p in sorted(directory.glob("*.safetensors")) if p.name not in listed]
    for row in rows:
        row["ok"] = not row["problems"]
    return rows


def _check_entry(directory: Path, entry: dict, recompute: bool, tolerance: float) -> list[str]:
    path = directory / entry["file"]
    if not path.is_file():
        return ["the file is missing"]
    if file_hash(path) != entry["sha256"]:
        return ["its sha256 differs from the manifest's"]
    try:
        ck = load_checkpoint(path)
    except CheckpointError as err:
        return [f"does not load: {err}"]
    problems = []
    recorded = {"arch": ck.arch, "task": ck.task.label if ck.task else None, "n": ck.n,
                "config": config_to_dict(ck.config), "seed": ck.metadata.get("extra", {}).get("zoo", {}).get("seed")}
    problems += [f"{key} is {value!r} in the file but {entry[key]!r} in the manifest"
                 for key, value in recorded.items() if value != entry[key]]
    if problems or not recompute:
        return problems
    for key, value in measure(ck.model, get_task(entry["task"]), ck.n, ck.encoding).items():
        if key not in entry:
            problems.append(f"{key} is not in the manifest: run `sensviz zoo measure`")
            continue
        expected = entry[key]
        if (value is None) != (expected is None) or (
                value is not None and not math.isclose(value, expected, rel_tol=tolerance, abs_tol=tolerance)):
            problems.append(f"{key} is {value} on the cube but {expected} in the manifest")
    return problems
