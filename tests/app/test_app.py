"""The explorer under Streamlit's AppTest: every page of the one page list opened cold and through
its URL (the view restored: model, n and the page's settings), bad parameters, settings across page
switches, the summary against the core, the pages' main widgets, training as a server job,
uploads and kept models."""

import io
import json
import os
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from helpers.app import (  # noqa: I001
    APP,
    PAGE,
    ROOT,
    ZOO,
    AppTest,
    goto,
    notices,
    open_url,
    plain,
    selected,
    train_tiny,
    upload,
    wait_until,
)
from helpers.core import SnapshotAt

import sensviz as sv  # noqa: E402
from sensviz import findings, sweeps  # noqa: E402
from sensviz.files import data_dir  # noqa: E402
from server import services, worker  # noqa: E402
from ui import memo, model_refs, nav, registry, sidebar, train_form  # noqa: E402


@pytest.mark.parametrize("page", [p.key for p in nav.PAGES])
def test_every_page_opens_cold_and_says_what_to_do(page):
    at = open_url(page)  # AppTest runs the page's own file: the router's frame is there only through nav.require_router
    assert [t.value for t in at.title] == [PAGE[page].heading] and len(at.sidebar)
    if PAGE[page].needs_model:
        assert any("No model selected" in i.value for i in at.info)


def test_the_router_lists_every_page_once_with_its_url_path():
    assert nav.PAGES[0].url_path == "" and nav.PAGES[0].file == "pages/home.py"
    assert all(p.file == f"pages/{p.url_path}.py" for p in nav.PAGES[1:])
    assert len({p.url_path for p in nav.PAGES}) == len(nav.PAGES) and {p.section for p in nav.PAGES} <= set(nav.SECTIONS)
    assert sorted(p.file for p in nav.PAGES) == sorted(f"pages/{path.name}" for path in (ROOT / "pages").glob("*.py"))


@pytest.mark.parametrize("file", [ZOO, "formal-parity-n4", "scratchpad-parity-n8"])
def test_every_page_with_a_pretrained_checkpoint(file):
    at = open_url("home", model=file)
    for page in PAGE:
        goto(at, page)
        assert at.query_params["model"].startswith(f"{file}~")  # carried across every page switch
    assert selected(at).key == file


# ----------------------------------------------------------------------------- views restored from their URL

VIEWS = {
    "attention": ({"x": "10010", "flip": "2", "weight": "3"},
                  lambda at: any("x = 10010" in m.value for m in at.markdown)
                  and at.selectbox(key="sv_w_attention_flip_5").value == 2
                  and at.selectbox(key="sv_w_attention_weight_5").value == 3),
    "sensitivity": ({"colour": "target", "vertex": "7"},
                    lambda at: at.segmented_control(key="sv_w_sensitivity_colour").value == "target"
                    and any(m.label == "input x" and m.value == "00111" for m in at.metric)),
    "layernorm": ({"x": "01100"}, lambda at: any("x = 01100" in m.value for m in at.markdown)),
    "landscape": ({"rho": "0.01", "directions": "16", "inputs": "64", "curve": "1"},
                  lambda at: any(m.label.startswith("L_ρ at ρ = 0.01") for m in at.metric)
                  and at.toggle(key="sv_w_landscape_curve").value is True
                  and at.select_slider(key="sv_w_landscape_directions").value == 16
                  and any("standard errors" in c.value and "exact dashed line" in c.value for c in at.caption)),
    "experiments": ({"experiment": "tradeoff"},
                    lambda at: at.selectbox(key="sv_w_experiments_experiment_standard").value == "tradeoff"
                    and "Trade-off: parameter norm against LayerNorm blowup" in [s.value for s in at.subheader]),
}


@pytest.mark.parametrize("page", [p.key for p in nav.PAGES])
def test_every_page_restores_its_view_from_the_url(page):
    own, check = VIEWS.get(page, ({}, lambda at: True))
    at = open_url(page, model=ZOO, n=5, **own)
    assert not notices(at), notices(at)
    assert selected(at).key == ZOO
    assert next(w for w in at.sidebar.number_input if w.key.startswith("sv_w_n_")).value == 5
    assert check(at), page
    assert at.query_params["n"] == "5"
    kept = {k: v for k, v in at.query_params.items() if k not in ("model", "n")}
    assert kept == own  # the URL keeps the view in step (defaults are left out)


def test_a_link_copied_from_a_view_restores_it():
    at = open_url("sensitivity", model=ZOO)
    at.segmented_control(key="sv_w_sensitivity_colour").set_value("difference").run()
    at.number_input(key="sv_w_sensitivity_vertex_6").set_value(9).run()
    link = dict(at.query_params)
    assert link["colour"] == "difference" and link["vertex"] == "9" and link["model"].startswith(ZOO)
    again = open_url("sensitivity", **link)
    assert again.segmented_control(key="sv_w_sensitivity_colour").value == "difference"
    assert any(m.label == "input x" and m.value == "001001" for m in again.metric)


BAD = [
    ("sensitivity", {"model": "no-such-model"}, "no pretrained checkpoint 'no-such-model'"),
    ("sensitivity", {"model": "../../etc/passwd"}, "is not a checkpoint name"),
    ("sensitivity", {"model": "trained:AAAAAAAAAAAAAAAAAAAA"}, "no kept model"),
    ("sensitivity", {"model": "elsewhere:abc"}, "not a kind of model"),
    ("sensitivity", {"model": ZOO, "n": "99"}, "reads lengths 1..6"),
    ("sensitivity", {"model": ZOO, "n": "six"}, "n=six was not used: the model reads lengths 1..6. Showing n=6."),
    ("sensitivity", {"model": ZOO, "colour": "purple"}, "colour is one of model, target, difference, output"),
    ("sensitivity", {"model": ZOO, "vertex": "64"}, "vertex is in 0..63"),
    ("attention", {"model": ZOO, "x": "10"}, "x is a string of 6 bits"),
    ("landscape", {"model": ZOO, "rho": "-1"}, "rho is in 0.0001..100"),
    ("landscape", {"model": ZOO, "curve": "maybe"}, "curve is 1 or 0"),
    ("experiments", {"experiment": "astrology"}, "experiment is one of"),
    ("about", {"colour": "target"}, "colour is not a setting of this page"),
    ("home", {"job": "nosuchjob00000000"}, "names no training run"),
]


