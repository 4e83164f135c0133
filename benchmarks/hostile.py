"""The cost of rejecting hostile checkpoint files, arguments and output paths, printed as a table.

    python benchmarks/hostile.py            # every case of tests/hostile_cases.py, one row each
    python benchmarks/hostile.py --summary  # one row per family, and the worst case
    python benchmarks/hostile.py --jobs     # the class server's job cases (issue 17), one row each
    python benchmarks/hostile.py --floods [--estimates [--caps]]   # issue 42's families, one row each

All cases are loaded in one child process (torch at one thread); `extra MB` is the peak resident
memory of the call above the resident memory before it (the peak is reset before every case). The targets (issue 12): every case
rejected with one line, under 2 s and 300 MB.

The family 'CLI outputs' (issue 17) runs `sensviz.cli.main` in a second child process with every
writing command's output (`--out`, `--dump`, `--dir`) onto a device, a fifo, a folder (or a file
where a folder is wanted), links to those, a path under a file and a dump without .npz; a case
is rejected when the command exits 2 with one line on stderr and the place is left as it was.

`--jobs`: the hostile tester's class-server cases against a real `server.jobs.JobManager` and
`server.kept.KeptStore` (issue 17): 101 owners from one address flooding the queue and then one
honest student; forged owner cookies; the requests that held the machine (d_ff and the scratchpad
over the limits, the Train form's largest run); a student filling the kept store, a keep into a full
store, a kept file replaced by a directory, a 16.7-million-character name; the Experiments page's
folder field given paths out of the results roots (absolute, ../, /proc/self/cwd, ~, a link out, 100,000
characters, a NUL); each with its outcome and
the seconds it took to decide. The target: the student is queued ahead of the flood's waiting runs,
every forged cookie counts as absent, every oversized request is refused, no owner's keep evicts
another's model, and every refusal is one line.

`--floods` (issue 42): identity floods against the real kept store and class store (fresh owner ids from
one address keeping models, several addresses filling the store then newcomers, one file kept under 200
input lengths; 100 class creations and 199 joins from one address, a gallery flood, a closed class's
pins), runs told to stop on the real launcher (a process in the run's group that ends on SIGTERM, one
that ignores it), and with `--estimates` the budget's estimate against the actual cost at the Train
form's extremes. Per family: cases, clean, the slowest case (s) and the largest extra memory (MB).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import hostile_cases  # noqa: E402


def cli_output_cases(folder: Path) -> list[dict]:
    """The 'CLI outputs' cases (those of tests/app/test_cli.py), with places made in `folder`."""
    from test_cli import OUTPUT_COMMANDS, bad_targets

    cases = []
    for command, (argv, want_folder) in OUTPUT_COMMANDS.items():
        (folder / command.replace(" ", "_")).mkdir()
        places = bad_targets(folder / command.replace(" ", "_"), want_folder)
        cases += [{"name": f"{command} onto {what}", "argv": [*argv, str(path)], "place": str(path)}
                  for what, path, _ in places]
    (folder / "dump").mkdir()
    dump = str(folder / "dump" / "X")
    cases.append({"name": "inspect --dump without .npz", "argv": ["inspect", "missing.safetensors", "--dump", dump],
                  "place": dump})
    return cases


def _state(place: str) -> tuple | None:
    """What is at `place` (not following a link): type, inode, size, modification time; None when nothing."""
    try:
        st = os.lstat(place)
    except OSError:
        return None
    return st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns


def _cli_child(spec_path: str) -> None:
    """Run every case of the spec through `sensviz.cli.main`; one row per case as JSON on stdout."""
    import torch

    from sensviz.cli import main

    torch.set_num_threads(1)
    rows = []
    for case in json.loads(Path(spec_path).read_text()):
        before = _state(case["place"])
        listing = sorted(Path(spec_path).parent.rglob("*"))
        hostile_cases._reset_peak()
        baseline, _ = hostile_cases._memory_mb()
        err = io.StringIO()
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                code = main(case["argv"])
        except BaseException as exc:  # noqa: BLE001 - what the benchmark must never see
            code = f"escaped {type(exc).__name__}"
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        _, peak = hostile_cases._memory_mb()
        message = err.getvalue()
        untouched = _state(case["place"]) == before and sorted(Path(spec_path).parent.rglob("*")) == listing
        clean = code == 2 and message.count("\n") == 1 and untouched
        rows.append({"family": "CLI outputs", "name": case["name"], "outcome": "rejected" if clean else f"exit {code}",
                     "message": message.strip(), "cpu_s": cpu, "wall_s": wall, "extra_mb": peak - baseline})
    json.dump(rows, sys.stdout)


def measure_cli_outputs(folder: Path) -> list[dict]:
    """The 'CLI outputs' family, measured in one fresh child process."""
    spec = folder / "cli-cases.json"
    spec.write_text(json.dumps(cli_output_cases(folder)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, __file__, "--cli-child", str(spec)], capture_output=True, text=True, env=env,
                          timeout=1800, cwd=folder)
    if proc.returncode != 0:
        raise RuntimeError(f"the measuring child failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def store_cases(folder: Path, row) -> None:
    """The kept store's cases (issue 17) in `folder`: a student who fills the store, a file that is
    not a file any more, a name of 16.7 million characters; one `row(family, case, decide)` each."""
    import os

    from server.kept import KeptRefused, KeptStore, KeptUnreadable

    mib = 2**20
    store = KeptStore(folder, cap=8 * mib, quota=3 * mib)
    other = store.keep("upload", "other.safetensors", os.urandom(mib), "other")

    def keep(owner, name, size):
        try:
            return f"kept {store.keep('upload', name, os.urandom(size), owner).token[:6]}…"
        except KeptRefused as err:
            return f"refused: {err}"

    row("kept store", "one owner keeps 8 files of 1 MiB (quota 3 MiB)",
        lambda: f"{sum(keep('bot', f'{k}.safetensors', mib - 4096).startswith('kept') for k in range(8))} kept, "
        f"{len(store.owned('bot'))} left (its own oldest evicted); "
        f"the other owner's model {'kept' if store.info(other.token) else 'EVICTED'}")
    row("kept store", "one file over the owner's quota", lambda: keep("bot", "big.safetensors", 4 * mib))
    for k in range(5):
        keep(f"filler{k}", "fill.safetensors", mib + mib // 2)
    row("kept store", "a keep when the whole store is full", lambda: keep("late", "late.safetensors", mib + mib // 2))
    broken = store.keep("upload", "dir.safetensors", os.urandom(1024), "other")
    path = folder / f"{broken.file or broken.token}.safetensors"
    path.unlink()
    path.mkdir()

    def read_broken():
        try:
            store.data(broken.token)
            return "read"
        except KeptUnreadable as err:
            return f"refused: {err}"

    row("kept store", "a kept file replaced by a directory", read_broken)
    row("kept store", "a name of 16.7 million characters",
        lambda: f"kept as a name of {len(store.info(store.keep('upload', 'x' * 2**24, b'1', 'long').token).name)} characters")


def folder_cases(row) -> None:
    """The Experiments page's folder field (issue 17): every path out of the results roots is one line
    that names no server path (one case puts a symbolic link out of the first root for the time it runs)."""
    from server import services

    def opened(text):
        def decide():
            try:
                return f"OPENED {services.sweep_folder(text)}"
            except ValueError as err:
                return f"refused: {err}"
        return decide

    root = services.results_roots()[0]
    escape = root / f".hostile-link-{os.getpid()}"
    escape.symlink_to("/etc")
    try:
        for case, text in (("absolute path", "/etc"), ("../ out of the root", "../../../../etc"),
                           ("/proc/self/cwd", "/proc/self/cwd"), ("~ (the server's home)", "~"),
                           ("a symbolic link out of the root", escape.name), ("100,000 characters", "a/" * 50_000),
                           ("a NUL byte", "quick\x00/tradeoff")):
            row("folders", case, opened(text))
    finally:
        escape.unlink()


def job_cases() -> list[dict]:
    """Run the job cases (see the module docstring); one row per case: family, case, outcome, seconds."""
    import time

    from server.jobs import JobManager, JobRefused, calibration
    from server.kept import KeptStore
    from server.worker import TrainRequest
    from ui import owner_id

    rows = []

    def row(family, case, decide):
        start = time.perf_counter()
        try:
            outcome = decide()
        except (JobRefused, ValueError) as err:
            outcome = f"refused: {err}"
        rows.append({"family": family, "case": case, "outcome": outcome, "seconds": time.perf_counter() - start})

    small = TrainRequest("parity", {"arch": "encoder", "d_model": 8, "n_layers": 1, "n_heads": 2},
                         {"n": 4, "steps": 100_000, "batch_size": 16}, 1000)
    with tempfile.TemporaryDirectory() as folder:
        manager = JobManager(Path(folder) / "jobs", KeptStore(Path(folder) / "kept", 2**26), capacity=1, threads=1)
        try:
            row("calibration", "this machine's, once per server", lambda: str(calibration()))
            row("queue flood", "101 fresh owners from one address",
                lambda: f"{sum(manager.submit(f'bot{k}', small, '10.0.0.1') is not None for k in range(101))} queued")
            row("queue flood", "an honest student from another address",
                lambda: f"queued, position {manager.status(manager.submit('student', small, '10.0.0.2')).position}")
            big = {"arch": "encoder", "d_model": 256, "n_layers": 6, "n_heads": 8}
            for case, request in (
                ("d_ff = 16384", TrainRequest("parity", {**big, "d_ff": 16384}, {"n": 24})),
                ("scratchpad, 97 M parameters", TrainRequest("parity", {**big, "arch": "scratchpad", "d_ff": 8192},
                                                             {"n": 24})),
                ("the form's caps: batch 4096, n = 24", TrainRequest("parity", big, {"n": 24, "batch_size": 4096,
                                                                                     "steps": 1})),
                ("a million evaluation strings", TrainRequest("parity", big, {"n": 24, "eval_size": 2**20, "steps": 1})),
            ):
                row("oversized run", case, lambda request=request: f"queued: {manager.submit('other', request, '10.0.0.3')}")
        finally:
            manager.close()
        store_cases(Path(folder) / "store", row)
        folder_cases(row)
        secret = owner_id.owner_secret(Path(folder))
        minted = owner_id.mint_owner(secret)
        ident, signature = minted.split(".")
        for case, cookie in (("random", "x" * 22), ("valid-looking id, wrong HMAC", f"{ident}.{signature[::-1]}"),
                             ("another server's id", owner_id.mint_owner(b"other")), ("the server's own", minted)):
            row("owner cookie", case, lambda cookie=cookie: "accepted" if owner_id.verified_owner(cookie, secret)
                else "counts as absent")
    return rows


def flood_cases() -> list[dict]:
    """Identity floods (issue 42): an owner id costs nothing, so each flood comes from fresh owner ids of one
    network address, against the real `KeptStore` and `ClassStore` on a fresh folder (a store of 64 MiB with
    the default shares). One row per case: family, case, outcome, clean (what must hold did), seconds and
    the largest extra memory of this process (MB)."""
    import resource
    import time

    from server.classes import ClassRefused, ClassStore
    from server.kept import KeptRefused, KeptStore
    from server.limits import most

    rows = []

    def row(family, case, decide):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        start = time.perf_counter()
        outcome, clean = decide()
        rows.append({"family": family, "case": case, "outcome": outcome, "clean": clean,
                     "seconds": time.perf_counter() - start,
                     "extra_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before})

    mib = 2**20
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        store = KeptStore(folder / "kept", cap=64 * mib, secret=b"bench")
        clock = [time.time()]
        classes = ClassStore(folder / "classes", b"bench", clock=lambda: clock[0])
        store.pins = classes.pins

        def keep(owner, data, address, **kwargs):
            try:
                return store.keep("upload", f"{owner}.safetensors", data, owner, address=address, **kwargs)
            except KeptRefused:
                return None

        def sybils():
            kept = sum(keep(f"sybil{k}", os.urandom(mib), "10.6.6.6") is not None for k in range(100))
            held = sum(store.usage(f"sybil{k}") for k in range(100))
            return (f"{kept} of 100 kept, {held / mib:.1f} MiB held by the address (its quota "
                    f"{store.address_quota / mib:.0f} MiB)"), held <= store.address_quota

        row("store flood", "100 fresh owners from one address keep 1 MiB each", sybils)
        row("store flood", "then a student at another address keeps 1 MiB",
            lambda: ("kept" if keep("student", os.urandom(mib), "10.0.0.1") else "REFUSED",
                     store.info(store.owned("student")[0].token) is not None if store.owned("student") else False))

        def many_addresses():
            for a in range(8):
                for k in range(40):
                    keep(f"a{a}-{k}", os.urandom(mib), f"10.7.{a}.1")
            full = store.total()
            late = [keep(f"late{k}", os.urandom(mib), f"10.8.{k}.1") for k in range(5)]
            return (f"store {full / mib:.0f} of {store.cap / mib:.0f} MiB; {sum(x is not None for x in late)} of 5 "
                    "newcomers kept (room made from the largest holders)"), all(late) and store.total() <= store.cap

        row("store flood", "8 addresses fill the store, then 5 newcomers", many_addresses)

        def one_file():
            data = os.urandom(4096)
            tokens = {keep("relabel", data, "10.9.9.9", overrides={"n": n}).token for n in range(1, 201)}
            return f"{len(tokens)} model(s) for 200 keeps of one file with n = 1..200", len(tokens) == 1

        row("store flood", "one file kept 200 times under other n", one_file)

        def creations():
            made = 0
            for k in range(100):
                try:
                    classes.create(f"class {k}", f"bot{k}", "10.6.6.6")
                    made += 1
                except ClassRefused:
                    pass
            other = classes.create("An honest class", "teacher", "10.0.0.2")
            return f"{made} of 100 created from one address; another instructor's: created", \
                made <= most("classes_per_address_hour") and other is not None

        row("class flood", "one address creates 100 classes in a minute", creations)
        honest_class = classes.create("Seminar", "prof", "10.0.0.3")

        def joins():
            joined = 0
            for k in range(199):
                try:
                    classes.join(honest_class.code, f"sybil {k}", f"s{k}", "10.6.6.6")
                    joined += 1
                except ClassRefused:
                    pass
            classes.join(honest_class.code, "Ada", "ada", "10.0.0.4")
            return (f"{joined} of 199 cookie-less joins from one address; the honest student joined",
                    joined <= most("class_joins_per_address_minute"))

        row("class flood", "199 cookie-less joins of one class from one address", joins)

        def gallery():
            added = 0
            for k in range(10):
                member = f"s{k}"
                data = os.urandom(2048)
                for n in range(200):
                    kept = keep(member, data, "10.6.6.6", overrides={"n": n + 1})
                    try:
                        classes.add_model(honest_class.code, member, kept.token, "parity", n + 1, None, "m")
                        added += 1
                    except (ClassRefused, AttributeError):
                        pass
            found = len(classes.get(honest_class.code).models)
            return f"{found} gallery entries from 10 members x 200 keeps of one file each", found <= 10

        row("class flood", "10 members keep one file 200 times each into the gallery", gallery)

        def pins_lapse():
            classes.close(honest_class.code, "prof")
            clock[0] += 3
            return (f"{len(classes.pins())} models pinned after the class was closed",
                    not any(code == honest_class.code for code in classes.pins().values()))

        row("class flood", "a closed class's models are no longer pinned", pins_lapse)
    return rows


def stop_cases() -> list[dict]:
    """Runs that do not end when told (issue 42), on the real launcher (`sensviz.executors.LocalExecutor`):
    a process started inside a run's process group (as a run that forks would), which ends on SIGTERM or
    ignores it, and Stop pressed on the run. Clean: after Stop, nothing of the run's group is left. One row
    per case with the seconds Stop took."""
    import signal
    import time

    from sensviz.executors import LocalExecutor
    from server.worker import TrainRequest

    request = TrainRequest("parity", {"arch": "encoder", "d_model": 8, "n_layers": 1, "n_heads": 2},
                           {"n": 4, "steps": 100_000, "batch_size": 16, "seed": 0}, 100_000)
    rows = []
    executor = LocalExecutor(threads=1)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for k, (case, ignores) in enumerate((("a run's child that ends on SIGTERM", False),
                                                 ("a run's child that ignores SIGTERM", True))):
                folder = Path(tmp) / f"run{k}"
                folder.mkdir()
                (folder / "request.json").write_text(json.dumps(request.to_dict()))
                run = executor.start_worker(folder)
                deadline = time.monotonic() + 600
                while run.pid is None and time.monotonic() < deadline:
                    time.sleep(0.1)
                handler = "signal.signal(signal.SIGTERM, signal.SIG_IGN); " if ignores else ""
                child = subprocess.Popen([sys.executable, "-c", f"import signal, time; {handler}time.sleep(600)"],
                                         preexec_fn=lambda pid=run.pid: os.setpgid(0, pid))  # joins the run's group
                time.sleep(1.0)
                start = time.perf_counter()
                run.terminate()  # Stop
                code = run.wait(timeout=30)
                seconds = time.perf_counter() - start
                try:
                    child.wait(timeout=5)
                    left = False
                except subprocess.TimeoutExpired:
                    left = True
                    child.send_signal(signal.SIGKILL)
                    child.wait()
                rows.append({"family": "runs told to stop", "case": case, "seconds": seconds, "extra_mb": 0.0,
                             "clean": not left, "outcome": f"run ended ({code}); its child "
                             f"{'LEFT RUNNING' if left else 'ended'}"})
    finally:
        executor.close()
    return rows


def estimate_cases(caps: bool = False) -> list[dict]:
    """Estimate against actual (issue 42) for the Train form's extremes (tests/server/test_budget.py's `extremes`;
    with `caps`, also each architecture at the form's model caps: 10 to 20 CPU minutes each), each job run
    as the worker runs it in a process forked from a warm one. Clean: within 2x in CPU time and (above
    64 MiB) in peak memory. `seconds` is the job's CPU time, `extra_mb` its peak memory growth."""
    sys.path.insert(0, str(ROOT / "tests" / "server"))
    import test_budget

    from server.worker import LIVE_LIMITS, TrainRequest

    requests = test_budget.extremes()
    if caps:
        model = {k: LIVE_LIMITS[k] for k in ("d_model", "n_layers", "n_heads", "d_ff")}
        for arch in ("encoder", "formal", "scratchpad"):
            requests[f"{arch} at the model caps"] = TrainRequest(
                "parity", {"arch": arch, **model}, {"n": LIVE_LIMITS["n"], "steps": 2, "batch_size": 16, "seed": 0,
                                                    "eval_interval": LIVE_LIMITS["eval_interval"]},
                LIVE_LIMITS["measure_every"])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        helper = subprocess.Popen([sys.executable, "-c", test_budget.HELPER.format(root=str(ROOT))],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, "OMP_NUM_THREADS": "1"})
        helper.log = Path(tmp) / "none"
        helper.log.write_text("")
        try:
            for k, (case, request) in enumerate(requests.items()):
                found = test_budget.measured(request, Path(tmp) / f"job{k}", helper)
                time_ratio = found["estimate_s"] / found["seconds"]
                floor = test_budget.MEMORY_FLOOR_MIB
                memory_ratio = max(found["estimate_mib"], floor) / max(found["mib"], floor)
                rows.append({"family": "estimates", "case": case, "seconds": found["seconds"], "extra_mb": found["mib"],
                             "clean": found["outcome"] == "finished" and 0.5 <= time_ratio <= 2 and 0.5 <= memory_ratio <= 2,
                             "outcome": f"{found['estimate_s']:.1f} s / {found['seconds']:.1f} s ({time_ratio:.2f}x), "
                                        f"{found['estimate_mib']:.0f} / {found['mib']:.0f} MiB ({memory_ratio:.2f}x)"})
                print(f"{case}: {rows[-1]['outcome']}", file=sys.stderr, flush=True)
        finally:
            helper.stdin.close()
            helper.wait()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summary", action="store_true", help="one row per family")
    parser.add_argument("--family", help="only this family, e.g. 'CLI outputs'")
    parser.add_argument("--cli-child", help=argparse.SUPPRESS)  # the measuring child of the 'CLI outputs' family
    parser.add_argument("--jobs", action="store_true", help="the class server's job cases instead")
    parser.add_argument("--floods", action="store_true", help="the identity floods and the runs told to stop "
                        "(issue 42) instead")
    parser.add_argument("--estimates", action="store_true", help="with --floods: the budget's estimate against "
                        "the actual cost at the Train form's extremes (minutes)")
    parser.add_argument("--caps", action="store_true", help="with --estimates: each architecture at the model "
                        "caps too (an hour of CPU)")
    args = parser.parse_args()
    if args.floods:
        rows = flood_cases() + stop_cases() + (estimate_cases(args.caps) if args.estimates else [])
        print(f"{'family':12} {'case':58} {'clean':>5} {'seconds':>8} {'extra MB':>8}  outcome")
        for r in rows:
            print(f"{r['family']:12} {r['case'][:58]:58} {str(r['clean']):>5} {r['seconds']:8.2f} {r['extra_mb']:8.1f}  "
                  f"{r['outcome'][:120]}")
        summarize(rows)
        return
    if args.jobs:
        print(f"{'family':14} {'case':40} {'seconds':>8}  outcome")
        for r in job_cases():
            print(f"{r['family']:14} {r['case']:40} {r['seconds']:8.2f}  {r['outcome'][:150]}")
        return
    if args.cli_child:
        _cli_child(args.cli_child)
        return
    with tempfile.TemporaryDirectory() as folder:
        rows = [] if args.family == "CLI outputs" else hostile_cases.measure(hostile_cases.cases(), Path(folder))
        if args.family in (None, "CLI outputs"):
            (Path(folder) / "cli").mkdir()
            rows += measure_cli_outputs(Path(folder) / "cli")
    rows = [r for r in rows if args.family in (None, r["family"])]
    if args.summary:
        print(f"{'family':28} {'cases':>5} {'rejected':>8} {'max cpu s':>9} {'max wall s':>10}")
        for family in dict.fromkeys(r["family"] for r in rows):
            part = [r for r in rows if r["family"] == family]
            print(f"{family:28} {len(part):5d} {sum(r['outcome'] == 'rejected' for r in part):8d} "
                  f"{max(r['cpu_s'] for r in part):9.3f} {max(r['wall_s'] for r in part):10.3f}")
    else:
        print(f"{'family':28} {'case':52} {'outcome':>9} {'cpu s':>7} {'wall s':>7} {'extra MB':>8}")
        for r in rows:
            print(f"{r['family']:28} {r['name'][:52]:52} {r['outcome'][:9]:>9} {r['cpu_s']:7.3f} {r['wall_s']:7.3f} "
                  f"{r['extra_mb']:8.1f}")
    worst = max(rows, key=lambda r: r["wall_s"])
    clean = sum(r["outcome"] == "rejected" for r in rows)
    print(f"\n{clean}/{len(rows)} rejected cleanly; slowest: {worst['name']} ({worst['family']}): "
          f"{worst['cpu_s']:.3f} s CPU, {worst['wall_s']:.3f} s wall; "
          f"largest extra memory: {max(r['extra_mb'] for r in rows):.1f} MB")
    if clean != len(rows):
        sys.exit(1)


def summarize(rows: list[dict]) -> None:
    """Per family: cases, clean, the slowest case and the largest extra memory."""
    print(f"\n{'family':16} {'cases':>5} {'clean':>5} {'slowest s':>9} {'extra MB':>8}")
    for family in dict.fromkeys(r["family"] for r in rows):
        part = [r for r in rows if r["family"] == family]
        print(f"{family:16} {len(part):5d} {sum(bool(r['clean']) for r in part):5d} "
              f"{max(r['seconds'] for r in part):9.2f} {max(r['extra_mb'] for r in part):8.1f}")


if __name__ == "__main__":
    main()
