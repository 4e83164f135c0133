"""Safetensors checkpoints: save, load strictly, and explain every bad file.

A sensviz checkpoint is a safetensors file whose metadata (string values) holds
`format="sensviz"`, `format_version`, `arch`, `config` (JSON of the config dataclass), and, when
known, `task` (JSON task spec), `n` (the input length it was trained on), `target_encoding`
(`zero_one`: {0,1} targets, threshold 0.5, the authors' default; or `pm1`: ±1 targets, threshold 0),
`training` (JSON summary of how it was made) and `extra` (JSON, the caller's). A `table` task's
truth table (up to 2**24 entries) is not written into the header, which stays small: it is the
uint8 tensor `sensviz.task_table` (bits packed 8 to a byte) beside the weights, and the task spec
says so (`{"name": "table", "n": 24, "tensor": "sensviz.task_table"}`; files that hold the bits in
the spec load as before). Strings in `training` and `extra` longer than the `metadata_chars` limit
(4,096) are stored shortened with a hash (`sensviz.text.short_label`): they describe, the task is
stored once.

Any other file is read as the authors' published model class (the `encoder` architecture) when
its keys have their layout; d_model, max_len, n_layers and d_ff come from the shapes, but the
number of heads cannot, so it comes from the caller (`n_heads`; their code's default is 2) or a
plain-string heads field of the metadata. Of another file's metadata only plain-string `task`, `n`
and heads are read (`safetensors.torch.save_file(sd, path, metadata={"task": "parity"})`); the
rest is ignored, and the input length defaults to the positional table's length.

Limits before allocation: the header is parsed and checked against `sensviz.limits` (its size,
nesting, every tensor's dtype, shape and byte range), the config against the limits, and the
declared tensors against a model built on the meta device (no memory) — all before a tensor is
read or a model is built. Every problem with a file or an argument — not safetensors, truncated,
corrupt or deeply nested header, a size over a limit, invalid config values, an unknown
format_version, missing or unexpected tensors, wrong shapes or dtypes, NaN/Inf weights or
outputs, a task that cannot hold at n — raises `CheckpointError` with one line meant for the
user, and no other exception escapes `load_checkpoint`. Nothing is ever unpickled, except by the
explicit `convert_torch_file`, which uses `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import numbers
import re
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import safetensors.torch
import torch
from torch.overrides import TorchFunctionMode

from . import cube
from .base import TracedModel
from .files import write_atomic
from .limits import LIMITS, MB, MiB, check_int, check_json_depth, is_int
from .models import ARCHITECTURES, config_from_dict, config_to_dict
from .tasks import ZERO_ONE, TargetEncoding, Task, TruthTable, get_encoding, get_task, task_from_spec
from .text import short_label

FORMAT = "sensviz"
FORMAT_VERSION = "1"
SIZE_CAP = min(64 * MB, LIMITS["file_bytes"].high)
"""Default largest checkpoint accepted, in bytes: 64 MB (within the `file_bytes` limit), the explorer's
upload cap too (`server.maxUploadSize` in .streamlit/config.toml: the browser refuses a larger file before
sending it, on Windows only above 64 MiB, where this cap refuses it); pass `size_cap` to read a larger file."""

_DTYPES = {"F16": ("<f2", 2), "BF16": ("<u2", 2), "F32": ("<f4", 4), "F64": ("<f8", 8)}
"""The float dtypes a checkpoint may hold: numpy's reading of the little-endian bytes, and their size."""
TASK_TABLE = "sensviz.task_table"
"""The tensor that holds a `table` task's truth table (packed bits, uint8) in a sensviz checkpoint."""
_AUTHORS_LAYER_KEY = re.compile(r"^encoders\.layers\.(\d+)\.")
_HEADS_KEYS = ("n_heads", "num_heads", "num_attn_heads", "num_attention_heads", "nhead", "n_head", "heads")
"""Metadata fields that other people's files use for the number of attention heads."""
_CHECK_INPUTS = 256
_CHECK_ELEMENTS = 2**24
"""The loader's forward check: at most this many inputs, and attention scores of at most this many elements."""


