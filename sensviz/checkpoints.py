"""Safetensors checkpoints: save, load strictly, and explain every bad file.

A sensviz checkpoint is a safetensors file whose metadata (string values) holds
`format="sensviz"`, `format_version`, `arch`, `config` (JSON of the config dataclass), and, when
known, `task` (JSON task spec), `n` (the input length it was trained on), `target_encoding`
(`zero_one`: {0,1} targets, threshold 0.5, the authors' default; or `pm1`: ±1 targets, threshold 0),
`training` (JSON summary of how it was made) and `extra` (JSON, the caller's).

A file without sensviz metadata is read as the authors' published model class (the `encoder`
architecture) when its keys have their layout; d_model, max_len, n_layers and d_ff come from the
shapes, but the number of heads cannot, so the caller passes `n_heads` (their code's default is 2).

Every problem with a file — not safetensors, truncated, corrupt header, missing or unexpected
tensors, wrong shapes or dtypes, NaN/Inf, over the size cap — raises `CheckpointError` with a
message meant for the user, and no other exception escapes `load_checkpoint`. Nothing is ever
unpickled, except by the explicit `convert_torch_file`, which uses `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import struct
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
import safetensors.torch
import torch

from .models import ARCHITECTURES, build_model, config_from_dict, config_to_dict
from .tasks import ZERO_ONE, Task, TargetEncoding, get_encoding, get_task, task_from_spec
from .base import TracedModel

FORMAT = "sensviz"
FORMAT_VERSION = "1"
SIZE_CAP = 200 * 2**20
"""Default largest checkpoint accepted, in bytes (200 MiB)."""

_HEADER_CAP = 100 * 2**20
_FLOAT_DTYPES = {"F16", "BF16", "F32", "F64"}
_AUTHORS_LAYER_KEY = re.compile(r"^encoders\.layers\.(\d+)\.")


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
        meta["task"] = json.dumps(get_task(task).spec())
    if n is not None:
        meta["n"] = str(int(n))
    if training is not None:
        meta["training"] = json.dumps(training)
    if extra is not None:
        meta["extra"] = json.dumps(extra)
    return meta


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
    return _sorted_header(safetensors.torch.save(_state_tensors(model), checkpoint_metadata(model, **metadata)))


def save_checkpoint(model: TracedModel, path, **metadata) -> Path:
    """Write `model` to `path` as a sensviz safetensors checkpoint (atomically) and return the path.

    Keyword arguments: `task`, `n`, `encoding`, `training`, `extra` (see `checkpoint_metadata`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = checkpoint_bytes(model, **metadata)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.name, suffix=".tmp", delete=False) as tmp:
        tmp.write(data)
    os.chmod(tmp.name, 0o644)  # a temporary file is private (0600); a checkpoint is an ordinary file
    os.replace(tmp.name, path)
    return path


