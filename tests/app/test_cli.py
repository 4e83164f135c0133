"""The `sensviz` command: JSON on stdout, readable errors on stderr, non-zero exit."""

import json
import math
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.core import leftovers, read_only
from helpers.server import children_of

import sensviz as sv
from sensviz.cli import RENAMED, RENAMED_UNTIL, build_parser, main

ROOT = Path(__file__).resolve().parents[2]
CEILING_S = 180.0
"""Longest wait for a command to start or to end (a busy machine)."""


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def test_task_info_exact(capsys):
    code, out, _ = run(capsys, "task-info", "--task", "parity", "--n", "6")
    assert code == 0
    assert out["avg_sensitivity"] == 6 and out["max_sensitivity"] == 6 and out["exact"] is True
    assert out["degree_profile"] == [0, 0, 0, 0, 0, 0, 1]


def test_task_info_above_the_exact_limit_is_labelled_an_estimate(capsys):
    code, out, _ = run(capsys, "task-info", "--task", "majority", "--n", "25", "--samples", "2000", "--seed", "1")
    assert code == 0 and out["exact"] is False and out["degree_profile"] is None
    expected = sv.tasks.majority_avg_sensitivity(25)
    assert abs(out["avg_sensitivity"] - expected) < 4 * out["stderr"]
    assert out["n_samples"] == 2000


