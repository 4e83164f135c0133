"""Sizing a department: what one student costs a replica and the Ray cluster, measured here one thing at a
time, the rule built from it, and the rule checked against classes of websocket students through HAProxy.

1. On one replica served alone (local backend, a fresh data folder), with `--sessions` websocket sessions
   at a time: the replica's memory (RSS) before any session, per idle session (the Home page open), per
   session on each page, per session with a model selected; the model cache (the growth when a further
   zoo model is opened, by one session); the replica's CPU seconds per page view (pages already cached,
   as in class); and, alongside, the CPU seconds of one assignment run (`server.worker` on the
   length-scaling assignment's PARITY n = 8 cell, in a process of its own).
2. The rule (docs/serving.md prints it): a replica holds `base + S x session + cache`; page views cost
   `views x cpu_view` of one core per replica (a replica's scripts share one interpreter); runs cost
   `runs x cpu_run` of Ray CPUs.
3. A department (`deploy/department.py`: Ray head and worker, three replicas, HAProxy) serves each class
   size in `--students` twice: every student straight to one replica (no proxy), then through the proxy
   (affinity, three replicas). Each student (its own loopback address) opens Home, Sensitivity, Lab
   chapter 1 and Train; every fifth presses Train (the default run, on Ray) first. Per run: the page
   times (median, 95th percentile), errors, each replica's peak memory and the replicas' CPU seconds, each
   beside the rule's prediction.
4. Replica kill: with the last class connected through the proxy, replica r1 is killed (SIGKILL); its
   students' browsers reconnect (asking for their sessions) and land on another replica: the time until
   the last of them has a page again. Then r1 restarted: the time from its start to its health answer.

    python benchmarks/department.py                          # 30 and 60 students (minutes)
    python benchmarks/department.py --students 10 --sessions 5 --skip-run   # a short look
    python benchmarks/department.py --restarts 5             # only the replica restart, 5 times (a minute or two)

`--restarts K` measures only step 4's restart: the department started, then r1 stopped (SIGTERM) and started
again K times, each time from its start to its health answer and to its first page through the proxy, with
the replica's own "warmed up in" line, and the CPU seconds it used until ready.

Not run by .ci/run (minutes of serving and training).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from class_load import address  # noqa: E402
from load import ROOT, Session, served  # noqa: E402

sys.path.insert(0, str(ROOT / "deploy"))
from department import Department, healthy, proxy_cookie, student  # noqa: E402

from server.owners import mint_owner, owner_secret  # noqa: E402

PAGES = ["", "sensitivity?model=encoder-parity-n8", "lab?chapter=1", "train"]
MODEL_PAGE = "sensitivity?model=encoder-parity-n8"
MORE_MODELS = ["encoder-first-n8", "encoder-majority-n7", "encoder-mean-n8"]  # opened one by one: the model cache
TRAIN_EVERY = 5  # every fifth student presses Train
CLASS_MINUTES = 15  # a class's length, for the rule's CPU rates
VIEWS_PER_MINUTE = 2  # page views per student per minute in class (a page open 30 s on average)


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) / 1024


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks of 1/100 s


def settle(pid: int, seconds: float = 2.0) -> float:
    """The RSS after the replica has been quiet a moment."""
    time.sleep(seconds)
    return rss_mib(pid)


async def _hold(base: str, urls: list[str], pid: int) -> float:
    async with contextlib.AsyncExitStack() as stack:
        sessions = [await stack.enter_async_context(Session(base, local_addr=(address(k), 0))) for k in range(len(urls))]
        for s, url in zip(sessions, urls):
            await s.open(url)
        return await asyncio.to_thread(settle, pid)


def growth(base: str, urls: list[str], pid: int) -> float:
    """Open one session per URL and keep them open: the RSS growth (MiB) from just before to all of them open."""
    before = settle(pid)
    return asyncio.run(_hold(base, urls, pid)) - before


def assignment_run(folder: Path) -> subprocess.Popen:
    """One assignment run (`server.worker`, the length-scaling PARITY n = 8 cell) in a process of its own."""
    from server.assignments import LENGTH_SCALING

    cell = {"task": "parity", "n": 8, "seed": LENGTH_SCALING.seed_base}
    fields = LENGTH_SCALING.request(cell)
    model = {k: fields[k] for k in ("arch", "d_model", "n_layers", "n_heads")}
    train = {k: fields[k] for k in ("n", "steps", "batch_size", "lr", "weight_decay", "eval_interval", "seed")}
    folder.mkdir(parents=True)
    (folder / "request.json").write_text(json.dumps({"task": "parity", "model": model, "train": train,
                                                     "measure_every": fields["measure_every"]}))
    with open(folder / "worker.log", "w") as log:
        return subprocess.Popen([sys.executable, "-m", "server.worker", str(folder), "--parent", str(os.getpid())], cwd=ROOT,
                                stdout=log, stderr=subprocess.STDOUT)


def measure_costs(k: int, skip_run: bool) -> dict:
    """Part 1: the costs, each on its own."""
    costs = {}
    with tempfile.TemporaryDirectory(prefix="sensviz-sizing-") as tmp:
        run = None if skip_run else assignment_run(Path(tmp) / "run")
        with served(ROOT / "artifacts" / "streamlit-sizing.log", env={"SENSVIZ_DATA_DIR": tmp + "/data"},
                    timeout=600) as (base, proc):
            pid = proc.pid
            growth(base, ["about"], pid)  # the server's own first page (imports, routes)
            costs["base"] = settle(pid)
            costs["idle"] = growth(base, [""] * k, pid) / k
            costs["pages"] = {page or "home": growth(base, [page] * k, pid) / k for page in PAGES}
            costs["model_cache"] = statistics.median(growth(base, [f"sensitivity?model={name}"], pid) for name in MORE_MODELS)
            costs["with_model"] = growth(base, [MODEL_PAGE] * k, pid) / k
            start = cpu_s(pid)
            views = [page for page in PAGES for _ in range(k)]
            asyncio.run(_hold(base, views, pid))
            costs["cpu_view"] = (cpu_s(pid) - start) / len(views)
        if run is not None:
            _, status, usage = os.wait4(run.pid, 0)  # this process's own resource use
            run.returncode = os.waitstatus_to_exitcode(status)
            if run.returncode:
                raise RuntimeError(f"the assignment run failed: {(Path(tmp) / 'run' / 'worker.log').read_text()[-2000:]}")
            costs["cpu_run"] = usage.ru_utime + usage.ru_stime
    return costs


def rule(costs: dict, students: int, replicas: int) -> dict:
    """The sizing rule for a class of `students` on `replicas` replicas (see docs/serving.md)."""
    session = costs["idle"] + max(costs["pages"].values()) + costs["with_model"]
    per_replica = math.ceil(students / replicas)
    memory = costs["base"] + per_replica * session + len(MORE_MODELS) * costs["model_cache"]
    page_cores = students * VIEWS_PER_MINUTE * costs["cpu_view"] / 60
    run_cores = students * costs.get("cpu_run", float("nan")) / (CLASS_MINUTES * 60)
    return {"replica_mib": memory, "page_cores": page_cores, "run_cores": run_cores, "session_mib": session}


def plan(costs: dict, students: int) -> dict:
    """Replicas (each page-serving replica under 0.5 of a core on average), cores and memory for a class."""
    need = rule(costs, students, 1)
    replicas = max(2, math.ceil(need["page_cores"] / 0.5))  # two at least: one may restart
    found = rule(costs, students, replicas)
    ray_cpus = math.ceil(found["run_cores"]) if not math.isnan(found["run_cores"]) else None
    return {"replicas": replicas, "memory_gib": replicas * found["replica_mib"] / 1024,
            "web_cores": max(replicas, math.ceil(found["page_cores"])), "ray_cpus": ray_cpus}


async def one_student(base: str, k: int, trains: bool, tls, proxied: bool, out: dict) -> None:
    """A student: its affinity cookie from the first page (through the proxy), Train pressed first when it
    `trains`, then each page of PAGES in a fresh session, as a browser opening links."""
    cookies = {"sensviz_replica": await asyncio.to_thread(proxy_cookie, base, tls)} if proxied else {}
    for page in (["train"] if trains else []) + PAGES:
        try:
            async with student(base, tls, cookies, local_addr=(address(k), 0)) as s:
                run = await s.open(page)
                if trains and page == "train" and "Train" in run.buttons:
                    trains = False
                    await s.press(run.buttons["Train"])
            out["pages"].append(run.seconds)
            out["errors"] += not run.ok
        except OSError:
            out["errors"] += 1


async def watch(pids: dict[str, int], peaks: dict[str, float], done: asyncio.Event) -> None:
    while not done.is_set():
        for name, pid in pids.items():
            with contextlib.suppress(OSError):
                peaks[name] = max(peaks.get(name, 0.0), rss_mib(pid))
        await asyncio.sleep(0.5)


async def a_class(d: Department, students: int, proxied: bool) -> dict:
    base, tls = (d.base, d.tls()) if proxied else (d.replica_base("r1"), None)
    out = {"pages": [], "errors": 0, "peaks": {}}
    pids = {name: s.process.pid for name, s in d.servers.items()} if proxied else {"r1": d.servers["r1"].process.pid}
    done = asyncio.Event()
    watcher = asyncio.create_task(watch(pids, out["peaks"], done))
    cpu_before = sum(cpu_s(pid) for pid in pids.values())
    start = time.perf_counter()
    await asyncio.gather(*(one_student(base, k, k % TRAIN_EVERY == 0, tls, proxied, out) for k in range(students)))
    out["wall"] = time.perf_counter() - start
    out["cpu"] = sum(cpu_s(pid) for pid in pids.values()) - cpu_before
    done.set()
    await watcher
    return out


async def kill_and_recover(d: Department, students: int) -> tuple[float, int]:
    """Students on the proxy, r1 killed: the seconds until the last of r1's students has a page again."""
    tls = d.tls()
    on_r1 = []
    for k in range(students):
        cookie = await asyncio.to_thread(proxy_cookie, d.base, tls)
        if cookie == "r1":
            async with student(d.base, tls, {"sensviz_replica": "r1"}, local_addr=(address(k), 0)) as s:
                await s.open("lab?chapter=1")
                on_r1.append((k, s.session_id))
    d.servers["r1"].stop(signal.SIGKILL)
    start = time.perf_counter()

    async def back(k: int, session: str) -> None:
        async with student(d.base, tls, {"sensviz_replica": "r1"}, local_addr=(address(k), 0), resume=session) as s:
            await s.open("lab?chapter=1")

    await asyncio.gather(*(back(k, s) for k, s in on_r1))
    return time.perf_counter() - start, len(on_r1)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


