"""Hostile checkpoint files and arguments, built in code, and a child process that measures them.

`cases()` returns every case as `(family, name, data, kwargs)`: the file's bytes and the keyword
arguments of `load_checkpoint`. `measure(cases, folder)` writes the files, loads each one in a
fresh child process (`python tests/hostile_cases.py CASES.json`) and returns one row per case:
the outcome (`rejected`, `loaded` or `escaped` with the exception type), the message, CPU and
wall seconds of the call, and the peak memory of the call above the memory before it (MB, from
/proc: the peak is reset before every case).
Used by tests/app/test_hostile.py and benchmarks/hostile.py.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


# ----------------------------------------------------------------------------- file builders


def raw_file(header: dict | bytes, body: bytes = b"") -> bytes:
    """A safetensors file from a header (a dict, or raw JSON bytes) and a data section."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + body


def header_of(data: bytes) -> dict:
    (length,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + length])


def edited(data: bytes, change) -> bytes:
    """The same file with `change(header)` applied to its parsed header (data section kept)."""
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    change(header)
    return raw_file(header, data[8 + length :])


def zero_tensors(shapes: dict[str, list[int]], metadata: dict | None = None) -> bytes:
    """A file declaring these F32 tensors; only zero-size ones may be declared without data."""
    header, offset = {}, 0
    for key, shape in shapes.items():
        size = 4
        for d in shape:
            size *= d
        header[key] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    if metadata is not None:
        header["__metadata__"] = metadata
    return raw_file(header, b"\0" * offset)


def sensviz_meta(arch="encoder", config=None, **extra) -> dict:
    config = {"d_model": 16, "n_layers": 2, "n_heads": 2, "max_len": 12, "d_ff": 16, "eps": 1e-5, **(config or {})}
    meta = {"format": "sensviz", "format_version": "1", "arch": arch, "config": json.dumps(config),
            "task": json.dumps({"name": "parity"}), "n": "6", "target_encoding": "zero_one"}
    meta.update(extra)
    return {k: v for k, v in meta.items() if v is not None}


def _valid():
    import sensviz as sv

    model = sv.build_model("encoder", d_model=16, n_layers=2, n_heads=2, max_len=12, seed=0)
    return sv.checkpoint_bytes(model, task="parity", n=6)


def with_meta(data: bytes, **changes) -> bytes:
    def change(header):
        meta = header["__metadata__"]
        for key, value in changes.items():
            if value is None:
                meta.pop(key, None)
            else:
                meta[key] = value
    return edited(data, change)


def with_config(data: bytes, **fields) -> bytes:
    def change(header):
        meta = header["__metadata__"]
        meta["config"] = json.dumps({**json.loads(meta["config"]), **fields})
    return edited(data, change)


def set_tensor(data: bytes, key: str, fill: float, dtype: str = "F32") -> bytes:
    """Every value of one tensor set to `fill` (stored as `dtype`: F32 or F64)."""
    import numpy as np

    header = header_of(data)
    (length,) = struct.unpack("<Q", data[:8])
    body = bytearray(data[8 + length :])
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        start, end = entry["data_offsets"]
        values = np.frombuffer(bytes(body[start:end]), "<f4").astype("<f8" if name == key and dtype == "F64" else "<f4")
        entry["_new"] = np.full_like(values, fill) if name == key else values
    new_body, offset = b"", 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        raw = entry.pop("_new").tobytes()
        entry.update(dtype=dtype if name == key else "F32", data_offsets=[offset, offset + len(raw)])
        new_body += raw
        offset += len(raw)
    return raw_file(header, new_body)


