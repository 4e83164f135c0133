"""Class mode under AppTest (issue 19): creating a class and the instructor link, joining (hostile
display names included), the gallery's one-click compare, the class chart's verdict from the class's
table, isolation between classes and from non-members, and the instructor's Stop."""

import json
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("SENSVIZ_DATA_DIR", tempfile.mkdtemp(prefix="sensviz-apptest-"))

from helpers.app import write_class_runs  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from sensviz.text import escape_markdown  # noqa: E402
from server import assignments, services  # noqa: E402
from server.classes import ClassRefused  # noqa: E402
from server.jobs import JobStatus  # noqa: E402
from ui import cache, classroom, registry, train_form  # noqa: E402

APP = str(ROOT / "app.py")
CEILING_S = 600


def session(page: str = "class", **params) -> AppTest:
    """A fresh browser session opening `/<page>?<params>`."""
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params.update(params)
    at.switch_page(f"pages/{page}.py")
    at.run()
    assert not at.exception, at.exception
    return at


def owner(at: AppTest) -> str:
    return at.session_state[registry.OWNER]


def texts(at: AppTest) -> str:
    return "\n".join([m.value for m in at.markdown] + [c.value for c in at.caption] + [m.value for m in at.sidebar.markdown]
                     + [c.value for c in at.sidebar.caption])


BROWSER_URL = "https://lab.example.org:8443/home"
"""The address the instructor's browser reports (`st.context.url`): the class links are built from its host."""


def new_class(name: str | None = None) -> tuple[str, AppTest]:
    """A class created on the Home page (named `name`, or "Lab" and a random number: class names are unique
    on a server): its code and the instructor's session. The one click's run already shows the class link
    (absolute, to send; no instructor link: this browser is the instructor), the class in the URL and
    the sidebar's class."""
    name = name or f"Lab {secrets.randbelow(10**9)}"
    at = session("home")
    at.context = {"url": BROWSER_URL}
    at.text_input(key=registry.CLASS_NAME).input(name).run()
    at.button(key=registry.CLASS_CREATE).click().run()
    assert not at.exception, at.exception
    created = at.session_state[registry.CLASS_CREATED]
    assert [c.value for c in at.code] == [f"https://lab.example.org:8443/lab?class={created['code']}"]
    assert "instructor=" not in texts(at)
    assert registry.CLASS_CREATE not in [b.key for b in at.button]  # made: no second click to be refused
    assert at.query_params["class"] == created["code"]
    assert "Class" in [h.value for h in at.sidebar.header]
    assert any(c.value.startswith(f"**{escape_markdown(name)}**") for c in at.sidebar.caption)
    return created["code"], at


def instructor_link(teacher: AppTest) -> str:
    """The one-time instructor link the instructor makes on the Class page (shown in that run only)."""
    teacher.switch_page("pages/class.py").run()
    teacher.button(key=registry.CLASS_INSTRUCTOR_LINK).click().run()
    links = [c.value for c in teacher.code if "instructor=" in c.value]
    assert len(links) == 1 and any("Private" in w.value for w in teacher.warning)
    teacher.run()
    assert not [c.value for c in teacher.code if "instructor=" in c.value]  # never shown again
    return links[0]


def join(code: str, name: str) -> AppTest:
    at = session("lab", **{"class": code})
    hint = (at.warning if at.warning else at.info)[0].value  # in the main area, above the page: where to join
    assert "class link" in hint or "type your rejoin code in the sidebar" in hint, hint  # (no cookies: how to rejoin)
    assert at.sidebar.text_input[0].key == registry.CLASS_JOIN_NAME  # the join form comes first in the sidebar
    at.sidebar.text_input(key=registry.CLASS_JOIN_NAME).input(name).run()
    at.sidebar.button(key=registry.CLASS_JOIN).click().run()
    assert not at.exception, at.exception
    return at


def restart_stopped(member_owner: str, name: str, cell: dict, steps: int | None = None, created: float | None = None,
                    seen: bool | None = None) -> str:
    """A class run of `cell` (its canonical request; `steps` to make it longer) that a server restart stopped before
    its first measurement, as the restarted server leaves its job folder; its job id. `seen`: whether its owner was
    told (left out: a state from before `seen` existed, taken as told)."""
    from sensviz.files import data_dir
    from server import jobs

    job_id = f"restarted{secrets.token_hex(6)}"
    folder = data_dir() / "jobs" / job_id
    folder.mkdir(parents=True)
    request = classroom.canonical_request(assignments.LENGTH_SCALING, cell).to_dict()
    if steps is not None:
        request["train"]["steps"] = steps
    (folder / "request.json").write_text(json.dumps(request))
    state = {"id": job_id, "owner": member_owner, "name": name, "state": "stopped",
             "created": time.time() if created is None else created,
             "reason": f"{jobs.STOPPED_BY_RESTART} before the first measurement; there are no weights to keep"}
    (folder / "state.json").write_text(json.dumps(state if seen is None else {**state, "seen": seen}))
    return job_id


def keep(owner_id: str, stem: str) -> str:
    data = (ROOT / "checkpoints" / f"{stem}.safetensors").read_bytes()
    return services.kept_store().keep("trained", stem, data, owner_id).token


