"""The Landscape page's "Apply a function-preserving change": restored from a link, every measure before and after."""

import pytest
from helpers.app import open_url


def test_a_link_applies_a_function_preserving_change_and_the_orbit_measure_stays():
    at = open_url("landscape", model="encoder-parity-n4", change="1", kappa="100", directions="16", inputs="64")
    assert at.toggle(key="sv_w_landscape_change").value is True
    assert at.select_slider(key="sv_w_landscape_kappa").value == 100
    table = next(df.value for df in at.dataframe if "after / before" in df.value.columns).set_index("quantity")
    ratio = table["after / before"]
    assert ratio["orbit_sharpness"] == pytest.approx(1.0, rel=1e-2)
    assert ratio["blowup_mean"] == pytest.approx(1.0, rel=1e-4)
    assert abs(ratio["sharpness"] - 1) > 0.1 and abs(ratio["param_norm"] - 1) > 0.1
    assert any("largest change" in c.value for c in at.caption)
