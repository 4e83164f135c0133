"""Attention: maps for one input, averages over the cube, and the effect of one bit flip."""

import streamlit as st

from sensviz import charts
from ui import cache, nav, page

nav.require_router()

selection = page.model()
ref, n = selection.ref, selection.n

st.subheader("One input")
bits = page.choose_input(n)
NONE = -1  # no flip / all inputs (a selectbox shows a None option as unselected)
flip = page.choice("flip", "Also show the change when this bit flips", [NONE, *range(n)], variant=n,
                   fmt=lambda i: "none" if i == NONE else str(i),
                   format_func=lambda i: "no flip" if i == NONE else f"position {i}")
table, change = cache.attention_tables(ref, bits, None if flip == NONE else flip)
st.altair_chart(charts.attention_heatmaps(table, title="attention weights â_ij"))
page.download(table, "attention.csv")
if change is not None:
    st.altair_chart(charts.attention_heatmaps(change, value="change", title=f"change when bit {flip} flips"))
    page.download(change, "attention_change.csv", "Download the change (CSV)")

st.subheader("Averaged over inputs")
weight = page.choice("weight", "Inputs", [NONE, *range(n + 1)], variant=n, fmt=lambda w: "all" if w == NONE else str(w),
                     format_func=lambda w: "all inputs" if w == NONE else f"Hamming weight {w}")
with page.progress_bar("Averaging attention over the cube…") as report:
    mean_table, average = cache.mean_attention_table(ref, n, None if weight == NONE else weight, progress=report)
page.exactness_note(average.exact, n, cache.DEFAULT_SAMPLES, 0)
if weight != NONE and average.counts[weight] == 0:
    st.warning(f"No sampled input has Hamming weight {weight}.")
else:
    st.altair_chart(charts.attention_heatmaps(mean_table, title="mean attention weights"))
    page.download(mean_table, "mean_attention.csv")
