"""Hostile input: every malformed file and argument is rejected with one line, cheaply; a fuzz of
mutated zoo checkpoints; other people's files; `python -m sensviz`.

The cases are built in code (tests/hostile_cases.py) and measured in a child process: the peak
memory of each call above the memory before it, and the CPU time of each call (CPU seconds, not
wall-clock, so that a busy machine does not fail the test; benchmarks/hostile.py prints both).
"""

import json
import random
import struct
import subprocess
import sys
from pathlib import Path

import hostile_cases
import pytest
import safetensors.torch
import torch
from reference import AuthorsModel

import sensviz as sv
from sensviz import cube
from sensviz.checkpoints import CheckpointError, load_checkpoint, read_metadata, shape_model
from sensviz.cli import main

ROOT = Path(__file__).resolve().parents[2]
CPU_SECONDS = 2.0
EXTRA_MB = 300


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    cases = hostile_cases.cases()
    return cases, hostile_cases.measure(cases, tmp_path_factory.mktemp("hostile"))


def test_every_hostile_file_and_argument_is_rejected_cleanly_and_cheaply(measured):
    cases, rows = measured
    assert len(rows) == len(cases) >= 100
    families = {row["family"] for row in rows}
    assert {"metadata bomb (sensviz)", "metadata bomb (authors)", "header", "invalid value", "weights", "argument"} <= families
    wrong = [(r["family"], r["name"], r["outcome"], r["message"]) for r in rows if r["outcome"] != "rejected"]
    assert not wrong
    escaped = [(r["name"], r["read_metadata"]) for r in rows if r["read_metadata"] not in ("read", "rejected")]
    assert not escaped  # read_metadata (the app's zoo listing) raises only CheckpointError too
    for row in rows:
        assert "\n" not in row["message"] and len(row["message"]) < 400, row
        assert row["cpu_s"] < CPU_SECONDS, row
        assert row["extra_mb"] < EXTRA_MB, row


def test_the_limits_are_named_in_the_bombs_messages(measured):
    _, rows = measured
    for row in rows:
        if row["family"].startswith("metadata bomb") and "heads" not in row["name"] and "embedding" not in row["name"]:
            assert "(limit '" in row["message"], row


def test_the_cli_answers_every_hostile_file_with_exit_2_and_one_line(measured, capsys, tmp_path):
    cases, _ = measured
    path = tmp_path / "case.safetensors"
    for family, name, data, kwargs in cases:
        if family == "argument":
            continue
        path.write_bytes(data)
        argv = ["inspect", str(path)] + (["--n-heads", str(kwargs["n_heads"])] if "n_heads" in kwargs else [])
        assert main(argv) == 2, name
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and err.startswith("sensviz inspect: error: "), (name, err)


