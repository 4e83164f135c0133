"""`python -m ui.serve [streamlit run's options]`: `streamlit run app.py`, warmed before it answers.

`streamlit run` runs none of the app's code until the first session opens a page, so that page pays
the app's imports (torch among them: about 3 CPU seconds here) and its chapter's first drawing. This
launcher pays them in the server's own process before Streamlit starts listening: it imports the app,
draws every Lab chapter's first view from the data shipped beside the zoo (before and after a
prediction), then starts the rest of the warm-up (`ui.cache.warm_up`, once per process: the other
try-it views, the setups' models, torch's one-time costs) and the training queue's standby worker in
the background, and hands over to `streamlit run app.py` with the options given
(`benchmarks/lab_render.py --serve` measures both ways).
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app.py"

log = logging.getLogger("sensviz.explorer")


def warm() -> float:
    """Import the app and draw each Lab chapter's first view; the rest of the warm-up goes on in the
    background. Returns the seconds it took."""
    start = time.perf_counter()
    from sensviz import lab
    from ui import cache, router, server  # noqa: F401  (the router: every module a page run imports)

    for ch in lab.CHAPTERS:
        for blind in (True, False):  # what a session draws before and after its prediction
            try:
                cache.lab_specs(ch.number, ch.control.default, blind=blind)
            except (OSError, ValueError) as err:  # the page measures it, saying so
                log.info("Lab chapter %d not drawn ahead: %s", ch.number, err)
    cache.zoo_entries()  # the sidebar's model list
    cache.warm_up()
    server.job_manager()  # its standby worker starts now, not beside the first page
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    from streamlit.web import cli

    seconds = warm()
    print(f"sensviz: warmed up in {seconds:.1f} s; starting streamlit", file=sys.stderr, flush=True)
    return cli.main(["run", str(APP), *(sys.argv[1:] if argv is None else argv)], prog_name="streamlit")


if __name__ == "__main__":
    sys.exit(main())
