"""The Lab page as a student meets it: the question and a prediction first, the answer only after the
reveal, the prediction kept in the URL, the try-it control redrawing the chapter, and a fast first render
from the data shipped beside the zoo. One chapter per test."""

import re
import time

import pytest
from helpers.app import open_url, selected

from sensviz import lab
from ui import cache


def charts(at) -> list[str]:
    return [c.proto.spec for c in at.get("vega_lite_chart")]


def chart_data(at) -> list[bytes]:
    """The data of each chart as Streamlit sends it (Arrow bytes, strings in UTF-8)."""
    return [b"".join([d.data.data for d in c.proto.datasets] + [c.proto.data.data]) for c in at.get("vega_lite_chart")]


def revealed(number: int, **params):
    """Chapter `number` opened by a fresh session and revealed by Skip (its charts and answer shown)."""
    at = open_url("lab", chapter=str(number), **params)
    at.button(key=f"sv_w_lab_skip_{number}").click().run()
    assert not at.exception and at.query_params["predict"] == "skip"
    return at


def shown_text(at) -> str:
    return " ".join([m.value for m in at.markdown] + [s.value for s in at.success] + [i.value for i in at.info])


def test_a_prediction_hides_the_answer_until_it_is_made_and_the_reveal_shows_it():
    start = time.perf_counter()
    at = open_url("lab", chapter="4")
    print(f"chapter 4, a fresh session: {time.perf_counter() - start:.2f} s")
    built = cache.lab_chapter(4, 1.0)
    assert [s.value for s in at.subheader] == ["4. The landscape: sharp and flat minima"]
    assert any(lab.chapter(4).question in m.value for m in at.markdown)
    assert charts(at) == [] and len([i for i in at.info if "when you reveal" in i.value]) == 2  # both wait
    assert built.look_for not in shown_text(at) and built.answer not in shown_text(at)
    assert at.button(key="sv_w_lab_reveal_4").disabled
    at.radio(key="sv_w_lab_predict_4").set_value("FIRST's").run()  # ticked: the charts still wait for the reveal
    assert not at.exception and charts(at) == [] and at.query_params["predict"] == "first-s"
    assert built.look_for not in shown_text(at) and built.answer not in shown_text(at)
    at.button(key="sv_w_lab_reveal_4").click().run()
    assert len(charts(at)) == 2 and built.look_for in shown_text(at) and built.answer in shown_text(at)
    assert any(w.value.startswith(f"**Answer: {built.correct}.** You predicted") for w in at.warning)


def test_skipping_reveals_the_charts_and_a_blind_chart_leaves_out_the_asked_quantity():
    at = open_url("lab", chapter="6")
    before = chart_data(at)
    assert len(before) == 1 and lab.LEARNED.encode() not in before[0]  # the strip without the learned function
    assert lab.TARGET.encode() in before[0]
    at.button(key="sv_w_lab_skip_6").click().run()
    after = chart_data(at)
    assert at.query_params["predict"] == "skip" and len(after) == 2 and lab.LEARNED.encode() in after[0]
    assert any(c.value.startswith("Your prediction was a skip, locked when") for c in at.caption)  # not "answer “skip”"


def test_a_prediction_in_the_url_is_restored_and_a_bad_one_is_a_notice():
    at = open_url("lab", chapter="2", predict="it-rises")
    assert at.radio(key="sv_w_lab_predict_2").value == "it rises"  # pre-selected, not revealed
    assert not at.button(key="sv_w_lab_reveal_2").disabled and lab.SHARPNESS.encode() not in b"".join(chart_data(at))
    bad = open_url("lab", chapter="2", predict="maybe")
    assert any("predict=maybe" in w.value for w in bad.warning) and bad.radio(key="sv_w_lab_predict_2").value is None


def test_try_it_redraws_the_chapter_from_the_shipped_data():
    at = revealed(1)
    before = charts(at)
    start = time.perf_counter()
    at.segmented_control(key="sv_w_lab_try_1").set_value(4).run()
    print(f"chapter 1, n = 4: {time.perf_counter() - start:.2f} s")
    assert not at.exception and charts(at) != before and at.query_params["try"] == "4"
    assert any("under all 4 flips" in m.value for m in at.markdown)  # what changes here, at n = 4
    assert any(re.search(r"locked when you revealed the answer \(\d{4}-\d\d-\d\d \d\d:\d\d UTC\)", c.value)
               for c in at.caption)  # the lock's time to the minute, as in "My answers"


def test_setup_next_turns_to_the_top_and_a_bad_chapter():
    at = revealed(1)
    at.button(key="sv_w_lab_setup_1").click().run()
    assert not at.exception and selected(at).name.startswith("encoder-parity-n8")
    assert at.query_params["model"].startswith("encoder-parity-n8~") and at.query_params["compare"].startswith(
        "encoder-first-n8~")
    at.button(key="sv_w_lab_next").click().run()
    assert "2. Training PARITY: degree n takes over" in [h.value for h in at.subheader]
    assert at.query_params["chapter"] == "2" and "predict" not in at.query_params  # chapter 2 has its own
    assert any("scrollTop = 0" in h.proto.body for h in at.get("html"))
    at.button(key="sv_w_lab_previous").click().run()
    assert "chapter" not in at.query_params and at.query_params["predict"] == "skip"  # chapter 1's, kept
    bad = open_url("lab", chapter="9")
    assert not bad.exception and any("chapter=9" in w.value for w in bad.warning)
    assert "1. Sensitivity on the cube" in [h.value for h in bad.subheader]


