"""Attention: maps for one input, averages over the cube, and the effect of one bit flip."""

import streamlit as st

from ui import charts, page, state

selection = page.setup("Attention", icon="👁️")
if selection is None:
    st.stop()
ref, ck, n = selection.ref, selection.ck, selection.n

st.subheader("One input")
bits = page.choose_input(n, "sv_w_att")
flip = st.selectbox("Also show the change when this bit flips", [None, *range(n)], key=f"sv_w_att_flip_{n}",
                    format_func=lambda i: "no flip" if i is None else f"position {i}")
table, change = state.attention_tables(ref, ck, bits, flip)
st.altair_chart(charts.attention_heatmaps(table, title="attention weights â_ij"))
page.download(table, "attention.csv")
if change is not None:
    st.altair_chart(charts.attention_heatmaps(change, value="change", title=f"change when bit {flip} flips"))
    page.download(change, "attention_change.csv", "Download the change (CSV)")

st.subheader("Averaged over inputs")
weight = st.selectbox("Inputs", [None, *range(n + 1)], key=f"sv_w_att_weight_{n}",
                      format_func=lambda w: "all inputs" if w is None else f"Hamming weight {w}")
with page.progress_bar("Averaging attention over the cube…") as report:
    mean_table, average = state.mean_attention_table(ref, ck, n, weight, progress=report)
page.exactness_note(average.exact, n, state.DEFAULT_SAMPLES, 0)
if weight is not None and average.counts[weight] == 0:
    st.warning(f"No sampled input has Hamming weight {weight}.")
else:
    st.altair_chart(charts.attention_heatmaps(mean_table, title="mean attention weights"))
    page.download(mean_table, "mean_attention.csv")
