"""A page owns its settings: a setting declared in a page's `PAGE` (and nowhere else) is drawn by its
widget, restored from a link, kept in the URL and refused in one line when bad; a declaration that is
not one says so; the `ui` modules import each other without a cycle."""

import ast
import os
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("SENSVIZ_DATA_DIR", tempfile.mkdtemp(prefix="sensviz-settings-"))

from streamlit.testing.v1 import AppTest  # noqa: E402

from ui import nav  # noqa: E402

NEW_PAGE = '''"""Shapes: a page that is not in the app, with one setting declared in its PAGE and nowhere else."""

PAGE = {
    "title": "Shapes",
    "section": "Explore",
    "icon": ":material/category:",
    "shows": "a shape",
    "settings": {"shape": {"label": "Shape", "widget": "radio", "options": ["round", "square", "star"]}},
}
'''


def shapes_page(file: str) -> None:
    """The router's frame around a page read from `file` (not in `ui.nav.ORDER`), then its one setting."""
    from pathlib import Path

    import streamlit as st

    from ui import frame, nav, page

    spec = nav.read_page(Path(file), "shapes")
    frame.draw(spec)
    st.markdown(f"shape: {page.Settings(spec).choice('shape')}")


def open_shapes(file: Path, **params) -> AppTest:
    at = AppTest.from_function(shapes_page, args=(str(file),), default_timeout=300)
    at.query_params.update(params)
    return at.run()


def test_a_setting_declared_in_a_new_page_is_round_tripped_through_the_url(tmp_path):
    file = tmp_path / "shapes.py"
    file.write_text(NEW_PAGE)
    at = open_shapes(file, shape="square")  # a link
    assert not at.exception and not at.warning, [w.value for w in at.warning]
    assert at.radio(key="sv_w_shapes_shape").value == "square" and "shape: square" in [m.value for m in at.markdown]
    assert at.query_params["shape"] == "square"
    at.radio(key="sv_w_shapes_shape").set_value("round").run()  # the default: left out of the URL
    assert "shape" not in at.query_params
    at.radio(key="sv_w_shapes_shape").set_value("star").run()
    assert at.query_params["shape"] == "star"  # the link to this view: the first run above read one

    bad = open_shapes(file, shape="hexagon", colour="target")  # a bad value, and another page's setting
    assert sorted(w.value.replace("\\", "") for w in bad.warning) == [  # markdown escapes dropped
        "colour is not a setting of this page; ignored.",
        "shape=hexagon was not used: shape is one of round, square, star. Showing the default.",
    ]
    assert bad.radio(key="sv_w_shapes_shape").value == "round" and "shape" not in bad.query_params


@pytest.mark.parametrize("entry, message", [
    ({"label": "Shape", "widget": "dial"}, "has widget 'dial'"),
    ({"widget": "radio"}, "a dict with a label and a widget"),
    ({"label": "Shape", "widget": "radio", "colour": "red"}, "a dict with a label and a widget"),
])
def test_a_setting_that_is_not_one_says_so_when_the_page_list_is_read(tmp_path, entry, message):
    file = tmp_path / "shapes.py"
    file.write_text(NEW_PAGE.replace('{"label": "Shape", "widget": "radio", "options": ["round", "square", "star"]}',
                                     repr(entry)))
    with pytest.raises(ValueError, match=message):
        nav.read_page(file, "shapes")


def test_settings_named_without_their_declaration_say_how_to_declare_them(tmp_path):
    file = tmp_path / "shapes.py"
    file.write_text(NEW_PAGE.replace('"settings": {"shape": {"label": "Shape", "widget": "radio", '
                                     '"options": ["round", "square", "star"]}},', '"settings": ("shape",),'))
    with pytest.raises(ValueError, match="each setting under its URL parameter"):
        nav.read_page(file, "shapes")


def test_a_page_drawing_a_setting_it_does_not_declare_is_told_which_file_to_declare_it_in():
    from ui import page

    with pytest.raises(ValueError, match=r"'colour' is not among the settings declared in the PAGE of pages/attention.py"):
        page.Settings("attention").choice("colour", ["a", "b"])
    with pytest.raises(ValueError, match="no page 'shapes'"):
        page.Settings("shapes")


def ui_imports() -> dict[str, set[str]]:
    """Each `ui` module and the `ui` modules it imports (anywhere in it, at run time)."""
    graph = {}
    for path in (ROOT / "ui").glob("*.py"):
        found, tree = set(), ast.parse(path.read_text())
        hints = {id(n) for block in ast.walk(tree)  # imports for type hints only
                 if isinstance(block, ast.If) and getattr(block.test, "id", "") == "TYPE_CHECKING" for n in ast.walk(block)}
        for node in ast.walk(tree):
            if id(node) in hints:
                continue
            if isinstance(node, ast.ImportFrom) and node.module == "ui":
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ui."):
                found.add(node.module.removeprefix("ui."))
            elif isinstance(node, ast.Import):
                found |= {alias.name.removeprefix("ui.") for alias in node.names if alias.name.startswith("ui.")}
        graph[path.stem] = found
    return graph


def test_the_ui_modules_import_each_other_without_a_cycle():
    graph = ui_imports()
    assert graph["page"] >= {"nav", "url_state"} and "page" in graph["frame"]  # the graph is read
    done, path = set(), []

    def visit(module: str) -> None:
        assert module not in path, " -> ".join([*path[path.index(module):], module])
        if module in done:
            return
        path.append(module)
        for imported in sorted(graph.get(module, ())):
            visit(imported)
        path.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)