@pytest.mark.parametrize("page, params, message", BAD, ids=[f"{p}-{'-'.join(v)}" for p, v, _ in BAD])
def test_a_bad_parameter_gives_a_notice_and_a_default(page, params, message):
    at = open_url(page, **params)
    assert any(message in text for text in notices(at)), notices(at)
    assert len(notices(at)) == 1


def test_a_stale_zoo_link_says_the_checkpoint_was_rebuilt(tmp_path, monkeypatch):
    shutil.copy(ROOT / "checkpoints" / f"{ZOO}.safetensors", tmp_path)
    monkeypatch.setenv("SENSVIZ_CHECKPOINT_DIR", str(tmp_path))
    at = open_url("sensitivity", model=f"{ZOO}~0123456789ab")
    assert any("was rebuilt since this link was made" in text for text in notices(at))
    assert selected(at).key == ZOO  # the current checkpoint is shown
    assert at.query_params["model"] == f"{ZOO}~{model_refs.digest((tmp_path / f'{ZOO}.safetensors').read_bytes())[:12]}"


def test_settings_and_the_form_survive_page_switches():
    at = open_url("sensitivity", model=ZOO, colour="target")
    goto(at, "attention")
    assert "colour" not in at.query_params  # each page's own settings in its URL
    goto(at, "sensitivity")
    assert at.segmented_control(key="sv_w_sensitivity_colour").value == "target"
    assert at.query_params["colour"] == "target"
    goto(at, "train")
    at.number_input(key="sv_w_train_n").set_value(5)
    at.number_input(key="sv_w_train_steps").set_value(77).run()
    goto(at, "about")
    goto(at, "train")
    assert at.number_input(key="sv_w_train_n").value == 5 and at.number_input(key="sv_w_train_steps").value == 77
    at.sidebar.multiselect(key=registry.ZOO_TASKS).set_value(["parity"]).run()
    goto(at, "layernorm")
    assert at.sidebar.multiselect(key=registry.ZOO_TASKS).value == ["parity"]


# ----------------------------------------------------------------------------- the pages' content


def test_summary_metrics_match_the_core():
    at = open_url("home", model=ZOO)
    metrics = {m.label: m.value for m in at.sidebar.metric}
    ck = sv.load_checkpoint(ROOT / "checkpoints" / f"{ZOO}.safetensors")
    report = sv.analysis.sensitivity_report(ck.model, 6, ck.task, ck.encoding)
    assert metrics["accuracy"] == f"{report.accuracy:.1%}"
    assert metrics["as_n target"] == f"{report.target.avg_sensitivity:.3f}"
    assert metrics["mean Blowup"] == f"{sv.blowup.blowup_summary(ck.model, 6).mean:.4g}"
    assert metrics["param_norm"] == f"{ck.model.param_norm():.4g}"  # four digits, as the others: 16.98, not 17


def test_attention_page_input_choices():
    at = open_url("attention", model=ZOO)
    at.pills(key="sv_w_attention_input_bits_6").set_value([0, 3]).run()
    assert any("x = 100100" in m.value for m in at.markdown) and at.query_params["x"] == "100100"
    at.segmented_control(key="sv_w_attention_input_how").set_value("Cube index").run()
    assert at.number_input(key="sv_w_attention_input_vertex_6").value == 36  # the same input, by its index
    at.number_input(key="sv_w_attention_input_vertex_6").set_value(5).run()
    assert any("x = 000101" in m.value for m in at.markdown)
    at.selectbox(key="sv_w_attention_flip_6").set_value(2).run()
    at.selectbox(key="sv_w_attention_weight_6").set_value(3).run()
    assert not at.exception and at.query_params["flip"] == "2"


def test_sensitivity_page_vertex_and_length():
    at = open_url("sensitivity", model=ZOO)
    at.number_input(key="sv_w_sensitivity_vertex_6").set_value(7).run()
    assert any(m.label == "input x" and m.value == "000111" for m in at.metric)
    n_key = next(w.key for w in at.sidebar.number_input if w.key.startswith("sv_w_n_"))
    at.sidebar.number_input(key=n_key).set_value(4).run()  # analyse at another length
    assert any(m.label == "input x" and len(m.value) == 4 for m in at.metric) and at.query_params["n"] == "4"
    at = open_url("sensitivity", model="encoder-first-n16")
    assert any("Estimate" in c.value for c in at.caption)  # above the explorer's exact limit: sampled, and labelled so


def new_computations(before: dict) -> set[str]:
    """What the page computed (not the server's warm-up, which draws the Lab's chapters in the background)."""
    return {name for name, count in memo.stats().items() if count > before.get(name, 0) and not name.startswith("_lab")}


