"""Where work runs: the explorer's training jobs and a sweep's jobs, on local processes or on Ray.

One executor, two backends, each with the same two ways in:

- `run_each(fn, items, on_result)`: call `fn(item)` for every item, at most `workers` at once, and
  `on_result(item, result)` in this process as each one ends (a sweep's jobs: `fn` is a picklable
  function that catches its own errors).
- `start_worker(folder, device)`: start one training job (`python -m server.worker` on the job's folder,
  `server.worker` says what it reads and writes there; `device`: the one its request trains on,
  None for the model's default) and return a handle with the calls of a
  `subprocess.Popen` that the job manager uses: `poll()`, `terminate()`, `wait(timeout)`,
  `returncode`, and `lost` (why the machine running it was lost, else None).

`LocalExecutor` (the default: nothing to install or start) runs a sweep's jobs in this process
(one worker) or a pool of fresh interpreters, and each training job in a process of its own, forked
from the executor's launcher (`worker.launcher`: started once, ahead, when the job manager asks,
`warm()`; a job on a GPU gets a fresh interpreter instead).
`RayExecutor` submits each to a Ray cluster as a task (`max_retries=0`: a run that a lost machine
ended is reported, never silently run again) with its CPU request, and a GPU for a training job
that asks for cuda when the cluster has one (`training_task_options`); a training job's task
starts the same worker command on its node, so the job folder (in the shared data folder) is the
only thing the two sides share.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from .processes import exit_with_parent

ROOT = Path(__file__).resolve().parents[1]
RESPAWN_S = 5.0
"""A launcher that ended within this many seconds of its start is not started again before then."""


def worker_command(threads: int, parent: int, max_mib: float | None, folder: str | None = None) -> list[str]:
    """The command of one training job (`folder`), or of a launcher (`worker.launcher`) without one."""
    command = [sys.executable, "-m", "server.worker"] + ([folder] if folder else ["--launcher"])
    command += ["--threads", str(threads), "--parent", str(parent)]
    return command + (["--max-mib", str(max_mib)] if max_mib is not None else [])


def worker_env() -> dict[str, str]:
    """This environment with sensviz importable (its checkout first on PYTHONPATH)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def init_worker(threads: int, parent: int | None = None) -> None:
    """Set the torch threads; in a worker process (`parent`: the sweep's pid), also end with the sweep
    and leave Ctrl-C to it (the sweep ends its workers: no traceback from each of them)."""
    import torch

    torch.set_num_threads(threads)
    if parent is not None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        exit_with_parent(parent)


