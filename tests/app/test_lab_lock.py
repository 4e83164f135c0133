"""Predictions locked once revealed: the first answer is the one scored, kept on the server under the
browser's owner id, so neither a later choice nor an older link changes it; "my answers" is one link with
every locked chapter and its reveal time, signed by the server, that nobody can alter unnoticed."""

from datetime import UTC, datetime

from helpers.app import APP, PAGE
from streamlit.testing.v1 import AppTest

from sensviz import lab
from server.services import server_secret
from ui import cache, predictions, registry

LOCK_RULE = ("Every chart that shows the answer stays blind until you reveal it, and revealing locks your "
             "prediction: change it freely until then; the first answer revealed is the one scored.")
ANSWERS_RULE = ("A chapter's answer, and whether it was right, shows only for the chapters you have revealed "
                "yourself (a class's instructor sees every one): a classmate's link gives away no answer.")


def as_owner(owner: str, **params) -> AppTest:
    """A fresh session of this owner (their browser's cookie) opening `/lab?<params>`."""
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state[registry.OWNER] = owner
    at.query_params.update(params)
    at.switch_page(PAGE["lab"].file)
    at.run()
    assert not at.exception, at.exception
    return at


def test_the_first_lock_stays_and_a_token_checks_only_unchanged(tmp_path):
    first = predictions.lock("owner-a", 3, "the FIRST model", tmp_path, datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    again = predictions.lock("owner-a", 3, "the PARITY model", tmp_path)
    assert again == first == {"answer": "the FIRST model", "revealed": "2026-01-02T03:04:05+00:00"}
    assert predictions.locked("owner-b", tmp_path) == {}  # another owner's file
    predictions.lock("owner-a", 1, "skip", tmp_path)
    secret, other = b"s" * 32, b"t" * 32
    token = predictions.answers_token(predictions.locked("owner-a", tmp_path), secret)
    assert predictions.read_token(token, secret) == predictions.locked("owner-a", tmp_path)
    payload, signed = token.split(".")
    forged = predictions.answers_token({3: {"answer": "the PARITY model", "revealed": first["revealed"]}}, other)
    for bad in (token + "x", f"{forged.split('.')[0]}.{signed}", forged, f"{payload}.", "a.b.c", None, "x" * 5000):
        assert predictions.read_token(bad, secret) is None, bad


def test_a_revealed_prediction_is_locked_and_an_older_link_cannot_change_it():
    at = as_owner("student-1", chapter="4")
    at.radio(key="sv_w_lab_predict_4").set_value("FIRST's").run()
    at.button(key="sv_w_lab_reveal_4").click().run()
    assert any("You predicted “FIRST\\'s”" in w.value for w in at.warning)  # escaped; not dressed as a right one
    assert not at.success
    assert at.radio(key="sv_w_lab_predict_4").disabled
    assert any("the first answer is the one scored" in c.value for c in at.caption)
    # the same browser opens an older link that holds another prediction: the locked one is scored
    older = as_owner("student-1", chapter="4", predict="parity-s")
    assert any("was not used" in w.value for w in older.warning)
    assert older.radio(key="sv_w_lab_predict_4").value == "FIRST's" and older.query_params["predict"] == "first-s"
    assert any("You predicted “FIRST\\'s”" in w.value for w in older.warning)
    assert not any("was right" in s.value for s in older.success)
    # another browser (owner) is not bound by it
    other = as_owner("student-2", chapter="4", predict="parity-s")
    assert other.radio(key="sv_w_lab_predict_4").value == "PARITY's" and not other.success


def shown_time(entry: dict) -> str:
    """A lock's time as the table shows it: to the minute, UTC (2026-01-02 03:04)."""
    return entry["revealed"][:16].replace("T", " ")


def chart_bytes(at) -> bytes:
    """Every chart's data as Streamlit sends it (Arrow bytes, strings in UTF-8)."""
    return b"".join(d.data.data for c in at.get("vega_lite_chart") for d in [*c.proto.datasets, c.proto])


def verdicts(at) -> list[str]:
    return [box.value for box in (*at.success, *at.warning, *at.info) if box.value.startswith("**Answer:")]


def test_ticking_shows_nothing_new_and_switching_after_the_charts_cannot_score_right():
    """The charts that bear the answer stay blind until the reveal, and the reveal locks: a student who ticks a
    wrong option sees only the blind charts, so what is locked is what was chosen before seeing them."""
    at = as_owner("student-5", chapter="6")
    blind = chart_bytes(at)
    assert lab.LEARNED.encode() not in blind  # the learned function is the answer
    right = cache.lab_chapter(6, lab.chapter(6).control.default).correct
    wrong = next(o for o in lab.chapter(6).predict.options if o != right)
    at.radio(key="sv_w_lab_predict_6").set_value(wrong).run()
    assert chart_bytes(at) == blind and not verdicts(at) and predictions.locked("student-5") == {}
    assert any(c.value == LOCK_RULE for c in at.caption)  # the page says when it locks
    at.button(key="sv_w_lab_reveal_6").click().run()
    assert lab.LEARNED.encode() in chart_bytes(at) and predictions.locked("student-5")[6]["answer"] == wrong
    assert at.radio(key="sv_w_lab_predict_6").disabled
    at.session_state[registry.LAB_PREDICTIONS] = {6: right}  # switching after seeing the charts, as a forged request
    at.run()
    assert any(f"You predicted “{wrong}”" in v for v in verdicts(at)) and not any("was right" in v for v in verdicts(at))
    # skipping is a reveal too: it locks "skip"
    at = as_owner("student-5", chapter="1")
    at.button(key="sv_w_lab_skip_1").click().run()
    assert predictions.locked("student-5")[1]["answer"] == "skip" and any("skipped" in v for v in verdicts(at))


def test_a_predict_link_in_a_fresh_browser_preselects_and_unblinds_nothing():
    right = cache.lab_chapter(6, lab.chapter(6).control.default).correct
    at = as_owner("student-6", chapter="6", predict=right.replace(" ", "-"))
    assert at.radio(key="sv_w_lab_predict_6").value == right and not at.button(key="sv_w_lab_reveal_6").disabled
    assert lab.LEARNED.encode() not in chart_bytes(at) and not verdicts(at) and predictions.locked("student-6") == {}
    assert not any(m.label == "as_n model" for m in at.metric)  # nor the sidebar's summary


def test_my_answers_is_one_signed_link_and_shows_a_classmate_only_what_they_revealed():
    from server.services import class_store

    for number, option in ((1, "all n of them"), (6, "about typical")):
        at = as_owner("student-3", chapter=str(number))
        at.radio(key=f"sv_w_lab_predict_{number}").set_value(option).run()
        at.button(key=f"sv_w_lab_reveal_{number}").click().run()
    locked = predictions.locked("student-3")
    assert set(locked) == {1, 6}
    token = predictions.answers_token(locked, server_secret())
    assert any(f"lab?answers={token}" in m.value for m in at.markdown)  # the page's own link
    whole = next(c for c in at.code if f"lab?answers={token}" in c.value)
    assert whole.proto.wrap_lines  # the whole address shown, wrapped, not cut at the popover's edge
    mine = as_owner("student-3", answers=token).dataframe[0].value.set_index("answer")
    assert mine.loc["all n of them", "right?"] == "yes" and mine.loc["about typical", "right?"] == "no"
    # a classmate who revealed nothing sees the times, no answer and no verdict
    classmate = as_owner("classmate", answers=token)
    assert any(ANSWERS_RULE in m.value for m in classmate.markdown)
    table = classmate.dataframe[0].value
    assert set(table["right?"]) == {"—"} and not {"all n of them", "about typical"} & set(table["answer"])
    assert list(table["revealed (UTC)"]) == [shown_time(locked[1]), shown_time(locked[6])]
    # once they reveal chapter 1 themselves, they see chapter 1's
    at = as_owner("classmate", chapter="1")
    at.button(key="sv_w_lab_skip_1").click().run()
    table = as_owner("classmate", answers=token).dataframe[0].value.set_index("answer")
    assert table.loc["all n of them", "right?"] == "yes" and "about typical" not in table.index
    # the instructor of the viewer's class sees every one
    room = class_store().create(f"Answers {datetime.now(UTC).timestamp():.0f}", "instructor-2")
    teacher = AppTest.from_file(APP, default_timeout=300)
    teacher.session_state[registry.OWNER] = "instructor-2"
    teacher.session_state[registry.CLASS] = room.code
    teacher.query_params.update(answers=token)
    teacher.switch_page(PAGE["lab"].file)
    teacher.run()
    table = teacher.dataframe[0].value.set_index("answer")
    assert table.loc["all n of them", "right?"] == "yes" and table.loc["about typical", "right?"] == "no"
    assert table.loc["about typical", "revealed (UTC)"] == shown_time(locked[6])
    payload, signed = token.split(".")
    tampered = as_owner("teacher", answers=f"{payload[:-2]}AA.{signed}")
    assert any("not signed by this server" in w.value for w in tampered.warning)
    assert not any("Answers in this link" in m.value for m in tampered.markdown)


def test_the_student_handout_for_everyone_and_the_answers_only_for_the_class_instructor():
    from server.services import class_store

    store = class_store()
    room = store.create(f"Lab handout {datetime.now(UTC).timestamp():.0f}", "instructor-1")
    store.join(room.code, "Ada", "student-4")
    keys = {}
    for owner in ("instructor-1", "student-4", "stranger"):
        at = AppTest.from_file(APP, default_timeout=300)
        at.session_state[registry.OWNER] = owner
        at.session_state[registry.CLASS] = room.code
        at.switch_page(PAGE["lab"].file)
        at.run()
        assert not at.exception, at.exception
        keys[owner] = {b.key for b in at.get("download_button") if "handout" in (b.key or "")}
    assert keys["instructor-1"] == {"sv_w_lab_handout", "sv_w_lab_handout_answers"}
    assert keys["student-4"] == keys["stranger"] == {"sv_w_lab_handout"}