def test_landscape_shows_the_paper_radius_first_and_the_rest_on_demand():
    before = memo.stats()
    at = open_url("landscape", model="encoder-parity-n4")
    ck = sv.load_checkpoint(ROOT / "checkpoints" / "encoder-parity-n4.safetensors")
    rho = 0.02 * ck.model.n_params() ** 0.5
    label = next(m.label for m in at.metric if m.label.startswith("L_ρ"))
    assert label == f"L_ρ at ρ = {rho:.4g}"
    assert any("ρ = 0.02·√P is the paper's radius" in c.value for c in at.caption)
    value = next(m.value for m in at.metric if m.label.startswith("L_ρ"))
    bits = sv.cube.vertices(4)
    assert value == f"{sv.sharpness.sharpness(ck.model, bits, rho, 64, 0).value:.4g}"  # the core's number
    assert "small-ρ limit × ρ²" in [m.label for m in at.metric]
    # summary: sensviz.measure; the checkpoint folder's listing and the file's digest are read once per file
    # version, by whichever test opens them first
    assert new_computations(before) - {"_zoo_entries", "_file_digest"} == {"model_facts", "task_defined", "summary", "sharpness"}
    for flag in ("curve", "proxy", "slice", "hessian", "line"):
        at.toggle(key=f"sv_w_landscape_{flag}").set_value(True).run()
        assert not at.exception, flag
    shown = {m.label: m.value for m in at.metric}
    proxy = sv.sharpness.sharpness_proxy(ck.model, bits, sv.losses.targets(ck.task, bits, ck.encoding),
                                         sv.losses.loss_for(ck.encoding), eps=0.02, n_draws=32, seed=0)
    assert shown["E[L(θ+Δ) − L(θ)]"] == f"{proxy.value:.4g}"  # the core's number, on the page's inputs and seed
    assert shown["on the ±1 scale (×4)"] == f"{4 * proxy.value:.4g}"  # trained on 0/1 targets
    at.toggle(key="sv_w_landscape_plane").set_value(True).run()
    at.selectbox(key="sv_w_landscape_compare").set_value(
        next(o for o in at.selectbox(key="sv_w_landscape_compare").options if "first" in o)).run()
    assert not at.exception
    assert at.query_params["compare"].startswith("encoder-first-n4~")  # the second model is a public parameter
    assert {"sharpness_curve", "proxy", "loss_slice", "hessian_top", "line_between", "contours"} <= new_computations(before)


def test_layernorm_page_zoo_tradeoff():
    at = open_url("layernorm", model=ZOO, tradeoff=1)
    assert not at.exception and at.toggle(key="sv_w_layernorm_tradeoff").value is True


# ----------------------------------------------------------------------------- training as a server job


def test_train_a_tiny_model_it_is_selected_kept_and_linkable():
    at = train_tiny(open_url("home"))
    assert "job" in at.query_params  # a reload reattaches to the run
    wait_until(at, lambda at: selected(at) is not None and selected(at).kind == "trained")
    assert any("completed every step after 40 steps" in s.value for s in at.sidebar.success)
    assert any("completed every step after 40 steps" in s.value for s in at.success)  # the same message on the page
    assert at.sidebar.segmented_control(key=registry.SOURCE).value == "My models"
    link = dict(at.query_params)
    assert link["model"] == f"trained:{selected(at).key}" and "job" not in link
    for page in PAGE:
        goto(at, page)
    again = open_url("sensitivity", **link)  # a reload, or a colleague opening the link
    assert selected(again).key == link["model"].split(":")[1]
    assert any(m.label == "as_n model" for m in again.sidebar.metric)
    reloaded = open_url("train", **link)  # the Train page reloaded after the run: its outcome and its curves again
    assert any("completed every step after 40 steps" in s.value for s in reloaded.success)
    assert reloaded.get("arrow_vega_lite_chart") or reloaded.get("vega_lite_chart"), "no training curves"


def test_one_job_per_user_and_stop_keeps_the_last_measurement():
    at = open_url("train")
    at.number_input(key="sv_w_train_steps").set_value(20_000)  # runs long enough to be stopped, far under the budget
    at.number_input(key="sv_w_train_measure_every").set_value(20)
    at.number_input(key="sv_w_train_d_model").set_value(8)
    at.checkbox(key="sv_w_train_early_stop").uncheck()
    at.button(key=registry.TRAIN_BUTTON).click().run()
    job = services.job_manager().status(at.query_params["job"])
    wait_until(at, lambda at: len(services.job_manager().records(job.id)) >= 2)
    at.button(key=registry.TRAIN_BUTTON).click().run()
    assert any("already have a training run running" in e.value for e in at.error)
    goto(at, "sensitivity")  # the run goes on while the user looks elsewhere
    assert services.job_manager().status(job.id).state == "running"
    at.sidebar.button(key=registry.JOB_STOP).click().run()
    wait_until(at, lambda at: selected(at) is not None and selected(at).kind == "trained")
    stopped = services.job_manager().status(job.id)
    assert stopped.state == "stopped" and "weights of the last measurement" in stopped.reason
    assert any("weights of the last measurement" in w.value for w in at.sidebar.warning)
    kept = sv.load_checkpoint(services.kept_store().data(selected(at).key))
    assert kept.metadata["training"]["steps"] == stopped.steps


def test_an_owner_back_after_their_run_ended_is_told_once():
    """A student who closed the browser during a run (or whose server restarted) comes back: their next
    session selects the run's model and says how it ended, once; a link naming another model comes first."""
    owner, job_id = "owner-away-from-their-run", "awayrun000000000"
    model = sv.build_model("encoder", d_model=8, n_layers=1, n_heads=2, max_len=24, seed=0)
    kept = services.kept_store().keep("trained", "first n=4", sv.checkpoint_bytes(model, task="first", n=4), owner)
    folder = data_dir() / "jobs" / job_id
    folder.mkdir(parents=True)
    (folder / "state.json").write_text(json.dumps({"id": job_id, "owner": owner, "name": "first n=4",
                                                   "state": "finished", "created": 1.0, "reason": "completed",
                                                   "kept": kept.token, "steps": 40, "seconds": 2.0,
                                                   "seen": False}))

    def session(**params) -> AppTest:
        at = AppTest.from_file(APP, default_timeout=300)
        at.session_state[registry.OWNER] = owner  # the browser's cookie
        at.query_params.update(params)
        at.switch_page(PAGE["sensitivity"].file)
        at.run()
        assert not at.exception, at.exception
        return at

    def told(at: AppTest) -> bool:
        return any("completed every step after 40 steps" in s.value for s in at.sidebar.success)

    linked = session(model=ZOO)
    assert not told(linked) and selected(linked).kind == "zoo"
    back = session()
    assert told(back) and selected(back).key == kept.token
    goto(back, "attention")  # said with its model on every page of that session
    assert told(back)
    assert not told(session()) and selected(session()) is None  # the next session: said already


