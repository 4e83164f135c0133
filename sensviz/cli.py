"""The `sensviz` command: JSON on stdout; a bad argument or file gives one line on stderr and exit 2.

    sensviz task-info --task parity --n 10
    sensviz inspect checkpoints/encoder-parity-n8.safetensors [--n-heads H] [--task T] [--n N] [--dump F.npz]
                    [--with hessian radii limit] [measurement settings: --rho, --directions, --measure-inputs, ...]
    sensviz slice CKPT --dims 1|2 [--steps S] [--span A] [--normalization filter|layer|none] [--skip-bias-ln]
                  [--to OTHER.safetensors | --hessian] [--seed S] --out FILE.csv
    sensviz convert authors_model.pt out.safetensors --n-heads 2 [--task T] [--n N]
    sensviz train --task parity --n 8 --arch encoder --d-model 32 --n-layers 2 --n-heads 2 --steps 2000 --out m.safetensors
    sensviz zoo build [--dir checkpoints] [--only NAME ...] [--threads 1]
    sensviz zoo verify [--dir checkpoints] [--recompute]
    sensviz zoo measure [--dir checkpoints]
    sensviz sweep experiments/length_scaling.toml --out results/ls [--executor local|ray] [--workers N]
                  [--address ADDR] [--scale paper] [--threads T] [--max-runs N]
    sensviz report results/ls --out report.html
    sensviz init-study --arch encoder --d-model 32 --n 8 10 --inits 256 [--scales 0.5 1 2] [--task parity] [--seed 0]
    sensviz lab --out lab.html [--answers] [--url URL]
    sensviz lab-data                     (the Lab's chapters measured once, beside the checkpoints)
    sensviz fidelity experiments/results --out docs/fidelity.md [--scale standard]
    sensviz decide experiments/length_scaling.toml --scale decide --tables experiments/results/decide/length_scaling
                   [--standard experiments/results/standard] [--out REPORT.txt]

The flags of `train` come from the fields of `ModelSettings` and `TrainConfig`, those of `inspect`'s
measurement from `MeasureSettings` (`sensviz.configs`), each with its help and range.

Every file the command writes goes through `sensviz.files.write_atomic` (whole or not at all), and
every output path (`--out`, `--dump`, `--dir`) is checked while the arguments are read, before any
work: a device, fifo, folder or unwritable place is refused in one line (exit 2). Ctrl-C ends any
command with one line and exit 130. Renamed flags (`RENAMED`) keep working, with a one-line note,
until version `RENAMED_UNTIL`.
"""

# ruff: noqa: E402 (the Ctrl-C handler is installed before the libraries load: quiet from the first instant)
from __future__ import annotations

import os
import signal
import sys


def _interrupted_while_loading(signum, frame) -> None:
    """Ctrl-C while the command loads its libraries (torch: seconds): one line and exit 130, nothing was written."""
    os.write(2, b"sensviz: interrupted\n")
    os._exit(130)


_LOADING = signal.getsignal(signal.SIGINT)
if _LOADING is signal.default_int_handler:  # not where SIGINT is ignored (a background job) or handled already
    signal.signal(signal.SIGINT, _interrupted_while_loading)

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from . import analysis, configs, cube, experiments, init_study, slices, sweeps, zoo
from .checkpoints import CheckpointError, convert_torch_file, load_checkpoint, read_metadata
from .files import check_file, check_folder, check_writable, write_atomic
from .init_claim import decide_init_claim
from .limits import check_float, check_int
from .losses import loss_for, targets
from .measure import QUANTITIES, MeasureSettings, default_quantities, measure
from .models import ModelSettings, config_to_dict
from .tasks import describe_tasks, get_task
from .training import PrintProgress, TrainConfig, train

if signal.getsignal(signal.SIGINT) is _interrupted_while_loading:  # loaded: Ctrl-C is KeyboardInterrupt again (main's)
    signal.signal(signal.SIGINT, _LOADING)

