"""Lab: the paper's story as guided chapters (`sensviz.lab`), one chapter per URL (`lab?chapter=3&predict=...`).

Each chapter asks, then shows, then explains: its question and the student's prediction first (kept in
the session and the URL), the charts blind (the asked-for quantity left out, or no chart) until the
reveal, then the charts and the answer together. The reveal (or Skip) locks the prediction on the server
under the browser's owner id (`ui.predictions`) at the moment anything that bears the answer is shown:
the first answer revealed is the one scored, and no link or later choice changes it. A `predict=` link
only pre-selects an option: nothing is shown until its owner reveals. "My answers" is one link with
every locked chapter, signed by the server (`answers=`); whoever opens it sees an answer, and whether it
was right, only for the chapters they revealed themselves (`shown_to`), or every one as a class's instructor.
The try-it control redraws the chapter's charts from the data shipped beside the zoo (`sensviz lab-data`).
"""

import re
from urllib.parse import urlsplit

import streamlit as st

from sensviz import lab
from sensviz.lab import upper_first
from sensviz.text import escape_markdown
from server import services
from ui import cache, classroom, model_refs, nav, owner_id, page, predictions, registry, router, train_form

router.require_router()

PAGE = {  # read by ui.nav without running this file
    "title": "Lab",
    "heading": "Lab: sensitive functions",
    "section": "Start",
    "icon": ":material/school:",
    "settings": {  # its own, under their URL parameters (ui.nav.Setting); options: the chapters' own
        "chapter": {"label": "Chapter", "widget": "segmented_control"},
        "predict": {"label": "Your prediction", "widget": "page"},  # the chapter's options, by their slug
        "try": {"label": "Try it", "widget": "segmented_control"},  # the chapter's control
        "answers": {"label": "My answers", "widget": "page"},  # a signed token of every locked chapter
    },
    "shows": ("the paper's story in seven guided chapters for a class: each with its question, one-click setup, "
              "the few charts that make the point, a question to answer and the formula; an offline handout"),
}

settings = page.Settings("lab")
NUMBERS = list(range(1, len(lab.CHAPTERS) + 1))
SKIP = "skip"
LOCK_RULE = ("Every chart that shows the answer stays blind until you reveal it, and revealing locks your "
             "prediction: change it freely until then; the first answer revealed is the one scored.")
# chapters whose "try it yourself" is a training run: the page and the Train form's preset
# (no bare strings here: Streamlit would draw them)
TRY_IT = {
    2: ("train", "PARITY, n = 8 (converges in seconds)"),
    5: ("train", "PARITY, n = 8 (converges in seconds)"),
    6: ("train", "few examples: a random function from 64 of 256 inputs"),
}
# chapters whose "try it yourself" opens an analysis page with their models
EXPLORE = {1: "sensitivity", 3: "layernorm", 4: "landscape", 7: "init"}
# text Streamlit draws below 4.5:1 (tests/browser/test_lab_browser.py measures every text): captions (its translucent grey,
# 3.7:1), a locked prediction's disabled radio and buttons (2.3:1) in a dark grey, #444: 9.7:1 against white; the
# selected chapter and try-it option (its red on pink, 4.5:1 less a hair) in a dark red, #8c1d2c: 7.8:1 on that pink
INK = ('<style>[data-testid="stCaptionContainer"], [data-testid="stCaptionContainer"] p, '
       '[data-testid="stRadio"] p, button:disabled p { color: #444 !important; } '
       '[data-testid="stButtonGroup"] button[aria-checked="true"] p { color: #8c1d2c !important; }</style>')
# scrolls the app to its top (a page turned): Streamlit keeps the scroll position across reruns
TO_TOP = """<script>
for (const sel of ['[data-testid="stMain"]', '[data-testid="stAppViewContainer"]', 'section.main']) {
  const el = document.querySelector(sel); if (el) { el.scrollTop = 0; }
}
window.scrollTo(0, 0);
</script>"""