def test_the_instructor_link_is_exchanged_once_and_leaves_the_url():
    code, creator = new_class()
    private = parse_qs(urlsplit(instructor_link(creator)).query)["instructor"][0]
    teacher = session("class", **{"class": code, "instructor": private})
    assert any("replaceState" in h.proto.body for h in teacher.get("html"))  # out of the browser's history entry
    teacher.run()  # the next run: out of the session's URL too (the browser's no longer holds it: no new entry)
    assert "instructor" not in teacher.query_params and teacher.query_params["class"] == code
    assert "### Instructor" in texts(teacher) and private not in texts(teacher)
    assert services.class_store().get(code).is_instructor(owner(teacher))
    again = session("class", **{"class": code, "instructor": private})  # the same link in a third browser: dead
    assert "### Instructor" not in texts(again) and any("not valid" in w.value for w in again.warning)
    forged = session("class", **{"class": code, "instructor": "A" * 32})
    assert "### Instructor" not in texts(forged) and any("not valid" in w.value for w in forged.warning)
    forged.run()
    assert "instructor" not in forged.query_params and not forged.warning
    next(t for t in teacher.toggle if t.label == "Projector mode").set_value(True).run()
    assert teacher.query_params["projector"] == "1"  # projector mode: large type, no sidebar, nothing of the instructor's
    assert "### Instructor" not in texts(teacher) and "### Gallery" in texts(teacher)
    shown = [m.value for m in teacher.markdown] + [c.value for c in teacher.caption]
    assert "### Class chart" not in shown  # the room's screen: the chart first, under the class's name
    assert "### Gallery" in shown and "assignment yet" in " ".join(c.value for c in teacher.caption)
    assert any("stSidebar" in h.proto.body for h in teacher.get("html"))
    assert [c.value for c in teacher.code] == [classroom.class_link(code)]  # where to join, on the room's screen


@pytest.mark.parametrize("name", ["Ada", "**bold** [x](https://e.vil)", ":red[alarm]", "  Zoë   O'Neil "])
def test_joining_shows_the_display_name_as_text(name):
    code, _ = new_class()
    student = join(code, name)
    member = services.class_store().get(code).member_of(owner(student))
    if member is None:  # refused: one line, nothing joined
        assert [e.value for e in student.sidebar.error] and all("\n" not in e.value for e in student.sidebar.error)
        assert "[" in name or ":" in name
        return
    rejoin = student.session_state[registry.CLASS_REJOIN][code]
    assert rejoin in [c.value for c in student.sidebar.code]  # the rejoin code, for another browser
    goto = student.switch_page("pages/class.py").run()
    assert f"You are **{escape_markdown(member.name)}** in this class" in texts(goto)
    other = session("class", **{"class": code})  # another browser of the same member
    other.sidebar.text_input(key=registry.CLASS_REJOIN_CODE).input(rejoin).run()
    other.sidebar.button(key=registry.CLASS_REJOIN_BUTTON).click().run()
    assert services.class_store().get(code).member_of(owner(other)).id == member.id
    again = join(code, name.upper())  # unique in the class, ignoring case
    assert services.class_store().get(code).member_of(owner(again)) is None and again.sidebar.error


def test_the_gallery_compares_two_models_in_one_click():
    code, _ = new_class()
    ada = join(code, "Ada")
    bob_owner = "bob-browser"
    services.class_store().join(code, "Bob", bob_owner)
    mine, theirs = keep(owner(ada), "encoder-parity-n4"), keep(bob_owner, "encoder-first-n4")
    services.class_store().add_model(code, owner(ada), mine, "parity", 4, 1.0, "encoder-parity-n4")
    services.class_store().add_model(code, bob_owner, theirs, "first", 4, 0.98, "encoder-first-n4")
    ada.switch_page("pages/class.py").run()
    shown = texts(ada)
    assert escape_markdown("Bob · first · n = 4 · 98.0% · encoder-first-n4 · ") in shown  # shown as text
    services.class_store().add_model(code, bob_owner, keep(bob_owner, "encoder-first-n6"), "first", 4, 0.98,
                                   "first-n4-encoder-d32-seed7 **x**")  # a second run of one setting: its own label
    ada.run()
    assert escape_markdown("Bob · first · n = 4 · 98.0% · first-n4-encoder-d32-seed7 **x** · ") in texts(ada)
    ada.button(key=registry.class_key("open", "g", mine)).click().run()
    ada.run()  # the open model's rerun (`st.rerun`): AppTest's tree is the browser's once it drew the page again
    ada.button(key=registry.class_key("compare", theirs)).click().run()
    assert not ada.exception, ada.exception
    assert ada.query_params["model"] == f"trained:{mine}" and ada.query_params["compare"] == f"trained:{theirs}"
    assert ada.session_state[registry.COMPARE].key == theirs


