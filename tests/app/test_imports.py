"""What importing costs: `sensviz` loads its modules on first use (PEP 562), so a module that needs no
torch can be imported without it, while every public name of `import sensviz as sv` still resolves.
And who imports whom: the library (`sensviz`) never imports the class server (`server`) or the app
(`ui`, Streamlit); the class server never imports the app."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import sensviz as sv

ROOT = Path(__file__).resolve().parents[2]


def test_every_public_name_resolves():
    for name in sv.__all__:
        assert getattr(sv, name) is not None, name
    assert sv.Task is sv.tasks.Task and sv.train is sv.training.train and sv.lab.CHAPTERS  # names, modules, any module
    assert set(sv.__all__) <= set(dir(sv))


def test_the_packages_docstring_names_every_module_by_its_job():
    """"Modules, by job (every module of the package)": a new module is given its job there."""
    named = set(re.findall(r"`(\w+)`", sv.__doc__))
    modules = {p.stem for p in (ROOT / "sensviz").glob("*.py")} - {"__init__"}
    modules |= {p.parent.name for p in (ROOT / "sensviz").glob("*/__init__.py")}
    assert modules - named == set()


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


def module_imports(package: str) -> dict[str, set[str]]:
    """Each module of `package` (dotted names) and the modules of the package it imports, at any depth (a
    function's import counts too; an `import_module` by name does not: the registry finds its experiments so)."""
    root = ROOT / package
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    found = {}
    for name, path in names.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = ".".join(here.split(".")[: len(here.split(".")) - node.level + 1]) if node.level else ""
                target = ".".join(p for p in (base, node.module or "") if p)
                deps |= {f"{target}.{a.name}" if f"{target}.{a.name}" in names else target for a in node.names}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
        found[name] = {d for d in deps if d in names and d != name}
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while not part or part[-1] != v:
                part.append(stack.pop())
                on.discard(part[-1])
            if len(part) > 1:
                found.append(sorted(part))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_library_has_no_import_cycle():
    graph = module_imports("sensviz")
    assert cycles(graph) == []
    assert cycles({**graph, "sensviz.claims": graph["sensviz.claims"] | {"sensviz.findings"}})  # the check can fail


RESULTS_LAYERS = (
    ("the claims and figure primitives", {"sensviz.stats", "sensviz.convergence", "sensviz.claims", "sensviz.figures"}),
    ("the experiment registry", {"sensviz.experiments"}),  # and its modules
    ("the results loading, analyses and pages", {"sensviz.results", "sensviz.sizing", "sensviz.preregistered",
                                                 "sensviz.confirm", "sensviz.findings", "sensviz.fidelity",
                                                 "sensviz.report"}),
)
"""The results kit, bottom up: a module imports its own layer and those below, never one above."""


def layer_of(module: str) -> int | None:
    for i, (_, members) in enumerate(RESULTS_LAYERS):
        if module in members or any(module.startswith(m + ".") for m in members):
            return i
    return None


def test_the_results_kit_never_imports_back_up_a_layer():
    graph = module_imports("sensviz")
    assert {"sensviz.experiments.length_scaling", "sensviz.findings"} <= set(graph)  # it read the kit
    upward = {(m, d) for m, deps in graph.items() for d in deps
              if layer_of(m) is not None and layer_of(d) is not None and layer_of(d) > layer_of(m)}
    assert upward == set()
    assert layer_of("sensviz.experiments.dynamics") == 1 and layer_of("sensviz.fidelity") == 2


def test_claims_and_figure_primitives_load_without_torch():
    assert not torch_loaded_by("import sensviz.claims, sensviz.convergence, sensviz.figures, sensviz.stats")


def test_the_results_kit_loads_draws_a_figure_and_a_fidelity_section_without_torch():
    """The registry, its settings and defaults, the results loading, the findings, the fidelity page and the
    report (issue 33): drawing the length-scaling figure and its fidelity sections from the shipped tables (the
    paper scale's parameter count among them) loads no torch; the experiments' jobs do."""
    shipped = ROOT / "experiments" / "results" / "standard"
    assert not torch_loaded_by(
        "import sensviz.experiments as e, sensviz.figures, sensviz.findings, sensviz.fidelity, sensviz.report\n"
        "from sensviz import results, sweeps\n"
        "e.registry(), e.defaults('generalization'), e.TRAIN_TOGETHER\n"
        f"assert results.figures('length_scaling', *sweeps.read_results({str(shipped / 'length_scaling')!r})[:2])\n"
        f"t = results.load({str(shipped)!r}, 'length_scaling')\n"
        "assert \"spec's paper scale\" in ''.join(s(t)[0] for s in e.get_experiment('length_scaling').sections)")
    assert torch_loaded_by("import sensviz.experiments as e; e.run_job")  # the check can fail: the jobs need torch


def test_the_librarys_limits_name_no_owner_class_queue_or_budget():
    """The class server's limits live in `server.limits`; the library's table knows none of them."""
    from sensviz.limits import LIMITS as LIBRARY
    from server.limits import LIMITS as SERVER

    assert SERVER and not set(SERVER) & set(LIBRARY)  # the check can fail: the server has limits of its own
    words = ("kept", "class", "owner", "address", "queue", "budget", "quota")
    assert [name for name in LIBRARY if any(word in name for word in words)] == []