def server_address() -> str | None:
    """The address this page was reached at, up to the app's own path (the handout's links), else None."""
    parts = urlsplit(st.context.url or "")
    if not parts.scheme or not parts.netloc:
        return None
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{path[: -len('/lab')] if path.endswith('/lab') else path}"


def slug(option: str) -> str:
    """An option as it stands in the URL: `predict=all-n-of-them`."""
    return re.sub(r"[^a-z0-9]+", "-", option.lower()).strip("-")


def turn(k: int) -> None:
    """Turn to chapter k at its top, with its own prediction and its control at its default."""
    settings.set_value("chapter", k, NUMBERS[0])
    to = lab.chapter(k)
    settings.write("try", to.control.default, to.control.default)
    st.session_state[registry.LAB_TOP] = True


SHORT = {1: "Sensitivity", 2: "Training", 3: "LayerNorm", 4: "Minima", 5: "Length", 6: "Few data", 7: "At init"}
# the chapters' tabs on one row in a 1024 px window (564 px of column beside the sidebar): short names, 8 px padding
TABS = f'<style>.st-key-{settings.key("chapter")} button {{ padding-left: 8px; padding-right: 8px; }}</style>'
number = settings.choice("chapter", NUMBERS, selection_mode="single", format_func=lambda k: f"{k} {SHORT[k]}",
                         label_visibility="collapsed", on_change=lambda: st.session_state.__setitem__(registry.LAB_TOP, True))
chapter = lab.chapter(number)
if st.session_state.pop(registry.LAB_TOP, False):
    st.html(TO_TOP, unsafe_allow_javascript=True)
st.html(INK + TABS)


ANSWERS_RULE = ("A chapter's answer, and whether it was right, shows only for the chapters you have revealed "
                "yourself (a class's instructor sees every one): a classmate's link gives away no answer.")


def shown_to(found: dict[int, dict], revealed: set[int], instructor: bool) -> set[int]:
    """The chapters of an answers link whose answer and verdict a viewer sees (`ANSWERS_RULE`): those the viewer
    revealed, or all for an instructor."""
    return set(found) if instructor else set(found) & revealed


def shown_time(revealed: str) -> str:
    """A lock's time (ISO, UTC) as the page shows it: to the minute, "2026-01-02 03:04"."""
    return revealed[:16].replace("T", " ")


def answers_table(found: dict[int, dict], shown: set[int]) -> None:
    """Locked answers as a table (plain text cells): chapter, the answer, whether it was right, when it was revealed;
    a chapter not in `shown` with its answer and verdict left out."""
    rows = []
    for k, entry in sorted(found.items()):
        if k not in NUMBERS:
            continue
        to = lab.chapter(k)
        correct = cache.lab_chapter(k, to.control.default).correct
        hidden = k not in shown
        rows.append({"chapter": f"{k} {SHORT[k]}",
                     "answer": "(reveal this chapter to see it)" if hidden else entry["answer"],
                     "right?": "—" if hidden or entry["answer"] == SKIP else "yes" if entry["answer"] == correct else "no",
                     "revealed (UTC)": shown_time(entry["revealed"])})
    st.dataframe(rows, hide_index=True)


owner = owner_id.owner()
locks = predictions.locked(owner)  # the revealed chapters: their first answer, kept on the server
code = registry.current_class()
joined = services.class_store().view(code, owner) if code else None
instructor = joined is not None and joined.is_instructor(owner)

# a returning student (a new session: a new tab, the home address again) at chapter 1: their first open chapter, once
still_open = [k for k in NUMBERS if k not in locks]  # the chapters not yet revealed
first = registry.first_time(registry.LAB_RESUME_ASKED)
if first and "chapter" not in st.query_params and number == 1 and locks and still_open and still_open[0] != 1:
    resume = still_open[0]
    cols = st.columns([3, 1], vertical_alignment="center")
    cols[0].info(f"Welcome back: you have revealed {len(locks)} of {len(NUMBERS)} chapters.",
                 icon=":material/bookmark:")
    cols[1].button(f"Continue at chapter {resume}", on_click=turn, args=(resume,), type="primary",
                   key=settings.key("resume"), width="stretch")
