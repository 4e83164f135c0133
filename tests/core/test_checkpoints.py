"""Checkpoint round trips, the authors' layout, and every bad file."""

import io
import json
import struct

import pytest
import safetensors.torch
import torch
from helpers.core import authors_file
from reference import AuthorsModel

import sensviz as sv
from sensviz import cube
from sensviz.checkpoints import CheckpointError, convert_torch_file, load_checkpoint, save_checkpoint


def test_round_trip_is_bit_identical(tmp_path, any_model):
    path = save_checkpoint(any_model, tmp_path / "m.safetensors", task="majority", n=7, encoding="pm1",
                           training={"steps": 3}, extra={"note": "x"})
    ck = load_checkpoint(path)
    a, b = any_model.state_dict(), ck.model.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert ck.config == any_model.config and ck.arch == any_model.arch
    assert ck.task == sv.get_task("majority") and ck.n == 7 and ck.encoding is sv.PM1
    assert ck.metadata["training"] == {"steps": 3} and ck.metadata["extra"] == {"note": "x"}
    bits = cube.vertices(7)
    with torch.no_grad():
        assert torch.equal(ck.model(bits), any_model.eval()(bits))


def test_bytes_and_file_objects_load_too(encoder_model):
    data = sv.checkpoint_bytes(encoder_model, task="parity", n=4)
    assert load_checkpoint(data).n == 4
    assert load_checkpoint(io.BytesIO(data)).task == sv.get_task("parity")


def test_overrides_replace_metadata(tmp_path, formal_model):
    path = save_checkpoint(formal_model, tmp_path / "f.safetensors", task="parity", n=6)
    ck = load_checkpoint(path, task="first", n=5, eps=0.0)
    assert ck.task == sv.get_task("first") and ck.n == 5 and ck.config.eps == 0.0


def test_authors_state_dict_loads_and_reproduces_torch_outputs(tmp_path):
    reference, path = authors_file(tmp_path, n_layers=3, d=24, heads=3, max_len=11)
    ck = load_checkpoint(path, n_heads=3, task="parity", n=8)
    assert ck.layout == "authors" and ck.arch == "encoder"
    assert (ck.config.d_model, ck.config.n_layers, ck.config.max_len, ck.config.d_ff) == (24, 3, 11, 24)
    bits = cube.vertices(8)
    with torch.no_grad():
        assert torch.allclose(ck.model(bits), reference(bits), atol=1e-5)


def test_authors_layout_needs_the_number_of_heads(tmp_path):
    _, path = authors_file(tmp_path)
    with pytest.raises(CheckpointError, match="number of attention heads"):
        load_checkpoint(path)


def test_convert_reads_pt_with_weights_only_and_writes_safetensors(tmp_path):
    reference, _ = authors_file(tmp_path)
    pt = tmp_path / "model.pt"
    torch.save(reference.state_dict(), pt)
    out = convert_torch_file(pt, tmp_path / "converted.safetensors", n_heads=2, task="first", n=6)
    ck = load_checkpoint(out)
    assert ck.layout == "sensviz" and ck.task == sv.get_task("first") and ck.n == 6
    with torch.no_grad():
        assert torch.allclose(ck.model(cube.vertices(6)), reference(cube.vertices(6)), atol=1e-5)


def test_convert_refuses_pickled_objects(tmp_path):
    pt = tmp_path / "evil.pt"
    torch.save({"model": object.__new__(AuthorsModel)}, pt)
    with pytest.raises(CheckpointError, match="cannot read"):
        convert_torch_file(pt, tmp_path / "x.safetensors", n_heads=2)


