"""The explorer's server warmed before it answers: `app.py`'s `st.App` runs `lifespan` at start.

`streamlit run` would run none of the app's code until the first session opens a page, so that page
would pay the app's imports (torch among them: about 3 CPU seconds here) and its chapter's first
drawing. `streamlit run app.py` serves `app.py`'s `st.App` (uvicorn), which answers only after this
start-up (connections wait meanwhile): it imports the app, draws every Lab chapter's first view from
the data shipped beside the zoo (before and after a prediction), then starts the rest of the warm-up
(`ui.cache.warm_up`, once per process: the other try-it views, the setups' models, torch's one-time
costs) and the training queue's launcher in the background (`benchmarks/lab_render.py`
measures it). A warm-up that fails is logged and the server starts anyway: its pages then draw what
they need on demand, as they can.

SIGTERM (and SIGINT) end the server at once with one line in its log: its training runs end with it
(each run's process dies with the server), every lock it held (flocks on the data folder) goes with
the process, and the next start keeps each interrupted run's last measurement
(`server.jobs.JobManager`). Every file the server writes is written atomically, so nothing is left
half-written; a Ray queue (`$SENSVIZ_RAY_ADDRESS`) goes on serving the other web servers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time

log = logging.getLogger("sensviz.explorer")


def warm() -> float:
    """Import the app and draw each Lab chapter's first view; the rest of the warm-up goes on in the
    background. Returns the seconds it took."""
    start = time.perf_counter()
    from sensviz import lab
    from server import services
    from ui import cache, router  # noqa: F401  (the router: every module a page run imports)

    for ch in lab.CHAPTERS:
        for blind in (True, False):  # what a session draws before and after its prediction
            try:
                cache.lab_specs(ch.number, ch.control.default, blind=blind)
            except (OSError, ValueError) as err:  # the page measures it, saying so
                log.info("Lab chapter %d not drawn ahead: %s", ch.number, err)
    cache.zoo_entries()  # the sidebar's model list
    cache.warm_up()
    services.job_manager()  # its launcher starts now, not beside the first page
    return time.perf_counter() - start


def stop_now(signum: int, _frame=None) -> None:
    """End the server at once, saying so in one line (installed for SIGTERM and SIGINT by `lifespan`)."""
    print(f"sensviz: {signal.Signals(signum).name} received, the server stops now; a run it was training keeps "
          "its last measurement when the server starts again", file=sys.stderr, flush=True)
    os._exit(0)


@contextlib.asynccontextmanager
async def lifespan(_app):
    """`st.App`'s start-up (`app.py`): warm before the server answers its first request."""
    try:
        seconds = warm()
    except Exception:  # noqa: BLE001 - a server without its warm-up still serves every page
        log.exception("sensviz: the warm-up failed; pages draw on demand")
    else:
        print(f"sensviz: warmed up in {seconds:.1f} s", file=sys.stderr, flush=True)
    for stop in (signal.SIGTERM, signal.SIGINT):  # after the warm-up: Ray's connection installs handlers of its own
        signal.signal(stop, stop_now)
    yield
