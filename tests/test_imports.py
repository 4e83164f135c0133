"""What importing costs: `sensviz` loads its modules on first use (PEP 562), so a module that needs no
torch can be imported without it, while every public name of `import sensviz as sv` still resolves."""

import subprocess
import sys

import sensviz as sv


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
