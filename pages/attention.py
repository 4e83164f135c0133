"""Attention: maps for one input, averages over the cube, and the effect of one bit flip; in compare
mode the second model's maps under the first's, on one colour scale."""

import streamlit as st

from sensviz import charts
from ui import cache, page, router

router.require_router()

PAGE = {  # read by ui.nav without running this file
    "title": "Attention",
    "section": "Explore",
    "icon": ":material/visibility:",
    "needs_model": True,
    "settings": {  # its own, under their URL parameters (ui.nav.Setting)
        "range": {"label": "Colour range", "widget": "segmented_control", "options": ["fitted", "fixed"]},
        "x": {"label": "Choose the input", "widget": "input"},
        "flip": {"label": "Also show the change when this bit flips", "widget": "selectbox"},  # options: the positions
        "weight": {"label": "Inputs", "widget": "selectbox"},  # options: the Hamming weights
    },
    "shows": ("attention maps for any input, averaged over the cube or by Hamming weight, and how one bit flip "
              "changes them"),
}

settings = page.Settings("attention")
selection = page.model()
models = page.shown()
n = selection.n
same_n = [m for m in models if m.n == n]  # the models that read the chosen input

fixed = settings.choice("range", format_func={"fitted": "fitted to the weights shown", "fixed": "fixed 0–1"}.get,
                        help="Fitted: the palest cell is the smallest weight shown, the darkest the largest, the same "
                        "for every panel. Fixed: 0 to 1, for comparing with other pages or inputs.") == "fixed"

st.subheader("One input")
bits = settings.choose_input(n)
x = "".join(map(str, bits))
NONE = -1  # no flip / all inputs (a selectbox shows a None option as unselected)
flip = settings.choice("flip", [NONE, *range(n)], variant=n,
                       fmt=lambda i: "none" if i == NONE else str(i),
                       format_func=lambda i: "no flip" if i == NONE else f"position {i}")
found = {m.label: cache.attention_tables(m.ref, bits, None if flip == NONE else flip) for m in same_n}
table = page.labelled({label: weights for label, (weights, _) in found.items()})
st.altair_chart(charts.attention_heatmaps(table, title=f"attention weights â_ij for x = {x}", bits=x, fixed=fixed))
page.download(table, "attention.csv")
for m in models:
    if m.n != n:
        st.caption(f"{m.markdown_label} is analysed at n={m.n}, so it does not read this input: see its average below.")
if flip != NONE:
    change = page.labelled({label: delta for label, (_, delta) in found.items()})
    st.altair_chart(charts.attention_heatmaps(change, value="change", title=f"change when bit {flip} of x flips",
                                              bits=x, fixed=fixed))
    page.download(change, "attention_change.csv", "Download the change (CSV)")

st.subheader("Averaged over inputs")
weight = settings.choice("weight", [NONE, *range(n + 1)], variant=n, fmt=lambda w: "all" if w == NONE else str(w),
                         format_func=lambda w: "all inputs" if w == NONE else f"Hamming weight {w}")
for m in models:
    if weight != NONE and weight > m.n:
        st.caption(f"{m.markdown_label} is analysed at n={m.n}: it has no inputs of Hamming weight {weight}.")
weighed = [m for m in models if weight == NONE or weight <= m.n]
averaged = page.each_model(weighed, "Averaging the attention of {label} over the cube…",
                           lambda ref, n, progress: cache.mean_attention_table(ref, n, None if weight == NONE else weight,
                                                                               progress=progress))
means = {}
for m in weighed:
    mean_table, average = averaged[m.label]
    if m is models[0] or m.n != n:
        page.exactness_note(average.exact, m.n, cache.DEFAULT_SAMPLES, 0)
    if weight != NONE and average.counts[weight] == 0:
        st.warning(f"No sampled input of {m.markdown_label} has Hamming weight {weight}.")
    else:
        means[m.label] = mean_table
if means:
    mean_table = page.labelled(means)
    st.altair_chart(charts.attention_heatmaps(mean_table, title="mean attention weights", fixed=fixed))
    page.download(mean_table, "mean_attention.csv")
