"""Shared fixtures: small seeded models of both architectures; a Ray that can start here."""

import sys

import pytest
import torch

import sensviz as sv

torch.set_num_threads(2)


@pytest.fixture
def encoder_model():
    return sv.build_model("encoder", d_model=16, n_layers=2, n_heads=2, max_len=12, seed=0)


@pytest.fixture
def formal_model():
    return sv.build_model("formal", d_model=8, n_layers=2, n_heads=2, max_len=12, seed=0)


@pytest.fixture(params=["encoder", "formal"])
def any_model(request, encoder_model, formal_model):
    return encoder_model if request.param == "encoder" else formal_model


@pytest.fixture
def ray():
    """The ray module, once a local Ray instance has been seen to start (and shut down again);
    the test is skipped, saying why, only when Ray is missing or cannot start on this machine."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (requirements-dev.txt installs it)")
    try:
        ray.init(num_cpus=1, include_dashboard=False)
    except Exception as err:  # noqa: BLE001 - any failure to start means there is no Ray here
        pytest.skip(f"Ray cannot start on this machine: {err}")
    finally:
        ray.shutdown()
    return ray


_MAIN = sys.modules["__main__"]


@pytest.fixture(autouse=True)
def restore_main_module():
    """AppTest runs the app as Streamlit does, leaving its script as `__main__`; restore pytest's
    afterwards, or a process spawned later (a sweep's workers) would re-run the app on import."""
    yield
    sys.modules["__main__"] = _MAIN
