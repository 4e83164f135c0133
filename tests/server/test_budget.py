"""The budget of a live job (`server.budget`): the estimate against what the worker really takes,
the server's budget setting, and the caps of the Train form against the library's limits."""

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import fields
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sensviz.configs import settings_of  # noqa: E402
from sensviz.limits import LIMITS  # noqa: E402
from sensviz.models import ARCHITECTURES, ModelSettings  # noqa: E402
from sensviz.training import TrainConfig  # noqa: E402
from server import budget, worker  # noqa: E402
from server.worker import LIVE_LIMITS, TrainRequest  # noqa: E402

CEILING_S = 600  # one configuration in its own process, on a shared machine

CONFIGS = [  # across the Train form's ranges: every architecture, widths 8..256, n 4..24, batch 16..4096
    dict(d_model=8, n_layers=1, n_heads=2, n=4, batch_size=16, steps=300, measure_every=50, eval_interval=50),
    dict(d_model=32, n_layers=2, n_heads=2, n=8, batch_size=256, steps=200, measure_every=100, eval_interval=25),
    dict(d_model=64, n_layers=3, n_heads=4, n=12, batch_size=512, steps=20, measure_every=10, eval_interval=10),
    dict(d_model=128, n_layers=2, n_heads=8, n=16, batch_size=1024, steps=6, measure_every=3, eval_interval=3),
    dict(d_model=256, n_layers=1, n_heads=8, d_ff=1024, n=16, batch_size=64, steps=4, measure_every=100,
         eval_interval=100, eval_size=1024),
    dict(d_model=32, n_layers=2, n_heads=2, n=20, batch_size=4096, steps=5, measure_every=100, eval_interval=100),
    dict(arch="scratchpad", d_model=32, n_layers=2, n_heads=2, n=10, batch_size=256, steps=50, measure_every=25,
         eval_interval=25),
    dict(arch="formal", d_model=16, n_layers=2, n_heads=2, n=8, batch_size=256, steps=100, measure_every=50,
         eval_interval=50),
    dict(d_model=16, n_layers=4, n_heads=1, n=6, batch_size=64, steps=150, measure_every=1, eval_interval=1),
    dict(d_model=96, n_layers=1, n_heads=2, d_ff=384, n=24, batch_size=128, steps=30, measure_every=10,
         eval_interval=10),
    dict(d_model=32, n_layers=1, n_heads=2, n=10, batch_size=128, steps=200, measure_every=100, eval_interval=50,
         train_size=200),
    dict(d_model=32, n_layers=2, n_heads=2, n=12, min_n=4, batch_size=256, steps=60, measure_every=30,
         eval_interval=20, eval_size=16384),
]
MEMORY_FLOOR_MIB = 64
"""Memory is compared above this floor: below it, a job's growth is allocator noise (a tiny job
grows by 0 to 40 MiB, depending on what the process freed before)."""


def live_request(config: dict) -> TrainRequest:
    model_fields = {f.name for f in fields(ModelSettings)}
    model = {"arch": "encoder", **{k: v for k, v in config.items() if k in model_fields}}
    train = {k: v for k, v in config.items() if k not in model_fields and k != "measure_every"}
    return TrainRequest("parity", model, {"seed": 0, **train}, config["measure_every"])


HELPER = textwrap.dedent(
    r"""
    import json, os, re, sys, time, traceback
    from pathlib import Path
    sys.path.insert(0, {root!r})

    def rss():
        status = Path("/proc/self/status").read_text()
        return [int(re.search(rf"^{{k}}:\s+(\d+) kB", status, re.M).group(1)) / 1024 for k in ("VmRSS", "VmHWM")]

    def job(folder):
        # a forked child maps its parent's code (torch's libraries) without its page tables: the warm-up's
        # work again faults in what the parent had touched (its one-time costs are paid), so the memory
        # measured is the job's, as in a fresh process after its warm-up
        worker._warm_up()
        Path("/proc/self/clear_refs").write_text("5")  # the peak starts afresh from the resident memory now
        before, _ = rss()
        start = time.process_time()
        worker.run(folder, 1, os.getppid())
        seconds = time.process_time() - start
        _, peak = rss()
        calibration = budget.calibrate()  # after the job: it does not touch the memory the job measured
        request = worker.TrainRequest.from_dict(json.loads(Path(folder, "request.json").read_text()))
        task, settings, config = worker.check(request)
        found = budget.estimate(settings, config, request.measure_every, calibration, task)
        outcome = json.loads(Path(folder, "outcome.json").read_text())
        return {{"seconds": seconds, "mib": peak - before, "estimate_s": found.seconds, "estimate_mib": found.mib,
                 "outcome": outcome["state"]}}

    import torch
    torch.set_num_threads(1)
    from server import budget, worker
    worker._warm_up()  # once, as the launcher does (`worker.launcher`)
    for line in sys.stdin:  # a job's folder per line: each runs in a child forked from this warm process
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            try:
                os.write(write, json.dumps(job(line.strip())).encode())
            except BaseException:
                traceback.print_exc()
            os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as answer:
            found = answer.read().decode()
        os.waitpid(pid, 0)
        print(found or json.dumps({{"error": "the job's process ended without a result (its traceback is above)"}}),
              flush=True)
    """
)