def test_bad_training_settings_give_a_message():
    at = open_url("train")
    at.selectbox(key="sv_w_train_task").set_value("table").run()
    at.text_input(key="sv_w_train_task_table_bits").set_value("0110")  # 2**2 entries but n = 8
    at.button(key=registry.TRAIN_BUTTON).click().run()
    assert not at.exception and any("only for n=2" in plain(e.value) for e in at.error)


def test_a_preset_fills_the_form_over_the_defaults():
    at = open_url("train")
    at.selectbox(key=registry.TRAIN_PRESET).select("few examples: a random function from 64 of 256 inputs").run()
    assert at.number_input(key="sv_w_train_train_size").value == 64
    parity = "PARITY, n = 8 (converges in seconds)"
    at.selectbox(key=registry.TRAIN_PRESET).select(parity).run()
    assert at.number_input(key="sv_w_train_lr").value == pytest.approx(train_form.PRESETS[parity]["lr"])
    assert at.checkbox(key="sv_w_train_full_batch").value is True
    assert at.number_input(key="sv_w_train_train_size").value is None  # the earlier preset's restricted set is gone
    assert at.checkbox(key="sv_w_train_early_stop").value is True
    assert at.number_input(key="sv_w_train_target_loss").value == pytest.approx(1e-3)
    at.selectbox(key=registry.TRAIN_PRESET).select("PARITY, n = 12 (slow: minutes)").run()
    assert at.checkbox(key="sv_w_train_full_batch").value is False
    assert at.selectbox(key=registry.TRAIN_PRESET).value == "PARITY, n = 12 (slow: minutes)"  # the form holds it
    at.number_input(key="sv_w_train_n").set_value(10).run()
    assert at.selectbox(key=registry.TRAIN_PRESET).value is None  # edited: the label no longer names what Train runs
    at.selectbox(key=registry.TRAIN_PRESET).select("FIRST, n = 8").run()
    at.number_input(key="sv_w_train_weight_decay").set_value(0.5).run()  # a field the preset leaves at the default
    assert at.selectbox(key=registry.TRAIN_PRESET).value is None


# ----------------------------------------------------------------------------- uploads and kept models


def test_upload_a_valid_checkpoint_then_share_and_delete_it():
    model = sv.build_model("formal", d_model=8, n_heads=2, max_len=8, seed=1)
    at = upload(open_url("home"), "mine.safetensors", sv.checkpoint_bytes(model, task="first", n=5))
    assert not at.error and selected(at).kind == "upload" and selected(at).name == "mine.safetensors"
    link = dict(at.query_params)
    for page in PAGE:
        goto(at, page)
    other = open_url("home", **link)  # another user opens the link: shared on purpose, not one of theirs
    assert selected(other).key == selected(at).key
    assert services.kept_store().info(selected(at).key).owner == at.session_state[registry.OWNER]
    assert other.session_state[registry.OWNER] != at.session_state[registry.OWNER]
    other.sidebar.segmented_control(key=registry.SOURCE).set_value("My models").run()
    assert "shared with you" in other.sidebar.selectbox(key=registry.MINE).format_func(
        other.sidebar.selectbox(key=registry.MINE).value)
    assert not any(b.key == registry.DELETE for b in other.sidebar.button)  # only the owner may delete
    at.sidebar.segmented_control(key=registry.SOURCE).set_value("My models").run()
    at.sidebar.button(key=registry.DELETE).click().run()
    assert selected(at) is None and services.kept_store().info(link["model"].split(":")[1]) is None
    gone = open_url("home", **link)
    assert any("no kept model" in text for text in notices(gone))