class CheckpointError(Exception):
    """A checkpoint that cannot be used, with a message that says why in plain words."""


@dataclass
class Checkpoint:
    """A loaded model with what is known about it."""

    model: TracedModel
    config: object  # the architecture's config dataclass
    metadata: dict = field(default_factory=dict)  # decoded metadata (JSON fields parsed)
    task: Task | None = None
    n: int | None = None
    encoding: TargetEncoding = ZERO_ONE
    layout: str = FORMAT  # "sensviz" or "authors"
    source: str = ""  # path or "<upload>"
    n_inferred: bool = False  # n is the positional table's length (authors' layout; no n given or recorded)
    notes: list[str] = field(default_factory=list)  # what the loader assumed or ignored, one line each

    @property
    def arch(self) -> str:
        return self.model.arch

    def to_pm1(self, output: torch.Tensor) -> torch.Tensor:
        """The model's output on the ±1 scale the analysis uses."""
        return self.encoding.to_pm1(output)


def _state_tensors(model: TracedModel) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}


def checkpoint_metadata(
    model: TracedModel,
    task: Task | str | None = None,
    n: int | None = None,
    encoding: TargetEncoding | str = ZERO_ONE,
    training: dict | None = None,
    extra: dict | None = None,
) -> dict[str, str]:
    """The string metadata a sensviz checkpoint stores."""
    encoding = get_encoding(encoding) if isinstance(encoding, str) else encoding
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "arch": model.arch,
        "config": json.dumps(config_to_dict(model.config)),
        "target_encoding": encoding.name,
    }
    if task is not None:
        task = get_task(task)
        spec = {"name": task.name, "n": task.n, "tensor": TASK_TABLE} if isinstance(task, TruthTable) else task.spec()
        meta["task"] = json.dumps(spec)
    if n is not None:
        meta["n"] = str(int(n))
    if training is not None:
        meta["training"] = json.dumps(_short_strings(training))
    if extra is not None:
        meta["extra"] = json.dumps(_short_strings(extra))
    return meta


def _short_strings(value):
    """`value` (JSON-compatible) with every string over the `metadata_chars` limit shortened (iteratively)."""
    root = [value]
    stack = [(root, 0)]
    while stack:
        container, key = stack.pop()
        item = container[key]
        if isinstance(item, str):
            container[key] = short_label(item, "metadata_chars")
        elif isinstance(item, dict):
            container[key] = item = {short_label(str(k), "metadata_chars"): v for k, v in item.items()}
            stack.extend((item, k) for k in item)
        elif isinstance(item, (list, tuple)):
            container[key] = item = list(item)
            stack.extend((item, i) for i in range(len(item)))
    return root[0]