def _authors_keys(d=16, max_len=10, layers=(0,)) -> dict[str, list[int]]:
    """Zero-size stand-ins are not possible for a real model, so this lists a layout's keys with shapes."""
    shapes = {"embedding.weight": [2, d // 2], "positional_encoding.weight": [max_len, d // 2],
              "linear_head.weight": [1, d], "linear_head.bias": [1]}
    for i in layers:
        p = f"encoders.layers.{i}."
        shapes.update({p + "self_attn.in_proj_weight": [3 * d, d], p + "self_attn.in_proj_bias": [3 * d],
                       p + "self_attn.out_proj.weight": [d, d], p + "self_attn.out_proj.bias": [d],
                       p + "linear1.weight": [d, d], p + "linear1.bias": [d], p + "linear2.weight": [d, d],
                       p + "linear2.bias": [d], p + "norm1.weight": [d], p + "norm1.bias": [d],
                       p + "norm2.weight": [d], p + "norm2.bias": [d]})
    return shapes


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def cases() -> list[tuple[str, str, bytes, dict]]:
    """Every hostile case: (family, name, file bytes, load_checkpoint keyword arguments)."""
    valid = _valid()
    tiny = {"w": [0]}
    out = []

    def add(family, name, data, **kwargs):
        out.append((family, name, data, kwargs))

    # metadata bombs: sizes declared in a sensviz config (the tensors are a zero-size stand-in)
    for arch in ("encoder", "formal", "scratchpad"):
        for name, config in [
            ("d_model 4096 x 8 layers", {"d_model": 4096, "n_layers": 8}),
            ("d_model 20000", {"d_model": 20000}),
            ("d_ff 5e7", {"d_ff": 50_000_000}),
            ("max_len 5e7", {"max_len": 50_000_000}),
            ("n_layers 1e6", {"n_layers": 1_000_000}),
            ("n_heads 1e6", {"n_heads": 1_000_000}),
            ("every field at its limit (params)", {"d_model": 2048, "n_layers": 64, "n_heads": 64, "max_len": 4096,
                                                   "d_ff": 16384}),
            ("d_model 2048 x 2 layers (params)", {"d_model": 2048, "n_layers": 2, "max_len": 4096, "d_ff": 16384}),
        ]:
            add("metadata bomb (sensviz)", f"{arch}: {name}", zero_tensors(tiny, sensviz_meta(arch, config)))
    # the authors' layout: sizes read from the shapes of zero-size tensors
    base = _authors_keys()
    add("metadata bomb (authors)", "encoders.layers.999999.x",
        zero_tensors({**{k: [0] * len(s) for k, s in base.items()}, "encoders.layers.999999.x": [0]}), n_heads=2)
    add("metadata bomb (authors)", "a layer index of 40 digits",
        zero_tensors({**base, "encoders.layers." + "9" * 40 + ".x": [0]}), n_heads=2)
    for key, shape in [("positional_encoding.weight", [100_000_000, 0]), ("linear_head.weight", [0, 100_000_000]),
                       ("encoders.layers.0.linear1.weight", [100_000_000, 0]), ("embedding.weight", [0, 100_000_000])]:
        add("metadata bomb (authors)", f"{key} {shape}", zero_tensors({**base, key: shape}), n_heads=2)
    add("metadata bomb (authors)", "n_heads 1e6 in the metadata",
        zero_tensors(base, {"n_heads": "1000000"}))
    add("metadata bomb (authors)", "n_heads 1e6 as an argument", zero_tensors(base), n_heads=1_000_000)
    add("metadata bomb (authors)", "no heads anywhere", zero_tensors(base))

    # headers
    add("header", "nested 100000 deep in a tensor entry", raw_file(b'{"w":' + _nested(100_000) + b"}"))
    add("header", "nested 100000 deep, objects", raw_file(b'{"w":' + b'{"a":' * 100_000 + b"1" + b"}" * 100_001))
    add("header", "nested 500 deep (below Python's recursion limit)", raw_file(b'{"w":' + _nested(500) + b"}"))
    add("header", "nested 100000 deep in the metadata's config",
        zero_tensors(tiny, sensviz_meta(config=None) | {"config": _nested(100_000).decode()}))
    add("header", "nested 500 deep in the metadata's training",
        zero_tensors(tiny, sensviz_meta(training=_nested(500).decode())))
    add("header", "header length 2**63", struct.pack("<Q", 2**63) + b"{}")
    add("header", "header length past the end", struct.pack("<Q", 1000) + b"{}")
    add("header", "a header over 1 MiB", raw_file(b'{"w":"' + b"a" * 2**20 + b'"}'))
    add("header", "1 MiB of empty lists", raw_file(b'{"w":[' + b"[]," * 349_000 + b"[]]}"))
    add("header", "1 MiB of empty objects", raw_file(b'{"w":[' + b"{}," * 349_000 + b"{}]}"))
    add("header", "not UTF-8", raw_file(b'{"\xff\xfe":1}'))
    add("header", "not an object", raw_file(b"[1, 2, 3]"))
    add("header", "an integer of 5000 digits", raw_file(b'{"w":' + b"9" * 5000 + b"}"))
    add("header", "5000 tensor entries", raw_file({f"t{i}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
                                                     for i in range(5000)}))
    add("header", "a shape of 9 dimensions", zero_tensors({"w": [1] * 8 + [0]}))
    add("header", "a shape of 1e30 elements", raw_file({"w": {"dtype": "F32", "shape": [10**15, 10**15],
                                                               "data_offsets": [0, 0]}}))
    add("header", "a negative size", raw_file({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}}))
    add("header", "a size that is a float", raw_file({"w": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}},
                                                     b"\0" * 8))
    add("header", "offsets that are bools", raw_file({"w": {"dtype": "F32", "shape": [0], "data_offsets": [False, False]}}))
    add("header", "offsets past the end", raw_file({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}))
    add("header", "offsets that disagree with the shape", raw_file({"w": {"dtype": "F32", "shape": [1000],
                                                                          "data_offsets": [0, 8]}}, b"\0" * 8))
    add("header", "an integer dtype", raw_file({"w": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}}, b"\0" * 8))
    add("header", "a dtype that is a list", raw_file({"w": {"dtype": ["F32"] * 1000, "shape": [0], "data_offsets": [0, 0]}}))
    add("header", "metadata that is not strings", raw_file({"__metadata__": {"n": 6}}))
    add("header", "300 metadata fields", zero_tensors(tiny, {f"k{i}": "v" for i in range(300)}))
    add("header", "a 2 MiB metadata field", zero_tensors(tiny, {"training": "x" * 2 * 2**20}))
    add("header", "an entry without data_offsets", raw_file({"w": {"dtype": "F32", "shape": [0]}}))
    add("header", "empty file", b"")
    add("header", "random bytes", bytes(range(256)) * 8)

    # invalid values in a sensviz file whose tensors are those of a real model
    for name, fields in [("n_heads 2.0", {"n_heads": 2.0}), ("n_layers true", {"n_layers": True}),
                         ("eps NaN", {"eps": float("nan")}), ("eps -1", {"eps": -1.0}), ("eps a string", {"eps": "1e-5"}),
                         ("d_model a string", {"d_model": "16"}), ("n_heads 0", {"n_heads": 0}),
                         ("n_heads 3 (does not divide d_model)", {"n_heads": 3}), ("unknown field", {"width": 3}),
                         ("d_ff null", {"d_ff": None})]:
        add("invalid value", f"config: {name}", with_config(valid, **fields))
    for name, meta in [
        ("format_version 2", {"format_version": "2"}), ("no format_version", {"format_version": None}),
        ("arch rnn", {"arch": "rnn"}), ("config a list", {"config": "[16, 2]"}),
        ("config not JSON", {"config": "{oops"}),
        ("task sparse_parity k=9 > n=6", {"task": json.dumps({"name": "sparse_parity", "k": 9, "seed": 0})}),
        ("task random seed 1e29", {"task": json.dumps({"name": "random", "seed": 10**29})}),
        ("task random seed -1", {"task": json.dumps({"name": "random", "seed": -1})}),
        ("task seed a float", {"task": json.dumps({"name": "sparse_parity", "k": 2, "seed": 0.5})}),
        ("task a table for n=2 at n=6", {"task": json.dumps({"name": "table", "bits": "0110"})}),
        ("task a table of 3 bits", {"task": json.dumps({"name": "table", "bits": "011"})}),
        ("task name a list", {"task": json.dumps({"name": ["parity"]})}),
        ("task a plain string", {"task": "parity"}), ("task unknown", {"task": json.dumps({"name": "parody"})}),
        ("n 1e9", {"n": "1e9"}), ("n -3", {"n": "-3"}), ("n 0", {"n": "0"}), ("n 100 > max_len", {"n": "100"}),
        ("n of 30 digits", {"n": "9" * 30}), ("target_encoding binary", {"target_encoding": "binary"}),
    ]:
        add("invalid value", f"metadata: {name}", with_meta(valid, **meta))
    add("invalid value", "scratchpad computing FIRST",
        _scratchpad_with_task(json.dumps({"name": "first"})))

    # weights
    add("weights", "NaN", set_tensor(valid, "linear_head.weight", float("nan")))
    add("weights", "Inf", set_tensor(valid, "embedding.weight", float("inf")))
    add("weights", "float64 1e300 (inf as float32)", set_tensor(valid, "linear_head.bias", 1e300, "F64"))
    add("weights", "1e38 in the read-out (finite weights, the outputs overflow)",
        set_tensor(valid, "linear_head.weight", 1e38))
    add("weights", "wrong shape", edited(valid, lambda h: h["linear_head.weight"].update(shape=[16, 1])))
    add("weights", "missing tensor", edited(valid, lambda h: h.pop("linear_head.bias")))
    add("weights", "truncated", valid[:-100])
    add("weights", "truncated header", valid[:40])

    # arguments (a valid file)
    for name, kwargs in [("n 1e9", {"n": 10**9}), ("n 0", {"n": 0}), ("n true", {"n": True}), ("n 6.0", {"n": 6.0}),
                         ("n 13 > max_len", {"n": 13}), ("n_heads 2.0", {"n_heads": 2.0}),
                         ("n_heads 1e6", {"n_heads": 10**6}), ("task sparse_parity k=9", {"task": "sparse_parity:k=9"}),
                         ("task random seed 1e29", {"task": "random:seed=" + "1" * 30}), ("task parody", {"task": "parody"}),
                         ("eps NaN", {"eps": float("nan")}), ("d_model 20000", {"d_model": 20000}),
                         ("encoding binary", {"encoding": "binary"}), ("unknown config field", {"width": 3})]:
        add("argument", name, valid, **kwargs)
    return out