def test_a_corrupt_upload_names_the_file_keeps_the_model_and_is_not_loaded_twice(monkeypatch):
    at = open_url("sensitivity", model=ZOO)
    calls = []
    original = sv.load_checkpoint
    monkeypatch.setattr(sv, "load_checkpoint", lambda *a, **k: calls.append(1) or original(*a, **k))
    at = upload(at, "broken.safetensors", b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    errors = [plain(e.value) for e in at.sidebar.error]
    assert any("broken.safetensors" in e and "header" in e for e in errors), errors
    assert any(f"Still showing **{ZOO}**" in plain(c.value) for c in at.sidebar.caption)
    assert selected(at).key == ZOO  # the previous model is still selected
    first = len(calls)
    at.run()
    goto(at, "attention")
    assert len(calls) == first  # the failure is remembered per file content


def test_an_upload_over_the_owners_share_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(services.kept_store(), "quota", 1000)
    model = sv.build_model("formal", d_model=8, n_heads=2, max_len=8, seed=2)
    at = upload(open_url("home"), "big.safetensors", sv.checkpoint_bytes(model, task="first", n=5))
    errors = [e.value for e in at.sidebar.error]
    assert len(errors) == 1 and "\n" not in errors[0], errors
    assert errors[0].startswith("This file was not kept: big\\.safetensors") and "more than one user may keep" in errors[0]
    assert selected(at) is None


def test_a_kept_file_replaced_by_a_directory_is_unreadable_and_the_store_serves_on():
    store = services.kept_store()
    model = sv.build_model("formal", d_model=8, n_heads=2, max_len=8, seed=3)
    at = upload(open_url("home"), "fine.safetensors", sv.checkpoint_bytes(model, task="first", n=5))
    link = dict(at.query_params)
    path = store.root / f"{store.info(selected(at).key).file}.safetensors"
    path.unlink()
    path.mkdir()
    other = open_url("home", **link)
    assert any("kept model unreadable" in text for text in notices(other)), notices(other)
    model = sv.build_model("formal", d_model=8, n_heads=2, max_len=8, seed=4)
    other = upload(other, "next.safetensors", sv.checkpoint_bytes(model, task="first", n=5))
    assert not other.sidebar.error and selected(other).name == "next.safetensors"


# ----------------------------------------------------------------------------- Experiments

SHIPPED = sorted(p.parent.name for p in (ROOT / "experiments" / "results" / "quick").glob("*/runs.parquet"))


def test_experiments_page_shows_every_shipped_result():
    assert set(SHIPPED) == {"dynamics", "generalization", "length_scaling", "scratchpad", "tradeoff"}
    at = open_url("experiments")
    # it opens on the largest scale and offers every shipped one, the pre-registered design among them
    assert at.selectbox(key="sv_w_experiments_scale").options == ["quick", "standard", findings.DECIDE]
    assert at.selectbox(key="sv_w_experiments_scale").value == "standard"
    # the one table the page computed on its first view, read back as every later view reads it
    line, every = findings.stored(ROOT / "experiments" / "results", Path(os.environ["SENSVIZ_DATA_DIR"]) / "findings")
    # in the order of sensviz.experiments.EXPERIMENTS, length scaling first
    assert at.selectbox(key="sv_w_experiments_experiment_standard").options == [
        "length scaling", "tradeoff", "dynamics", "scratchpad", "generalization"]
    for name in SHIPPED:
        at.selectbox(key="sv_w_experiments_experiment_standard").set_value(name).run()
        assert not at.exception, (name, at.exception)
        assert at.query_params.get("experiment", "length_scaling") == name
        titles = [s.value for s in at.subheader]
        assert len(titles) >= 2 and titles[-1] == "Every run"
        assert any("finished runs kept" in c.value or "retrained models kept" in c.value for c in at.caption)
        assert line in [m.value for m in at.markdown]  # the bottom line: the range of scales, then the one tally
        shown = at.dataframe[0].value  # the experiment's claims in the one table
        expected = every[every["experiment"] == name].drop(columns="experiment").reset_index(drop=True)
        pd.testing.assert_frame_equal(shown.reset_index(drop=True), expected)
        labels = {b.label for b in at.get("download_button")}
        assert {"Download the runs table (CSV)", "Download the data behind this figure (CSV)"} <= labels
    # the pre-registered sweep's folder: the same one verdict per claim, L1 standing on its design
    at.selectbox(key="sv_w_experiments_scale").set_value(findings.DECIDE).run()
    assert not at.exception
    assert at.selectbox(key="sv_w_experiments_experiment_decide").options == ["length scaling", "dynamics"]
    shown = at.dataframe[0].value.set_index("#")
    assert shown.loc["L1", "verdict"] == "reproduced" and shown.loc["L1", "stands on"] == findings.DECIDE


def test_experiments_page_with_a_sweep_folder(tmp_path):
    at = open_url("experiments")
    at.segmented_control(key=registry.EXP_SOURCE).set_value("A sweep folder").run()
    assert any("Enter the folder" in i.value for i in at.info)
    at.text_input(key=registry.EXP_FOLDER).set_value(str(tmp_path)).run()
    assert not at.exception and any("not a sweep folder under this server's results folders" in e.value for e in at.error)
    at.text_input(key=registry.EXP_FOLDER).set_value(str(ROOT / "experiments" / "results" / "quick" / "tradeoff")).run()
    assert not at.exception and "Trade-off: parameter norm against LayerNorm blowup" in [s.value for s in at.subheader]


def test_a_figures_note_shows_a_sweep_tables_values_as_text(tmp_path, monkeypatch):
    """A figure's note names the dropped runs by their values (their task): a task in a sweep folder's table is
    shown as typed, never as a link."""
    import shutil

    import pandas as pd

    monkeypatch.setenv("SENSVIZ_RESULTS_DIRS", os.pathsep.join([str(ROOT / "experiments" / "results"), str(tmp_path)]))
    folder = tmp_path / "crafted"
    shutil.copytree(ROOT / "experiments" / "results" / "quick" / "length_scaling", folder)
    runs = pd.read_parquet(folder / "runs.parquet")
    runs.loc[0, ["task", "converged"]] = ["[log in](https://evil.invalid)", False]
    runs.to_parquet(folder / "runs.parquet")
    at = open_url("experiments")
    at.segmented_control(key=registry.EXP_SOURCE).set_value("A sweep folder").run()
    at.text_input(key=registry.EXP_FOLDER).set_value(str(folder)).run()
    notes = [c.value for c in at.caption if "evil" in c.value]  # the markdown the page sends
    assert not at.exception and notes, [c.value for c in at.caption]
    assert all("[log in](" not in note and "log in" in note for note in notes), notes


def test_experiments_page_with_a_sweep_whose_runs_all_failed(tmp_path, monkeypatch):
    from sweep_jobs import toy_job

    monkeypatch.setenv("SENSVIZ_RESULTS_DIRS", os.pathsep.join([str(ROOT / "experiments" / "results"), str(tmp_path)]))

    spec = sweeps.SweepSpec("length_scaling", [{"n": 4, "seed": s, "fail": True} for s in (0, 1)], name="broken")
    sweeps.run_sweep(spec, tmp_path, toy_job, log=io.StringIO())
    at = open_url("experiments")
    at.segmented_control(key=registry.EXP_SOURCE).set_value("A sweep folder").run()
    at.text_input(key=registry.EXP_FOLDER).set_value(str(tmp_path)).run()
    assert not at.exception and any("no finished runs" in w.value for w in at.warning)
    assert [e.label for e in at.expander] == ["2 failed run(s)"]  # the errors are still shown


def test_the_train_form_follows_the_task_registry_and_the_settings():
    """A task defined in a test file, and every field of ModelSettings and TrainConfig, appear in the
    form without touching it."""
    from helpers.core import Threshold

    from sensviz.configs import field_names
    from sensviz.models import ModelSettings
    from sensviz.training import TrainConfig

    sv.tasks.register(Threshold)
    try:
        at = open_url("train")
        assert "threshold_test" in at.selectbox(key="sv_w_train_task").options
        at.selectbox(key="sv_w_train_task").set_value("threshold_test").run()
        assert at.number_input(key="sv_w_train_task_threshold_test_level").value == 0.5
        assert at.text_input(key="sv_w_train_task_threshold_test_note").value == "x"
        keys = {w.key for w in at.main.get("number_input")} | {w.key for w in at.main.get("selectbox")} | {
            w.key for w in at.main.get("checkbox")} | {w.key for w in at.main.get("text_input")}
        fields = set(field_names(ModelSettings)) | set(field_names(TrainConfig)) - train_form.SERVER_SIDE
        assert {f"sv_w_train_{name}" for name in fields} <= keys
    finally:
        del sv.tasks.TASKS[Threshold.name]


def test_page_scripts_hold_no_bare_strings_streamlit_would_draw():
    import ast

    for path in (ROOT / "pages").glob("*.py"):
        body = ast.parse(path.read_text()).body[1:]  # after the module docstring
        bare = [node.lineno for node in body if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)]
        assert bare == [], (path.name, bare)