def _sorted_header(data: bytes) -> bytes:
    """The same safetensors file with its JSON header's keys sorted.

    safetensors writes the metadata in hash-map order, which changes from one call to the next;
    sorting makes equal checkpoints equal byte for byte (so file hashes identify content). Tensor
    offsets count from the end of the header, so they stay valid; the header is padded with
    spaces to a multiple of 8 bytes, as safetensors does.
    """
    (length,) = struct.unpack("<Q", data[:8])
    text = json.dumps(json.loads(data[8 : 8 + length]), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data[8 + length :]


def checkpoint_bytes(model: TracedModel, **metadata) -> bytes:
    """The checkpoint file's content (for downloads); same arguments as `save_checkpoint`.

    The same model and metadata always give the same bytes.
    """
    tensors = _state_tensors(model)
    task = metadata.get("task")
    if task is not None and isinstance(task := get_task(task), TruthTable):
        tensors[TASK_TABLE] = task.packed()
    return _sorted_header(safetensors.torch.save(tensors, checkpoint_metadata(model, **metadata)))


def save_checkpoint(model: TracedModel, path, **metadata) -> Path:
    """Write `model` to `path` as a sensviz safetensors checkpoint and return the path (atomically, its
    folder made if needed: `sensviz.files.write_atomic`, which refuses a device, fifo or folder).

    Keyword arguments: `task`, `n`, `encoding`, `training`, `extra` (see `checkpoint_metadata`).
    """
    return write_atomic(Path(path), checkpoint_bytes(model, **metadata))


def _source_name(source) -> str:
    """How messages name a source: its path, or `<upload>` for bytes and unnamed file objects."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return "<upload>"
    if hasattr(source, "read"):
        return str(getattr(source, "name", "<upload>"))
    return str(source)


def _what_it_is(path: Path) -> str:
    """What a path that is not a regular file is, in a few words (for a one-line refusal)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as err:
        return f"cannot look at it ({err.strerror or err})"
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (a pipe)"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((f"it is {words}" for test, words in kinds if test(mode)), "it is not a regular file")


def _read_source(source, name: str, size_cap: int) -> bytes:
    """The file's bytes; enforces the size cap before reading."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    elif hasattr(source, "read"):
        data = source.read(size_cap + 1)
    else:
        path = Path(source)
        if not path.is_file():
            raise CheckpointError(f"{name}: {_what_it_is(path)}, not a checkpoint file")
        size = path.stat().st_size
        if size > size_cap:
            raise CheckpointError(f"{name}: {size / MB:.1f} MB is over the {size_cap / MB:.0f} MB size cap "
                                  "(limit 'file_bytes')")
        try:
            data = path.read_bytes()
        except OSError as err:
            raise CheckpointError(f"{name}: cannot read it ({err.strerror or err})") from None
    if not isinstance(data, bytes):
        raise CheckpointError(f"{name}: reading it gave {type(data).__name__}, not bytes")
    if len(data) > size_cap:
        raise CheckpointError(f"{name}: the file is over the {size_cap / MB:.0f} MB size cap (limit 'file_bytes')")
    return data


@dataclass(frozen=True)
class _Entry:
    """One tensor as the safetensors header declares it; offsets count from the data's start."""

    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int


@dataclass
class _Header:
    metadata: dict[str, str]
    tensors: dict[str, _Entry]
    data_start: int  # 8 + the header's length


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


TORCH_MAGIC = (b"PK\x03\x04", b"\x80\x02\x8a\x0a")
"""The first bytes of a file `torch.save` wrote: its zip archive, or its legacy pickle format."""

CONVERT_HINT = ("convert it first with `sensviz convert FILE.pt model.safetensors --n-heads H --task T --n N` (the "
                "model's heads, task and input length; without a task there is no accuracy, target or proxy)")
"""How to turn the authors' `.pt` state dict into a file sensviz reads, for every message that refuses one."""


def _parse_header(data: bytes, name: str) -> _Header:
    """The safetensors header, every entry checked against the limits and the file's length."""
    not_st = f"{name}: not a safetensors file"
    if data.startswith(TORCH_MAGIC):
        raise CheckpointError(f"{not_st} (it starts as a file torch.save writes: if it is one, {CONVERT_HINT})")
    if len(data) < 8:
        raise CheckpointError(f"{not_st} (only {len(data)} bytes)")
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > LIMITS["header_bytes"].high:
        raise CheckpointError(f"{not_st} (its first bytes do not encode a safetensors header length "
                              f"of at most {LIMITS['header_bytes'].high // MiB} MiB, limit 'header_bytes')")
    if 8 + header_len > len(data):
        raise CheckpointError(f"{name}: the file is truncated or not safetensors (the header runs past the end)")
    try:  # the checks of every entry below bound its nesting (metadata: strings; entries: lists of ints)
        header = json.loads(data[8 : 8 + header_len].decode("utf-8"))
    except RecursionError:
        raise CheckpointError(f"{name}: the safetensors header is corrupt (it nests too deeply)") from None
    except ValueError as err:  # undecodable bytes, invalid JSON, an integer of thousands of digits
        raise CheckpointError(f"{name}: the safetensors header is corrupt ({_one_line(err)})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{name}: the safetensors header is corrupt (not a JSON object)")
    metadata = header.pop("__metadata__", None) or {}
    _check_metadata(metadata, name)
    check_int("tensors in the file", len(header), "tensors")
    body = len(data) - 8 - header_len
    tensors = {key: _entry(key, entry, body, name) for key, entry in header.items()}
    return _Header(metadata, tensors, 8 + header_len)


_TABLE_DTYPES = {"U8": ("<u1", 1)}
"""The one dtype of the `sensviz.task_table` tensor (packed bits)."""


def _check_metadata(metadata, name: str) -> None:
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise CheckpointError(f"{name}: the safetensors metadata is corrupt (it must map strings to strings)")
    check_int("metadata fields", len(metadata), "metadata_entries")
    for key, value in metadata.items():
        check_int(f"the metadata field '{key[:40]}' (bytes)", len(value), "metadata_bytes")


def _entry(key: str, entry, body: int, name: str) -> _Entry:
    corrupt = f"{name}: the safetensors header entry for '{key[:80]}' is corrupt"
    if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= set(entry):
        raise CheckpointError(f"{corrupt} (it needs dtype, shape and data_offsets)")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    dtypes = _TABLE_DTYPES if key == TASK_TABLE else _DTYPES
    if not isinstance(dtype, str) or dtype not in dtypes:
        raise CheckpointError(f"{name}: tensor '{key[:80]}' has dtype {_short(dtype)}; "
                              + (f"a task table must be {', '.join(dtypes)}" if key == TASK_TABLE
                                 else f"weights must be floating point ({', '.join(dtypes)})"))
    if not isinstance(shape, list) or not all(is_int(d) and d >= 0 for d in shape):
        raise CheckpointError(f"{corrupt} (its shape is not a list of sizes)")
    check_int(f"'{key[:80]}' dimensions", len(shape), "tensor_dims")
    numel = math.prod(shape)
    check_int(f"'{key[:80]}' elements", max(numel, 1), "n_params")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(is_int(o) for o in offsets)):
        raise CheckpointError(f"{corrupt} (data_offsets is not two integers)")
    start, end = offsets
    if not 0 <= start <= end:
        raise CheckpointError(f"{corrupt} (data_offsets {offsets} are not a range)")
    if end > body:
        raise CheckpointError(f"{name}: the file is truncated ('{key[:80]}' ends past the end of the file)")
    if end - start != numel * dtypes[dtype][1]:
        raise CheckpointError(f"{corrupt} ({end - start} bytes for {numel} elements of {dtype})")
    return _Entry(dtype, tuple(shape), start, end)


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _decode_json(meta: dict, key: str, name: str):
    try:
        value = json.loads(meta[key])
        check_json_depth(value, f"the metadata field '{key}'")
        return value
    except RecursionError:
        raise CheckpointError(f"{name}: the metadata field '{key}' nests too deeply") from None
    except ValueError as err:
        raise CheckpointError(f"{name}: the metadata field '{key}' is not valid JSON ({_one_line(err)})") from None