@pytest.fixture(scope="module")
def jobs_process(tmp_path_factory):
    """A process that loads torch and the trainer once, then runs each job given to it (a folder per line)
    in a child forked from itself, so a job starts warm, as on the launcher, without paying the
    interpreter's start and torch's one-time costs again (seconds of CPU per configuration)."""
    log = tmp_path_factory.mktemp("jobs") / "stderr.log"
    with open(log, "w") as errors:
        helper = subprocess.Popen([sys.executable, "-c", HELPER.format(root=str(ROOT))], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=errors, text=True,
                                  env={**os.environ, "OMP_NUM_THREADS": "1"})
    helper.log = log
    yield helper
    helper.stdin.close()
    helper.wait(timeout=CEILING_S)


def measured(request: TrainRequest, folder: Path, helper: subprocess.Popen) -> dict:
    """Run one job as the worker does, in a fresh process on one thread (forked from `jobs_process`): its
    CPU seconds and peak memory growth, and the estimate with a calibration taken in the same process."""
    folder.mkdir()
    (folder / "request.json").write_text(json.dumps(request.to_dict()))
    helper.stdin.write(f"{folder}\n")
    helper.stdin.flush()
    answer = helper.stdout.readline()
    assert answer, f"the jobs' process ended: {helper.log.read_text()[-3000:]}"
    found = json.loads(answer)
    assert "error" not in found, (found, helper.log.read_text()[-3000:])
    return found


@pytest.mark.slow  # each configuration trains in a process of its own: minutes in all
@pytest.mark.parametrize("config", CONFIGS, ids=[f"{c.get('arch', 'encoder')}-d{c['d_model']}-n{c['n']}-b{c['batch_size']}"
                                                 for c in CONFIGS])
def test_the_estimate_is_within_2x_of_the_measured_time_and_memory(config, tmp_path, jobs_process):
    """CPU time (robust to other processes on the machine) against the estimate from a calibration
    in the same process; peak resident growth against the memory estimate, above `MEMORY_FLOOR_MIB`."""
    assert_within_2x(config, measured(live_request(config), tmp_path / "job", jobs_process))


def assert_within_2x(what, found: dict) -> None:
    """The job finished, and its estimate is within 2x of its CPU time and (above the floor) its peak memory."""
    assert found["outcome"] == "finished"
    time_ratio = found["estimate_s"] / found["seconds"]
    memory_ratio = max(found["estimate_mib"], MEMORY_FLOOR_MIB) / max(found["mib"], MEMORY_FLOOR_MIB)
    print(f"{what}: {found['estimate_s']:.2f} s estimated, {found['seconds']:.2f} s measured ({time_ratio:.2f}x); "
          f"{found['estimate_mib']:.0f} MiB estimated, {found['mib']:.0f} MiB measured ({memory_ratio:.2f}x)")
    assert 0.5 <= time_ratio <= 2.0, found
    assert 0.5 <= memory_ratio <= 2.0, found


SMALL = {"arch": "encoder", "d_model": 8, "n_layers": 1, "n_heads": 2}
"""The model of the extremes below that are about the task or the training options, not the model's size."""


def extremes() -> dict[str, TrainRequest]:
    """One configuration per option of the Train form (and `sensviz train`) at its cap (`LIVE_LIMITS`), each with
    a few steps (the estimate counts steps, evaluations and measurements one by one, as a long run has them):
    the tasks given by a truth table at n = 24 (the random task; a given table of 2^24 characters), a restricted
    training set of 2^20 strings at n = 20, the largest batch, the largest evaluation set evaluated every step,
    a measurement every step, every length from 1 to 24. (The model's size at its caps is not here: two
    measurements of such a model take 10 to 20 CPU minutes; benchmarks/hostile.py --estimates measures them.)"""
    import numpy as np

    n = LIVE_LIMITS["n"]
    quiet = {"seed": 0, "steps": 4, "eval_interval": LIVE_LIMITS["eval_interval"]}
    table = (np.random.default_rng(0).integers(0, 2, 2**n, dtype=np.uint8) + ord("0")).tobytes().decode()
    return {
        "random n=24": TrainRequest("random:seed=0", SMALL, {**quiet, "n": n, "steps": 20}, LIVE_LIMITS["measure_every"]),
        "table n=24": TrainRequest(f"table:{table}", SMALL, {**quiet, "n": n, "steps": 20}, LIVE_LIMITS["measure_every"]),
        "train_size 2^20 n=20": TrainRequest("parity", SMALL, {**quiet, "n": 20, "train_size": 2**20},
                                             LIVE_LIMITS["measure_every"]),
        "batch_size 4096": TrainRequest("parity", SMALL, {**quiet, "n": n, "batch_size": LIVE_LIMITS["batch_size"]},
                                        LIVE_LIMITS["measure_every"]),
        "eval_size 16384 every step": TrainRequest("majority", SMALL, {**quiet, "n": n, "eval_interval": 1,
                                                                        "eval_size": LIVE_LIMITS["eval_size"]},
                                                   LIVE_LIMITS["measure_every"]),
        "measure every step": TrainRequest("sparse_parity:k=3,seed=0", SMALL, {**quiet, "n": n}, 1),
        "lengths 1..24": TrainRequest("first", SMALL, {**quiet, "n": n, "min_n": 1}, LIVE_LIMITS["measure_every"]),
    }