def diverged_checkpoint() -> bytes:
    """A model whose run diverged (lr 1e5): the trainer keeps its last finite weights, which are enormous."""
    from sensviz.training import TrainConfig, train

    model = sv.build_model("encoder", d_model=8, n_layers=1, n_heads=2, max_len=5, seed=0)
    result = train(model, "parity", TrainConfig(n=5, batch_size=32, steps=50, lr=1e5, eval_interval=5))
    assert result.stop_reason.startswith("diverged")
    return sv.checkpoint_bytes(model, task="parity", n=5)


def test_a_diverged_model_goes_through_every_page():
    at = upload(open_url("home"), "diverged.safetensors", diverged_checkpoint())
    if selected(at) is None:  # refused at the door (its outputs overflow): one line naming the file
        assert any("diverged.safetensors" in e.value for e in at.sidebar.error)
        return
    for page in PAGE:
        goto(at, page)
        assert not at.exception, page
    for flag in ("curve", "slice", "hessian"):
        goto(at, "landscape")
        at.toggle(key=f"sv_w_landscape_{flag}").set_value(True).run()
        assert not at.exception, flag


def test_an_unexpected_error_of_a_page_is_one_line():
    def script():
        import streamlit as st

        from ui import router

        with router.routing():
            st.write("before")
            raise RuntimeError("broken at /srv/secret/place.py\nsecond line")

    at = AppTest.from_function(script)
    at.run()
    assert not at.exception
    assert [e.value for e in at.error] and "RuntimeError: broken at <path>." in plain(at.error[0].value)
    assert "secret" not in at.error[0].value and "second line" not in at.error[0].value


# ----------------------------------------------------------------------------- hostile values: text, one line

HOSTILE = "[Log in again](https://evil.invalid/login)![x](http://127.0.0.1:9/x.png)<img src=x>www.evil.invalid"
HOSTILE_LINKS = [("sensitivity", {"model": HOSTILE}), ("sensitivity", {"model": ZOO, "compare": HOSTILE}),
                 ("home", {"job": HOSTILE}), ("sensitivity", {"model": ZOO, "colour": HOSTILE}),
                 ("sensitivity", {"model": ZOO, "n": HOSTILE}), ("home", {"n": HOSTILE}),
                 ("experiments", {"experiment": HOSTILE}), ("lab", {"chapter": HOSTILE}), ("about", {HOSTILE: "1"})]


def escaped_everywhere(at: AppTest) -> list[str]:
    """Every markdown string of the page that quotes the hostile value and would form a link, an image,
    a tag or a bare link with it."""
    texts = [e.value for kind in ("warning", "error", "info", "caption", "markdown", "subheader", "success")
             for e in at.get(kind)]
    return [t for t in texts if "evil.invalid" in plain(t)
            and re.search(r"(?<!\\)\]\(|(?<!\\)<img|https?://|www\.", t, flags=re.IGNORECASE)]


@pytest.mark.parametrize("page, params", HOSTILE_LINKS, ids=[f"{p}-{'-'.join(v)[:12]}" for p, v in HOSTILE_LINKS])
def test_a_hostile_link_value_is_quoted_as_text_in_one_notice(page, params):
    at = open_url(page, **params)
    assert len(notices(at)) == 1, notices(at)
    assert "[Log in again](https://evil.invalid" in notices(at)[0]  # shown as typed
    assert escaped_everywhere(at) == []


LONG = [("sensitivity", {"model": ZOO, "n": "²"}, "n=² was not used"),
        ("sensitivity", {"model": ZOO, "n": "9" * 5000}, "was not used"),
        ("sensitivity", {"model": ZOO, "n": "1" * 100_000}, "longer than 1,000 characters"),
        ("sensitivity", {"model": "m" * 100_000}, "longer than 1,000 characters"),
        ("sensitivity", {"model": "trained:" + "t" * 900}, "no kept model"),
        ("sensitivity", {"model": ZOO, "compare": "c" * 100_000}, "longer than 1,000 characters"),
        ("home", {"job": "j" * 100_000}, "longer than 1,000 characters"),
        ("sensitivity", {"model": ZOO, "colour": "c" * 100_000}, "longer than 1,000 characters"),
        ("sensitivity", {"model": ZOO, "vertex": "9" * 999}, "vertex is"),
        ("landscape", {"model": ZOO, "rho": "1" * 999}, "rho is in"),
        ("experiments", {"experiment": "e" * 999}, "experiment is one of"),
        ("lab", {"chapter": "9" * 999}, "chapter is one of"),
        ("about", {"p" * 100_000: "1"}, "longer than 1,000 characters"),
        ("about", {f"p{i}": "1" for i in range(500)}, "and 497 more are not a setting of this page")]


