"""The named limits: type and range checks with one-line messages; the paper's sizes pass."""

import numpy as np
import pytest

import sensviz as sv
from sensviz import limits
from sensviz.checkpoints import shape_model
from sensviz.limits import LIMITS, check_float, check_int, check_json_depth, check_run_count


def test_check_int_accepts_real_integers_in_range():
    assert check_int("d_model", 128) == 128
    assert check_int("d_model", np.int64(64)) == 64 and type(check_int("d_model", np.int64(64))) is int
    assert check_int("--steps", 20_000, "train_steps") == 20_000


@pytest.mark.parametrize("value,message", [
    (2.0, "d_model must be an integer, got 2.0"),
    (True, "d_model must be an integer, got True"),
    ("16", "d_model must be an integer, got '16'"),
    (None, "d_model must be an integer, got None"),
    (1, "d_model must be at least 2 (limit 'd_model'), got 1"),
    (20_000, "d_model must be at most 2,048 (limit 'd_model'), got 20,000"),
])
def test_check_int_rejects_with_one_line_naming_the_limit(value, message):
    with pytest.raises(ValueError) as info:
        check_int("d_model", value)
    assert str(info.value) == message


def test_check_float():
    assert check_float("lr", 3e-4) == 3e-4 and check_float("eps", 0) == 0.0
    for value, message in [(float("nan"), "finite"), (float("inf"), "finite"), (True, "a number"), ("1e-3", "a number"),
                           (0.0, "above 0"), (1e38, r"at most 1e\+06 \(limit 'lr'\)")]:
        with pytest.raises(ValueError, match=message):
            check_float("lr", value)


def test_unknown_limit_names_are_a_programming_error():
    with pytest.raises(KeyError, match="no limit named 'widht'"):
        check_int("widht", 3)


def test_json_depth_is_checked_without_recursion():
    check_json_depth({"a": [[1, 2], {"b": []}]})
    deep = []
    for _ in range(100_000):  # far beyond Python's recursion limit
        deep = [deep]
    with pytest.raises(ValueError, match="nests deeper than 64 levels"):
        check_json_depth(deep, "the value")
    check_json_depth([[[]]] * 3, "x", limits.Limit("depth3", 1, 3, "test"))
    with pytest.raises(ValueError):
        check_json_depth([[[[]]]], "x", limits.Limit("depth3", 1, 3, "test"))


def test_run_count_cap_and_max_runs():
    assert check_run_count(10_000) == 10_000
    with pytest.raises(ValueError, match=r"524,288 runs, more than the cap of 10,000 \(limit 'runs'\); pass --max-runs 524288"):
        check_run_count(2**19)
    assert check_run_count(2**19, max_runs=2**19) == 2**19
    with pytest.raises(ValueError, match="more than --max-runs 50"):
        check_run_count(51, max_runs=50)
    with pytest.raises(ValueError, match="the most any sweep may have is 1,000,000"):
        check_run_count(10**12)
    with pytest.raises(ValueError, match="--max-runs must be at most"):
        check_run_count(5, max_runs=10**9)


def test_every_limit_is_a_sensible_range():
    for name, limit in LIMITS.items():
        assert limit.name == name and limit.low <= limit.high and limit.help


@pytest.mark.parametrize("arch,fields", [
    ("encoder", {"d_model": 128, "n_layers": 2, "n_heads": 2, "max_len": 30}),  # the paper's defaults
    ("encoder", {"d_model": 4, "n_layers": 2, "n_heads": 2, "max_len": 512}),  # the easy tasks up to n = 512
    ("scratchpad", {"d_model": 32, "n_layers": 2, "n_heads": 2, "max_len": 1024}),  # the scratchpad up to n = 1024
    ("encoder", {"d_model": 256, "n_layers": 8, "n_heads": 8, "max_len": 1024}),
    ("formal", {"d_model": 128, "n_layers": 8, "n_heads": 4, "max_len": 1024}),
])
def test_the_papers_sizes_and_more_pass(arch, fields):
    config = sv.models.config_from_dict(arch, fields)
    shape_model(arch, config)  # the parameter count is within the limit too


@pytest.mark.parametrize("config_cls", [sv.EncoderConfig, sv.FormalConfig, sv.ScratchpadConfig])
def test_configs_check_types_and_ranges(config_cls):
    for fields, message in [({"n_heads": 2.0}, "n_heads must be an integer"), ({"n_layers": True}, "n_layers must be an integer"),
                            ({"eps": float("nan")}, "eps must be a finite number"), ({"eps": -1e-5}, "eps must be at least 0"),
                            ({"d_model": 4096}, "limit 'd_model'"), ({"max_len": 10**8}, "limit 'max_len'"),
                            ({"d_ff": 5 * 10**7}, "limit 'd_ff'"), ({"n_layers": 10**6}, "limit 'n_layers'")]:
        with pytest.raises(ValueError, match=message):
            config_cls(**fields)
    assert config_cls(eps=0).eps == 0.0 and isinstance(config_cls(eps=0).eps, float)
