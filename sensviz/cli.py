"""The `sensviz` command: JSON on stdout, errors on stderr with a non-zero exit status.

    sensviz task-info --task parity --n 10
    sensviz inspect checkpoints/encoder-parity-n8.safetensors [--n-heads H] [--task T] [--n N] [--dump F.npz]
    sensviz convert authors_model.pt out.safetensors --n-heads 2 [--task T] [--n N]
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import numpy as np

from . import analysis, cube
from .checkpoints import CheckpointError, convert_torch_file, load_checkpoint
from .tasks import get_task

DUMP_CAP_BYTES = 2 * 2**30
"""Largest attention array `inspect --dump` writes (2 GiB)."""


class UsageError(Exception):
    """A command-line argument that cannot be used; the message says why."""


def _task_info(args) -> dict:
    task = get_task(args.task)
    task.check_n(args.n)
    if args.n <= cube.EXACT_LIMIT:
        result = cube.analyze(task.values_pm1(args.n))
        return {
            "task": task.label,
            "n": args.n,
            "boolean": task.boolean,
            "avg_sensitivity": result.avg_sensitivity,
            "max_sensitivity": result.max_sensitivity,
            "degree_profile": result.degree_profile.tolist(),
            "exact": True,
        }
    est = cube.estimate(lambda bits: 2.0 * task(bits).double() - 1.0, args.n, args.samples, args.seed)
    return {
        "task": task.label,
        "n": args.n,
        "boolean": task.boolean,
        "avg_sensitivity": est.avg_sensitivity,
        "stderr": est.stderr,
        "max_sensitivity": est.max_sensitivity,
        "max_sensitivity_is": "the largest value seen in the sample",
        "degree_profile": None,
        "n_samples": est.n_samples,
        "seed": est.seed,
        "exact": False,
    }


def _load(args):
    return load_checkpoint(args.checkpoint, n_heads=args.n_heads, task=args.task, n=args.n)


def _inspect(args) -> dict:
    ck = _load(args)
    if ck.n is None:
        raise UsageError(f"{args.checkpoint}: the input length is not recorded in the file; pass --n")
    config = ck.config
    result = {
        "arch": ck.arch,
        "layout": ck.layout,
        "task": ck.task.label if ck.task else None,
        "target_encoding": ck.encoding.name,
        "d_model": config.d_model,
        "n_layers": config.n_layers,
        "n_heads": config.n_heads,
        "max_len": config.max_len,
    }
    result.update(
        analysis.inspect_model(
            ck.model, ck.n, ck.task, ck.encoding, n_samples=args.samples, seed=args.seed, exact_limit=args.exact_limit
        )
    )
    if args.dump:
        _dump(ck, args.dump)
        result["dump"] = args.dump
    return result


def _dump(ck, path: str) -> None:
    n, c = ck.n, ck.config
    size = 4 * 2**n * c.n_layers * c.n_heads * n * n
    if n > cube.EXACT_LIMIT or size > DUMP_CAP_BYTES:
        raise UsageError(
            f"--dump stores attention for all 2**{n} inputs ({size / 2**30:.1f} GiB); "
            f"that is over the {DUMP_CAP_BYTES / 2**30:.0f} GiB cap: use a smaller n"
        )
    tr = analysis.cube_trace(ck.model, n, limit=cube.EXACT_LIMIT)
    arrays = {
        "output": tr.output.numpy(),  # [2**n] vertex order
        "ln_factor": tr.ln_factor.numpy(),  # [2**n, ln, position]
        "ln_variance": tr.ln_variance.numpy(),  # [2**n, ln, position]
        "attention": tr.attention.numpy(),  # [2**n, layer, head, query, key]
        "ln_names": np.array(tr.ln_names),
        "ln_eps": np.array(tr.ln_eps),
    }
    if ck.task is not None:
        arrays["target"] = ck.task.values(n).numpy()
    np.savez_compressed(path, **arrays)


def _convert(args) -> dict:
    path = convert_torch_file(args.source, args.out, n_heads=args.n_heads, task=args.task, n=args.n)
    return {"written": str(path)}


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sensviz", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("task-info", help="sensitivity and Fourier degree profile of a target function")
    p.add_argument("--task", required=True, help="parity, majority, first, mean, sparse_parity:k=3,seed=0, random:seed=0, table:0110")
    p.add_argument("--n", type=_positive, required=True, help="input length")
    p.add_argument("--samples", type=_positive, default=4096, help="Monte Carlo samples above the exact limit")
    p.add_argument("--seed", type=int, default=0, help="seed of the Monte Carlo sample")
    p.set_defaults(run=_task_info)

    p = sub.add_parser("inspect", help="summary of a checkpoint: accuracy, sensitivity, degree profile")
    p.add_argument("checkpoint")
    p.add_argument("--n-heads", type=_positive, help="attention heads (needed for the authors' layout)")
    p.add_argument("--task", help="task of a file without sensviz metadata (or to override it)")
    p.add_argument("--n", type=_positive, help="input length (for files that do not record it)")
    p.add_argument("--samples", type=_positive, default=4096, help="Monte Carlo samples above the exact limit")
    p.add_argument("--seed", type=int, default=0, help="seed of every random draw")
    p.add_argument("--exact-limit", type=_positive, default=cube.EXACT_LIMIT, help="largest n analysed exactly")
    p.add_argument("--dump", metavar="FILE.npz", help="write outputs, LN factors and attention for every vertex")
    p.set_defaults(run=_inspect)

    p = sub.add_parser("convert", help="convert the authors' .pt state dict to a safetensors checkpoint")
    p.add_argument("source", help="a .pt file holding a state dict")
    p.add_argument("out", help="the .safetensors file to write")
    p.add_argument("--n-heads", type=_positive, required=True, help="attention heads of the model")
    p.add_argument("--task", help="the task it was trained on")
    p.add_argument("--n", type=_positive, help="the input length it was trained on")
    p.set_defaults(run=_convert)
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
    args = build_parser().parse_args(argv)
    try:
        result = args.run(args)
    except (CheckpointError, UsageError, ValueError) as err:
        print(f"sensviz {args.command}: error: {err}", file=sys.stderr)
        return 2
    json.dump(_json_safe(result), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
