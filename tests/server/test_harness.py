"""The test harness itself: a test that starts Ray leaves no Ray signal handler behind it."""

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SIGNALS, signal_handlers_restored

ROOT = Path(__file__).resolve().parents[2]


def handlers() -> dict:
    return {sig: signal.getsignal(sig) for sig in SIGNALS}


@pytest.mark.ray
def test_ray_replaces_the_sigterm_handler_and_the_handlers_found_come_back(ray):
    before = handlers()
    with signal_handlers_restored():
        ray.init(address="local", num_cpus=1, include_dashboard=False)
        try:
            assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]  # Ray's own: sys.exit
        finally:
            ray.shutdown()
        assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]  # shutdown leaves it installed
    assert handlers() == before


AFTER_A_RAY_TEST = '''
import signal

FOUND = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}


def test_a_ray_test_that_leaves_ray_running(ray):
    ray.init(address="local", num_cpus=1, include_dashboard=False)
    assert signal.getsignal(signal.SIGTERM) is not FOUND[signal.SIGTERM]


def test_the_next_test_finds_no_ray_and_the_handlers_of_before():
    import ray

    assert not ray.is_initialized()
    assert {sig: signal.getsignal(sig) for sig in FOUND} == FOUND
'''


@pytest.mark.ray
def test_the_ray_fixture_leaves_the_next_test_the_handlers_of_before(tmp_path, ray_module):
    """Two tests in a pytest of their own with this conftest: the first starts Ray through the `ray`
    fixture and leaves it running; the second finds Ray stopped and the signal handlers of before."""
    shutil.copy(Path(__file__).parents[1] / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_after_ray.py").write_text(AFTER_A_RAY_TEST)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "2 passed" in proc.stdout, proc.stdout + proc.stderr


def test_the_rule_of_the_layers_names_each_breach(tmp_path):
    """A core module that imports the app, a process or another test module, or carries a slow marker, is named
    with its breaches; the same imports are a core matter only, except another test module's (every layer)."""
    from conftest import breaches

    module = tmp_path / "test_x.py"
    module.write_text("import subprocess\nfrom streamlit.testing.v1 import AppTest\nimport pytest\n"
                      "from test_app import open_url\n\n@pytest.mark.slow\ndef test_y():\n    import ui.cache\n")
    assert sorted(breaches(module, core=True)) == ["imports streamlit.testing.v1", "imports subprocess",
                                                   "imports the test module test_app", "imports ui.cache", "is marked slow"]
    assert breaches(module, core=False) == ["imports the test module test_app"]
    module.write_text("import torch\nfrom helpers.core import TINY\nfrom sensviz import cube\n")
    assert breaches(module, core=True) == []
