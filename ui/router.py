"""The router (`app.py`): the page list (`ui.nav.PAGES`) in `st.navigation`, the frame drawn around
every page (`ui.frame`), and the guard that turns a page's unexpected error into one line."""

from __future__ import annotations

import logging
import re
from contextlib import contextmanager
from contextvars import ContextVar

import streamlit as st

from sensviz.text import escape_markdown
from ui import cache, registry, uploads
from ui import frame as drawn
from ui.nav import PAGES, SECTIONS, PageSpec, spec

uploads.hold_newest_upload_only()  # once per server process: a session holds one upload at most

log = logging.getLogger("sensviz.explorer")

_ROUTED: ContextVar[bool] = ContextVar("sensviz_routed", default=False)
"""True while the router (`app.py`) runs a page in this script run (each run has its own thread)."""


@contextmanager
def routing():
    """The router's `with` block around `page.run()`: an unexpected error of a page becomes one line on
    the page (the traceback goes to the server's log, never to the browser), so one bad file or value
    cannot show a user the server's paths."""
    token = _ROUTED.set(True)
    try:
        yield
    except Exception as err:  # noqa: BLE001 - the last guard of a page; Streamlit's own controls are BaseException
        log.exception("a page failed")
        st.error(f"This view could not be drawn: {type(err).__name__}: {_first_line(err)}. The rest of the app "
                 "works; try other settings or another model.", icon=":material/error:")
    finally:
        _ROUTED.reset(token)
        cache.warm_up()  # started at start-up (`ui.serve.lifespan`); here only where that did not run or failed


def _first_line(err: Exception) -> str:
    """The error's message, first line only, without file system paths, escaped for markdown."""
    text = str(err).splitlines()[0] if str(err) else ""
    return escape_markdown(re.sub(r"(/[\w.-]+){2,}", "<path>", text)[:300])


def frame() -> st.Page:
    """What the router does before a page: the page config, the page list (`st.navigation`), the frame
    (`ui.frame`: the sidebar, the URL state, the title); returns the page to run."""
    st.set_page_config(page_title="sensviz", page_icon=":material/explore:", layout="wide")
    current, found = navigation()
    st.session_state[registry.PAGE] = found.url_path
    drawn.draw(found)
    return current


def require_router() -> None:
    """The first line of every page script. While a server has a `pages/` folder beside `app.py`,
    Streamlit runs a page file directly (its first multipage convention) until some script run has
    called `st.navigation`: for a link opened first after the server starts, and in AppTest on every
    run. On a server such a run registers the pages and reruns, so the page is drawn by the router,
    with the same widget ids as every later run (the first run of a session carries no widget
    interaction to lose; the URL's parameters are kept). AppTest cannot rerun into the router: there
    the router's frame is drawn here and the page goes on.

    Why every page calls it, rather than one hook (Streamlit 1.67, checked in its source):
    - the mode is one class attribute set from the folder's existence, with no option to name another
      folder or turn it off: `PagesManager.__init__` sets `uses_pages_directory =
      Path(self.main_script_parent / "pages").exists()` (runtime/pages_manager.py, lines 60-63), and
      `_mpa_v1` globs `resolved_main_script_path.parent / "pages"` (runtime/scriptrunner/script_runner.py,
      line 152); the config's only `pages/` option is `client.showSidebarNavigation`;
    - in that mode the script runner runs `_mpa_v1(self._main_script_path)` instead of `app.py`
      (script_runner.py, lines 933-934), which runs the page file through `st.Page.run`: no code of
      the explorer runs before the page's own lines;
    - only `st.navigation` turns the mode off, for the whole process (`PagesManager.uses_pages_directory
      = False`, commands/navigation.py, line 399), and AppTest sets it back to None before every run
      (testing/v1/app_test.py, line 666), so in AppTest every run of `app.py` is a direct page run;
    - a hook at import (in `ui/__init__.py`) runs once per process, not once per run: it misses AppTest's
      later runs, and on a server it races, as the sessions that start together run their page files
      before the first one's `st.navigation` has turned the mode off.
    Renaming the folder would remove the need (Streamlit then runs `app.py` on every run); the design
    keeps `pages/`."""
    if _ROUTED.get():
        return
    if st.config.get_option("global.appTest"):
        frame()
        return
    navigation()
    st.rerun()


def navigation() -> tuple[st.Page, PageSpec]:
    """Register every page with `st.navigation` (in sections) and return the current one."""
    pages = {section: [] for section in SECTIONS}
    for page in PAGES:
        pages[page.section].append(st.Page(page.file, title=page.title, icon=page.icon, url_path=page.url_path or None,
                                           default=not page.url_path))
    current = st.navigation({section: listed for section, listed in pages.items() if listed})
    return current, spec(current.url_path)
