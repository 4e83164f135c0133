"""A department on one machine, for a dry run of docs/serving.md: a Ray head and a worker node (`ray start
--block`), replicas of the explorer (`streamlit run app.py`) on one data folder, and HAProxy with
`deploy/haproxy.cfg` in front of them on HTTPS with a self-signed certificate; then each step of the
serving doc's operations, and a clean stop.

    python deploy/department.py --dir /tmp/sensviz-department            # start, run the operations, stop
    python deploy/department.py --dir /tmp/sensviz-department --serve    # start, serve until Ctrl-C, stop

Every process has its own HOME and TMPDIR under --dir (as separate machines would), and its log
beside them (`<dir>/logs/`); the data folder is `<dir>/data`, the proxy's runtime socket
`<dir>/proxy/haproxy.sock`. Everything listens on 127.0.0.1 only. `Department` is also what
tests/server/test_department.py and benchmarks/department.py start.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's server package (the replicas run from it too)
CONFIG = ROOT / "deploy" / "haproxy.cfg"
REPLICA_NAMES = ("r1", "r2", "r3")  # the config's servers
NODE_MIB = 80  # each Ray node's object store: the jobs pass nothing through it
DRAIN_S = 3  # a Ray node's drain on SIGTERM (see `Department.cluster_env`)
READY_S = 300  # generous: a loaded machine starts a cluster and fresh interpreters


BIND_TRIES = 3
"""Starts of the proxy on a new free port when another process bound the one it was given first."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def self_signed(folder: Path) -> Path:
    """A self-signed certificate for localhost and 127.0.0.1, with its key, in one PEM file (HAProxy's `crt`)."""
    folder.mkdir(parents=True, exist_ok=True)
    cert, key, pem = folder / "cert.pem", folder / "key.pem", folder / "proxy.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "30", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    pem.write_bytes(cert.read_bytes() + key.read_bytes())
    pem.chmod(0o600)
    return pem


def client_tls(folder: Path) -> ssl.SSLContext:
    """A TLS context that trusts the dry run's certificate (what a browser would be told to accept)."""
    return ssl.create_default_context(cafile=str(folder / "cert.pem"))


def healthy(base: str, context: ssl.SSLContext | None = None, timeout: float = 2) -> bool:
    """Whether `base`/_stcore/health answers "ok"."""
    try:
        with urllib.request.urlopen(base + "/_stcore/health", timeout=timeout, context=context) as response:
            return response.read().strip() == b"ok"
    except OSError:
        return False


def proxy_cookie(base: str, context: ssl.SSLContext | None = None) -> str:
    """The affinity cookie the proxy gives a new browser with its first page (`sensviz_replica=r1`)."""
    with urllib.request.urlopen(base + "/", timeout=30, context=context) as response:
        found = [c.split(";")[0] for c in response.headers.get_all("Set-Cookie") or [] if c.startswith("sensviz_replica=")]
    if not found:
        raise RuntimeError("the proxy set no affinity cookie")
    return found[0].split("=", 1)[1]