def _decode_metadata(meta: dict, name: str) -> dict:
    """A sensviz file's metadata with its JSON fields parsed (other files' metadata stays as strings)."""
    metadata = dict(meta)
    if meta.get("format") != FORMAT:
        return metadata
    for key in ("config", "task", "training", "extra"):
        if key in metadata:
            metadata[key] = _decode_json(meta, key, name)
    return metadata


def read_metadata(source, size_cap: int = SIZE_CAP) -> dict:
    """A checkpoint's metadata without building the model: a sensviz file's with its JSON fields
    parsed; any other file's as the plain strings it holds (empty when it has none).

    Raises `CheckpointError` for files that are not readable safetensors.
    """
    name = _source_name(source)
    return _guarded(name, lambda: _decode_metadata(_parse_header(_read_source(source, name, size_cap), name).metadata, name))


def _guarded(name: str, work):
    """`work()`, with every failure it can raise turned into a one-line `CheckpointError`."""
    try:
        return work()
    except CheckpointError:
        raise
    except RecursionError:
        raise CheckpointError(f"{name}: the file nests too deeply to be read") from None
    except MemoryError:
        raise CheckpointError(f"{name}: not enough memory to load it") from None
    except ValueError as err:  # the limits' and the configs' messages say what is wrong
        raise CheckpointError(f"{name}: {_one_line(err)}") from None
    except Exception as err:  # noqa: BLE001 - no malformed file may escape as another exception
        raise CheckpointError(f"{name}: cannot be loaded ({type(err).__name__}: {_one_line(err)})") from None


