"""What importing costs: `sensviz` loads its modules on first use (PEP 562), so a module that needs no
torch can be imported without it, while every public name of `import sensviz as sv` still resolves.
And who imports whom: the library (`sensviz`) never imports the class server (`server`) or the app
(`ui`, Streamlit); the class server never imports the app."""

import ast
import subprocess
import sys
from pathlib import Path

import sensviz as sv

ROOT = Path(__file__).resolve().parents[1]


def test_every_public_name_resolves():
    for name in sv.__all__:
        assert getattr(sv, name) is not None, name
    assert sv.Task is sv.tasks.Task and sv.train is sv.training.train and sv.lab.CHAPTERS  # names, modules, any module
    assert set(sv.__all__) <= set(dir(sv))


def test_an_unknown_name_is_an_attribute_error():
    try:
        sv.no_such_name  # noqa: B018
    except AttributeError as err:
        assert "no_such_name" in str(err)
    else:
        raise AssertionError("sv.no_such_name resolved")


def torch_loaded_by(statement: str) -> bool:
    """Whether `statement`, run in a fresh interpreter, imports torch."""
    code = f"import sys\n{statement}\nprint('torch' in sys.modules)"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return found.stdout.strip().splitlines()[-1] == "True"


def test_the_package_and_its_text_helpers_load_without_torch():
    assert not torch_loaded_by("import sensviz, sensviz.text, sensviz.glossary, sensviz.limits")
    assert torch_loaded_by("import sensviz as sv; sv.Task")  # the check can fail: a torch name loads torch


def imported_packages(package: str) -> dict[str, set[str]]:
    """Each module of `package` (a folder of the repository) and the top-level packages it imports, read
    from its source (every `import` and `from ... import`, at any depth: a function's import counts too)."""
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        tops = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                tops |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = tops
    return found


def test_the_library_imports_neither_the_class_server_nor_the_app():
    imports = imported_packages("sensviz")
    assert len(imports) > 30  # the check can fail: it read the library's modules
    banned = {"server", "ui", "streamlit"}
    assert {module: tops & banned for module, tops in imports.items() if tops & banned} == {}


def test_the_class_server_imports_neither_streamlit_nor_the_app():
    imports = imported_packages("server")
    assert {"sensviz"} <= set().union(*imports.values())  # the check can fail: it read the server's imports
    banned = {"ui", "streamlit", "pages"}
    assert {module: tops & banned for module, tops in imports.items() if tops & banned} == {}


def test_the_librarys_limits_name_no_owner_class_queue_or_budget():
    """The class server's limits live in `server.limits`; the library's table knows none of them."""
    from sensviz.limits import LIMITS as LIBRARY
    from server.limits import LIMITS as SERVER

    assert SERVER and not set(SERVER) & set(LIBRARY)  # the check can fail: the server has limits of its own
    words = ("kept", "class", "owner", "address", "queue", "budget", "quota")
    assert [name for name in LIBRARY if any(word in name for word in words)] == []
