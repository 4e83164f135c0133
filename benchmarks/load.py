"""Load the explorer without browsers: clients that speak Streamlit's websocket protocol.

A client connects to `/_stcore/stream` like a browser tab, asks for a page by URL (path and query
string) in a `BackMsg.rerun_script`, and reads `ForwardMsg`s until the script run has finished,
noting every exception element and whether the page was found. `serve()` starts `streamlit run
app.py` on a free loopback port for a test or a benchmark.

    python benchmarks/load.py --sessions 30 "sensitivity?model=encoder-parity-n8"

prints, per URL, how many runs finished, how many showed an exception, and the fastest, median
and slowest time from connecting to the end of the run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ClientState_pb2 import ClientState, ContextInfo
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState, WidgetStates

ROOT = Path(__file__).resolve().parents[1]
FINISHED = {ForwardMsg.FINISHED_SUCCESSFULLY: "finished", ForwardMsg.FINISHED_WITH_COMPILE_ERROR: "compile error"}


@dataclass
class Run:
    """One script run as a client saw it."""

    url: str
    status: str = "timed out"  # finished, compile error, page not found, timed out
    seconds: float = 0.0  # from sending the request to the end of the run
    exceptions: list[str] = field(default_factory=list)
    elements: int = 0
    query_string: str = ""  # the URL's query string after the run (the app keeps it in step)
    texts: list[str] = field(default_factory=list)  # markdown, headings, alerts and metrics, for assertions
    buttons: dict[str, str] = field(default_factory=dict)  # a button's label -> its widget id

    @property
    def ok(self) -> bool:
        return self.status == "finished" and not self.exceptions


def _text_of(element) -> list[str]:
    kind = element.WhichOneof("type")
    if kind == "markdown":
        return [element.markdown.body]
    if kind == "heading":
        return [element.heading.body]
    if kind == "alert":
        return [element.alert.body]
    if kind == "metric":
        return [f"{element.metric.label}: {element.metric.body}"]
    return []


class Session:
    """One browser-like session: `await session.open(path_and_query)`, then `await session.rerun()`."""

    def __init__(self, base: str, cookies: dict[str, str] | None = None, local_addr: tuple[str, int] | None = None):
        """`local_addr`: the (address, port) to connect from, e.g. ("127.0.0.7", 0): another loopback
        address is another client to the server (`st.context.ip_address`)."""
        self.base = base.rstrip("/")
        self.cookies = cookies or {}
        self.local_addr = local_addr
        self.session_id = ""  # the server's id of this session (from its first message)
        self.ws = None
        self.page_name = ""
        self.page_script_hash = ""
        self.query_string = ""

    async def __aenter__(self):
        parts = urlsplit(self.base)
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())} if self.cookies else None
        self.ws = await websockets.connect(f"ws://{parts.netloc}{parts.path}/_stcore/stream", subprotocols=["streamlit"],
                                           additional_headers=headers, max_size=None, open_timeout=120,
                                           **({"local_addr": self.local_addr} if self.local_addr else {}))
        return self

    async def __aexit__(self, *exc):
        await self.ws.close()

    async def open(self, url: str, timeout: float = 600) -> Run:
        """Ask for a page as a browser that opens this URL (`page?query`, no leading slash needed)."""
        path, _, query = url.lstrip("/").partition("?")
        self.page_name, self.page_script_hash, self.query_string = path, "", query
        return await self._run(url, timeout)

    async def rerun(self, timeout: float = 600) -> Run:
        """Run the current page again, as a browser does after a widget changes (here: none did)."""
        return await self._run(f"{self.page_name}?{self.query_string}", timeout)

    async def press(self, button_id: str, timeout: float = 600) -> Run:
        """Press a button of the page (its widget id, from `Run.buttons` of the last run), as a user's click."""
        return await self._run(f"{self.page_name}?{self.query_string}", timeout,
                               WidgetStates(widgets=[WidgetState(id=button_id, trigger_value=True)]))

    async def _run(self, url: str, timeout: float, widgets: WidgetStates | None = None) -> Run:
        state = ClientState(query_string=self.query_string, page_name=self.page_name,
                            page_script_hash=self.page_script_hash, widget_states=widgets,
                            context_info=ContextInfo(url=f"{self.base}/{self.page_name}", timezone="UTC", locale="en-US"))
        run = Run(url)
        start = time.perf_counter()
        await self.ws.send(BackMsg(rerun_script=state).SerializeToString())
        deadline = start + timeout
        while True:
            try:
                data = await asyncio.wait_for(self.ws.recv(), timeout=max(0.1, deadline - time.perf_counter()))
            except TimeoutError:
                break
            msg = ForwardMsg()
            msg.ParseFromString(data)
            kind = msg.WhichOneof("type")
            if kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
                element = msg.delta.new_element
                run.elements += 1
                if element.WhichOneof("type") == "exception":
                    run.exceptions.append(f"{element.exception.type}: {element.exception.message}")
                run.texts += _text_of(element)
                if element.WhichOneof("type") == "button":
                    run.buttons[element.button.label] = element.button.id
            elif kind == "new_session":
                self.session_id = msg.new_session.initialize.session_id
            elif kind == "page_info_changed":
                self.query_string = msg.page_info_changed.query_string
            elif kind == "navigation":
                self.page_script_hash = msg.navigation.page_script_hash
            elif kind == "page_not_found":
                run.status = "page not found"
            elif kind == "script_finished":
                if msg.script_finished in FINISHED:
                    run.status = FINISHED[msg.script_finished] if run.status != "page not found" else run.status
                    break
                if msg.script_finished == ForwardMsg.FINISHED_EARLY_FOR_RERUN:  # st.rerun(): another run follows
                    run.exceptions.clear()
                    run.texts.clear()
        run.seconds = time.perf_counter() - start
        run.query_string = self.query_string
        return run