def student(base: str, context: ssl.SSLContext | None = None, cookies: dict[str, str] | None = None,
            local_addr: tuple[str, int] | None = None, resume: str | None = None):
    """A websocket student (`benchmarks/load.py`'s `Session`) through the proxy over TLS: `cookies` as its
    browser holds them (the proxy's `sensviz_replica`, the app's `sensviz_owner`); `resume`: the session id
    its browser had, asked for again as Streamlit's browser code does when it reconnects. After it has
    connected, `.replica` is the replica the proxy's answer named (its cookie, rewritten when it moved)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import websockets
    from load import Session
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    from streamlit.proto.WidgetStates_pb2 import WidgetState, WidgetStates

    class Recording:
        """The websocket, noting the id of each checkbox and number input the pages draw, by label."""

        def __init__(self, ws, widgets: dict[str, str]):
            self.ws, self.widgets = ws, widgets

        async def recv(self):
            data = await self.ws.recv()
            msg = ForwardMsg()
            msg.ParseFromString(data)
            if msg.WhichOneof("type") == "delta" and msg.delta.WhichOneof("type") == "new_element":
                element = msg.delta.new_element
                kind = element.WhichOneof("type")
                if kind in ("checkbox", "number_input"):
                    self.widgets[getattr(element, kind).label] = getattr(element, kind).id
            return data

        def __getattr__(self, name):
            return getattr(self.ws, name)

    class Student(Session):
        replica = None
        widgets: dict[str, str]

        async def press_with(self, button_id: str, values: dict[str, bool | int], timeout: float = 600):
            """Press a button after setting checkboxes (bool) and number inputs (int) by label, as a user would."""
            states = [WidgetState(id=button_id, trigger_value=True)]
            for label, value in values.items():
                kind = "bool_value" if isinstance(value, bool) else "int_value"
                states.append(WidgetState(id=self.widgets[label], **{kind: value}))
            return await self._run(f"{self.page_name}?{self.query_string}", timeout, WidgetStates(widgets=states))

        async def __aenter__(self):
            headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())} if self.cookies else None
            url = base.replace("https://", "wss://").replace("http://", "ws://").rstrip("/") + "/_stcore/stream"
            self.ws = await websockets.connect(url, subprotocols=["streamlit", "-", *([resume] if resume else [])],
                                               additional_headers=headers, max_size=None, open_timeout=120,
                                               ssl=context if url.startswith("wss") else None,
                                               **({"local_addr": self.local_addr} if self.local_addr else {}))
            for cookie in self.ws.response.headers.get_all("Set-Cookie"):
                if cookie.startswith("sensviz_replica="):
                    self.cookies["sensviz_replica"] = cookie.split(";")[0].split("=", 1)[1]
            self.replica = self.cookies.get("sensviz_replica")
            self.widgets = {}
            self.ws = Recording(self.ws, self.widgets)
            return self

    return Student(base, dict(cookies or {}), local_addr)


def own_home(folder: Path) -> dict[str, str]:
    """HOME and TMPDIR of one machine (a node, a replica), made under `folder`."""
    (folder / "tmp").mkdir(parents=True, exist_ok=True)
    return {"HOME": str(folder), "TMPDIR": str(folder / "tmp")}


@dataclass
class Started:
    """A process this module started, in a session of its own (so that its children are found and ended
    with it), with its log file."""

    args: list[str]
    env: dict[str, str]
    log: Path
    process: subprocess.Popen | None = None

    def start(self) -> Started:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a") as out:
            self.process = subprocess.Popen(self.args, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> float:
        """Send `sig` and wait for the exit (SIGKILL to the whole session after `timeout`); the seconds it took."""
        start = time.monotonic()
        if self.alive:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:  # a hung stop: the whole session goes (docs/serving.md)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self.process is not None:  # what it left in its process group (Ray's node agents can outlive `ray start`)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        return time.monotonic() - start


@dataclass
class Department:
    """A department on one machine under `folder`; `with Department(...) as d:` starts it, leaving stops it."""

    folder: Path
    replicas: int = 3
    node_cpus: int = 1
    env: dict[str, str] = field(default_factory=dict)  # more environment for every replica (SENSVIZ_*)
    ray_port: int = field(default_factory=free_port)
    proxy_port: int = field(default_factory=free_port)
    ports: list[int] = field(default_factory=list)  # the replicas' ports (default: free ones)
    nodes: list[Started] = field(default_factory=list)
    servers: dict[str, Started] = field(default_factory=dict)
    proxy: Started | None = None

    def __post_init__(self):
        self.folder = Path(self.folder)
        if not 1 <= self.replicas <= len(REPLICA_NAMES):
            raise ValueError(f"a department here has 1 to {len(REPLICA_NAMES)} replicas (the config's servers)")
        self.ports = self.ports or [free_port() for _ in REPLICA_NAMES]
        self.data = self.folder / "data"
        self.logs = self.folder / "logs"
        self.token = secrets.token_hex(32)  # the cluster's token (Ray's token authentication)
        self.sockets = Path(tempfile.mkdtemp(prefix="sensviz-ray-"))  # nodes' TMPDIR: Ray's socket paths must be short

    # ------------------------------------------------------------------ addresses

    @property
    def ray_address(self) -> str:
        return f"127.0.0.1:{self.ray_port}"

    @property
    def base(self) -> str:
        """The department's address, as students open it."""
        return f"https://127.0.0.1:{self.proxy_port}"

    def replica_base(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[REPLICA_NAMES.index(name)]}"

    def tls(self) -> ssl.SSLContext:
        return client_tls(self.folder / "proxy")

    def cluster_env(self, home: Path) -> dict[str, str]:
        """A machine's environment: its own HOME and TMPDIR, the cluster's token; a node's SIGTERM drains it for
        at most DRAIN_S (Ray's default, 30 s, waits on the queue's detached actor, which never leaves)."""
        return {**os.environ, **own_home(home), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token,
                "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": str(DRAIN_S)}

    # ------------------------------------------------------------------ start

    def __enter__(self) -> Department:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        """The cluster, the replicas and the proxy, at once (each waits for what it needs); returns when
        every replica answers through the proxy."""
        from server.owners import owner_secret

        self.data.mkdir(parents=True, exist_ok=True)
        owner_secret(self.data)  # the replicas' shared key, made once before any of them reads it
        self.start_nodes()
        for name in REPLICA_NAMES[:self.replicas]:
            self.start_replica(name)
        self.start_proxy()
        self.wait_until(lambda: all(self.replica_up(n) for n in REPLICA_NAMES[:self.replicas]), "the replicas")

    def start_nodes(self) -> None:
        """A Ray head and one worker node of `node_cpus` CPUs each (the worker retries until the head answers)."""
        common = ["--node-ip-address", "127.0.0.1", "--num-cpus", str(self.node_cpus), "--object-store-memory",
                  str(NODE_MIB * 2**20), "--dashboard-agent-listen-port", "0", "--disable-usage-stats", "--block"]
        ray = str(Path(sys.executable).with_name("ray"))
        head = [ray, "start", "--head", "--port", str(self.ray_port), "--include-dashboard", "false", *common]
        worker = [ray, "start", "--address", self.ray_address, *common]
        for name, args in (("head", head), ("worker", worker)):
            env = {**self.cluster_env(self.folder / "nodes" / name), **own_home(self.sockets / name)}
            env["HOME"] = str(self.folder / "nodes" / name)
            self.nodes.append(Started(args, env, self.logs / f"ray-{name}.log").start())

    def replica_env(self, name: str) -> dict[str, str]:
        return {**self.cluster_env(self.folder / "replicas" / name), "SENSVIZ_DATA_DIR": str(self.data),
                "SENSVIZ_RAY_ADDRESS": self.ray_address, "PYTHONPATH": str(ROOT), **self.env}

    def start_replica(self, name: str) -> Started:
        port = self.ports[REPLICA_NAMES.index(name)]
        args = [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.headless", "true",
                "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
                "--server.fileWatcherType", "none"]
        self.servers[name] = Started(args, self.replica_env(name), self.logs / f"replica-{name}.log").start()
        return self.servers[name]

    def proxy_env(self) -> dict[str, str]:
        env = {**os.environ, "SENSVIZ_PROXY_BIND": f"127.0.0.1:{self.proxy_port}",
               "SENSVIZ_PROXY_CERT": str(self.folder / "proxy" / "proxy.pem"), "SENSVIZ_PROXY_SOCKET": str(self.socket)}
        env.update({f"SENSVIZ_REPLICA{i + 1}": f"127.0.0.1:{port}" for i, port in enumerate(self.ports)})
        return env

    @property
    def socket(self) -> Path:
        return self.folder / "proxy" / "haproxy.sock"

    def start_proxy(self, config: Path = CONFIG) -> None:
        """HAProxy in master-worker mode (-W), in the foreground of its own session (-db), logging to its log."""
        if not (self.folder / "proxy" / "proxy.pem").exists():
            self_signed(self.folder / "proxy")
        haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
        checked = subprocess.run([haproxy, "-c", "-q", "-f", str(config)], env=self.proxy_env(), capture_output=True, text=True)
        if checked.returncode:
            raise RuntimeError(f"haproxy refuses {config}: {checked.stdout}{checked.stderr}")
        for _ in range(BIND_TRIES):
            self.proxy = Started([haproxy, "-W", "-db", "-f", str(config)], self.proxy_env(), self.logs / "haproxy.log").start()
            self.wait_until(lambda: self._answers() or not self.proxy.alive, "the proxy's runtime API")
            if self.proxy.alive:
                return
            if "Address already in use" not in self.proxy.log.read_text(errors="replace"):
                break
            self.proxy_port = free_port()  # another process took the free port between its choice and the bind
            self.socket.unlink(missing_ok=True)
        raise RuntimeError(f"the proxy exited, see {self.proxy.log}")

    def _answers(self) -> bool:
        """Whether HAProxy's runtime API answers on its socket (the socket's file is there before its listeners)."""
        try:
            self.proxy_command("show info")
        except OSError:
            return False
        return True

    def wait_until(self, condition, what: str, timeout: float = READY_S) -> float:
        """Poll `condition` until it holds (RuntimeError after `timeout`, naming `what`); the seconds it took."""
        start = time.monotonic()
        while not condition():
            dead = [s.log.name for s in (*self.nodes, *self.servers.values(), self.proxy) if s and s.process and not s.alive
                    and s.process.returncode not in (0, -signal.SIGTERM, -signal.SIGKILL)]
            if dead or time.monotonic() - start > timeout:
                raise RuntimeError(f"waiting for {what}: " + (f"exited, see {dead}" if dead else f"not within {timeout} s"))
            time.sleep(0.1)
        return time.monotonic() - start

    # ------------------------------------------------------------------ operations

    def proxy_command(self, command: str) -> str:
        """One command to HAProxy's runtime API (`show stat`, `set server replicas/r1 state drain`, ...)."""
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(str(self.socket))
            s.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def servers_state(self) -> dict[str, dict[str, str]]:
        """Per replica, HAProxy's view: status (UP, DOWN, DRAIN, MAINT) and current sessions (scur)."""
        lines = self.proxy_command("show stat").splitlines()
        header = lines[0].lstrip("# ").split(",")
        rows = [dict(zip(header, line.split(","))) for line in lines[1:] if line.strip()]
        return {r["svname"]: r for r in rows if r["pxname"] == "replicas" and r["svname"] in REPLICA_NAMES}

    def replica_up(self, name: str) -> bool:
        """Whether the proxy counts the replica in (its health check passes)."""
        return self.servers_state()[name]["status"] == "UP"

    def drain(self, name: str, timeout: float = 600) -> float:
        """Take a replica out of rotation for new browsers (its students stay, by their cookie) and wait until
        its last websocket has closed, or `timeout`; the seconds waited."""
        self.proxy_command(f"set server replicas/{name} state drain")
        start = time.monotonic()
        while int(self.servers_state()[name]["scur"] or 0) and time.monotonic() - start < timeout:
            time.sleep(0.5)
        return time.monotonic() - start

    def restart_replica(self, name: str, sig: int = signal.SIGTERM, stop_timeout: float = 30) -> tuple[float, float]:
        """Stop a replica (`sig`; SIGKILL when it has not ended after `stop_timeout`, a hung stop) and start it
        again on its port; returns (seconds to stop, seconds from its start to a health answer "ok")."""
        stopped = self.servers[name].stop(sig, timeout=stop_timeout)
        start = time.monotonic()
        self.start_replica(name)
        base = self.replica_base(name)
        self.wait_until(lambda: healthy(base, timeout=1), f"replica {name}")
        ready = time.monotonic() - start
        self.proxy_command(f"set server replicas/{name} state ready")  # after a drain: back in rotation
        return stopped, ready

    def reload_proxy(self) -> None:
        """A reload (after a config change): HAProxy's master starts new workers on the same socket; the
        old ones keep their open connections until those close (`hard-stop-after`)."""
        self.proxy.process.send_signal(signal.SIGUSR2)

    def backup(self, to: Path) -> Path:
        """A tar.gz of the data folder: safe while the department serves (every file is written atomically,
        so the archive holds each file whole, before or after a change)."""
        to.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(to, "w:gz") as tar:
            tar.add(self.data, arcname="data")
        return to

    # ------------------------------------------------------------------ stop

    def stop(self) -> None:
        """The proxy and the replicas (SIGTERM: a replica ends at once), then the Ray nodes (SIGTERM: each
        drains and ends every process it started), each group signalled at once and then waited for."""
        for group in ((self.proxy, *self.servers.values()), self.nodes):
            started = [s for s in group if s is not None and s.alive]
            for s in started:
                s.process.send_signal(signal.SIGTERM)
            for s in started:
                s.stop(0)  # signal 0: only wait
        shutil.rmtree(self.sockets, ignore_errors=True)