token = settings.read("answers", None, str)  # a "my answers" link, shown to whoever opens it
if token is not None:
    found = predictions.read_token(token, services.server_secret())
    if found is None:
        st.warning("This answers link was not signed by this server, or it was changed: its answers are not shown.")
    else:
        st.markdown("**Answers in this link**, signed by this server: each chapter's prediction as locked when its "
                    f"answer was revealed. {ANSWERS_RULE}")
        answers_table(found, shown_to(found, set(locks), instructor))
tools_at = st.container()  # "My answers" and the handout, under the chapters (filled at the end)

# ---------------------------------------------------------------- ask

made = st.session_state.setdefault(registry.LAB_PREDICTIONS, {})
made.update(classroom.my_votes())  # a class member's ticks, kept by the class (its tally): after a reload too
by_slug = {slug(o): o for o in (*chapter.predict.options, SKIP)}
if not settings.kept("predict"):  # the first run: a link's prediction
    def parse(raw: str) -> str:
        if raw not in by_slug:
            raise ValueError(f"predict is one of {', '.join(by_slug)} in chapter {number}")
        return by_slug[raw]

    linked = settings.read("predict", None, parse)
    if linked is not None and number in locks and linked != locks[number]["answer"]:
        st.warning(f"This link's prediction “{linked}” was not used: your answer to chapter {number} was locked when "
                   "you revealed it.")
    elif linked is not None:
        made[number] = linked
lock = locks.get(number)
if lock is not None:
    made[number] = lock["answer"]  # the locked answer, whatever was chosen since
predicted = made.get(number)
settings.write("predict", predicted, None, slug)

st.subheader(f"{number}. {chapter.title}")
definitions = "\n\n".join(chapter.definitions())
st.markdown(f"**{chapter.question}**", help=definitions)
key = settings.key("predict", number)
st.session_state[key] = predicted if predicted in chapter.predict.options else None


def choose() -> None:
    made[number] = st.session_state[key]
    classroom.vote(number, made[number])  # counted in the class's tally (the instructor sees counts only)


def reveal(answer: str) -> None:
    """Lock `answer` on the server (the first lock stays): from now on the charts and the answer are shown."""
    made[number] = answer
    predictions.lock(owner, number, answer)


def skip() -> None:
    classroom.vote(number, SKIP)
    reveal(SKIP)


held = lock is None and classroom.reveal_held(number)
cols = st.columns([5, 1], vertical_alignment="bottom")
cols[0].radio(f"Your prediction: {chapter.predict.prompt}", chapter.predict.options, key=key, on_change=choose,
              horizontal=True, help=definitions, disabled=lock is not None)
cols[1].button("Skip", on_click=skip, key=settings.key("skip", number), disabled=lock is not None or held,
               help="See the charts and the answer without predicting: counted as skipped, and locked")
if lock is not None:
    locked = ("Your prediction was a skip, locked" if lock["answer"] == "skip" else
              f"Your answer “{escape_markdown(lock['answer'])}” was locked")
    st.caption(f"{locked} when you revealed the answer ({shown_time(lock['revealed'])} UTC): the first answer is "
               "the one scored.")
else:
    st.caption(LOCK_RULE)

# the words and symbols the charts and formulas use, visible before them (a projector or a tablet shows no hover)
st.markdown("**Words and symbols of this chapter**\n\n"
            + "\n".join(f"- {escape_markdown(line)}" for line in (*chapter.definitions(), *chapter.symbols)))

# ---------------------------------------------------------------- show

