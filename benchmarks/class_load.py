"""A class on one server, some of it hostile: what the honest students see.

Every student is a websocket client (`benchmarks/load.py`) that connects from its own loopback
address (127.0.0.2, 127.0.0.3, ...), so the server's job queue sees one address per student, as
in a classroom without a NAT. Honest students open the Train page, press Train (the preset
PARITY n = 8 run), then open Sensitivity, Landscape and Lab chapter 1 while their run waits or
trains, and wait for it to end. The last `--hostile` students attack instead, in turn:

- flood: `--flood` sessions, each with a forged owner cookie (random, or a valid-looking id with a
  wrong signature), each pressing Train;
- upload: uploads at the server's size cap (`server.maxUploadSize`) into its sessions, never
  claimed by a widget, the sessions left open;
- links: crafted links (markdown links and images, bare links, a 5,000-digit n, 100,000-character
  values, folders outside the results roots), each opened `--flood` times;
- identities (issue 42's floods, each from the attacker's address with fresh owner ids, made through the
  stores the server reads, on its data folder, as `benchmarks/hostile.py --floods` makes them): 100 owners
  keeping 1 MiB each, 100 classes created, one class joined 199 times, one file kept 200 times under other n.

An honest run that finished but whose model the store did not keep ends as "finished, not kept".

    python benchmarks/class_load.py --students 30 --hostile 5

runs the class twice, each time on a fresh server and data folder: without the hostile students
and with them. Per run it prints the honest students' page times (median, slowest), their training
(runs finished, slowest time from pressing Train to the run's end) and the server's peak memory.
Not run by .ci/run (minutes of training).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load import ROOT, Session, served  # noqa: E402
from streamlit.web.server.starlette.starlette_app_utils import generate_xsrf_token_string  # noqa: E402

PAGES = ["sensitivity?model=encoder-parity-n8", "landscape?model=encoder-parity-n8", "lab?chapter=1"]
LINKS = ["sensitivity?model=" + urllib.parse.quote("![x](http://evil.invalid/x.png)"),
         "sensitivity?model=encoder-parity-n8&colour=" + urllib.parse.quote("[log in again](https://evil.invalid)"),
         "attention?model=encoder-parity-n8&n=" + "9" * 5000,
         "layernorm?model=encoder-parity-n8&n=%C2%B2",
         "landscape?model=encoder-parity-n8&rho=" + "1" * 100_000,
         "experiments?folder=" + urllib.parse.quote("../../../etc"),
         "experiments?folder=" + urllib.parse.quote("/proc/self/cwd"),
         "train?job=" + urllib.parse.quote("www.evil.invalid")]
FINAL = {"finished", "stopped", "failed", "cancelled"}
CEILING_S = 1800


@dataclass
class Outcome:
    """What the honest students saw in one run of the class."""

    pages: list[float] = field(default_factory=list)  # seconds per page run
    page_errors: int = 0
    trained: list[float] = field(default_factory=list)  # seconds from pressing Train to the run's end
    states: list[str] = field(default_factory=list)  # how each honest run ended ("refused: ..." when it was not queued)
    peak_mib: float = 0.0
    uploads: list[int] = field(default_factory=list)  # the server's answers to the hostile uploads (0: connection closed)
    floods: str = ""  # what the identity floods let through


def address(k: int) -> str:
    return f"127.0.0.{2 + k}"


def forged_cookie() -> str:
    """A random owner id, or a well-formed one whose signature is wrong."""
    ident = secrets.token_urlsafe(16)
    return ident if secrets.randbelow(2) else f"{ident}.{secrets.token_hex(32)}"


async def honest(base: str, k: int, data: Path, out: Outcome) -> None:
    source = address(k)
    async with Session(base, local_addr=(source, 0)) as session:
        opened = await session.open("train")
        start = time.perf_counter()
        pressed = await session.press(opened.buttons["Train"])
        job = urllib.parse.parse_qs(pressed.query_string).get("job", [None])[0]
    for url in PAGES:
        async with Session(base, local_addr=(source, 0)) as page:
            run = await page.open(url)
        out.pages.append(run.seconds)
        out.page_errors += not run.ok
    if job is None:
        said = [t for t in pressed.texts if "queue" in t.lower() or "budget" in t.lower()]
        out.states.append("refused: " + " / ".join(said)[:200])
        return
    state_file = data / "jobs" / job / "state.json"
    while time.perf_counter() - start < CEILING_S:
        state = json.loads(state_file.read_text()).get("state") if state_file.is_file() else None
        if state in FINAL:
            out.trained.append(time.perf_counter() - start)
            kept = json.loads(state_file.read_text()).get("kept")
            out.states.append(state if kept or state != "finished" else "finished, not kept")
            return
        await asyncio.sleep(1.0)
    out.states.append("timed out")


async def flood(base: str, k: int, sessions: int) -> None:
    async def one() -> None:
        async with Session(base, cookies={"sensviz_owner": forged_cookie()}, local_addr=(address(k), 0)) as session:
            opened = await session.open("train")
            if "Train" in opened.buttons:
                await session.press(opened.buttons["Train"])
    await asyncio.gather(*(one() for _ in range(sessions)))


def _put_upload(base: str, session_id: str, xsrf: str, size: int) -> int:
    boundary = uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"cap.safetensors\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode() + b"\0" * size + f"\r\n--{boundary}--\r\n".encode()
    request = urllib.request.Request(f"{base}/_stcore/upload_file/{session_id}/{uuid.uuid4()}", data=body, method="PUT",
                                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}",
                                              "X-Xsrftoken": xsrf, "Cookie": f"_streamlit_xsrf={xsrf}"})
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:  # the server closed the connection while the body was still being sent
        return 0


async def upload(base: str, k: int, sessions: int, cap_mb: int) -> list[int]:
    """Uploads of nearly `cap_mb` MiB into one session, never claimed; the server's answers. The XSRF
    check compares a cookie with a header, both the client's own: a script makes up its token."""
    xsrf = generate_xsrf_token_string(None, None)
    async with Session(base, local_addr=(address(k), 0)) as session:
        await session.open("train")
        return [await asyncio.to_thread(_put_upload, base, session.session_id, xsrf, cap_mb * 2**20 - 4096)
                for _ in range(sessions)]


