"""Home: what the explorer is for, where to start, and every page (from the one page list)."""

import streamlit as st

from sensviz.text import escape_markdown
from ui import nav, registry, router

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
rows = "\n".join(f"| **{p.title}** | {p.shows} |" for p in nav.PAGES if p.url_path)
st.markdown(f"| page | shows |\n|---|---|\n{rows}")
selected = registry.selected()
if selected is not None:
    st.success(f"Selected: **{escape_markdown(selected.label)}** — open a page on the left to look at it.")