@pytest.mark.parametrize("page, params, message", LONG, ids=[f"{p}-{len(str(v))}" for p, v, _ in LONG])
def test_a_bad_or_huge_value_is_one_short_line(page, params, message):
    at = open_url(page, **params)
    assert len(notices(at)) == 1 and message in notices(at)[0], notices(at)
    assert len(notices(at)[0]) < 400 and "\n" not in notices(at)[0]


def test_a_hostile_file_name_is_text_and_a_huge_one_is_cut():
    model = sv.build_model("formal", d_model=8, n_heads=2, max_len=8, seed=1)
    data = sv.checkpoint_bytes(model, task="first", n=5)
    at = upload(open_url("sensitivity"), HOSTILE + ".safetensors", data)
    assert selected(at).name == HOSTILE + ".safetensors"
    assert plain(at.sidebar.subheader[0].value) == f"{HOSTILE}.safetensors (upload)"
    assert escaped_everywhere(at) == []
    for page in ("attention", "layernorm", "landscape", "home"):
        goto(at, page)
        assert escaped_everywhere(at) == [], page
    huge = upload(open_url("home"), "n" * 10_000 + ".safetensors", data)
    assert len(selected(huge).name) == sidebar.NAME_CHARS and selected(huge).name.endswith("…")
    broken = upload(open_url("home"), "b" * 10_000 + ".safetensors", b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    errors = [plain(e.value) for e in broken.sidebar.error]
    assert len(errors) == 1 and len(errors[0]) < 400 and "cannot be used" in errors[0]


@pytest.mark.parametrize("typed", ["/etc", "../../..", "/proc/self/cwd/pages", "~", "a" * 100_000])
def test_the_experiments_page_refuses_a_folder_outside_its_roots_in_one_line(typed):
    at = open_url("experiments")
    at.segmented_control(key=registry.EXP_SOURCE).set_value("A sweep folder").run()
    at.text_input(key=registry.EXP_FOLDER).set_value(typed).run()
    assert not at.exception
    assert [e.value for e in at.error] == [services.NOT_A_RESULTS_FOLDER]
    shown = " ".join(e.value for kind in ("error", "info", "caption", "markdown", "text_input") for e in at.get(kind)
                     if isinstance(e.value, str))
    assert str(ROOT) not in shown and str(services.results_dir()) not in shown


def test_two_kept_models_of_one_name_are_two_choices():
    """A stopped run and its re-run share a name: My models lists each with the time it was kept, and picking either
    selects that one (Streamlit tells a browser's pick by its label: of two equal labels, both picks gave one model)."""
    from streamlit.testing.v1 import AppTest

    owner = "owner-with-a-rerun"
    model = sv.build_model("encoder", d_model=8, n_layers=1, n_heads=2, max_len=24, seed=0)
    store = services.kept_store()
    first = store.keep("trained", "parity n=4 again", sv.checkpoint_bytes(model, task="parity", n=4), owner)
    other = sv.build_model("encoder", d_model=8, n_layers=1, n_heads=2, max_len=24, seed=1)
    second = store.keep("trained", "parity n=4 again", sv.checkpoint_bytes(other, task="parity", n=4), owner)
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state[registry.OWNER] = owner
    at.switch_page(PAGE["sensitivity"].file)
    at.run()
    at.sidebar.segmented_control(key=registry.SOURCE).set_value("My models").run()
    box = at.sidebar.selectbox(key=registry.MINE)
    assert len(set(box.options)) == len(box.options) == 2 and all(" · kept " in o for o in box.options), box.options
    for token in (first.token, second.token, first.token):
        at.sidebar.selectbox(key=registry.MINE).set_value(token).run()
        assert not at.exception and selected(at).key == token


@pytest.mark.parametrize("snapshot", [False, True])
def test_a_run_a_restart_stopped_runs_again_with_its_own_settings_at_one_click(snapshot):
    """After a restart the Train form of a new session holds its defaults: a student who pressed Train as told
    trained something else. The stopped run's message offers to run it again from its request.json instead: from
    its snapshot's step where it has one."""
    from streamlit.testing.v1 import AppTest

    from server import jobs
    from server.worker import TrainRequest

    owner, job_id = f"owner-whose-run-a-restart-stopped-{snapshot}", f"restartstop0000{int(snapshot)}"
    asked = TrainRequest(task="first", model={"arch": "encoder", "d_model": 8, "n_layers": 1, "n_heads": 2},
                         train={"n": 4, "steps": 30, "batch_size": 32, "lr": 3e-3, "eval_interval": 10, "seed": 7},
                         measure_every=10)
    model = sv.build_model("encoder", d_model=8, n_layers=1, n_heads=2, max_len=24, seed=0)
    kept = services.kept_store().keep("trained", asked.name, sv.checkpoint_bytes(model, task="first", n=4), owner)
    folder = data_dir() / "jobs" / job_id
    folder.mkdir(parents=True)
    (folder / "request.json").write_text(json.dumps(asked.to_dict()))
    (folder / "state.json").write_text(json.dumps({
        "id": job_id, "owner": owner, "name": asked.name, "state": "stopped", "created": 1.0, "kept": kept.token,
        "reason": f"{jobs.STOPPED_BY_RESTART} at step 20; the weights of the last measurement (step 20) are kept",
        "steps": 20, "seen": False, "resume_step": 20 if snapshot else None}))
    if snapshot:
        stopped, task, config = worker.prepare(asked)
        sv.training.train(stopped, task, config, [SnapshotAt(20, folder / worker.SNAPSHOT)])
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state[registry.OWNER] = owner
    at.switch_page(PAGE["sensitivity"].file)
    at.run()
    assert not at.exception and selected(at).key == kept.token
    button = at.sidebar.button(key=registry.JOB_RERUN)
    assert button.label == ("Continue from step 20" if snapshot else "Run it again with the same settings")
    button.click().run()
    assert not at.exception and not at.sidebar.error, [e.value for e in at.sidebar.error]
    again = at.query_params.get("job")  # the new run, followed
    manager = services.job_manager()
    assert again not in (None, job_id) and manager.status(again).owner == owner
    assert manager.request(again).to_dict() == asked.to_dict()  # the stopped run's settings, not the form's
    wait_until(at, lambda at: not manager.status(again).active)  # it trains (and ends) as any run does
    assert manager.status(job_id).rerun == again
    done = sv.load_checkpoint(services.kept_store().data(manager.status(again).kept))
    assert done.metadata["training"].get("continued_from") == (20 if snapshot else None)
    assert done.metadata["training"]["steps"] == 30
    assert manager.status(again).continued_from == (20 if snapshot else None)
    goto(at, "train")  # its curves mark where it went on (a dashed rule in every panel), and say why
    said = [c.value for c in at.caption if "The server restarted during this run" in c.value]
    assert said == (["The server restarted during this run: it went on from step 20 (the dashed line), from a snapshot "
                     "of that step, exactly as it would have gone on without the restart."] if snapshot else [])
    curves = json.loads((at.get("arrow_vega_lite_chart") or at.get("vega_lite_chart"))[0].proto.spec)
    rules = [layer for panel in curves["concat"] for layer in panel.get("layer", []) if layer["mark"]["type"] == "rule"]
    assert len(rules) == (len(curves["concat"]) if snapshot else 0)
    with pytest.raises(jobs.JobRefused, match="already run again"):  # a second tab's click, drawn before the first's
        manager.rerun(job_id, owner)
    other_tab = AppTest.from_file(APP, default_timeout=300)  # a tab still following the stopped run
    other_tab.session_state[registry.OWNER] = owner
    other_tab.query_params["job"] = job_id
    other_tab.switch_page(PAGE["sensitivity"].file)
    other_tab.run()
    assert not other_tab.exception and not [b for b in other_tab.sidebar.button if b.key == registry.JOB_RERUN]
    assert selected(other_tab).key == manager.status(again).kept  # it follows the run that went on: its model
    states = [json.loads(f.read_text()) for f in (data_dir() / "jobs").glob("*/state.json")]
    assert sorted(d["id"] for d in states if d.get("owner") == owner) == sorted([job_id, again])  # no third run


def test_comparing_a_model_with_its_twin_says_they_are_one_model():
    """Two students who ran one preset (its seed fixed) compare identical models: the sidebar says so, and how to get
    two runs that differ; two different models get no such line."""
    from streamlit.testing.v1 import AppTest

    owner = "owner-comparing-twins"
    model = sv.build_model("encoder", d_model=8, n_layers=1, n_heads=2, max_len=24, seed=0)
    store = services.kept_store()
    mine = store.keep("trained", "parity n=4 mine", sv.checkpoint_bytes(model, task="parity", n=4), owner)
    twin = sv.checkpoint_bytes(model, task="parity", n=4, training={"job": "theirs"})  # another file, one model
    theirs = store.keep("trained", "parity n=4 theirs", twin, owner)

    def comparing(compare: str) -> AppTest:
        at = AppTest.from_file(APP, default_timeout=300)
        at.session_state[registry.OWNER] = owner
        at.query_params.update({"model": f"trained:{mine.token}", "compare": compare})
        at.switch_page(PAGE["sensitivity"].file)
        return at.run()

    twins = comparing(f"trained:{theirs.token}")
    assert not twins.exception and any("same model, weight for weight" in i.value for i in twins.sidebar.info)
    other = comparing("encoder-first-n4")
    assert not other.exception and not any("weight for weight" in i.value for i in other.sidebar.info)


def test_the_notice_of_a_reconnected_page_goes_when_it_is_dismissed():
    """A page that reconnected to another server process says so on every run (what the move cost) until its user
    dismisses it: the projector's page would otherwise say it to the room all lesson, above the class chart."""
    from streamlit.testing.v1 import AppTest

    from ui.moved import NOTICE_LOCAL

    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state[registry.MOVED] = True  # as a session of another server process finds itself
    at.switch_page(PAGE["class"].file)
    at.run()
    at.run()
    assert [i.value for i in at.info].count(NOTICE_LOCAL) == 1
    at.button(key=registry.MOVED_DISMISS).click().run()
    assert NOTICE_LOCAL not in [i.value for i in at.info] and not at.exception
    at.run()
    assert NOTICE_LOCAL not in [i.value for i in at.info]
    room = AppTest.from_file(APP, default_timeout=300)  # the room's screen (projector mode): not said there at all
    room.session_state[registry.MOVED] = True
    room.query_params["projector"] = "1"
    room.switch_page(PAGE["class"].file)
    room.run()
    assert NOTICE_LOCAL not in [i.value for i in room.info] and registry.MOVED_DISMISS not in [b.key for b in room.button]


def test_a_runs_outcome_reads_as_a_sentence():
    """"name reached the target"; a reason of its own after a colon ("name: the server stopped ..."), which read as
    one run-on phrase before."""
    from server import jobs
    from ui import job_panel

    def said(**status) -> str:
        return job_panel.outcome_message(jobs.JobStatus("j", "o", "parity-n8", created=0.0, **status))

    assert said(state="finished", reason="completed", steps=1200) == "**parity\\-n8** completed every step after 1,200 steps."
    stopped = said(state="stopped", reason=f"{jobs.STOPPED_BY_RESTART} at step 777")
    assert stopped.startswith(f"**parity\\-n8**: {jobs.STOPPED_BY_RESTART} at step 777"), stopped