@pytest.mark.parametrize("number", [3, 6])
def test_try_it_yourself_links_out_only_after_the_reveal(number):
    """The other pages show a chapter's models whole (chapter 3's LayerNorm page its mean Blowup): no button
    to them, to the Train page or to load the models before the answer is revealed."""
    at = open_url("lab", chapter=str(number))
    keys = {b.key for b in at.button}
    assert not keys & {f"sv_w_lab_{k}_{number}" for k in ("setup", "train", "open")}
    assert any("appears once you reveal the answer" in c.value for c in at.caption)
    after = {b.key for b in revealed(number).button}
    assert f"sv_w_lab_setup_{number}" in after and {f"sv_w_lab_train_{number}", f"sv_w_lab_open_{number}"} & after


def test_lab_try_it_yourself_opens_the_train_form_with_its_preset():
    at = revealed(6)
    at.button(key="sv_w_lab_train_6").click().run()
    assert not at.exception
    assert at.selectbox(key="sv_w_train_task").value == "random"
    assert at.number_input(key="sv_w_train_train_size").value == 64


@pytest.mark.parametrize("number", [3, 5])
def test_a_chapter_opens_from_the_shipped_data_without_measuring(number, monkeypatch):
    def measure(*args):
        raise AssertionError("measured: the shipped data was not used")

    monkeypatch.setattr(lab.chapter(number), "measure", measure)
    start = time.perf_counter()
    at = revealed(number)
    print(f"chapter {number}, a fresh session: {time.perf_counter() - start:.2f} s")
    assert not at.exception and charts(at)


def test_loading_a_chapters_models_reads_their_shipped_summaries(monkeypatch):
    def measure(*args, **kwargs):
        raise AssertionError("measured: the shipped summary was not used")

    monkeypatch.setattr(cache, "measure", measure)
    at = revealed(1)  # chapter 1 revealed: the summary's as_n is shown (ui.lab_state.withheld)
    at.segmented_control(key="sv_w_lab_chapter").set_value(4).run()
    at.button(key="sv_w_lab_skip_4").click().run()
    at.button(key="sv_w_lab_setup_4").click().run()
    assert not at.exception and not at.error and selected(at).name.startswith("encoder-parity-n16")
    shipped = lab.read_summaries(lab.zoo_dir())["encoder-parity-n16"]["summary"]
    assert f"as_n model: {shipped['avg_sensitivity']:.3f}" in [f"{m.label}: {m.value}" for m in at.metric]


def test_each_chart_is_converted_once_for_every_session_as_st_altair_chart_converts_it():
    default = lab.chapter(6).control.default  # chapter 6: a blind chart and none
    built, specs = cache.lab_chapter(6, default), cache.lab_specs(6, default)
    assert cache.lab_specs(6, default) is specs  # kept, not converted again
    assert list(specs) == [cache.vega_lite(f.chart) for f in built.figures]
    blind = cache.lab_specs(6, default, blind=True)
    assert [s is None for s in blind] == [f.blind is None for f in built.figures] and any(blind) and not all(blind)
    assert [s for s in blind if s] == [cache.vega_lite(f.blind) for f in built.figures if f.blind is not None]
    at = revealed(6)  # the page draws the kept specs
    assert not at.exception and len(charts(at)) == len(specs)


def test_the_answer_stays_the_questions_at_another_try_it_setting():
    at = open_url("lab", chapter="3", predict="the-parity-model")
    at.button(key="sv_w_lab_reveal_3").click().run()
    asked = cache.lab_chapter(3, 12)
    at.segmented_control(key="sv_w_lab_try_3").set_value(8).run()
    here = cache.lab_chapter(3, 8)
    assert here.correct != asked.correct  # at n = 8 the charts do not show it: the page says so
    assert any(s.value.startswith(f"**Answer: {asked.correct}.** Your prediction was right.") for s in at.success)
    assert any(m.value.startswith("**What changes here.**") and "not visible" in m.value for m in at.markdown)


def test_the_last_chapter_ends_with_what_is_revealed_and_how_to_hand_it_in():
    at = revealed(len(lab.CHAPTERS))
    end = next(i.value for i in at.info if "The end of the Lab" in i.value)
    count = int(re.search(r"You revealed (\d+) of 7 chapters", end).group(1))
    still = re.findall(r"chapter (\d)", end)
    assert count >= 1 and "7" not in still and len(still) == 7 - count, end  # the open ones named, the revealed not
    assert "My answers" in end
    assert not any("The end of the Lab" in i.value for i in revealed(6).info)


def test_a_returning_student_is_offered_their_first_chapter_not_yet_revealed_once():
    """A new session of an owner who revealed chapters 1 and 2 opens the Lab at chapter 1 (a link without a chapter):
    it offers chapter 3, whose button turns there; a link naming another chapter, or a second run, offers nothing."""
    from helpers.app import APP, PAGE
    from streamlit.testing.v1 import AppTest

    from ui import registry

    owner = "owner-back-in-the-lab"

    def session(**params) -> AppTest:
        at = AppTest.from_file(APP, default_timeout=300)
        at.session_state[registry.OWNER] = owner  # the browser's cookie
        at.query_params.update(params)
        at.switch_page(PAGE["lab"].file)
        return at.run()

    def offered(at: AppTest) -> bool:
        return any("Welcome back" in i.value for i in at.info)

    first = session()
    assert not offered(first)  # nothing revealed yet
    for number in (1, 2):
        first.button(key=f"sv_w_lab_skip_{number}").click().run()
        first.button(key="sv_w_lab_next").click().run()
    back = session()
    assert offered(back) and any("2 of 7 chapters" in i.value for i in back.info)
    back.button(key="sv_w_lab_resume").click().run()
    assert not back.exception and back.query_params["chapter"] == "3" and not offered(back)
    assert not offered(session(chapter="2"))  # a link's own chapter is kept as it is
