"""Before training: what random initialisations of an architecture compute on the cube, at three init
scales, beside the target, with the claim that they compute low-sensitivity functions and its verdict."""

import streamlit as st

from sensviz import charts, init_charts, init_claim
from sensviz.init_study import INIT_SCALES
from ui import cache, page, router

router.require_router()

PAGE = {  # read by ui.nav without running this file
    "title": "Before training",
    "section": "Explore",
    "icon": ":material/casino:",
    "settings": {  # its own, under their URL parameters (ui.nav.Setting)
        "arch": {"label": "Architecture", "widget": "segmented_control", "options": ["encoder", "formal"]},
        "d": {"label": "Width d", "widget": "selectbox", "options": [8, 16, 32, 64], "default": 32},
        "layers": {"label": "Layers", "widget": "selectbox", "options": [1, 2, 3, 4], "default": 2},
        "length": {"label": "Input length n", "widget": "select_slider", "options": [4, 5, 6, 7, 8, 9, 10],
                   "default": 8},
        "inits": {"label": "Initialisations", "widget": "selectbox", "options": [32, 64, 128, 256], "default": 64},
        "target": {"label": "Target", "widget": "selectbox", "options": ["parity", "majority", "first"]},
    },
    "shows": ("what random initialisations compute on the cube: the spread of as_n, the Fourier degree profile and "
              "attention entropy at three init scales, beside the target, and the low-sensitivity claim's verdict"),
}

settings = page.Settings("init")
st.markdown("Is PARITY hard because training cannot find it, or because the architecture starts far from it? "
            "Each initialisation's output T(x) on every input is read as the Boolean function "
            "f(x) = sign(T(x) − median T): its sensitivity does not depend on the output's scale.")
left, middle, right = st.columns(3)
arch = settings.choice("arch", where=left)
d_model = settings.choice("d", where=left)
n_layers = settings.choice("layers", where=middle)
n = settings.choice("length", where=middle)
inits = settings.choice("inits", where=right)
task = settings.choice("target", where=right, format_func=str.upper)

with st.spinner(f"Evaluating {inits} initialisations at {len(INIT_SCALES)} init scales on all {2**n} inputs…"):
    found = cache.init_study_tables(arch, d_model, n_layers, n, inits, task)

st.subheader("Average sensitivity of each initialisation")
st.altair_chart(init_charts.distribution_chart(found["table"], n, found["target"]))
page.download(found["table"], "init_study.csv")
st.subheader("Fourier degree profile: the mean over initialisations and the target")
st.altair_chart(charts.degree_profiles(found["profiles"]))
page.download(found["profiles"], "init_degree_profiles.csv", "Download the profiles (CSV)")

st.subheader("The claim")
claim = found["claim"]
st.markdown(f"*{init_claim.CLAIM}*")
st.metric("verdict", claim["verdict"])
st.caption(f"Rule: {init_claim.RULE}.")
st.dataframe(found["cells"], hide_index=True)