def test_classes_are_isolated_from_each_other_and_from_non_members():
    one, _ = new_class("One")
    two, _ = new_class("Two")
    ada = join(one, "Ada")
    bob = join(two, "Bob")
    token = keep(owner(ada), "encoder-parity-n4")
    services.class_store().add_model(one, owner(ada), token, "parity", 4, 1.0, "secret-run")
    bob.switch_page("pages/class.py").run()
    assert "Ada" not in texts(bob) and token not in str(bob.query_params)
    stranger = session("class", **{"class": one})
    assert "Ada" not in texts(stranger) and "### Gallery" not in texts(stranger)
    assert stranger.sidebar.text_input(key=registry.CLASS_JOIN_NAME)  # the join form, nothing of the class
    nobody = session("class")
    assert "One" not in texts(nobody) and "Two" not in texts(nobody)


def test_the_class_chart_shows_the_verdict_of_the_class_table():
    code, teacher = new_class()
    teacher.switch_page("pages/class.py").run()
    teacher.button(key=registry.CLASS_ASSIGN).click().run()
    store = services.class_store()
    a = assignments.LENGTH_SCALING
    write_class_runs(store, code, 11)
    teacher.run()
    partial = assignments.verdict(a, pd.read_parquet(store.sweep_folder(code) / "runs.parquet"))
    assert f"Verdict: {partial.text}." in [i.value for i in teacher.info]
    assert partial.text.startswith("not yet resolved: 19 more runs at n = 4 and 8")
    teacher.button(key=registry.CLASS_END).click().run()  # the instructor ends it: decided on the 11 runs in
    ended = assignments.verdict(a, pd.read_parquet(store.sweep_folder(code) / "runs.parquet"), ended=True)
    assert "power at the effect fixed in advance" in ended.text
    assert f"Verdict: {ended.text}." in [m.value for m in [*teacher.success, *teacher.info]]
    store.start_assignment(code, owner(teacher), "length_scaling")  # started again: the planned runs decide
    write_class_runs(store, code)
    teacher.run()
    assert "Verdict: the class reproduced the paper's claim." in [s.value for s in teacher.success]
    assert teacher.get("arrow_vega_lite_chart") or teacher.get("vega_lite_chart")
    next(t for t in teacher.toggle if t.label == "Projector mode").set_value(True).run()
    spec = json.loads((teacher.get("arrow_vega_lite_chart") or teacher.get("vega_lite_chart"))[0].proto.spec)
    layers = {layer["mark"]["type"]: layer["encoding"] for layer in spec["layer"]}
    assert layers["point"]["shape"]["field"] == "task" and layers["line"]["strokeDash"]["field"] == "task"  # not colour alone
    assert min(layers["point"][axis]["axis"]["labelFontSize"] for axis in ("x", "y")) >= 16  # read from the back row
    assert all(layers["point"][axis]["axis"][part] == "#000000" for axis in ("x", "y") for part in ("labelColor", "titleColor"))
    assert layers["point"]["color"]["legend"]["labelColor"] == "#000000"  # not the theme's grey, washed out
    assert layers["point"]["color"]["legend"]["symbolStrokeWidth"] == 0  # FIRST's line dash drew its circle's edge ragged
    assert spec["params"] == [{"name": classroom.YOU, "value": ""}]  # the instructor is no member: no point marked
    shown = [m.value for m in teacher.markdown]
    assert "### Verdict: reproduced" in shown and escape_markdown("The class reproduced the paper's claim") + "." in shown


def test_every_member_sees_their_own_point_marked_on_one_spec_converted_once():
    a = assignments.LENGTH_SCALING
    runs = pd.DataFrame([{**a.run_settings(cell), "status": "finished", "converged": True, "member": f"member {i}",
                          a.quantity: 0.01 * i} for i, cell in enumerate(a.cells()[:6])])
    spec = cache.vega_lite(classroom.chart(a, runs))
    points = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "point")
    assert points["encoding"]["size"]["condition"]["test"] == f"datum.member === {classroom.YOU}"
    assert points["encoding"]["stroke"]["condition"]["value"] == "black"
    titles = [tip.get("title", tip["field"]) for tip in points["encoding"]["tooltip"]]  # what a hovering student reads
    assert titles == ["member", "task", "n", "seed", "sharpness L_ρ (the live monitor's)", "the run"], titles
    mine = classroom.for_member(spec, "member 3")
    assert mine["params"] == [{"name": classroom.YOU, "value": "member 3"}] and mine["layer"] is spec["layer"]
    assert spec["params"] == [{"name": classroom.YOU, "value": ""}]  # the shared spec is left as it was


