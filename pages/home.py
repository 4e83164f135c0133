"""Home: what the explorer is for, where to start, and every page (from the one page list)."""

import streamlit as st

from sensviz.text import escape_markdown, quoted
from server.classes import ClassRefused
from ui import classroom, nav, owner_id, registry, router

router.require_router()

PAGE = {  # read by ui.nav without running this file
    "title": "Home",
    "heading": "sensviz: why sensitive functions are hard for transformers",
    "section": "Start",
    "icon": ":material/home:",
    "shows": "what the explorer is for and where to start",
}

st.markdown(
    "Explore the loss-landscape theory of Hahn & Rofin, *Why are Sensitive Functions Hard for Transformers?* "
    "(ACL 2024) on real models. Transformers whose output is **sensitive** to many input bits can only "
    "represent such functions with large parameters or large **LayerNorm blowup**, which puts them in "
    "**sharp**, isolated minima — why PARITY is hard and FIRST, MEAN and MAJORITY are easy."
)
st.markdown(
    "**Start here:** pick a model in the sidebar — a pretrained checkpoint, your own `.safetensors` upload "
    "(sensviz checkpoints or state dicts saved by the authors' code), or a model you train on the **Train** page. "
    "Every view is a link: the sidebar's **Copy link** button copies one that opens the same model and settings "
    "in any browser. Models you train or upload are kept on the server for you."
)

def create_class() -> None:
    """Create a class: its name -> the class link for the students (this browser is its instructor; an
    instructor link for another browser is made on the Class page, once, when asked for)."""
    with st.expander("Create a class", icon=":material/groups:", expanded=registry.CLASS_CREATED in st.session_state):
        st.caption("For a lab: the students open the class link, pick a display name, and see each other's models; the "
                   "length-scaling assignment deals the class the runs of the paper's experiment, one at a time each.")
        created = st.session_state.get(registry.CLASS_CREATED)
        if created:  # made: its link, not the form again (a second click would be refused: the name is taken)
            st.markdown("**The class link** (for the students):")
            classroom.show_class_link(created["code"])
            st.caption("You are the class's instructor in this browser. For another browser of yours or a co-instructor, "
                       "make a one-time instructor link on the Class page.")
            if st.button("Create another class", key=registry.CLASS_CREATE_ANOTHER):
                st.session_state[registry.CLASS_CREATED] = {}  # the form, in the expander left open
                st.rerun()
            return
        name = st.text_input("Class name", key=registry.CLASS_NAME, max_chars=80)
        if st.button("Create the class", key=registry.CLASS_CREATE):
            try:
                made = classroom.store().create(name or "", owner_id.owner(), owner_id.network_address())
            except (ValueError, ClassRefused) as err:
                st.error(f"No class created: {quoted(err, 200)}")
            else:
                st.session_state[registry.CLASS_CREATED] = {"code": made.code}
                registry.enter_class(made.code)
                st.rerun()  # the frame, drawn before this page, puts the class in the URL and the sidebar


create_class()  # near the top: an instructor opening Home finds it above the list of pages
rows = "\n".join(f"| **{p.title}** | {p.shows} |" for p in nav.PAGES if p.url_path)
st.markdown(f"| page | shows |\n|---|---|\n{rows}")
selected = registry.selected()
if selected is not None:
    st.success(f"Selected: **{escape_markdown(selected.label)}** — open a page on the left to look at it.")