DUMP_CAP_BYTES = 2 * 2**30
"""Largest attention array `inspect --dump` writes (2 GiB)."""
RENAMED = {
    "inspect": {"--seed": "--measure-seed", "--inputs": "--measure-inputs"},
    "slice": {"--directions": "--normalization"},
    "train": {"--layers": "--n-layers", "--heads": "--n-heads"},
}
"""Old spellings of renamed flags, per command: old -> new. They work, with a note, until `RENAMED_UNTIL`."""
RENAMED_UNTIL = "0.2.0"
"""The version that drops the old spellings (tests/app/test_cli.py fails from then on until they are gone)."""


class UsageError(Exception):
    """A command-line argument that cannot be used; the message says why."""


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line (`sensviz CMD: error: ...`) and exits 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _task_info(args) -> dict:
    task = get_task(args.task)
    task.check_n(args.n)
    if args.n <= cube.EXACT_LIMIT:
        result = cube.analyze(task.values_pm1(args.n))
        return {"task": task.label, "n": args.n, "boolean": task.boolean, **result.to_dict()}
    if args.n > cube.SAMPLED_LIMIT:
        raise UsageError(f"--n {args.n} is above the largest length sampled ({cube.SAMPLED_LIMIT})")
    est = cube.estimate(lambda bits: 2.0 * task(bits).double() - 1.0, args.n, args.samples, args.seed)
    return {"task": task.label, "n": args.n, "boolean": task.boolean, **est.to_dict(),
            "max_sensitivity_is": "the largest value seen in the sample", "degree_profile": None}


def _load(args):
    ck = load_checkpoint(args.checkpoint, n_heads=args.n_heads, task=args.task, n=args.n)
    for note in ck.notes:  # what the loader assumed or ignored (e.g. n inferred for the authors' layout)
        print(f"sensviz {args.command}: note: {note}", file=sys.stderr)
    return ck


def _inspect(args) -> dict:
    ck = _load(args)
    if ck.n is None:
        raise UsageError(f"{args.checkpoint}: the input length is not recorded in the file; pass --n")
    if args.dump:
        _check_dump_size(ck)  # before the measurement, not after it
    settings = configs.from_arguments(MeasureSettings, args)
    quantities = default_quantities(ck.model) + tuple(args.with_quantities or ())
    found = measure(ck.model, ck.task, ck.n, settings, quantities, ck.encoding)
    config = ck.config
    result = {
        "file": args.checkpoint,
        "arch": ck.arch,
        "layout": ck.layout,
        "task": ck.task.label if ck.task else None,
        "target_encoding": ck.encoding.name,
        "d_model": config.d_model,
        "n_layers": config.n_layers,
        "n_heads": config.n_heads,
        "max_len": config.max_len,
        "file_notes": list(ck.notes),  # what the loader assumed or ignored
        **found.to_dict(),
    }
    if args.dump:
        _dump(ck, args.dump)
        result["dump"] = args.dump
    return result


def _measurement_data(ck, args):
    """The slice's inputs (cube or seeded sample) and targets."""
    bits, exact = cube.measurement_inputs(ck.n, args.inputs, args.seed)
    info = {"kind": "cube" if exact else "sample", "n_inputs": bits.shape[0], "seed": None if exact else args.seed}
    return bits, targets(ck.task, bits, ck.encoding), loss_for(ck.encoding), info