# ----------------------------------------------------------------------------- layouts and configs


def _authors_config(shapes: dict[str, tuple], n_heads: int, name: str) -> dict:
    """Config fields of a state dict in the authors' layout, read from the declared shapes."""
    layers = [m.group(1) for key in shapes if (m := _AUTHORS_LAYER_KEY.match(key))]
    n_layers = 1 + max(int(i) if len(i) <= 9 else 10**9 for i in layers)
    check_int("n_layers (one more than the largest index of encoders.layers.*)", n_layers, "n_layers")
    try:
        fields = {
            "d_model": shapes["linear_head.weight"][1],
            "n_layers": n_layers,
            "n_heads": n_heads,
            "max_len": shapes["positional_encoding.weight"][0],
            "d_ff": shapes["encoders.layers.0.linear1.weight"][0],
        }
    except (KeyError, IndexError) as err:
        raise CheckpointError(f"{name}: incomplete state dict in the authors' layout (no {_one_line(err)})") from None
    return fields


def _is_authors_layout(keys) -> bool:
    return {"linear_head.weight", "positional_encoding.weight", "embedding.weight"} <= set(keys) and any(
        _AUTHORS_LAYER_KEY.match(k) for k in keys
    )


class _ShapesOnly(TorchFunctionMode):
    """While a model is built on the meta device: initialisers and scalar scalings do nothing.

    Meta tensors have shapes but no values, so skipping them changes nothing, and it spares the
    seconds torch takes to load its Python meta kernels the first time one of them runs.
    """

    _SCALINGS = (torch.Tensor.mul, torch.Tensor.div, torch.Tensor.__mul__, torch.Tensor.__truediv__)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == "torch.nn.init" or func in (torch.Tensor.normal_, torch.Tensor.uniform_):
            return args[0] if args else kwargs["tensor"]
        if func in self._SCALINGS and len(args) == 2 and isinstance(args[1], numbers.Number):
            return args[0]
        if func in (torch.randn, torch.rand):
            return torch.empty(*args, **kwargs)
        return func(*args, **kwargs)


def shape_model(arch: str, config) -> TracedModel:
    """The architecture's model on the meta device: its parameter names and shapes without memory.

    Raises ValueError when its parameter count is over the `n_params` limit. Build it only from a
    config that passed its own checks (every size within the limits).
    """
    _, model_cls = ARCHITECTURES[arch]
    with torch.device("meta"), _ShapesOnly():
        model = model_cls(config)
    check_int("parameters of the model", sum(p.numel() for p in model.parameters()), "n_params")
    return model