@pytest.mark.slow  # each configuration trains in a process of its own
@pytest.mark.parametrize("name", ["random n=24", "table n=24", "train_size 2^20 n=20", "batch_size 4096",
                                  "eval_size 16384 every step", "measure every step", "lengths 1..24"])
def test_the_estimate_holds_within_2x_at_the_train_forms_extremes(name, tmp_path, jobs_process):
    assert_within_2x(name, measured(extremes()[name], tmp_path / "job", jobs_process))


def test_the_budget_setting():
    assert budget.Budget.parse("900s,2048MiB") == budget.Budget(900, 2048)
    assert budget.Budget.parse("15min, 2GiB") == budget.Budget(900, 2048)
    assert budget.Budget.parse("600s") == budget.Budget(600, 4096)  # the other part keeps its default
    assert budget.server_budget() == budget.Budget.parse(os.environ.get("SENSVIZ_JOB_BUDGET", budget.DEFAULT_BUDGET))
    for bad in ("fast", "900", "-5s", "nans", "1e999s", "12MB"):
        with pytest.raises(ValueError, match="SENSVIZ_JOB_BUDGET"):
            budget.Budget.parse(bad)


def test_the_refusal_names_the_budget_and_the_estimate():
    _, settings, config = worker.check(live_request(CONFIGS[1]))
    found = budget.estimate(settings, config, 100, budget.Calibration(op_s=1e-3, flop_s=1e-9))
    with pytest.raises(ValueError) as err:
        budget.check(found, budget.Budget(seconds=10, mib=1))
    assert str(err.value).startswith("this run is over the server's budget per run (10 s and 1 MiB; SENSVIZ_JOB_BUDGET): "
                                     f"time: about {budget.duration(found.seconds)} against 10 s; memory: about "
                                     f"{found.mib:,.0f} MiB against 1 MiB.")
    budget.check(found, budget.Budget(seconds=found.seconds * 1.01, mib=found.mib * 1.01))  # within: no error


def test_more_work_costs_more():
    calibration = budget.Calibration(op_s=1e-5, flop_s=1e-11)

    def cost(**changes):
        _, settings, config = worker.check(live_request({**CONFIGS[1], **changes}))
        return budget.estimate(settings, config, changes.get("measure_every", 100), calibration)

    base = cost()
    for changes in ({"steps": 400}, {"batch_size": 512}, {"d_model": 64}, {"n_layers": 4}, {"d_ff": 512}, {"n": 12},
                    {"eval_interval": 5}, {"eval_size": 16384, "n": 14}, {"measure_every": 10}):
        bigger = cost(**changes)
        assert bigger.seconds > base.seconds, changes
    assert cost(batch_size=4096).mib > base.mib and cost(d_model=256, n_heads=8).mib > base.mib


def test_a_measurement_prices_every_direction_and_scores_that_outgrow_the_cache():
    """Each of the D directions is a forward over the M inputs (more directions: that much more work per
    direction), and one call's scores past `CACHE_BYTES` cost the `spill` more per score than the same
    strings in calls under it."""
    flops_only = budget.Calibration(op_s=0.0, flop_s=1.0)
    _, settings, config = worker.check(live_request(CONFIGS[1]))
    s = budget.shape(settings, config.n)
    m = min(2**config.n, worker.LIVE_INPUTS)
    per_direction = budget._forward(s, m, config.n)[1] + budget.PERTURB_FLOPS_PER_PARAM * s.params
    with pytest.MonkeyPatch.context() as patch:
        found = []
        for directions in (16, 48):
            patch.setattr(budget, "LIVE_DIRECTIONS", directions)
            found.append(budget.phases(settings, config, flops_only)["measurement"])
    assert found[1] - found[0] == pytest.approx(32 * per_direction)

    strings, n = 4096, 24
    whole = budget.elementwise_terms(s, strings, n, calls=1)
    split = budget.elementwise_terms(s, strings, n, calls=64)
    assert 4.0 * whole[1] / s.attention > budget.CACHE_BYTES > 4.0 * split[1] / (s.attention * 64)
    assert whole[2] == whole[1] and split[2] == 0 and whole[::3] == split[::3]
    assert (budget.FORWARD.flops(s, strings, n, 1) - budget.FORWARD.flops(s, strings, n, 64)
            == pytest.approx(budget.FORWARD.spill * whole[1]))