@pytest.mark.slow  # a real training job (a worker process)
def test_the_instructor_stops_a_class_job():
    code, teacher = new_class()
    teacher.switch_page("pages/class.py").run()
    teacher.button(key=registry.CLASS_ASSIGN).click().run()
    ada = join(code, "Ada")
    ada.switch_page("pages/train.py").run()
    assert any("assignment is filled in" in i.value for i in ada.info)
    ada.button(key=registry.TRAIN_BUTTON).click().run()  # the filled-in form: the member's assignment run
    assert not ada.exception and not ada.error, [e.value for e in ada.error]
    entries = services.class_store().get(code).jobs
    assert [e["assignment"] for e in entries.values()] == [assignments.LENGTH_SCALING.deal(0)]
    job = next(iter(entries))
    teacher.run()
    assert {"1 run: queued 1", "1 run: running 1"} & {c.value for c in teacher.caption}  # the runs table's states
    assert "1 member joined" in [c.value for c in teacher.caption]
    stop = registry.class_key("stop", job)
    teacher.button(key=stop).click().run()
    deadline = time.monotonic() + CEILING_S
    while services.job_manager().status(job).active and time.monotonic() < deadline:
        time.sleep(0.2)
    assert services.job_manager().status(job).state in ("stopped", "cancelled")
    teacher.run()
    assert not any(b.key == stop for b in teacher.button)
    assert {"1 run: stopped 1", "1 run: cancelled 1"} & {c.value for c in teacher.caption}


def test_only_the_cells_whole_request_is_an_assignment_run():
    from dataclasses import replace

    from ui import classroom

    a, cell = assignments.LENGTH_SCALING, assignments.LENGTH_SCALING.deal(0)
    wanted = classroom.canonical_request(a, cell)
    assert classroom._matches(a, cell, replace(wanted, model=dict(wanted.model), train=dict(wanted.train)))
    for where, field, value in (("model", "d_ff", 64), ("model", "arch", "decoder"), ("train", "loss", "bce"),
                                ("train", "train_size", 64), ("train", "eval_size", 256), ("train", "target_loss", 0.001),
                                ("train", "seed", cell["seed"] + 1)):
        changed = replace(wanted, **{where: {**getattr(wanted, where), field: value}})
        assert not classroom._matches(a, cell, changed), field
    assert not classroom._matches(a, cell, replace(wanted, task="parity" if cell["task"] == "first" else "first"))


def test_the_assignment_button_refills_the_form_after_a_preset():
    from ui import classroom, train_form

    code, teacher = new_class()
    teacher.switch_page("pages/class.py").run()
    teacher.button(key=registry.CLASS_ASSIGN).click().run()
    ada = join(code, "Ada")
    ada.switch_page("pages/train.py").run()
    ada.selectbox(key=registry.TRAIN_PRESET).select("few examples: a random function from 64 of 256 inputs").run()
    assert ada.session_state[train_form.key("train_size")] == 64
    ada.switch_page("pages/class.py").run()
    ada.button(key=registry.CLASS_TRAIN).click().run()
    assert not ada.exception, ada.exception
    cell = assignments.LENGTH_SCALING.deal(0)
    wanted = classroom.canonical_request(assignments.LENGTH_SCALING, cell)
    state = {field: ada.session_state[train_form.key(field)] for field in (*wanted.model, "task", "n", "seed", "train_size")}
    assert state == {**wanted.model, "task": cell["task"], "n": cell["n"], "seed": cell["seed"], "train_size": None}
    assert wanted.train["train_size"] is None


def test_your_classes_enter_the_class_in_one_click():
    code, teacher = new_class("Lab **one**")
    teacher.session_state[registry.CLASS] = None  # the same browser, out of the class
    teacher.switch_page("pages/class.py").run()
    assert "### Instructor" not in texts(teacher)
    teacher.button(key=registry.class_key("enter", code)).click().run()
    teacher.run()  # the button's rerun (`st.rerun`)
    assert not teacher.exception, teacher.exception
    assert "### Instructor" in texts(teacher) and teacher.query_params["class"] == code


def test_deleting_the_class_asks_first():
    code, teacher = new_class()
    teacher.switch_page("pages/class.py").run()
    assert teacher.button(key=registry.CLASS_DELETE).disabled  # one click deletes nothing
    teacher.checkbox(key=registry.class_key("delete", "sure")).check().run()
    teacher.button(key=registry.CLASS_DELETE).click().run()
    assert not teacher.exception, teacher.exception
    assert services.class_store().get(code) is None


def test_the_room_is_told_the_assignment_a_stopped_run_the_removal_and_the_closing():
    code, teacher = new_class()
    ada = join(code, "Ada")
    assert not any("assignment" in i.value for i in ada.info)
    store = services.class_store()
    store.start_assignment(code, owner(teacher), "length_scaling")
    ada.run()
    told = [i.value for i in ada.info if "started the assignment" in i.value]
    seed = assignments.LENGTH_SCALING.seed_base
    assert told and "your run is parity at n" in told[0] and f"4 with seed {seed}" in told[0]
    assert ada.button(key=registry.class_key("notice", "train"))  # a button to Train from any page
    store.add_job(code, owner(ada), "job-aaaaaaaaaaaa", "parity", 4, {"task": "parity", "n": 4, "seed": seed})


    class Running:  # the job manager's answers for Ada's running job
        def status(self, job_id):
            return JobStatus(job_id, owner(ada), "run", "running", 0.0)

        def stop(self, job_id, owner):
            return True

    assert not [n for n in store.notices(code, owner(ada), Running()) if n.kind == "assignment"]  # while it trains
    assert store.stop(code, owner(teacher), "job-aaaaaaaaaaaa", Running())
    ada.run()
    assert any("was stopped by the instructor" in w.value for w in ada.warning)
    nextone = [i.value for i in ada.info if "your next is parity at n" in i.value]  # once it ended: the next
    assert nextone and ada.button(key=registry.class_key("notice", "train")), [i.value for i in ada.info]
    store.close(code, owner(teacher))
    ada.run()
    assert any("is closed" in w.value for w in ada.warning)
    store.close(code, owner(teacher), closed=False)
    store.remove(code, owner(teacher), store.get(code).member_of(owner(ada)).id)
    ada.run()
    assert any("removed you" in e.value for e in ada.error) and not ada.sidebar.text_input  # told, not offered to join