async def open_once(base: str, url: str, timeout: float = 600, reruns: int = 0,
                    cookies: dict[str, str] | None = None) -> list[Run]:
    """A fresh session opens `url` and reruns it `reruns` times; every run as the client saw it."""
    async with Session(base, cookies) as session:
        runs = [await session.open(url, timeout)]
        for _ in range(reruns):
            runs.append(await session.rerun(timeout))
        return runs


async def _many(base: str, urls: list[str], timeout: float) -> list[Run]:
    return [runs[0] for runs in await asyncio.gather(*(open_once(base, url, timeout) for url in urls))]


def open_many(base: str, urls: list[str], timeout: float = 600) -> list[Run]:
    """One fresh session per URL, all at once; the first run of each."""
    return asyncio.run(_many(base, urls, timeout))


async def _train_then_load(base: str, trainers: int, urls: list[str], timeout: float) -> tuple[list[Run], list[Run]]:
    """`trainers` users press Train on the Train page (the server runs them behind its job cap), then,
    while they train, one fresh session per URL opens it; the trainers' press runs and the others' runs."""
    async with contextlib.AsyncExitStack() as stack:
        sessions = [await stack.enter_async_context(Session(base)) for _ in range(trainers)]
        opened = await asyncio.gather(*(s.open("train", timeout) for s in sessions))
        pressed = await asyncio.gather(*(s.press(run.buttons["Train"], timeout) for s, run in zip(sessions, opened)))
        return list(pressed), await _many(base, urls, timeout)


def train_then_load(base: str, trainers: int, urls: list[str], timeout: float = 600) -> tuple[list[Run], list[Run]]:
    """See `_train_then_load`."""
    return asyncio.run(_train_then_load(base, trainers, urls, timeout))


def clear_caches(base: str) -> None:
    """Clear the server's st.cache_data / st.cache_resource (a cold start of the computations)."""

    async def clear():
        async with Session(base) as session:
            await session.ws.send(BackMsg(clear_cache=True).SerializeToString())
            await asyncio.sleep(0.5)

    asyncio.run(clear())


# ----------------------------------------------------------------------------- a server to load


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serve(log_path: Path, env: dict[str, str] | None = None, timeout: float = 120):
    """`streamlit run app.py` on a free loopback port; yields its base URL, stops it afterwards."""
    with served(log_path, env, timeout) as (base, _process):
        yield base


STREAMLIT_RUN = ("streamlit", "run", str(ROOT / "app.py"))


@contextmanager
def served(log_path: Path, env: dict[str, str] | None = None, timeout: float = 120, port: int | None = None):
    """`serve`, yielding the base URL and the server's process (to watch its memory, or stop it); `port`: the
    one to serve on (default: a free one), e.g. a restarted server's, so its browsers reconnect."""
    port = port or free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", *STREAMLIT_RUN, "--server.headless", "true",
             "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
             "--server.fileWatcherType", "none"],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.time() + timeout
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"streamlit exited with {proc.returncode}; see {log_path}")
                try:
                    with urllib.request.urlopen(base + "/_stcore/health", timeout=2) as response:
                        if response.read().strip() == b"ok":
                            break
                except OSError:
                    if time.time() > deadline:
                        raise
                    time.sleep(0.25)
            yield base, proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("urls", nargs="+", help="pages with their query string, e.g. 'sensitivity?model=encoder-parity-n8'")
    parser.add_argument("--sessions", type=int, default=30, help="sessions per URL, all at once")
    parser.add_argument("--base", help="a running server (default: start one)")
    parser.add_argument("--train", type=int, default=0, metavar="K",
                        help="first, K more users press Train (the preset form's PARITY run) and train meanwhile")
    args = parser.parse_args(argv)

    def measure(base: str) -> bool:
        urls = [url for url in args.urls for _ in range(args.sessions)]
        open_many(base, ["about"])  # the server imports its modules and routes once before the crowd arrives
        start = time.perf_counter()
        if args.train:
            pressed, runs = train_then_load(base, args.train, urls)
            states = sorted({t for r in pressed for t in r.texts if "queue" in t.lower() or "running" in t.lower()})
            print(f"{args.train} users pressed Train: {sum(r.ok for r in pressed)} runs finished without an exception; "
                  + "; ".join(states)[:300])
        else:
            runs = open_many(base, urls)
        wall = time.perf_counter() - start
        print(f"{'url':<50} {'runs':>5} {'ok':>4} {'exceptions':>10} {'fastest':>8} {'median':>8} {'slowest':>8}")
        for url in args.urls:
            mine = [r for r in runs if r.url == url]
            times = [r.seconds for r in mine]
            print(f"{url:<50} {len(mine):>5} {sum(r.ok for r in mine):>4} {sum(bool(r.exceptions) for r in mine):>10} "
                  f"{min(times):>8.2f} {statistics.median(times):>8.2f} {max(times):>8.2f}")
        print(f"{len(runs)} sessions in {wall:.1f} s")
        return all(r.ok for r in runs)

    if args.base:
        return 0 if measure(args.base) else 1
    with serve(ROOT / "artifacts" / "streamlit-load.log") as base:
        return 0 if measure(base) else 1


if __name__ == "__main__":
    sys.exit(main())
