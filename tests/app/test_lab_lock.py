"""Predictions locked once revealed: the first answer is the one scored, kept on the server under the
browser's owner id, so neither a later choice nor an older link changes it; "my answers" is one link with
every locked chapter and its reveal time, signed by the server, that nobody can alter unnoticed."""

from datetime import UTC, datetime

from helpers.app import APP, PAGE
from streamlit.testing.v1 import AppTest

from server.services import server_secret
from ui import predictions, registry


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
    assert any("You predicted “FIRST's”" in s.value for s in at.success)
    assert at.radio(key="sv_w_lab_predict_4").disabled
    assert any("the first answer is the one scored" in c.value for c in at.caption)
    # the same browser opens an older link that holds another prediction: the locked one is scored
    older = as_owner("student-1", chapter="4", predict="parity-s")
    assert any("was not used" in w.value for w in older.warning)
    assert older.radio(key="sv_w_lab_predict_4").value == "FIRST's" and older.query_params["predict"] == "first-s"
    assert any("You predicted “FIRST's”" in s.value for s in older.success)
    assert not any("was right" in s.value for s in older.success)
    # another browser (owner) is not bound by it
    other = as_owner("student-2", chapter="4", predict="parity-s")
    assert other.radio(key="sv_w_lab_predict_4").value == "PARITY's" and not other.success


def test_my_answers_is_one_signed_link_with_every_locked_chapter():
    for number, option in ((1, "all n of them"), (6, "about typical")):
        at = as_owner("student-3", chapter=str(number))
        at.radio(key=f"sv_w_lab_predict_{number}").set_value(option).run()
        at.button(key=f"sv_w_lab_reveal_{number}").click().run()
    locked = predictions.locked("student-3")
    assert set(locked) == {1, 6}
    token = predictions.answers_token(locked, server_secret())
    assert any(f"lab?answers={token}" in m.value for m in at.markdown)  # the page's own link
    teacher = as_owner("teacher", answers=token)
    assert any("Answers in this link" in m.value for m in teacher.markdown)
    table = teacher.dataframe[0].value.set_index("answer")
    assert table.loc["all n of them", "right?"] == "yes" and table.loc["about typical", "right?"] == "no"
    assert table.loc["about typical", "revealed (UTC)"] == locked[6]["revealed"]
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
