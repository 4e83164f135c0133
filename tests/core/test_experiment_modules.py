"""An experiment is one module and its TOML: a toy one, added in a folder of its own, reaches the sweep's
job dispatch, the figures, the fidelity page and the report's order with no other edit."""

import io
import sys

import pytest

from sensviz import experiments, fidelity, report, sweeps
from sensviz import results as loading

TOY_MODULE = '''"""A toy experiment: no training, each run's value is its seed plus a seeded wobble."""

from sensviz import stats
from sensviz.experiments import Experiment
from sensviz.claims import claim, claims_table, runs_line
from sensviz.figures import ExperimentFigure, keep, placeholder, summarise


def job(experiment, batch, out):
    return [{"metrics": {"value": run.config.seed + 0.1 * (-1) ** run.config.seed, "converged": True,
                         "n_params": run.model.n_params()}, "history": []} for run in batch]


def figures(runs, history):
    kept, note = keep(runs, ["seed"], "every run")
    table = summarise(kept, ["seed"], {"value": "the value"})
    return [ExperimentFigure("toy", "The toy's value", "It grows with the seed.", placeholder("toy"), table, note)]


def section(t):
    kept = t.kept()
    claims = [claim("toy", "The value grows with the seed", "slope of the value in the seed", +1,
                    lambda: stats.slope(kept["seed"], kept["value"]), key="Y1")]
    return "\\n\\n".join(["## 6. Toy", runs_line(t, ["seed"]), claims_table(claims)]), claims


EXPERIMENT = Experiment("toy", 99, job, ("seed",), figures, (section,), {"task": "parity", "d_model": 8})
'''

TOY_SPEC = '''experiment = "toy"
description = "The toy experiment."

[defaults]
n = 4

[[grid]]
seed = [0, 1, 2, 3]
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The toy module in tmp_path/modules (a folder of the experiments package for this test) and its
    TOML in tmp_path; the registry found again with it, and without it afterwards."""
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "toy.py").write_text(TOY_MODULE)
    (tmp_path / "toy.toml").write_text(TOY_SPEC)
    monkeypatch.setattr(experiments, "__path__", [*experiments.__path__, str(modules)])
    experiments.registry.cache_clear()
    yield tmp_path / "toy.toml"
    sys.modules.pop("sensviz.experiments.toy", None)
    vars(experiments).pop("toy", None)
    experiments.registry.cache_clear()


def test_a_new_experiment_is_one_module_and_its_toml(toy):
    assert experiments.EXPERIMENTS[-1] == "toy" and experiments.BATCH_FIELDS["toy"] == ("seed",)
    assert experiments.defaults("toy")["d_model"] == 8  # its defaults, on top of every experiment's settings
    spec = sweeps.load_spec(toy)
    results = toy.parent / "results"
    out = results / "quick" / "toy"
    runs = sweeps.run_sweep(spec, out, experiments.run_job, batch=experiments.BATCH_FIELDS["toy"], log=io.StringIO())
    assert set(runs["status"]) == {"finished"}
    assert sorted(runs["value"]) == pytest.approx([s + 0.1 * (-1) ** s for s in range(4)])  # its own job ran
    (fig,) = loading.figures("toy", *sweeps.read_results(out)[:2])
    assert fig.key == "toy" and list(fig.data["mean"]) == pytest.approx(sorted(runs["value"]))
    page, claims = fidelity.build(results, "quick")
    assert "## 6. Toy" in page and [c.key for c in claims] == ["Y1"]
    assert claims[0].verdict == "reproduced" and claims[0].interval.estimate == pytest.approx(0.96)  # OLS by hand: 4.8 / 5
    assert f"sensviz sweep experiments/toy.toml --out {results.parent.name}/results/quick/toy" in page
    assert report.sweep_folders(results) == [out]


def test_a_module_must_register_the_experiment_it_is_named_after(tmp_path, monkeypatch):
    (tmp_path / "other.py").write_text(TOY_MODULE)
    monkeypatch.setattr(experiments, "__path__", [*experiments.__path__, str(tmp_path)])
    experiments.registry.cache_clear()
    try:
        with pytest.raises(TypeError, match="sensviz.experiments.other: EXPERIMENT must be an Experiment named 'other'"):
            experiments.registry()
    finally:
        sys.modules.pop("sensviz.experiments.other", None)
        vars(experiments).pop("other", None)
        experiments.registry.cache_clear()
