"""The HTML report shows a sweep's own texts (its spec's name, description, scale, experiment) as
text: a hostile spec.json cannot add a tag, a link or an image to the page."""

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sensviz import report  # noqa: E402

HOSTILE = '<img src="http://127.0.0.1:9/x.png"><a href="https://evil.invalid">log in</a><script>alert(1)</script>'


def test_a_hostile_spec_is_text_in_the_report(tmp_path):
    folder = tmp_path / "quick" / "tradeoff"
    shutil.copytree(ROOT / "experiments" / "results" / "quick" / "tradeoff", folder)
    spec = json.loads((folder / "spec.json").read_text())
    spec |= {"name": HOSTILE, "description": HOSTILE, "scale": HOSTILE}
    (folder / "spec.json").write_text(json.dumps(spec))
    page, summary = report.render(folder)
    assert summary["figures"] >= 1
    assert "evil.invalid" in page and "127.0.0.1:9" in page  # shown
    assert '<img src="http://127.0.0.1:9' not in page and '<a href="https://evil' not in page
    assert "<script>alert(1)</script>" not in page
    spec["name"] = 5  # not a string: still text
    (folder / "spec.json").write_text(json.dumps(spec))
    assert "5" in report.render(folder)[0]
