"""The Landscape page's "Apply a function-preserving change" (restored from a link, every measure before and after)
and the About page's table of the sharpness measures with their sources and invariances."""

import pytest
from helpers.app import open_url

from sensviz import symmetry_zoo


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


def test_the_about_page_states_each_measure_with_its_source_and_invariances():
    at = open_url("about")
    table = next(m.value for m in at.markdown if m.value.startswith("| measure (quantity) |"))
    rows = table.splitlines()[2:]
    assert [r.split("`")[1] for r in rows] == [q for q, _, _ in symmetry_zoo.MEASURES.values()]
    cells = [r.replace("\\|", "").strip("|").split("|") for r in rows]  # an escaped | is not a cell's edge
    assert all(len(c) == 4 and all(x.strip() for x in c) for c in cells)  # definition, source and invariances each
