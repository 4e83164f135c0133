"""The initialisation claim's rule on studies and on altered data."""

from dataclasses import replace

import pytest
import torch

from sensviz import stats
from sensviz.init_claim import MARGIN, decide_cell, decide_init_claim
from sensviz.init_study import init_study
from sensviz.models import ModelSettings


@pytest.fixture(scope="module")
def study():
    return init_study(ModelSettings(arch="encoder", d_model=8, n_layers=1, n_heads=2), 6, 24, 1.0, 0, "parity")


def _with(study, values):
    return replace(study, avg_sensitivity=torch.as_tensor(values, dtype=torch.float64))


def test_cell_matches_its_interval(study):
    cell = decide_cell(study)
    ratio = study.avg_sensitivity / study.n
    assert cell.mean_ratio == pytest.approx(ratio.mean().item())
    assert cell.low < cell.mean_ratio - (0.5 - MARGIN) < cell.high
    expected = (stats.REPRODUCED if cell.high < 0 else stats.DIFFERS if cell.low > 0 else stats.UNRESOLVED)
    assert cell.verdict == expected


def test_altered_data_changes_the_verdict(study):
    n, g = study.n, torch.Generator().manual_seed(0)
    low = _with(study, 0.15 * n + 0.05 * torch.randn(24, generator=g, dtype=torch.float64))
    target_like = _with(study, torch.full((24,), float(study.target_avg_sensitivity)) - 0.1 * torch.rand(24, generator=g))
    random_like = _with(study, n / 2 + 0.3 * torch.randn(24, generator=g, dtype=torch.float64))
    edge = _with(study, (0.5 - MARGIN) * n + torch.tensor([-1.0, 1.0] * 12, dtype=torch.float64))
    assert decide_init_claim([low]).verdict == stats.REPRODUCED
    assert decide_init_claim([target_like]).verdict == stats.DIFFERS
    assert decide_init_claim([random_like]).verdict == stats.DIFFERS
    assert decide_init_claim([edge]).verdict == stats.UNRESOLVED
    # across cells: every cell must reproduce; one differing cell decides
    assert decide_init_claim([low, replace(low, init_scale=2.0)]).verdict == stats.REPRODUCED
    assert decide_init_claim([low, edge]).verdict == stats.UNRESOLVED
    assert decide_init_claim([low, edge, random_like]).verdict == stats.DIFFERS
    with pytest.raises(ValueError, match="at least one"):
        decide_init_claim([])