class LocalExecutor:
    """Local processes (see the module docstring); `threads`: torch threads per worker (default the
    CPU count divided by `workers`), `max_mib`: a training job's memory budget (`worker.limit_memory`)."""

    def __init__(self, workers: int = 1, threads: int | None = None, max_mib: float | None = None):
        self.workers, self.threads, self.max_mib = workers, threads, max_mib
        self._launcher: Launcher | None = None  # the training jobs' launcher, once started
        self._closed = False

    def run_each(self, fn: Callable, items: Iterable, on_result: Callable) -> None:
        items = list(items)
        if self.workers <= 1:
            if self.threads:
                init_worker(self.threads)
            for item in items:
                on_result(item, fn(item))
            return
        threads = self.threads or max(1, (os.cpu_count() or 1) // self.workers)
        context = multiprocessing.get_context("spawn")
        pool = cf.ProcessPoolExecutor(self.workers, mp_context=context, initializer=init_worker,
                                      initargs=(threads, os.getpid()))
        try:
            futures = {pool.submit(fn, item): item for item in items}
            for future in cf.as_completed(futures):
                on_result(futures[future], future.result())
        except BaseException:  # Ctrl-C, SIGTERM, a failing table write: end the workers now, not after their jobs
            terminate_pool(pool)
            raise
        pool.shutdown()

    def start_worker(self, folder: Path, device: str | None = None):
        """Start the job in `folder`: a child of the launcher (started now if none runs), or, on a GPU
        (`device` cuda, ...), a fresh interpreter. (`device`: the worker moves the model there itself.)"""
        if device is not None and torch_device_type(device) != "cpu":
            return subprocess.Popen(worker_command(self.threads or 1, os.getpid(), self.max_mib, str(folder)),
                                    cwd=ROOT, env=worker_env())
        if self._launcher is None or not self._launcher.alive():
            self._launcher = Launcher(self.threads or 1, self.max_mib)
        return self._launcher.start(folder)

    def warm(self) -> None:
        """Start the launcher, unless it runs, the executor is closed, or the last one ended within
        `RESPAWN_S` of its start (a launcher that cannot start is not started again on every call: the
        job manager calls this each tick)."""
        if self._closed or self._launcher is not None and (
                self._launcher.alive() or time.monotonic() - self._launcher.started < RESPAWN_S):
            return
        self._launcher = Launcher(self.threads or 1, self.max_mib)

    def close(self) -> None:
        """End the launcher once its jobs have ended (the job manager ends them first); start no other."""
        self._closed = True
        launcher, self._launcher = self._launcher, None
        if launcher is not None:
            launcher.close()


def torch_device_type(device: str) -> str:
    """"cuda" for "cuda:1", ..."""
    return str(device).split(":")[0]


class Launcher:
    """A launcher process (`worker.launcher`) and the jobs forked from it, seen from the server: a thread
    reads its answers and settles each job's handle (`LaunchedJob`)."""

    def __init__(self, threads: int, max_mib: float | None):
        command = worker_command(threads, os.getpid(), max_mib)
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT,
                                        env=worker_env(), text=True)
        self.started = time.monotonic()
        self._lock = threading.Lock()  # the jobs' table
        self._write_lock = threading.Lock()  # one line at a time to the launcher
        self._jobs: dict[int, LaunchedJob] = {}
        self._count = 0
        self._gone: str | None = None  # why jobs end at once: the launcher is gone
        threading.Thread(target=self._read, daemon=True, name="sensviz-launcher").start()

    def alive(self) -> bool:
        return self.process.poll() is None

    def start(self, folder: Path) -> LaunchedJob:
        with self._lock:
            self._count += 1
            job = LaunchedJob(self, self._count)
            if self._gone:
                job.end(-signal.SIGKILL, self._gone)
                return job
            self._jobs[job.number] = job
        self.send({"run": job.number, "folder": str(folder)})
        return job

    def send(self, message: dict) -> None:
        """Write one line to the launcher; a launcher that is gone ends its jobs (`_read`), so nothing to do."""
        with self._write_lock, contextlib.suppress(OSError, ValueError):
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()

    def _read(self) -> None:
        for line in self.process.stdout:
            try:
                message = json.loads(line)
            except ValueError:  # not an answer (the launcher writes nothing else there): not for us
                continue
            with self._lock:
                if message.get("started") in self._jobs:
                    self._jobs[message["started"]].pid = message["pid"]
                elif message.get("ended") in self._jobs:
                    self._jobs.pop(message["ended"]).end(message["code"])
        code = self.process.wait()
        with self._lock:
            self._gone = f"the server's training launcher ended (exit code {code}) during the run"
            jobs, self._jobs = list(self._jobs.values()), {}
        for job in jobs:  # the launcher is gone, and with it its children (they end with their parent)
            job.end(-signal.SIGKILL, self._gone)

    def close(self) -> None:
        """End the launcher: at once when no job runs (it may still be loading torch), else once they ended."""
        with self._lock:
            running = bool(self._jobs)
        if not running:
            self.process.terminate()
        with contextlib.suppress(OSError, ValueError):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class LaunchedJob:
    """A training job forked by a `Launcher`, with the calls of a `subprocess.Popen` that the job
    manager uses; Stop goes through the launcher, the only process that knows its pid is still the job's."""

    def __init__(self, launcher: Launcher, number: int):
        self.launcher, self.number = launcher, number
        self.pid: int | None = None  # once the launcher answered
        self.returncode: int | None = None
        self.lost: str | None = None  # why the job ended with its launcher
        self._ended = threading.Event()

    def end(self, code: int, lost: str | None = None) -> None:
        self.returncode, self.lost = code, lost
        self._ended.set()

    def poll(self) -> int | None:
        return self.returncode

    def terminate(self) -> None:
        self.launcher.send({"stop": self.number})

    def wait(self, timeout: float | None = None) -> int | None:
        """Its exit code; one that has not ended within `timeout` is killed (then waited for as long)."""
        if not self._ended.wait(timeout):
            self.launcher.send({"kill": self.number})
            self._ended.wait(timeout)
        return self.returncode


def terminate_pool(pool: cf.ProcessPoolExecutor) -> None:
    """Cancel the pool's queued jobs and end its workers (`_processes` is what Python 3.14's
    `ProcessPoolExecutor.terminate_workers` ends), then wait for the pool's manager thread: once
    it has closed its pipes, the interpreter's exit handler cannot race it (Python 3.11 prints an
    `OSError: Bad file descriptor` traceback when it does)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(timeout=10)
    if manager is not None:
        manager.join(timeout=30)


def import_ray():
    """The ray module; ValueError (one line) when it is not installed."""
    try:
        import ray
    except ImportError:
        raise ValueError("the ray executor needs the `ray` package: pip install ray") from None
    return ray


def connect(address: str | None, cpus: int = 1) -> bool:
    """Connect this process to Ray (to the cluster at `address`, else a local instance of `cpus` CPUs
    whose workers see this process's import path) unless it is connected; True when it connected here."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, log_to_driver=False)  # the cluster's workers must have sensviz installed
    else:
        ray.init(address="local", num_cpus=max(cpus, 1), include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}})
    return True