@pytest.mark.slow
def test_the_cli_process_exits_2_with_one_line_and_no_traceback(tmp_path):
    cases = {name: data for _, name, data, _ in hostile_cases.cases()}
    for name in ("nested 100000 deep in a tensor entry", "encoder: d_model 4096 x 8 layers", "encoders.layers.999999.x",
                 "metadata: task sparse_parity k=9 > n=6"):
        path = tmp_path / "bad.safetensors"
        path.write_bytes(cases[name])
        proc = subprocess.run([sys.executable, "-m", "sensviz", "inspect", str(path), "--n-heads", "2"],
                              capture_output=True, text=True, cwd=tmp_path, timeout=600)
        assert proc.returncode == 2 and proc.stdout == "", (name, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, (name, proc.stderr)


# ----------------------------------------------------------------------------- the loader's own checks


@pytest.mark.parametrize("arch,fields", [("encoder", dict(d_model=24, n_layers=3, n_heads=3, max_len=11, d_ff=40)),
                                         ("formal", dict(d_model=8, n_layers=2, n_heads=3, max_len=7, d_ff=5)),
                                         ("scratchpad", dict(d_model=16, n_layers=2, n_heads=4, max_len=9))])
def test_the_meta_model_has_the_real_models_names_and_shapes(arch, fields):
    real = sv.build_model(arch, **fields)
    meta = shape_model(arch, real.config)
    assert {k: v.shape for k, v in meta.state_dict().items()} == {k: v.shape for k, v in real.state_dict().items()}
    assert all(p.device.type == "meta" for p in meta.parameters())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_tensors_read_from_the_header_equal_safetensors_own_reading(dtype, encoder_model):
    state = {k: v.to(dtype).contiguous() for k, v in encoder_model.state_dict().items()}
    data = safetensors.torch.save(state, sv.checkpoints.checkpoint_metadata(encoder_model, task="parity", n=6))
    ck = load_checkpoint(data)
    theirs = safetensors.torch.load(data)
    ours = ck.model.state_dict()
    assert all(ours[k].dtype == torch.float32 and torch.equal(ours[k], theirs[k].to(torch.float32)) for k in theirs)


def test_a_file_whose_tensors_do_not_fit_its_config_is_rejected_from_the_header(encoder_model):
    """The data section is NaN everywhere, yet the answer is about shapes: the tensors were never read."""
    data = hostile_cases.set_tensor(sv.checkpoint_bytes(encoder_model, task="parity", n=6), "embedding.weight", float("nan"))
    data = hostile_cases.with_config(data, d_model=32)
    with pytest.raises(CheckpointError, match="do not fit the encoder model of this config: wrong shapes"):
        load_checkpoint(data)


def test_loading_does_not_touch_the_global_random_stream(encoder_model):
    data = sv.checkpoint_bytes(encoder_model, task="parity", n=6)
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    load_checkpoint(data)
    assert torch.equal(torch.rand(3), expected)


def test_a_loaded_model_trains(encoder_model):
    """Assigned tensors are ordinary parameters: gradients flow and an optimizer step changes them."""
    ck = load_checkpoint(sv.checkpoint_bytes(encoder_model, task="parity", n=6))
    params = list(ck.model.parameters())
    assert all(isinstance(p, torch.nn.Parameter) and p.requires_grad for p in params)
    before = [p.detach().clone() for p in params]
    ck.model(cube.vertices(6)).sum().backward()
    torch.optim.SGD(params, lr=0.1).step()
    assert any(not torch.equal(a, p) for a, p in zip(before, params))


# ----------------------------------------------------------------------------- fuzz


def _mutations(data: bytes, rng: random.Random) -> bytes:
    (length,) = struct.unpack("<Q", data[:8])
    kind = rng.choice(["flip", "flip", "flips", "truncate", "header", "header", "splice"])
    if kind in ("flip", "flips"):
        out = bytearray(data)
        for _ in range(1 if kind == "flip" else rng.randint(2, 64)):
            i = rng.randrange(len(out))
            out[i] ^= 1 << rng.randrange(8)
        return bytes(out)
    if kind == "truncate":
        return data[: rng.randrange(len(data))]
    if kind == "splice":  # a run of random bytes somewhere (header or data)
        i = rng.randrange(len(data))
        return data[:i] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 32))) + data[i + 32:]
    header = json.loads(data[8 : 8 + length])
    body = data[8 + length :]
    meta = header.get("__metadata__", {})
    key = rng.choice(sorted(header))
    edit = rng.randrange(9)
    big = rng.choice([0, -1, 1, 2, 3, 7, 10**6, 10**12, 2**63, 1.5, True, None, "x", [], {}])
    if edit == 0 and key != "__metadata__":
        header[key]["shape"] = [big] + header[key]["shape"][1:]
    elif edit == 1 and key != "__metadata__":
        header[key]["dtype"] = rng.choice(["F16", "BF16", "F64", "I8", "U8", "BOOL", "F8_E4M3", 5])
    elif edit == 2 and key != "__metadata__":
        header[key]["data_offsets"][rng.randrange(2)] = big
    elif edit == 3 and key != "__metadata__":
        header[rng.choice(["x", key + "x", "encoders.layers.999.x"])] = header.pop(key)
    elif edit == 4:
        config = json.loads(meta["config"])
        config[rng.choice(sorted(config) + ["width"])] = big
        meta["config"] = json.dumps(config)
    elif edit == 5:
        meta[rng.choice(sorted(meta))] = rng.choice(["", "{}", "[]", "1e999", "null", "\"parity\"", "0", "9" * 30, "{" * 5000])
    elif edit == 6:
        meta.pop(rng.choice(sorted(meta)))
    elif edit == 7:
        meta["task"] = json.dumps(rng.choice([{"name": "sparse_parity", "k": big, "seed": 0}, {"name": "random", "seed": big},
                                              {"name": "table", "bits": "01"}, {"name": "first"}, {"name": big}]))
    else:
        meta["n"] = str(big)
    return hostile_cases.raw_file(header, body)


