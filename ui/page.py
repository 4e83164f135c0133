"""What the pages share: the selected model (`model()`) and the models a page shows (`shown()`: the
selected one and, in compare mode, the second), page settings kept in the session and in the URL
(`choice`, `number`, `flag`, `choose_input`, the second model `choose_compare`), the notices
about bad URL values, and small helpers (tables of several models, numbers for people, progress
bars, downloads, the exactness note).
`ui.frame` draws everything around a page before it runs.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import pandas as pd
import streamlit as st

import sensviz as sv
from sensviz import charts
from sensviz.measure import NUMERICAL_ERRORS
from sensviz.text import escape_markdown, quoted
from ui import cache, model_refs, nav, owner_id, registry, server, url_state
from ui.model_refs import ModelRef


@dataclass
class Selection:
    """The selected model, loaded, the input length the pages analyse, and the model to compare with
    with the input length it is analysed at (the first model's n when it can read it)."""

    ref: ModelRef
    ck: sv.Checkpoint
    n: int
    compare: ModelRef | None = None
    compare_n: int | None = None


@dataclass(frozen=True)
class Shown:
    """A model a page shows: its label in the charts, its reference, the input length it is analysed at."""

    label: str
    ref: ModelRef
    n: int

    @property
    def markdown_label(self) -> str:
        """The label for a markdown argument (a caption, a spinner, a heading): escaped, as it may be a file's name."""
        return escape_markdown(self.label)


_NOTICE_SLOT: contextvars.ContextVar = contextvars.ContextVar("sv_notice_slot", default=None)
_DECLARED = {spec.key: spec.params for spec in nav.PAGES}


def begin(page: str) -> None:
    """The page this run draws (the frame passes its id): its settings and widgets are kept under it,
    and a callback of this page's widgets (run before the next run) finds it too."""
    st.session_state[registry.PAGE] = page


def _page(param: str | None = None) -> str:
    """The id of the page drawn; with `param`, check that the page declares that URL parameter in its
    `PAGE` (ValueError, for the one who writes the page, when it does not)."""
    page = st.session_state.get(registry.PAGE, "home")
    if param is not None and param not in _DECLARED[page]:
        raise ValueError(f"the setting {param!r} is not among the settings declared in the PAGE of pages/{page}.py")
    return page


def notices_here() -> None:
    """Notices about the URL go here (under the title), now and as the page's settings are read."""
    _NOTICE_SLOT.set(st.container())
    flush_notices()


def model() -> Selection:
    """The selected model; stops the page when there is none (the frame already said what to do)."""
    selection = st.session_state.get(registry.CURRENT)
    if selection is None:
        st.stop()
    return selection


def shown() -> list[Shown]:
    """The models the analysis pages show: the selected one, then in compare mode the second."""
    selection = model()
    models = [Shown(selection.ref.label, selection.ref, selection.n)]
    if selection.compare is not None:
        label = selection.compare.label
        if label == models[0].label:  # e.g. two uploads of the same file name
            label += " (compared)"
        models.append(Shown(label, selection.compare, selection.compare_n))
    return models


def labelled(tables: dict[str, pd.DataFrame], column: str = "model", models_only: bool = False) -> pd.DataFrame:
    """The tables of the models shown (by label) as one table for one chart: one model's table as it
    is; several with the label in `column` and, with `models_only`, each model's own rows without
    its target's (`function == "model"`)."""
    if len(tables) == 1:
        return next(iter(tables.values()))
    return pd.concat([(t[t["function"] == "model"] if models_only else t).assign(**{column: label})
                      for label, t in tables.items()], ignore_index=True)


def figure(x: float | None, digits: int = 4) -> str:
    """A number for people: `digits` significant digits, in scientific form when large or small
    (1.012e4, 3.2e-5), so that it fits a metric without being cut."""
    if x is None:
        return "—"
    if not math.isfinite(x):
        return "not finite"
    if x == 0 or 1e-3 <= abs(x) < 1e4:
        return f"{x:.{digits}g}"
    mantissa, exponent = f"{x:.{digits - 1}e}".split("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def flush_notices() -> None:
    """Show the notices collected so far at the top of the page, one line each."""
    slot = _NOTICE_SLOT.get()
    for text in url_state.take_notices():
        (slot or st).warning(text, icon=":material/link:")


@contextmanager
def guarded(what: str):
    """Around one section's computation: a model it cannot be computed for (a diverged model whose
    Hessian has no eigen-decomposition) gets one line here, and the rest of the page goes on."""
    try:
        yield
    except NUMERICAL_ERRORS as err:
        st.warning(f"{what} is not available for this model: {type(err).__name__}: {quoted(err, 200)}",
                   icon=":material/warning:")


# ----------------------------------------------------------------------------- page settings in the URL


def _bound(param: str, default, parse: Callable[[str], object], fmt: Callable[[object], str],
           valid: Callable[[object], bool], draw: Callable[[str], object], variant: object = ""):
    """A page setting drawn by `draw(key)`: seeded from the session or the URL, written back to both."""
    page = _page(param)
    value = url_state.setting(page, param, default, parse)
    flush_notices()
    if not valid(value):  # e.g. a vertex of another input length
        value = default
    key = registry.widget_key(page, param, variant) if variant != "" else registry.widget_key(page, param)
    if key not in st.session_state:
        st.session_state[key] = value
    value = draw(key)
    url_state.set_setting(page, param, value, default, fmt)
    return value


def choice(param: str, label: str, options: list, default=None, widget=st.selectbox, fmt: Callable = str,
           format_func: Callable = str, variant: object = "", **kwargs):
    """A choice among `options` (a selectbox, radio, segmented control...), kept in the URL as `fmt(option)`."""
    default = options[0] if default is None else default
    by_text = {fmt(o): o for o in options}

    def parse(raw: str):
        if raw not in by_text:
            raise ValueError(f"{param} is one of {', '.join(by_text)}")
        return by_text[raw]

    def draw(key):
        found = widget(label, options=options, format_func=format_func, key=key, **kwargs)
        return default if found is None else found  # a segmented control can be cleared

    return _bound(param, default, parse, fmt, lambda v: v in options, draw, variant)


def number(param: str, label: str, low: float, high: float, default, widget=st.number_input, integer: bool = True,
           variant: object = "", **kwargs):
    """A number in [low, high], kept in the URL."""
    cast = int if integer else float

    def parse(raw: str):
        try:
            value = cast(raw)
        except ValueError:
            raise ValueError(f"{param} is {'an integer' if integer else 'a number'} in {low:g}..{high:g}") from None
        if not low <= value <= high:
            raise ValueError(f"{param} is in {low:g}..{high:g}")
        return value

    def draw(key):
        return cast(widget(label, min_value=low, max_value=high, key=key, **kwargs))

    return _bound(param, default, parse, lambda v: f"{v:g}" if not integer else str(v),
                  lambda v: isinstance(v, (int, float)) and low <= v <= high, draw, variant)


def flag(param: str, label: str, widget=st.toggle, **kwargs) -> bool:
    """An on/off setting (off by default), kept in the URL as `param=1`."""

    def parse(raw: str):
        if raw.lower() not in ("1", "0", "true", "false"):
            raise ValueError(f"{param} is 1 or 0")
        return raw.lower() in ("1", "true")

    return _bound(param, False, parse, lambda v: "1" if v else "0", lambda v: isinstance(v, bool),
                  lambda key: bool(widget(label, key=key, **kwargs)))


def set_value(param: str, value, default, fmt: Callable = str, variant: object = "") -> None:
    """Change a page setting from a callback (before its widget is drawn), e.g. after a click on a chart."""
    page = _page(param)
    st.session_state[registry.widget_key(page, param, variant) if variant != "" else registry.widget_key(page, param)] = value
    url_state.set_setting(page, param, value, default, fmt)


def chart_key(name: str, variant: object = "") -> str:
    """The key of a chart whose selection the page reads."""
    return registry.widget_key(_page(), "chart", name, variant)


def pick_vertex(n: int) -> Callable[[], None]:
    """The callback of a click on the cube grid: the clicked vertex becomes the `vertex` setting."""

    def picked():
        event = st.session_state.get(chart_key("grid", n))
        chosen = (event or {}).get("selection", {}).get(charts.PICK) or []
        if chosen:
            set_value("vertex", int(chosen[0]["vertex"]), 0, variant=n)

    return picked


def my_models() -> list[ModelRef]:
    """The user's kept models and the ones shared with them in this session."""
    store = server.kept_store()
    refs = []
    for kept in store.owned(owner_id.owner()):
        try:
            refs.append(model_refs.kept_ref(kept.kind, kept.token))
        except ValueError:  # deleted or evicted meanwhile
            continue
    return refs + [r for r in registry.shared_refs() if r not in refs and store.info(r.key)]


def choose_compare(candidates: list[ModelRef]) -> ModelRef | None:
    """Choose the second model among `candidates`: the public `compare` parameter."""
    if not candidates:
        st.info("No other model with the same architecture and size is available (pretrained, or kept by you).")
        return None
    by_param = {c.param: c for c in candidates}
    key = registry.widget_key(_page(), "compare")
    current = registry.compared()
    st.session_state[key] = current.param if current in candidates else None

    def picked():
        registry.set_compared(by_param.get(st.session_state.get(key)))

    st.selectbox("Second model", list(by_param), index=None, key=key, placeholder="Choose a model of the same size",
                 format_func=lambda p: by_param[p].label, on_change=picked)
    return current if current in candidates else None


def choose_input(n: int) -> tuple[int, ...]:
    """Pick one input string by toggling bits, by cube index or by a seeded draw; kept in the URL as `x=0110…`."""
    page = _page("x")

    def parse(raw: str):
        if len(raw) != n or set(raw) - {"0", "1"}:
            raise ValueError(f"x is a string of {n} bits 0/1")
        return raw

    x = url_state.setting(page, "x", "0" * n, parse)
    flush_notices()
    if len(x) != n:  # another input length than last time
        x = "0" * n
    bits = tuple(int(b) for b in x)
    how = st.segmented_control("Choose the input", ["Toggle bits", "Cube index", "Random"], default="Toggle bits",
                               key=registry.widget_key(page, "input_how")) or "Toggle bits"
    if how == "Toggle bits":
        key = registry.widget_key(page, "input_bits", n)
        st.session_state.setdefault(key, [i for i in range(n) if bits[i]])
        chosen = st.pills("Bits set to 1 (position 0 first)", list(range(n)), selection_mode="multi", key=key)
        bits = tuple(int(i in chosen) for i in range(n))
    elif how == "Cube index":
        key = registry.widget_key(page, "input_vertex", n)
        st.session_state.setdefault(key, cache.vertex_of_bits(bits))
        vertex = st.number_input(f"Vertex (0 … {2**n - 1}; position 0 is the most significant bit)", 0, 2**n - 1,
                                 key=key)
        bits = cache.bits_of_vertex(n, int(vertex))
    else:
        seed = st.number_input("Seed", 0, 2**31 - 1, 0, key=registry.widget_key(page, "input_seed"))
        bits = cache.bits_of_vertex(n, cache.random_vertex(n, int(seed)))
    x = "".join(map(str, bits))
    url_state.set_setting(page, "x", x, "0" * n)
    st.markdown(f"Input **x = {x}** (vertex {cache.vertex_of_bits(bits)})")
    return bits


# ----------------------------------------------------------------------------- small shared widgets


@contextmanager
def progress_bar(text: str):
    """A progress bar for a long computation; yields the callback the core accepts."""
    bar = st.progress(0.0, text=text)
    try:
        yield lambda fraction: bar.progress(min(max(fraction, 0.0), 1.0), text=text)
    finally:
        bar.empty()


def each_model(models: list[Shown], text: str, compute, progress: bool = True) -> dict:
    """`compute(ref, n, progress=...)` for every model shown, each under its own progress bar (`text`
    formatted with the model's label, escaped, and `n`); the results by label. A computation that
    reports no progress (`progress=False`) is called as `compute(ref, n)` under a spinner."""
    found = {}
    for m in models:
        shown = text.format(label=m.markdown_label, n=m.n)
        if progress:
            with progress_bar(shown) as report:
                found[m.label] = compute(m.ref, m.n, progress=report)
        else:
            with st.spinner(shown):
                found[m.label] = compute(m.ref, m.n)
    return found


def download(table: pd.DataFrame, name: str, label: str = "Download the data (CSV)") -> None:
    """A download button for the data behind a chart."""
    st.download_button(label, table.to_csv(index=False).encode(), file_name=name, mime="text/csv",
                       key=registry.widget_key("download", name))


def exactness_note(exact: bool, n: int, samples: int | None = None, seed: int | None = None) -> None:
    """Say whether the numbers are exact over the cube or Monte Carlo estimates."""
    if exact:
        st.caption(f"Exact: computed over all 2^{n} = {2**n:,} inputs.")
    else:
        st.caption(
            f"**Estimate** (Monte Carlo): n = {n} is above the explorer's exact limit of {cache.MODEL_EXACT_LIMIT}, "
            f"so these come from {samples:,} uniformly sampled inputs and their neighbours (seed {seed}); "
            "error bars are ± one standard error."
        )