def _slice(args) -> dict:
    ck = _load(args)
    if ck.n is None:
        raise UsageError(f"{args.checkpoint}: the input length is not recorded in the file; pass --n")
    if ck.task is None:
        raise UsageError(f"{args.checkpoint}: a loss slice needs the task; pass --task")
    if args.to and args.hessian:
        raise UsageError("--to and --hessian are two different directions; pass one of them")
    if args.to and args.dims != 1:
        raise UsageError("--to gives one direction (the line to the other model): use --dims 1")
    check_int(f"--steps {args.steps} in {args.dims}-D: the grid points", args.steps**args.dims, "grid_points")
    bits, labels, loss, info = _measurement_data(ck, args)
    alphas = None
    if args.to:
        other = load_checkpoint(args.to, n_heads=args.n_heads)
        directions = slices.line_direction(ck.model, other.model)
        span = 0.5 if args.span is None else args.span
        # rounded: linspace's 2.8e-17 for 0 put the model itself (and centre_loss) off the grid
        alphas = torch.linspace(-span, 1 + span, args.steps, dtype=torch.float64).round(decimals=12)
        kind = f"line to {args.to}"
    elif args.hessian:
        directions = slices.hessian_directions(ck.model, bits, labels, loss, args.dims, args.seed)
        kind = "hessian"
    else:
        directions = slices.random_directions(ck.model, args.dims, args.normalization, args.skip_bias_ln, args.seed)
        kind = f"random, {args.normalization} normalization"
    span = 1.0 if args.span is None else args.span
    frame = slices.loss_slice(
        ck.model, bits, labels, directions, loss, ck.encoding, alphas=alphas, span=span, steps=args.steps
    )
    try:
        write_atomic(args.out, frame.to_csv(index=False).encode())
    except OSError as err:
        raise UsageError(f"cannot write {args.out}: {err}") from None
    centre = frame.loc[(frame.drop(columns=["loss", "accuracy"]) == 0).all(axis=1), "loss"]
    return {
        "written": args.out,
        "rows": len(frame),
        "dims": args.dims,
        "directions": kind,
        "skip_bias_ln": args.skip_bias_ln,
        "loss": loss,
        "inputs": info,
        "centre_loss": centre.iloc[0].item() if len(centre) else None,
    }


def _check_dump_size(ck) -> None:
    """UsageError when the dump's attention array would be over `DUMP_CAP_BYTES`."""
    n, c = ck.n, ck.config
    size = 4 * 2**n * len(ck.model.attention_names()) * c.n_heads * n * n
    if n > cube.EXACT_LIMIT or size > DUMP_CAP_BYTES:
        raise UsageError(
            f"--dump stores attention for all 2**{n} inputs ({size / 2**30:.1f} GiB); "
            f"that is over the {DUMP_CAP_BYTES / 2**30:.0f} GiB cap: use a smaller n"
        )


def _dump(ck, path: str) -> None:
    n = ck.n
    tr = analysis.cube_trace(ck.model, n, limit=cube.EXACT_LIMIT)
    arrays = {
        "output": tr.output.numpy(),  # [2**n] vertex order
        "ln_factor": tr.ln_factor.numpy(),  # [2**n, ln, position]
        "ln_variance": tr.ln_variance.numpy(),  # [2**n, ln, position]
        "attention": tr.attention.numpy(),  # [2**n, layer, head, query, key]
        "ln_names": np.array(tr.ln_names),
        "attention_names": np.array(tr.attention_names),
        "ln_eps": np.array(tr.ln_eps),
    }
    if ck.task is not None:
        arrays["target"] = ck.task.values(n).numpy()
    write_atomic(path, lambda file: np.savez_compressed(file, **arrays))


def _convert(args) -> dict:
    path = convert_torch_file(args.source, args.out, n_heads=args.n_heads, task=args.task, n=args.n)
    training = read_metadata(path).get("training") or {}  # the header only: the model was checked while converting
    return {"written": str(path), "notes": training.get("notes", [])}  # what reading the .pt noted (an n, say)


def _train(args) -> dict:
    config = configs.from_arguments(TrainConfig, args)
    model_settings = configs.from_arguments(ModelSettings, args)
    task = get_task(args.task)
    if args.out:
        check_writable(args.out)  # before training, not after it
    model = model_settings.build(config.n, seed=config.seed)
    result = train(model, task, config, [] if args.quiet else [PrintProgress()])
    summary = {"arch": model.arch, "model_config": config_to_dict(model.config), "n_params": model.n_params(),
               **result.summary()}
    if args.out:
        summary["checkpoint"] = str(result.save(args.out))
    return summary


def _zoo_build(args) -> dict:
    torch.set_num_threads(args.threads)  # the same thread count gives the same bytes on the same machine
    start = time.perf_counter()
    manifest = zoo.build(args.dir, only=args.only, log=lambda line: print(line, file=sys.stderr, flush=True))
    return {"directory": args.dir, "entries": len(manifest["entries"]), "built": args.only or "all",
            "seconds": round(time.perf_counter() - start, 1)}