@pytest.mark.slow
def test_fuzz_mutated_zoo_checkpoints_only_load_finite_models_or_raise_checkpoint_error():
    files = sorted((ROOT / "checkpoints").glob("*.safetensors"))
    originals = [p.read_bytes() for p in files]
    rng = random.Random(12)
    outcomes = {"rejected": 0, "loaded": 0}
    for i in range(1000):
        data = _mutations(originals[i % len(originals)], rng)
        try:
            ck = load_checkpoint(data)
        except CheckpointError as err:
            assert "\n" not in str(err)
            outcomes["rejected"] += 1
            continue
        n = ck.n or min(ck.config.max_len, 8)
        bits, _ = cube.measurement_inputs(n, 512, seed=1)
        with torch.no_grad():
            assert torch.isfinite(ck.model.training_outputs(bits)).all(), i
        outcomes["loaded"] += 1
    print(f"fuzz outcomes: {outcomes}")
    assert outcomes["rejected"] > 100 and outcomes["loaded"] > 100  # both outcomes are exercised


# ----------------------------------------------------------------------------- other people's files


@pytest.fixture
def foreign_file(tmp_path):
    """A state dict in the authors' layout saved with plain-string metadata, as anyone writes it."""
    torch.manual_seed(3)
    model = AuthorsModel(32, 2, 2, max_len=10).eval()
    path = tmp_path / "theirs.safetensors"
    safetensors.torch.save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path,
                                metadata={"task": "parity", "hidden_dim": "32", "num_layers": "2"})
    return model, path


def test_a_foreign_file_loads_with_its_plain_string_task(foreign_file):
    reference, path = foreign_file
    ck = load_checkpoint(path, n_heads=2)
    assert ck.layout == "authors" and ck.task == sv.get_task("parity")
    assert ck.n == 10 and ck.n_inferred and any("inferred from the positional table" in note for note in ck.notes)
    assert ck.metadata == {"task": "parity", "hidden_dim": "32", "num_layers": "2"}  # kept as strings, not parsed
    with torch.no_grad():
        assert torch.allclose(ck.model(cube.vertices(10)), reference(cube.vertices(10)), atol=1e-5)
    assert read_metadata(path) == ck.metadata
    with pytest.raises(CheckpointError, match="number of attention heads"):
        load_checkpoint(path)


def test_arguments_override_a_foreign_files_metadata(foreign_file):
    _, path = foreign_file
    ck = load_checkpoint(path, n_heads=2, task="first", n=6)
    assert ck.task == sv.get_task("first") and ck.n == 6 and not ck.n_inferred
    assert len(ck.notes) == 1 and "n=6 is less than the positional table's 10 positions" in ck.notes[0]  # no other


def test_heads_and_n_are_read_from_a_foreign_files_strings_and_bad_ones_ignored(tmp_path):
    state = {k: v.contiguous() for k, v in AuthorsModel(16, 4, 1, max_len=12).state_dict().items()}
    path = tmp_path / "f.safetensors"
    safetensors.torch.save_file(state, path, metadata={"num_attn_heads": "4", "n": "7", "task": "classification"})
    ck = load_checkpoint(path)
    assert ck.config.n_heads == 4 and ck.n == 7 and not ck.n_inferred and ck.task is None
    assert ck.notes == ["the metadata's task 'classification' is not a sensviz task label; ignored"]
    assert load_checkpoint(path, n_heads=2).config.n_heads == 2  # the argument wins
    safetensors.torch.save_file(state, path, metadata={"nhead": "two", "n": "1e9"})
    ck = load_checkpoint(path, n_heads=4)
    assert ck.n == 12 and ck.n_inferred and len(ck.notes) == 3