def _check_shapes(model: TracedModel, tensors: dict[str, _Entry], name: str) -> None:
    """The declared tensors (header only) against the model's parameters: names and shapes."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    problems = []
    if missing:
        problems.append(f"missing tensors {missing[:5]}" + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""))
    if unexpected:
        problems.append(f"unexpected tensors {[k[:80] for k in unexpected[:5]]}"
                        + (f" and {len(unexpected) - 5} more" if len(unexpected) > 5 else ""))
    wrong = [f"{k} is {list(tensors[k].shape)}, expected {list(s)}"
             for k, s in expected.items() if k in tensors and tensors[k].shape != s]
    if wrong:
        problems.append("wrong shapes: " + "; ".join(wrong[:5]))
    if problems:
        raise CheckpointError(f"{name}: the weights do not fit the {model.arch} model of this config: " + "; ".join(problems))


def _float32(data: bytes, header: _Header, entry: _Entry) -> np.ndarray:
    """A new float32 array of one tensor's values (little-endian in the file, any float dtype)."""
    kind, size = _DTYPES[entry.dtype]
    raw = np.frombuffer(data, dtype=kind, count=(entry.end - entry.start) // size, offset=header.data_start + entry.start)
    with np.errstate(all="ignore"):  # a float64 beyond float32's range becomes inf, and is refused
        values = (raw.astype("<u4") << 16).view("<f4") if entry.dtype == "BF16" else raw.astype(np.float32)
    return values.reshape(entry.shape)


def _read_tensors(data: bytes, header: _Header, name: str) -> dict[str, torch.Tensor]:
    """The tensors as float32, after every one was seen finite (one temporary tensor at a time)."""
    bad = [key for key, entry in header.tensors.items() if not np.isfinite(_float32(data, header, entry)).all()]
    if bad:
        raise CheckpointError(f"{name}: tensors contain NaN or Inf values (as float32): {bad[:5]}")
    return {key: torch.from_numpy(_float32(data, header, entry)) for key, entry in header.tensors.items()}


def _check_outputs(model: TracedModel, n: int | None, name: str) -> None:
    """A forward pass on a few inputs (the cube, or a seeded sample): the outputs must be finite."""
    length = n or model.config.max_len
    batch = max(1, min(_CHECK_INPUTS, _CHECK_ELEMENTS // (model.config.n_heads * length * length)))
    bits, _ = cube.measurement_inputs(length, batch, seed=0)
    with torch.no_grad():
        outputs = model.training_outputs(bits)
    if not torch.isfinite(outputs).all():
        raise CheckpointError(f"{name}: the model's outputs are not finite on inputs of length {length} "
                              "(its weights overflow float32 arithmetic)")


# ----------------------------------------------------------------------------- loading


@dataclass
class _Known:
    """What a file says about its task, n and heads, before the arguments override it."""

    metadata: dict
    task: Task | None = None
    n: int | None = None
    n_heads: int | None = None
    notes: list[str] = field(default_factory=list)


def _sensviz_known(data: bytes, header: _Header, name: str) -> tuple[str, dict, _Known]:
    """A sensviz file, parsed strictly: its architecture, config fields and what it knows (a
    `table` task's truth table is read from its tensor, which is then no longer among the tensors)."""
    meta = header.metadata
    version = meta.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(f"{name}: a sensviz checkpoint of format_version {_short(version)}; "
                              f"this sensviz reads format_version {FORMAT_VERSION!r}")
    arch = meta.get("arch")
    if arch not in ARCHITECTURES:
        raise CheckpointError(f"{name}: unknown architecture {_short(arch)} in the metadata")
    metadata = _decode_metadata(meta, name)
    fields = metadata.get("config")
    if not isinstance(fields, dict):
        raise CheckpointError(f"{name}: the metadata field 'config' is not a JSON object")
    known = _Known(metadata)
    if "task" in metadata:
        spec = metadata["task"]
        if not (isinstance(spec, dict) and isinstance(spec.get("name"), str)):
            raise CheckpointError(f"{name}: the metadata field 'task' is not a task spec (a JSON object with a name)")
        known.task = _stored_table(data, header, spec, name) if "tensor" in spec else task_from_spec(spec)
    if "n" in metadata:
        known.n = _decimal(metadata["n"], "n", name, "n")
    if "target_encoding" in metadata:
        get_encoding(metadata["target_encoding"])
    return arch, fields, known


def _stored_table(data: bytes, header: _Header, spec: dict, name: str) -> Task:
    """The `table` task whose truth table is the `sensviz.task_table` tensor (taken out of `header.tensors`)."""
    entry = header.tensors.pop(TASK_TABLE, None)
    if spec != {"name": "table", "n": spec.get("n"), "tensor": TASK_TABLE} or entry is None:
        raise CheckpointError(f"{name}: the metadata field 'task' names a tensor for its truth table, but the file "
                              f"has no '{TASK_TABLE}' tensor or the spec is not a table's")
    packed = np.frombuffer(data, dtype=np.uint8, count=entry.end - entry.start, offset=header.data_start + entry.start)
    return TruthTable.from_packed(packed, spec["n"])


def _decimal(text: str, key: str, name: str, limit: str) -> int:
    """A metadata string holding a whole number within the limit."""
    if not (text.isascii() and text.isdecimal() and len(text) <= 19):
        raise CheckpointError(f"{name}: the metadata field '{key}' is not a whole number: {_short(text)}")
    return check_int(key, int(text), limit)


def _foreign_known(header: _Header) -> _Known:
    """Any other file: only plain-string task, n and heads are read; unusable values are ignored
    with a note, and the rest of the metadata is not looked at."""
    meta = header.metadata
    known = _Known(dict(meta))
    if "task" in meta:
        try:
            known.task = get_task(meta["task"])
        except ValueError:
            known.notes.append(f"the metadata's task {_short(meta['task'])} is not a sensviz task label; ignored")
    if "n" in meta:
        try:
            known.n = _decimal(meta["n"], "n", "", "n")
        except (CheckpointError, ValueError):
            known.notes.append(f"the metadata's n {_short(meta['n'])} is not a valid input length; ignored")
    for key in _HEADS_KEYS:
        if key in meta:
            try:
                known.n_heads = _decimal(meta[key], key, "", "n_heads")
                break
            except (CheckpointError, ValueError):
                known.notes.append(f"the metadata's {key} {_short(meta[key])} is not a valid number of heads; ignored")
    return known


def load_checkpoint(
    source,
    *,
    n_heads: int | None = None,
    task: Task | str | None = None,
    n: int | None = None,
    encoding: TargetEncoding | str | None = None,
    device=None,
    size_cap: int = SIZE_CAP,
    **config_overrides,
) -> Checkpoint:
    """Load a checkpoint from a path, bytes or a binary file object; strict.

    A sensviz file (metadata `format="sensviz"`) is parsed strictly; in any other file only the
    plain-string metadata `task`, `n` and a heads field (`n_heads`, `num_heads`, `heads`, `nhead`,
    ...) are read. Arguments override the file: `n_heads` (needed for the authors' layout when the
    file does not say), `task`, `n`, `encoding`, and config fields as keyword arguments (e.g.
    `eps=0.0`). For the authors' layout n defaults to the positional table's length
    (`Checkpoint.n_inferred`, and a note says so).

    Everything is checked against `sensviz.limits` and the declared tensors against the config
    from the header alone, before a tensor is read or a model is built. Raises `CheckpointError`
    (one line) for any unusable file or argument, and no other exception.
    """
    name = _source_name(source)
    return _guarded(name, lambda: _load(source, name, size_cap, n_heads, task, n, encoding, device, config_overrides))


def _load(source, name, size_cap, n_heads, task, n, encoding, device, config_overrides) -> Checkpoint:
    data = _read_source(source, name, size_cap)
    header = _parse_header(data, name)
    if n_heads is not None:
        n_heads = check_int("n_heads", n_heads)
    if header.metadata.get("format") == FORMAT:
        arch, fields, known = _sensviz_known(data, header, name)
        layout = FORMAT
    elif _is_authors_layout(header.tensors):
        known, arch, layout = _foreign_known(header), "encoder", "authors"
        heads = n_heads if n_heads is not None else known.n_heads
        if heads is None:
            raise CheckpointError(
                f"{name}: this file has the authors' key layout, which does not record the number of attention heads; "
                "give it explicitly (n_heads / --n-heads; their code's default is 2)"
            )
        fields = _authors_config({k: e.shape for k, e in header.tensors.items()}, heads, name)
    else:
        raise CheckpointError(
            f"{name}: not a sensviz checkpoint (no sensviz metadata) and not in the authors' key layout "
            "(embedding.weight, positional_encoding.weight, encoders.layers.*, linear_head.*)"
        )
    if n_heads is not None:
        fields = {**fields, "n_heads": n_heads}
    config = config_from_dict(arch, {**fields, **config_overrides})
    model = shape_model(arch, config)
    _check_shapes(model, header.tensors, name)

    task = get_task(task) if task is not None else known.task
    notes, n_inferred, n_given = list(known.notes), False, n is not None
    if n is not None:
        n = check_int("n", n)
    elif known.n is not None:
        n = known.n
    elif layout == "authors":
        n, n_inferred = config.max_len, True
        notes.append(f"n={n} was inferred from the positional table's length; pass n (--n) for another input length")
    if n is not None and n > config.max_len:
        raise CheckpointError(f"{name}: n={n} is outside the model's positional range 1..{config.max_len}")
    if layout == "authors" and n_given and n < config.max_len:  # a length the caller gave, not the file's own
        notes.append(f"n={n} is less than the positional table's {config.max_len} positions, the length the authors' "
                     "configuration trains at (conf/train_config.yaml: model.max_len = basic.max_len = min_len): "
                     "check that n is the length this model was trained at")
    if task is not None and n is not None:
        model.check_task(task, n)  # the task's parameters against n (k <= n, a table's length), the scratchpad's PARITY
    if encoding is None:
        encoding = known.metadata.get("target_encoding", ZERO_ONE.name) if layout == FORMAT else ZERO_ONE.name
    if isinstance(encoding, str):
        encoding = get_encoding(encoding)

    model.load_state_dict(_read_tensors(data, header, name), strict=True, assign=True)
    model.eval()
    _check_outputs(model, n, name)
    if device is not None:
        model.to(device)
    return Checkpoint(model=model, config=config, metadata=known.metadata, task=task, n=n, encoding=encoding,
                      layout=layout, source=name, n_inferred=n_inferred, notes=notes)


def convert_torch_file(pt_path, out_path, n_heads: int, task: Task | str | None = None, n: int | None = None) -> Path:
    """Convert the authors' `.pt` state dict into a sensviz safetensors checkpoint.

    The only place that reads a pickle-based file, with `torch.load(weights_only=True)`, which
    loads tensors and plain containers and refuses arbitrary objects; the file's size is checked
    against the `file_bytes` limit first.
    """
    path = Path(pt_path)
    if not path.is_file():
        raise CheckpointError(f"{pt_path}: no such file")
    if path.stat().st_size > SIZE_CAP:
        raise CheckpointError(f"{pt_path}: over the {SIZE_CAP / MB:.0f} MB size cap (limit 'file_bytes')")
    with path.open("rb") as f:
        if not f.read(4).startswith(TORCH_MAGIC):
            raise CheckpointError(f"{pt_path}: not a file torch.save wrote (its first bytes are neither a zip archive "
                                  "nor a PyTorch pickle)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for foreign files
        raise CheckpointError(f"{pt_path}: cannot read it as a PyTorch state dict; the file may be truncated or "
                              f"corrupt ({_one_line(err)})") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise CheckpointError(f"{pt_path}: expected a state dict (a mapping of names to tensors)")
    data = _guarded(str(pt_path), lambda: safetensors.torch.save({k: v.contiguous().clone() for k, v in state.items()}))
    named = io.BytesIO(data)
    named.name = str(pt_path)  # messages name the file, not "<upload>"
    checkpoint = load_checkpoint(named, n_heads=n_heads, task=task, n=n)
    return save_checkpoint(checkpoint.model, out_path, task=checkpoint.task, n=checkpoint.n,
                           training={"converted_from": str(pt_path), "notes": checkpoint.notes})


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    """Whether two models hold the same parameters and buffers, bit for bit (two files of one training run's
    settings and seed differ in their metadata, never in these)."""
    first, second = a.state_dict(), b.state_dict()
    return first.keys() == second.keys() and all(
        first[k].shape == second[k].shape and first[k].dtype == second[k].dtype and torch.equal(first[k], second[k])
        for k in first)


def file_hash(path) -> str:
    """The sha256 of a file's content (hex), for caches and manifests."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