LONG_RUN = {"stop early": False, "steps": 20_000, "measure every … steps": 20}
"""The run that trains on Ray while r1 restarts: it outlasts the restarts."""


async def start_a_run(d: Department) -> str:
    """A student on r2, through the proxy, presses Train with `LONG_RUN`: the job's id."""
    from urllib.parse import parse_qs

    cookies = {"sensviz_owner": mint_owner(owner_secret(d.data)), "sensviz_replica": "r2"}
    async with student(d.base, d.tls(), cookies, local_addr=("127.0.0.31", 0)) as s:
        opened = await s.open("train")
        pressed = await s.press_with(opened.buttons["Train"], LONG_RUN)
        return parse_qs(pressed.query_string)["job"][0]


def restarts(times: int) -> int:
    """Replica r1 stopped (SIGTERM) and started again `times` times in a running department while a run trains
    on Ray: a row per restart, then whether the run trained on throughout."""
    print(f"{'restart':>7} {'stop s':>7} {'health s':>8} {'page s':>7} {'warm-up s':>9} {'CPU s':>6}")
    with tempfile.TemporaryDirectory(prefix="sensviz-department-") as tmp, Department(Path(tmp), replicas=2) as d:
        log = d.logs / "replica-r1.log"
        job = asyncio.run(start_a_run(d))
        progress = d.data / "jobs" / job / "progress.json"
        d.wait_until(progress.exists, "the run's first measurement")
        for i in range(times):
            stopped = d.servers["r1"].stop(signal.SIGTERM, timeout=30)
            start = time.monotonic()
            started = d.start_replica("r1")
            d.wait_until(lambda: healthy(d.replica_base("r1"), timeout=1), "r1 restarted")
            health = time.monotonic() - start
            with urllib.request.urlopen(f"{d.replica_base('r1')}/", timeout=60) as answer:
                answer.read()
            page = time.monotonic() - start
            cpu = cpu_seconds(started.process.pid)
            warmed = re.findall(r"warmed up in ([0-9.]+) s", log.read_text())
            print(f"{i + 1:>7} {stopped:>7.1f} {health:>8.1f} {page:>7.1f} {warmed[-1] if warmed else '-':>9} {cpu:>6.1f}",
                  flush=True)
        state = json.loads((d.data / "jobs" / job / "state.json").read_text())["state"]
        step = json.loads(progress.read_text()).get("step")
        print(f"the run on Ray through the restarts: {state}, at step {step} of {LONG_RUN['steps']:,}")
    return 0 if state == "running" else 1


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, nargs="+", default=[30, 60], help="class sizes to check (at most 250)")
    parser.add_argument("--sessions", type=int, default=20, help="sessions at a time when measuring the costs")
    parser.add_argument("--skip-run", action="store_true", help="do not measure an assignment run's CPU")
    parser.add_argument("--restarts", type=int, default=0, help="only restart replica r1 this many times (1..20)")
    args = parser.parse_args(argv)
    if not all(1 <= s <= 250 for s in args.students) or not 1 <= args.sessions <= 100:
        parser.error("need 1 <= --students <= 250 and 1 <= --sessions <= 100")
    if args.restarts:
        if not 1 <= args.restarts <= 20:
            parser.error("need 1 <= --restarts <= 20")
        return restarts(args.restarts)

    costs = measure_costs(args.sessions, args.skip_run)
    print("costs, measured one at a time on one replica:")
    print(f"  replica before any session          {costs['base']:8.1f} MiB", flush=True)
    print(f"  per idle session (Home)             {costs['idle']:8.2f} MiB")
    for page, mib in costs["pages"].items():
        print(f"  per session on {page:<22} {mib:8.2f} MiB")
    print(f"  per session with a model selected   {costs['with_model']:8.2f} MiB")
    print(f"  model cache, per further zoo model  {costs['model_cache']:8.2f} MiB")
    print(f"  CPU per page view (cached pages)    {costs['cpu_view']:8.3f} s")
    if "cpu_run" in costs:
        print(f"  CPU per assignment run              {costs['cpu_run']:8.1f} s")
    print(f"\nthe rule's plan:\n{'students':>8} {'replicas':>8} {'web cores':>9} {'memory GiB':>10} {'Ray CPUs':>8}")
    for students in (30, 60, 200):
        p = plan(costs, students)
        print(f"{students:>8} {p['replicas']:>8} {p['web_cores']:>9} {p['memory_gib']:>10.1f} {p['ray_cpus'] or '-':>8}"
              + ("   (extrapolated from the rule)" if students not in args.students else ""), flush=True)
    print(f"\n{'class':<32} {'pages':>5} {'err':>4} {'median':>7} {'p95':>7} {'wall s':>7} "
          f"{'peak MiB per replica':<28} {'rule MiB':>8} {'CPU s':>6} {'rule CPU s':>10}")
    failed = False
    with tempfile.TemporaryDirectory(prefix="sensviz-department-") as tmp, Department(Path(tmp)) as d:
        for students in args.students:
            for proxied in (False, True):
                out = asyncio.run(a_class(d, students, proxied))
                replicas = len(d.servers) if proxied else 1
                predicted = rule(costs, students, replicas)["replica_mib"]
                peaks = " ".join(f"{n}:{v:.0f}" for n, v in sorted(out["peaks"].items()))
                label = f"{students} students, " + ("proxy, 3 replicas" if proxied else "one replica, no proxy")
                print(f"{label:<32} {len(out['pages']):>5} {out['errors']:>4} {statistics.median(out['pages']):>7.2f} "
                      f"{percentile(out['pages'], 0.95):>7.2f} {out['wall']:>7.1f} {peaks:<28} {predicted:>8.0f} "
                      f"{out['cpu']:>6.1f} {len(out['pages']) * costs['cpu_view']:>10.1f}",
                      flush=True)
                failed |= out["errors"] > 0
        recovered, moved = asyncio.run(kill_and_recover(d, max(args.students)))
        print(f"\nreplica kill: {moved} students on r1 had a page on another replica {recovered:.1f} s after the kill")
        start = time.monotonic()
        d.start_replica("r1")
        d.wait_until(lambda: healthy(d.replica_base("r1"), timeout=1), "r1 restarted")
        print(f"replica restart: r1 answered {time.monotonic() - start:.1f} s after its start")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