def _zoo_measure(args) -> dict:
    start = time.perf_counter()
    manifest = zoo.remeasure(args.dir, log=lambda line: print(line, file=sys.stderr, flush=True))
    return {"directory": args.dir, "measured": len(manifest["entries"]), "quantities": manifest["quantities"],
            "seconds": round(time.perf_counter() - start, 1)}


def _zoo_verify(args) -> dict:
    rows = zoo.verify(args.dir, recompute=args.recompute)
    bad = [row for row in rows if not row["ok"]]
    if bad:
        raise UsageError("; ".join(f"{row['file']}: {', '.join(row['problems'])}" for row in bad))
    return {"directory": args.dir, "verified": len(rows), "entries": rows}


def _sweep(args) -> dict:
    spec = sweeps.load_spec(args.spec, args.scale, max_runs=args.max_runs)
    experiments.check_spec(spec.experiment, spec.runs)
    if args.executor == "local" and args.address:
        raise UsageError("--address names a Ray cluster: use it with --executor ray")
    if args.executor == "ray" and args.threads:
        raise UsageError("--threads sets the torch threads of local worker processes; Ray tasks take one CPU each")
    order = None
    if spec.analysis and "sized_from" in spec.analysis:  # a sized design runs its ranked claims' runs first
        from . import confirm  # the results kit (pandas tables, the fidelity page's filters): only for this case

        order = confirm.order(args.spec, args.scale)
    start = time.perf_counter()
    runs = sweeps.run_sweep(spec, args.out, experiments.run_job, executor=args.executor, workers=args.workers,
                            address=args.address, batch=spec.batch or experiments.BATCH_FIELDS[spec.experiment],
                            threads=args.threads, log=sys.stderr, order=order)
    failed = runs[runs["status"] == "failed"]
    return {
        "experiment": spec.experiment,
        "name": spec.name,
        "scale": args.scale or "quick",
        "out": args.out,
        "runs": len(runs),
        "finished": int((runs["status"] == "finished").sum()),
        "failed": len(failed),
        "errors": sorted(set(failed["error"])),
        "seconds": round(time.perf_counter() - start, 1),
        "tables": [str(Path(args.out) / "runs.parquet"), str(Path(args.out) / "history.parquet")],
    }


def _report(args) -> dict:
    from . import report  # Altair and vl-convert: only for this command

    return report.write_report(args.folder, args.out)


def _init_study(args) -> dict:
    settings = configs.from_arguments(ModelSettings, args)
    for n in args.n:  # every cell's limits (and the task's lengths) before the first is allocated
        for scale in args.scales:
            init_study.check_study(settings, n, args.inits, scale, args.seed)
        if args.task:
            get_task(args.task).check_n(n)
    studies = [study for n in args.n for study in init_study.init_studies(settings, n, args.inits, args.scales,
                                                                          args.seed, args.task)]
    claim = decide_init_claim(studies).to_dict() if args.inits >= 2 else None
    return {"studies": [study.summary() for study in studies], "claim": claim}


def _symmetry_zoo(args) -> dict:
    from . import symmetry_zoo  # Altair and vl-convert: only for this command

    if args.from_csv:
        return symmetry_zoo.write(symmetry_zoo.read(args.from_csv), args.out, svg=not args.no_figure)
    log = (lambda line: print(line, file=sys.stderr, flush=True)) if args.verbose else None
    settings = MeasureSettings(measure_inputs=args.inputs, directions=args.directions)
    found = symmetry_zoo.rows(args.folder, args.kappa, args.maps, settings, log=log)
    return symmetry_zoo.write(found, args.out, svg=not args.no_figure)


def _lab(args) -> dict:
    from . import handout  # Altair and vl-convert: only for this command

    return handout.write_handout(args.out, args.answers, args.checkpoints, args.results, args.url)


def _lab_data(args) -> dict:
    from . import lab

    return lab.write_data(args.checkpoints, args.results, progress=lambda line: print(line, file=sys.stderr))