async def _uploads(base: str, k: int, out: Outcome) -> None:
    out.uploads += await upload(base, k, 3, 64)


async def links(base: str, k: int, times: int) -> None:
    for _ in range(times):
        for url in LINKS:
            async with Session(base, local_addr=(address(k), 0)) as session:
                await session.open(url)


async def identities(base: str, k: int, data: Path, out: Outcome) -> None:
    out.floods = await asyncio.to_thread(identity_floods, data, address(k))


def identity_floods(data: Path, source: str) -> str:
    """Issue 42's identity floods from one address, through the server's own stores on its data folder: what each
    let through."""
    import os

    from server.classes import ClassRefused, ClassStore
    from server.kept import KeptRefused, KeptStore
    from server.owners import owner_secret

    secret = owner_secret(data)
    classes = ClassStore(data / "classes", secret)
    store = KeptStore(data / "kept", classes=data / "classes", secret=secret)
    store.pins = classes.pins

    def tried(call) -> bool:
        try:
            call()
        except (KeptRefused, ClassRefused):
            return False
        return True

    kept = sum(tried(lambda k=k: store.keep("upload", "m.safetensors", os.urandom(2**20), f"sybil{k}", address=source))
               for k in range(100))
    made = sum(tried(lambda k=k: classes.create(f"class {k}", f"bot{k}", source)) for k in range(100))
    target = classes.create("Seminar", "prof", "127.0.1.1")
    joined = sum(tried(lambda k=k: classes.join(target.code, f"sybil {k}", f"s{k}", source)) for k in range(199))
    one_file = os.urandom(4096)
    tokens = {store.keep("upload", "m.safetensors", one_file, "relabel", {"n": n}, address=source).token
              for n in range(1, 201)}
    return f"kept {kept}/100 sybil MiB, created {made}/100 classes, joined {joined}/199, one file {len(tokens)} model(s)"