def _scratchpad_with_task(task: str) -> bytes:
    import sensviz as sv

    model = sv.build_model("scratchpad", d_model=8, n_layers=1, n_heads=2, max_len=6, seed=0)
    return with_meta(sv.checkpoint_bytes(model, task="parity", n=4), task=task)


# ----------------------------------------------------------------------------- measuring in a child process


def measure(selected: list[tuple[str, str, bytes, dict]], folder: Path) -> list[dict]:
    """Load every case in one fresh child process; one row per case (see the module docstring)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    listing = []
    for i, (family, name, data, kwargs) in enumerate(selected):
        path = folder / f"case{i}.safetensors"
        path.write_bytes(data)
        listing.append({"family": family, "name": name, "path": str(path), "kwargs": _encode(kwargs)})
    spec = folder / "cases.json"
    spec.write_text(json.dumps(listing))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)])}
    proc = subprocess.run([sys.executable, str(Path(__file__)), str(spec)], capture_output=True, text=True,
                          env=env, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"the measuring child failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def _encode(kwargs: dict) -> dict:
    return {k: {"float": repr(v)} if isinstance(v, float) else v for k, v in kwargs.items()}


def _decode(kwargs: dict) -> dict:
    return {k: float(v["float"]) if isinstance(v, dict) and "float" in v else v for k, v in kwargs.items()}


def _memory_mb() -> tuple[float, float]:
    """This process's resident memory now and its peak (VmRSS, VmHWM), in MB (Linux)."""
    status = Path("/proc/self/status").read_text()
    return tuple(int(re.search(rf"^{key}:\s+(\d+) kB", status, re.M).group(1)) / 1024 for key in ("VmRSS", "VmHWM"))