def dry_run(folder: Path) -> int:
    """Start a department of three replicas, run each operation of docs/serving.md once with a student's run
    training on Ray, stop it; print what happened. Exit status 1 when a step did not go as the doc says."""
    import asyncio

    from server.kept import KeptStore
    from server.owners import mint_owner, owner_secret

    def say(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)

    def state(job: str) -> str | None:
        path = d.data / "jobs" / job / "state.json"
        return json.loads(path.read_text()).get("state") if path.is_file() else None

    problems = []

    def check(ok: bool, what: str) -> None:
        say(("ok: " if ok else "NOT AS THE DOC SAYS: ") + what)
        if not ok:
            problems.append(what)

    start = time.monotonic()
    with Department(folder) as d:
        say(f"up in {time.monotonic() - start:.1f} s: {d.base} (Ray at {d.ray_address}, data {d.data}, logs {d.logs})")
        check(healthy(d.base, d.tls()), "through the proxy, /_stcore/health answers ok")
        cookies = {"sensviz_owner": mint_owner(owner_secret(d.data)), "sensviz_replica": "r1"}

        async def press_train() -> str:
            async with student(d.base, d.tls(), cookies) as s:
                opened = await s.open("train")
                pressed = await s.press_with(opened.buttons["Train"], {"stop early": False})
            return urllib.parse.parse_qs(pressed.query_string)["job"][0]

        job = asyncio.run(press_train())
        d.wait_until(lambda: state(job) == "running", "the student's run to start")
        say(f"a student pressed Train through r1: run {job} trains on Ray")

        async def drain_with_a_student_on_r1() -> tuple[set, bool]:
            """r1 drained while a student's page is open on it: they stay (a new tab too), newcomers go elsewhere."""
            async with student(d.base, d.tls(), cookies) as s:
                await s.open("lab?chapter=1")
                d.proxy_command("set server replicas/r1 state drain")  # 1. drain r1
                newcomers = {proxy_cookie(d.base, d.tls()) for _ in range(4)}
                async with student(d.base, d.tls(), cookies) as tab:
                    stays = (await tab.open("lab?chapter=1")).ok and tab.replica == "r1"
                stays = stays and (await s.rerun()).ok and int(d.servers_state()["r1"]["scur"] or 0) >= 1
            return newcomers, stays

        newcomers, stays = asyncio.run(drain_with_a_student_on_r1())
        check("r1" not in newcomers and stays, f"drain r1: new browsers go to {sorted(newcomers)}, not r1; "
              "the student on r1 stays there")
        waited = d.drain("r1", timeout=30)
        check(d.servers_state()["r1"]["status"] == "DRAIN", f"r1 drained: its websockets closed after {waited:.1f} s")
        stopped, ready = d.restart_replica("r1")  # 2. restart it (SIGTERM), back in rotation
        d.wait_until(lambda: d.replica_up("r1"), "r1 back in rotation")
        check(state(job) == "running", f"restart r1: stopped in {stopped:.1f} s, answered {ready:.1f} s after its start, "
              "back in rotation; the run still trains")

        os.kill(d.servers["r2"].process.pid, signal.SIGSTOP)  # 3. a hung replica: it cannot act on SIGTERM
        stopped, ready = d.restart_replica("r2", stop_timeout=5)
        d.wait_until(lambda: d.replica_up("r2"), "r2 back in rotation")
        check(state(job) == "running", f"hung restart of r2: SIGTERM unanswered, killed after {stopped:.1f} s, "
              f"answered {ready:.1f} s after its start; the run still trains")

        d.reload_proxy()  # 4. a proxy reload
        d.wait_until(lambda: "Reloading HAProxy" in d.proxy.log.read_text(), "the proxy's reload")
        check(healthy(d.base, d.tls()) and state(job) == "running", "proxy reloaded: it answers; the run still trains")

        say("logs: " + ", ".join(sorted(p.name for p in d.logs.iterdir())) + f" in {d.logs}")  # 5. the logs

        archive = d.backup(folder / "backups" / "data.tar.gz")  # 6. a backup while serving, then a restore
        restored = folder / "restored"
        with tarfile.open(archive) as tar:
            tar.extractall(restored, filter="data")
        check((restored / "data" / "owner_secret").read_bytes() == (d.data / "owner_secret").read_bytes()
              and (restored / "data" / "jobs" / job / "state.json").is_file(),
              f"backup {archive} ({archive.stat().st_size / 2**10:.0f} KiB) restores the key and the job records")
        KeptStore(restored / "data" / "kept", 2**30)  # opening a store expires old models and removes temporaries
    left = _processes_under(folder)
    check(not left, f"stopped {time.monotonic() - start:.1f} s after the start; processes left: {left or 'none'}")
    return 1 if problems else 0