def server_rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) / 1024


async def watch_memory(pid: int, out: Outcome, done: asyncio.Event) -> None:
    while not done.is_set():
        out.peak_mib = max(out.peak_mib, server_rss_mib(pid))
        await asyncio.sleep(0.5)


async def run_class(base: str, pid: int, data: Path, students: int, hostile: int, flood_n: int) -> Outcome:
    out = Outcome()
    done = asyncio.Event()
    watcher = asyncio.create_task(watch_memory(pid, out, done))
    attacks = [flood, upload, links, identities]
    tasks = [honest(base, k, data, out) for k in range(students - hostile)]
    for i in range(hostile):
        k = students - hostile + i
        attack = attacks[i % len(attacks)]
        if attack is upload:
            tasks.append(_uploads(base, k, out))
        elif attack is identities:
            tasks.append(identities(base, k, data, out))
        else:
            tasks.append(attack(base, k, flood_n))
    await asyncio.gather(*tasks)
    done.set()
    await watcher
    return out


def measure(students: int, hostile: int, flood_n: int) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="sensviz-class-", ignore_cleanup_errors=True) as tmp:  # a run ending now
        data = Path(tmp)
        with served(ROOT / "artifacts" / f"streamlit-class-{hostile}.log", env={"SENSVIZ_DATA_DIR": tmp}) as (base, proc):
            asyncio.run(_warm(base))
            return asyncio.run(run_class(base, proc.pid, data, students, hostile, flood_n))


async def _warm(base: str) -> None:
    async with Session(base) as session:  # the server imports its modules and routes once before the class arrives
        await session.open("about")


def report(label: str, out: Outcome) -> str:
    pages = sorted(out.pages)
    trained = sorted(out.trained)
    ended = {s: out.states.count(s) for s in sorted(set(out.states))}
    return (f"{label:<22} {len(pages):>5} {statistics.median(pages):>7.2f} {pages[-1]:>7.2f} {out.page_errors:>6} "
            f"{len(trained):>7} {trained[-1] if trained else float('nan'):>9.1f} {out.peak_mib:>9.0f}   {ended}"
            + (f"; uploads answered {out.uploads}" if out.uploads else "") + (f"; floods: {out.floods}" if out.floods else ""))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=30, help="students in the class (at most 250: one loopback address each)")
    parser.add_argument("--hostile", type=int, default=5, help="how many of them attack instead of learning")
    parser.add_argument("--flood", type=int, default=20, help="sessions per flooding student, and rounds of crafted links")
    args = parser.parse_args(argv)
    if not 0 <= args.hostile < args.students <= 250 or not 1 <= args.flood <= 200:
        parser.error("need 0 <= --hostile < --students <= 250 and 1 <= --flood <= 200")
    honest_n = args.students - args.hostile
    print(f"{honest_n} honest students; the class without and with {args.hostile} hostile ones (flood {args.flood})")
    print(f"{'run':<22} {'pages':>5} {'median':>7} {'slowest':>7} {'errors':>6} {'trained':>7} {'last (s)':>9} "
          f"{'peak MiB':>9}   ended")
    calm = measure(honest_n, 0, args.flood)
    print(report("honest only", calm), flush=True)
    crowd = measure(args.students, args.hostile, args.flood)
    print(report(f"with {args.hostile} hostile", crowd), flush=True)
    return 0 if calm.page_errors == crowd.page_errors == 0 and len(crowd.trained) == honest_n else 1


if __name__ == "__main__":
    sys.exit(main())