def _reset_peak() -> None:
    """Start the peak (VmHWM) afresh from the current resident memory (Linux clear_refs, mode 5).

    Not `getrusage`: its ru_maxrss survives `exec`, so a child would start from its parent's peak."""
    Path("/proc/self/clear_refs").write_text("5")


def _child(spec_path: str) -> None:
    import time

    import torch

    import sensviz as sv

    torch.set_num_threads(1)
    rows = []
    for case in json.loads(Path(spec_path).read_text()):
        kwargs = _decode(case["kwargs"])
        _reset_peak()
        baseline, _ = _memory_mb()
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            ck = sv.load_checkpoint(case["path"], **kwargs)
            outcome, message = "loaded", f"{ck.arch} n={ck.n}"
            del ck
        except sv.CheckpointError as err:
            outcome, message = "rejected", str(err)
        except BaseException as err:  # noqa: BLE001 - what the test must never see
            outcome, message = f"escaped {type(err).__name__}", str(err)[:500]
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        _, peak = _memory_mb()
        try:
            sv.checkpoints.read_metadata(case["path"])
            metadata = "read"
        except sv.CheckpointError:
            metadata = "rejected"
        except BaseException as err:  # noqa: BLE001
            metadata = f"escaped {type(err).__name__}"
        rows.append({"family": case["family"], "name": case["name"], "outcome": outcome, "message": message,
                     "read_metadata": metadata, "cpu_s": cpu, "wall_s": wall, "extra_mb": peak - baseline})
    json.dump(rows, sys.stdout)


if __name__ == "__main__":
    _child(sys.argv[1])
