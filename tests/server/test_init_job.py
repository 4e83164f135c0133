"""Where training goes, as a class-server job: the worker's run of `sensviz.init_training.path_job` traces the
same path as `training_path` in this process, and a request's quantities and init scale are checked before queueing."""

import json
import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sensviz.init_study import init_models  # noqa: E402
from sensviz.init_training import PATH_QUANTITIES, path_job, training_path  # noqa: E402
from sensviz.models import ModelSettings  # noqa: E402
from server import jobs, worker  # noqa: E402
from server.worker import TrainRequest  # noqa: E402

SETTINGS = ModelSettings(arch="encoder", d_model=8, n_layers=1, n_heads=2)
COLUMNS = ("step", "scale_free_avg_sensitivity", "scale_free_min_sensitivity", "scale_free_degree_profile",
           "attention_entropy", "accuracy")


def test_the_jobs_path_is_training_paths(tmp_path):
    """One code path: the worker (in this process, on a job folder) against `training_path`, on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        request = TrainRequest(**path_job(SETTINGS, 4, "parity", steps=20, points=4, init_scale=2.0))
        (tmp_path / "request.json").write_text(json.dumps(request.to_dict()))
        worker.run(str(tmp_path), 1, os.getppid())
        expected = training_path(SETTINGS, 4, "parity", steps=20, points=4, init_scale=2.0)
    finally:
        torch.set_num_threads(threads)
    outcome = json.loads((tmp_path / "outcome.json").read_text())
    assert outcome["state"] == "finished", outcome
    got = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    by_step = {r["step"]: r for r in expected}
    assert [r["step"] for r in expected] == [0, 5, 10, 15, 20]
    assert got[0]["step"] == 0 and got[-1]["step"] == 20  # the worker may skip a measurement in between, never these
    for record in got:
        for column in COLUMNS:
            assert record[column] == pytest.approx(by_step[record["step"]][column]), (record["step"], column)
    assert request.quantities == list(PATH_QUANTITIES) and request.init_scale == 2.0


def test_the_job_starts_from_the_studys_scaled_initialisation():
    model, _, _ = worker.prepare(TrainRequest(**path_job(SETTINGS, 4, "first", steps=10, init_scale=0.5, seed=3)))
    study_init = init_models(SETTINGS, 4, 1, 0.5, 3)[0]
    assert model.state_dict().keys() == study_init.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), study_init.state_dict().values()))


@pytest.mark.parametrize("change, message", [
    ({"quantities": ["hessian"]}, "cheap quantities of its model only, not 'hessian'"),
    ({"quantities": ["no_such_thing" * 10]}, "unknown quantity 'no_such_thing"),
    ({"quantities": "scale_free"}, "quantities must be a list"),
    ({"init_scale": 1000.0}, "init_scale"),
    ({"init_scale": 0.0}, "init_scale"),
])
def test_bad_measurements_are_refused_before_queueing(change, message):
    fields = {**path_job(SETTINGS, 4, "parity", steps=10), **change}
    with pytest.raises(ValueError, match=message):
        worker.check(TrainRequest(**fields))


def test_a_request_reads_back_from_its_folder(tmp_path):
    request = TrainRequest(**path_job(SETTINGS, 4, "parity", steps=10))
    folder = tmp_path / "abcdefghijkl"
    folder.mkdir()
    (folder / "request.json").write_text(json.dumps(request.to_dict()))
    assert jobs.read_request(tmp_path, "abcdefghijkl") == request
    assert jobs.read_request(tmp_path, "../etc") is None and jobs.read_request(tmp_path, "missing12345") is None
    (folder / "request.json").write_text(json.dumps({"task": "parity", "unknown": 1}))
    assert jobs.read_request(tmp_path, "abcdefghijkl") is None
