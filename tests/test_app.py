"""The explorer under Streamlit's AppTest: every page cold and with a model, and its main widgets."""

import io
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import sensviz as sv
from sensviz import sweeps

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
PAGES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "pages").glob("*.py"))
ZOO_FILE = "encoder-majority-n6.safetensors"


def fresh() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    assert not at.exception
    return at


def select_zoo(at: AppTest, file: str = ZOO_FILE) -> AppTest:
    at.switch_page("app.py").run()
    at.selectbox(key="sv_w_zoo_file").select(file).run()
    assert not at.exception
    assert at.session_state["sv_selected"].name == file
    return at


@pytest.mark.parametrize("page", PAGES)
def test_page_opens_cold_and_says_what_to_do(page):
    at = fresh()
    at.switch_page(page).run()
    assert not at.exception, at.exception
    if not any(name in page for name in ("Train", "About", "Experiments")):  # these need no model
        assert any("No model selected" in i.value for i in at.info)


@pytest.mark.parametrize("file", [ZOO_FILE, "formal-parity-n4.safetensors", "scratchpad-parity-n8.safetensors"])
def test_every_page_with_a_pretrained_checkpoint(file):
    at = select_zoo(fresh(), file)
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, (page, at.exception)
    assert at.session_state["sv_selected"].name == file  # the selection survived every page switch


def test_summary_metrics_match_the_core():
    at = select_zoo(fresh())
    metrics = {m.label: m.value for m in at.sidebar.metric}
    ck = sv.load_checkpoint(ROOT / "checkpoints" / ZOO_FILE)
    report = sv.analysis.sensitivity_report(ck.model, 6, ck.task, ck.encoding)
    assert metrics["accuracy"] == f"{report.accuracy:.1%}"
    assert metrics["as_n target"] == f"{report.target.avg_sensitivity:.3f}"
    assert metrics["mean Blowup"] == f"{sv.blowup.blowup_summary(ck.model, 6).mean:.4g}"


def test_attention_page_input_choices():
    at = select_zoo(fresh())
    at.switch_page("pages/2_Attention.py").run()
    at.pills(key="sv_w_att_bits_6").set_value([0, 3]).run()
    assert any("x = 100100" in m.value for m in at.markdown)
    at.segmented_control(key="sv_w_att_how").set_value("Cube index").run()
    at.number_input(key="sv_w_att_vertex_6").set_value(5).run()
    assert any("x = 000101" in m.value for m in at.markdown)
    at.selectbox(key="sv_w_att_flip_6").set_value(2).run()
    at.selectbox(key="sv_w_att_weight_6").set_value(3).run()
    assert not at.exception


def test_sensitivity_page_vertex_and_length():
    at = select_zoo(fresh())
    at.switch_page("pages/3_Sensitivity.py").run()
    at.number_input(key="sv_w_sens_vertex_6").set_value(7).run()
    assert any(m.label == "input x" and m.value == "000111" for m in at.metric)
    n_key = next(w.key for w in at.sidebar.number_input if w.key.startswith("sv_w_n_"))
    at.sidebar.number_input(key=n_key).set_value(4).run()  # analyse at another length
    assert any(m.label == "input x" and len(m.value) == 4 for m in at.metric)
    select_zoo(at, "encoder-first-n16.safetensors").switch_page("pages/3_Sensitivity.py").run()
    assert not at.exception  # above the explorer's exact limit: sampled, and labelled so
    assert any("Estimate" in c.value for c in at.caption)


def test_landscape_page_rho_and_2d_slice():
    at = select_zoo(fresh())
    at.switch_page("pages/5_Landscape.py").run()
    before = next(m.value for m in at.metric if m.label == "L_ρ")
    at.select_slider(key="sv_w_land_rho").set_value(0.1).run()
    after = next(m.value for m in at.metric if m.label == "L_ρ")
    assert before != after
    at.toggle(key="sv_w_land_2d").set_value(True).run()
    assert not at.exception


def test_layernorm_page_zoo_tradeoff():
    at = select_zoo(fresh())
    at.switch_page("pages/4_LayerNorm.py").run()
    at.toggle(key="sv_w_ln_zoo").set_value(True).run()
    assert not at.exception


def test_train_a_tiny_model_then_it_is_selected():
    at = fresh()
    at.switch_page("pages/1_Train.py").run()
    at.selectbox(key="sv_w_train_task").set_value("first")
    at.number_input(key="sv_w_train_n").set_value(4)
    at.number_input(key="sv_w_train_steps").set_value(30)
    at.number_input(key="sv_w_train_every").set_value(10)
    at.select_slider(key="sv_w_train_d").set_value(8)
    at.button(key="FormSubmitter:sv_train_form-Train").click().run()
    assert not at.exception
    assert any("completed after 30 steps" in s.value for s in at.success)
    selected = at.session_state["sv_selected"]
    assert selected.kind == "trained"
    assert at.sidebar.segmented_control(key="sv_source").value == "Trained here"
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, page


