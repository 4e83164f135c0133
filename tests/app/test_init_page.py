"""The Before training page: opens cold, restores its view from the URL, and shows the verdict the core computes."""

from helpers.app import notices, open_url, wait_until

from sensviz.init_claim import decide_init_claim
from sensviz.init_study import init_studies
from sensviz.models import ModelSettings
from server import services
from ui import init_path, nav, registry


def test_the_page_opens_cold_with_its_defaults():
    at = open_url("init")
    assert [t.value for t in at.title] == ["Before training"] and not notices(at)
    assert [m.label for m in at.metric] == ["verdict"]
    assert "init" in [p.key for p in nav.PAGES]


def test_a_link_restores_the_view_and_the_verdict_is_the_cores():
    view = {"arch": "formal", "d": "8", "layers": "1", "length": "5", "inits": "32", "target": "first"}
    at = open_url("init", **view)
    assert not notices(at), notices(at)
    assert dict(at.query_params) == view  # the URL keeps the view (no defaults added)
    assert at.segmented_control(key="sv_w_init_arch").value == "formal"
    assert at.select_slider(key="sv_w_init_length").value == 5
    studies = init_studies(ModelSettings(arch="formal", d_model=8, n_layers=1, n_heads=2), 5, 32, task="first")
    assert at.metric[0].value == decide_init_claim(studies).verdict
    shown = at.dataframe[0].value
    assert shown["init_scale"].tolist() == [0.5, 1.0, 2.0] and shown["n"].tolist() == [5, 5, 5]


def test_a_bad_parameter_is_a_notice():
    at = open_url("init", length="99", inits="7")
    assert len(notices(at)) == 2 and at.select_slider(key="sv_w_init_length").value == 8


def test_where_training_goes_is_a_server_job_the_page_follows():
    view = {"arch": "encoder", "d": "8", "layers": "1", "length": "4", "inits": "32", "target": "parity",
            "path": "1", "steps": "100"}
    at = open_url("init", **view)
    assert not notices(at), notices(at)
    assert at.toggle(key="sv_w_init_path").value is True and at.select_slider(key="sv_w_init_steps").value == 100
    assert "Where training goes" in [h.value for h in at.subheader]
    assert not any("starting band" in c.value for c in at.caption)  # nothing trains inside the page's run
    at.button(key=registry.INIT_TRAIN).click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    job_id = at.query_params["job"]
    assert services.job_manager().request(job_id) == init_path.request("encoder", 8, 1, 4, "parity", 100)
    linked = open_url("init", **view, job=job_id)  # a link made while it runs follows the same job
    assert registry.INIT_TRAIN not in [b.key for b in linked.button]
    wait_until(at, lambda at: not services.job_manager().status(job_id).active and "model" in at.query_params
               and any("starting band" in c.value for c in at.caption), ceiling=180)  # its model kept and selected
    records = services.job_manager().records(job_id)
    assert records[0]["step"] == 0 and records[-1]["step"] == 100 and "scale_free_avg_sensitivity" in records[-1]
    assert any("trained by the server on all 16 strings" in c.value for c in at.caption)
    assert "Download the path (CSV)" in {b.label for b in at.get("download_button")}
    other = open_url("init", **{**view, "steps": "200"})  # another run's settings: not this path, the button again
    assert registry.INIT_TRAIN in [b.key for b in other.button]
    model = at.query_params["model"]  # the link once the run ended names its model, not the job
    assert "job" not in at.query_params and model.startswith("trained:"), dict(at.query_params)
    later = open_url("init", **view, model=model)  # another browser: the path, found through the model's checkpoint
    assert registry.INIT_TRAIN not in [b.key for b in later.button]
    assert any("trained by the server on all 16 strings" in c.value for c in later.caption)
