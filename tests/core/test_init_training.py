"""Where training goes: one initialisation of a study trained on its target, traced from the study's value; on
the Before training page on demand, restored by a link."""

import pytest

from sensviz.init_study import init_study
from sensviz.init_training import training_path
from sensviz.models import ModelSettings

SETTINGS = ModelSettings(arch="encoder", d_model=8, n_layers=1, n_heads=2)


def test_the_path_starts_at_the_studys_value_of_that_init():
    records = training_path(SETTINGS, 4, "parity", steps=20, init=2, points=4)
    study = init_study(SETTINGS, 4, 3, 1.0, 0, "parity")
    assert [r["step"] for r in records] == [0, 5, 10, 15, 20]
    assert records[0]["scale_free_avg_sensitivity"] == study.avg_sensitivity[2].item()
    assert records[0]["attention_entropy"] == pytest.approx(study.attention_entropy[2].item(), rel=1e-6)
    assert all("accuracy" in r and "scale_free_min_sensitivity" in r for r in records)


@pytest.mark.parametrize("change, message", [
    ({"n": 11}, "n must be in 1..10"), ({"steps": 2001}, "steps must be in 1..2000"), ({"init": -1}, "init must be >= 0"),
])
def test_limits_before_training(change, message):
    args = {"n": 4, "steps": 10, "init": 0, **change}
    with pytest.raises(ValueError, match=message):
        training_path(SETTINGS, args["n"], "parity", steps=args["steps"], init=args["init"])