def _fidelity(args) -> dict:
    from . import fidelity

    return fidelity.write_page(args.folder, args.out, args.scale)


def _decide(args) -> dict:
    from . import preregistered

    decision = preregistered.decide(args.spec, args.scale, args.tables, args.standard)
    result = preregistered.to_dict(decision)
    if args.out:
        result["written"] = str(write_atomic(args.out, preregistered.text(decision).encode()))
    return result


def _limited(kind: type, limit: str):
    """An argparse type: an int or float within a named limit of `sensviz.limits` (one line otherwise)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {'an integer' if kind is int else 'a number'}, got {text!r}") from None
        try:
            return (check_int if kind is int else check_float)("the value", value, limit)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err).removeprefix("the value ")) from None

    parse.__name__ = kind.__name__
    return parse


_seed = _limited(int, "seed")
_length = _limited(int, "n")
_samples = _limited(int, "samples")


def _output(check, *options):
    """An argparse type: a path to write that `check` (`sensviz.files.check_file`, with `options` such
    as a suffix, or `check_folder`) accepts, checked while the arguments are read, before any work;
    the path as given."""

    def parse(text: str) -> str:
        try:
            check(text, *options)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
        return text

    parse.__name__ = "path"
    return parse


class _Renamed(argparse.Action):
    """The old spelling of a renamed flag: does what the new one does, with a one-line note on stderr."""

    def __init__(self, option_strings, dest, new: argparse.Action, **kwargs):
        self.new_flag = new.option_strings[0]
        super().__init__(option_strings, new.dest, nargs=new.nargs, type=new.type, choices=new.choices,
                         metavar=new.metavar, help=argparse.SUPPRESS)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: note: {option_string} was renamed to {self.new_flag} "
              f"(the old name works until sensviz {RENAMED_UNTIL})", file=sys.stderr)
        setattr(namespace, self.dest, values)


def _add_renamed(p: argparse.ArgumentParser, command: str) -> None:
    """The old spellings of `command`'s renamed flags (`RENAMED`), after the flags they stand for."""
    for old, new in RENAMED.get(command, {}).items():
        p.add_argument(old, action=_Renamed, new=p._option_string_actions[new])  # argparse's table of flags


def _file_options(p) -> None:
    p.add_argument("--n-heads", type=_limited(int, "n_heads"), help="attention heads (the authors' layout does not record them)")
    p.add_argument("--task", help="task of a file that does not record it, or to override it")
    p.add_argument("--n", type=_length, help="input length (for files that do not record it, or to override it)")


def _add_task_info(sub) -> None:
    tasks_help = "a task label; " + describe_tasks()
    p = sub.add_parser("task-info", help="sensitivity and Fourier degree profile of a target function")
    p.add_argument("--task", required=True, help=tasks_help)
    p.add_argument("--n", type=_length, required=True, help="input length")
    p.add_argument("--samples", type=_samples, default=4096, help="Monte Carlo samples above the exact limit")
    p.add_argument("--seed", type=_seed, default=0, help="seed of the Monte Carlo sample")
    p.set_defaults(run=_task_info)


def _add_inspect(sub) -> None:
    p = sub.add_parser("inspect", help="every quantity of a checkpoint (sensviz.measure): sensitivity, Blowup, "
                                       "trade-off, sharpness, the proxy")
    p.add_argument("checkpoint")
    _file_options(p)
    p.add_argument("--dump", metavar="FILE.npz", type=_output(check_file, ".npz"),
                   help="write outputs, LN factors and attention for every vertex (a name ending in .npz)")
    extra = [name for name, q in QUANTITIES.items()]
    p.add_argument("--with", dest="with_quantities", nargs="+", choices=extra, metavar="QUANTITY",
                   help=f"also measure these (default set plus these): {', '.join(extra)}")
    configs.add_arguments(p.add_argument_group("measurement (sensviz.measure.MeasureSettings)"), MeasureSettings)
    _add_renamed(p, "inspect")
    p.set_defaults(run=_inspect)