def _processes_under(folder: Path, wait_s: float = 10) -> list[int]:
    """Processes whose command line or environment names `folder` (what a dry run leaves behind), other than
    this one and its ancestors (a shell or `timeout` that started it), after waiting up to `wait_s` for them."""
    mine, pid = set(), os.getpid()
    while pid > 1:
        mine.add(pid)
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    deadline = time.monotonic() + wait_s
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in mine:
                continue
            try:
                if str(folder).encode() in (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="a new folder for the department's data, homes and logs")
    parser.add_argument("--serve", action="store_true", help="start and serve until Ctrl-C, then stop")
    args = parser.parse_args(argv)
    folder = args.dir.resolve()
    if folder.exists() and any(folder.iterdir()):
        parser.error(f"{folder} is not empty: give a new folder")
    missing = [tool for tool in ("haproxy", "openssl") if not shutil.which(tool) and not Path(f"/usr/sbin/{tool}").exists()]
    if missing:
        parser.error(f"needs {' and '.join(missing)} (Debian: apt-get install -y {' '.join(missing)})")
    try:
        if not args.serve:
            return dry_run(folder)
        with Department(folder) as d:
            print(f"serving {d.base} (self-signed certificate: {folder / 'proxy' / 'cert.pem'}); Ctrl-C stops", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
    except (RuntimeError, OSError) as err:  # a process that did not start, a port taken: one line, logs named
        print(f"department: {err} (logs: {folder / 'logs'})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