def test_an_edited_assignment_run_is_labelled_before_train_and_in_the_gallery():
    code, teacher = new_class()
    services.class_store().start_assignment(code, owner(teacher), "length_scaling")
    ada = join(code, "Ada")
    ada.switch_page("pages/train.py").run()
    assert not any("not part of the assignment" in w.value for w in ada.warning)  # the form holds the assignment's run
    ada.number_input(key=train_form.key("lr")).set_value(0.003).run()
    note = [w.value for w in ada.warning if "not part of the assignment" in w.value]
    assert note and f"seed {assignments.LENGTH_SCALING.seed_base}" in note[0]  # said before Train is pressed
    store = services.class_store()
    store.add_job(code, owner(ada), "job-edited000000", "parity", 4, None)  # what job_started records for it
    store.add_model(code, owner(ada), keep(owner(ada), "encoder-parity-n6"), "parity", 4, 1.0, "parity-n4-s1000",
                    job="job-edited000000")
    assert list(classroom.gallery_rows(store.get(code))["model"]) == ["parity-n4-s1000 (not part of the assignment)"]


def test_a_run_that_ended_before_its_last_step_says_so_in_the_gallery():
    code, teacher = new_class()
    ada = join(code, "Ada")
    store = services.class_store()
    tokens = [keep(owner(ada), "encoder-parity-n6"), keep(owner(ada), "encoder-first-n6")]
    for job in ("job-cutoff000000", "job-finished0000"):
        store.add_job(code, owner(ada), job, "parity", 4, None)

    class Ended:  # one run cut off by a server restart, one that trained to its last step
        def status(self, job_id):
            cut = job_id == "job-cutoff000000"
            return JobStatus(job_id, owner(ada), job_id, "stopped" if cut else "finished", 0.0, kept=tokens[not cut],
                             reason="the server stopped during this run" if cut else None)

        def records(self, job_id):
            return [{"step": 500, "accuracy": 1.0}]

        def request(self, job_id):
            return None  # its settings were not kept: not one to continue

    assert store.sync(code, Ended()) == 2
    rows = classroom.gallery_rows(store.get(code)).set_index("token")["model"]
    assert rows[tokens[0]] == f"job-cutoff000000 ({classroom.STOPPED_EARLY})" and rows[tokens[1]] == "job-finished0000"


def test_peer_instruction_counts_the_rooms_predictions_holds_the_reveal_and_shows_the_share():
    from sensviz import lab

    code, teacher = new_class()
    chapter = lab.CHAPTERS[0]
    options = list(chapter.predict.options)
    students = [join(code, name) for name in ("Ada", "Bob", "Cy")]
    for at, answer in zip(students, (options[0], options[0], options[-1])):
        at.switch_page("pages/lab.py").run()
        at.radio(key=f"sv_w_lab_predict_{chapter.number}").set_value(answer).run()
    again = AppTest.from_file(APP, default_timeout=300)  # Cy's browser after a reload (or a restart): the tick is back
    again.session_state[registry.OWNER] = owner(students[2])
    again.query_params["class"] = code
    again.switch_page("pages/lab.py").run()
    assert again.radio(key=f"sv_w_lab_predict_{chapter.number}").value == options[-1]
    teacher.switch_page("pages/class.py").run()
    table = classroom.predictions_table(services.class_store().get(code))
    counts = dict(zip(table["answer"], table["count"]))
    assert counts[options[0]] == 2 and counts[options[-1]] == 1 and table["right"].isna().all()  # not revealed yet
    assert not any("Right:" in m.value for m in teacher.markdown)
    teacher.button(key=registry.class_key("hold", str(chapter.number))).click().run()
    students[2].run()
    reveal = next(b for b in students[2].button if b.label == "Reveal the answer")
    assert reveal.disabled and any("reveal this answer to the whole class" in c.value for c in students[2].caption)
    forgotten = session("lab", **{"class": code})  # a browser the class forgot (no cookies, a reload): held too
    forgotten.radio(key=f"sv_w_lab_predict_{chapter.number}").set_value(options[0]).run()
    assert next(b for b in forgotten.button if b.label == "Reveal the answer").disabled
    teacher.button(key=registry.class_key("hold", str(chapter.number))).click().run()  # revealed to the class
    right = [m.value for m in teacher.markdown if m.value.startswith("Right:")]
    correct = cache.lab_chapter(chapter.number, chapter.control.default).correct
    expected = sum(1 for a in (options[0], options[0], options[-1]) if a == correct)
    assert right == [f"Right: **{expected} of 3** ({expected / 3:.0%})."]
    students[2].run()
    assert not next(b for b in students[2].button if b.label == "Reveal the answer").disabled
    assert not any("predictions" in m.value.lower() and "###" in m.value for m in students[0].markdown)  # never the room's
    next(t for t in teacher.toggle if t.label == "Projector mode").set_value(True).run()  # the room's screen
    histogram = json.loads((teacher.get("arrow_vega_lite_chart") or teacher.get("vega_lite_chart"))[-1].proto.spec)
    axes = [histogram["encoding"][c]["axis"] for c in ("x", "y")]
    assert all(a["labelColor"] == "#000000" and a["labelFontSize"] == classroom.PROJECTOR_TYPE["label"] for a in axes)
    assert histogram["encoding"]["y"]["field"] == "answer"