def _add_slice(sub) -> None:
    p = sub.add_parser("slice", help="the loss along one or two directions in parameter space, as CSV")
    p.add_argument("checkpoint")
    p.add_argument("--dims", type=int, choices=(1, 2), default=1, help="1-D line or 2-D plane (default 1)")
    p.add_argument("--steps", type=_limited(int, "steps"), default=21,
                   help="grid points per axis (default 21)")
    p.add_argument("--span", type=_limited(float, "span"),
                   help="alpha in [-span, span] (default 1); with --to, [-span, 1+span] (default 0.5)")
    p.add_argument("--normalization", choices=slices.NORMALIZATIONS, default="filter",
                   help="random directions scaled per filter (default), per layer, or none (unit norm)")
    p.add_argument("--skip-bias-ln", action="store_true", help="no movement of biases and LayerNorm parameters")
    p.add_argument("--to", metavar="OTHER.safetensors", help="the straight line to another checkpoint of the same model")
    p.add_argument("--hessian", action="store_true", help="along the top Hessian eigenvector(s) of the loss")
    p.add_argument("--out", required=True, metavar="FILE.csv", type=_output(check_file), help="where to write the slice")
    _file_options(p)
    p.add_argument("--seed", type=_seed, default=0, help="seed of the directions and the input sample")
    p.add_argument("--inputs", type=_limited(int, "inputs"), default=MeasureSettings().measure_inputs,
                   help="inputs: the cube when 2**n <= this, else a seeded sample of this many")
    _add_renamed(p, "slice")
    p.set_defaults(run=_slice)


def _add_convert(sub) -> None:
    p = sub.add_parser("convert", help="convert the authors' .pt state dict to a safetensors checkpoint")
    p.add_argument("source", help="a .pt file holding a state dict")
    p.add_argument("out", type=_output(check_file), help="the .safetensors file to write")
    p.add_argument("--n-heads", type=_limited(int, "n_heads"), required=True, help="attention heads of the model")
    p.add_argument("--task", help="the task it was trained on")
    p.add_argument("--n", type=_length, help="the input length it was trained on")
    p.set_defaults(run=_convert)


def _add_train(sub) -> None:
    tasks_help = "a task label; " + describe_tasks()
    p = sub.add_parser("train", help="train a model; progress on stderr, a JSON summary on stdout")
    p.add_argument("--task", required=True, help=tasks_help)
    configs.add_arguments(p.add_argument_group("model (sensviz.models.ModelSettings)"), ModelSettings)
    configs.add_arguments(p.add_argument_group("training (sensviz.training.TrainConfig)"), TrainConfig,
                          required=("n",))
    p.add_argument("--out", metavar="PATH.safetensors", type=_output(check_file), help="write the trained model here")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    _add_renamed(p, "train")
    p.set_defaults(run=_train)


def _add_zoo(sub) -> None:
    p = sub.add_parser("zoo", help="the pretrained checkpoints: build them, or verify hashes and loading")
    zoo_sub = p.add_subparsers(dest="zoo_command", required=True, parser_class=Parser)
    q = zoo_sub.add_parser("build", help="train every zoo checkpoint (deterministic) and write the manifest")
    q.add_argument("--dir", default="checkpoints", type=_output(check_folder), help="where the checkpoints go")
    q.add_argument("--only", nargs="+", metavar="NAME", help="rebuild only these entries (file stems)")
    q.add_argument("--threads", type=_limited(int, "threads"), default=1,
                   help="CPU threads (default 1: reproducible, and robust on a busy machine)")
    q.set_defaults(run=_zoo_build)
    q = zoo_sub.add_parser("verify", help="re-check every manifest entry: hash, loading, metadata")
    q.add_argument("--dir", default="checkpoints")
    q.add_argument("--recompute", action="store_true", help="also recompute each recorded accuracy and as_n")
    q.set_defaults(run=_zoo_verify)
    q = zoo_sub.add_parser("measure", help="measure every checkpoint again under today's quantities and rewrite the "
                           "manifest (nothing is retrained; after a quantity is added)")
    q.add_argument("--dir", default="checkpoints")
    q.set_defaults(run=_zoo_measure)