def _read_source(source, size_cap: int) -> tuple[bytes, str]:
    """The file's bytes and a name for messages; enforces the size cap before reading."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data, name = bytes(source), "<upload>"
    elif hasattr(source, "read"):
        name = getattr(source, "name", "<upload>")
        data = source.read(size_cap + 1)
    else:
        path = Path(source)
        name = str(path)
        if not path.is_file():
            raise CheckpointError(f"{name}: no such file")
        size = path.stat().st_size
        if size > size_cap:
            raise CheckpointError(f"{name}: {size / 2**20:.1f} MiB is over the {size_cap / 2**20:.0f} MiB size cap")
        data = path.read_bytes()
    if len(data) > size_cap:
        raise CheckpointError(f"{name}: the file is over the {size_cap / 2**20:.0f} MiB size cap")
    return data, name


def _parse_header(data: bytes, name: str) -> dict:
    """The safetensors JSON header, checked against the file's length."""
    not_st = f"{name}: not a safetensors file"
    if len(data) < 8:
        raise CheckpointError(f"{not_st} (only {len(data)} bytes)")
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > _HEADER_CAP:
        raise CheckpointError(f"{not_st} (its first bytes do not encode a safetensors header length)")
    if 8 + header_len > len(data):
        raise CheckpointError(f"{name}: the file is truncated or not safetensors (the header runs past the end)")
    try:
        header = json.loads(data[8 : 8 + header_len].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{name}: the safetensors header is corrupt ({err})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{name}: the safetensors header is corrupt (not a JSON object)")
    body = len(data) - 8 - header_len
    for key, entry in header.items():
        if key == "__metadata__":
            if not isinstance(entry, dict):
                raise CheckpointError(f"{name}: the safetensors metadata is corrupt")
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            raise CheckpointError(f"{name}: the safetensors header entry for '{key}' is corrupt")
        if offsets[1] > body:
            raise CheckpointError(f"{name}: the file is truncated ('{key}' ends past the end of the file)")
        if entry.get("dtype") not in _FLOAT_DTYPES:
            raise CheckpointError(f"{name}: tensor '{key}' has dtype {entry.get('dtype')}; weights must be floating point")
    return header


def _decode_json(meta: dict, key: str, name: str):
    try:
        return json.loads(meta[key])
    except (json.JSONDecodeError, TypeError):
        raise CheckpointError(f"{name}: the metadata field '{key}' is not valid JSON") from None


def _decode_metadata(meta: dict, name: str) -> dict:
    """The metadata with its JSON fields parsed."""
    metadata = dict(meta)
    for key in ("config", "task", "training", "extra"):
        if key in metadata:
            metadata[key] = _decode_json(meta, key, name)
    return metadata


def read_metadata(source, size_cap: int = SIZE_CAP) -> dict:
    """A checkpoint's decoded metadata without building the model (empty for the authors' layout).

    Raises `CheckpointError` for files that are not readable safetensors.
    """
    data, name = _read_source(source, size_cap)
    return _decode_metadata(_parse_header(data, name).get("__metadata__") or {}, name)


def _authors_config(tensors: dict[str, torch.Tensor], n_heads: int | None, name: str) -> dict:
    """Config fields of a state dict in the authors' layout, read from the shapes."""
    if n_heads is None:
        raise CheckpointError(
            f"{name}: this file has the authors' key layout, which does not record the number of attention heads; "
            "give it explicitly (n_heads / --n-heads; their code's default is 2)"
        )
    try:
        d_model = tensors["linear_head.weight"].shape[1]
        layers = {int(m.group(1)) for k in tensors if (m := _AUTHORS_LAYER_KEY.match(k))}
        return {
            "d_model": d_model,
            "n_layers": max(layers) + 1,
            "n_heads": int(n_heads),
            "max_len": tensors["positional_encoding.weight"].shape[0],
            "d_ff": tensors["encoders.layers.0.linear1.weight"].shape[0],
        }
    except (KeyError, IndexError, ValueError) as err:
        raise CheckpointError(f"{name}: incomplete state dict in the authors' layout ({err})") from None


def _is_authors_layout(tensors: dict) -> bool:
    return {"linear_head.weight", "positional_encoding.weight", "embedding.weight"} <= set(tensors) and any(
        _AUTHORS_LAYER_KEY.match(k) for k in tensors
    )


def _check_state(model: TracedModel, tensors: dict[str, torch.Tensor], name: str) -> None:
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    problems = []
    if missing:
        problems.append(f"missing tensors {missing[:5]}" + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""))
    if unexpected:
        problems.append(
            f"unexpected tensors {unexpected[:5]}" + (f" and {len(unexpected) - 5} more" if len(unexpected) > 5 else "")
        )
    wrong = [
        f"{k} is {list(tensors[k].shape)}, expected {list(s)}"
        for k, s in expected.items()
        if k in tensors and tuple(tensors[k].shape) != s
    ]
    if wrong:
        problems.append("wrong shapes: " + "; ".join(wrong[:5]))
    if problems:
        raise CheckpointError(f"{name}: the weights do not fit a {model.arch} model with this config: " + "; ".join(problems))
    bad = [k for k, v in tensors.items() if not torch.isfinite(v).all()]
    if bad:
        raise CheckpointError(f"{name}: tensors contain NaN or Inf values: {bad[:5]}")


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

    `n_heads` is needed for the authors' layout; `task`, `n` and `encoding` fill in (or override)
    what the metadata says; other keyword arguments override config fields (e.g. `eps=0.0`).
    Raises `CheckpointError` for any unusable file or argument.
    """
    data, name = _read_source(source, size_cap)
    header = _parse_header(data, name)
    meta = header.get("__metadata__") or {}
    try:
        tensors = safetensors.torch.load(data)
    except Exception as err:  # the library raises several types for damaged files
        raise CheckpointError(f"{name}: cannot read the tensors ({err})") from None
    try:
        return _build_checkpoint(tensors, meta, name, n_heads, task, n, encoding, device, config_overrides)
    except CheckpointError:
        raise
    except (ValueError, TypeError, KeyError, RuntimeError) as err:
        raise CheckpointError(f"{name}: {err}") from None


def _build_checkpoint(tensors, meta, name, n_heads, task, n, encoding, device, config_overrides) -> Checkpoint:
    if meta.get("format") == FORMAT:
        arch = meta.get("arch")
        if arch not in ARCHITECTURES:
            raise CheckpointError(f"{name}: unknown architecture '{arch}' in the metadata")
        config_fields = _decode_json(meta, "config", name)
        if n_heads is not None:
            config_fields["n_heads"] = int(n_heads)
        layout = FORMAT
    elif _is_authors_layout(tensors):
        arch, config_fields, layout = "encoder", _authors_config(tensors, n_heads, name), "authors"
    else:
        raise CheckpointError(
            f"{name}: not a sensviz checkpoint (no sensviz metadata) and not in the authors' key layout "
            "(embedding.weight, positional_encoding.weight, encoders.layers.*, linear_head.*)"
        )
    config = replace(config_from_dict(arch, config_fields), **config_overrides)
    model = build_model(arch, config)
    _check_state(model, tensors, name)
    model.load_state_dict({k: v.to(torch.float32) for k, v in tensors.items()}, strict=True)
    model.eval()
    if device is not None:
        model.to(device)

    metadata = _decode_metadata(meta, name)
    if task is not None:
        task = get_task(task)
    elif "task" in metadata:
        task = task_from_spec(metadata["task"])
    if n is None and "n" in metadata:
        n = int(metadata["n"])
    if n is not None and not 1 <= int(n) <= config.max_len:
        raise CheckpointError(f"{name}: n={n} is outside the model's positional range 1..{config.max_len}")
    if encoding is None:
        encoding = metadata.get("target_encoding", ZERO_ONE.name)
    if isinstance(encoding, str):
        encoding = get_encoding(encoding)
    return Checkpoint(
        model=model,
        config=config,
        metadata=metadata,
        task=task,
        n=None if n is None else int(n),
        encoding=encoding,
        layout=layout,
        source=name,
    )


def convert_torch_file(pt_path, out_path, n_heads: int, task: Task | str | None = None, n: int | None = None) -> Path:
    """Convert the authors' `.pt` state dict into a sensviz safetensors checkpoint.

    The only place that reads a pickle-based file, with `torch.load(weights_only=True)`, which
    loads tensors and plain containers and refuses arbitrary objects.
    """
    try:
        state = torch.load(pt_path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for foreign files
        raise CheckpointError(f"{pt_path}: cannot read it as a PyTorch state dict ({err})") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{pt_path}: expected a state dict (a mapping of names to tensors)")
    buffer = io.BytesIO(safetensors.torch.save({k: v.contiguous() for k, v in state.items()}))
    checkpoint = load_checkpoint(buffer, n_heads=n_heads, task=task, n=n)
    return save_checkpoint(checkpoint.model, out_path, task=checkpoint.task, n=checkpoint.n,
                           training={"converted_from": str(pt_path)})


def file_hash(path) -> str:
    """The sha256 of a file's content (hex), for caches and manifests."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