def test_the_assignments_chart_waits_with_the_lab_chapter_it_answers():
    """The length-scaling chart answers the Lab's chapter 5: while the instructor holds that reveal, the members and
    the room's screen see how many runs are in, not the chart or its verdict; the instructor's own view keeps both."""
    code, teacher = new_class()
    ada = join(code, "Ada")
    store = services.class_store()
    store.start_assignment(code, owner(teacher), "length_scaling")
    write_class_runs(store, code)
    store.hold(code, owner(teacher), assignments.LENGTH_SCALING.lab_chapter)

    def charts(at: AppTest) -> list:
        return at.get("arrow_vega_lite_chart") + at.get("vega_lite_chart")

    member = ada.switch_page("pages/class.py").run()
    assert not charts(member) and not any(v.value.startswith("Verdict") for v in [*member.success, *member.info])
    assert any("wait for the reveal of the Lab's chapter 5" in i.value and "30 runs in so far" in i.value
               for i in member.info)
    teacher.switch_page("pages/class.py").run()
    assert charts(teacher) and "while you hold chapter 5's reveal" in texts(teacher)
    next(t for t in teacher.toggle if t.label == "Projector mode").set_value(True).run()
    assert not charts(teacher) and any("wait for the reveal" in i.value for i in teacher.info)
    store.hold(code, owner(teacher), 5, held=False)  # revealed to the class: the chart is the room's
    assert charts(teacher.run()) and charts(member.run())


def test_a_run_continued_after_a_restart_counts_in_the_cell_it_trains():
    """A restart ends Bob's run, so its cell is free and dealt again, to Ada (who joined first and has no run); Bob
    is dealt another. Bob's continuation of his run still counts in the cell it trains, not in his new one."""

    code, teacher = new_class()
    teacher.switch_page("pages/class.py").run()
    teacher.button(key=registry.CLASS_ASSIGN).click().run()
    ada, bob = join(code, "Ada"), join(code, "Bob")
    store, manager = services.class_store(), services.job_manager()
    found = store.get(code)
    ada_id = found.member_of(owner(ada)).id
    cell = store.deal(code, manager)[ada_id]  # the cell Ada is dealt while Bob's run is not running
    job_id = restart_stopped(owner(bob), "bob's run", cell, created=1.0)
    store.add_job(code, owner(bob), job_id, cell["task"], cell["n"], cell)
    assert store.deal(code, manager)[found.member_of(owner(bob)).id] != cell  # dealt another by now
    back = AppTest.from_file(APP, default_timeout=300)  # Bob's page after the restart, following his run
    back.session_state[registry.OWNER] = owner(bob)
    back.query_params.update({"job": job_id, "class": code})
    back.switch_page("pages/train.py").run()
    back.sidebar.button(key=registry.JOB_RERUN).click().run()
    again = back.query_params["job"]
    try:
        assert again != job_id and store.get(code).jobs[again]["assignment"] == cell
        summary = [c.value for c in teacher.run().caption if " run" in c.value and "restart" in c.value]
        assert len(summary) == 1 and summary[0].startswith("1 run: ") and summary[0].endswith(
            "(1 of them continued after a restart)"), summary  # one run, two rows
    finally:
        manager.stop(again, owner(bob))


def test_an_instructor_link_made_on_localhost_is_given_at_the_servers_network_address(monkeypatch):
    """The one-time instructor link is for another computer (a co-instructor's, the projector's): made in a browser
    that opened the app as localhost, it names this server's network address, as the class link does."""
    from ui import url_state

    monkeypatch.setattr(url_state, "network_addresses", lambda: ("10.0.0.5",))
    code, teacher = new_class()
    teacher.context = {"url": "http://localhost:8621/home"}
    link = instructor_link(teacher)
    assert link.startswith("http://10.0.0.5:8621/class?") and f"class={code}" in link, link