def _add_sweep(sub) -> None:
    p = sub.add_parser("sweep", help="run a sweep spec (TOML) of the paper's experiments; resumable")
    p.add_argument("spec", help="a sweep spec, e.g. experiments/length_scaling.toml")
    p.add_argument("--out", required=True, metavar="DIR", type=_output(check_folder),
                   help="results folder (rerun with the same folder to resume)")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local: process pool on this machine (default); ray: Ray tasks")
    p.add_argument("--workers", type=_limited(int, "workers"), default=1, help="parallel jobs (default 1: in this process)")
    p.add_argument("--address", help="Ray cluster address (default: start a local Ray instance)")
    p.add_argument("--scale", help="a named scale of the spec, e.g. standard or paper (default: the quick scale)")
    p.add_argument("--threads", type=_limited(int, "threads"), help="torch threads per local worker (default: CPUs / workers)")
    p.add_argument("--max-runs", type=_limited(int, "max_runs"), metavar="N",
                   help="allow a sweep of up to N runs (needed above the cap of 10,000; see sensviz.limits)")
    p.set_defaults(run=_sweep)


def _add_report(sub) -> None:
    p = sub.add_parser("report", help="a standalone HTML report with every figure of a sweep folder (or of its subfolders)")
    p.add_argument("folder", help="a sweep folder (holding runs.parquet), or a folder of sweep folders")
    p.add_argument("--out", required=True, metavar="REPORT.html", type=_output(check_file), help="where to write the report")
    p.set_defaults(run=_report)


def _add_init_study(sub) -> None:
    p = sub.add_parser("init-study", help="M random initialisations on the cube (sensviz.init_study): as_n, min "
                       "sensitivity, degree profile and attention entropy per init scale, and the claim's verdict")
    configs.add_arguments(p.add_argument_group("model (sensviz.models.ModelSettings)"), ModelSettings)
    p.add_argument("--n", type=_limited(int, init_study.STUDY_N), nargs="+", required=True,
                   help="input lengths (each cube whole); the claim is decided across all of them and the scales")
    p.add_argument("--inits", type=_limited(int, init_study.INITS), default=256, help="initialisations M (default 256)")
    p.add_argument("--scales", type=_limited(float, init_study.INIT_SCALE), nargs="+", default=list(init_study.INIT_SCALES),
                   help="init scales: factors on every initial parameter but the LayerNorms' (default 0.5 1 2)")
    p.add_argument("--task", help="the target shown beside the inits (a task label, e.g. parity)")
    p.add_argument("--seed", type=_seed, default=0, help="initialisation m uses seed + m (default 0)")
    p.set_defaults(run=_init_study)


def _add_symmetry_zoo(sub) -> None:
    p = sub.add_parser("symmetry-zoo", help="every sharpness measure of the zoo's encoders before and after random "
                       "function-preserving maps (sensviz.symmetry_zoo), the claim R3's verdict, written as a page")
    p.add_argument("--folder", default="checkpoints", help="the checkpoints (default checkpoints/)")
    p.add_argument("--out", required=True, metavar="PAGE.md", type=_output(check_file),
                   help="the page; its rows (.csv) and figure (.svg) beside it")
    p.add_argument("--kappa", type=float, choices=(2.0, 10.0, 100.0, 1000.0), default=100.0,
                   help="each factor's condition number at most: 2, 10, 100 or 1000 (default 100)")
    p.add_argument("--maps", type=int, choices=range(1, 11), default=2, metavar="1..10",
                   help="random maps per model (default 2)")
    p.add_argument("--inputs", type=_limited(int, "inputs"), default=256, help="inputs per model: the cube when it has "
                   "at most this many, else a seeded sample (default 256)")
    p.add_argument("--directions", type=_limited(int, "directions"), default=32, help="random directions (default 32)")
    p.add_argument("--from-csv", metavar="ROWS.csv", help="render the page from stored rows (no measuring)")
    p.add_argument("--no-figure", action="store_true", help="the page and its rows only (no SVG)")
    p.add_argument("--verbose", action="store_true", help="a line per model and map on stderr")
    p.set_defaults(run=_symmetry_zoo)