selection = st.session_state.get(registry.CURRENT)
yours = ()
if number == 5 and selection is not None and selection.ref.kind != "zoo":
    yours = (selection.ref,)  # the student's own model joins the zoo's as a point
status = st.empty()
figures_at = st.container()  # the figures come first; the try-it control under them redraws them


def progress(line: str) -> None:
    status.info(f"Measuring: {line}", icon=":material/hourglass_top:")


control = chapter.control
choice = settings.choice("try", list(control.options), control.default, label=f"Try it: {control.label}",
                         format_func=control.fmt, variant=number, selection_mode="single")
built = cache.lab_chapter(number, choice, yours, progress=progress)
status.empty()
if yours:
    st.caption(f"Your model {escape_markdown(selection.ref.label)} is a black mark at its n.")
figures = list(built.figures)
# each figure's chart as drawn, converted once for every session (cache.vega_lite); before the reveal its blind one
specs = list(cache.lab_specs(number, choice, yours, blind=lock is None, progress=progress))
if number == 2 and lock is not None and registry.followed_job():  # the student's own PARITY run, if n = 8
    records = services.job_manager().records(registry.followed_job())
    if records and len(records[-1].get("degree_profile") or ()) == built.numbers["n"] + 1:
        figures[1] = cache.lab_your_run(choice, records)
        specs[1] = cache.vega_lite(figures[1].chart)  # it grows: not kept

with figures_at:
    for fig, spec in zip(figures, specs, strict=True):
        st.markdown(f"**{fig.blind_title or fig.title}**" if lock is None else f"**{fig.title}**")
        if lock is None:
            if spec is None:
                st.info("This chart shows the answer: it appears when you reveal it.", icon=":material/visibility_off:")
                continue
            st.vega_lite_chart(spec, theme=None)  # the charts carry their own readable text (charts.readable)
            st.caption("The quantity the question asks about is left out until you reveal the answer.")
            continue
        st.vega_lite_chart(spec, theme=None)
        if fig.caption or fig.hover:
            st.caption(" ".join(filter(None, (fig.caption, fig.hover))))
        page.download(fig.data, f"lab_{number}_{fig.key}.csv", "Download the data behind this chart (CSV)")

# ---------------------------------------------------------------- explain

if lock is not None:
    asked = built if choice == control.default else cache.lab_chapter(number, control.default, yours)  # the question's setting
    scored = lock["answer"]
    if scored == asked.correct:
        st.success(f"**Answer: {asked.correct}.** Your prediction was right.", icon=":material/check_circle:")
    elif scored == SKIP:
        st.info(f"**Answer: {asked.correct}.** You skipped the prediction.", icon=":material/help:")
    else:  # not dressed as a right one: the surprise is the lesson
        st.warning(f"**Answer: {asked.correct}.** You predicted “{escape_markdown(scored)}”.",
                   icon=":material/cancel:")
    st.markdown(f"**What to look for** (at the question's setting: {control.fmt(control.default)}). {asked.look_for}")
    st.markdown(asked.answer)
    st.markdown(f"**The rule that decides the answer.** {upper_first(chapter.rule)}")
    for line in chapter.theorem:
        st.latex(line)
    if chapter.theorem_symbols:
        st.markdown("where " + "; ".join(escape_markdown(line) for line in chapter.theorem_symbols) + ".")
    if choice != control.default:
        st.markdown(f"**What changes here.** {lab.what_changes(chapter, asked, built, choice)}")
else:
    st.button("Reveal the answer", key=settings.key("reveal", number), disabled=predicted is None or held,
              on_click=reveal, args=(predicted,), type="primary",
              help="Predict or skip first" if predicted is None else
              "Your instructor reveals this chapter's answer to the class together" if held else
              "The full charts, what to look for, and the answer. It locks your prediction: the first answer "
              "revealed is the one scored.")
    if held:
        st.caption("Your instructor will reveal this answer to the whole class: keep your prediction until then.")