def test_inspect_a_foreign_file_with_and_without_flags(foreign_file, capsys):
    _, path = foreign_file
    assert main(["inspect", str(path)]) == 2
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and "--n-heads" in err
    assert main(["inspect", str(path), "--n-heads", "2", "--measure-inputs", "64", "--directions", "4"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert result["layout"] == "authors" and result["task"] == "parity" and result["n"] == 10
    assert "note: n=10 was inferred from the positional table's length" in err
    assert main(["inspect", str(path), "--n-heads", "2", "--task", "first", "--n", "5", "--measure-inputs", "32",
                 "--directions", "4"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["task"] == "first" and json.loads(out)["n"] == 5
    assert err.count("\n") == 1 and "note: n=5 is less than the positional table's 10 positions" in err


def test_python_dash_m_sensviz():
    proc = subprocess.run([sys.executable, "-m", "sensviz", "--help"], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: sensviz") and "inspect" in proc.stdout


def test_pyproject_declares_every_runtime_import():
    import ast
    import tomllib

    declared = {d.split("=")[0].split(">")[0].split("<")[0].split("[")[0].strip().lower().replace("-", "_")
                for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    module_of = {"vl_convert_python": "vl_convert"}
    declared = {module_of.get(d, d) for d in declared}
    imported = set()
    for path in (ROOT / "sensviz").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module.split(".")[0])
    third_party = {m for m in imported if m not in sys.stdlib_module_names} - {"sensviz", "ray"}  # ray: --executor ray only
    assert third_party <= declared | {"pyarrow"}, third_party - declared
    assert "pyarrow" in declared  # pandas' parquet engine, imported by pandas itself


class _Deaf:
    """A run that ignores SIGTERM: Stop's terminate does nothing, and the wait lasts `seconds` (the job
    manager's real wait, `LaunchedJob.wait`, gives 30 s and then kills the run's process group)."""

    def __init__(self, seconds: float):
        self.seconds, self.returncode, self.pid, self.lost = seconds, None, None, None

    def poll(self):
        return self.returncode

    def terminate(self):
        pass

    def wait(self, timeout=None):
        import time

        time.sleep(min(self.seconds, timeout or self.seconds))
        self.returncode = -9
        return self.returncode


class _DeafExecutor:
    """The first run ignores SIGTERM for 1.5 s; later ones end when told."""

    def __init__(self):
        self.started = 0

    def warm(self):
        pass

    def start_worker(self, folder, device=None):
        self.started += 1
        return _Deaf(1.5 if self.started == 1 else 0.0)

    def close(self):
        pass


def test_a_run_that_ignores_sigterm_freezes_no_other_users_job_panel(tmp_path):
    """While Stop waits for a run that ignores SIGTERM, every other page's call of the job manager
    (a status, an owner's active job, a new submit) answers at once: it never waits holding its lock."""
    import threading
    import time

    from server import budget
    from server.jobs import JobManager
    from server.kept import KeptStore
    from server.worker import TrainRequest

    manager = JobManager(tmp_path / "jobs", KeptStore(tmp_path / "kept", cap=2**20), capacity=2, threads=1,
                         calibration=budget.Calibration(op_s=1e-6, flop_s=1e-12), executor=_DeafExecutor())
    request = TrainRequest("first", {"arch": "encoder", "d_model": 8, "n_layers": 1, "n_heads": 2},
                           {"n": 4, "steps": 10, "batch_size": 8, "seed": 0}, 10)
    try:
        deaf = manager.submit("alice", request, "10.0.0.1")
        other = manager.submit("bob", request, "10.0.0.2")
        assert manager.status(deaf).state == manager.status(other).state == "running"
        stopping = threading.Thread(target=manager.stop, args=(deaf, "alice"))
        start = time.monotonic()
        stopping.start()
        slowest = 0.0
        while stopping.is_alive():
            asked = time.monotonic()
            assert manager.status(other).state == "running" and manager.active("bob") == other
            assert manager.status(deaf) is not None
            slowest = max(slowest, time.monotonic() - asked)
            time.sleep(0.05)
        carol = manager.submit("carol", request, "10.0.0.3")  # a new run is queued meanwhile too
        assert time.monotonic() - start >= 1.4  # the check can fail: Stop did wait for the run
        assert slowest < 0.5 and manager.status(carol) is not None
        assert not manager.status(deaf).active
    finally:
        manager.close()


def test_ctrl_c_in_the_first_instants_of_a_command_is_one_line_and_exit_130(tmp_path):
    """Ctrl-C while the command still loads its libraries (torch takes seconds) ends it with one line
    and exit 130, as later (tests/app/test_cli.py), or, in the instants before the interpreter installs its
    own handler, by the signal itself without a word: no traceback at any instant."""
    import os
    import signal
    import time

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = []
    for delay in (0.3, 0.8, 1.5):  # SIGINT as a terminal's foreground command has it (see tests/app/test_cli.py)
        proc = subprocess.Popen([sys.executable, "-m", "sensviz", "task-info", "--task", "parity", "--n", "4"],
                                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        procs.append((time.monotonic() + delay, proc))
    interrupted = 0
    for when, proc in procs:
        time.sleep(max(0.0, when - time.monotonic()))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        if proc.returncode == 0:  # it ended before the Ctrl-C
            continue
        if proc.returncode == -signal.SIGINT:  # before Python's own handler existed: ended by the signal, silent
            assert err == "", err
        else:
            assert proc.returncode == 130 and err.splitlines() in (["sensviz: interrupted"],
                                                                   ["sensviz task-info: interrupted"]), err
        interrupted += 1
    assert interrupted >= 2  # the check can fail: the Ctrl-Cs came while the commands were loading


@pytest.mark.slow  # a launcher (torch loaded) and one run
def test_stop_ends_what_a_run_started_even_when_it_ignores_sigterm(tmp_path):
    """A process in a run's group (as a run that forks starts one) that ignores SIGTERM: Stop ends the
    run, and the launcher then ends its whole group, so nothing of the run keeps running."""
    import os
    import time

    from sensviz.executors import LocalExecutor
    from server.worker import TrainRequest

    request = TrainRequest("parity", {"arch": "encoder", "d_model": 8, "n_layers": 1, "n_heads": 2},
                           {"n": 4, "steps": 100_000, "batch_size": 16, "seed": 0}, 100_000)
    (tmp_path / "request.json").write_text(json.dumps(request.to_dict()))
    executor = LocalExecutor(threads=1)
    child = None
    try:
        run = executor.start_worker(tmp_path)
        deadline = time.monotonic() + 300
        while run.pid is None:
            assert time.monotonic() < deadline, "the launcher never started the run"
            time.sleep(0.1)
        child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                                  "signal.SIG_IGN); print('ready', flush=True); time.sleep(300)"],
                                 stdout=subprocess.PIPE, text=True, preexec_fn=lambda: os.setpgid(0, run.pid))
        assert child.stdout.readline().strip() == "ready"
        run.terminate()  # Stop
        assert run.wait(timeout=60) is not None
        assert child.wait(timeout=10) == -9  # ended with the run's group, although it ignores SIGTERM
    finally:
        if child is not None and child.poll() is None:
            child.kill()
        executor.close()


def test_a_sweep_records_no_server_path_of_its_spec(tmp_path):
    """The Experiments page shows a sweep's spec.json source: a relative path within the folder the sweep ran
    from stays as typed, any other (absolute, or out with ..) is kept as its file name only."""
    from sensviz import sweeps

    assert sweeps.shown_source("experiments/length_scaling.toml") == "experiments/length_scaling.toml"
    assert sweeps.shown_source("/home/alice/private/spec.toml") == "spec.toml"
    assert sweeps.shown_source("../../srv/specs/tradeoff.toml") == "tradeoff.toml"
    spec = sweeps.load_spec(ROOT / "experiments" / "length_scaling.toml")
    sweeps.write_identity(tmp_path, spec)
    assert json.loads((tmp_path / "spec.json").read_text())["source"] == "length_scaling.toml"
    assert str(ROOT) not in (tmp_path / "spec.json").read_text()


class _Busy:
    """A run that has spent this test process's CPU time (seconds of it: torch loaded) and ends when told."""

    def __init__(self):
        import os

        self.pid, self.returncode, self.lost, self.told = os.getpid(), None, None, 0

    def poll(self):
        return self.returncode

    def terminate(self):
        self.told += 1
        self.returncode = -15

    def wait(self, timeout=None):
        return self.returncode


def test_the_time_limit_counts_a_runs_cpu_time_too(tmp_path):
    """A run on two threads spends two CPU seconds a wall-clock second: it is stopped once either is past the
    budget's seconds."""
    from server import budget
    from server.jobs import JobManager
    from server.kept import KeptStore
    from server.worker import TrainRequest

    assert budget.cpu_seconds(_Busy().pid) > 0.5 and budget.cpu_seconds(None) == budget.cpu_seconds(2**22 + 7) == 0
    assert budget.Budget(0.5, 100).over(0.0, _Busy()) and budget.Budget(0.5, 100).over(0.6, None)
    assert not budget.Budget(1e6, 100).over(0.6, _Busy())
    runs = []

    class Executor:
        def warm(self):
            pass

        def start_worker(self, folder, device=None):
            runs.append(_Busy())
            return runs[-1]

        def close(self):
            pass

    manager = JobManager(tmp_path / "jobs", KeptStore(tmp_path / "kept", cap=2**20), capacity=1, threads=1,
                         calibration=budget.Calibration(op_s=1e-9, flop_s=1e-15), executor=Executor(),
                         job_budget=budget.Budget(0.5, 4096), poll_s=3600)  # no background tick: this test's
    try:
        job = manager.submit("alice", TrainRequest("first", {"arch": "encoder", "d_model": 8, "n_layers": 1, "n_heads": 2},
                                                   {"n": 4, "steps": 10, "batch_size": 8, "seed": 0}, 10), "10.0.0.1")
        with manager.lock:  # started a moment ago: the wall clock is within the budget, its CPU time is not
            manager._stop_over_time()
            assert runs[0].told == 1 and "time limit per run" in manager.jobs[job].stop_why
    finally:
        manager.close()
