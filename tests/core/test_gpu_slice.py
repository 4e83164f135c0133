"""experiments/gpu_slice.py, the paper-width slice of L1 for a GPU, checked on the CPU at two steps."""

import importlib.util
import io
from pathlib import Path

import pandas as pd
import pytest
import torch

from sensviz import experiments, sweeps

PATH = Path(__file__).resolve().parents[2] / "experiments" / "gpu_slice.py"
spec = importlib.util.spec_from_file_location("gpu_slice", PATH)
gpu_slice = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_slice)


def test_the_constants_are_the_authors():
    assert (gpu_slice.D_MODEL, gpu_slice.BATCH_SIZE, gpu_slice.LR, gpu_slice.STEPS) == (128, 1024, 3e-4, 10_000)
    source = PATH.read_text()
    for name in ("D_MODEL", "N_LAYERS", "N_HEADS", "BATCH_SIZE", "STEPS", "LR", "WEIGHT_DECAY", "PROXY_EPS",
                 "PROXY_DRAWS", "LENGTHS", "SEEDS_PER_LENGTH"):
        line = next(line for line in source.splitlines() if line.startswith(f"{name} = "))
        assert "train_config.yaml" in line or "length_scaling_1.yaml" in line or "training." in line \
            or "model." in line or "measurements." in line, line  # each names where the authors set it


def test_lengths_are_spread_so_a_cut_slice_spans_the_range():
    order = gpu_slice.spread(range(4, 31))
    assert order[:3] == [4, 30, 17] and sorted(order) == list(range(4, 31))


def test_a_cpu_slice_records_its_device_and_refuses_to_mix(tmp_path):
    table = gpu_slice.run("cpu", 2, 600, tmp_path, lengths=[4, 5], seeds=2, batch_models=2, log=io.StringIO())
    assert len(table) == 4 and set(table["status"]) == {"finished"}
    assert set(table["device"]) == {experiments.device_label(torch.device("cpu"))}
    assert set(table["d_model"]) == {128} and set(table["batch_size"]) == {1024} and set(table["steps_trained"]) == {2}
    found = gpu_slice.analyse(tmp_path)
    assert found["rows"] == 4 and found["devices"] == sorted(set(table["device"]))
    # rows computed on a GPU in the same folder: a CPU run refuses to add to them
    runs = pd.read_parquet(tmp_path / "runs.parquet")
    runs.loc[0, "device"] = "cuda (NVIDIA H100 80GB HBM3; torch 2.13.0)"
    runs.to_parquet(tmp_path / "runs.parquet", index=False)
    with pytest.raises(ValueError, match=r"cuda \(NVIDIA H100 80GB HBM3\).*does not mix devices"):
        gpu_slice.run("cpu", 2, 600, tmp_path, lengths=[4, 5], seeds=2, batch_models=2, log=io.StringIO())


def test_no_job_starts_past_the_deadline(tmp_path):
    log = io.StringIO()
    table = gpu_slice.run("cpu", 2, 0.01, tmp_path, lengths=[4, 5, 6], seeds=1, batch_models=1, log=log)
    assert len(table) == 1 and table["n"].tolist() == [4]  # the first job always runs; then the budget is spent
    assert "stopped at its deadline" in log.getvalue()


def test_device_kinds():
    assert sweeps.device_kind("cpu (AVX512, Intel(R) Xeon(R) Processor; torch 2.13.0+cpu)") == "cpu"
    assert sweeps.device_kind("cuda (NVIDIA H100 80GB HBM3; torch 2.13.0)") == "cuda (NVIDIA H100 80GB HBM3)"