if chapter.formula:
    st.markdown("**The formula**")
    for line in chapter.formula:
        st.latex(line)


def setup() -> None:
    """Load the chapter's zoo models: the first as the model, the second as the comparison."""
    refs = [model_refs.zoo_ref(name) for name in chapter.models]
    registry.select(refs[0], show=True)
    registry.set_compared(refs[1] if len(refs) > 1 else None)


if lock is None:  # the other pages show this chapter's models and numbers whole: a path to the answer
    st.caption("**Try it yourself** appears once you reveal the answer: the pages its links open would show it.")
else:
    st.markdown(f"**Try it yourself.** {chapter.try_it}")
    loaded = selection is not None and selection.ref.name == model_refs.zoo_ref(chapter.models[0]).name
    cols = st.columns([2, 3])
    cols[0].button("Load this chapter's models", on_click=setup, type="secondary" if loaded else "primary",
                   key=settings.key("setup", number),
                   help="Selects them in the sidebar: every page then shows them (the first beside the second).")
    cols[1].caption("Models: " + ", ".join(f"`{name}`" for name in chapter.models)
                    + (" — loaded in the sidebar." if loaded else "."))
    if number in TRY_IT:
        target, preset = TRY_IT[number]
        if st.button(f"Open the Train page with the preset “{preset}”", key=settings.key("train", number)):
            train_form.apply_preset(preset)
            st.switch_page(nav.spec(target).file)
    elif number in EXPLORE and st.button(f"Open the {nav.spec(EXPLORE[number]).title} page with these models",
                                         key=settings.key("open", number)):
        setup()
        st.switch_page(nav.spec(EXPLORE[number]).file)

st.divider()
cols = st.columns(3)
if number > 1:
    cols[0].button(f"← Chapter {number - 1}", help=lab.chapter(number - 1).title, on_click=turn, args=(number - 1,),
                   key=settings.key("previous"), width="stretch")
if number < len(NUMBERS):
    cols[2].button(f"Chapter {number + 1} →", help=lab.chapter(number + 1).title, on_click=turn, args=(number + 1,),
                   key=settings.key("next"), type="primary", width="stretch")
else:
    st.info(f"**The end of the Lab.** You revealed {len(locks)} of {len(NUMBERS)} chapters"
            + (f"; still open: {', '.join(f'chapter {k}' for k in still_open)}" if still_open else "")
            + ". To hand in your answers, open **My answers** above the chapter and send its link: it lists each "
            "chapter's prediction, whether it was right and when you revealed it, signed by this server.",
            icon=":material/flag:")
tools = tools_at.columns(3)
with tools[0].popover("My answers", width="stretch"):
    if not locks:
        st.markdown("No chapter revealed yet: a chapter's prediction is locked, and listed here, when you reveal its answer.")
    else:
        answers_table(locks, set(locks))
        link = f"lab?answers={predictions.answers_token(locks, services.server_secret())}"
        st.markdown("One link with these answers and their times, signed by this server (an instructor can check it "
                    f"is unchanged): [my answers]({link})")
        st.code(f"{(st.context.url or '').split('?')[0].rsplit('/', 1)[0]}/{link}", language=None, wrap_lines=True)
with tools[1].popover("Handout (student)", width="stretch"):
    st.markdown("The whole lab as one HTML page to print, offline: questions, words, predictions to tick and boxes to "
                "answer in front; the charts and the answers in a back section.")
    address = server_address()
    st.download_button("Download the student handout", lambda: cache.lab_handout(False, address),
                       file_name="sensviz-lab.html", mime="text/html", key=settings.key("handout"))
    if instructor:  # the copy with answers: the class's instructor only
        st.download_button("Download the instructor's copy (with the answers)", lambda: cache.lab_handout(True, address),
                           file_name="sensviz-lab-answers.html", mime="text/html", key=settings.key("handout_answers"))
