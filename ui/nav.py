"""The one list of the explorer's pages: the router (`ui.router`), the home page's table, the tests
and the README's page table all follow `PAGES`.

A page is one file `pages/<name>.py` that declares itself in a module-level constant `PAGE` (a
literal: its title, section of the navigation, icon, whether it needs a selected model, the URL
parameters of its own settings beside the public `model`, `compare`, `n`, `job`, and one line
saying what it shows). This module reads that constant from the file's syntax tree without running
the page, so adding a page is its file and its name in `ORDER`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ORDER = ("home", "lab", "class", "train", "attention", "sensitivity", "layernorm", "landscape", "experiments", "about")
"""The pages in the order of the navigation; `pages/<name>.py` each. The first is the home page (URL `/`)."""
SECTIONS = ("Start", "Explore", "Results", "Reference")


@dataclass(frozen=True)
class PageSpec:
    """One page of the explorer, as its file declares it."""

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
        """The page's id: its settings and widget keys are kept under it."""
        return self.url_path or "home"


def declared(file: Path) -> dict:
    """The `PAGE = {...}` literal of a page file, read from its syntax tree (the page does not run)."""
    for node in ast.parse(file.read_text(), str(file)).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["PAGE"]:
            return ast.literal_eval(node.value)
    raise ValueError(f"{file.name} declares no PAGE")


def read_page(name: str, home: bool = False) -> PageSpec:
    """The page `pages/<name>.py` as it declares itself."""
    found = declared(ROOT / "pages" / f"{name}.py")
    return PageSpec(found["title"], f"pages/{name}.py", "" if home else name, found["section"], found["icon"],
                    found.get("needs_model", False), tuple(found.get("settings", ())), found["shows"],
                    found.get("heading", ""))


PAGES: tuple[PageSpec, ...] = tuple(read_page(name, home=i == 0) for i, name in enumerate(ORDER))


def spec(url_path: str) -> PageSpec:
    """The page with this URL path ("" for home)."""
    return next(p for p in PAGES if p.url_path == url_path)