def test_the_live_caps_agree_with_the_library_limits():
    """Every cap of `LIVE_LIMITS` is within the library's limit of its setting; every size of the model
    the Train form takes is capped; the largest model the form allows (each architecture) is within
    the library's `n_params` limit; the form's widgets take their bounds from the caps."""
    from ui import train_form

    setting = {s.name: s for cls in (ModelSettings, TrainConfig) for s in settings_of(cls)}
    for name, cap in LIVE_LIMITS.items():
        if name in setting and setting[name].limit is not None:
            assert cap <= setting[name].limit.high, name
            assert train_form._bound(setting[name].limit.high, int, cap) == cap, name
    assert {s.name for s in settings_of(ModelSettings) if s.type is int} <= set(LIVE_LIMITS)
    for arch in ARCHITECTURES:
        largest = TrainRequest("parity", {"arch": arch, **{k: LIVE_LIMITS[k] for k in ("d_model", "n_layers", "n_heads",
                                                                                        "d_ff", "max_len")}},
                               {"n": LIVE_LIMITS["n"]})
        _, settings, config = worker.check(largest)  # raises over the n_params limit
        assert budget.shape(settings, config.n).params <= LIMITS["n_params"].high


def test_a_model_over_the_parameter_limit_is_refused_before_it_is_built(monkeypatch):
    monkeypatch.setattr(worker, "LIVE_LIMITS", {})  # the library's limits alone
    huge = TrainRequest("parity", {"arch": "scratchpad", "d_model": 256, "n_layers": 6, "n_heads": 8, "d_ff": 16384},
                        {"n": 24})
    with pytest.raises(ValueError, match="parameters of the model must be at most 50,000,000 \\(limit 'n_params'\\), "
                                         "got 105,620,225"):
        worker.check(huge)


def test_a_kept_calibration_is_used_on_the_same_boot_of_the_same_machine_only(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert budget.kept_calibration() is None  # nothing kept yet
    measured = budget.Calibration(op_s=2e-5, flop_s=3e-11)
    budget.keep_calibration(measured)
    assert budget.calibration_file() == tmp_path / "sensviz" / "calibration.json"
    assert budget.kept_calibration() == measured
    with monkeypatch.context() as patch:  # another boot, CPU count, Python, torch or cost model
        patch.setattr(budget, "machine_key", lambda: "another machine")
        assert budget.kept_calibration() is None
    with monkeypatch.context() as patch:  # a day later
        patch.setattr(budget.time, "time", lambda: json.loads(budget.calibration_file().read_text())["measured"]
                      + budget.CALIBRATION_MAX_AGE_S + 1)
        assert budget.kept_calibration() is None
    kept = json.loads(budget.calibration_file().read_text())
    for bad in ("{not json", json.dumps({**kept, "op_s": -1.0}), json.dumps({**kept, "flop_s": "nan"}),
                json.dumps({k: v for k, v in kept.items() if k != "op_s"})):
        budget.calibration_file().write_text(bad)
        assert budget.kept_calibration() is None, bad
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setattr(budget.Path, "home", lambda: (_ for _ in ()).throw(RuntimeError("no home directory")))
    assert budget.calibration_file() is None and budget.kept_calibration() is None
    budget.keep_calibration(measured)  # nowhere to keep it: nothing happens


def test_the_server_measures_once_a_boot_and_keeps_it_for_the_next_server(tmp_path, monkeypatch):
    from server import jobs

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    runs = []

    def measure(command, **kwargs):  # the calibration's process, as `python -m server.budget` prints it
        runs.append(command)
        return subprocess.CompletedProcess(command, 0, stdout='{"op_s": 4e-05, "flop_s": 5e-11}\n')

    monkeypatch.setattr(jobs.subprocess, "run", measure)
    monkeypatch.setattr(jobs, "_CALIBRATION", [])
    assert jobs.calibration() == budget.Calibration(4e-5, 5e-11) == budget.kept_calibration()
    assert len(runs) == 1 and runs[0][1:] == ["-m", "server.budget"]
    monkeypatch.setattr(jobs, "_CALIBRATION", [])  # the next server process on this machine
    assert jobs.calibration() == budget.Calibration(4e-5, 5e-11) and len(runs) == 1