def _add_lab(sub) -> None:
    p = sub.add_parser("lab", help="the Lab as one offline HTML handout: every chapter's text, figures and questions")
    p.add_argument("--out", required=True, metavar="LAB.html", type=_output(check_file), help="where to write the handout")
    p.add_argument("--answers", action="store_true", help="the instructor's copy: each chapter's charts and answer in place")
    p.add_argument("--checkpoints", help="the zoo (default $SENSVIZ_CHECKPOINT_DIR, else the package's checkpoints/)")
    p.add_argument("--results", help="the shipped results (default the first of $SENSVIZ_RESULTS_DIRS, else the package's "
                   "experiments/results/)")
    p.add_argument("--url", help="the explorer's address, for the links to each chapter (default: the chapter's path only)")
    p.set_defaults(run=_lab)


def _add_lab_data(sub) -> None:
    p = sub.add_parser("lab-data", help="measure the zoo once for the Lab's chapters: lab-data.json beside the checkpoints")
    p.add_argument("--checkpoints", help="the zoo (default $SENSVIZ_CHECKPOINT_DIR, else the package's checkpoints/)")
    p.add_argument("--results", help="the shipped results (default the first of $SENSVIZ_RESULTS_DIRS, else the package's "
                   "experiments/results/)")
    p.set_defaults(run=_lab_data)


def _add_fidelity(sub) -> None:
    p = sub.add_parser("fidelity", help="the fidelity page: each claim of the paper with its interval and verdict")
    p.add_argument("folder", help="a results folder holding <scale>/<experiment>/runs.parquet, e.g. experiments/results")
    p.add_argument("--out", required=True, metavar="PAGE.md", type=_output(check_file),
                   help="where to write the page, e.g. docs/fidelity.md")
    p.add_argument("--scale", help="the scale to decide from, e.g. quick or standard (default: the largest present)")
    p.set_defaults(run=_fidelity)


def _add_decide(sub) -> None:
    p = sub.add_parser("decide", help="a scale's pre-registered analysis and the flat claims' equivalence margins, "
                       "applied to its tables (finished or not)")
    p.add_argument("spec", help="the sweep spec, e.g. experiments/length_scaling.toml")
    p.add_argument("--scale", help="the scale whose [scales.NAME.analysis] and runs to use, e.g. decide")
    p.add_argument("--tables", required=True, type=Path,
                   help="the sweep folder holding runs.parquet, e.g. experiments/results/decide/length_scaling")
    p.add_argument("--standard", type=Path, help="the tables the design's variance came from, for the power "
                   "(default: results/standard beside the spec)")
    p.add_argument("--out", metavar="REPORT.txt", type=_output(check_file), help="also write the report as text")
    p.set_defaults(run=_decide)


def build_parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per `_add_<command>` (each its flags and the function it runs)."""
    parser = Parser(prog="sensviz", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for add in (_add_task_info, _add_inspect, _add_slice, _add_convert, _add_train, _add_zoo, _add_sweep, _add_report,
                _add_init_study, _add_symmetry_zoo, _add_lab, _add_lab_data, _add_fidelity, _add_decide):
        add(sub)
    return parser


def _json_safe(value):
    """NaN and Inf become null so that stdout is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    command = "sensviz"
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as done:  # --help (0) or a bad argument, already reported in one line (2)
            return done.code
        command = f"sensviz {args.command}"
        result = args.run(args)
    except KeyboardInterrupt:  # Ctrl-C: the writers left no half file behind
        print(f"{command}: interrupted", file=sys.stderr)
        return 130
    except (CheckpointError, UsageError, ValueError, OSError) as err:
        print(f"{command}: error: {err}", file=sys.stderr)
        return 2
    json.dump(_json_safe(result), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 1 if result.get("failed") else 0  # a sweep with failed runs (they are in its summary)


if __name__ == "__main__":
    sys.exit(main())
