"""Shared fixtures: small seeded models of both architectures."""

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