def test_bad_training_settings_give_a_message():
    at = fresh()
    at.switch_page("pages/1_Train.py").run()
    at.number_input(key="sv_w_train_lr").set_value(0.0)
    at.button(key="FormSubmitter:sv_train_form-Train").click().run()
    assert not at.exception
    assert any("lr must be" in e.value for e in at.error)
    at.number_input(key="sv_w_train_lr").set_value(0.001)
    at.selectbox(key="sv_w_train_task").set_value("table")
    at.text_input(key="sv_w_train_table").set_value("0110")  # 2**2 entries but n = 8
    at.button(key="FormSubmitter:sv_train_form-Train").click().run()
    assert any("only for n=2" in e.value for e in at.error)


def upload(at: AppTest, name: str, data: bytes) -> AppTest:
    at.switch_page("app.py").run()
    at.sidebar.segmented_control(key="sv_source").set_value("Upload").run()
    at.sidebar.file_uploader[0].upload(name, data, "application/octet-stream").run()
    return at


def test_upload_a_valid_checkpoint():
    model = sv.build_model("formal", d_model=8, n_heads=2, max_len=8, seed=1)
    at = upload(fresh(), "mine.safetensors", sv.checkpoint_bytes(model, task="first", n=5))
    assert not at.exception and not at.error
    assert at.session_state["sv_selected"].kind == "upload"
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, page


def test_upload_a_corrupt_file_shows_the_message_and_keeps_the_app():
    at = select_zoo(fresh())
    at = upload(at, "broken.safetensors", b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    assert not at.exception
    assert any("cannot be used" in e.value and "header" in e.value for e in at.sidebar.error)
    assert at.session_state["sv_selected"].name == ZOO_FILE  # the previous model is still selected
    at.switch_page("pages/3_Sensitivity.py").run()
    assert not at.exception


SHIPPED = sorted(p.parent.name for p in (ROOT / "experiments" / "results" / "quick").glob("*/runs.parquet"))


def test_experiments_page_shows_every_shipped_result():
    assert set(SHIPPED) == {"dynamics", "generalization", "length_scaling", "scratchpad", "tradeoff"}
    at = fresh()
    at.switch_page("pages/6_Experiments.py").run()
    assert not at.exception, at.exception
    # in the order of sensviz.experiments.EXPERIMENTS, length scaling first
    assert at.selectbox(key="sv_w_exp_name").options == [
        "length scaling", "tradeoff", "dynamics", "scratchpad", "generalization"]
    for name in SHIPPED:
        at.selectbox(key="sv_w_exp_name").set_value(name).run()
        assert not at.exception, (name, at.exception)
        titles = [s.value for s in at.subheader]
        assert len(titles) >= 2 and titles[-1] == "Every run"
        assert any("finished runs kept" in c.value or "retrained models kept" in c.value for c in at.caption)
        labels = {b.label for b in at.get("download_button")}
        assert {"Download the runs table (CSV)", "Download the data behind this figure (CSV)"} <= labels


def test_experiments_page_with_a_sweep_folder(tmp_path):
    at = fresh()
    at.switch_page("pages/6_Experiments.py").run()
    at.segmented_control(key="sv_w_exp_source").set_value("A sweep folder").run()
    assert any("Enter the folder" in i.value for i in at.info)
    at.text_input(key="sv_w_exp_folder").set_value(str(tmp_path)).run()
    assert not at.exception and any("not a sweep folder" in e.value for e in at.error)
    at.text_input(key="sv_w_exp_folder").set_value(str(ROOT / "experiments" / "results" / "quick" / "tradeoff")).run()
    assert not at.exception and "Trade-off: parameter norm against LayerNorm blowup" in [s.value for s in at.subheader]


def test_experiments_page_with_a_sweep_whose_runs_all_failed(tmp_path):
    from sweep_jobs import toy_job

    spec = sweeps.SweepSpec("length_scaling", [{"n": 4, "seed": s, "fail": True} for s in (0, 1)], name="broken")
    sweeps.run_sweep(spec, tmp_path, toy_job, log=io.StringIO())
    at = fresh()
    at.switch_page("pages/6_Experiments.py").run()
    at.segmented_control(key="sv_w_exp_source").set_value("A sweep folder").run()
    at.text_input(key="sv_w_exp_folder").set_value(str(tmp_path)).run()
    assert not at.exception and any("no finished runs" in w.value for w in at.warning)
    assert [e.label for e in at.expander] == ["2 failed run(s)"]  # the errors are still shown