@pytest.mark.parametrize("argv,message", [
    (["task-info", "--task", "parody", "--n", "4"], "unknown task"),
    (["task-info", "--task", "table:0110", "--n", "3"], "only for n=2"),
    (["task-info", "--task", "sparse_parity:k=5", "--n", "3"], "needs n >= k"),
])
def test_task_info_errors(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err and "Traceback" not in err


def test_inspect_sensviz_checkpoint_and_dump(capsys, tmp_path, encoder_model):
    path = sv.save_checkpoint(encoder_model, tmp_path / "m.safetensors", task="parity", n=6)
    dump = tmp_path / "d.npz"
    code, out, _ = run(capsys, "inspect", str(path), "--dump", str(dump))
    assert code == 0
    for key in ("arch", "task", "n", "d_model", "n_layers", "n_heads", "n_params", "param_norm", "sensitivity",
                "blowup", "tradeoff", "sharpness", "limit", "proxy", "settings", "notes"):
        assert key in out, key
    for key in ("accuracy", "avg_sensitivity", "avg_sensitivity_real", "degree_profile", "exact"):
        assert key in out["sensitivity"], key
    assert out["arch"] == "encoder" and out["task"] == "parity" and out["n_params"] == encoder_model.n_params()
    assert sum(out["sensitivity"]["degree_profile"]) == pytest.approx(1.0)
    assert out["notes"] == {} and out["settings"] == sv.measure.MeasureSettings().__dict__
    with np.load(dump) as arrays:
        assert arrays["output"].shape == (64,)
        assert arrays["attention"].shape == (64, 2, 2, 6, 6)
        assert arrays["ln_factor"].shape == (64, 4, 6)
        bits = sv.cube.vertices(6)
        with torch.no_grad():
            assert np.allclose(arrays["output"], encoder_model.eval()(bits).numpy(), atol=1e-6)


def test_inspect_authors_file_needs_heads_and_infers_the_length(capsys, tmp_path):
    import safetensors.torch
    from reference import AuthorsModel

    path = tmp_path / "a.safetensors"
    safetensors.torch.save_file(AuthorsModel(8, 2, 1, max_len=10).state_dict(), path)
    code, _, err = run(capsys, "inspect", str(path))
    assert code == 2 and "--n-heads" in err
    code, out, err = run(capsys, "inspect", str(path), "--n-heads", "2", "--measure-inputs", "64", "--directions", "4")
    assert code == 0 and out["n"] == 10 and "n=10 was inferred from the positional table's length" in err
    assert any("inferred" in note for note in out["file_notes"])
    code, out, _ = run(capsys, "inspect", str(path), "--n-heads", "2", "--n", "5", "--task", "first")
    assert code == 0 and out["layout"] == "authors" and 0 <= out["sensitivity"]["accuracy"] <= 1


def test_inspect_bad_file(capsys, tmp_path):
    path = tmp_path / "x.safetensors"
    path.write_bytes(b"not a checkpoint at all")
    code, _, err = run(capsys, "inspect", str(path))
    assert code == 2 and "not a safetensors file" in err


def test_console_script_runs_as_a_subprocess():
    proc = subprocess.run([sys.executable, "-m", "sensviz.cli", "task-info", "--task", "first", "--n", "3"],
                          capture_output=True, text=True, check=True)
    assert json.loads(proc.stdout)["avg_sensitivity"] == 1.0


def test_core_never_imports_streamlit():
    code = (
        "import importlib, pkgutil, sys, sensviz\n"
        "for m in pkgutil.walk_packages(sensviz.__path__, 'sensviz.'): importlib.import_module(m.name)\n"
        "print('streamlit' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


def test_train_writes_a_checkpoint_and_a_json_summary(capsys, tmp_path):
    out = tmp_path / "m.safetensors"
    code, summary, err = run(capsys, "train", "--task", "first", "--n", "4", "--d-model", "8", "--n-layers", "1",
                             "--steps", "20", "--batch-size", "16", "--eval-interval", "10", "--lr", "3e-3",
                             "--seed", "2", "--out", str(out))
    assert code == 0
    assert summary["stop_reason"] == "completed" and summary["steps"] == 20 and summary["checkpoint"] == str(out)
    assert summary["config"]["lr"] == 3e-3 and summary["config"]["seed"] == 2 and summary["model_config"]["max_len"] == 4
    assert "step     20/20" in err  # progress on stderr
    ck = sv.load_checkpoint(out)
    assert ck.task == sv.get_task("first") and ck.n == 4 and ck.metadata["training"]["final"] == summary["final"]


@pytest.mark.parametrize("argv,message", [
    (["--lr", "0"], "argument --lr: lr must be above 0 (limit 'lr')"),
    (["--lr", "1e38"], "argument --lr: lr must be at most 1e+06 (limit 'lr')"),
    (["--batch-size", "1000000000"], "argument --batch-size: batch_size must be"),
    (["--d-model", "20000"], "argument --d-model: d_model must be at most 2,048 (limit 'd_model')"),
    (["--max-len", "1000000000"], "argument --max-len"),
    (["--n", "1000000"], "argument --n: n must be"),
    (["--eps", "nan"], "argument --eps: eps must be a finite number"),
    (["--n", "10", "--max-len", "8"], "max_len=8"),
    (["--task", "parody"], "unknown task"),
    (["--arch", "scratchpad", "--task", "first"], "computes PARITY"),
    (["--train-size", "100"], "more than the 2**6"),
    (["--device", "toaster"], "unknown device"),
])
def test_train_bad_arguments_exit_2_with_a_clear_message(capsys, argv, message):
    base = {"--task": "parity", "--n": "6", "--steps": "2", "--d-model": "8"}
    for flag, value in zip(argv[::2], argv[1::2]):
        base[flag] = value
    code, _, err = run(capsys, "train", *[x for kv in base.items() for x in kv])
    assert code == 2 and message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_zoo_verify_and_build(capsys, tmp_path, monkeypatch):
    from helpers.core import CHECKPOINTS
    from helpers.core import TINY_ZOO as TINY

    from sensviz import zoo

    code, out, _ = run(capsys, "zoo", "verify", "--dir", str(CHECKPOINTS))
    assert code == 0 and out["verified"] == len(zoo.RECIPES)
    code, _, err = run(capsys, "zoo", "verify", "--dir", str(tmp_path))
    assert code == 2 and "no zoo manifest" in err
    monkeypatch.setattr(zoo, "RECIPES", TINY)
    code, out, err = run(capsys, "zoo", "build", "--dir", str(tmp_path), "--threads", str(torch.get_num_threads()))
    assert code == 0 and out["entries"] == len(TINY) and "training encoder-first-n3" in err


def test_inspect_reports_the_landscape(capsys, tmp_path, any_model):
    path = sv.save_checkpoint(any_model, tmp_path / "m.safetensors", task="parity", n=5)
    code, out, _ = run(capsys, "inspect", str(path), "--rho", "0.05", "--directions", "8", "--proxy-draws", "8",
                       "--measure-seed", "3", "--with", "hessian")
    assert code == 0
    blowup = out["blowup"]
    for key in ("mean", "mean_sq", "max", "log_mean", "per_ln", "authors"):
        assert key in blowup, key
    assert blowup["exact"] is True and blowup["n_inputs"] == 32 and len(blowup["per_ln"]) == len(any_model.layernorms())
    assert blowup["mean_sq"] >= blowup["mean"] ** 2
    assert out["tradeoff"]["param_norm"] == pytest.approx(any_model.param_norm())
    assert out["tradeoff"]["blowup_mean_sq"] == blowup["mean_sq"]
    sharp = out["sharpness"]
    assert (sharp["rho"], sharp["n_directions"], sharp["n_inputs"], sharp["seed"]) == (0.05, 8, 32, 3)
    assert sharp["value"] > 0 and sharp["stderr"] > 0 and out["limit"]["value"] > 0
    expected = sv.sharpness.sharpness(any_model, sv.cube.vertices(5), 0.05, 8, 3)
    assert sharp["value"] == pytest.approx(expected.value) and out["limit"]["value"] == pytest.approx(expected.limit)
    assert out["proxy"]["n_draws"] == 8 and out["proxy"]["eps"] == 0.02
    assert out["hessian"]["method"] == "lanczos" and out["hessian"]["residuals"][0] >= 0
    assert out["inputs"] == {"kind": "cube", "n_inputs": 32, "seed": None}


def test_inspect_samples_the_landscape_inputs_above_the_cap(capsys, tmp_path, encoder_model):
    path = sv.save_checkpoint(encoder_model, tmp_path / "m.safetensors", task="first", n=11)
    code, out, _ = run(capsys, "inspect", str(path), "--directions", "4", "--measure-inputs", "100", "--exact-limit", "9",
                       "--samples", "200")
    assert code == 0
    assert out["inputs"] == {"kind": "sample", "n_inputs": 100, "seed": 0}
    assert out["sharpness"]["n_inputs"] == 100
    assert out["blowup"]["exact"] is False and out["blowup"]["n_inputs"] == 200
    assert out["tradeoff"]["exact"] is False


@pytest.mark.parametrize("dims,extra,rows", [
    ("1", [], 7),
    ("2", ["--normalization", "layer", "--skip-bias-ln"], 49),
    ("2", ["--hessian"], 49),
])
def test_slice_writes_a_tidy_csv(capsys, tmp_path, any_model, dims, extra, rows):
    import pandas as pd

    path = sv.save_checkpoint(any_model, tmp_path / "m.safetensors", task="parity", n=4)
    out_csv = tmp_path / "slice.csv"
    code, out, _ = run(capsys, "slice", str(path), "--dims", dims, "--steps", "7", "--span", "0.5", "--out",
                       str(out_csv), *extra)
    assert code == 0 and out["rows"] == rows
    frame = pd.read_csv(out_csv)
    assert list(frame.columns) == ["alpha", "beta", "loss", "accuracy"][: int(dims)] + ["loss", "accuracy"]
    assert len(frame) == rows and frame.alpha.max() == pytest.approx(0.5)
    bits = sv.cube.vertices(4)
    with torch.no_grad():
        own = ((any_model(bits).double() - sv.get_task("parity")(bits).double()) ** 2).mean().item()
    assert out["centre_loss"] == pytest.approx(own, rel=1e-6)


def test_slice_to_another_checkpoint(capsys, tmp_path, encoder_model):
    import pandas as pd

    path = sv.save_checkpoint(encoder_model, tmp_path / "a.safetensors", task="first", n=4)
    other = sv.build_model("encoder", encoder_model.config, seed=5)
    other_path = sv.save_checkpoint(other, tmp_path / "b.safetensors", task="first", n=4)
    out_csv = tmp_path / "line.csv"
    code, out, _ = run(capsys, "slice", str(path), "--to", str(other_path), "--steps", "5", "--out", str(out_csv))
    assert code == 0
    frame = pd.read_csv(out_csv)
    assert frame.alpha.tolist() == pytest.approx([-0.5, 0.0, 0.5, 1.0, 1.5])
    bits = sv.cube.vertices(4)
    with torch.no_grad():
        other_loss = ((other(bits).double() - bits[:, 0].double()) ** 2).mean().item()
    assert frame.loss[3] == pytest.approx(other_loss, rel=1e-5)
    line = run(capsys, "slice", str(path), "--to", str(other_path), "--steps", "41", "--out", str(out_csv))[1]
    alphas = pd.read_csv(out_csv).alpha
    assert 0.0 in alphas.tolist() and alphas[12] == 0.1  # on the grid exactly (linspace gave 2.8e-17, 0.10000000000000003)
    assert line["centre_loss"] == pytest.approx(frame.loss[1], rel=1e-6)  # the model's own loss


def test_slice_errors(capsys, tmp_path, encoder_model):
    path = sv.save_checkpoint(encoder_model, tmp_path / "a.safetensors", task="first", n=4)
    no_task = sv.save_checkpoint(encoder_model, tmp_path / "t.safetensors", n=4)
    wider = sv.save_checkpoint(sv.build_model("encoder", d_model=8, max_len=12, seed=0), tmp_path / "w.safetensors")
    out = str(tmp_path / "s.csv")
    cases = [
        (["slice", str(path), "--to", str(path), "--dims", "2", "--out", out], "use --dims 1"),
        (["slice", str(path), "--to", str(path), "--hessian", "--out", out], "pass one of them"),
        (["slice", str(no_task), "--out", out], "pass --task"),
        (["slice", str(path), "--to", str(wider), "--out", out], "same architecture and config"),
        (["slice", str(path), "--span", "-1", "--out", out], "argument --span: must be above 0 (limit 'span')"),
        (["slice", str(path), "--span", "inf", "--out", out], "argument --span: must be a finite number"),
        (["slice", str(path), "--dims", "2", "--steps", "1000", "--out", out],
         "the grid points must be at most 50,000 (limit 'grid_points'), got 1,000,000"),
        (["slice", str(path), "--steps", "100000000", "--out", out], "argument --steps: must be at most 1,001"),
        (["slice", str(path), "--out", str(path / "s.csv")], "Not a directory"),
    ]
    for argv, message in cases:
        code, _, err = run(capsys, *argv)
        assert code == 2 and message in err and "Traceback" not in err, (argv, err)


TINY_SPEC = """
experiment = "length_scaling"
[defaults]
d_model = 8
steps = 10
eval_interval = 5
measure_inputs = 16
proxy_draws = 2
directions = 2
n = 4
[grid]
task = ["parity", "first"]
"""


def test_sweep_and_report_happy_path(capsys, tmp_path):
    spec = tmp_path / "tiny.toml"
    spec.write_text(TINY_SPEC)
    out = tmp_path / "out"
    code, summary, err = run(capsys, "sweep", str(spec), "--out", str(out))
    assert code == 0, err
    assert summary["experiment"] == "length_scaling" and summary["runs"] == 2 and summary["finished"] == 2
    assert summary["failed"] == 0 and summary["errors"] == []
    assert "[2/2]" in err and (out / "runs.parquet").is_file() and len(list((out / "checkpoints").iterdir())) == 2
    code, again, err = run(capsys, "sweep", str(spec), "--out", str(out))
    assert code == 0 and "2 already finished, 0 to run" in err
    code, written, err = run(capsys, "report", str(out), "--out", str(tmp_path / "r.html"))
    assert code == 0, err
    assert written["sweeps"] == ["length_scaling"] and written["figures"] == 1
    assert "Length scaling" in (tmp_path / "r.html").read_text()


@pytest.mark.parametrize("text,argv,message", [
    (None, [], "no such sweep spec"),
    ("experiment = 'length_scaling'\n[grid]\nn = [4]\ntask = ['parity']\nweight_decy = [0.1]", [],
     "unknown settings ['weight_decy']"),
    ("experiment = 'lenght_scaling'\n[grid]\nn = [4]", [], "unknown experiment 'lenght_scaling'"),
    (TINY_SPEC, ["--scale", "paper"], "unknown scale 'paper'"),
    (TINY_SPEC.replace("d_model = 8", "d_model = 8\nn_heads = 3"), [], "d_model=8 must be divisible by n_heads=3"),
    (TINY_SPEC.replace("d_model = 8", "d_model = 8\nlr = -1.0"), [], "lr must be above 0 (limit 'lr')"),
    (TINY_SPEC, ["--address", "10.0.0.1:6379"], "--address names a Ray cluster"),
    (TINY_SPEC, ["--executor", "ray", "--threads", "2"], "--threads sets the torch threads of local worker"),
    ("experiment = 'length_scaling'\n[grid\n", [], "not valid TOML"),
])
def test_sweep_errors(capsys, tmp_path, text, argv, message):
    spec = tmp_path / "spec.toml"
    if text is not None:
        spec.write_text(text)
    code, _, err = run(capsys, "sweep", str(spec), "--out", str(tmp_path / "out"), *argv)
    assert code == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "out" / "runs.parquet").exists()


def test_sweep_exits_1_when_a_run_failed_and_2_when_it_cannot_write(capsys, tmp_path):
    spec = tmp_path / "tiny.toml"
    spec.write_text(TINY_SPEC.replace('task = ["parity", "first"]', 'task = ["parity", "first"]\ndevice = ["cpu", "cuda"]'))
    code, summary, err = run(capsys, "sweep", str(spec), "--out", str(tmp_path / "out"))
    assert code == 1 and summary["finished"] == 2 and summary["failed"] == 2  # no CUDA device here
    assert len(summary["errors"]) == 1 and "cannot use device 'cuda'" in summary["errors"][0]
    (tmp_path / "file").write_text("")
    code, _, err = run(capsys, "sweep", str(spec), "--out", str(tmp_path / "file"))
    assert code == 2 and "is a file; name a folder or a new path" in err and "Traceback" not in err


def test_sweep_and_report_argument_errors(capsys, tmp_path):
    assert main(["sweep", "spec.toml", "--out", str(tmp_path), "--workers", "0"]) == 2
    assert "argument --workers: must be at least 1 (limit 'workers'), got 0" in capsys.readouterr().err
    assert main(["sweep", "spec.toml", "--out", str(tmp_path), "--executor", "slurm"]) == 2
    assert "invalid choice: 'slurm'" in capsys.readouterr().err
    code, _, err = run(capsys, "report", str(tmp_path), "--out", str(tmp_path / "r.html"))
    assert code == 2 and "no sweep results here" in err


def test_python_dash_m_and_help_list_the_registered_tasks(capsys):
    assert main(["train", "--help"]) == 0
    text = capsys.readouterr().out
    for name in sv.tasks.TASKS:
        assert name in text
    for flag in ("--batch-size", "--weight-decay", "--target-accuracy", "--d-model", "--n-layers"):
        assert flag in text  # generated from TrainConfig and ModelSettings


def test_inspect_a_diverged_checkpoint_reports_what_it_cannot_measure(capsys, tmp_path):
    from sensviz.training import TrainConfig, train

    model = sv.build_model("encoder", d_model=8, n_layers=1, n_heads=2, max_len=5, seed=0)
    assert train(model, "parity", TrainConfig(n=5, batch_size=32, steps=50, lr=1e5, eval_interval=5)
                 ).stop_reason.startswith("diverged")
    with torch.no_grad():  # how far a run diverges before its restore depends on rounding: blow up the read-out
        model.linear_head.weight.mul_(1e20)  # so that the outputs stay finite (~1e25) and their squares do not
    path = sv.save_checkpoint(model, tmp_path / "diverged.safetensors", task="parity", n=5)
    code, out, err = run(capsys, "inspect", str(path), "--with", "hessian", "radii")
    assert code == 0 and "Traceback" not in err
    asked = set(sv.measure.default_quantities(model)) | {"hessian", "radii"}
    assert out["notes"]  # what could not be measured, and why
    for name in asked:
        assert out[name] is not None or name in out["notes"], name  # a value, or null with a reason


def bad_targets(folder: Path, want_folder: bool) -> list[tuple[str, Path, str]]:
    """Places no output may replace, made in `folder`: what each is, its path, and what the refusal
    says: a device, a fifo, links to those, a path under a file, and a folder (or a file, where a
    folder is wanted). Names end in .npz so that `--dump` gets to check them; benchmarks/hostile.py
    measures them too."""
    os.mkfifo(folder / "fifo.npz")
    (folder / "dir.npz").mkdir()
    (folder / "file.npz").write_text("keep")
    (folder / "null-link.npz").symlink_to("/dev/null")
    (folder / "fifo-link.npz").symlink_to(folder / "fifo.npz")
    return [("a device", Path("/dev/null"), "is a character device"),
            ("a fifo", folder / "fifo.npz", "is a fifo"),
            ("a link to a device", folder / "null-link.npz",
             f"null-link.npz (a link to {os.path.realpath('/dev/null')}) is a character device"),
            ("a link to a fifo", folder / "fifo-link.npz", f"fifo-link.npz (a link to {folder / 'fifo.npz'}) is a fifo"),
            ("a path under a file", folder / "file.npz" / "x.npz", "Not a directory"),
            ("a file", folder / "file.npz", "is a file") if want_folder else ("a folder", folder / "dir.npz", "is a folder")]


OUTPUT_COMMANDS = {  # each would fail later on (a missing input) or work for minutes: the output check comes first
    "train": (["train", "--task", "parity", "--n", "6", "--steps", "1000000", "--out"], False),
    "slice": (["slice", "missing.safetensors", "--out"], False),
    "inspect --dump": (["inspect", "missing.safetensors", "--dump"], False),
    "convert": (["convert", "missing.pt", "--n-heads", "2"], False),
    "report": (["report", "missing", "--out"], False),
    "lab": (["lab", "--out"], False),
    "fidelity": (["fidelity", "missing", "--out"], False),
    "decide": (["decide", "missing.toml", "--tables", "missing", "--out"], False),
    "sweep": (["sweep", "missing.toml", "--out"], True),
    "zoo build": (["zoo", "build", "--dir"], True),
}


@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_an_output_onto_a_device_fifo_or_folder_is_refused_before_any_work(capsys, tmp_path, command):
    argv, want_folder = OUTPUT_COMMANDS[command]
    for _, place, called in bad_targets(tmp_path, want_folder):
        code, out, err = run(capsys, *argv, str(place))
        assert code == 2 and out is None and len(err.splitlines()) == 1 and "Traceback" not in err, err
        if command == "inspect --dump" and place.suffix != ".npz":
            called = "the name must end in .npz"
        assert f"argument {'out' if command == 'convert' else argv[-1]}: {place}" in err and called in err, err
    assert stat_kinds(tmp_path) == {"dir.npz": "dir", "fifo.npz": "fifo", "file.npz": "file", "fifo-link.npz": "link",
                                    "null-link.npz": "link"}
    assert (tmp_path / "file.npz").read_text() == "keep" and leftovers(tmp_path / "dir.npz") == []
    assert os.path.realpath("/dev/null") == "/dev/null" and Path("/dev/null").is_char_device()


def stat_kinds(folder: Path) -> dict[str, str]:
    """Each name in `folder` and what it is (a link is not followed)."""
    kinds = {}
    for p in folder.iterdir():
        kinds[p.name] = ("link" if p.is_symlink() else "fifo" if p.is_fifo() else "dir" if p.is_dir() else "file")
    return kinds


def test_dump_must_end_in_npz_and_is_written_at_exactly_that_path(capsys, tmp_path, encoder_model):
    path = sv.save_checkpoint(encoder_model, tmp_path / "m.safetensors", task="parity", n=4)
    code, _, err = run(capsys, "inspect", str(path), "--dump", str(tmp_path / "X"))
    assert code == 2 and err == f"sensviz inspect: error: argument --dump: {tmp_path / 'X'}: the name must end in .npz\n"
    assert leftovers(tmp_path) == ["m.safetensors"]
    code, out, _ = run(capsys, "inspect", str(path), "--dump", str(tmp_path / "X.npz"), "--directions", "2")
    assert code == 0 and out["dump"] == str(tmp_path / "X.npz") and leftovers(tmp_path) == ["X.npz", "m.safetensors"]


def test_a_failing_write_leaves_nothing_behind(capsys, tmp_path, encoder_model, monkeypatch):
    path = sv.save_checkpoint(encoder_model, tmp_path / "m.safetensors", task="parity", n=4)

    def failing(file, **arrays):
        file.write(b"PK half a zip file")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez_compressed", failing)
    code, out, err = run(capsys, "inspect", str(path), "--dump", str(tmp_path / "d.npz"), "--directions", "2")
    assert code == 2 and out is None and err == "sensviz inspect: error: [Errno 28] No space left on device\n"
    assert leftovers(tmp_path) == ["m.safetensors"]  # no d.npz, no temporary
    folder = tmp_path / "ro"
    folder.mkdir()
    with read_only(folder):
        code, _, err = run(capsys, "slice", str(path), "--out", str(folder / "s.csv"))
    assert code == 2 and len(err.splitlines()) == 1 and "cannot write in the folder" in err
    assert leftovers(folder) == []


BUSY_CPU_S = 5.0
"""CPU seconds after which a sweep's worker process is past its imports and into its job."""


def _busy_children(pid: int) -> int:
    """How many child processes of `pid` have used `BUSY_CPU_S` of CPU (Linux /proc)."""
    busy = 0
    for child in children_of(pid):
        try:
            fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        busy += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") >= BUSY_CPU_S
    return busy


def _interrupt(argv: list[str], started: str, cwd: Path, busy_children: int = 0) -> tuple[int, list[str]]:
    """Run `python -m sensviz ARGV` in its own process group, press Ctrl-C there (SIGINT to the whole
    group, as a terminal does) once `started` shows on stderr and `busy_children` of its child
    processes are at work; the exit code and the lines on stderr after Ctrl-C."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # SIGINT as a terminal's foreground command has it: pytest run as a shell's background job (`&`, no job
    # control) inherits SIGINT ignored, and so would the command, which would then train on past Ctrl-C
    proc = subprocess.Popen([sys.executable, "-m", "sensviz", *argv], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = []
    try:
        deadline = time.monotonic() + CEILING_S
        while not any(started in line for line in lines):
            assert time.monotonic() < deadline and proc.poll() is None, ("did not start", lines)
            lines.append(proc.stderr.readline())
        while _busy_children(proc.pid) < busy_children:
            assert time.monotonic() < deadline and proc.poll() is None, ("the workers did not start", lines)
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)
        _, rest = proc.communicate(timeout=CEILING_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, rest.splitlines()


def test_ctrl_c_ends_a_command_with_exit_130_and_one_line(tmp_path):
    out = tmp_path / "m.safetensors"
    code, err = _interrupt(["train", "--task", "parity", "--n", "8", "--d-model", "8", "--steps", "1000000", "--out",
                            str(out)], "step", tmp_path)
    assert code == 130 and [line for line in err if "parity step" not in line] == ["sensviz train: interrupted"], err
    assert leftovers(tmp_path) == []  # no checkpoint and no temporary


@pytest.mark.slow  # integration: a sweep and two worker processes, one of them seconds into its job
def test_ctrl_c_ends_a_sweep_and_its_workers_with_one_line(tmp_path):
    spec = tmp_path / "long.toml"  # two jobs: a quick one, then its worker waits while the other trains on
    spec.write_text(TINY_SPEC.replace("steps = 10\n", "").replace("eval_interval = 5", "eval_interval = 1000")
                    .replace('task = ["parity", "first"]', 'task = ["parity"]\nsteps = [10, 1000000]'))
    code, err = _interrupt(["sweep", str(spec), "--out", str(tmp_path / "out"), "--workers", "2", "--threads", "1"],
                           "[1/2]", tmp_path, busy_children=1)
    assert code == 130 and err == ["sensviz sweep: interrupted"], err  # not a word from the workers
    assert len(list((tmp_path / "out" / "runs").iterdir())) == 1  # the quick run; the sweep resumes from there


@pytest.mark.parametrize("command,old,new", [(c, old, new) for c, names in RENAMED.items() for old, new in names.items()])
def test_renamed_flags_still_work_with_a_note(capsys, command, old, new):
    value = {"--normalization": "layer"}.get(new, "3")
    base = {"inspect": ["inspect", "m.safetensors"], "slice": ["slice", "m.safetensors", "--out", "s.csv"],
            "train": ["train", "--task", "parity", "--n", "6"]}[command]
    renamed = build_parser().parse_args([*base, old, value])
    assert capsys.readouterr().err == (f"sensviz {command}: note: {old} was renamed to {new} "
                                       f"(the old name works until sensviz {RENAMED_UNTIL})\n")
    assert vars(renamed) == vars(build_parser().parse_args([*base, new, value]))
    assert capsys.readouterr().err == ""


def test_the_old_spellings_are_gone_by_their_version():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    as_tuple = lambda text: tuple(int(part) for part in text.split(".")[:3])  # noqa: E731
    assert as_tuple(version) < as_tuple(RENAMED_UNTIL), (
        f"sensviz is {version}: remove the old flag spellings (sensviz.cli.RENAMED) and this test")


@pytest.mark.slow
def test_the_cli_decides_the_shipped_dynamics_tables(capsys):
    from sensviz.cli import main

    folder = ROOT / "experiments" / "results" / "decide" / "dynamics"
    assert main(["decide", str(ROOT / "experiments" / "dynamics.toml"), "--scale", "decide", "--tables", str(folder),
                 "--standard", str(ROOT / "experiments" / "results" / "standard")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["planned"] == 17 and result["other_spec_rows"] == 0
    for claim in result["claims"]:
        assert claim["power_design"] >= 0.8  # the seeds were sized for 80 % at the smallest effect
        assert claim["primary"]["test"].startswith("one-sample t")
        assert not math.isnan(claim["primary"]["estimate"])


def test_convert_prints_what_reading_the_pt_noted(capsys, tmp_path):
    """An n below the authors' positional table is noted when the .pt is read: convert prints the note (the converted
    file records its n, so a later reading has nothing left to note)."""
    from helpers.core import authors_file

    reference, _ = authors_file(tmp_path)  # a table of 10 positions
    pt = tmp_path / "model.pt"
    torch.save(reference.state_dict(), pt)
    out = tmp_path / "model.safetensors"
    code, said, _ = run(capsys, "convert", str(pt), str(out), "--n-heads", "2", "--task", "first", "--n", "6")
    assert code == 0 and said["written"] == str(out)
    assert len(said["notes"]) == 1 and "less than the positional table's 10 positions" in said["notes"][0]
    code, said, _ = run(capsys, "convert", str(pt), str(out), "--n-heads", "2", "--task", "first", "--n", "10")
    assert code == 0 and said["notes"] == []
