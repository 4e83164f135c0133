"""The one list of the explorer's pages: the router (`app.py`), the home page's table, the tests
and the README's page table all follow `PAGES`.

Each page has a URL path (`/sensitivity`), a section of the navigation, whether it needs a
selected model, the URL parameters of its own settings (beside the public `model`, `compare`,
`n`, `job`), and one line saying what it shows.
"""

from __future__ import annotations

import logging
import re
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import streamlit as st

from sensviz.text import escape_markdown

log = logging.getLogger("sensviz.explorer")


@dataclass(frozen=True)
class PageSpec:
    """One page of the explorer."""

    title: str
    file: str  # the page's script, relative to the repository root
    url_path: str  # "" for the home page
    section: str
    icon: str  # a Material icon: drawn by Streamlit's own font, no emoji font needed
    needs_model: bool
    params: tuple[str, ...]  # the page's own URL parameters
    shows: str  # what it shows, for the home page and the README
    heading: str = ""  # the page's title, when it is not `title`

    def __post_init__(self):
        if not self.heading:
            object.__setattr__(self, "heading", self.title)

    @property
    def key(self) -> str:
        return self.url_path or "home"


PAGES: tuple[PageSpec, ...] = (
    PageSpec("Home", "pages/home.py", "", "Start", ":material/home:", False, (),
             "what the explorer is for and where to start",
             heading="sensviz: why sensitive functions are hard for transformers"),
    PageSpec("Lab", "pages/lab.py", "lab", "Start", ":material/school:", False, ("chapter", "predict", "try"),
             "the paper's story in six guided chapters for a class: each with its question, one-click setup, the "
             "few charts that make the point, a question to answer and the formula; an offline handout",
             heading="Lab: sensitive functions"),
    PageSpec("Train", "pages/train.py", "train", "Explore", ":material/model_training:", False, ("logloss",),
             "train a small transformer on PARITY, MAJORITY, FIRST, MEAN, sparse or random functions, as a "
             "server-side job that keeps running while you look at other pages; live loss, accuracy, sharpness, "
             "Blowup, param_norm, as_n and the Fourier degree profile; presets and early stopping"),
    PageSpec("Attention", "pages/attention.py", "attention", "Explore", ":material/visibility:", True,
             ("x", "flip", "weight", "range"),
             "attention maps for any input, averaged over the cube or by Hamming weight, and how one bit flip "
             "changes them"),
    PageSpec("Sensitivity", "pages/sensitivity.py", "sensitivity", "Explore", ":material/grid_on:", True, ("colour", "vertex"),
             "s(f,x) on every vertex of the Hamming cube, model vs. target; one vertex and its flips; "
             "distributions, influences and the Fourier degree profile"),
    PageSpec("LayerNorm", "pages/layernorm.py", "layernorm", "Explore", ":material/straighten:", True, ("x", "tradeoff"),
             "the factors N_i^(k) of one input, their Blowup over the cube, Blowup against s(f,x), and the "
             "zoo in the paper's norm/blowup trade-off"),
    PageSpec("Landscape", "pages/landscape.py", "landscape", "Explore", ":material/landscape:", True,
             ("rho", "directions", "inputs", "seed", "curve", "slice", "kind", "norm", "skip", "span", "plane",
              "hessian", "line"),
             "sharpness L_ρ at the paper's radius with its error bar beside the exact small-ρ limit; on demand "
             "the ρ curve, 1-D and 2-D loss slices, Hessian eigenvalues and the line to a second model"),
    PageSpec("Experiments", "pages/experiments.py", "experiments", "Results", ":material/science:", False,
             ("experiment", "scale"),
             "the paper's five experiments as figures, from the shipped results or a sweep folder of your own, "
             "with each figure's data as CSV"),
    PageSpec("About", "pages/about.py", "about", "Reference", ":material/menu_book:", False, (),
             "the theory with its formulas, and a glossary of the charts"),
)
SECTIONS = ("Start", "Explore", "Results", "Reference")


def spec(url_path: str) -> PageSpec:
    """The page with this URL path ("" for home)."""
    return next(p for p in PAGES if p.url_path == url_path)


_ROUTED: ContextVar[bool] = ContextVar("sensviz_routed", default=False)
"""True while the router (`app.py`) runs a page in this script run (each run has its own thread)."""


@contextmanager
def routing():
    """The router's `with` block around `page.run()`: pages inside it know they are routed, and an
    unexpected error of a page becomes one line on the page (the traceback goes to the server's log,
    never to the browser), so one bad file or value cannot show a user the server's paths."""
    token = _ROUTED.set(True)
    try:
        yield
    except Exception as err:  # noqa: BLE001 - the last guard of a page; Streamlit's own controls are BaseException
        log.exception("a page failed")
        st.error(f"This view could not be drawn: {type(err).__name__}: {_first_line(err)}. The rest of the app "
                 "works; try other settings or another model.", icon=":material/error:")
    finally:
        _ROUTED.reset(token)


def _first_line(err: Exception) -> str:
    """The error's message, first line only, without file system paths, escaped for markdown."""
    text = str(err).splitlines()[0] if str(err) else ""
    return escape_markdown(re.sub(r"(/[\w.-]+){2,}", "<path>", text)[:300])


def frame() -> st.Page:
    """What the router does before a page: the page config, the page list (`st.navigation`), the frame
    (`ui.frame`: the sidebar, the URL state, the title); returns the page to run."""
    from ui import cache
    from ui import frame as drawn

    st.set_page_config(page_title="sensviz", page_icon=":material/explore:", layout="wide")
    cache.warm_up()  # once per server
    current, spec = navigation()
    drawn.draw(spec)
    return current


def require_router() -> None:
    """The first line of every page script. Streamlit runs a file of `pages/` directly (its multipage
    convention) until some script run has called `st.navigation`: for a link opened first after the
    server starts, and in AppTest on every run. On a server such a run registers the pages and reruns,
    so the page is drawn by the router, with the same widget ids as every later run (the first run of a
    session carries no widget interaction to lose; the URL's parameters are kept). AppTest cannot rerun
    into the router: there the router's frame is drawn here and the page goes on."""
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
