"""What the pages share: the selected model (`model()`) and the models a page shows (`shown()`: the
selected one and, in compare mode, the second), page settings kept in the session and in the URL
(`Settings`: each page's own, declared in its `PAGE`), the notices
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
from server import services
from ui import cache, model_refs, nav, owner_id, registry, url_state
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


def my_models() -> list[ModelRef]:
    """The user's kept models and the ones shared with them in this session."""
    store = services.kept_store()
    refs = []
    for kept in store.owned(owner_id.owner()):
        try:
            refs.append(model_refs.kept_ref(kept.kind, kept.token))
        except ValueError:  # deleted or evicted meanwhile
            continue
    return refs + [r for r in registry.shared_refs() if r not in refs and store.info(r.key)]


# ----------------------------------------------------------------------------- page settings in the URL


FLAG_ON = ("1", "true")
"""How an on/off setting reads as on in a URL (any case)."""


class Settings:
    """The settings a page declares in its `PAGE` (`ui.nav.Setting`), drawn by the page and kept in
    the session (across page switches) and in the URL (a link restores them). The page passes its id
    explicitly (`Settings("sensitivity")`): its widget keys and the callbacks of its widgets carry it,
    so nothing depends on which page the session drew last. What the declaration leaves out (a default,
    options or a range that depends on the model) the page gives where it draws the setting."""

    def __init__(self, page: str | nav.PageSpec):
        self.spec = page if isinstance(page, nav.PageSpec) else nav.by_key(page)
        self.page = self.spec.key

    def key(self, *parts: object) -> str:
        """The key of one of this page's widgets (a setting's, with its variant: an input length, a model...)."""
        return registry.widget_key(self.page, *(p for p in parts if p != ""))

    def _declared(self, param: str, kind: str) -> nav.Setting:
        found = self.spec.setting(param)
        if found.kind != kind:
            raise ValueError(f"the setting {param!r} of {self.spec.file} is declared as a {found.kind}, drawn as a {kind}")
        return found

    def read(self, param: str, default, parse: Callable[[str], object]):
        """A setting the page draws itself (`"widget": "page"`): what the session chose last (a setting
        left at its default follows the default, which may depend on the model), else the first run's
        URL value (`parse` raises ValueError for a bad one: a notice, and the default), else `default`."""
        value = url_state.setting(self.page, param, default, parse)
        flush_notices()
        return value

    def kept(self, param: str) -> bool:
        """Whether the session holds a value of this setting already (its URL value, if any, was read)."""
        return url_state.kept(self.page, param)

    def write(self, param: str, value, default, fmt: Callable[[object], str] = str) -> None:
        """Remember a setting and put it in the URL (left out when it is the default)."""
        url_state.set_setting(self.page, param, value, default, fmt)

    def _bound(self, setting: nav.Setting, default, parse: Callable[[str], object], fmt: Callable[[object], str],
               valid: Callable[[object], bool], draw: Callable[[str], object], variant: object):
        """A setting drawn by `draw(key)`: seeded from the session or the URL, written back to both."""
        value = self.read(setting.param, default, parse)
        if not valid(value):  # e.g. a vertex of another input length
            value = default
        key = self.key(setting.param, variant)
        if key not in st.session_state:
            st.session_state[key] = value
        value = draw(key)
        self.write(setting.param, value, default, fmt)
        return value

    def choice(self, param: str, options: list | None = None, default=None, *, label: str | None = None, where=st,
               fmt: Callable = str, format_func: Callable = str, variant: object = "", **kwargs):
        """A choice among its options (declared, or `options` here), drawn by its declared widget in
        `where` (a column, a container...), kept in the URL as `fmt(option)`."""
        setting = self._declared(param, "choice")
        options = list(setting.options) if options is None else options
        default = next(d for d in (default, setting.default, options[0]) if d is not None)
        by_text = {fmt(o): o for o in options}

        def parse(raw: str):
            if raw not in by_text:
                raise ValueError(f"{param} is one of {', '.join(by_text)}")
            return by_text[raw]

        def draw(key):
            found = getattr(where, setting.widget)(label or setting.label, options=options, format_func=format_func,
                                                   key=key, **kwargs)
            return default if found is None else found  # a segmented control can be cleared

        return self._bound(setting, default, parse, fmt, lambda v: v in options, draw, variant)

    def number(self, param: str, low: float | None = None, high: float | None = None, default=None, *,
               label: str | None = None, where=st, variant: object = "", **kwargs):
        """A number in its range (declared, or `low`/`high` here), drawn by its declared widget in `where`, kept in the URL."""
        setting = self._declared(param, "number")
        low = setting.low if low is None else low
        high = setting.high if high is None else high
        default = setting.default if default is None else default
        cast = int if setting.integer else float

        def parse(raw: str):
            try:
                value = cast(raw)
            except ValueError:
                raise ValueError(f"{param} is {'an integer' if setting.integer else 'a number'} in {low:g}..{high:g}") from None
            if not low <= value <= high:
                raise ValueError(f"{param} is in {low:g}..{high:g}")
            return value

        def draw(key):
            return cast(getattr(where, setting.widget)(label or setting.label, min_value=low, max_value=high, key=key,
                                                       **kwargs))

        return self._bound(setting, default, parse, lambda v: str(v) if setting.integer else f"{v:g}",
                           lambda v: isinstance(v, (int, float)) and low <= v <= high, draw, variant)

    def flag(self, param: str, *, label: str | None = None, where=st, **kwargs) -> bool:
        """An on/off setting (off unless declared on), drawn by its declared widget in `where`, kept in the URL as `param=1`."""
        setting = self._declared(param, "flag")

        def parse(raw: str):
            if raw.lower() not in (*FLAG_ON, "0", "false"):
                raise ValueError(f"{param} is 1 or 0")
            return raw.lower() in FLAG_ON

        return self._bound(setting, bool(setting.default), parse, lambda v: "1" if v else "0", lambda v: isinstance(v, bool),
                           lambda key: bool(getattr(where, setting.widget)(label or setting.label, key=key, **kwargs)), "")

    def flag_now(self, param: str) -> bool:
        """An on/off setting's value before its widget is drawn on this run (the frame draws first): the widget's
        state once it was drawn, else the URL's."""
        value = st.session_state.get(self.key(param))
        if isinstance(value, bool):
            return value
        return st.query_params.get(param, "").lower() in FLAG_ON

    def set_value(self, param: str, value, default=None, fmt: Callable = str, variant: object = "") -> None:
        """Change a setting from a callback (before its widget is drawn), e.g. after a click on a chart."""
        setting = self.spec.setting(param)
        st.session_state[self.key(param, variant)] = value
        self.write(param, value, setting.default if default is None else default, fmt)

    def chart_key(self, name: str, variant: object = "") -> str:
        """The key of a chart whose selection the page reads."""
        return self.key("chart", name, variant)

    def pick_vertex(self, n: int) -> Callable[[], None]:
        """The callback of a click on the cube grid: the clicked vertex becomes the `vertex` setting."""

        def picked():
            event = st.session_state.get(self.chart_key("grid", n))
            chosen = (event or {}).get("selection", {}).get(charts.PICK) or []
            if chosen:
                self.set_value("vertex", int(chosen[0]["vertex"]), variant=n)

        return picked

    def choose_compare(self, candidates: list[ModelRef]) -> ModelRef | None:
        """Choose the second model among `candidates`: the public `compare` parameter."""
        if not candidates:
            st.info("No other model with the same architecture and size is available (pretrained, or kept by you).")
            return None
        by_param = {c.param: c for c in candidates}
        labels = distinct({p: c.label for p, c in by_param.items()})
        key = self.key("compare")
        current = registry.compared()
        st.session_state[key] = current.param if current in candidates else None

        def picked():
            registry.set_compared(by_param.get(st.session_state.get(key)))

        st.selectbox("Second model", list(by_param), index=None, key=key, placeholder="Choose a model of the same size",
                     format_func=lambda p: labels.get(p, p), on_change=picked)
        return current if current in candidates else None

    def choose_input(self, n: int, param: str = "x") -> tuple[int, ...]:
        """Pick one input string by toggling bits, by cube index or by a seeded draw; kept in the URL as `x=0110…`."""
        setting = self._declared(param, "bits")

        def parse(raw: str):
            if len(raw) != n or set(raw) - {"0", "1"}:
                raise ValueError(f"{param} is a string of {n} bits 0/1")
            return raw

        x = self.read(param, "0" * n, parse)
        if len(x) != n:  # another input length than last time
            x = "0" * n
        bits = tuple(int(b) for b in x)
        how = st.segmented_control(setting.label, ["Toggle bits", "Cube index", "Random"], default="Toggle bits",
                                   key=self.key("input_how")) or "Toggle bits"
        if how == "Toggle bits":
            key = self.key("input_bits", n)
            st.session_state.setdefault(key, [i for i in range(n) if bits[i]])
            chosen = st.pills("Bits set to 1 (position 0 first)", list(range(n)), selection_mode="multi", key=key)
            bits = tuple(int(i in chosen) for i in range(n))
        elif how == "Cube index":
            key = self.key("input_vertex", n)
            st.session_state.setdefault(key, cache.vertex_of_bits(bits))
            vertex = st.number_input(f"Vertex (0 … {2**n - 1}; position 0 is the most significant bit)", 0, 2**n - 1,
                                     key=key)
            bits = cache.bits_of_vertex(n, int(vertex))
        else:
            seed = st.number_input("Seed", 0, 2**31 - 1, 0, key=self.key("input_seed"))
            bits = cache.bits_of_vertex(n, cache.random_vertex(n, int(seed)))
        x = "".join(map(str, bits))
        self.write(param, x, "0" * n)
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


def distinct(labels: dict) -> dict:
    """A select box's option labels made all different: Streamlit tells which option a browser picked by its label,
    so of two equal labels either pick gives the same option (a student's stopped run and its re-run, both named
    "parity-n12-..."). A repeated label gets " (2)", " (3)", ... in the order given."""
    used, found = set(labels.values()), {}
    for key, label in labels.items():
        if label in found.values():
            count = 2
            while f"{label} ({count})" in used:
                count += 1
            label = f"{label} ({count})"
            used.add(label)
        found[key] = label
    return found


def download(table: pd.DataFrame, name: str, label: str = "Download the data (CSV)") -> None:
    """A download button for the data behind a chart; the file is written when the button is pressed, not in
    every run of the page."""
    st.download_button(label, lambda: table.to_csv(index=False).encode(), file_name=name, mime="text/csv",
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
