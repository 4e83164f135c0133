"""Lab: the paper's story as guided chapters (`sensviz.lab`), one chapter per URL (`lab?chapter=3`)."""

import streamlit as st

from sensviz import lab
from ui import cache, model_refs, nav, page, registry, router, train_form, url_state

router.require_router()

PAGE = {  # read by ui.nav without running this file
    "title": "Lab",
    "heading": "Lab: why are sensitive functions hard for transformers?",
    "section": "Start",
    "icon": ":material/school:",
    "settings": ("chapter",),  # its own URL parameters
    "shows": ("the paper's story in six guided chapters for a class: each with its question, one-click setup, "
              "the few charts that make the point, a question to answer and the formula; an offline handout"),
}

NUMBERS = list(range(1, len(lab.CHAPTERS) + 1))
# chapters whose "try it yourself" is a training run: the page and the Train form's preset
# (no bare strings here: Streamlit would draw them)
TRY_IT = {
    2: ("train", "PARITY, n = 8 (converges in seconds)"),
    5: ("train", "PARITY, n = 8 (converges in seconds)"),
    6: ("train", "few examples: a random function from 64 of 256 inputs"),
}
# chapters whose "try it yourself" opens an analysis page with their models
EXPLORE = {1: "sensitivity", 3: "layernorm", 4: "landscape"}

number = page.choice("chapter", "Chapter", NUMBERS, widget=st.segmented_control,
                     format_func=lambda k: f"{k}. {lab.chapter(k).title}", selection_mode="single")
chapter = lab.chapter(number)
st.progress(number / len(NUMBERS), text=f"Chapter {number} of {len(NUMBERS)}")
st.header(f"{number}. {chapter.title}")
st.markdown(f"*{chapter.question}*")


def setup() -> None:
    """Load the chapter's zoo models: the first as the model, the second as the comparison."""
    refs = [model_refs.zoo_ref(name) for name in chapter.models]
    registry.select(refs[0], show=True)
    registry.set_compared(refs[1] if len(refs) > 1 else None)


selection = st.session_state.get(registry.CURRENT)
loaded = selection is not None and selection.ref.name == model_refs.zoo_ref(chapter.models[0]).name
cols = st.columns([2, 3])
cols[0].button("Load this chapter's models", on_click=setup, type="secondary" if loaded else "primary",
               key=registry.widget_key("lab", "setup", number),
               help="Selects them in the sidebar: every page then shows them (the first beside the second).")
cols[1].caption("Models: " + ", ".join(f"`{name}`" for name in chapter.models)
                + (" — loaded in the sidebar." if loaded else "."))

yours = ()
if number == 5 and selection is not None and selection.ref.kind != "zoo":
    yours = (selection.ref,)  # the student's own model joins the zoo's as a point
with st.spinner("Computing the chapter from its models…"):
    built = cache.lab_chapter(number, yours)

for fig in built.figures:
    st.subheader(fig.title)
    st.altair_chart(fig.chart)
    if fig.caption:
        st.caption(fig.caption)
    page.download(fig.data, f"lab_{number}_{fig.key}.csv", "Download the data behind this chart (CSV)")

st.markdown(f"**What to look for.** {built.look_for}")
st.info(f"**Question.** {chapter.ask}", icon=":material/help:")
with st.expander("Reveal the answer"):
    st.markdown(built.answer)
st.markdown("**The formula**")
for line in chapter.formula:
    st.latex(line)

st.markdown(f"**Try it yourself.** {chapter.try_it}")
if number in TRY_IT:
    target, preset = TRY_IT[number]
    if st.button(f"Open the Train page with the preset “{preset}”", key=registry.widget_key("lab", "try", number)):
        train_form.apply_preset(preset)
        st.switch_page(nav.spec(target).file)
elif number in EXPLORE and st.button(f"Open the {nav.spec(EXPLORE[number]).title} page with these models",
                                     key=registry.widget_key("lab", "try", number)):
    setup()
    st.switch_page(nav.spec(EXPLORE[number]).file)

st.divider()


def go(k: int) -> None:
    """Turn to chapter k (its widget and its URL parameter)."""
    st.session_state[registry.widget_key("lab", "chapter")] = k
    url_state.set_setting("lab", "chapter", k, NUMBERS[0])


cols = st.columns(3)
if number > 1:
    cols[0].button(f"← Chapter {number - 1}", help=lab.chapter(number - 1).title, on_click=go, args=(number - 1,),
                   key=registry.widget_key("lab", "previous"), width="stretch")
if number < len(NUMBERS):
    cols[2].button(f"Chapter {number + 1} →", help=lab.chapter(number + 1).title, on_click=go, args=(number + 1,),
                   key=registry.widget_key("lab", "next"), type="primary", width="stretch")
with cols[1].popover("Instructor handout"):
    st.markdown("The whole lab as one HTML page that opens offline (every chapter's text, charts and "
                "questions); also `sensviz lab --out lab.html [--answers]`.")
    answers = st.checkbox("with the answers", key=registry.widget_key("lab", "answers"))
    st.download_button("Download the handout", lambda: cache.lab_handout(answers),
                       file_name="sensviz-lab-answers.html" if answers else "sensviz-lab.html", mime="text/html",
                       key=registry.widget_key("lab", "handout"))