class RayExecutor:
    """Ray tasks (see the module docstring): connects on first use (`address`, else a local instance of
    `workers` CPUs) and, on `close`, disconnects only if it connected. Each task asks for `cpus` CPUs
    (and `gpus` GPUs); a training job's worker gets `cpus` torch threads and the memory budget `max_mib`."""

    def __init__(self, address: str | None = None, workers: int = 1, cpus: int = 1, gpus: float = 0,
                 max_mib: float | None = None):
        self.address, self.workers, self.cpus, self.gpus, self.max_mib = address, workers, cpus, gpus, max_mib
        self._connected_here: bool | None = None

    def _ray(self):
        ray = import_ray()
        if self._connected_here is None:
            self._connected_here = connect(self.address, self.workers)
        return ray

    def _options(self) -> dict:
        return {"num_cpus": self.cpus, "num_gpus": self.gpus, "max_retries": 0}

    def run_each(self, fn: Callable, items: Iterable, on_result: Callable) -> None:
        ray = self._ray()
        try:
            remote = ray.remote(_call).options(**self._options())
            refs = {remote.remote(fn, item): item for item in items}
            while refs:
                ready, _ = ray.wait(list(refs), num_returns=1)
                for ref in ready:
                    on_result(refs.pop(ref), ray.get(ref))
        finally:
            self.close()

    def start_worker(self, folder: Path, device: str | None = None) -> RayJob:
        ray = self._ray()
        options = training_task_options(self.cpus, device, ray.cluster_resources().get("GPU", 0))
        task = ray.remote(sensviz_training_job).options(**options)
        return RayJob(ray, task.remote(str(folder), self.cpus, self.max_mib))

    def warm(self) -> None:
        """Nothing: a Ray task starts its worker when it runs."""

    def capacity(self) -> int:
        """How many training jobs the cluster's CPUs run at once."""
        return max(1, int(self._ray().cluster_resources().get("CPU", 1) // max(self.cpus, 1)))

    def close(self) -> None:
        """Disconnect from Ray if this executor connected."""
        if self._connected_here:
            import_ray().shutdown()
        self._connected_here = None


def training_task_options(cpus: int, device: str | None, cluster_gpus: float) -> dict:
    """A training job's Ray task options: `cpus` CPUs, one GPU when the job trains on cuda and the
    cluster has a GPU (without one it runs on CPUs, and its worker says the device is missing), and no
    retry (a run that a lost worker ended is reported, never run again)."""
    gpu = device is not None and torch_device_type(device) == "cuda" and cluster_gpus > 0
    return {"num_cpus": cpus, "num_gpus": 1 if gpu else 0, "max_retries": 0}


def _call(fn: Callable, item):
    return fn(item)


def sensviz_training_job(folder: str, threads: int, max_mib: float | None) -> int:
    """A Ray task: run the worker command on `folder` on this node and return its exit code. A
    cancel (Stop) ends the worker first, so that it writes nothing after the job was collected."""
    command = worker_command(threads, os.getpid(), max_mib, folder)
    process = subprocess.Popen(command, cwd=ROOT, env=worker_env())
    try:
        return process.wait()
    except BaseException:  # ray.cancel: KeyboardInterrupt here
        process.terminate()
        process.wait(timeout=30)
        raise


class RayJob:
    """A training job's Ray task, handled like a process (`LocalExecutor.start_worker`)."""

    pid = None

    def __init__(self, ray, ref):
        self._ray, self.ref = ray, ref
        self.returncode: int | None = None
        self.lost: str | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self._ray.wait([self.ref], timeout=0)[0]:
            self._settle()
        return self.returncode

    def terminate(self) -> None:
        self._ray.cancel(self.ref)

    def wait(self, timeout: float | None = None) -> int | None:
        if self.returncode is None:
            if not self._ray.wait([self.ref], timeout=timeout)[0]:
                self._ray.cancel(self.ref, force=True)  # it did not end when asked: its worker is killed
                self._ray.wait([self.ref], timeout=timeout)
            self._settle()
        return self.returncode

    def _settle(self) -> None:
        exceptions = self._ray.exceptions
        try:
            self.returncode = self._ray.get(self.ref, timeout=0)
        except exceptions.TaskCancelledError:
            self.returncode = -signal.SIGTERM
        except exceptions.GetTimeoutError:
            return
        except exceptions.RayError as err:  # its worker or node died (killed, out of memory, node lost)
            self.returncode = -signal.SIGKILL
            text = " ".join(str(err).split())
            self.lost = f"the Ray worker running it was lost ({type(err).__name__}: {text[:200]})"


def make(kind: str, workers: int = 1, threads: int | None = None, address: str | None = None):
    """The executor named `kind` ("local" or "ray"; ValueError for another name)."""
    if kind == "local":
        return LocalExecutor(workers, threads)
    if kind == "ray":
        return RayExecutor(address, workers)
    raise ValueError(f"unknown executor '{kind}'; use 'local' or 'ray'")