def test_a_wrong_pt_file_gets_a_message_that_names_it_and_says_what_it_is(tmp_path):
    """A PyTorch file read as safetensors (`sensviz inspect model.pt`) says how to convert it; `convert` of a file
    torch.save did not write says so before torch reads it, a truncated one says it may be truncated, and a model
    refused after conversion names the .pt file, not "<upload>"."""
    reference, _ = authors_file(tmp_path)
    pt = tmp_path / "model.pt"
    torch.save(reference.state_dict(), pt)
    told = r"model\.pt: not a safetensors file \(it starts as a file torch\.save writes: .*sensviz convert .*--task T --n N"
    with pytest.raises(CheckpointError, match=told):
        load_checkpoint(pt)
    notes = tmp_path / "notes.pt"
    notes.write_text("my notes on the run\n")
    with pytest.raises(CheckpointError, match=r"notes\.pt: not a file torch\.save wrote"):
        convert_torch_file(notes, tmp_path / "x.safetensors", n_heads=2)
    cut = tmp_path / "cut.pt"
    cut.write_bytes(pt.read_bytes()[: pt.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=r"cut\.pt: cannot read it as a PyTorch state dict; the file may be truncated"):
        convert_torch_file(cut, tmp_path / "x.safetensors", n_heads=2)
    with pytest.raises(CheckpointError, match=r"model\.pt: n=16 "):
        convert_torch_file(pt, tmp_path / "x.safetensors", n_heads=2, task="first", n=16)


def _valid_bytes(model, **meta):
    return sv.checkpoint_bytes(model, task="parity", n=6, **meta)


def _rewrite(model, change):
    """A checkpoint whose tensors went through `change(dict)` but keep the sensviz metadata."""
    data = _valid_bytes(model)
    tensors = safetensors.torch.load(data)
    header_len = struct.unpack("<Q", data[:8])[0]
    metadata = json.loads(data[8 : 8 + header_len])["__metadata__"]
    change(tensors)
    return safetensors.torch.save(tensors, metadata)


BAD_FILES = {
    "empty": lambda m: b"",
    "not safetensors": lambda m: b"PK\x03\x04 this is a zip file, not a checkpoint" * 3,
    "truncated": lambda m: _valid_bytes(m)[:-100],
    "truncated header": lambda m: _valid_bytes(m)[:40],
    "corrupt header": lambda m: (lambda d: d[:8] + b"{" * 8 + d[16:])(_valid_bytes(m)),
    "missing tensor": lambda m: _rewrite(m, lambda t: t.pop("linear_head.bias")),
    "unexpected tensor": lambda m: _rewrite(m, lambda t: t.__setitem__("extra.weight", torch.zeros(3))),
    "wrong shape": lambda m: _rewrite(m, lambda t: t.__setitem__("linear_head.weight", torch.zeros(1, 7))),
    "wrong dtype": lambda m: _rewrite(m, lambda t: t.__setitem__("linear_head.bias", torch.zeros(1, dtype=torch.int64))),
    "nan": lambda m: _rewrite(m, lambda t: t["linear_head.weight"].fill_(float("nan"))),
    "inf": lambda m: _rewrite(m, lambda t: t["embedding.weight"].__setitem__((0, 0), float("inf"))),
    "unknown layout": lambda m: safetensors.torch.save({"w": torch.zeros(2)}),
    "bad config json": lambda m: safetensors.torch.save(
        {"w": torch.zeros(2)}, {"format": "sensviz", "format_version": "1", "arch": "encoder", "config": "{oops"}),
    "unknown config field": lambda m: safetensors.torch.save(
        {"w": torch.zeros(2)}, {"format": "sensviz", "format_version": "1", "arch": "encoder", "config": '{"width": 3}'}),
    "unknown arch": lambda m: safetensors.torch.save(
        {"w": torch.zeros(2)}, {"format": "sensviz", "format_version": "1", "arch": "rnn", "config": "{}"}),
    "unknown format_version": lambda m: safetensors.torch.save(
        {"w": torch.zeros(2)}, {"format": "sensviz", "format_version": "2", "arch": "encoder", "config": "{}"}),
    "nested header": lambda m: struct.pack("<Q", 40_008) + b'{"w":' + b"[" * 20_000 + b"]" * 20_000 + b"}   ",
}
BAD_FILE_MESSAGES = {
    "empty": "not a safetensors file", "not safetensors": "not a safetensors file", "truncated": "truncated",
    "truncated header": "truncated", "corrupt header": "header is corrupt", "missing tensor": "missing tensors",
    "unexpected tensor": "unexpected tensors", "wrong shape": "wrong shapes", "wrong dtype": "must be floating point",
    "nan": "NaN or Inf", "inf": "NaN or Inf", "unknown layout": "not in the authors' key layout",
    "bad config json": "'config' is not valid JSON", "unknown config field": "unknown encoder config fields",
    "unknown arch": "unknown architecture 'rnn'", "unknown format_version": "format_version '2'",
    "nested header": "nests too deeply",
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_every_bad_file_gives_a_checkpoint_error(case, encoder_model, tmp_path):
    data = BAD_FILES[case](encoder_model)
    with pytest.raises(CheckpointError, match=BAD_FILE_MESSAGES[case]) as info:
        load_checkpoint(data)
    assert len(str(info.value)) > 20 and "\n" not in str(info.value)
    path = tmp_path / "bad.safetensors"
    path.write_bytes(data)
    with pytest.raises(CheckpointError):
        load_checkpoint(path)


def test_size_cap_is_checked_before_reading(tmp_path, encoder_model):
    path = save_checkpoint(encoder_model, tmp_path / "m.safetensors")
    with pytest.raises(CheckpointError, match="size cap"):
        load_checkpoint(path, size_cap=1000)
    with pytest.raises(CheckpointError, match="size cap"):
        load_checkpoint(path.read_bytes(), size_cap=1000)


def test_missing_file_and_bad_arguments(tmp_path, encoder_model):
    with pytest.raises(CheckpointError, match="no such file"):
        load_checkpoint(tmp_path / "nope.safetensors")
    data = _valid_bytes(encoder_model)
    with pytest.raises(CheckpointError, match="positional range"):
        load_checkpoint(data, n=50)
    with pytest.raises(CheckpointError, match="unknown task"):
        load_checkpoint(data, task="parody")
    with pytest.raises(CheckpointError, match="target encoding"):
        load_checkpoint(data, encoding="binary")


def test_the_same_checkpoint_is_the_same_bytes(encoder_model):
    first = sv.checkpoint_bytes(encoder_model, task="parity", n=6, training={"a": 1, "b": [2]}, extra={"z": "ü"})
    assert all(sv.checkpoint_bytes(encoder_model, task="parity", n=6, training={"a": 1, "b": [2]}, extra={"z": "ü"}) == first
               for _ in range(5))
    assert load_checkpoint(first).metadata["extra"] == {"z": "ü"}


def test_a_table_task_is_a_tensor_beside_the_weights_and_older_files_still_load():
    from sensviz.checkpoints import TASK_TABLE, _state_tensors, checkpoint_metadata

    model = sv.build_model("encoder", d_model=8, n_layers=1, n_heads=2, max_len=16, seed=0)
    bits = "".join("01"[(i * 7919) % 3 % 2] for i in range(2**16))
    data = sv.checkpoint_bytes(model, task=f"table:{bits}", n=16, training={"request": {"task": f"table:{bits}"}})
    (header_len,) = struct.unpack("<Q", data[:8])
    assert header_len < 8192  # neither the spec nor the training summary repeats the 65,536 bits
    ck = sv.load_checkpoint(data)
    assert ck.task.label == f"table:{bits}" and ck.n == 16
    assert "…(65,542 chars)#" in ck.metadata["training"]["request"]["task"]  # described, shortened
    meta = checkpoint_metadata(model, n=2)
    meta["task"] = json.dumps({"name": "table", "bits": "0110"})  # a file written before the tensor
    assert sv.load_checkpoint(safetensors.torch.save(_state_tensors(model), meta)).task.label == "table:0110"
    tensors = _state_tensors(model)
    tensors[TASK_TABLE] = torch.zeros(1)  # the table tensor must be packed bits
    meta["task"] = json.dumps({"name": "table", "n": 2, "tensor": TASK_TABLE})
    with pytest.raises(sv.CheckpointError, match="a task table must be U8"):
        sv.load_checkpoint(safetensors.torch.save(tensors, meta))


@pytest.mark.parametrize("path, says", [("/dev/zero", "character device"), ("/tmp", "a folder")])
def test_a_path_that_is_not_a_file_is_named_for_what_it_is(path, says):
    with pytest.raises(CheckpointError, match=says):
        sv.load_checkpoint(path)


def test_an_authors_file_read_at_a_length_below_its_positional_table_gets_a_note(tmp_path):
    """The authors' configuration trains at the positional table's length (model.max_len = basic.max_len = min_len):
    a shorter n given for such a file is noted, not refused (the model reads every length up to the table's)."""
    _, path = authors_file(tmp_path)  # a table of 10 positions
    shorter = load_checkpoint(path, n_heads=2, n=6)
    assert shorter.n == 6 and any("less than the positional table's 10 positions" in note for note in shorter.notes)
    assert not any("positional table's" in note for note in load_checkpoint(path, n_heads=2, n=10).notes)


def test_same_weights_sees_through_metadata_and_not_past_one_bit():
    model = sv.build_model("encoder", d_model=8, n_layers=1, n_heads=2, max_len=6, seed=0)
    again = load_checkpoint(io.BytesIO(sv.checkpoint_bytes(model, task="first", n=4, training={"job": "another"})))
    assert sv.checkpoints.same_weights(model, again.model)  # another file, the same weights
    with torch.no_grad():
        next(again.model.parameters()).view(-1)[0] += 2.0**-20
    assert not sv.checkpoints.same_weights(model, again.model)
    assert not sv.checkpoints.same_weights(model, sv.build_model("encoder", d_model=8, n_layers=1, n_heads=2, max_len=6,
                                                                 seed=1))
