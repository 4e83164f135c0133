"""The one list of the explorer's pages: the router (`ui.router`), the frame (`ui.frame`: which URL
parameters a page keeps), the pages' settings (`ui.page.Settings`), the home page's table, the tests
and the README's page table all follow `PAGES`.

A page is one file `pages/<name>.py` that declares itself in a module-level constant `PAGE`, a
literal: its title, section of the navigation, icon, whether it needs a selected model, one line
saying what it shows, and its own settings beside the public `model`, `compare`, `n` and `job`, each
under its URL parameter with its label, its widget and, when they do not depend on the model, its
default, options and range (`Setting`). This module reads that constant from the file's syntax tree
without running the page, so adding a page is its file and its name in `ORDER`, and adding a setting
is its entry in its page's `PAGE` and the line that draws it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, fields
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ORDER = ("home", "lab", "class", "train", "attention", "sensitivity", "layernorm", "landscape", "init", "experiments",
         "about")
"""The pages in the order of the navigation; `pages/<name>.py` each. The first is the home page (URL `/`)."""
SECTIONS = ("Start", "Explore", "Results", "Reference")

WIDGETS = {
    "selectbox": "choice", "segmented_control": "choice", "radio": "choice", "select_slider": "choice",
    "number_input": "number", "toggle": "flag", "checkbox": "flag",
    "input": "bits",  # `ui.page.Settings.choose_input`: one input string, by bits, cube index or a seeded draw
    "page": "text",  # drawn by the page itself, kept through `ui.page.Settings.read` / `write`
}
"""The widgets a setting can declare (a Streamlit widget's name, or one of ui.page's own) and the kind of value each keeps."""


@dataclass(frozen=True)
class Setting:
    """One setting of a page, as its `PAGE` declares it under its URL parameter. A default, options or
    range left out (None, ()) depends on the model: the page gives it where it draws the setting."""

    param: str  # its URL parameter: `?<param>=...`, and its widget's key under the page's id
    label: str  # its name, as the widget shows it
    widget: str  # a key of WIDGETS
    default: object = None
    options: tuple = ()  # a choice's options, as Python values (their URL form is the page's `fmt`, `str` by default)
    low: float | None = None  # a number's range
    high: float | None = None
    integer: bool = True  # a number: an integer, or any real number in its range

    @property
    def kind(self) -> str:
        """"choice", "number", "flag", "bits" or "text"."""
        return WIDGETS[self.widget]


def setting_of(param: str, declared: dict) -> Setting:
    """A setting from its entry in a `PAGE` (ValueError, for the one who writes the page, when it is not one)."""
    known = {f.name for f in fields(Setting)} - {"param"}
    if not isinstance(declared, dict) or set(declared) - known or not {"label", "widget"} <= set(declared):
        raise ValueError(f"the setting {param!r} is a dict with a label and a widget, and only {', '.join(sorted(known))}")
    if declared["widget"] not in WIDGETS:
        raise ValueError(f"the setting {param!r} has widget {declared['widget']!r}: one of {', '.join(WIDGETS)}")
    return Setting(param, **{k: tuple(v) if k == "options" else v for k, v in declared.items()})


@dataclass(frozen=True)
class PageSpec:
    """One page of the explorer, as its file declares it."""

    title: str
    file: str  # the page's script, relative to the repository root
    url_path: str  # "" for the home page
    section: str
    icon: str  # a Material icon: drawn by Streamlit's own font, no emoji font needed
    shows: str  # what it shows, for the home page and the README
    needs_model: bool = False
    settings: tuple[Setting, ...] = ()  # the page's own settings, in the order its file declares them
    heading: str = ""  # the page's title, when it is not `title`

    def __post_init__(self):
        if not self.heading:
            object.__setattr__(self, "heading", self.title)

    @property
    def key(self) -> str:
        """The page's id: its settings and widget keys are kept under it."""
        return self.url_path or "home"

    @property
    def params(self) -> tuple[str, ...]:
        """The page's own URL parameters."""
        return tuple(s.param for s in self.settings)

    def setting(self, param: str) -> Setting:
        """The setting declared under this URL parameter (ValueError, for the one who writes the page, when there is none)."""
        for s in self.settings:
            if s.param == param:
                return s
        raise ValueError(f"{param!r} is not among the settings declared in the PAGE of {self.file}")


def declared(file: Path) -> dict:
    """The `PAGE = {...}` literal of a page file, read from its syntax tree (the page does not run)."""
    for node in ast.parse(file.read_text(), str(file)).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["PAGE"]:
            return ast.literal_eval(node.value)
    raise ValueError(f"{file.name} declares no PAGE")


def read_page(file: Path, url_path: str) -> PageSpec:
    """The page in `file` as it declares itself, served at `url_path`."""
    found = declared(file)
    if not isinstance(found.get("settings", {}), dict):
        raise ValueError(f"{file.name}: PAGE's settings are a dict, each setting under its URL parameter: "
                         '{"shape": {"label": "Shape", "widget": "radio", "options": [...]}}')
    settings = tuple(setting_of(param, entry) for param, entry in found.get("settings", {}).items())
    relative = file.relative_to(ROOT) if file.is_relative_to(ROOT) else file
    return PageSpec(found["title"], str(relative), url_path, found["section"], found["icon"], found["shows"],
                    found.get("needs_model", False), settings, found.get("heading", ""))


PAGES: tuple[PageSpec, ...] = tuple(read_page(ROOT / "pages" / f"{name}.py", "" if i == 0 else name)
                                    for i, name in enumerate(ORDER))


def spec(url_path: str) -> PageSpec:
    """The page with this URL path ("" for home)."""
    return next(p for p in PAGES if p.url_path == url_path)


def by_key(key: str) -> PageSpec:
    """The page with this id (`PageSpec.key`: its file's name); ValueError when there is none."""
    for p in PAGES:
        if p.key == key:
            return p
    raise ValueError(f"there is no page {key!r} in ui.nav.ORDER")