def test_a_member_whose_browser_keeps_no_cookies_is_told_to_keep_the_code_and_the_instructor_can_make_a_new_one(
        monkeypatch):
    """A browser that keeps no cookies is someone new after a reload: its member is told to write the rejoin code
    down, and one who did not gets a new code from the instructor, which makes a browser them again (the old code
    is dead)."""
    from ui import owner_id

    code, teacher = new_class()
    monkeypatch.setattr(owner_id, "cookies_blocked", lambda: True)
    bo = join(code, "Bo")
    assert any("Write this rejoin code down now" in w.value for w in bo.sidebar.warning)
    old = bo.session_state[registry.CLASS_REJOIN][code]
    member = services.class_store().get(code).member_of(owner(bo))
    teacher.switch_page("pages/class.py").run()
    teacher.selectbox(key=registry.CLASS_MEMBER).set_value(member.id).run()
    teacher.button(key=registry.CLASS_MEMBER_REJOIN).click().run()
    new = [c.value for c in teacher.code if c.value not in (old,) and "://" not in c.value]
    assert len(new) == 1, [c.value for c in teacher.code]
    reloaded = session("class", **{"class": code})  # Bo's browser after a reload: someone new, told how to come back
    assert any("Joined" in w.value and "type your rejoin code in the sidebar" in w.value for w in reloaded.warning)
    reloaded.sidebar.text_input(key=registry.CLASS_REJOIN_CODE).input(old).run()
    reloaded.sidebar.button(key=registry.CLASS_REJOIN_BUTTON).click().run()
    assert services.class_store().get(code).member_of(owner(reloaded)) is None  # the old code is dead
    reloaded.sidebar.text_input(key=registry.CLASS_REJOIN_CODE).input(new[0]).run()
    reloaded.sidebar.button(key=registry.CLASS_REJOIN_BUTTON).click().run()
    assert services.class_store().get(code).member_of(owner(reloaded)).id == member.id
    with pytest.raises(ClassRefused, match="only the class's instructor"):  # a member cannot make another's
        services.class_store().new_rejoin_code(code, owner(reloaded), member.id)


def test_a_browser_that_rejoins_gets_the_members_run_back_to_continue_and_stop(monkeypatch):
    """A browser that keeps no cookies is someone new after a server restart. Its rejoin code brings back the run
    the restart ended: offered to continue (before the rejoin it is offered nothing), the continuation is the
    member's to stop from that browser, and while it runs that browser trains nothing else (one run per person)."""
    from ui import owner_id

    code, teacher = new_class()
    teacher.switch_page("pages/class.py").run()
    teacher.button(key=registry.CLASS_ASSIGN).click().run()
    monkeypatch.setattr(owner_id, "cookies_blocked", lambda: True)
    bo = join(code, "Bo")
    rejoin = bo.session_state[registry.CLASS_REJOIN][code]
    store, manager = services.class_store(), services.job_manager()
    cell = store.deal(code, manager)[store.get(code).member_of(owner(bo)).id]
    job_id = restart_stopped(owner(bo), "bo's run", cell, steps=20_000, seen=False)  # long enough to be stopped
    store.add_job(code, owner(bo), job_id, cell["task"], cell["n"], cell)
    back = session("train", **{"class": code})  # Bo's tab after the restart: a new owner id, not in the class
    assert owner(back) != owner(bo)
    assert registry.JOB_RERUN not in [b.key for b in back.sidebar.button]
    back.sidebar.text_input(key=registry.CLASS_REJOIN_CODE).input(rejoin).run()
    back.sidebar.button(key=registry.CLASS_REJOIN_BUTTON).click().run()
    assert not back.exception, back.exception
    back.sidebar.button(key=registry.JOB_RERUN).click().run()
    again = back.query_params["job"]
    try:
        assert again != job_id and manager.status(again).owner == owner(bo) and manager.status(again).active
        assert store.get(code).jobs[again]["member"] == store.get(code).member_of(owner(bo)).id  # the class's run
        back.run().button(key=registry.TRAIN_BUTTON).click().run()  # the Train form: a second run of Bo's is refused
        assert any("started in another browser" in e.value for e in back.error), [e.value for e in back.error]
        assert manager.active(owner(back)) is None
        stranger = session("train", job=again)  # someone the link reaches: follows it, cannot stop it
        assert stranger.sidebar.get("progress") and registry.JOB_STOP not in [b.key for b in stranger.sidebar.button]
        back.sidebar.button(key=registry.JOB_STOP).click().run()
        assert not manager.status(again).active
    finally:
        manager.stop(again, owner(bo))


def test_an_instructor_finds_create_a_class_above_the_list_of_pages():
    home = session("home")
    shown = [type(e).__name__ + ":" + str(getattr(e, "label", getattr(e, "value", "")))[:30] for e in home.main]
    expander = next(i for i, e in enumerate(shown) if e.startswith("Expander:Create a class"))
    table = next(i for i, e in enumerate(shown) if e.startswith("Markdown:| page | shows |"))
    assert expander < table, shown


def test_after_making_a_class_the_form_comes_back_only_when_asked():
    """Made: Home shows the class link, not the form whose second click the taken name would refuse; "Create
    another class" brings the form back, empty, and a second class is made from it."""
    code, teacher = new_class()
    teacher.run().button(key=registry.CLASS_CREATE_ANOTHER).click().run()  # (AppTest: a run after an st.rerun)
    teacher.run()
    assert "?class=" not in "".join(c.value for c in teacher.main.code)
    assert teacher.text_input(key=registry.CLASS_NAME).value == ""
    teacher.text_input(key=registry.CLASS_NAME).input(f"Lab {secrets.randbelow(10**9)}").run()
    teacher.button(key=registry.CLASS_CREATE).click().run()
    assert teacher.session_state[registry.CLASS_CREATED]["code"] not in (code, None)


