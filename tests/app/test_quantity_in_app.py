"""A quantity registered in the library reaches the app's summary with no other edit."""

import pytest
from helpers.core import TINY, TINY_ZOO, probe_value, sweep  # noqa: F401  (probe: a fixture)


def test_a_registered_quantity_reaches_the_apps_summary(probe):
    from ui import cache
    from ui.model_refs import zoo_ref

    ref = zoo_ref("encoder-first-n4")
    found = cache.summary.__wrapped__(ref, 4)  # not through the shared cache: the probe is this test's
    assert found["probe_value"] == pytest.approx(probe_value(cache.load(ref).model))