def test_the_instructor_reads_how_the_runs_fall_to_the_members_who_joined():
    """Before the assignment starts, the Class page says how its 30 runs fall to the class as it is now."""
    code, teacher = new_class()
    teacher.switch_page("pages/class.py").run()
    assert "30 runs" in texts(teacher) and "nobody has joined yet" in texts(teacher)
    join(code, "Ada"), join(code, "Bob")
    assert "with 2 members, each trains about 15 of them " in texts(teacher.run())
    teacher.button(key=registry.CLASS_ASSIGN).click().run()
    assert "with 2 members, each trains about 15 of them " in texts(teacher.run())  # while it runs too
    assert "training 2 runs at once (the plan's limit: 5 minutes" in texts(teacher)


def test_a_rejoin_code_brings_the_members_class_runs_and_none_of_their_others():
    """A browser that rejoins with a member's code (the instructor's New rejoin code, or a code that leaked) becomes
    the member in the class: it gets their class runs, never their runs outside the class (here one that ended
    while they were away, which their own browser is told of)."""
    from sensviz.files import data_dir

    code, teacher = new_class()
    bo = join(code, "Bo")
    store = services.class_store()
    job_id = f"bosprivate{secrets.token_hex(6)}"  # trained outside the class, ended while Bo was away
    folder = data_dir() / "jobs" / job_id
    folder.mkdir(parents=True)
    (folder / "state.json").write_text(json.dumps({
        "id": job_id, "owner": owner(bo), "name": "private experiment 7", "state": "failed", "created": time.time(),
        "seen": False, "error": "out of memory"}))
    code_for_bo = store.new_rejoin_code(code, owner(teacher), store.get(code).member_of(owner(bo)).id)
    intruder = session("home", **{"class": code})  # the instructor's private window
    intruder.sidebar.text_input(key=registry.CLASS_REJOIN_CODE).input(code_for_bo).run()
    intruder.sidebar.button(key=registry.CLASS_REJOIN_BUTTON).click().run()
    intruder.run()
    assert store.get(code).member_of(owner(intruder)).name == "Bo"  # in the class as Bo
    assert "private experiment 7" not in " ".join(w.value for w in intruder.sidebar.warning)
    assert registry.JOB not in intruder.session_state or intruder.session_state[registry.JOB] is None
    assert services.job_manager().unseen(owner(bo)) == job_id  # Bo's own browser is still told of it
    back = session("home")
    back.session_state[registry.OWNER] = owner(bo)
    back.run()
    assert any("private experiment 7" in w.value for w in back.sidebar.warning)



def test_a_member_whose_run_a_restart_stopped_is_told_to_continue_it_not_to_start_over():
    """After a restart the page said "your run is parity at n = 4" with the Train form's button, while the sidebar
    offered to continue: a student who followed the page trained the run again from step 0. Now the run's cell waits
    for it, and every page says to continue it, with the button that does."""

    code, teacher = new_class()
    teacher.switch_page("pages/class.py").run()
    teacher.button(key=registry.CLASS_ASSIGN).click().run()
    bo = join(code, "Bo")
    store, manager = services.class_store(), services.job_manager()
    cell = store.deal(code, manager)[store.get(code).member_of(owner(bo)).id]
    job_id = restart_stopped(owner(bo), "bo's run", cell, seen=True)
    store.add_job(code, owner(bo), job_id, cell["task"], cell["n"], cell)
    store.sync(code, manager)
    page = bo.switch_page("pages/class.py").run()
    assert any("A restart of the server stopped your run" in w.value for w in page.warning)
    assert any("was stopped by a restart of the server" in m.value for m in page.markdown)
    assert registry.CLASS_TRAIN not in [b.key for b in page.button]  # not the Train form: it starts over
    assert not any("your run is" in i.value for i in page.info)
    page.button(key=registry.class_key("notice", "continue")).click().run()
    again = page.query_params["job"]
    try:
        assert manager.status(job_id).rerun == again and store.get(code).jobs[again]["assignment"] == cell
    finally:
        manager.stop(again, owner(bo))


def test_the_train_page_says_the_assignment_once_in_its_form_not_with_the_notice_and_its_button():
    """Every page tells a member their assignment with a button to the Train form, but the Train page itself, which
    fills its form with it and says so (the walk saw the button above the form it leads to)."""
    code, teacher = new_class()
    teacher.switch_page("pages/class.py").run()
    teacher.button(key=registry.CLASS_ASSIGN).click().run()
    ada = join(code, "Ada")
    notice = registry.class_key("notice", "train")
    assert notice in [b.key for b in ada.run().button]  # the Lab
    train = ada.switch_page("pages/train.py").run()
    assert notice not in [b.key for b in train.button]
    assert [i.value for i in train.info if "assignment" in i.value] == [
        next(i.value for i in train.info if i.value.startswith("Your class assignment is filled in"))]
